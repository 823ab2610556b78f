"""The kubernetes, alerts and changes analyzers through the whole investigation: each failure an SRE meets most,
its red herrings, and healthy-but-noisy clusters. Evidence is built in code (tests.unit._k8s_evidence.py)."""

from __future__ import annotations

from diagnosis.analyzers.kubernetes import image_reason, quantity, scheduling_reason
from diagnosis.investigate import investigate
from diagnosis.model import Category, Diagnosis
from tests.unit._k8s_evidence import (
    NOW,
    alert,
    container_status,
    event,
    evidence,
    iso,
    k8s,
    log,
    metric_point_item,
    node,
    pod,
)

POD = "checkout-7d9f8b6c5-x2k4p"
RS = ("ReplicaSet", "checkout-7d9f8b6c5")


def crashing(exit_code: int = 1, reason: str = "Error", restarts: int = 6, **kw: object) -> object:
    return pod(
        POD,
        owner=RS,
        statuses=[
            container_status(
                "app",
                ready=False,
                restarts=restarts,
                waiting=("CrashLoopBackOff", "back-off 5m0s restarting failed container=app"),
                last_terminated=(reason, exit_code, NOW - 200),
            )
        ],
        **kw,  # type: ignore[arg-type]
    )


def diagnose(*items: object, question: str | None = None) -> Diagnosis:
    return investigate(evidence(*items), question)  # type: ignore[arg-type]


def says(d: Diagnosis, *words: str) -> None:
    text = (d.root_cause + " " + d.text).lower()
    for w in words:
        assert w.lower() in text, f"{w!r} not in: {d.root_cause}\n{d.text}"


# ------------------------------------------------------------------------------------------ OOM


def test_oom_killed_against_its_container_limit() -> None:
    p = crashing(
        137,
        "OOMKilled",
        containers=[{"name": "app", "image": "checkout:1.4", "resources": {"limits": {"memory": "256Mi"}}}],
    )
    d = diagnose(p, alert("KubePodCrashLooping", {"namespace": "shop", "pod": POD, "container": "app"}))
    assert d.category == Category.RESOURCE_EXHAUSTION
    says(d, POD, "OOMKilled", "256Mi")
    assert d.causal_chain[-1].startswith("alert KubePodCrashLooping")
    assert any(a.kind == "write" and "--limits=memory=512Mi" in a.command for a in d.actions)
    assert all(r.item for c in d.evidence for r in c.refs)


def test_old_oom_restart_of_a_running_container_is_benign() -> None:
    week_ago = NOW - 7 * 86400
    p = pod(POD, statuses=[container_status("app", restarts=1, last_terminated=("OOMKilled", 137, week_ago))])
    d = diagnose(p, metric_point_item("up", {"job": "checkout"}, 1))
    assert d.category == Category.HEALTHY
    assert any("last restarted" in r.alternative for r in d.ruled_out)


# ------------------------------------------------------------------------------------------ crashes


def test_crash_on_a_missing_environment_variable_is_a_configuration_error() -> None:
    logs = log(
        "shop", POD, "app", ["starting checkout v1.4", "FATAL: missing required env DATABASE_URL", "exit status 1"]
    )
    d = diagnose(crashing(), logs)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "DATABASE_URL", POD)


def test_python_keyerror_on_an_env_var_is_configuration_not_code() -> None:
    logs = log(
        "shop",
        POD,
        "app",
        [
            "Traceback (most recent call last):",
            '  File "/app/main.py", line 3, in <module>',
            "    url = os.environ['REDIS_URL']",
            "KeyError: 'REDIS_URL'",
        ],
    )
    assert diagnose(crashing(), logs).category == Category.CONFIGURATION_ERROR


