"""A load balancer whose health probe fails on every backend: a 404 is the probe's own configuration; a 5xx is the
application failing its health check (its evidence says why)."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

GW = "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Network/applicationGateways/agw-prod"


def _azure(log: str) -> dict:
    return {"backendAddressPools": [{
        "backendAddressPool": {"id": f"{GW}/backendAddressPools/bp-telematics"},
        "backendHttpSettingsCollection": [{
            "backendHttpSettings": {"id": f"{GW}/backendHttpSettingsCollection/bs-telematics"},
            "servers": [{"address": "10.40.8.100", "health": "Unhealthy", "healthProbeLog": log}],
        }],
    }]}  # fmt: skip


def _aws(state: str, codes: str) -> dict:
    return {"TargetHealthDescriptions": [
        {"Target": {"Id": f"i-0abc{i}", "Port": 8080}, "HealthCheckPort": "8080",
         "TargetHealth": {"State": state, "Reason": "Target.ResponseCodeMismatch",
                          "Description": f"Health checks failed with these codes: [{codes}]"}}
        for i in range(3)
    ]}  # fmt: skip


def test_a_probe_that_gets_404_from_every_backend_is_its_configuration(tmp_path: Path) -> None:
    (tmp_path / "health.json").write_text(json.dumps(_azure("Received invalid status code: 404 in the backend "
                                                            "server's HTTP response.")))  # fmt: skip
    d = investigate(load_bundle(tmp_path), "why does every request get a 502?")
    assert d.category is Category.CONFIGURATION_ERROR and "404" in d.root_cause, d.root_cause
    (tmp_path / "health.json").write_text(json.dumps(_aws("unhealthy", "404")))
    d = investigate(load_bundle(tmp_path), "why does every request get a 502?")
    assert d.category is Category.CONFIGURATION_ERROR, d.root_cause


def test_a_probe_that_gets_5xx_is_the_application_and_a_partly_healthy_pool_is_no_outage(tmp_path: Path) -> None:
    (tmp_path / "health.json").write_text(json.dumps(_aws("unhealthy", "503")))
    d = investigate(load_bundle(tmp_path), "why does every request get a 502?")
    assert d.category is Category.UNKNOWN and d.missing, d.root_cause
    doc = _aws("unhealthy", "404")
    doc["TargetHealthDescriptions"][0]["TargetHealth"] = {"State": "healthy"}
    (tmp_path / "health.json").write_text(json.dumps(doc))
    d = investigate(load_bundle(tmp_path), None)
    assert d.category is not Category.CONFIGURATION_ERROR, d.root_cause
