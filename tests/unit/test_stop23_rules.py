"""Stop 23: metrics saved as CSV (Grafana's panel export, long sample tables); a recorded CFS-throttling ratio;
a network interface the kernel reports hung, whose node's pods are the upstreams its callers time out on."""

from __future__ import annotations

from pathlib import Path

from diagnosis.analyzers.host import host
from diagnosis.analyzers.metrics import cpu_throttling
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from tests.unit._evidence_builders import T0, Builder, by_code


def _metrics(path: Path) -> dict[str, dict]:
    ev = load_bundle(path)
    return {i.object: i.data for i in ev.kind("metric")}


def test_a_grafana_panel_csv_is_one_series_per_column_in_base_units(tmp_path: Path) -> None:
    (tmp_path / "panel.csv").write_text(
        '"Time","checkout p99","{pod=""currency-7c9f"", namespace=""shop""}","rss"\n'
        "2026-11-20 14:00:00,120 ms,12%,1.5 GiB\n"
        "2026-11-20 14:01:00,125 ms,null,1.6 GiB\n"
        "2026-11-20 14:02:00,900 ms,95%,1.7 GiB\n"
    )
    got = _metrics(tmp_path)
    p99 = got["metric/p99{service=checkout}"]  # "<service> <measure>": the legend names whose series it is
    assert p99["unit"] == "seconds" and [v for _, v in p99["points"]] == [0.12, 0.125, 0.9]
    cur = got["metric/panel{namespace=shop,pod=currency-7c9f}"]  # labels only: the file names the series
    assert cur["unit"] == "percent" and [v for _, v in cur["points"]] == [12.0, 95.0]  # null skipped
    assert got["metric/rss{}"]["points"][0][1] == 1.5 * 2**30


def test_a_long_csv_of_samples_groups_rows_by_series_and_labels(tmp_path: Path) -> None:
    (tmp_path / "export.csv").write_text(
        "timestamp,metric,instance,value\n"
        f"{T0:.0f},node_load1,db-1,0.5\n{T0 + 60:.0f},node_load1,db-1,7.5\n{T0:.0f},node_load1,db-2,0.4\n"
    )
    got = _metrics(tmp_path)
    assert [v for _, v in got["metric/node_load1{instance=db-1}"]["points"]] == [0.5, 7.5]
    assert len(got) == 2


def test_a_csv_of_dated_words_stays_a_log(tmp_path: Path) -> None:
    (tmp_path / "audit.csv").write_text("time,user,action\n2026-11-20 14:00:00,ana,rollout restart\n")
    ev = load_bundle(tmp_path)
    assert not ev.kind("metric") and ev.kind("log")


def test_a_recorded_throttling_ratio_is_cpu_throttling() -> None:
    b = Builder()
    pts = [(T0 + 60 * i, 0.02 if i < 10 else 0.8) for i in range(20)]
    b.metric(
        "cart_cfs_throttled_ratio", pts, {"namespace": "shop", "pod": "cart-6b9f7d8c5d-4rkzq", "container": "cart"}
    )
    [f] = by_code(cpu_throttling(b.set()), "cpu_throttled")
    assert "cart" in f.object and f.category == Category.RESOURCE_EXHAUSTION
    b = Builder()  # a little throttling is not a cause
    b.metric("cart_cfs_throttled_ratio", [(t, 0.05) for t, _ in pts], {"namespace": "shop", "pod": "cart-1"})
    assert not cpu_throttling(b.set())


def _pod(name: str, node: str, ip: str) -> dict:
    return {"metadata": {"name": name, "namespace": "social"}, "spec": {"nodeName": node},
            "status": {"podIP": ip, "phase": "Running"}}  # fmt: skip


