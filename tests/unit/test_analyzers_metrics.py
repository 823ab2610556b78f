"""Metrics analyzer and diagnosis.series: saturation, trends with time to full, step changes, anomalies with the
warm-up excluded, recovered spikes."""

from __future__ import annotations

import random

from diagnosis import series as S
from diagnosis.analyzers.metrics import metric_series
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code, causes, series


def test_first_point_of_a_cpu_sample_is_not_an_anomaly() -> None:
    # psutil's first cpu_percent reads high (no previous sample): the quiet-machine false alarm
    b = Builder()
    b.metric("cpu_percent", series(T0, 2, [100.0, 3.1, 2.9, 4.0, 3.5, 2.8, 3.3, 3.0, 2.7, 3.6]), source="host")
    assert metric_series(b.set()) == []


def test_series_helpers() -> None:
    pts = series(T0, 60, [10, 11, 10, 12, 11, 10, 50, 51, 49, 50, 52, 50])
    step = S.step_change(pts)
    assert step is not None and step.ts == T0 + 6 * 60 and step.before < 12 and step.after > 48
    assert S.step_change(series(T0, 60, [10, 11, 10, 12, 90, 10, 11, 10, 12, 11])) is None  # a spike, not a step
    ttf = S.time_to_exhaustion(series(T0, 60, [100 - 2 * i for i in range(20)]))
    assert ttf is not None and abs(ttf - 62 * 60 / 2 * 2 / 2) < 120
    assert S.saturation(series(T0, 60, [50, 95, 96]), 100) is not None
    assert S.saturation(series(T0, 60, [95, 96, 50]), 100) is None
    rate = S.counter_rate(series(T0, 10, [0, 100, 200, 50, 150]))
    assert [r for _, r in rate] == [10.0, 10.0, 5.0, 10.0]
    assert S.anomalies(series(T0, 1, [100, 3, 3, 4, 3, 3, 4, 3])) == []
    assert S.human_duration(5400) == "1h30m"


def test_robust_scores_flag_the_spike_only() -> None:
    # the metric_anomalies tool computes the same scores in torch (tests/unit/test_tools.py checks it there)
    rng = random.Random(7)
    values = [50 + rng.gauss(0, 2) for _ in range(60)]
    values[40] = 90
    scores = S.robust_scores(values, 20)
    assert [i for i, z in enumerate(scores) if z > 3.5] == [40]


def test_memory_near_container_limit_is_a_cause() -> None:
    b = Builder()
    lab = {"namespace": "shop", "pod": "cart-6d8f9c7b5-zx2vq", "container": "app"}
    gib = 2**30
    b.metric(
        "container_memory_working_set_bytes",
        series(T0, 60, [0.5 * gib, 0.6 * gib, 0.8 * gib, 0.93 * gib, 0.95 * gib, 0.97 * gib]),
        lab,
    )
    b.metric(
        "kube_pod_container_resource_limits",
        series(T0, 60, [gib] * 6),
        {**lab, "resource": "memory", "instance": "ksm:8080"},
    )
    ev = b.set()
    found = metric_series(ev)
    [cause] = causes(found)
    assert (
        cause.code == "memory_near_limit"
        and "pod:shop/cart-6d8f9c7b5-zx2vq" in cause.tags
        and "service:cart" in cause.tags
    )
    assert_refs_real(ev, found)


def test_disk_filling_gives_time_to_full_from_avail_and_size() -> None:
    b = Builder()
    lab = {"instance": "node-1:9100", "mountpoint": "/var/lib/docker", "device": "/dev/nvme1n1"}
    size = 100e9
    b.metric("node_filesystem_avail_bytes", series(T0, 300, [40e9 - i * 1e9 for i in range(20)]), lab)
    b.metric("node_filesystem_size_bytes", series(T0, 300, [size] * 20), lab)
    [cause] = causes(metric_series(b.set()))
    assert cause.code == "trend_to_exhaustion" and "fs:/var/lib/docker" in cause.tags
    assert "reaches its limit 100 in about" in cause.mechanism


