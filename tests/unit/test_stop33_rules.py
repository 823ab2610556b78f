"""Stop 33: rules from the dev63-dev65 batches, each a mechanism rather than a stack: a chaos experiment still in
force on the failing objects; a datastore its exporter cannot reach; Redis blocked by one client's slow commands;
a server's idle timeout cut below its clients' pools; a replica catching up that nobody reads; a job sent to the
wrong location. Each test asserts the negative case beside the rule."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from tests.toolkit.exports import prom_matrix


def _network_chaos(ns: str, target: str, *, recovered: bool = False, selector_ns: str | None = None) -> dict:
    return {
        "apiVersion": "chaos-mesh.org/v1alpha1",
        "kind": "NetworkChaos",
        "metadata": {"name": "gameday-delay", "namespace": ns, "creationTimestamp": "2025-09-17T10:58:02Z"},
        "spec": {
            "action": "delay",
            "delay": {"latency": "800ms", "jitter": "100ms"},
            "duration": "90m",
            "mode": "all",
            "selector": {"labelSelectors": {"app": target}, "namespaces": [selector_ns or ns]},
        },
        "status": {
            "conditions": [
                {"type": "AllRecovered", "status": "True" if recovered else "False"},
                {"type": "Paused", "status": "False"},
                {"type": "AllInjected", "status": "False" if recovered else "True"},
            ],
            "experiment": {"desiredPhase": "Stop" if recovered else "Run"},
        },
    }


def _timeline_log() -> str:
    lines = ["[2025-Sep-17 10:40:00.000000] <info>: (main.cpp:58) redis pool: host=timeline-redis port=6379"]
    for i in range(30):
        lines.append(
            f"[2025-Sep-17 11:{i:02d}:10.000000] <error>: (Handler.h:141:Read) Failed to read home timeline from "
            "redis: Failed to get reply: Resource temporarily unavailable"
        )
    return "\n".join(lines) + "\n"


def _chaos_bundle(tmp_path: Path, chaos: dict) -> Path:
    logs = tmp_path / "logs" / "social"
    logs.mkdir(parents=True)
    (logs / "timeline-5b8d6f9c47-j4rtv.log").write_text(_timeline_log())
    (tmp_path / "chaos.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [chaos]}))
    return tmp_path


def test_a_network_chaos_in_force_on_the_failing_store_is_the_infrastructure_cause(tmp_path: Path) -> None:
    d = investigate(load_bundle(_chaos_bundle(tmp_path, _network_chaos("social", "timeline-redis"))), "why slow?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "NetworkChaos" in d.root_cause and "timeline-redis" in d.root_cause


def test_a_recovered_or_other_namespace_chaos_is_not_the_cause(tmp_path: Path) -> None:
    for name, chaos in (
        ("recovered", _network_chaos("social", "timeline-redis", recovered=True)),
        ("staging", _network_chaos("social-staging", "timeline-redis", selector_ns="social-staging")),
        ("elsewhere", _network_chaos("social", "media-memcached")),
    ):
        bundle = tmp_path / name
        bundle.mkdir()
        d = investigate(load_bundle(_chaos_bundle(bundle, chaos)), "why slow?")
        assert not any(f.code == "chaos_injected" for f in d.findings), (name, d.root_cause)


def _up_series(name: str, values: list[int]) -> dict:
    start = 1769067600
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": name, "namespace": "db-platform", "pod": "orders-mysql-0", "job": "mysql"},
                    "values": [[start + 30 * i, str(v)] for i, v in enumerate(values)],
                }
            ],
        },
    }


def test_a_store_its_exporter_cannot_reach_is_a_dependency_failure_and_a_pool_waiting_on_it_a_symptom(
    tmp_path: Path,
) -> None:
    (tmp_path / "mysql_up.json").write_text(json.dumps(_up_series("mysql_up", [1] * 20 + [0] * 20)))
    lines = []
    for i in range(3):
        lines.append(
            f"2026-01-22 08:10:{10 + i:02d}.000 ERROR 1 --- [exec-1] o.h.e.j.s.SqlExceptionHelper : "
            "Communications link failure"
        )
    for i in range(12):
        lines.append(
            f"2026-01-22 08:{11 + i:02d}:00.000 ERROR 1 --- [exec-4] o.h.e.j.s.SqlExceptionHelper : HikariPool-1 - "
            "Connection is not available, request timed out after 30000ms."
        )
    (tmp_path / "orders-api.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "orders fail with 500s")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "orders-mysql-0" in d.root_cause
    pool = next(f for f in d.findings if f.code == "app_pool_exhausted")
    assert pool.role == "symptom" and "stopped accepting connections" in pool.title


def test_a_store_that_stays_up_is_no_dependency_failure(tmp_path: Path) -> None:
    (tmp_path / "mysql_up.json").write_text(json.dumps(_up_series("mysql_up", [1] * 40)))
    d = investigate(load_bundle(tmp_path), "is mysql ok?")
    assert not any(f.code == "datastore_down" for f in d.findings)


def _slowlog(entries: list[tuple[int, str, str, str]]) -> str:
    out = ["ops@jump-1:~$ redis-cli -h cache-01.prod.internal SLOWLOG GET 6"]
    for n, (us, cmd, arg, client) in enumerate(entries, 1):
        out += [
            f"{n}) 1) (integer) {9000 - n}",
            f"   2) (integer) {1720438501 - 300 * n}",
            f"   3) (integer) {us}",
            f'   4) 1) "{cmd}"',
            f'      2) "{arg}"',
            '   5) "10.31.6.44:40212"',
            f'   6) "{client}"',
        ]
    return "\n".join(out) + "\n"


def test_a_client_whose_keys_scans_block_redis_is_named_and_its_release_makes_it_a_code_defect(tmp_path: Path) -> None:
    slow = [(1_400_000, "KEYS", "cart:*", "cart-janitor")] * 4 + [(20_000, "HGETALL", "session:1", "web")]
    (tmp_path / "slowlog.txt").write_text(_slowlog(slow))
    d = investigate(load_bundle(tmp_path), "storefront times out")
    assert d.category == Category.DEPENDENCY_FAILURE and "cart-janitor" in d.root_cause, d.root_cause
    (tmp_path / "deploys.csv").write_text(
        "deployed_at_utc,service,version,environment,message\n"
        "2024-07-08T08:55:13Z,cart-janitor,v3.8.0,prod,find carts by key pattern\n"
    )
    d = investigate(load_bundle(tmp_path), "storefront times out")
    assert d.category == Category.CODE_DEFECT and "cart-janitor" in d.root_cause, d.root_cause


def test_a_slow_log_of_milliseconds_blocks_nothing(tmp_path: Path) -> None:
    (tmp_path / "slowlog.txt").write_text(_slowlog([(18_000, "EVALSHA", "abc", "rate-limiter")] * 5))
    d = investigate(load_bundle(tmp_path), "is redis ok?")
    assert not any(f.code == "redis_blocked" for f in d.findings)


_TF = """$ terraform apply -target=module.accounts_db
Terraform will perform the following actions:

  # module.accounts_db.aws_db_parameter_group.this will be updated in-place
  ~ resource "aws_db_parameter_group" "this" {{
        id          = "accounts-mysql80-params"
      - parameter {{
          - apply_method = "immediate" -> null
          - name         = "{key}" -> null
          - value        = "{old}" -> null
        }}
      + parameter {{
          + apply_method = "immediate"
          + name         = "{key}"
          + value        = "{new}"
        }}
    }}