def test_panic_after_a_rollout_is_a_code_defect_and_the_chain_starts_at_the_deploy() -> None:
    logs = log(
        "shop",
        POD,
        "app",
        [
            "INFO config loaded from /etc/checkout/config.yaml",
            "panic: runtime error: invalid memory address or nil pointer dereference",
            "goroutine 1 [running]:",
            "main.(*Cart).Total(...)",
        ],
    )
    old = k8s(
        "ReplicaSet",
        "checkout-5c4b7a9d8",
        spec={"template": {"spec": {"containers": [{"name": "app", "image": "checkout:1.3"}]}}},
        annotations={"deployment.kubernetes.io/revision": "3"},
        creationTimestamp=iso(NOW - 86400 * 3),
        ownerReferences=[{"kind": "Deployment", "name": "checkout"}],
    )
    new = k8s(
        "ReplicaSet",
        "checkout-7d9f8b6c5",
        spec={"template": {"spec": {"containers": [{"name": "app", "image": "checkout:1.4"}]}}},
        annotations={"deployment.kubernetes.io/revision": "4"},
        creationTimestamp=iso(NOW - 900),
        ownerReferences=[{"kind": "Deployment", "name": "checkout"}],
    )
    d = diagnose(crashing(), logs, old, new)
    assert d.category == Category.CODE_DEFECT
    says(d, "nil pointer", "checkout:1.3 -> checkout:1.4")
    assert "rolled out" in d.causal_chain[0]
    assert any("rollout undo" in a.command for a in d.actions)


def test_crash_because_the_database_refuses_connections_is_a_dependency_failure() -> None:
    logs = log(
        "shop",
        POD,
        "app",
        [
            "connecting to postgres at orders-db:5432",
            "Error: connect ECONNREFUSED 10.0.3.4:5432",
            "    at TCPConnectWrap.afterConnect [as oncomplete] (net.js:1141:16)",
        ],
    )
    d = diagnose(crashing(), logs)
    assert d.category == Category.DEPENDENCY_FAILURE
    says(d, "ECONNREFUSED")


def _replicasets(new_age: float) -> list[object]:
    def rs(name: str, image: str, rev: str, age: float) -> object:
        return k8s(
            "ReplicaSet",
            name,
            spec={"template": {"spec": {"containers": [{"name": "app", "image": image}]}}},
            annotations={"deployment.kubernetes.io/revision": rev},
            creationTimestamp=iso(NOW - age),
            ownerReferences=[{"kind": "Deployment", "name": "checkout"}],
        )

    return [
        rs("checkout-5c4b7a9d8", "checkout:1.3", "3", 30 * 86400),
        rs("checkout-7d9f8b6c5", "checkout:1.4", "4", new_age),
    ]


def test_crash_without_logs_or_change_is_unknown_and_says_what_is_missing() -> None:
    d = diagnose(crashing(), *_replicasets(new_age=21 * 86400))  # image unchanged for three weeks
    assert d.category == Category.UNKNOWN
    assert any("logs of Pod shop/" in m for m in d.missing)


def test_crash_without_logs_right_after_a_rollout_is_the_rollout() -> None:
    d = diagnose(crashing(), *_replicasets(new_age=900))
    assert d.category == Category.CODE_DEFECT
    says(d, "checkout:1.4", "CrashLoopBackOff")


def test_env_from_a_configmap_key_that_is_gone() -> None:
    spec = {
        "name": "app",
        "image": "checkout:1.4",
        "env": [
            {
                "name": "QUEUE_URL",
                "valueFrom": {"configMapKeyRef": {"name": "checkout-config", "key": "queue_url", "optional": True}},
            }
        ],
    }
    cm = k8s("ConfigMap", "checkout-config")
    cm.data["data"] = {"smtp_host": "mail"}
    d = diagnose(crashing(containers=[spec]), cm)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "QUEUE_URL", "queue_url")


def test_bad_input_row_that_crashes_a_job_is_data_quality() -> None:
    logs = log(
        "shop",
        POD,
        "app",
        [
            "Traceback (most recent call last):",
            '  File "/app/parse.py", line 23, in parse_row',
            "decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]",
            "During handling of the above exception, another exception occurred:",
            "importer.BadRow: row 20417: sale_price 'N/A' is not a number",
        ],
    )
    assert diagnose(crashing(), logs).category == Category.DATA_QUALITY


def test_missing_secret_blocks_container_creation() -> None:
    p = pod(
        POD,
        statuses=[
            container_status(
                "app", ready=False, waiting=("CreateContainerConfigError", 'secret "checkout-db" not found')
            )
        ],
    )
    d = diagnose(p)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "checkout-db", "does not exist")


def test_command_not_found_is_a_configuration_error() -> None:
    d = diagnose(crashing(127, "ContainerCannotRun"))
    assert d.category == Category.CONFIGURATION_ERROR


# ------------------------------------------------------------------------------------------ images