def test_free_memory_falling_to_zero_on_cloudwatch() -> None:
    b = Builder()
    b.metric(
        "FreeableMemory",
        series(T0, 300, [4e9 - i * 2e8 for i in range(15)]),
        {"InstanceId": "i-0abc"},
        source="cloudwatch",
    )
    [cause] = causes(metric_series(b.set()))
    assert cause.code == "trend_to_exhaustion" and "zero" in cause.title


def test_latency_step_is_a_symptom_at_time_t() -> None:
    b = Builder()
    rng = random.Random(1)
    vals = [0.12 + rng.uniform(-0.01, 0.01) for _ in range(20)] + [0.9 + rng.uniform(-0.05, 0.05) for _ in range(10)]
    b.metric("http_request_duration_seconds_p99", series(T0, 60, vals), {"service": "checkout"})
    [f] = metric_series(b.set())
    assert f.role == "symptom" and f.code == "latency" and f.ts == T0 + 20 * 60 and "service:checkout" in f.tags


def test_short_spike_that_recovered_is_benign() -> None:
    b = Builder()
    rng = random.Random(2)
    vals = [40 + rng.uniform(-2, 2) for _ in range(30)]
    vals[12] = 98
    vals[13] = 97
    b.metric("node_cpu_utilization_percent", series(T0, 60, vals), {"instance": "node-2:9100"})
    [f] = metric_series(b.set())
    assert f.role == "benign" and f.code == "spike_recovered"


def test_an_error_ratio_under_one_percent_is_not_a_failure_however_far_from_zero() -> None:
    b = Builder()
    vals = [0.0] * 30 + [0.0004, 0.0009, 0.0, 0.0008, 0.0007, 0.0006, 0.0009, 0.0008]
    b.metric("http_5xx_ratio", series(T0, 60, vals), {"service": "catalog"})
    assert all(f.role == "benign" for f in metric_series(b.set()))
    b = Builder()
    b.metric("http_5xx_ratio", series(T0, 60, [0.0] * 30 + [0.04, 0.09, 0.08, 0.08, 0.07, 0.06, 0.09, 0.08]))
    assert [f.role for f in metric_series(b.set())] == ["symptom"]


def test_cpu_pinned_at_100_is_a_symptom_not_a_cause() -> None:
    b = Builder()
    b.metric("node_cpu_utilization_percent", series(T0, 60, [30] * 10 + [99] * 5), {"instance": "node-2:9100"})
    [f] = metric_series(b.set())
    assert f.role == "symptom" and f.code == "cpu_high"


def test_error_counter_rate_step_despite_a_reset() -> None:
    b = Builder()
    vals, total, offset = [], 0.0, 0.0
    for i in range(30):
        total += 1 if i < 15 else 40
        if i == 20:
            offset = total - 5  # the process restarted: its counter starts again from zero
        vals.append(total - offset)
    b.metric("http_requests_errors_total", series(T0, 60, vals), {"service": "api", "code": "500"})
    found = metric_series(b.set())
    assert [f.code for f in found] == ["http_5xx"]


def test_rds_series_are_left_to_the_database_analyzer() -> None:
    b = Builder()
    b.metric("CPUUtilization", series(T0, 60, [99] * 10), {"DBInstanceIdentifier": "db1"}, source="cloudwatch")
    assert metric_series(b.set()) == []


def test_flat_and_noisy_series_give_nothing() -> None:
    b = Builder()
    rng = random.Random(3)
    b.metric("node_load1", series(T0, 60, [1 + rng.uniform(-0.2, 0.2) for _ in range(60)]), {"instance": "a:9100"})
    b.metric("container_memory_working_set_bytes", series(T0, 60, [3e8] * 30), {"pod": "x-1", "namespace": "d"})
    assert metric_series(b.set()) == []


def test_ec2_system_status_check_failure_is_infrastructure() -> None:
    b = Builder()
    lab = {"InstanceId": "i-0c1d2e3f4a5b6c7d8", "namespace": "AWS/EC2"}
    b.metric("StatusCheckFailed_System", series(T0, 60, [0] * 20 + [1] * 10), lab, source="cloudwatch")
    b.metric("StatusCheckFailed_Instance", series(T0, 60, [0] * 21 + [1] * 9), lab, source="cloudwatch")
    found = metric_series(b.set())
    system = by_code(found, "ec2_status_check_system")[0]
    assert system.category == "infrastructure" and "i-0c1d2e3f4a5b6c7d8" in system.object and system.ts == T0 + 20 * 60
    assert "ec2_status_check_instance" in system.explains


