"""A healthy answer says what it found benign and why: planned work (a rolling deploy, a maintenance window, a node
upgrade, a data replay) explains the signals around it; an alert names the part of its object its labels name
(the file system, backend, queue, certificate or scheduled task), not only the host or its own name."""

from __future__ import annotations

from typing import Any

from diagnosis.analyzers.alerts import alert_object
from diagnosis.analyzers.changes import planned_work
from diagnosis.investigate import investigate
from tests.unit._evidence_builders import T0, Builder, assert_refs_real


def _alert(b: Builder, labels: dict[str, str], starts: float, ends: float | None, summary: str = "") -> None:
    data: dict[str, Any] = {
        "status": "resolved" if ends else "firing",
        "labels": labels,
        "annotations": {"summary": summary} if summary else {},
        "starts_at": starts,
        "ends_at": ends,
        "fingerprint": f"{labels}",
    }
    b.raw("alert", f"alert/{labels['alertname']}", data, ts=ends or starts)


def test_alert_object_names_the_part_its_labels_name() -> None:
    assert (
        alert_object({"alertname": "A", "instance": "b-3:9100", "mountpoint": "/data"})
        == "instance b-3:9100 (mountpoint /data)"
    )
    assert alert_object({"alertname": "Backlog", "queue": "mailers", "app": "news"}) == "queue mailers (app news)"
    assert alert_object({"alertname": "TaskFailed", "dag_id": "export"}) == "dag_id export"
    assert alert_object({"alertname": "CertSoon", "namespace": "edge", "certificate": "wild"}) == "certificate wild"
    assert alert_object({"alertname": "X", "pod": "api-1", "namespace": "shop"}) == "pod shop/api-1"
    assert alert_object({"alertname": "OnlyName"}) == "OnlyName"


def test_planned_work_is_found_in_logs_and_events_but_not_when_it_failed() -> None:
    b = Builder()
    b.log("deploy.log", [(T0, "info", "PLAY [rolling deploy web 2.1.0] (serial: 1)"), (T0 + 5, "info", "TASK ok")])
    b.log("lb.log", [(T0 + 10, "warning", "Server be_web/w1 is going DOWN for maintenance.")])
    b.log("job.log", [(T0 + 20, "error", "rolling restart failed on w2"), (T0 + 30, "info", "upgrade failed")])
    b.event("Node", "", "n1", "UpgradeStarted", "Node n1 is being upgraded to 1.30.5", T0, type_="Normal")
    b.event("Node", "", "n2", "UpgradeStarted", "Node n2 is being upgraded to 1.30.5", T0 + 60, type_="Normal")
    ev = b.set()
    found = planned_work(ev)
    assert [f.object for f in found] == ["deploy.log", "lb.log", "Node//n1"]
    assert all(f.role == "benign" and f.code == "planned_work" for f in found)
    assert "rolling deploy web 2.1.0" in found[0].title and "maintenance" in found[1].mechanism
    assert_refs_real(ev, found)


def test_a_healthy_answer_names_the_planned_work_and_each_benign_signal_once() -> None:
    b = Builder()
    b.log("deploy.log", [(T0, "info", "PLAY [rolling deploy web 2.1.0] (serial: 1)")])
    for i, server in enumerate(("w1", "w2", "w3")):
        labels = {"alertname": "ServerDown", "instance": "lb-1:8405", "backend": "be_web", "server": server}
        _alert(b, labels, T0 + 60 + i * 300, T0 + 240 + i * 300, f"server be_web/{server} is down")
    b.log("app.log", [(T0 + 3600 + i * 60, "info", "GET /health 200") for i in range(30)])
    d = investigate(b.set())
    assert d.category == "healthy"
    assert "be_web" in d.root_cause and "(and 2 more like it)" in d.root_cause and "planned work" in d.root_cause
    assert "rolling deploy web 2.1.0" in d.causal_chain[0]
    assert sum("alert ServerDown" in s for s in d.causal_chain) == 1 and len(d.causal_chain) <= 6
    assert any("planned work" in r.alternative for r in d.ruled_out)


def test_planned_work_beside_a_fault_is_not_ruled_out() -> None:
    b = Builder()
    b.log("deploy.log", [(T0, "info", "PLAY [rolling deploy web 2.1.0] (serial: 1)")])
    msg = "ERROR payment failed: java.lang.NullPointerException at com.acme.Pay.charge(Pay.java:42)"
    b.log("Pod/shop/web-7d9f8c6b5-x2k4p", [(T0 + 60 + i * 10, "error", msg) for i in range(40)])
    d = investigate(b.set())
    assert d.category != "healthy"
    assert not any("planned work" in r.alternative for r in d.ruled_out)