def test_a_hung_nic_on_a_node_explains_the_timeouts_of_calls_to_its_pods() -> None:
    node = "ip-10-31-7-142.eu-central-1.compute.internal"
    b = Builder()
    b.raw("k8s/Pod", "Pod/social/auth-69c7f5d8b4-x9rkd", _pod("auth-69c7f5d8b4-x9rkd", node, "10.31.7.88"))
    b.raw("k8s/Pod", "Pod/social/feed-5d8-abcde", _pod("feed-5d8-abcde", "ip-10-31-4-18", "10.31.4.20"))
    kernel = f"{node} kernel: ena 0000:00:06.0 eth1: Found a Tx that wasn't completed on time, qid 3, index 587."
    b.log("node-debug", [(T0 + 60 * i, None, kernel) for i in range(5)])
    calls = [
        (T0 + 90 + 30 * i, "error", 'auth call failed {"peer": "10.31.7.88:8080", "error": "dial tcp '
         '10.31.7.88:8080: i/o timeout"}') for i in range(30)
    ]  # fmt: skip
    b.log("Pod/social/timeline-5f8d7b6c9d-2lrc8", calls, pod="timeline-5f8d7b6c9d-2lrc8", namespace="social")
    ev = b.set()
    [f] = by_code(host(ev), "host_hardware_error")
    assert "network interface" in f.title and "eth1" in f.object and node in f.object
    assert "pod:social/auth-69c7f5d8b4-x9rkd" in f.tags and "instance:10.31.7.88" in f.tags
    assert "pod:social/feed-5d8-abcde" not in f.tags
    d = investigate(ev)
    assert d.category == Category.INFRASTRUCTURE and "eth1" in d.root_cause


def test_asked_about_a_service_whose_own_pods_show_nothing_wrong_its_callers_timeouts_are_no_answer() -> None:
    b = Builder()
    b.raw("k8s/Pod", "Pod/pixly/search-6f8b7c9d54-2kdmq", _pod("search-6f8b7c9d54-2kdmq", "node-1", "10.8.1.37"))
    calls = [
        (T0 + 30 * i, "error", 'search call failed {"peer": "10.8.1.37:8080", "error": "dial tcp '
         '10.8.1.37:8080: i/o timeout"}') for i in range(30)
    ]  # fmt: skip
    b.log("Pod/pixly/gateway-5f8d7b6c9d-2lrc8", calls, pod="gateway-5f8d7b6c9d-2lrc8", namespace="pixly")
    ev = b.set()
    assert investigate(ev, "why is the gateway failing?").category == Category.DEPENDENCY_FAILURE
    d = investigate(ev, "search keeps timing out since 21:05 - what broke?")
    assert d.category == Category.UNKNOWN and "search" in d.text


def _explain(decisions: list[tuple[str, str, str]]) -> dict:
    return {
        "index": "events-2024.05.21", "shard": 0, "primary": True, "current_state": "unassigned",
        "unassigned_info": {"reason": "INDEX_CREATED", "at": "2024-05-21T00:00:01.408Z"},
        "can_allocate": "no", "allocate_explanation": "Elasticsearch isn't allowed to allocate this shard",
        "node_allocation_decisions": [
            {"node_id": f"id-{node}", "node_name": node, "node_decision": "no",
             "node_attributes": {"rack_id": "r1", "xpack.installed": "true"},
             "deciders": [{"decider": decider, "decision": "NO", "explanation": text}]}
            for node, decider, text in decisions
        ],
    }  # fmt: skip


def test_shards_refused_by_awareness_on_the_nodes_with_room_is_the_setting_not_the_full_disks(tmp_path: Path) -> None:
    import json

    from diagnosis.analyzers.database.search import shard_allocation

    aware = "node does not contain the awareness attribute [rack]; required attributes cluster setting " \
        "[cluster.routing.allocation.awareness.attributes=rack]"  # fmt: skip
    full = "the node is above the high watermark cluster setting [cluster.routing.allocation.disk.watermark.high=90%]"
    (tmp_path / "explain.json").write_text(
        json.dumps(_explain([("es-data-04", "awareness", aware), ("es-data-01", "disk_threshold", full)]))
    )
    [f] = shard_allocation(load_bundle(tmp_path))
    assert f.category == Category.CONFIGURATION_ERROR and "es-data-04" in f.title and "rack_id=r1" in f.mechanism
    (tmp_path / "explain.json").write_text(
        json.dumps(_explain([("es-data-02", "disk_threshold", full), ("es-data-01", "disk_threshold", full)]))
    )
    [f] = shard_allocation(load_bundle(tmp_path))
    assert f.category == Category.RESOURCE_EXHAUSTION and f.code == "allocation_disk_full"


