"""`kubectl describe` and `kubectl get` tables as operators paste them: read by content into the items the JSON
export gives, investigated like them, and outranked by a JSON export of the same object."""

from __future__ import annotations

import calendar
import json
import shutil
from pathlib import Path

from diagnosis.analyzers._kube import kube_index
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

DATA = Path(__file__).resolve().parent.parent / "data" / "kubetext"


def bundle_of(tmp_path: Path, *names: str, rename: bool = False) -> Path:
    folder = tmp_path / "bundle"
    folder.mkdir()
    for i, name in enumerate(names):
        shutil.copy(DATA / name, folder / (f"paste-{i}.log" if rename else name))
    return folder


def test_describe_pod_becomes_the_pod_and_its_events(tmp_path: Path) -> None:
    ev = load_bundle(bundle_of(tmp_path, "describe-oom.txt", rename=True))
    assert not ev.errors and not ev.ignored
    (pod,) = ev.kind("k8s/Pod")
    assert pod.object == "Pod/billing/invoice-renderer-7b9d5c8f6-x2kqp"
    spec, status = pod.data["spec"], pod.data["status"]
    (container,) = spec["containers"]
    assert container["resources"]["limits"]["memory"] == "512Mi"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080, "scheme": "HTTP"}
    assert {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "invoice-db", "key": "password"}}} in (
        container["env"]
    )
    (cs,) = status["containerStatuses"]
    assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert cs["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    assert cs["lastState"]["terminated"]["finishedAt"] == "2026-11-17T09:43:40Z"
    assert cs["restartCount"] == 9
    assert pod.data["metadata"]["ownerReferences"][0] == {
        "kind": "ReplicaSet",
        "name": "invoice-renderer-7b9d5c8f6",
        "controller": True,
    }
    backoff = next(e for e in ev.kind("k8s/Event") if e.data["reason"] == "BackOff")
    assert backoff.data["count"] == 41
    # ages count back from the newest time the describe prints (Finished 09:43:40)
    finished = calendar.timegm((2026, 11, 17, 9, 43, 40, 0, 0, 0))
    assert backoff.data["last_ts"] == finished - 120
    assert backoff.data["first_ts"] == finished - 95 * 60


def test_describe_pod_is_diagnosed_like_the_json_export(tmp_path: Path) -> None:
    diagnosis = investigate(load_bundle(bundle_of(tmp_path, "describe-oom.txt")))
    assert diagnosis.category == Category.RESOURCE_EXHAUSTION
    assert "OOMKilled" in diagnosis.root_cause and "renderer" in diagnosis.root_cause
    assert "512Mi" in diagnosis.root_cause


def test_get_tables_and_describe_node_find_the_node_that_stopped_reporting(tmp_path: Path) -> None:
    ev = load_bundle(bundle_of(tmp_path, "cluster-state.txt"))
    idx = kube_index(ev)
    node = idx.objects[("Node", "", "gke-prod-default-8c1d2e3f-7xyz")]
    assert node.data["x-opsgraph-from"] == "kubectl describe"  # the describe outranks the `get nodes` row
    ready = next(c for c in node.data["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
    assert idx.pods[("payments", "ledger-6f7d8c9b5-tq9lx")].data["status"]["phase"] == "Pending"
    diagnosis = investigate(ev)
    assert diagnosis.category == Category.INFRASTRUCTURE
    assert "gke-prod-default-8c1d2e3f-7xyz" in diagnosis.root_cause and "NotReady" in diagnosis.root_cause


def test_get_events_table_names_the_image_that_cannot_be_pulled(tmp_path: Path) -> None:
    ev = load_bundle(bundle_of(tmp_path, "events.txt"))
    backoff = [e for e in ev.kind("k8s/Event") if e.data["reason"] == "BackOff"]
    assert backoff[0].data["count"] == 40
    assert backoff[0].data["involved"] == {"kind": "Pod", "namespace": "web", "name": "storefront-5d4c8b7f9-vx2lp"}
    diagnosis = investigate(ev)
    assert diagnosis.category == Category.CONFIGURATION_ERROR
    assert "storefront:4.12.O" in diagnosis.root_cause and "ImagePullBackOff" in diagnosis.root_cause


def test_a_json_export_of_the_same_pod_outranks_the_describe_and_events_count_once(tmp_path: Path) -> None:
    folder = bundle_of(tmp_path, "describe-oom.txt")
    described = next(i for i in load_bundle(folder).kind("k8s/Pod"))
    exported = dict(described.data)
    exported.pop("x-opsgraph-from")
    events = [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "x.1", "namespace": "billing"},
            "involvedObject": {"kind": "Pod", "namespace": "billing", "name": "invoice-renderer-7b9d5c8f6-x2kqp"},
            "reason": "BackOff",
            "message": "Back-off restarting failed container renderer in pod "
            "invoice-renderer-7b9d5c8f6-x2kqp_billing(0c7e1f5d-2b8a-4c55-9e0f-1d2c3b4a5968)",
            "type": "Warning",
            "count": 41,
            "firstTimestamp": "2026-11-17T08:08:40Z",
            "lastTimestamp": "2026-11-17T09:41:40Z",
        }
    ]
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [exported]}))
    (folder / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "EventList", "items": events}))
    idx = kube_index(load_bundle(folder))
    pod = idx.pods[("billing", "invoice-renderer-7b9d5c8f6-x2kqp")]
    assert "x-opsgraph-from" not in pod.data
    backoffs = [
        e for e in idx.events_for("Pod", "billing", pod.data["metadata"]["name"]) if e.data["reason"] == "BackOff"
    ]
    assert len(backoffs) == 1 and "x-opsgraph-from" not in backoffs[0].data


