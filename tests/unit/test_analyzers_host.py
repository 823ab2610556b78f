"""Host analyzer: disks and inodes, kernel OOM kills, file descriptors, CPU by one process, memory pressure,
processes down, hardware errors; old events and a healthy host."""

from __future__ import annotations

from diagnosis.analyzers.host import cloud_status_checks, host, host_lost
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code, causes, series

QUIET = {
    "cpu_percent": 4.0,
    "load": [0.1, 0.1, 0.1],
    "mem_percent": 40.0,
    "swap_percent": 0.0,
    "disks": [{"mount": "/", "percent": 41.0, "free_bytes": 30 * 2**30, "inodes_percent": 5.0}],
    "fds": {"used": 900, "max": 65536},
    "top": [{"pid": 1, "name": "systemd", "cpu_percent": 0.1, "memory_percent": 0.2}],
}


def test_quiet_machine_is_healthy() -> None:
    b = Builder()
    b.host("web-1", T0, **QUIET)
    b.process("nginx", True, T0)
    assert host(b.set()) == []


def test_full_disk_and_inodes_name_the_mount() -> None:
    b = Builder()
    snap = dict(
        QUIET,
        disks=[
            {"mount": "/", "percent": 41.0, "inodes_percent": 3.0},
            {"mount": "/var", "percent": 99.2, "free_bytes": 80 * 2**20, "inodes_percent": 97.0},
        ],
    )
    b.host("web-1", T0, **snap)
    ev = b.set()
    found = host(ev)
    assert {f.code for f in causes(found)} == {"disk_full", "inodes_full"}
    assert all("fs:/var" in f.tags and "host:web-1" in f.tags for f in found)
    assert_refs_real(ev, found)


def test_kernel_oom_killer_names_process_and_pid() -> None:
    b = Builder()
    b.log(
        "var/log/kern.log",
        [
            (
                T0,
                None,
                (
                    "Mar  1 10:00:00 web-1 kernel: java invoked oom-killer: "
                    "gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0"
                ),
            ),
            (
                T0 + 1,
                None,
                (
                    "Mar  1 10:00:01 web-1 kernel: "
                    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/app.service,task=java,pid=4711,uid=1000"
                ),
            ),
            (
                T0 + 1,
                None,
                (
                    "Mar  1 10:00:01 web-1 kernel: Out of memory: Killed process 4711 (java) "
                    "total-vm:8123456kB, anon-rss:6291456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 "
                    "pgtables:12800kB oom_score_adj:0"
                ),
            ),
        ],
    )
    b.process("java", False, T0 + 60)
    ev = b.set()
    found = host(ev)
    [cause] = causes(found)
    assert cause.code == "kernel_oom_kill" and "java" in cause.object and "4711" in cause.object
    assert "6144 MiB" in cause.mechanism and "1 time(s)" in cause.mechanism and "oom-killer" in cause.mechanism
    assert "process_down" in cause.explains
    [down] = by_code(found, "process_down")
    assert down.role == "symptom" and "OOM killer" in down.mechanism
    assert_refs_real(ev, found)


def test_systemd_names_the_unit_the_kernel_killed() -> None:
    b = Builder()
    b.log(
        "journal.txt",
        [
            (
                T0,
                None,
                (
                    "search-01 systemd[1]: search-indexer.service: A process of this unit has been killed by "
                    "the OOM killer."
                ),
            ),
            (T0, None, "search-01 systemd[1]: search-indexer.service: Failed with result 'oom-kill'."),
        ],
    )
    b.log(
        "client.log",
        [(T0 - 5 + i, "error", "ERROR catalog-sync: Connection reset by peer (search-01:9200)") for i in range(5)],
    )
    [cause] = causes(host(b.set()))
    assert cause.code == "kernel_oom_kill" and "search-indexer" in cause.object
    assert "upstream_reset" in cause.explains


def test_old_oom_kill_is_benign() -> None:
    b = Builder()
    b.log("dmesg", [(T0, None, "Out of memory: Killed process 99 (python3) total-vm:1kB, anon-rss:2048kB")])
    b.log("logs/app.log", [(T0 + 5 * 3600, "info", "ok")])
    found = host(b.set())
    assert not causes(found) and by_code(found, "kernel_oom_kill_old")


def test_too_many_open_files() -> None:
    b = Builder()
    b.log(
        "Pod/shop/gateway-5d9c7b8f6-pq7rs/app",
        [
            (T0 + i, "error", "http: Accept error: accept tcp [::]:8080: accept4: too many open files; retrying in 1s")
            for i in range(30)
        ],
    )
    [cause] = causes(host(b.set()))
    assert cause.code == "fd_exhaustion" and "gateway" in cause.object


def test_fds_near_max_in_snapshot() -> None:
    b = Builder()
    b.host("web-1", T0, **dict(QUIET, fds={"used": 1020, "max": 1024}))
    [cause] = causes(host(b.set()))
    assert cause.code == "fd_exhaustion"


def test_cpu_saturated_by_one_process() -> None:
    b = Builder()
    top = [
        {"pid": 4242, "name": "ffmpeg", "cpu_percent": 380.0, "memory_percent": 3.0},
        {"pid": 2, "name": "nginx", "cpu_percent": 5.0, "memory_percent": 1.0},
    ]
    b.host("worker-3", T0, **dict(QUIET, cpu_percent=99.0, cpu_count=4, top=top))
    ev = b.set()
    [cause] = causes(host(ev))
    assert cause.code == "cpu_saturated_by_process" and "pid:4242" in cause.tags
    assert cause.actions[-1].tool == "process_signal"
    assert_refs_real(ev, causes(host(ev)))