def test_image_pull_failures_are_classified_by_the_registry_answer() -> None:
    assert image_reason('failed to pull "checkout:1.9": manifest unknown')[0] == "configuration_error"
    assert image_reason("pull access denied, authorization failed: 401 Unauthorized")[1] == "image_pull_auth"
    assert image_reason("toomanyrequests: You have reached your pull rate limit")[0] == "dependency_failure"
    assert image_reason("dial tcp: lookup registry.internal: i/o timeout")[0] == "dependency_failure"


def test_wrong_image_tag_explains_the_stuck_rollout() -> None:
    p = pod(
        POD,
        owner=RS,
        statuses=[
            container_status("app", ready=False, waiting=("ImagePullBackOff", 'Back-off pulling image "checkout:1.9"'))
        ],
    )
    ev = event(
        "Pod",
        POD,
        "Failed",
        'Failed to pull image "checkout:1.9": rpc error: code = NotFound desc = failed to pull and unpack '
        'image "docker.io/library/checkout:1.9": not found',
    )
    dep = k8s(
        "Deployment",
        "checkout",
        spec={"replicas": 3},
        status={
            "availableReplicas": 2,
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": 'ReplicaSet "checkout-7d9f8b6c5" has timed out progressing.',
                    "lastTransitionTime": iso(NOW - 60),
                }
            ],
        },
    )
    d = diagnose(p, ev, dep)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "checkout:1.9", "does not exist")
    assert any("rollout stuck" in step for step in d.causal_chain)


def test_stuck_rollout_with_no_pod_evidence_is_unknown_and_asks_for_the_pods() -> None:
    dep = k8s(
        "Deployment",
        "checkout",
        spec={"replicas": 3},
        status={
            "availableReplicas": 2,
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "lastTransitionTime": iso(NOW - 60),
                }
            ],
        },
    )
    d = diagnose(dep)
    assert d.category == Category.UNKNOWN
    assert any("pods of Deployment shop/checkout" in m for m in d.missing)


# ------------------------------------------------------------------------------------------ probes


def _probed_pod(probe: dict[str, object], ports: list[int]) -> object:
    return pod(
        POD,
        statuses=[container_status("app", ready=False, restarts=4, last_terminated=("Error", 137, NOW - 100))],
        containers=[
            {
                "name": "app",
                "image": "checkout:1",
                "ports": [{"containerPort": p} for p in ports],
                "livenessProbe": probe,
            }
        ],
    )


def test_liveness_probe_on_the_wrong_port_while_the_app_is_fine() -> None:
    p = _probed_pod({"httpGet": {"path": "/healthz", "port": 8081}, "initialDelaySeconds": 10}, [8080])
    evs = [
        event(
            "Pod",
            POD,
            "Unhealthy",
            'Liveness probe failed: Get "http://10.1.2.3:8081/healthz": dial tcp 10.1.2.3:8081: connect: '
            "connection refused",
            count=12,
        ),
        event("Pod", POD, "Killing", "Container app failed liveness probe, will be restarted"),
    ]
    logs = log("shop", POD, "app", ["INFO listening on :8080", "INFO GET /api/cart 200 12ms"], previous=False)
    d = diagnose(p, *evs, logs)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "8081", "8080", "liveness")


def test_a_refused_probe_on_an_undeclared_port_of_a_container_killed_for_memory_is_not_the_port() -> None:
    """istio-proxy serves its readiness probe on 15021 without declaring it; while the sidecar is OOM-killed and
    restarting every probe is refused, so the refusal says nothing about the port."""
    p = pod(
        POD,
        statuses=[container_status("app", ready=False, restarts=9, last_terminated=("OOMKilled", 137, NOW - 100))],
        containers=[
            {
                "name": "app",
                "image": "proxy:1",
                "ports": [{"containerPort": 15090}],
                "resources": {"limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz/ready", "port": 15021}},
            }
        ],
    )
    ev = event(
        "Pod",
        POD,
        "Unhealthy",
        'Readiness probe failed: Get "http://10.1.2.3:15021/healthz/ready": dial tcp 10.1.2.3:15021: connect: '
        "connection refused",
        count=40,
    )
    d = diagnose(p, ev)
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "targets port 15021" not in d.text  # not even as a rival ruled out