def test_a_container_that_keeps_being_oomkilled_began_failing_at_its_first_restart_event(tmp_path: Path) -> None:
    import json

    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "profile-7c9d6f5b8-m4rkd", "namespace": "hotel",
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "profile-7c9d6f5b8"}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "profile", "image": "profile:1.0",
                                                   "resources": {"limits": {"memory": "256Mi"}}}]},
        "status": {"phase": "Running", "podIP": "10.244.0.33", "containerStatuses": [{
            "name": "profile", "ready": False, "restartCount": 8, "image": "profile:1.0",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                         "startedAt": "2025-03-11T19:40:23Z", "finishedAt": "2025-03-11T19:44:09Z"}}}]},
    }  # fmt: skip

    def event(reason: str, first: str, last: str, count: int, type_: str = "Normal") -> dict:
        return {"apiVersion": "v1", "kind": "Event", "reason": reason, "type": type_, "count": count,
                "message": reason, "firstTimestamp": first, "lastTimestamp": last,
                "metadata": {"name": f"profile.{reason}", "namespace": "hotel"},
                "involvedObject": {"kind": "Pod", "name": "profile-7c9d6f5b8-m4rkd", "namespace": "hotel"}}  # fmt: skip

    events = [
        event("Started", "2025-03-11T18:58:52Z", "2025-03-11T19:40:23Z", 7),
        event("BackOff", "2025-03-11T19:03:38Z", "2025-03-11T19:47:51Z", 31, "Warning"),
    ]
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    (tmp_path / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}))
    refused = "dial tcp 10.244.0.33:8081: connect: connection refused"
    (tmp_path / "frontend.log").write_text(
        "".join(f"2025-03-11T19:{m:02d}:00Z ERROR search failed: {refused}\n" for m in range(0, 48, 2))
    )
    ev = load_bundle(tmp_path)
    from diagnosis.analyzers.kubernetes import kubernetes_pods as pod_analyzer

    [f] = [f for f in pod_analyzer(ev) if f.code == "oom_killed"]
    assert f.ts is not None and f.ts < 1741720000  # 2025-03-11 18:58:52Z, not the last kill at 19:44
    d = investigate(ev, "hotel search has been throwing errors since 18:30 - why?")
    assert d.category == Category.RESOURCE_EXHAUSTION and "OOMKilled" in d.root_cause


def test_a_step_to_a_noisy_new_level_far_above_the_old_one_is_a_step() -> None:
    from diagnosis.series import step_change

    quiet = [0.04, 0.05, 0.05, 0.04, 0.06, 0.05, 0.04, 0.05, 0.06, 0.04]
    noisy = [1.6, 2.3, 2.6, 4.4, 2.9, 3.6, 3.8, 2.5, 3.2, 4.2, 2.4, 3.2]
    step = step_change([(T0 + 60 * i, v) for i, v in enumerate(quiet + noisy)])
    assert step is not None and step.before < 0.1 < 2 < step.after
    overlap = [0.04, 0.9, 0.05, 1.2, 0.06, 0.05, 1.1, 0.05, 0.9, 0.04]  # a spiky series: levels that overlap
    assert step_change([(T0 + 60 * i, v) for i, v in enumerate(quiet + overlap)]) is None


