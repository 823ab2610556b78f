"""Root causes name the limit and the part that failed, as the evidence says it: the pod's own ephemeral-storage
limit (not the node), the runtime's out-of-memory error, a systemd unit's MemoryMax/TasksMax, the hardware part
the kernel's lines are about (memory ECC, a machine check, a disk), a Service's targetPort, a caller's timeout."""

from __future__ import annotations

from diagnosis.analyzers.host import host, resource_limits
from diagnosis.analyzers.kubernetes import kubernetes_services
from diagnosis.analyzers.logs import log_errors
from diagnosis.analyzers.network import _KIND_WORDS
from diagnosis.evidence import EvidenceSet
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code
from tests.unit._k8s_evidence import NOW, iso, k8s, pod
from tests.unit.test_analyzers_kubernetes import diagnose


def test_an_eviction_for_the_pods_own_storage_limit_names_that_limit_not_the_node() -> None:
    p = pod(
        "thumbs-6b5d8f7c9-abcde",
        node="node-2",
        phase="Failed",
        statuses=[],
        status_extra={
            "reason": "Evicted",
            "message": "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. ",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": iso(NOW - 300)}],
        },
    )
    d = diagnose(p)
    assert d.category == "resource_exhaustion"
    assert "ephemeral-storage limit 2Gi " in d.root_cause and "ran low on" not in d.root_cause


def test_an_application_out_of_memory_names_the_runtime_error() -> None:
    b = Builder()
    msg = "java.lang.OutOfMemoryError: Java heap space at java.util.HashMap.resize(HashMap.java:710)"
    b.log("Pod/shop/pricer-7d9f8c6b5-x2k4p", [(T0 + i * 30, "error", msg) for i in range(5)])
    ev = b.set()
    [f] = by_code(log_errors(ev), "app_out_of_memory")
    assert "ran out of memory: OutOfMemoryError" in f.title
    assert_refs_real(ev, [f])


def _kern(lines: list[str]) -> Builder:
    b = Builder()
    b.log("var/log/kern.log", [(T0 + i, None, line) for i, line in enumerate(lines)])
    return b


def test_a_systemd_units_memory_cgroup_oom_names_its_memorymax() -> None:
    ev = _kern(
        [
            "Jul 30 20:02:11 bm-4 kernel: render invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0",
            "Jul 30 20:02:11 bm-4 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
            "oom_memcg=/system.slice/render.service,task_memcg=/system.slice/render.service,task=render,pid=401,uid=9",
            "Jul 30 20:02:11 bm-4 kernel: Memory cgroup out of memory: Killed process 401 (render) "
            "total-vm:27711204kB, anon-rss:25020112kB, file-rss:9120kB, shmem-rss:0kB",
        ]
    ).set()
    [f] = by_code(host(ev), "kernel_oom_kill")
    assert "systemd unit render.service (MemoryMax=)" in f.mechanism


def test_a_systemd_units_pids_limit_names_its_tasksmax() -> None:
    line = "rpt-2 kernel: cgroup: fork rejected by pids controller in /system.slice/report.service"
    ev = _kern([line] * 5).set()
    [f] = by_code(resource_limits(ev), "pid_limit_reached")
    assert "report.service reached its TasksMax=" in f.mechanism


def test_kernel_hardware_errors_name_the_part_and_the_panic() -> None:
    ev = _kern(
        [
            "db-7 kernel: EDAC MC1: 1 CE memory read error on CPU_SrcID#1_MC#0_Chan#2_DIMM#0 (channel:2 slot:0)",
            "db-7 kernel: mce: [Hardware Error]: Machine check events logged",
            "db-7 kernel: EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#2_DIMM#0 (channel:2 slot:0)",
            "db-7 kernel: Kernel panic - not syncing: Fatal machine check",
        ]
    ).set()
    [f] = by_code(host(ev), "host_hardware_error")
    assert "memory errors" in f.title and "panicked" in f.title
    assert "failing memory hardware" in f.mechanism and "Kernel panic" in f.mechanism
    disk = _kern(["web-1 kernel: blk_update_request: I/O error, dev sdb, sector 2048"] * 3).set()
    [g] = by_code(host(disk), "host_hardware_error")
    assert "disk errors" in g.title


def test_a_service_port_mismatch_names_the_targetport() -> None:
    svc = k8s("Service", "api", spec={"selector": {"app": "api"}, "ports": [{"port": 80, "targetPort": 8080}]})
    ports = [{"name": "app", "image": "api:1", "ports": [{"containerPort": 3000, "name": "http"}]}]
    p = pod("api-5c4b7a9d8-abcde", labels={"app": "api"}, containers=ports)
    found = [f for f in kubernetes_services(EvidenceSet([svc, p])) if f.code == "service_target_port_mismatch"]
    assert found and "targetPort 8080" in found[0].mechanism


def test_calls_that_time_out_say_whose_timeout_they_ran_past() -> None:
    assert "timeout" in _KIND_WORDS["timeout"]