def test_health_colour_red_names_the_cluster_and_green_is_quiet() -> None:
    b = Builder()
    base = {"cluster": "es-prod", "instance": "es-exporter:9114"}
    b.metric("elasticsearch_cluster_health_status", series(T0, 60, [0] * 10 + [1] * 10), {**base, "color": "red"})
    b.metric("elasticsearch_cluster_health_status", series(T0, 60, [1] * 10 + [0] * 10), {**base, "color": "green"})
    [f] = metric_series(b.set())
    assert f.code == "dependency_unhealthy" and f.object == "es-prod" and f.category == "dependency_failure"


def test_up_zero_is_a_target_down_symptom() -> None:
    b = Builder()
    b.metric("up", series(T0, 60, [1] * 10 + [0] * 5), {"instance": "mq-02:9100", "job": "node"})
    [f] = metric_series(b.set())
    assert f.code == "target_down" and f.role == "symptom"


def test_busier_but_within_capacity_is_benign() -> None:
    b = Builder()
    rng = random.Random(4)
    cpu = [20 + rng.uniform(-1, 1) for _ in range(20)] + [55 + rng.uniform(-1, 1) for _ in range(10)]
    b.metric("node_cpu_utilization_percent", series(T0, 60, cpu), {"instance": "node-3:9100"})
    b.metric("http_requests_per_second", series(T0, 60, [100.0] * 20 + [250.0] * 10), {"service": "shop"})
    found = metric_series(b.set())
    assert found and all(f.role == "benign" and f.code == "shift_within_capacity" for f in found)


def test_consumer_lag_rising_is_a_symptom() -> None:
    b = Builder()
    b.metric("kafka_consumergroup_lag", series(T0, 60, [10.0] * 20 + [5000.0] * 10), {"consumergroup": "billing"})
    [f] = metric_series(b.set())
    assert f.role == "symptom"


def test_memory_high_all_along_is_a_steady_state() -> None:
    b = Builder()
    lab = {"namespace": "shop", "pod": "search-6d8f9c7b5-zx2vq", "container": "app"}
    gib = 2**30
    b.metric("container_memory_working_set_bytes", series(T0, 60, [0.93 * gib] * 20), lab)
    b.metric("kube_pod_container_resource_limits", series(T0, 60, [gib] * 20), {**lab, "resource": "memory"})
    [f] = metric_series(b.set())
    assert f.role == "benign" and f.code == "memory_high_steady"


def test_a_cloudwatch_status_colour_in_the_name_is_a_health_verdict() -> None:
    from diagnosis.analyzers.metrics import metric_series
    from tests.unit._evidence_builders import T0, Builder, causes, series

    b = Builder()
    labels = {"DomainName": "catalog-os", "namespace": "AWS/ES"}
    b.metric("ClusterStatus.red", series(T0, 60, [0.0] * 5 + [1.0] * 5), labels, "cloudwatch")
    b.metric("ClusterStatus.yellow", series(T0, 60, [0.0] * 10), labels, "cloudwatch")
    [cause] = causes(metric_series(b.set()))
    assert cause.code == "dependency_unhealthy" and cause.object == "catalog-os" and "red" in cause.title


def test_failed_calls_per_dependency_name_it_and_a_series_that_appears_failing_is_a_step() -> None:
    b = Builder()
    ok = {"target": "api.carrier.example.net", "resultCode": "200"}
    bad = {"target": "api.carrier.example.net", "resultCode": "503"}
    b.metric("failed", series(T0, 600, [0.0] * 12), ok)
    b.metric("failed", series(T0 + 7 * 600, 600, [244.0, 517.0, 188.0, 230.0, 210.0]), bad)
    found = metric_series(b.set())
    [f] = [f for f in found if f.role == "cause"]
    assert f.code == "upstream_5xx" and "api.carrier.example.net" in f.object and f.ts == T0 + 7 * 600