def test_prose_with_name_lines_is_not_taken_for_kubectl_output(tmp_path: Path) -> None:
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "notes.txt").write_text(
        "Name: Jane Doe\nRole: on-call\nNamespace: none in particular\n\nWe looked at the dashboards and saw nothing.\n"
    )
    (folder / "app.log").write_text("2026-11-17T10:00:00Z INFO NAME READY STATUS report printed\n")
    ev = load_bundle(folder)
    assert not ev.kind("k8s/")


def test_a_describe_snippet_is_a_report_of_the_object_not_error_lines(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(
        "Name:         api-1\nNamespace:    shop\nStatus:       Running\nContainers:\n  api:\n"
        "    Last State:     Terminated\n      Reason:       Error\n"
    )
    ev = load_bundle(tmp_path)
    assert ev.kind("log") == [] and not ev.ignored
    (pod,) = ev.kind("k8s/Pod")
    assert pod.data["status"]["containerStatuses"][0]["lastState"] == {"terminated": {"reason": "Error"}}


def test_hpa_table_and_describe_give_the_hpa_at_its_maximum(tmp_path: Path) -> None:
    for name in ("hpa-table.txt", "describe-hpa.txt"):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(DATA / name, folder / name)
        ev = load_bundle(folder)
        hpa = next(i for i in ev.kind("k8s/HorizontalPodAutoscaler") if i.object.endswith("/pricing"))
        assert hpa.data["spec"]["maxReplicas"] == 12 and hpa.data["status"]["currentReplicas"] == 12
        # the table says 163% of a 70% target at 12 replicas: the HPA wants ceil(12 x 163 / 70) = 28
        assert hpa.data["status"]["desiredReplicas"] == (28 if name == "hpa-table.txt" else 12)
        # the operator's report of slowness is the symptom the HPA at its maximum explains
        diagnosis = investigate(ev, "why is pricing slow since this morning?")
        assert diagnosis.category == Category.RESOURCE_EXHAUSTION
        assert "maxReplicas 12" in diagnosis.root_cause
        # asked without a reported failure, a pinned HPA alone is not an incident
        assert investigate(ev, "anything to look at on pricing?").category == Category.HEALTHY