def test_a_liveness_timeout_of_an_app_that_says_it_is_unhealthy_is_not_the_timeout_setting() -> None:
    p = pod(
        POD,
        statuses=[container_status("app", ready=False, restarts=3, last_terminated=("Error", 137, NOW - 100))],
        containers=[
            {
                "name": "app",
                "image": "c:1",
                "livenessProbe": {"grpc": {"port": 9000}, "timeoutSeconds": 1},
                "readinessProbe": {"grpc": {"port": 9000}},
            }
        ],
    )
    evs = [
        event("Pod", POD, "Unhealthy", 'Liveness probe failed: timeout: failed to connect service ":9000" within 1s',
              count=15),
        event("Pod", POD, "Unhealthy", 'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")',
              count=60),
    ]  # fmt: skip
    d = diagnose(p, *evs)
    assert d.category != Category.CONFIGURATION_ERROR, d.root_cause


def test_readiness_probe_path_404() -> None:
    p = pod(
        POD,
        statuses=[container_status("app", ready=False)],
        containers=[{"name": "app", "image": "c:1", "readinessProbe": {"httpGet": {"path": "/health", "port": 8080}}}],
    )
    ev = event("Pod", POD, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 404", count=30)
    d = diagnose(p, ev)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "/health", "404")


def test_readiness_failures_before_the_pod_turned_ready_are_its_warm_up() -> None:
    containers = [{"name": "app", "image": "c:1", "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}]
    ev = event("Pod", POD, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503", count=6,
               ts=NOW - 900)  # fmt: skip
    d = diagnose(pod(POD, statuses=[container_status("app", ready=True)], containers=containers), ev)
    assert d.category == Category.HEALTHY, d.root_cause  # Ready since NOW - 600, after the last failure
    assert "warming up" in d.text
    ev = event("Pod", POD, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503", count=6)
    d = diagnose(pod(POD, statuses=[container_status("app", ready=True)], containers=containers), ev)
    assert d.category != Category.HEALTHY  # it failed again after it turned Ready: a live flap


def test_readiness_failing_with_500_is_a_symptom_of_the_dependency() -> None:
    p = pod(
        POD,
        statuses=[container_status("app", ready=False)],
        containers=[{"name": "app", "image": "c:1", "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}],
    )
    ev = event("Pod", POD, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503", count=30)
    d = diagnose(p, ev)
    assert d.category == Category.UNKNOWN  # nothing here says what its health endpoint depends on
    assert d.missing


# ------------------------------------------------------------------------------------------ scheduling


def test_scheduling_reason_ignores_the_control_plane_taint() -> None:
    msg = (
        "0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "3 Insufficient memory. preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    assert scheduling_reason(msg)[:2] == ("resource_exhaustion", "insufficient_resources")
    sel = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    assert scheduling_reason(sel)[0] == "configuration_error"
    assert quantity("512Mi") == 512 * 2**20 and quantity("250m") == 0.25


def test_pending_pod_short_of_memory_is_resource_exhaustion() -> None:
    p = pod(
        POD,
        phase="Pending",
        statuses=[],
        status_extra={
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient memory.",
                }
            ]
        },
    )
    ev = event("Pod", POD, "FailedScheduling", "0/3 nodes are available: 3 Insufficient memory.", count=20)
    d = diagnose(p, ev)
    assert d.category == Category.RESOURCE_EXHAUSTION
    says(d, "memory", "Pending")


def test_request_larger_than_any_node_is_a_configuration_error() -> None:
    p = pod(
        POD,
        phase="Pending",
        statuses=[],
        containers=[{"name": "app", "image": "c:1", "resources": {"requests": {"memory": "64Gi"}}}],
        status_extra={
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient memory.",
                }
            ]
        },
    )
    d = diagnose(p, node("node-1"), node("node-2"))
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "more memory than any node")


def test_unbound_claim_with_a_missing_storage_class() -> None:
    p = pod(
        "db-0",
        phase="Pending",
        statuses=[],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}],
        status_extra={
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
                }
            ]
        },
    )
    pvc = k8s("PersistentVolumeClaim", "data-db-0", status={"phase": "Pending"})
    ev = event(
        "PersistentVolumeClaim", "data-db-0", "ProvisioningFailed", 'storageclass.storage.k8s.io "fast-ssd" not found'
    )
    d = diagnose(p, pvc, ev)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "fast-ssd")


def test_quota_exceeded_names_the_quota() -> None:
    ev = event(
        "ReplicaSet",
        "checkout-7d9f8b6c5",
        "FailedCreate",
        'Error creating: pods "checkout-7d9f8b6c5-abcde" is forbidden: exceeded quota: compute-quota, '
        "requested: limits.memory=1Gi, used: limits.memory=8Gi, limited: limits.memory=8Gi",
        count=15,
    )
    dep = k8s("Deployment", "checkout", spec={"replicas": 4}, status={"availableReplicas": 2})
    d = diagnose(ev, dep)
    assert d.category == Category.RESOURCE_EXHAUSTION
    says(d, "compute-quota", "limits.memory")