Plan: 0 to add, 1 to change, 0 to destroy.
module.accounts_db.aws_db_parameter_group.this: Modifications complete after 2s [id=accounts-mysql80-params]
"""


def _lost_connections() -> str:
    return "".join(
        f"2025-03-11 10:{i:02d}:00,000 ERROR accounts.api: pymysql.err.OperationalError: (2013, 'Lost connection to "
        "MySQL server during query')\n"
        for i in range(10)
    )


def test_an_idle_timeout_cut_below_the_pools_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "tf.txt").write_text(_TF.format(key="wait_timeout", old="28800", new="60"))
    (tmp_path / "accounts-api.log").write_text(_lost_connections())
    d = investigate(load_bundle(tmp_path), "why 500s?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "wait_timeout" in d.root_cause and "28800" in d.root_cause


def test_an_idle_timeout_raised_is_no_cut(tmp_path: Path) -> None:
    (tmp_path / "tf.txt").write_text(_TF.format(key="wait_timeout", old="60", new="28800"))
    (tmp_path / "accounts-api.log").write_text(_lost_connections())
    d = investigate(load_bundle(tmp_path), "why 500s?")
    assert not any(f.code == "setting_cut" for f in d.findings)


def _cw(label_values: dict[str, list[float]]) -> dict:
    ts = [f"2024-11-19T07:{40 - 5 * i:02d}:00Z" for i in range(8)]
    return {
        "MetricDataResults": [
            {"Id": f"m{n}", "Label": label, "Timestamps": ts, "Values": vals, "StatusCode": "Complete"}
            for n, (label, vals) in enumerate(label_values.items())
        ]
    }


def test_a_replica_catching_up_that_nobody_reads_is_healthy(tmp_path: Path) -> None:
    lag = [2190.0, 2321.0, 2497.0, 2598.0, 2753.0, 2889.0, 3051.0, 3182.0]  # newest first, as the API returns
    (tmp_path / "cw.json").write_text(
        json.dumps(_cw({"reporting-replica ReplicaLag": lag, "reporting-replica DatabaseConnections": [0.0] * 8}))
    )
    d = investigate(load_bundle(tmp_path), "is the replica lag a problem?")
    assert any(f.code == "replica_catching_up" for f in d.findings), d.root_cause
    assert d.category == Category.HEALTHY, d.root_cause
    # with readers on it, the same lag is a problem
    (tmp_path / "cw.json").write_text(
        json.dumps(_cw({"reporting-replica ReplicaLag": lag, "reporting-replica DatabaseConnections": [12.0] * 8}))
    )
    d = investigate(load_bundle(tmp_path), "is the replica lag a problem?")
    assert not any(f.code == "replica_catching_up" for f in d.findings)


def test_jobs_sent_to_the_wrong_location_name_the_setting(tmp_path: Path) -> None:
    lines = "".join(
        f"[2024-07-02, 06:10:{i:02d} UTC] {{pod_manager.py:471}} INFO - 404 Not found: Dataset acme:marketing_stg was "
        "not found in location US\n"
        for i in range(5)
    )
    (tmp_path / "dbt_build.log").write_text(lines)
    cm = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "dbt-env", "namespace": "data"},
                "data": {"DBT_BQ_LOCATION": "US"},
            }
        ],
    }
    (tmp_path / "cm.json").write_text(json.dumps(cm))
    d = investigate(load_bundle(tmp_path), "why did dbt fail?")
    assert d.category == Category.CONFIGURATION_ERROR and "DBT_BQ_LOCATION=US" in d.root_cause, d.root_cause
    cm["items"][0]["data"] = {"DBT_BQ_LOCATION": "EU"}
    (tmp_path / "cm.json").write_text(json.dumps(cm))
    d = investigate(load_bundle(tmp_path), "why did dbt fail?")
    assert not any(f.code == "wrong_location" for f in d.findings)


_MINIO_BLOCK = """API: {api}
Time: 09:{m:02d}:{s:02d} UTC 06/20/2024
DeploymentID: 8f2c4e61-73ab-4d19-9c0e-5b7a2d31f8e4
Error: {err}
       1: cmd/server-main.go:1021:cmd.serverMain()
