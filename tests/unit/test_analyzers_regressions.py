"""Release regressions at flat traffic: a memory leak (growth without levelling off, with time to the limit) and
CPU pinned at its limit after a new version are code defects; the same growth with traffic is not."""

from __future__ import annotations

import time
from typing import Any

from diagnosis.analyzers.metrics import _kind
from diagnosis.analyzers.regressions import release_regressions
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, causes, series

H = 3600.0
MIB = 2**20


def _rs(b: Builder, name: str, image: str, created: str, mem_limit: str = "1Gi", cpu_limit: str = "1") -> None:
    limits = {"memory": mem_limit, "cpu": cpu_limit}
    container = {"name": "api", "image": image, "resources": {"limits": limits}}
    data: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }
    b.raw("k8s/ReplicaSet", f"ReplicaSet/shop/{name}", data)


def _leak_values() -> list[float]:
    flat = [300 * MIB + (i % 3) * 5 * MIB for i in range(24)]  # a day steady at ~300 MiB
    saw = []
    for _ in range(3):  # after the release: grows 30 MiB/h, restarts at the limit, grows again
        saw += [300 * MIB + k * 30 * MIB for k in range(20)]
    return flat + saw


def _traffic(b: Builder, n: int, factor_after: float = 1.0) -> None:
    vals = [100.0 + (i % 5) for i in range(24)] + [(100.0 + (i % 5)) * factor_after for i in range(n - 24)]
    b.metric("http_requests_per_second", series(T0, H, vals), {"service": "cart-api"})


def _leak_bundle(factor_after: float = 1.0) -> Builder:
    b = Builder()
    vals = _leak_values()
    _rs(b, "cart-api-7f9c6d5b8", "registry/cart-api:2.4.0", "2023-11-15T22:13:20Z")  # T0 + 24h
    b.metric("container_memory_working_set_bytes", series(T0, H, vals), {"container": "cart-api"})
    _traffic(b, len(vals), factor_after)
    return b


def test_memory_growing_without_levelling_off_after_a_release_at_flat_traffic_is_a_leak() -> None:
    b = _leak_bundle()
    found = release_regressions(b.set())
    [leak] = causes(found)
    assert leak.code == "memory_leak" and leak.category == "code_defect"
    assert "2.4.0" in leak.mechanism and "cart-api" in leak.mechanism
    assert "30 MiB/h" in leak.mechanism and "1024 MiB limit in" in leak.mechanism
    assert "oom_killed" in leak.explains
    assert_refs_real(b.set(), found)


def test_memory_that_grows_with_the_traffic_is_not_a_leak() -> None:
    assert causes(release_regressions(_leak_bundle(factor_after=3.0).set())) == []


def test_memory_that_levels_off_after_a_release_is_not_a_leak() -> None:
    b = Builder()
    _rs(b, "cart-api-7f9c6d5b8", "registry/cart-api:2.4.0", "2023-11-15T22:13:20Z")
    flat = [300 * MIB] * 24
    warm = [300 * MIB + min(k, 6) * 60 * MIB for k in range(30)]  # a cache filling, then steady
    b.metric("container_memory_working_set_bytes", series(T0, H, flat + warm), {"container": "cart-api"})
    assert causes(release_regressions(b.set())) == []


def _cpu_bundle(after_rps: float) -> Builder:
    b = Builder()
    start = T0 + 1800
    for pod in ("a1b2c", "d3e4f"):
        b.metric(
            "container_cpu_usage_seconds_total:rate1m",
            series(T0, 60, [0.12 + (i % 3) * 0.01 for i in range(30)]),
            {"pod": f"render-6d5c4b8f7-{pod}", "container": "render", "image": "reg/render:1.8.3"},
        )
        b.metric(
            "container_cpu_usage_seconds_total:rate1m",
            series(start, 60, [0.98 + (i % 2) * 0.01 for i in range(30)]),
            {"pod": f"render-79f8c6d5b-{pod}", "container": "render", "image": "reg/render:1.9.0"},
        )
    b.raw(
        "k8s/Deployment",
        "Deployment/docs/render",
        {
            "metadata": {"name": "render", "namespace": "docs"},
            "spec": {"template": {"spec": {"containers": [{"name": "render", "resources": {"limits": {"cpu": "1"}}}]}}},
        },
    )
    b.metric("requests", series(T0, 60, [10.0] * 30 + [after_rps] * 30), {"service": "render", "code": "200"})
    return b


def test_cpu_pinned_at_its_limit_by_a_new_version_at_flat_traffic_is_a_code_defect() -> None:
    b = _cpu_bundle(after_rps=10.5)
    found = release_regressions(b.set())
    [cause] = causes(found)
    assert cause.code == "cpu_regression" and cause.category == "code_defect"
    assert "1.9.0" in cause.mechanism and "render" in cause.object
    assert_refs_real(b.set(), found)