# ------------------------------------------------------------------------------------------ nodes


def test_node_not_ready_explains_the_pods_on_it() -> None:
    n = node("ip-10-0-1-5", ready="Unknown", since=NOW - 600)
    p = pod(POD, node="ip-10-0-1-5", statuses=[container_status("app", ready=False)])
    a = alert("KubeNodeNotReady", {"node": "ip-10-0-1-5"}, starts=NOW - 300)
    d = diagnose(n, p, a)
    assert d.category == Category.INFRASTRUCTURE
    says(d, "ip-10-0-1-5", "NotReady")


def test_recovered_node_is_healthy() -> None:
    n = node("ip-10-0-1-5", since=NOW - 600)
    ev = event(
        "Node",
        "ip-10-0-1-5",
        "NodeNotReady",
        "Node ip-10-0-1-5 status is now: NodeNotReady",
        ns="",
        type_="Normal",
        ts=NOW - 900,
    )
    d = diagnose(
        n, ev, alert("KubeNodeNotReady", {"node": "ip-10-0-1-5"}, status="resolved", starts=NOW - 1000, ends=NOW - 500)
    )
    assert d.category == Category.HEALTHY


def test_memory_pressure_evictions_point_at_the_node() -> None:
    n = node("node-2", pressure={"MemoryPressure": "True"}, since=NOW - 900)
    p = pod(
        "worker-6b5d8f7c9-abcde",
        node="node-2",
        phase="Failed",
        statuses=[],
        status_extra={
            "reason": "Evicted",
            "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi.",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": iso(NOW - 400)}],
        },
    )
    d = diagnose(n, p)
    assert d.category == Category.RESOURCE_EXHAUSTION
    assert d.root_cause.startswith("Node node-2")
    assert any("evicted" in r.alternative.lower() for r in d.ruled_out)


def test_old_eviction_is_left_over_history() -> None:
    p = pod(
        "worker-6b5d8f7c9-abcde",
        phase="Failed",
        statuses=[],
        status_extra={
            "reason": "Evicted",
            "message": "The node was low on resource: ephemeral-storage.",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": iso(NOW - 5 * 86400)}],
        },
    )
    d = diagnose(p, pod("web-5c4b7a9d8-zzzzz"), metric_point_item("up", {}, 1))
    assert d.category == Category.HEALTHY


# ------------------------------------------------------------------------------------------ services, HPA, jobs


def test_service_selector_matching_no_pod() -> None:
    svc = k8s("Service", "payments", spec={"selector": {"app": "payment"}, "ports": [{"port": 80, "targetPort": 8080}]})
    ep = k8s("Endpoints", "payments")
    ep.data["subsets"] = []
    p = pod("payments-5c4b7a9d8-abcde", labels={"app": "payments"})
    d = diagnose(svc, ep, p, alert("Payments5xx", {"service": "payments", "namespace": "shop"}))
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "app=payment", "payments")


def test_hpa_at_max_with_a_latency_alert_is_saturation_but_alone_it_is_healthy() -> None:
    hpa = k8s(
        "HorizontalPodAutoscaler",
        "checkout",
        spec={"maxReplicas": 10, "scaleTargetRef": {"name": "checkout"}},
        status={"currentReplicas": 10, "desiredReplicas": 10},
    )
    lat = alert("CheckoutLatencyHigh", {"service": "checkout", "namespace": "shop"}, severity="warning")
    assert diagnose(hpa, lat).category == Category.RESOURCE_EXHAUSTION
    assert diagnose(hpa, metric_point_item("up", {}, 1)).category == Category.HEALTHY


def test_failed_job_is_explained_by_its_pod_crash() -> None:
    job = k8s(
        "Job",
        "nightly-report",
        status={
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": iso(NOW - 120),
                }
            ]
        },
    )
    jp = pod(
        "nightly-report-x7k2p",
        owner=("Job", "nightly-report"),
        phase="Failed",
        statuses=[
            {
                "name": "report",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"reason": "Error", "exitCode": 1, "finishedAt": iso(NOW - 150)}},
            }
        ],
    )
    logs = log(
        "shop",
        "nightly-report-x7k2p",
        "report",
        ["Traceback (most recent call last):", "ZeroDivisionError: division by zero"],
    )
    d = diagnose(job, jp, logs)
    assert d.category == Category.CODE_DEFECT
    says(d, "nightly-report-x7k2p", "ZeroDivisionError")