def test_ping_loss_to_one_pod_while_its_neighbours_answer_is_that_path_s_packet_loss(tmp_path: Path) -> None:
    from diagnosis.analyzers.network import packet_loss

    def ping(ip: str, recv: int) -> str:
        return (f"search-6c8d:~# ping -c 100 -i 0.2 -q {ip}\nPING {ip} ({ip}) 56(84) bytes of data.\n\n"
                f"--- {ip} ping statistics ---\n100 packets transmitted, {recv} received, {100 - recv}% packet loss, "
                "time 19803ms\nrtt min/avg/max/mdev = 0.402/0.517/0.944/0.083 ms\n")  # fmt: skip

    (tmp_path / "checks.txt").write_text(
        "$ kubectl -n stays debug -it search-6c8d --image=nicolaka/netshoot -- bash\n"
        + ping("10.31.4.112", 64)
        + ping("10.31.4.87", 100)
    )
    (tmp_path / "pods.json").write_text(
        '{"apiVersion": "v1", "kind": "List", "items": [' + ",".join(
            f'{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{n}", "namespace": "stays"}}, '
            f'"spec": {{"containers": [{{"name": "app", "image": "x:1"}}]}}, '
            f'"status": {{"phase": "Running", "podIP": "{ip}"}}}}'
            for n, ip in (("geo-5b9c8f7d6-q7tlm", "10.31.4.112"), ("rate-7d6f9b8c5-x2mpk", "10.31.4.87"))
        ) + "]}"
    )  # fmt: skip
    [f] = packet_loss(load_bundle(tmp_path))
    assert f.category == Category.INFRASTRUCTURE and "36% packet loss" in f.mechanism
    assert "pod stays/geo-5b9c8f7d6-q7tlm" in f.object and "10.31.4.87" in f.mechanism


def test_a_leak_released_in_pods_only_is_found_from_the_replicaset_that_replaced_another(tmp_path: Path) -> None:
    import json

    from diagnosis.analyzers.regressions import releases

    def pod(name: str, created: str, image: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "shop",
                "creationTimestamp": created}, "spec": {"containers": [{"name": "server", "image": image}]},
                "status": {"phase": "Running"}}  # fmt: skip

    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        pod("recs-5f9b7c6d48-tq4pn", "2025-04-09T09:12:31Z", "reg/recs:v0.10.2"),
        pod("recs-5f9b7c6d48-ab12c", "2025-04-09T09:13:31Z", "reg/recs:v0.10.2")]}))  # fmt: skip
    assert not releases(load_bundle(tmp_path))  # one ReplicaSet in sight: no release
    (tmp_path / "mem.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "container_memory_working_set_bytes", "namespace": "shop",
                    "pod": "recs-7d5c9f8b64-8xk2w", "container": "server"},
         "values": [[1744180000, "7.4e7"]]}]}}))  # fmt: skip
    [r] = releases(load_bundle(tmp_path))
    assert r.workload == "recs" and r.version == "v0.10.2" and r.ts == 1744189951.0


def test_writes_refused_as_read_only_are_a_datasource_pointing_at_a_reader() -> None:
    from diagnosis.analyzers.logs.settings import writes_to_read_only

    b = Builder()
    url = "jdbc:postgresql://billing-aurora.cluster-ro-c8x2.eu-central-1.rds.amazonaws.com/b"
    b.raw("k8s/ConfigMap", "ConfigMap/billing/billing-api-env", {"data": {"SPRING_DATASOURCE_URL": url}})
    err = "ERROR: cannot execute UPDATE in a read-only transaction"
    b.log("billing-api", [(T0 + 30 * i, "error", err) for i in range(10)], service="billing-api")
    [f] = writes_to_read_only(b.set())
    assert f.category == Category.CONFIGURATION_ERROR and "cluster-ro" in f.mechanism
    b = Builder()  # a readiness probe that timed out once is no such thing, nor are two refusals
    b.log("billing-api", [(T0, "error", err), (T0 + 30, "error", err)], service="billing-api")
    assert not writes_to_read_only(b.set())