def test_busy_cpu_spread_over_many_processes_is_a_symptom() -> None:
    b = Builder()
    top = [{"pid": i, "name": f"w{i}", "cpu_percent": 20.0, "memory_percent": 1.0} for i in range(8)]
    b.host("worker-3", T0, **dict(QUIET, cpu_percent=96.0, cpu_count=2, top=top))
    found = host(b.set())
    assert not causes(found) and by_code(found, "cpu_high")


def test_memory_pressure_with_swap() -> None:
    b = Builder()
    b.host("db-2", T0, **dict(QUIET, mem_percent=98.0, swap_percent=80.0))
    [cause] = causes(host(b.set()))
    assert cause.code == "memory_pressure"


def test_no_space_left_in_an_application_log_is_a_host_disk() -> None:
    b = Builder()
    b.log(
        "logs/uploader.log",
        [(T0 + i, "error", "write /var/lib/uploader/tmp/chunk-9: no space left on device") for i in range(4)],
    )
    [cause] = causes(host(b.set()))
    assert cause.code == "disk_full" and "/var/lib" in cause.object


def test_postgres_storage_errors_are_left_to_the_database_analyzer() -> None:
    b = Builder()
    b.log(
        "logs/postgresql.log",
        [(T0, "error", 'ERROR: could not extend file "base/16384/16397": No space left on device')],
    )
    assert host(b.set()) == []


def test_process_down_without_a_reason_asks_for_logs() -> None:
    b = Builder()
    b.process("redis-server", False, T0)
    [f] = host(b.set())
    assert f.role == "symptom" and f.needs


def test_disk_at_92_percent_is_a_warning_not_a_failure() -> None:
    b = Builder()
    b.host("web-1", T0, **dict(QUIET, disks=[{"mount": "/data", "percent": 92.0, "inodes_percent": 10.0}]))
    [f] = host(b.set())
    assert f.role == "benign" and f.code == "disk_nearly_full"


# ---------------------------------------------------------------- cloud status checks and lost hosts


def _status(b: Builder, status: str, io: str, rtype: str = "volume") -> None:
    b.raw(
        "aws/status",
        f"{rtype}/vol-0abc",
        {
            "resource": "vol-0abc",
            "resource_type": rtype,
            "status": status,
            "checks": {f"{rtype}.io-enabled": "passed", f"{rtype}.io-performance": io},
            "events": [{"type": "potential-data-inconsistency", "description": "I/O paused", "not_before": T0}],
            "actions": [],
            "az": "eu-west-1a",
        },
        ts=T0,
    )


def test_impaired_volume_is_an_infrastructure_cause_under_the_database() -> None:
    b = Builder()
    _status(b, "impaired", "severely-degraded")
    [cause] = causes(cloud_status_checks(b.set()))
    assert cause.category == "infrastructure" and cause.code == "volume_impaired"
    assert "vol-0abc" in cause.mechanism and "severely-degraded" in cause.mechanism
    assert {"connection_exhaustion", "db_waits", "db_connection_errors"} <= set(cause.explains)
    assert_refs_real(b.set(), [cause])


def test_volume_passing_its_checks_is_benign() -> None:
    b = Builder()
    _status(b, "ok", "normal")
    found = cloud_status_checks(b.set())
    assert causes(found) == [] and [f.role for f in found] == ["benign"]


def test_lost_hypervisor_is_an_infrastructure_cause_naming_its_guests() -> None:
    b = Builder()
    b.log(
        "events.csv",
        [
            (T0, "error", "Host hv-12.dc2.example in DC2 is not responding (Target=hv-12.dc2.example)"),
            (T0 + 40, "info", "vSphere HA restarted virtual machine billing-07 on host hv-03.dc2.example"),
        ],
    )
    b.metric("up", series(T0, 60, [1, 0, 0, 0]), {"instance": "billing-07.dc2.example:9100", "job": "node"})
    [cause] = causes(host_lost(b.set()))
    assert cause.category == "infrastructure" and "hv-12.dc2.example" in cause.object
    assert "host:billing-07" in cause.tags and "host:billing-07.dc2.example" in cause.tags
    assert "target_down" in cause.explains


def test_fenced_cluster_node_is_a_lost_host_and_one_that_came_back_is_benign() -> None:
    b = Builder()
    b.log("corosync.log", [(T0, "warn", "pve-ha-crm: fencing node 'pve3'")])
    [cause] = causes(host_lost(b.set()))
    assert "pve3" in cause.object
    b = Builder()
    b.log(
        "vc.csv",
        [
            (T0, "error", "Host esx-2 in DC1 is not responding"),
            (T0 + 120, "info", "Host esx-2 in DC1 reconnected"),
        ],
    )
    [f] = host_lost(b.set())
    assert f.role == "benign"


def test_proxmox_ha_nomad_and_consul_wording_of_a_lost_node_is_a_lost_host() -> None:
    for msg, name in (
        ("pve-ha-crm[2210]: node 'pve-b7': state changed from 'online' => 'unknown'", "pve-b7"),
        ("pacemaker-controld: Node db-3 state is now lost", "db-3"),
        ("nomad.fsm: marking allocations lost: node=worker-9 count=4", "worker-9"),
        ("serf: EventMemberFailed: app-22 10.0.0.22", "app-22"),
    ):
        b = Builder()
        b.log("cluster.log", [(T0, "warn", msg)])
        [cause] = causes(host_lost(b.set()))
        assert cause.category == "infrastructure" and name in cause.object, msg