def test_completed_job_and_succeeded_pod_are_healthy() -> None:
    job = k8s("Job", "backup", status={"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    p = pod(
        "backup-abcde",
        owner=("Job", "backup"),
        phase="Succeeded",
        statuses=[
            {
                "name": "backup",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"reason": "Completed", "exitCode": 0, "finishedAt": iso(NOW - 60)}},
            }
        ],
    )
    assert diagnose(job, p, metric_point_item("up", {}, 1)).category == Category.HEALTHY


# ------------------------------------------------------------------------------------------ noise and alerts


def test_normal_events_and_resolved_or_flapping_alerts_are_healthy() -> None:
    items = [
        event("Pod", POD, "Pulled", 'Successfully pulled image "checkout:1.4"', type_="Normal"),
        event("Pod", POD, "Started", "Started container app", type_="Normal"),
        pod(POD),
        alert("HighLatency", {"service": "checkout"}, status="resolved", starts=NOW - 3600, ends=NOW - 3000),
        alert("Watchdog", {}, severity="none"),
    ]
    for i in range(3):  # CPU alert firing and resolving every few minutes
        t = NOW - 3000 + i * 900
        items.append(
            alert(
                "CPUThrottling",
                {"pod": POD, "namespace": "shop"},
                status="resolved",
                starts=t,
                ends=t + 240,
                severity="warning",
                fingerprint="cpu-1",
            )
        )
    items.append(
        alert(
            "CPUThrottling", {"pod": POD, "namespace": "shop"}, starts=NOW - 60, severity="warning", fingerprint="cpu-1"
        )
    )
    d = diagnose(*items)
    assert d.category == Category.HEALTHY
    assert any("flapping" in r.alternative for r in d.ruled_out)
    assert any("resolved" in r.alternative for r in d.ruled_out)


def test_firing_alert_with_no_evidence_about_its_object_is_unknown() -> None:
    d = diagnose(alert("KubeDeploymentReplicasMismatch", {"namespace": "shop", "deployment": "checkout"}))
    assert d.category == Category.UNKNOWN
    assert any("deployment shop/checkout" in m for m in d.missing)


def test_dns_failure_in_events() -> None:
    ev = event(
        "Ingress", "shop", "Sync", "error resolving upstream: lookup payments.shop.svc on 10.96.0.10:53: no such host"
    )
    d = diagnose(ev)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "no such host")


def test_deploy_with_nothing_failing_is_not_a_cause() -> None:
    new = k8s(
        "ReplicaSet",
        "checkout-7d9f8b6c5",
        spec={"template": {"spec": {"containers": [{"name": "app", "image": "checkout:1.4"}]}}},
        annotations={"deployment.kubernetes.io/revision": "4"},
        creationTimestamp=iso(NOW - 900),
        ownerReferences=[{"kind": "Deployment", "name": "checkout"}],
    )
    d = diagnose(new, pod(POD, owner=RS), metric_point_item("up", {}, 1))
    assert d.category == Category.HEALTHY


# ------------------------------------------------------------------------------------------ alerts and changes


def test_alert_labels_become_the_objects_it_is_about() -> None:
    from diagnosis.analyzers.alerts import alert_tags

    tags = alert_tags({"namespace": "shop", "pod": POD, "job": "kube-state-metrics", "instance": "10.0.0.9:8080"})
    assert f"pod:shop/{POD}" in tags
    assert "service:kube-state-metrics" not in tags and not any(t.startswith("host:") for t in tags)
    assert "host:web-1:9100" in alert_tags({"instance": "web-1:9100", "job": "node"})


def test_datadog_monitor_in_alert_is_a_symptom_with_what_is_missing() -> None:
    from tests.unit._k8s_evidence import evidence_item

    mon = evidence_item(
        "datadog/monitor",
        "monitor/1",
        {
            "id": 1,
            "name": "[quote-api] p99 latency",
            "type": "metric alert",
            "query": "p99:trace.http.request{service:quote-api} > 2",
            "state": "Alert",
            "tags": ["service:quote-api"],
            "modified_ts": NOW,
        },
    )
    ok = evidence_item(
        "datadog/monitor", "monitor/2", {"id": 2, "name": "errors", "state": "OK", "tags": [], "modified_ts": NOW}
    )
    d = diagnose(mon, ok)
    assert d.category == Category.UNKNOWN
    says(d, "quote-api")


