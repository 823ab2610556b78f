"""Finite limits other than memory, disk and descriptors: ephemeral ports, conntrack, PIDs/threads, broker alarms,
cloud credit balances, Redis maxmemory named by its host. Each is resource_exhaustion on what ran out."""

from __future__ import annotations

import pytest

from diagnosis.analyzers.database import database
from diagnosis.analyzers.host import resource_limits
from diagnosis.analyzers.metrics import metric_series
from diagnosis.analyzers.network import network_failures
from diagnosis.investigate import investigate
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, causes, series


def _log(msg: str, level: str | None = "error", obj: str = "Pod/shop/orders-api-7d9f8c6b5-x2k4p/app") -> Builder:
    b = Builder()
    b.log(obj, [(T0 + i * 20, level, msg) for i in range(6)])
    return b


@pytest.mark.parametrize(
    ("msg", "level", "code"),
    [
        ('Get "http://pricing-svc:8080/p": dial tcp 10.0.3.3:8080: connect: cannot assign requested address', "error",
         "ephemeral_ports_exhausted"),
        ("java.net.BindException: Cannot assign requested address (connect failed)", "error",
         "ephemeral_ports_exhausted"),
        ("kernel: nf_conntrack: nf_conntrack: table full, dropping packet", "warn", "conntrack_table_full"),
        ("bash: fork: retry: Resource temporarily unavailable", "error", "pid_limit_reached"),
        ("runtime: failed to create new OS thread (have 4097 already; errno=11)", "error", "pid_limit_reached"),
        ("kernel: cgroup: fork rejected by pids controller in /kubepods.slice/cri-containerd-abc.scope", "info",
         "pid_limit_reached"),
        ("RuntimeError: can't start new thread", "error", "pid_limit_reached"),
        ("disk resource limit alarm set on node rabbit@mq-1. **** Publishers will be blocked until this alarm "
         "clears ****", "warn", "broker_resource_alarm"),
        ("flood stage disk watermark [95%] exceeded on [es-data-2][/usr/share/elasticsearch/data] free: 1.2gb[2.4%], "
         "all indices on this node will be marked read-only", "warn", "broker_resource_alarm"),
    ],
)  # fmt: skip
def test_each_limit_is_resource_exhaustion(msg: str, level: str, code: str) -> None:
    ev = _log(msg, level).set()
    found = resource_limits(ev)
    [cause] = causes(found)
    assert cause.code == code and cause.category == "resource_exhaustion"
    assert_refs_real(ev, found)
    assert investigate(ev).category == "resource_exhaustion"


def test_a_broker_alarm_names_the_node() -> None:
    msg = "memory resource limit alarm set on node rabbit@mq-1. **** Publishers will be blocked ****"
    [cause] = causes(resource_limits(_log(msg, "warn", "logs/rabbitmq.log").set()))
    assert "rabbit@mq-1" in cause.object


def test_ports_exhausted_is_not_the_target_failing() -> None:
    msg = 'Get "http://pricing-svc:8080/p": dial tcp 10.0.3.3:8080: connect: cannot assign requested address'
    assert causes(network_failures(_log(msg).set())) == []


def test_a_server_binding_an_address_it_lacks_is_not_port_exhaustion() -> None:
    # the address is not this host's: its configuration names another's (stop 29: said as a configuration error)
    msg = "listen tcp 10.9.9.9:8080: bind: cannot assign requested address"
    [cause] = causes(resource_limits(_log(msg).set()))
    assert cause.code == "bind_failed" and cause.category == "configuration_error"


def test_old_limit_hits_are_history() -> None:
    b = _log("bash: fork: retry: Resource temporarily unavailable")
    b.log("logs/app.log", [(T0 + 3 * 3600, "info", "all good")])
    assert resource_limits(b.set()) == []


@pytest.mark.parametrize(
    ("name", "labels", "code", "ident"),
    [
        ("CPUCreditBalance", {"namespace": "AWS/EC2", "InstanceId": "i-0abc"}, "cpu_credits_exhausted", "i-0abc"),
        ("BurstBalance", {"namespace": "AWS/EBS", "VolumeId": "vol-0abc"}, "burst_balance_exhausted", "vol-0abc"),
        ("EBSIOBalance%", {"namespace": "AWS/EC2", "InstanceId": "i-0def"}, "burst_balance_exhausted", "i-0def"),
    ],
)
def test_ec2_and_ebs_credit_balances_spent(name: str, labels: dict[str, str], code: str, ident: str) -> None:
    b = Builder()
    b.metric(name, series(T0, 300, [288, 250, 200, 150, 100, 60, 30, 10, 2, 0.5, 0.1, 0.0]), labels, "cloudwatch")
    ev = b.set()
    found = metric_series(ev)
    [cause] = causes(found)
    assert cause.code == code and ident in cause.object
    assert_refs_real(ev, found)
    assert not causes(database(ev))  # an instance's or volume's balance is not a database's