def test_cpu_at_its_limit_with_three_times_the_traffic_is_not_a_code_defect() -> None:
    assert causes(release_regressions(_cpu_bundle(after_rps=30.0).set())) == []


def test_a_5xx_labelled_request_series_counts_errors_not_traffic() -> None:
    assert _kind("requests", {"service": "x", "code": "504"}) == "errors"
    assert _kind("requests", {"service": "x", "code": "200"}) != "errors"


def test_a_leak_after_a_release_outside_kubernetes_seen_in_systemd_and_the_jvm_live_set() -> None:
    from diagnosis.investigate import investigate

    b = Builder()
    rel = T0 + 48 * 3600
    b.log(
        "journal-quote-pricer.txt",
        [
            (rel - 9, "info", "pricer-vm-02 systemd[1]: Stopping quote-pricer (5.1.4)..."),
            (rel, "info", "pricer-vm-02 systemd[1]: Started quote-pricer (5.2.0)."),
            (
                rel + 70 * 3600,
                "error",
                "pricer-vm-02 java[118822]: Terminating due to java.lang.OutOfMemoryError: Java heap space",
            ),
        ],
    )
    heap = [640e6 + (i % 3) * 5e6 for i in range(48)] + [650e6 + 46e6 * i for i in range(70)]
    b.metric("jvm_gc_live_data_size_bytes", series(T0, 3600, heap), {"job": "quote-pricer"})
    b.metric("http_requests", series(T0, 3600, [44.0 + (i % 2) for i in range(118)]), {"job": "quote-pricer"})
    ev = b.set()
    found = release_regressions(ev)
    [cause] = causes(found)
    assert cause.code == "memory_leak" and "5.2.0" in cause.object
    assert_refs_real(ev, found)
    assert investigate(ev).category == "code_defect"


def test_a_restart_at_the_same_version_is_no_release() -> None:
    from diagnosis.analyzers.regressions import releases

    b = Builder()
    b.log(
        "journal-quote-pricer.txt",
        [
            (T0, "info", "systemd[1]: Started quote-pricer (5.2.0)."),
            (T0 + 60, "info", "systemd[1]: Started quote-pricer (5.2.0)."),
        ],
    )
    assert releases(b.set()) == []


def test_a_pod_names_the_workload_of_a_series_better_than_its_container() -> None:
    from diagnosis.analyzers.regressions import _workload

    assert _workload({"pod": "webhook-relay-58b7c9d6f-4tnwq", "container": "relay"}) == "webhook-relay"
    assert _workload({"container": "relay"}) == "relay"


def _db_bundle(rps_after: float) -> Builder:
    b = Builder()
    rel = T0 + 3600

    def rs(name: str, created: float, tag: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "namespace": "catalog",
                "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
                "ownerReferences": [{"kind": "Deployment", "name": "catalog-graphql"}],
            },
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": f"reg/catalog-graphql:{tag}"}]}}},
        }

    b.raw(
        "k8s/ReplicaSet", "ReplicaSet/catalog/catalog-graphql-5f6e7d8c9", rs("catalog-graphql-5f6e7d8c9", rel, "3.14.0")
    )
    cpu = [21.0 + (i % 3) for i in range(12)] + [75.0 + (i % 3) for i in range(12)]
    b.metric(
        "CPUUtilization", series(rel - 12 * 300, 300, cpu), {"DBClusterIdentifier": "catalog-aurora"}, "cloudwatch"
    )
    b.metric("graphql_operations:rate5m", series(rel - 12 * 300, 300, [22.0] * 12 + [rps_after] * 12))
    b.raw(
        "pi/sql",
        "pi/db.sql_tokenized/F0C1",
        {"group": "db.sql_tokenized", "statement": "SELECT * FROM product_images WHERE product_id = ?", "id": "F0C1",
         "load": 5.1, "metric": "db.load.avg"},
    )  # fmt: skip
    b.raw(
        "pi/sql",
        "pi/db.sql_tokenized/0A9B",
        {"group": "db.sql_tokenized", "statement": "SELECT * FROM products WHERE category_id = ?", "id": "0A9B",
         "load": 0.3, "metric": "db.load.avg"},
    )  # fmt: skip
    return b


def test_database_cpu_stepping_up_after_a_client_release_at_flat_traffic_is_the_release() -> None:
    ev = _db_bundle(22.5).set()
    found = release_regressions(ev)
    [cause] = causes(found)
    assert cause.code == "query_regression" and "3.14.0" in cause.object and "product_images" in cause.mechanism
    assert_refs_real(ev, found)


def test_database_cpu_that_follows_three_times_the_traffic_is_load() -> None:
    assert causes(release_regressions(_db_bundle(66.0).set())) == []