def test_service_with_no_ready_endpoints_is_explained_by_its_pods_crash() -> None:
    svc = k8s("Service", "checkout", spec={"selector": {"app": "checkout"}, "ports": [{"port": 80}]})
    ep = k8s("Endpoints", "checkout")
    ep.data["subsets"] = [{"notReadyAddresses": [{"ip": "10.0.0.1"}]}]
    logs = log("shop", POD, "app", ["Error: connect ECONNREFUSED 10.0.3.4:5432"])
    d = diagnose(svc, ep, crashing(labels={"app": "checkout"}), logs)
    assert d.category == Category.DEPENDENCY_FAILURE
    assert any("no ready endpoints" in step for step in d.causal_chain)


def test_full_quota_that_refused_nothing_is_benign() -> None:
    q = k8s("ResourceQuota", "compute", status={"hard": {"pods": "10"}, "used": {"pods": "10"}})
    d = diagnose(q, pod(POD), metric_point_item("up", {}, 1))
    assert d.category == Category.HEALTHY
    assert any("at its limit" in r.alternative for r in d.ruled_out)


def test_exit_137_killed_by_a_failing_liveness_probe_is_not_an_oom() -> None:
    p = pod(
        POD,
        statuses=[container_status("app", ready=False, restarts=5, last_terminated=("Error", 137, NOW - 100))],
        containers=[
            {
                "name": "app",
                "image": "c:2",
                "ports": [{"containerPort": 8080}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                "resources": {"limits": {"memory": "1Gi"}},
            }
        ],
    )
    evs = [
        event("Pod", POD, "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 404", count=15),
        event("Pod", POD, "Killing", "Container app failed liveness probe, will be restarted", count=5),
    ]
    d = diagnose(p, *evs)
    assert d.category == Category.CONFIGURATION_ERROR
    says(d, "/healthz", "404")


def test_an_alert_that_keeps_firing_after_a_few_flaps_is_real() -> None:
    items = []
    for i in range(3):
        t = NOW - 9000 + i * 900
        items.append(
            alert("CheckoutErrors", {"service": "checkout"}, status="resolved", starts=t, ends=t + 200, fingerprint="f")
        )
    items.append(alert("CheckoutErrors", {"service": "checkout"}, starts=NOW - 3600, fingerprint="f"))
    d = diagnose(*items, metric_point_item("up", {"job": "checkout"}, 1))  # the evidence ends an hour later
    assert d.category == Category.UNKNOWN  # firing for an hour: a symptom whose cause is not in the evidence


def test_hpa_scaling_one_replicaset_is_not_a_rollout_but_moving_between_two_is() -> None:
    up = event(
        "Deployment",
        "checkout",
        "ScalingReplicaSet",
        "Scaled up replica set checkout-7d9f8b6c5 to 8",
        type_="Normal",
        ts=NOW - 600,
    )
    lat = alert("CheckoutLatencyHigh", {"service": "checkout", "namespace": "shop"}, starts=NOW - 300)
    assert diagnose(up, lat).category == Category.UNKNOWN
    down = event(
        "Deployment",
        "checkout",
        "ScalingReplicaSet",
        "Scaled down replica set checkout-5c4b7a9d8 to 0",
        type_="Normal",
        ts=NOW - 590,
    )
    d = diagnose(up, down, lat)
    assert d.category == Category.CODE_DEFECT
    says(d, "rolled out")


def test_nxdomain_for_a_statefulset_pod_on_a_dead_node_is_the_node_not_the_name() -> None:
    cache = pod("cache-1", node="node-9", statuses=[container_status("redis", ready=False)],
                status_extra={"phase": "Running"})  # fmt: skip
    cache.data["metadata"]["deletionTimestamp"] = iso(NOW - 1200)
    lines = [
        f"ERROR quote failed: dial tcp: lookup cache-1.cache.shop.svc.cluster.local on 10.0.0.10:53: no such host {i}"
        for i in range(8)
    ]
    d = diagnose(
        cache, node("node-9", ready="Unknown", since=NOW - 1500), log("shop", "pricer-7d9f8b6c5-x2k4p", "app", lines)
    )
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "node-9" in d.root_cause
