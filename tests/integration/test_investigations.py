"""Investigations over REST on real parts: an API process on a real Redis and SQLite (or PostgreSQL).

POST /v1/investigations with a JSON alert and evidence items, or a multipart bundle archive; the Alertmanager
receiver's grouping (one investigation per group and tenant) and resolution; a bundle too large (413) and a bad
archive (4xx). Investigations run no tool; a diagnose
request's tools (and the ones the investigation adds) run on one cpu worker.

The API process also loads one deterministic test analyzer (tests/integration/analyzer_plugin/sitecustomize.py)
beside the real ones, so the diagnose-request test can watch an investigation grow its live plan.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness import ROOT, RedisServer, Service, free_port, wait_until

pytestmark = pytest.mark.integration

ANALYZER_PLUGIN = Path(__file__).resolve().parent / "analyzer_plugin"
MAX_BUNDLE = 300_000


@pytest.fixture(scope="module")
def service(
    redis_server: RedisServer, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    svc = Service(
        tmp_path_factory.mktemp("inv"),
        redis_server.url,
        database_url,
        OPSGRAPH_MAX_BUNDLE_BYTES=str(MAX_BUNDLE),
        PYTHONPATH=os.pathsep.join([str(ANALYZER_PLUGIN), str(ROOT)]),
    )
    svc.redis.flushdb()
    (svc.workdir / "logs").mkdir()
    svc.start_api()
    svc.start_worker("cpu", "cpu-inv")  # only the diagnose request runs tools
    yield svc
    svc.stop()


def oom_pod(name: str = "checkout-7d9f5c-x2kq") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "checkout"}},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:2.3.1"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "restartCount": 6,
                    "ready": False,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
        },
    }


def alert(name: str = "KubePodCrashLooping", status: str = "firing", pod: str = "checkout-7d9f5c-x2kq") -> dict:
    return {
        "status": status,
        "labels": {"alertname": name, "namespace": "shop", "pod": pod, "severity": "warning"},
        "annotations": {"summary": f"Pod shop/{pod} is crash looping"},
        "startsAt": "2026-11-23T18:01:00.000Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-23T18:30:00.000Z",
        "generatorURL": "http://prometheus.monitoring:9090/graph?g0.expr=...",
        "fingerprint": "5f2c7a8e9b1d3c46",
    }


def webhook(group: str, status: str = "firing", alerts: list[dict] | None = None) -> dict:
    """An Alertmanager webhook notification (version 4), as Alertmanager sends it."""
    alerts = alerts or [alert(status=status)]
    return {
        "version": "4",
        "groupKey": f'{{}}/{{severity="warning"}}:{{alertname="{group}"}}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "opsgraph",
        "groupLabels": {"alertname": group},
        "commonLabels": {"alertname": group, "severity": "warning"},
        "commonAnnotations": {"summary": f"{group} in shop"},
        "externalURL": "http://alertmanager.monitoring:9093",
        "alerts": alerts,
    }


def kubectl_pods(*pods: dict) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods), "metadata": {}}).encode()


def tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def assert_oom_diagnosis(task: dict) -> dict:
    assert task["status"] == "succeeded", task
    assert task["source"] == "investigation"
    answer = task["answer"]
    d = answer["diagnosis"]
    assert d["category"] == "resource_exhaustion"
    assert "checkout-7d9f5c-x2kq" in d["root_cause"] and "oomkilled" in d["root_cause"].lower()
    assert answer["headline"].startswith("resource_exhaustion")
    assert d["root_cause"] in answer["text"]
    assert all(ref["item"] for claim in d["evidence"] for ref in claim["refs"])
    return d


def test_json_alert_and_evidence_items_give_a_diagnosis(service: Service) -> None:
    body = {
        "alert": alert(),
        "evidence": [{"kind": "k8s/Pod", "object": "Pod/shop/checkout-7d9f5c-x2kq", "data": oom_pod()}],
        "question": "why does checkout keep restarting?",
    }
    resp = service.post("/v1/investigations", json=body)
    assert resp.status_code == 202, resp.text
    created = resp.json()
    assert created["source"] == "investigation" and created["links"]["self"] == f"/v1/tasks/{created['id']}"
    task = service.wait_task(created["id"])
    d = assert_oom_diagnosis(task)
    assert "request#0" in {r["item"] for c in d["evidence"] for r in c["refs"]}  # the posted item, cited by its id
    # every cited item comes with the answer, so the console can open it
    assert task["answer"]["evidence_items"]["request#0"]["object"] == "Pod/shop/checkout-7d9f5c-x2kq"
    assert task["goal"] == "why does checkout keep restarting?"
    # the evidence is stored under the var dir, per task
    folder = Path(task["inputs"]["investigation"]["dir"])
    assert folder.is_relative_to(service.workdir / "var" / "investigations")
    assert json.loads((folder / "alerts" / "alertmanager.json").read_text())["alerts"][0]["labels"]["pod"]


def test_multipart_bundle_archive_gives_a_diagnosis(service: Service) -> None:
    screenshot = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # in no known format: listed as ignored
    archive = tar_gz({"exports/pods.json": kubectl_pods(oom_pod()), "exports/screenshot.png": screenshot})
    resp = service.post(
        "/v1/investigations",
        files={"bundle": ("incident.tar.gz", archive, "application/gzip")},
        data={"question": "what is wrong with checkout?"},
    )
    assert resp.status_code == 202, resp.text
    task = service.wait_task(resp.json()["id"])
    d = assert_oom_diagnosis(task)
    assert any(i["path"].endswith("screenshot.png") for i in d["ignored"])


def test_a_zip_bundle_in_json_base64_is_accepted(service: Service) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pods.json", kubectl_pods(oom_pod()))
    resp = service.post("/v1/investigations", json={"bundle": base64.b64encode(buf.getvalue()).decode()})
    assert resp.status_code == 202, resp.text
    assert_oom_diagnosis(service.wait_task(resp.json()["id"]))


def test_a_bundle_over_the_limit_is_413(service: Service) -> None:
    big = tar_gz({"pods.json": os.urandom(MAX_BUNDLE + 10_000)})  # random bytes do not compress
    resp = service.post("/v1/investigations", files={"bundle": ("big.tar.gz", big, "application/gzip")})
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["code"] in ("bundle_too_large", "body_too_large")
    far = os.urandom(MAX_BUNDLE * 2 + 2_000_000)
    resp = service.post("/v1/investigations", files={"bundle": ("far.tar.gz", far, "application/gzip")})
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "body_too_large"


@pytest.mark.parametrize(
    "data",
    [b"this is not an archive at all", tar_gz({"a.json": b"{}"})[:40], b"PK\x03\x04garbage-that-is-not-a-zip"],
    ids=["text", "truncated-gzip", "broken-zip"],
)
def test_a_bad_archive_is_refused_with_a_clear_4xx(service: Service, data: bytes) -> None:
    resp = service.post("/v1/investigations", files={"bundle": ("b.tar.gz", data, "application/gzip")})
    assert resp.status_code == 422, resp.text  # well-formed request, unreadable archive: as any invalid request
    assert resp.json()["error"]["code"] == "bad_bundle"


def test_bad_requests_are_refused(service: Service) -> None:
    resp = service.post("/v1/investigations", json={"question": "why?"})
    assert resp.status_code == 422 and "alert, evidence items or a bundle" in resp.json()["error"]["message"]
    resp = service.post("/v1/investigations", json={"evidence": [{"kind": "k8s/Pod"}]})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_request"
    resp = service.post("/v1/investigations", json={"evidence": [], "tenant": "other"})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "unknown_field"
    resp = service.post("/v1/investigations", content=b"{nope", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"


def test_alertmanager_groups_open_one_investigation_and_resolution_closes_it(service: Service) -> None:
    first = service.post("/v1/alerts/alertmanager", json=webhook("KubePodCrashLooping"))
    assert first.status_code == 200, first.text
    assert first.json()["opened"] is True
    group = first.json()["group"]
    task_id = group["task_id"]
    assert group["status"] == "firing" and group["notifications"] == 1 and task_id

    # Alertmanager repeats the notification (repeat_interval) and sends the group again with one more alert
    again = service.post("/v1/alerts/alertmanager", json=webhook("KubePodCrashLooping"))
    more = webhook("KubePodCrashLooping", alerts=[alert(), alert(pod="checkout-7d9f5c-9wqpz")])
    third = service.post("/v1/alerts/alertmanager", json=more)
    for resp in (again, third):
        assert resp.status_code == 200 and resp.json()["opened"] is False
        assert resp.json()["group"]["task_id"] == task_id
    assert third.json()["group"]["notifications"] == 3
    assert third.json()["group"]["last_notified_at"] >= group["last_notified_at"]

    other = service.post("/v1/alerts/alertmanager", json=webhook("KubeNodeNotReady"))
    assert other.json()["opened"] is True and other.json()["group"]["task_id"] != task_id

    task = service.wait_task(task_id)
    assert task["source"] == "investigation" and task["status"] == "succeeded"
    assert task["answer"]["diagnosis"]["category"] in [c for c in ("unknown", "healthy", "resource_exhaustion")]

    resolved = service.post("/v1/alerts/alertmanager", json=webhook("KubePodCrashLooping", status="resolved"))
    assert resolved.status_code == 200 and resolved.json()["opened"] is False
    assert resolved.json()["group"]["status"] == "resolved" and resolved.json()["group"]["resolved_at"]

    # firing again after it was resolved is a new incident: a new investigation
    refire = service.post("/v1/alerts/alertmanager", json=webhook("KubePodCrashLooping"))
    assert refire.json()["opened"] is True
    assert refire.json()["group"]["task_id"] not in (task_id, None)
    assert refire.json()["group"]["investigations"] == 2 and refire.json()["group"]["status"] == "firing"

    groups = {g["group_key"]: g for g in service.get("/v1/alerts/groups").json()["groups"]}
    assert groups[webhook("KubePodCrashLooping")["groupKey"]]["notifications"] == 5
    assert groups[webhook("KubeNodeNotReady")["groupKey"]]["investigations"] == 1


def test_alertmanager_receiver_refuses_what_is_not_a_version_4_notification(service: Service) -> None:
    old = {**webhook("Old"), "version": "3"}
    resp = service.post("/v1/alerts/alertmanager", json=old)
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "unsupported_version"
    resp = service.post("/v1/alerts/alertmanager", json={"version": "4", "status": "firing", "alerts": []})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_request"


def test_a_diagnose_request_concludes_with_a_diagnosis_and_grows_its_plan_for_more_evidence(service: Service) -> None:
    logs = service.workdir / "logs"
    (logs / "ledger-api.log").write_text(
        "ERROR ledger-api: connection refused to ledger-db:5432\n" * 3 + "INFO ledger-api: retrying\n"
    )
    (logs / "ledger-db.log").write_text(
        "LOG: received smart shutdown request\nFATAL: the database system is shutting down\n"
    )
    plan = {"nodes": [{"id": "errors", "tool": "log_search", "args": {"path": str(logs / "ledger-api.log")}}]}
    task = service.wait_task(service.submit("why is ledger-api failing?", plan=plan), timeout=120)
    assert task["status"] == "succeeded", task
    answer = task["answer"]
    d = answer["diagnosis"]
    # the specialist asked for ledger-db's log: a new plan node, validated and run on a worker like any node
    added = [n for n in task["plan"]["nodes"] if n["id"].startswith("more-log_search-")]
    assert len(added) == 1 and added[0]["args"] == {"path": str(logs / "ledger-db.log")}
    runs = {r["node_id"]: r for r in task["node_runs"]}
    assert runs[added[0]["id"]]["status"] == "succeeded" and runs[added[0]["id"]]["worker"] == "cpu-inv@test"
    assert d["category"] == "dependency_failure" and "ledger-db" in d["root_cause"]
    # what the added node found is evidence the Diagnosis cites, and the answer carries it
    from_added = [i for i in answer["evidence_items"] if i.startswith(added[0]["id"])]
    assert from_added
    assert any("shutting down" in r["msg"] for i in from_added for r in answer["evidence_items"][i]["data"]["records"])
    # the checks' answer fields stay, the headline and text come from the Diagnosis
    assert answer["headline"].startswith("dependency_failure") and d["root_cause"] in answer["text"]
    assert {n["node_id"] for n in answer["nodes"]} == {"errors", added[0]["id"]}


ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AM_CONFIG = """
route:
  receiver: opsgraph
  group_by: [alertname, namespace]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