"""


def test_minio_losing_its_quorum_is_its_clients_dependency_failure(tmp_path: Path) -> None:
    text = "$ kubectl -n storage logs objstore-pool-0-0 -c minio\n" + "".join(
        _MINIO_BLOCK.format(
            api="PutObject", m=12 + i, s=5, err="Storage resources are insufficient for the write operation x"
        )
        for i in range(5)
    )
    (tmp_path / "minio.log").write_text(text)
    d = investigate(load_bundle(tmp_path), "uploads fail with 503")
    assert d.category == Category.DEPENDENCY_FAILURE and "objstore-pool-0" in d.root_cause, d.root_cause
    # one scanner complaint is no quorum loss
    (tmp_path / "minio.log").write_text(
        _MINIO_BLOCK.format(api="SYSTEM()", m=1, s=1, err="Scanner cycle took too long (3h12m3.2s)")
        + _MINIO_BLOCK.format(api="SYSTEM()", m=2, s=1, err="Scanner cycle took too long (3h13m3.2s)")
    )
    d = investigate(load_bundle(tmp_path), "uploads fail with 503")
    assert not any(f.code == "store_quorum_lost" for f in d.findings)


def _envoy_inbound(n: int, client_ip: str) -> str:
    return "".join(
        f'[2025-09-30T09:{i:02d}:07.200Z] "- - -" 0 NR filter_chain_not_found - "-" 0 0 0 - "-" "-" "-" "-" "-" - - '
        f"10.42.5.14:8080 {client_ip}:3478{i} - -\n"
        for i in range(n)
    )


def _pa(mode: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "security.istio.io/v1",
                "kind": "PeerAuthentication",
                "metadata": {
                    "name": "ledger-strict",
                    "namespace": "ledger",
                    "creationTimestamp": "2025-09-30T07:48:03Z",
                },
                "spec": {"selector": {"matchLabels": {"app": "ledger-api"}}, "mtls": {"mode": mode}},
            }
        ],
    }


def test_a_strict_peer_authentication_shutting_out_a_sidecarless_client_is_the_configuration_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "ledger-api_istio-proxy.log").write_text(_envoy_inbound(6, "10.42.7.19"))
    pod = {
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "reconciler-29320920-7xkqd",
                    "namespace": "batch",
                    "annotations": {"sidecar.istio.io/inject": "false"},
                },
                "spec": {"containers": [{"name": "reconciler", "image": "reconciler:1.4.0"}]},
                "status": {"phase": "Failed", "podIP": "10.42.7.19"},
            }
        ],
    }
    (tmp_path / "pods.json").write_text(json.dumps(pod))
    (tmp_path / "pa.json").write_text(json.dumps(_pa("STRICT")))
    d = investigate(load_bundle(tmp_path), "why does the reconciler get connection resets?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "ledger-strict" in d.root_cause and "reconciler" in d.root_cause
    (tmp_path / "pa.json").write_text(json.dumps(_pa("PERMISSIVE")))
    d = investigate(load_bundle(tmp_path), "why does the reconciler get connection resets?")
    assert not any(f.code == "strict_mtls_plaintext_refused" for f in d.findings)


def test_a_host_lost_during_a_planned_reboot_and_uncordoned_since_is_back(tmp_path: Path) -> None:
    (tmp_path / "longhorn-manager.log").write_text(
        'time="2026-02-11T02:33:39Z" level=warning msg="Replica is marked as failed, instance manager on node '
        'worker-2 is unreachable"\n'
    )
    kured = (
        'time="2026-02-11T02:32:38Z" level=info msg="Running command: [/bin/systemctl reboot] for node: worker-2"\n'
        'time="2026-02-11T02:36:44Z" level=info msg="Uncordoning node worker-2"\n'
        'time="2026-02-11T03:36:45Z" level=info msg="Reboot not required"\n'
    )
    (tmp_path / "kured.log").write_text(kured)
    d = investigate(load_bundle(tmp_path), "is anything still wrong after the page?")
    lost = next(f for f in d.findings if f.code == "host_lost")
    assert lost.role == "benign", lost.title
    (tmp_path / "kured.log").write_text(kured.splitlines(keepends=True)[0])
    d = investigate(load_bundle(tmp_path), "is anything still wrong after the page?")
    assert next(f for f in d.findings if f.code == "host_lost").role == "cause"


SERIES_T0 = 1755597600  # 2025-08-19 10:00:00Z: where the metric series below start


def test_cpu_stolen_from_one_vm_is_infrastructure_and_steady_steal_is_not(tmp_path: Path) -> None:
    stolen = [0.0] * 20 + [0.4, 0.5, 0.6, 0.62, 0.65, 0.6, 0.63, 0.64]
    (tmp_path / "steal.json").write_text(
        json.dumps(
            prom_matrix(
                "node_cpu_steal_ratio",
                [
                    ({"node": "ip-10-42-7-19", "mode": "steal"}, stolen),
                    ({"node": "ip-10-42-9-3", "mode": "steal"}, [0.0] * 28),
                ],
                SERIES_T0,
            )
        )
    )
    d = investigate(load_bundle(tmp_path), "why is search slow?")
    assert d.category == Category.INFRASTRUCTURE and "ip-10-42-7-19" in d.root_cause, d.root_cause
    # a VM that always had some steal did not change
    (tmp_path / "steal.json").write_text(
        json.dumps(
            prom_matrix("node_cpu_steal_ratio", [({"node": "ip-10-42-7-19", "mode": "steal"}, [0.25] * 28)], SERIES_T0)
        )
    )
    d = investigate(load_bundle(tmp_path), "why is search slow?")
    assert not any(f.code == "cpu_steal" for f in d.findings)


def test_a_metaspace_capped_by_a_flag_is_a_configuration_error(tmp_path: Path) -> None:
    log = (
        "Picked up JAVA_TOOL_OPTIONS: -XX:MaxMetaspaceSize=96m -XX:+UseG1GC\n"
        "2024-09-24T11:05:40.112Z ERROR 1 --- [main] o.s.boot.SpringApplication : Application run failed\n"
        "Terminating due to java.lang.OutOfMemoryError: Metaspace\n"
    )
    (tmp_path / "claims-service.log").write_text(log)
    d = investigate(load_bundle(tmp_path), "why do the new pods crash?")
    assert d.category == Category.CONFIGURATION_ERROR and "MaxMetaspaceSize" in d.root_cause, d.root_cause
    (tmp_path / "claims-service.log").write_text(log.replace("-XX:MaxMetaspaceSize=96m ", ""))
    d = investigate(load_bundle(tmp_path), "why do the new pods crash?")
    assert not any(f.code == "jvm_area_capped" for f in d.findings)


def _agent_log(last_minute: int) -> str:
    return "".join(
        f"2025-06-12T14:{m:02d}:05.000Z [ERROR] agent: renew lease failed: Code: 503. Errors: * Vault is sealed\n"
        for m in range(last_minute - 9, last_minute + 1)
    )


def test_a_sealed_vault_is_its_clients_dependency_failure_until_it_is_unsealed(tmp_path: Path) -> None:
    (tmp_path / "vault-agent.log").write_text(_agent_log(50))
    (tmp_path / "app.log").write_text(
        "".join(f"2025-06-12T14:{m:02d}:30.000Z ERROR app: heartbeat ok\n" for m in range(40, 52))
    )
    d = investigate(load_bundle(tmp_path), "why do logins fail?")
    assert any(f.code == "vault_sealed" and f.role == "cause" for f in d.findings), d.root_cause
    # sealed for a while an hour ago, fine since
    (tmp_path / "vault-agent.log").write_text(_agent_log(15))
    (tmp_path / "app.log").write_text(
        "".join(f"2025-06-12T{h:02d}:{m:02d}:30.000Z INFO app: ok\n" for h in (14, 15) for m in range(0, 60, 5))
    )
    d = investigate(load_bundle(tmp_path), "is vault ok now?")
    assert not any(f.code == "vault_sealed" for f in d.findings)


def test_a_scrape_target_is_down_since_its_first_zero_not_its_last(tmp_path: Path) -> None:
    values = [1] * 10 + [0] * 10
    (tmp_path / "up.json").write_text(
        json.dumps(prom_matrix("up", [({"instance": "web-1:9100", "job": "node"}, values)], SERIES_T0))
    )
    d = investigate(load_bundle(tmp_path), "is web-1 down?")
    down = next(f for f in d.findings if f.code == "target_down")
    assert down.ts == 1755597600 + 60 * 10, down.title