def test_a_full_credit_balance_and_surplus_credits_are_nothing() -> None:
    b = Builder()
    b.metric("CPUCreditBalance", series(T0, 300, [288.0] * 12), {"InstanceId": "i-0abc"}, "cloudwatch")
    b.metric("CPUSurplusCreditBalance", series(T0, 300, [40.0] * 11 + [0.0]), {"InstanceId": "i-0abc"}, "cloudwatch")
    assert not causes(metric_series(b.set()))


def test_redis_oom_names_the_redis_host_not_the_client_module() -> None:
    msg = "redis.exceptions.ResponseError: OOM command not allowed when used memory > 'maxmemory'. host=sessions-redis"
    [cause] = [f for f in database(_log(msg).set()) if f.code == "redis_memory_full"]
    assert "sessions-redis" in cause.object and "exceptions" not in cause.object


def test_conntrack_full_on_a_node_explains_its_pods_timing_out_to_many_destinations() -> None:
    b = Builder()
    b.log(
        "dmesg-ip-10-0-1-23.txt",
        [(None, None, "[1050040.8] nf_conntrack: nf_conntrack: table full, dropping packet")] * 20,
    )  # type: ignore[list-item]
    calls = [
        'Get "http://pricing.shop.svc.cluster.local/v2/price": context deadline exceeded',
        "dial tcp 10.100.44.12:3306: i/o timeout",
        'Get "http://stock.shop.svc.cluster.local/v1": context deadline exceeded',
    ]
    b.log("Pod/shop/cart-api-64d8b7c9f5-zpl8m", [(T0 + i * 10, "error", calls[i % 3]) for i in range(30)])
    ev = b.set()
    [cause] = causes(resource_limits(ev))
    assert "host:ip-10-0-1-23" in cause.tags and "service:cart-api" in cause.tags
    d = investigate(ev)
    assert d.category == "resource_exhaustion" and "table full" in d.root_cause


def test_df_after_a_shell_prompt_is_read_up_to_the_next_command() -> None:
    from pathlib import Path

    from diagnosis.bundle import BundleLimits, load_bundle

    text = (
        "$ kubectl -n streaming debug kafka-2 --image=busybox -- df -h /var/lib/kafka/data\n"
        "Filesystem                Size      Used Available Use% Mounted on\n"
        "/dev/nvme3n1            492.0G    492.0G         0 100% /var/lib/kafka/data\n"
        "$ du -sh /var/lib/kafka/data/*\n"
        "318.9G\t/var/lib/kafka/data/clickstream.raw-7\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "du.txt").write_text(text)
        ev = load_bundle(Path(tmp), BundleLimits())
    [snap] = ev.kind("host/snapshot")
    assert snap.data["disks"] == [{"mount": "/var/lib/kafka/data", "device": "/dev/nvme3n1", "percent": 100.0}]


def test_an_exception_line_takes_the_directory_of_the_line_before() -> None:
    from diagnosis.analyzers.host import host

    b = Builder()
    b.log(
        "Pod/streaming/kafka-2/kafka",
        [
            (T0, "error", "ERROR Error while appending records to clickstream.raw-7 in dir /var/lib/kafka/data"),
            (T0, "error", "java.io.IOException: No space left on device"),
        ],
    )
    [cause] = [f for f in host(b.set()) if f.code == "disk_full"]
    assert "fs:/var/lib" in cause.tags and "crash_resource" in cause.explains


def test_under_replicated_partitions_rising_is_a_failure_signal() -> None:
    b = Builder()
    vals = [0.0] * 10 + [41.0] * 10
    b.metric("kafka_server_replicamanager_underreplicatedpartitions", series(T0, 60, vals), {"pod": "kafka-0"})
    found = metric_series(b.set())
    assert [f.code for f in found if f.role == "symptom"] == ["errors"]


def test_a_mysql_servers_own_log_names_the_database() -> None:
    msg = "[ERROR] [MY-000035] [Server] Disk is full writing './binlog.004213' (OS errno 28 - No space left on device)."
    [cause] = [f for f in database(_log(msg, obj="mysqld-error.log").set()) if f.code == "storage_full"]
    assert "mysqld-error" in cause.mechanism and "postgres" not in cause.mechanism
