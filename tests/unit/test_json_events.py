"""JSON of no known shape that still holds dated sentences (a cloud CLI's `--query` projection, a script's report)
is read as a log, and a command pasted above the JSON it printed is read as that JSON."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

PROJECTION = {
    "running": 3,
    "desired": 6,
    "deployments": [["arn:aws:ecs:eu-west-1:111122223333:task-definition/quotes-api:143", "IN_PROGRESS", 0, 14]],
    "events": [
        [
            "2026-06-02T12:41:09.118000+02:00",
            "(service quotes-api) was unable to place a task. Reason: ResourceInitializationError: unable to pull "
            "secrets or registry auth: ParameterNotFound: /prod/quotes-api/partner_api_token",
        ],
        ["2026-06-02T12:20:11.870000+02:00", "(service quotes-api) has reached a steady state."],
    ],
}
COMMAND = "$ aws ecs describe-services --cluster web --services quotes-api --query 'services[0].{events:events}'\n"


def test_a_query_projection_is_read_as_the_log_of_what_was_asked(tmp_path: Path) -> None:
    (tmp_path / "ecs.txt").write_text(COMMAND + json.dumps(PROJECTION, indent=2))
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.errors
    (log,) = ev.kind("log")
    assert log.object == "quotes-api"
    records = log.data["records"]
    assert [r["level"] for r in records] == ["info", "error"]  # oldest first; the failure is an error
    assert "ParameterNotFound" in records[1]["msg"]


def test_the_missing_parameter_is_named_as_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "ecs.txt").write_text(COMMAND + json.dumps(PROJECTION, indent=2))
    diagnosis = investigate(load_bundle(tmp_path), "why are tasks not starting?")
    assert diagnosis.category is Category.CONFIGURATION_ERROR
    assert "partner_api_token" in diagnosis.root_cause


def test_json_without_dated_sentences_stays_ignored(tmp_path: Path) -> None:
    (tmp_path / "export.json").write_text(json.dumps({"items": [{"id": 1, "created": "2026-06-02T10:00:00Z"}]}))
    ev = load_bundle(tmp_path)
    assert not ev.kind("log") and ev.ignored


def test_truncated_json_under_its_command_is_a_file_error(tmp_path: Path) -> None:
    (tmp_path / "ecs.txt").write_text(COMMAND + json.dumps(PROJECTION, indent=2)[:-40])
    ev = load_bundle(tmp_path)
    assert ev.errors and "malformed JSON" in ev.errors[0]["error"]


GET_MANY = """$ kubectl -n tariffs get deploy,pods -o wide
NAME                          READY   UP-TO-DATE   AVAILABLE   AGE
deployment.apps/tariff-sync   3/3     3            3           322d

NAME                               READY   STATUS        RESTARTS   AGE
pod/tariff-sync-6b8f7c9d54-9dkwp   1/1     Running       0          9m1s
pod/tariff-cache-1                 1/1     Terminating   0          41d
"""


def test_kubectl_get_of_several_kinds_reads_each_table_with_its_own_header(tmp_path: Path) -> None:
    (tmp_path / "get.txt").write_text(GET_MANY)
    ev = load_bundle(tmp_path)
    assert [d.object for d in ev.kind("k8s/Deployment")] == ["Deployment/tariffs/tariff-sync"]
    pods = {p.object: p.data for p in ev.kind("k8s/Pod")}
    assert set(pods) == {"Pod/tariffs/tariff-sync-6b8f7c9d54-9dkwp", "Pod/tariffs/tariff-cache-1"}
    ready = pods["Pod/tariffs/tariff-sync-6b8f7c9d54-9dkwp"]["status"]["conditions"][0]["status"]
    terminating = pods["Pod/tariffs/tariff-cache-1"]
    assert ready == "True" and terminating["status"]["conditions"][0]["status"] == "False"