receivers:
  - name: opsgraph
    webhook_configs:
      - url: {url}/v1/alerts/alertmanager
        send_resolved: true
        max_alerts: 0
        http_config:
          authorization:
            type: Bearer
            credentials: {key}
"""


@pytest.mark.skipif(
    ALERTMANAGER is None, reason="no Alertmanager binary (Debian: apt-get install prometheus-alertmanager)"
)
def test_a_real_alertmanager_opens_one_investigation_per_group_and_resolves_it(
    service: Service, tmp_path: Path
) -> None:
    """The real Alertmanager fires at the receiver: its own grouping, payload and resolved notification."""
    port = free_port()
    key = service.create_key("default", ["operate"], name="alertmanager")  # what an operator gives Alertmanager
    (tmp_path / "alertmanager.yml").write_text(AM_CONFIG.format(url=service.base, key=key))
    am = subprocess.Popen(
        [
            str(ALERTMANAGER),
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip: a single test instance
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "alertmanager.log").open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/-/ready", timeout=1).status_code == 200, 30, "Alertmanager")
        labels = [{"alertname": "RealAMCrashLoop", "namespace": "shop", "pod": f"checkout-{n}"} for n in range(2)]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        firing = [{"labels": lab, "annotations": {"summary": "crash looping"}, "startsAt": now} for lab in labels]
        assert httpx.post(f"{base}/api/v2/alerts", json=firing, timeout=5).status_code == 200

        def group(status: str) -> dict | None:
            for g in service.get("/v1/alerts/groups").json()["groups"]:
                if g["labels"].get("alertname") == "RealAMCrashLoop" and g["status"] == status:
                    return g
            return None

        # the group is visible from the moment it is claimed; its task id follows once the investigation is open
        opened = wait_until(lambda: (g := group("firing")) and g["task_id"] and g, 30, "Alertmanager's notification")
        assert opened["investigations"] == 1 and opened["task_id"] and opened["receiver"] == "opsgraph"
        task = service.wait_task(opened["task_id"])
        assert task["status"] == "succeeded" and task["answer"]["diagnosis"]["category"]
        stored = Path(task["inputs"]["investigation"]["dir"]) / "alerts" / "alertmanager.json"
        assert {a["labels"]["pod"] for a in json.loads(stored.read_text())["alerts"]} == {"checkout-0", "checkout-1"}

        ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
        resolved = [{**a, "endsAt": ended} for a in firing]
        assert httpx.post(f"{base}/api/v2/alerts", json=resolved, timeout=5).status_code == 200
        closed = wait_until(lambda: group("resolved"), 30, "Alertmanager's resolved notification")
        assert closed["task_id"] == opened["task_id"] and closed["investigations"] == 1
        assert closed["notifications"] >= 2
    finally:
        am.terminate()
        am.wait(10)
