"""Stop 34: rules from the dev74-dev82 batches, each a mechanism rather than a stack: a Lambda timeout set below the
function's own work; a Lambda execution environment that leaks memory; a .NET resilience pipeline's retried attempts;
a series of bad records risen from zero; client devices failing TLS handshakes; a release that multiplies its calls to
another service; a volume pinned to a zone no node can take; an announced maintenance window. Each test asserts the
negative case beside the rule."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.analyzers.changes import announced_window
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from diagnosis.reasoning import _says_failing_now
from tests.toolkit.exports import iso, prom_matrix

T0 = 1717592400  # 2024-06-05 13:00:00Z


def _lambda_log(durations: list[float], timeouts: int, limit: float) -> str:
    events = []
    t = T0
    for i, d in enumerate(durations):
        rid = f"00000000-0000-4000-8000-{i:012d}"
        events.append({"timestamp": t * 1000, "message": f"START RequestId: {rid} Version: $LATEST\n"})
        events.append(
            {
                "timestamp": t * 1000 + 10,
                "message": f"REPORT RequestId: {rid}\tDuration: {d * 1000:.2f} ms\tBilled Duration: {d * 1000:.0f} ms"
                "\tMemory Size: 512 MB\tMax Memory Used: 96 MB\t\n",
            }
        )
        t += 30
    for i in range(timeouts):
        rid = f"10000000-0000-4000-8000-{i:012d}"
        events.append(
            {"timestamp": t * 1000, "message": f"{iso(t)} {rid} Task timed out after {limit:.2f} seconds\n\n"}
        )
        t += 30
    return json.dumps({"events": events})


def test_a_lambda_timeout_below_its_normal_work_is_the_configuration_cause(tmp_path: Path) -> None:
    (tmp_path / "filter-log-events.json").write_text(_lambda_log([2.6, 2.7, 2.5, 2.8, 2.65, 2.9] * 3, 6, 3.0))
    d = investigate(load_bundle(tmp_path), "why do refunds fail?")
    assert any(f.code == "function_timeout_too_low" for f in d.findings), d.root_cause
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause


def test_timeouts_of_a_function_that_usually_finishes_fast_are_not_its_timeout_setting(tmp_path: Path) -> None:
    # invocations that finish take a tenth of the limit: something it waits on got slow, not the setting
    (tmp_path / "filter-log-events.json").write_text(_lambda_log([2.1, 2.5, 1.9, 3.0, 2.2, 2.4] * 3, 6, 30.0))
    d = investigate(load_bundle(tmp_path), "why do refunds fail?")
    assert not any(f.code == "function_timeout_too_low" for f in d.findings), d.root_cause


def _lambda_tail(used: list[int]) -> str:
    stream = "2024/04/23/[58]5a4ac9282125c082335f98a655f24aa7"
    lines = [f"2024-04-23T08:16:03.152000+00:00 {stream} INFO quote-engine v2.14.0 cold start, loading rate tables"]
    for i, mb in enumerate(used):
        lines.append(
            f"2024-04-23T08:{17 + i:02d}:03.568436+00:00 {stream} REPORT RequestId: 9d7d542e-d573-49e7-a949-"
            f"f194ccbe{i:04d}\tDuration: 155.44 ms\tBilled Duration: 156 ms\tMemory Size: 1024 MB\t"
            f"Max Memory Used: {mb} MB\t"
        )
    return "\n".join(lines) + "\n"


def test_a_lambda_environment_whose_memory_climbs_to_its_size_is_a_leak_in_the_release(tmp_path: Path) -> None:
    (tmp_path / "tail.txt").write_text(_lambda_tail([206, 206, 308, 369, 432, 523, 589, 686, 757, 881, 963, 1024]))
    d = investigate(load_bundle(tmp_path), "why are quotes slow?")
    leak = next((f for f in d.findings if f.code == "memory_leak"), None)
    assert leak is not None and "2.14.0" in leak.title and "quote-engine" in leak.title, d.root_cause
    assert d.category == Category.CODE_DEFECT


def test_a_lambda_environment_whose_memory_levels_off_is_no_leak(tmp_path: Path) -> None:
    (tmp_path / "tail.txt").write_text(_lambda_tail([206, 240, 251, 255, 256, 256, 257, 256, 258, 257, 256, 257]))
    d = investigate(load_bundle(tmp_path), "why are quotes slow?")
    assert not any(f.code == "memory_leak" for f in d.findings), d.root_cause


def _polly_log(attempts: int) -> str:
    lines = [f"2024-07-22T09:{i // 60:02d}:{i % 60:02d}.000Z info: quote served" for i in range(60)]
    for i in range(attempts):
        lines.append(
            f"2024-07-22T10:{i:02d}:18.263Z warn: Polly[3] Execution attempt. Source: 'northwind-rates/Standard-Retry',"
            " Operation Key: '', Result: '503', Handled: 'True', Attempt: '0', Execution Time: 3199.4636ms"
        )
    return "\n".join(lines) + "\n"


def test_many_retried_attempts_answered_5xx_name_the_failing_client(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text(_polly_log(20))
    d = investigate(load_bundle(tmp_path), "why do quotes fail?")
    assert any(f.code == "upstream_5xx" and "northwind-rates" in f.object for f in d.findings), d.root_cause


def test_a_handful_of_retried_attempts_is_no_failing_upstream(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text(_polly_log(3))
    d = investigate(load_bundle(tmp_path), "is anything wrong?")
    assert not any(f.code == "upstream_5xx" for f in d.findings), d.root_cause


def test_a_bad_record_series_risen_from_zero_is_bad_data(tmp_path: Path) -> None:
    series = prom_matrix("feature_nan_ratio", [({"service": "fraud-scorer"}, [0.0] * 12 + [0.31] * 12)], T0, 300)
    (tmp_path / "nan.json").write_text(json.dumps(series))
    d = investigate(load_bundle(tmp_path), "why did the block rate drop?")
    assert d.category == Category.DATA_QUALITY, d.root_cause


def test_a_bad_record_series_present_all_along_is_not_new_bad_data(tmp_path: Path) -> None:
    series = prom_matrix("feature_nan_ratio", [({"service": "fraud-scorer"}, [0.3, 0.31, 0.29, 0.3] * 6)], T0, 300)
    (tmp_path / "nan.json").write_text(json.dumps(series))
    d = investigate(load_bundle(tmp_path), "why did the block rate drop?")
    assert not any(f.analyzer == "bad_record_series" for f in d.findings), d.root_cause


def _tls_log(clients: int) -> str:
    lines = [f"2025-03-11T02:{i // 60:02d}:{i % 60:02d}.000000+00:00 [info] msg: client_connected" for i in range(40)]
    for i in range(clients):
        lines.append(
            f"2025-03-11T02:{20 + i // 60:02d}:{i % 60:02d}.000000+00:00 [warning] msg: ssl_handshake_failed, "
            f"peername: 100.64.{i // 200}.{i % 200 + 10}:{30000 + i}, listener: 'ssl:default', reason: {{tls_alert,"
            '{certificate_expired,"TLS server: In state certify received CLIENT ALERT: Fatal - Certificate Expired"}}'
        )
    return "\n".join(lines) + "\n"


def test_a_few_clients_failing_tls_handshakes_are_not_the_servers_certificate(tmp_path: Path) -> None:
    (tmp_path / "emqx.log").write_text(_tls_log(4))
    d = investigate(load_bundle(tmp_path), "is the broker ok?")
    assert not any(f.code == "tls_certificate_expired" for f in d.findings), d.root_cause


def test_every_client_failing_tls_handshakes_is_the_servers_certificate(tmp_path: Path) -> None:
    (tmp_path / "emqx.log").write_text(_tls_log(60))
    d = investigate(load_bundle(tmp_path), "why can no device connect?")
    assert any(f.code == "tls_certificate_expired" for f in d.findings), d.root_cause


def _rs(name: str, image: str, created: float) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "creationTimestamp": iso(created).replace(".000", ""),
            "ownerReferences": [{"kind": "Deployment", "name": "basket"}],
        },
        "spec": {"template": {"spec": {"containers": [{"name": "basket", "image": image}]}}},
    }


def _rates(caller: list[float], callee: list[float]) -> dict:
    def res(job: str, values: list[float]) -> dict:
        return {"metric": {"job": job}, "values": [[T0 + i * 60, str(v)] for i, v in enumerate(values)]}

    result = [res("basket", caller), res("levy", callee)]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def test_a_release_that_multiplies_calls_at_flat_traffic_is_a_retry_storm(tmp_path: Path) -> None:
    rs = {"apiVersion": "v1", "kind": "List", "items": [_rs("basket-5d9", "reg/basket:5.2.0", T0 + 20 * 60)]}
    (tmp_path / "rs.json").write_text(json.dumps(rs))
    (tmp_path / "requests_rps.json").write_text(json.dumps(_rates([90.0] * 40, [120.0] * 21 + [660.0] * 19)))
    d = investigate(load_bundle(tmp_path), "why is levy slow?")
    assert any(f.code == "call_amplification" for f in d.findings), d.root_cause
    assert d.category == Category.CODE_DEFECT and "basket" in d.root_cause


def test_calls_that_grew_with_the_callers_traffic_are_no_retry_storm(tmp_path: Path) -> None:
    rs = {"apiVersion": "v1", "kind": "List", "items": [_rs("basket-5d9", "reg/basket:5.2.0", T0 + 20 * 60)]}
    (tmp_path / "rs.json").write_text(json.dumps(rs))
    (tmp_path / "requests_rps.json").write_text(
        json.dumps(_rates([90.0] * 21 + [480.0] * 19, [120.0] * 21 + [660.0] * 19))
    )
    d = investigate(load_bundle(tmp_path), "why is levy slow?")
    assert not any(f.code == "call_amplification" for f in d.findings), d.root_cause


def test_an_announced_window_is_read_on_the_weekday_it_names() -> None:
    said = 1741622520.0  # Mon 2025-03-10 16:02Z
    window = announced_window("the weekly scan runs Tue 02:00-04:00 UTC against the public site", said)
    assert window == (1741658400.0, 1741665600.0)  # Tue 2025-03-11 02:00-04:00Z
    assert announced_window("no time given here", said) is None


def test_asking_whether_something_is_still_wrong_is_not_saying_it_is() -> None:
    assert not _says_failing_now("fare-engine paged this morning: is anything still wrong?")
    assert _says_failing_now("checkout is still failing after the rollback")


def _deletes_log(refused: int) -> str:
    lines = []
    for i in range(30):
        lines.append(json.dumps({"level": "info", "ts": T0 + i * 10, "msg": "email sent", "queue": "notifications"}))
    for i in range(refused):
        lines.append(
            json.dumps(
                {
                    "level": "warn",
                    "ts": T0 + 400 + i * 10,
                    "msg": "delete batch had failures",
                    "first_failure": {"Id": "0", "Code": "ReceiptHandleIsInvalid", "Message": "handle not valid"},
                }
            )
        )
    return "\n".join(lines) + "\n"


def test_a_consumer_whose_deletes_are_refused_is_the_cause_of_its_duplicates(tmp_path: Path) -> None:
    (tmp_path / "notification-worker.log").write_text(_deletes_log(8))
    d = investigate(load_bundle(tmp_path), "why do customers get the same email five times?")
    assert any(f.code == "queue_delete_refused" for f in d.findings), d.root_cause
    assert d.category == Category.CODE_DEFECT


def test_one_refused_delete_is_no_consumer_bug(tmp_path: Path) -> None:
    (tmp_path / "notification-worker.log").write_text(_deletes_log(1))
    d = investigate(load_bundle(tmp_path), "is anything wrong?")
    assert not any(f.code == "queue_delete_refused" for f in d.findings), d.root_cause


def test_a_log_that_prints_tables_is_still_read_as_a_log(tmp_path: Path) -> None:
    lines = [f"I1105 09:29:{i:02d}.118031 1 server.cc:{600 + i}] loading model step {i}" for i in range(12)]
    lines += ["+---------+---------+--------+", "| Model   | Version | Status |", "+---------+---------+--------+"]
    lines += [f"| model_{i} | 1       | READY  |" for i in range(6)] + ["+---------+---------+--------+"]
    lines += ["E1105 09:29:30.731140 1 model_lifecycle.cc:638] failed to load 'ctr': the model configuration "
              "specifies 16 dims but the model expects 13"]  # fmt: skip
    (tmp_path / "triton.log").write_text("\n".join(lines) + "\n")
    ev = load_bundle(tmp_path)
    assert [i.kind for i in ev] == ["log"], [i.kind for i in ev]


def test_a_service_link_variable_read_as_a_port_number_is_a_configuration_error() -> None:
    from diagnosis.analyzers._kube import _LOG_RULES

    line = "ValueError: invalid literal for int() with base 10: 'tcp://10.0.148.27:6379'"
    rule = next(r for r in _LOG_RULES if r[3].search(line))
    assert rule[0] == "configuration_error" and "enableServiceLinks" in rule[2]
    assert not any(r[0] == "configuration_error" for r in _LOG_RULES if r[3].search("ValueError: bad value 'x'"))