def test_a_readiness_probe_that_timed_out_once_is_a_blip_three_times_a_short_timeout(tmp_path: Path) -> None:
    import json

    from diagnosis.analyzers.kubernetes import kubernetes_pods

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "frontend-8d6c7b9f5-gt9vw", "namespace": "shop"},
           "spec": {"containers": [{"name": "server", "image": "frontend:1",
                                    "readinessProbe": {"httpGet": {"path": "/_healthz", "port": 8080},
                                                       "timeoutSeconds": 1}}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                                          "lastTransitionTime": "2025-04-23T01:00:00Z"}],
                      "containerStatuses": [{"name": "server", "ready": True, "restartCount": 0,
                                             "state": {"running": {"startedAt": "2025-04-23T01:00:00Z"}}}]},
           }  # fmt: skip

    def bundle(count: int, kind: str = "Readiness") -> list:
        ev = {"apiVersion": "v1", "kind": "Event", "reason": "Unhealthy", "type": "Warning", "count": count,
              "message": f'{kind} probe failed: Get "http://10.16.2.22:8080/_healthz": context deadline exceeded',
              "firstTimestamp": "2025-04-23T02:51:19Z", "lastTimestamp": "2025-04-23T02:55:19Z",
              "metadata": {"name": "fe.1", "namespace": "shop"},
              "involvedObject": {"kind": "Pod", "name": "frontend-8d6c7b9f5-gt9vw", "namespace": "shop"}}  # fmt: skip
        (tmp_path / "all.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod, ev]}))
        return kubernetes_pods(load_bundle(tmp_path))

    assert [(f.code, f.role) for f in bundle(1) if "probe" in f.code] == [("probe_blip", "benign")]
    assert [(f.code, f.role) for f in bundle(6) if "probe" in f.code] == [("probe_timeout", "cause")]
    # stop 24: a liveness probe that failed fewer times than its failureThreshold restarted nothing: a blip too
    container = pod["spec"]["containers"][0]  # type: ignore[index]
    container["livenessProbe"] = container.pop("readinessProbe")
    assert [(f.code, f.role) for f in bundle(1, "Liveness") if "probe" in f.code] == [("probe_blip", "benign")]
    assert [(f.code, f.role) for f in bundle(6, "Liveness") if "probe" in f.code] == [("probe_timeout", "cause")]


def test_an_ingress_pointing_at_a_service_port_the_service_no_longer_has_is_a_configuration_error() -> None:
    from diagnosis.analyzers.routing import ingress_backends

    def ingress(port: object) -> dict:
        return {"metadata": {"name": "vendor-hub", "namespace": "vendors"}, "spec": {"rules": [{
            "host": "vendor-hub.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {
                "service": {"name": "vendor-hub", "port": port}}}]}}]}}  # fmt: skip

    svc = {"metadata": {"name": "vendor-hub", "namespace": "vendors"},
           "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}  # fmt: skip
    for port, wrong in (({"number": 8080}, True), ({"number": 80}, False), ({"name": "http"}, False)):
        b = Builder()
        b.raw("k8s/Ingress", "Ingress/vendors/vendor-hub", ingress(port))
        b.raw("k8s/Service", "Service/vendors/vendor-hub", svc)
        found = ingress_backends(b.set())
        assert bool(found) == wrong, port
        assert not found or ("no port 8080" in found[0].mechanism and found[0].category == Category.CONFIGURATION_ERROR)


def test_a_controller_s_optimistic_locking_conflicts_are_routine_not_errors() -> None:
    from diagnosis.analyzers.logs import log_errors

    conflict = ('"re-queuing item due to optimistic locking on resource" err="Operation cannot be fulfilled on '
                'certificates.cert-manager.io \\"giftcards-tls\\": the object has been modified; please apply your '
                'changes to the latest version and try again"')  # fmt: skip
    b = Builder()
    b.log("cert-manager", [(T0 + 300 * i, "error", conflict) for i in range(6)])
    [f] = log_errors(b.set())
    assert f.role == "benign" and f.code == "errors_routine"
    b = Builder()
    b.log("cert-manager", [(T0 + 300 * i, "error", "failed to sync challenge: acme: 403 forbidden") for i in range(6)])
    assert all(f.code != "errors_routine" for f in log_errors(b.set()))


def test_a_nic_link_that_keeps_dropping_is_failing_hardware_one_drop_is_not(tmp_path: Path) -> None:
    down = "[Tue Nov 19 07:{:02d}:08 2024] ixgbe 0000:3b:00.0 eno1: NIC Link is Down\n"
    up = "[Tue Nov 19 07:{:02d}:18 2024] ixgbe 0000:3b:00.0 eno1: NIC Link is Up 10 Gbps, Flow Control: RX/TX\n"
    (tmp_path / "dmesg-mongo-fleet-1.txt").write_text("".join(down.format(m) + up.format(m) for m in (31, 44, 58)))
    [f] = by_code(host(load_bundle(tmp_path)), "host_hardware_error")
    assert "network interface" in f.title and "mongo-fleet-1" in f.mechanism and f.object.startswith("device eno1")
    (tmp_path / "dmesg-mongo-fleet-1.txt").write_text(down.format(31) + up.format(31))
    assert not by_code(host(load_bundle(tmp_path)), "host_hardware_error")


def test_a_server_that_refuses_to_start_on_its_configuration_is_a_configuration_error() -> None:
    from diagnosis.analyzers.logs.settings import startup_config_refused

    line = ("ERROR [main] CassandraDaemon.java:897 - Cannot start node if snitch's data center (euwest) differs from "
            "previous data center (eu-west). Please fix the snitch configuration")  # fmt: skip
    b = Builder()
    b.log("cass-02", [(T0, "info", "Starting Cassandra"), (T0 + 5, "error", line)])
    b.log("client", [(T0 + 7200, "info", "later evidence")])
    [f] = startup_config_refused(b.set())
    assert f.category == Category.CONFIGURATION_ERROR and "euwest" in f.mechanism
    b = Builder()  # it started after the fix: history
    b.log("cass-02", [(T0 + 5, "error", line), (T0 + 600, "info", "Starting listening for CQL clients on /10.0.0.1")])
    assert not startup_config_refused(b.set())


def test_a_pydantic_validation_error_on_input_records_is_bad_data() -> None:
    from diagnosis.analyzers.logs import log_errors

    msg = ("[ERROR] ValidationError: 1 validation error for TelemetryEnvelope readings Input should be a valid list "
           "[type=list_type, input_value={'t': 21.5}, input_type=dict]")  # fmt: skip
    b = Builder()
    b.log("telemetry-enricher", [(T0 + 20 * i, "error", msg) for i in range(12)])
    [f] = by_code(log_errors(b.set()), "bad_data")
    assert f.category == Category.DATA_QUALITY and "readings" in f.mechanism


def test_an_app_insights_csv_export_with_multiline_messages_and_portal_times_is_read(tmp_path: Path) -> None:
    (tmp_path / "union.csv").write_text(
        "timestamp [UTC],itemType,message,severityLevel\n"
        '"11/27/2024, 2:28:19.131 PM",exception,"This request is not authorized to perform this operation.\n'
        'RequestId:3a3160fc\nTime:2024-11-27T14:28:19.1310000Z\nStatus: 403",Error\n'
        '"11/27/2024, 2:29:19.131 PM",trace,"Executed \'Functions.Ingest\' (Failed)",Error\n'
    )
    [log] = load_bundle(tmp_path).kind("log")
    recs = log.data["records"]
    assert len(recs) == 2 and recs[0]["ts"] == 1732717699.131 and "not authorized" in recs[0]["msg"]


def test_a_counter_split_by_a_failed_outcome_is_an_error_series() -> None:
    from diagnosis.analyzers.metrics import _kind

    assert _kind("Transactions", {"responsetype": "AuthorizationError"}) == "errors"
    assert _kind("Transactions", {"responsetype": "Success"}) == "other"


def _slow(ts: int, user: str, examined: int, sent: int, stmt: str) -> str:
    return (f"# User@Host: {user}[{user}] @  [10.90.2.21]  Id: 881228\n"
            f"# Query_time: 2.710106  Lock_time: 0.000004 Rows_sent: {sent}  Rows_examined: {examined}\n"
            f"use orders;\nSET timestamp={ts};\n{stmt}\n")  # fmt: skip


def test_a_lookup_that_scans_the_table_after_a_release_of_its_client_is_that_release_s_defect(tmp_path: Path) -> None:
    from diagnosis.analyzers.database import slow_queries

    t = 1726567358
    scans = "".join(
        _slow(t + 5 * i, "orders_api", 9_180_000, 4, f"SELECT id FROM orders WHERE customer_ref = {40717311 + i};")
        for i in range(8)
    )
    (tmp_path / "slow.log").write_text(scans + _slow(t, "reporting", 400_000, 12, "SELECT status FROM orders;"))
    [f] = slow_queries(load_bundle(tmp_path))
    assert f.code == "full_scan_query" and f.category == Category.RESOURCE_EXHAUSTION
    (tmp_path / "deploy.log").write_text(
        "2024-09-17T10:02:17Z orders-api 5.4.0 -> hosts ord-app-01..04 OK (ansible deploy-orders.yml)\n"
    )
    [f] = slow_queries(load_bundle(tmp_path))
    assert f.code == "query_regression" and f.category == Category.CODE_DEFECT and "5.4.0" in f.title
    (tmp_path / "slow.log").write_text(  # a batch UPDATE returns no rows by nature: not a lookup that scans
        "".join(_slow(t + 5 * i, "reconcile", 940_000, 0, "UPDATE payments SET x = 1 WHERE id > 5;") for i in range(8))
    )
    assert not slow_queries(load_bundle(tmp_path))


def test_two_keepalived_routers_both_master_are_a_split_brain_named_by_the_firewall_change_before_it() -> None:
    from diagnosis.analyzers.network import vrrp_split_brain

    def b_with(firewall: bool) -> list:
        b = Builder()
        b.log("lb-sc-1", [(T0, None, "lb-sc-1 Keepalived_vrrp[877]: (VI_SALT) Entering MASTER STATE")])
        lines = (
            [(T0 + 7 * 86400 - 3, None, "lb-sc-2 systemd[1]: Reloaded nftables.service - nftables.")]
            if firewall
            else []
        )
        lines.append((T0 + 7 * 86400, None, "lb-sc-2 Keepalived_vrrp[921]: (VI_SALT) Entering MASTER STATE"))
        b.log("lb-sc-2", lines)
        return vrrp_split_brain(b.set())

    [f] = b_with(True)
    assert f.category == Category.CONFIGURATION_ERROR and "lb-sc-1, lb-sc-2" in f.title
    [f] = b_with(False)
    assert f.category == Category.INFRASTRUCTURE
    b = Builder()  # one MASTER, one BACKUP: a working pair
    b.log("lb", [(T0, None, "lb-1 Keepalived_vrrp[8]: (VI_1) Entering MASTER STATE"),
                 (T0 + 1, None, "lb-2 Keepalived_vrrp[9]: (VI_1) Entering BACKUP STATE")])  # fmt: skip
    assert not vrrp_split_brain(b.set())


def test_a_bundle_whose_only_signals_are_faint_is_healthy_and_an_alert_firing_is_not_faint() -> None:
    b = Builder()
    b.log("cert-manager", [(T0, "error", "propagation check failed: wrong status code '404'"),
                           (T0 + 10, "error", "propagation check failed: wrong status code '404'")])  # fmt: skip
    b.log("giftcards-api", [(T0 + 60 * i, "info", "GET /healthz 200") for i in range(30)])
    d = investigate(b.set())
    assert d.category == Category.HEALTHY, d.text
    b.raw("alert", "alert/GiftcardsDown", {"status": "firing", "labels": {"alertname": "GiftcardsDown",
          "severity": "critical", "service": "giftcards-api"}, "annotations": {"summary": "giftcards down"},
          "startsAt": T0 + 1700}, ts=T0 + 1700)  # fmt: skip
    assert investigate(b.set()).category != Category.HEALTHY


def _jaeger(spans: list[tuple[str, str, str, str, str, float]]) -> dict:
    procs = {svc: {"serviceName": svc, "tags": []} for _, _, _, svc, _, _ in spans}
    out = []
    for trace, sid, parent, svc, op, ms in spans:
        refs = [{"refType": "CHILD_OF", "traceID": trace, "spanID": parent}] if parent else []
        out.append({"traceID": trace, "spanID": sid, "operationName": op, "references": refs,
                    "startTime": 1_700_000_000_000_000, "duration": int(ms * 1000), "tags": [], "logs": [],
                    "processID": svc})  # fmt: skip
    return {"data": [{"traceID": t, "spans": [s for s in out if s["traceID"] == t], "processes": procs}
                     for t in sorted({s[0] for s in spans})]}  # fmt: skip


def test_the_service_that_holds_most_of_the_traced_time_is_where_the_slowness_is(tmp_path: Path) -> None:
    import json

    from diagnosis.analyzers.spans import trace_hotspots

    spans = []
    for t in ("t1", "t2"):
        spans += [(t, f"{t}a", "", "frontend", "GET /", 900.0), (t, f"{t}b", f"{t}a", "frontend", "Convert", 880.0),
                  (t, f"{t}c", f"{t}b", "currency", "Convert", 878.0),
                  (t, f"{t}d", f"{t}a", "cart", "Get", 5.0)]  # fmt: skip
    (tmp_path / "traces.json").write_text(json.dumps(_jaeger(spans)))
    ev = load_bundle(tmp_path)
    [f] = trace_hotspots(ev)
    assert f.object == "service currency" and f.code == "latency"
    assert all(ev.check(r) for r in f.evidence)  # it cites the span it names
    # the callee answers fast but its caller's client span is long (and one call never reached it): the network
    spans = [("t1", "a", "", "search", "Nearby", 1828.0), ("t1", "b", "a", "geo", "Nearby", 2.0),
             ("t2", "c", "", "search", "Nearby", 2500.0)]  # fmt: skip
    (tmp_path / "traces.json").write_text(json.dumps(_jaeger(spans)))
    [f] = trace_hotspots(load_bundle(tmp_path))
    assert f.object == "calls from search to geo"
    assert f.role == "cause" and f.category == Category.INFRASTRUCTURE  # stop 24: delay on that path


def test_alerts_that_began_with_planned_work_and_nothing_else_failing_are_its_noise() -> None:
    from diagnosis.model import EvidenceRef, Finding
    from diagnosis.reasoning import reason

    b = Builder()
    mon = b.raw("alert", "monitor/1", {"status": "firing"}, ts=T0)
    chg = b.raw("change", "CHG1", {"state": "Implement"}, ts=T0)
    ev = b.set()

    def alert(ts: float) -> Finding:
        return Finding(analyzer="alerts", domain="alerts", role="symptom", code="alert:LogVolumeHigh",
                       category=Category.UNKNOWN, title="monitor LogVolumeHigh in Alert", mechanism="log volume high",
                       object="monitor/1", score=0.7, ts=ts, tags=["service:accounts-api"],
                       evidence=[EvidenceRef(item=mon, field="status", value="firing")])  # fmt: skip

    planned = Finding(analyzer="changes", domain="changes", role="benign", code="planned_work",
                      category=Category.HEALTHY, title="planned work: vulnerability scan", object="CHG1",
                      mechanism="planned work at T0: vulnerability scan", score=0.2, ts=T0,
                      evidence=[EvidenceRef(item=chg, field="state", value="Implement")])  # fmt: skip
    assert reason([planned, alert(T0 + 1800)], ev).category == Category.HEALTHY
    assert reason([planned, alert(T0 - 3 * 3600)], ev).category == Category.UNKNOWN  # it began long before the work


def test_lambda_streams_are_one_function_and_a_new_version_in_its_start_lines_is_a_release(tmp_path: Path) -> None:
    import json

    from diagnosis.analyzers.regressions import releases

    def event(stream: str, ms: int, msg: str) -> dict:
        return {"logStreamName": stream, "timestamp": ms, "message": msg, "ingestionTime": ms + 500}

    t = 1726664164118
    old, new = "2024/09/18/[22]83f8f653321227ef946876d612de9819", "2024/09/18/[23]07e3af30387aab51b1ab3b9e9eb18a8c"
    events = [event(old, t, "START RequestId: a Version: 22\n"),
              event(new, t + 600_000, "START RequestId: b Version: 23\n"),
              event(new, t + 600_100, "[ERROR] NoSuchKey: x\n")]  # fmt: skip
    (tmp_path / "thumbnailer.json").write_text(json.dumps({"events": events, "searchedLogStreams": []}))
    ev = load_bundle(tmp_path)
    assert [i.object for i in ev.kind("log")] == ["lambda/thumbnailer"]
    [r] = releases(ev)
    assert r.version == "version 23" and r.ts == (t + 600_000) / 1000
