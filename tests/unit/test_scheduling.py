"""Scheduling decisions on given state: placement, release order, starvation, fair share, caps, backoff,
hedging, batching; and the simulator and the production release loop choosing alike."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import redis

from core.db import Store
from core.events import EventBus
from core.heartbeats import publish_heartbeat
from core.policy import SchedulingPolicy, preset
from core.settings import Settings
from core.types import NodeStatus
from tests.harness import RedisServer
from tools import load_tool_modules
from workers.celery_app import make_celery
from workers.release import ReleaseLoop
from workers.scheduling import (
    CostModel,
    HedgeBudget,
    PoolLoad,
    ReadyItem,
    ToolProfile,
    allowed_pools,
    decide_releases,
    hedge_due,
    release_order,
    retry_delay,
)
from workers.simulator import (
    SimConfig,
    SimNode,
    SimPool,
    SimTask,
    Simulator,
    censored_quantile,
    load_trace,
    quantile,
    trace_tasks,
)

GPU_TOOL = ToolProfile("scan", pool="gpu", hint_s=1.0)
CPU_TOOL = ToolProfile("probe", pool="cpu", hint_s=0.5)
POOLS = ["cpu", "gpu"]


def item(key: str, tool: ToolProfile = CPU_TOOL, *, ready_at: float = 0.0, **kw: object) -> ReadyItem:
    return ReadyItem(
        key=key,
        task_id=kw.pop("task_id", key),
        tool=tool.name,
        allowed=allowed_pools(tool, POOLS),  # type: ignore[arg-type]
        ready_at=ready_at,
        **kw,
    )  # type: ignore[arg-type]


def test_allowed_pools_keep_cpu_tools_off_gpus_and_use_declared_pools() -> None:
    declared = ["cpu", "gpu", "gpu.large", "cpu.io"]
    assert allowed_pools(CPU_TOOL, declared) == ("cpu", "cpu.io")
    assert allowed_pools(GPU_TOOL, declared) == ("gpu", "gpu.large", "cpu", "cpu.io")
    assert allowed_pools(ToolProfile("x", pool="gpu", cpu_fallback=False), declared) == ("gpu", "gpu.large")
    assert allowed_pools(GPU_TOOL, declared, override=["gpu.large"]) == ("gpu.large",)
    assert allowed_pools(CPU_TOOL, declared, override=["gpu"]) == ("cpu",)  # never a gpu slot, even if asked
    assert allowed_pools(CPU_TOOL, declared, node_pool="cpu.io") == ("cpu.io",)


def test_placement_takes_the_earliest_expected_completion_from_telemetry() -> None:
    policy = SchedulingPolicy()
    costs = CostModel()
    for _ in range(20):
        costs.observe("scan", "gpu", 1.0)
        costs.observe("scan", "cpu", 3.0)
    # gpu free: it goes there
    loads = {"cpu": PoolLoad("cpu", 2), "gpu": PoolLoad("gpu", 1)}
    out = decide_releases([item("a", GPU_TOOL)], loads, {"scan": GPU_TOOL}, costs, policy, 0.0)
    assert [(r.pool, r.est_s) for r in out] == [("gpu", 1.0)]
    # gpu busy with 1.5 s left: waiting (1.5 + 1) beats cpu (3) -> it waits for the gpu
    loads = {"cpu": PoolLoad("cpu", 2), "gpu": PoolLoad("gpu", 1, inflight=1, backlog_s=1.5)}
    assert decide_releases([item("a", GPU_TOOL)], loads, {"scan": GPU_TOOL}, costs, policy, 0.0) == []
    # gpu queue long (5 s): cpu finishes first -> overflow
    loads = {"cpu": PoolLoad("cpu", 2), "gpu": PoolLoad("gpu", 1, inflight=1, backlog_s=5.0)}
    out = decide_releases([item("a", GPU_TOOL)], loads, {"scan": GPU_TOOL}, costs, policy, 0.0)
    assert [r.pool for r in out] == ["cpu"]
    # the items behind one that waits for the gpu see its work in the gpu's backlog and overflow sooner
    loads = {"cpu": PoolLoad("cpu", 4), "gpu": PoolLoad("gpu", 1, inflight=1, backlog_s=1.5)}
    items = [item(k, GPU_TOOL, ready_at=i) for i, k in enumerate("abc")]
    out = decide_releases(items, loads, {"scan": GPU_TOOL}, costs, policy, 10.0)
    assert [(r.items[0].key, r.pool) for r in out] == [("b", "cpu"), ("c", "cpu")]


def test_without_telemetry_a_gpu_tool_on_cpu_is_assumed_slower() -> None:
    policy = SchedulingPolicy(gpu_fallback_slowdown=4.0)
    assert CostModel().expected(GPU_TOOL, "cpu", policy) == 4.0
    assert CostModel().expected(GPU_TOOL, "gpu.large", policy) == 1.0


def test_the_cost_model_is_an_ewma_with_variance_and_quantiles() -> None:
    costs = CostModel(alpha=0.5)
    for x in [1.0, 3.0]:
        costs.observe("t", "cpu", x)
    stats = costs.stats("t", "cpu")
    assert stats is not None and stats.mean == pytest.approx(2.0) and stats.var == pytest.approx(1.0)
    for x in range(100):
        costs.observe("u", "cpu", float(x))
    assert costs.p95("u", "cpu", min_samples=10) == 94.0
    assert costs.p95("t", "cpu", min_samples=10) is None


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("fifo", ["old-big", "mid-hi", "new-small"]),
        ("priority", ["mid-hi", "old-big", "new-small"]),
        ("srpt", ["new-small", "mid-hi", "old-big"]),
    ],
)
def test_release_order_under_each_policy(order: str, expected: list[str]) -> None:
    items = [
        item("old-big", ready_at=0.0, task_remaining_s=50.0, priority=5),
        item("mid-hi", ready_at=1.0, task_remaining_s=10.0, priority=9),
        item("new-small", ready_at=2.0, task_remaining_s=1.0, priority=5),
    ]
    assert [i.key for i in release_order(items, preset(order), 3.0)] == expected


def test_srpt_aging_lets_an_item_be_overtaken_only_until_its_guard() -> None:
    policy = preset("srpt_aging")
    big = item("big", ready_at=0.0, task_remaining_s=50.0, est_s=50.0, fifo_turn=100.0)
    small = item("small", ready_at=90.0, task_remaining_s=1.0, est_s=1.0, fifo_turn=1e9)
    assert [i.key for i in release_order([big, small], policy, 95.0)] == ["small", "big"]
    assert [i.key for i in release_order([big, small], policy, 100.0)] == ["big", "small"]


def _stream(big_at: float, n_small: int) -> list[SimTask]:
    tasks = [SimTask("big", big_at, [SimNode("n", "job", 5.0, estimate_s=5.0)])]
    # small jobs arrive a little faster than one worker serves them: plain SRPT never gets to the big one
    tasks += [SimTask(f"s{i}", i * 0.9, [SimNode("n", "job", 0.95, estimate_s=0.95)]) for i in range(n_small)]
    return tasks


def test_srpt_starves_a_big_job_and_srpt_aging_does_not() -> None:
    config = SimConfig(pools=[SimPool("cpu", 1)])
    finish = {}
    for name in ("srpt", "srpt_aging", "fifo"):
        sim = Simulator(config, preset(name).model_copy(update={"hedging": False}))
        result = sim.run(_stream(0.5, 400))
        finish[name] = result.flow_of["big"]
    assert finish["srpt"] > 300  # waits behind every small job in the stream
    assert finish["srpt_aging"] < 60  # its guard comes: it runs soon after its fifo turn
    assert finish["fifo"] < 20


def test_fair_share_alternates_tenants_by_what_they_have_in_flight() -> None:
    policy = SchedulingPolicy(release_order="fifo")
    items = [item(f"a{i}", ready_at=i, tenant="a") for i in range(4)] + [item("b0", ready_at=10, tenant="b")]
    order = [i.key for i in release_order(items, policy, 20.0, tenant_inflight={"a": 2})]
    assert order == ["b0", "a0", "a1", "a2", "a3"]
    unfair = [i.key for i in release_order(items, policy.model_copy(update={"fair_share": False}), 20.0)]
    assert unfair == ["a0", "a1", "a2", "a3", "b0"]


def test_tenant_and_pool_caps_hold_back_releases() -> None:
    policy = SchedulingPolicy(release_order="fifo", tenant_max_inflight=2)
    loads = {"cpu": PoolLoad("cpu", 10), "gpu": PoolLoad("gpu", 0)}
    items = [item(f"a{i}", ready_at=i, tenant="a") for i in range(5)] + [item("b0", ready_at=9, tenant="b")]
    out = decide_releases(items, loads, {}, CostModel(), policy, 10.0, tenant_inflight={"a": 1})
    assert sorted(r.items[0].key for r in out) == ["a0", "b0"]
    loads = {"cpu": PoolLoad("cpu", 3, inflight=2), "gpu": PoolLoad("gpu", 0)}
    out = decide_releases(items, loads, {}, CostModel(), SchedulingPolicy(release_order="fifo"), 10.0)
    assert [r.items[0].key for r in out] == ["a0"]


def test_retry_delay_grows_exponentially_within_its_jitter_and_cap() -> None:
    policy = SchedulingPolicy(backoff_base_s=1.0, backoff_max_s=10.0, backoff_jitter=0.5)
    rng = random.Random(1)
    for retry, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 10.0)]:
        delays = [retry_delay(retry, policy, rng) for _ in range(200)]
        assert all(base * 0.5 <= d <= base * 1.5 for d in delays)
        assert max(delays) - min(delays) > base * 0.5  # it really varies
    assert retry_delay(3, policy.model_copy(update={"backoff_jitter": 0.0})) == 4.0


def test_hedges_wait_for_the_p95_and_are_capped_by_the_budget() -> None:
    policy = SchedulingPolicy(hedge_factor=2.0, hedge_min_s=0.5, hedge_budget=0.1, hedge_burst=2)
    assert not hedge_due(1.9, 1.0, policy) and hedge_due(2.1, 1.0, policy)
    assert not hedge_due(0.4, 0.1, policy) and hedge_due(0.6, 0.1, policy)
    assert not hedge_due(99, None, policy)  # no trusted p95 yet
    assert not hedge_due(99, 1.0, policy.model_copy(update={"hedging": False}))
    budget = HedgeBudget(policy)
    assert budget.spend() and budget.spend() and not budget.spend()
    budget.earn(9, policy)
    assert not budget.spend()
    budget.earn(1, policy)
    assert budget.spend()


def test_batchable_calls_wait_for_the_window_then_go_together_up_to_the_maximum() -> None:
    tool = ToolProfile("embed", pool="cpu", batchable=True)
    policy = SchedulingPolicy(batch_window_s=0.5, max_batch=3)
    loads = {"cpu": PoolLoad("cpu", 4), "gpu": PoolLoad("gpu", 0)}
    items = [item(f"e{i}", tool, ready_at=10.0 + i * 0.1) for i in range(2)]
    assert decide_releases(items, loads, {"embed": tool}, CostModel(), policy, 10.2) == []  # window open
    out = decide_releases(items, loads, {"embed": tool}, CostModel(), policy, 10.6)
    assert [[i.key for i in r.items] for r in out] == [["e0", "e1"]]
    many = [item(f"m{i}", tool, ready_at=10.0) for i in range(7)]
    out = decide_releases(many, dict(loads), {"embed": tool}, CostModel(), policy, 10.0)  # full batches go now
    assert [len(r.items) for r in out] == [3, 3, 1]


def test_the_simulator_hedges_a_slow_worker_and_cuts_the_tail() -> None:
    tasks = [SimTask(f"t{i}", i * 0.5, [SimNode("n", "read", 0.2)]) for i in range(400)]
    pools = [SimPool("cpu", 4, slow={0: 20.0})]
    plain = Simulator(SimConfig(pools), SchedulingPolicy(hedging=False)).run(tasks).summary()
    hedged = Simulator(SimConfig(pools), SchedulingPolicy(hedge_budget=0.3, hedge_min_s=0.1)).run(tasks).summary()
    assert hedged["hedges"] > 0 and hedged["hedge_wins"] > 0
    assert hedged["p99"] < plain["p99"]


def test_a_trace_replay_scales_work_to_the_utilisation_asked(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.0000000,100,10\n2023-11-16 18:00:10.5000000,300,30\n2023-11-16 18:00:20.0000000,0,20\n"
    )
    rows = load_trace(trace)
    assert rows == [(0.0, 20.0), (10.5, 60.0), (20.0, 20.0)]
    tasks = trace_tasks(rows, workers=2, utilisation=0.5)
    assert sum(t.nodes[0].work_s for t in tasks) == pytest.approx(0.5 * 2 * 20.0)
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing column"):
        load_trace(tmp_path / "bad.csv")


def test_production_and_the_simulator_place_the_same_state_alike(tmp_path: Path, redis_server: RedisServer) -> None:
    """The same ready set, workers and telemetry: the release loop (database, Redis, Celery) and the
    simulator send the same items to the same pools."""
    settings = Settings(var_dir=tmp_path, redis_url=redis_server.url, scheduling_policy=SchedulingPolicy(hedging=False))
    store = Store.from_settings(settings)
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    toolset = load_tool_modules(["memory.tools"])
    loop = ReleaseLoop(
        settings,
        store,
        EventBus(store, client),
        make_celery(settings),
        toolset,
        client,
        lambda: settings.scheduling_policy,
    )
    publish_heartbeat(client, "g@h", {"queues": ["gpu"], "concurrency": 1}, ttl_s=60)
    publish_heartbeat(client, "c@h", {"queues": ["cpu"], "concurrency": 2}, ttl_s=60)
    # telemetry: metric_anomalies takes 1 s on the gpu and 2.5 s on cpu; host_metrics 0.5 s on cpu
    task = store.create_task("history")
    now = time.time()
    for tool, pool, run_s in [
        ("metric_anomalies", "gpu", 1.0),
        ("metric_anomalies", "cpu", 2.5),
        ("host_metrics", "cpu", 0.5),
    ]:
        for _ in range(5):
            r = store.create_node_run(task.id, f"h-{tool}-{pool}", tool=tool, args={}, pool=pool, queue=pool)
            store.start_node_run(r.id, "old@h")
            store.finish_node_run(r.id, NodeStatus.SUCCEEDED, result={})
            with store.session() as s:
                row = s.get(type(r), r.id)
                row.started_at, row.finished_at = now - 100 - run_s, now - 100
    live = store.create_task("now")
    names = ["s1", "s2", "s3", "p1"]
    tools = ["metric_anomalies"] * 3 + ["host_metrics"]
    for name, tool in zip(names, tools, strict=True):
        store.create_node_run(live.id, name, tool=tool, args={}, pool="", queue="", status=NodeStatus.READY)
    loop.pump()
    placed = {r.node_id: r.pool for r in store.node_runs(live.id) if r.status != NodeStatus.READY.value}
    # the simulator: the same workers, the same telemetry (its cost model), every item ready at once
    config = SimConfig(pools=[SimPool("cpu", 2), SimPool("gpu", 1)], profiles={t: loop.profile(t) for t in tools})
    sim = Simulator(config, settings.scheduling_policy)
    sim.costs = loop.costs
    sim.run([SimTask(n, 0.0, [SimNode("n", t, 10.0)]) for n, t in zip(names, tools, strict=True)])
    first_round = {task: pool for at, task, pool in sim.decisions if at == 0.0}
    assert first_round == placed
    # and the decision is the one the telemetry argues for: the short cpu tool goes first, one scan takes the
    # gpu, a second waits for it (1 s + 1 s beats 2.5 s on cpu), the third overflows to the free cpu slot
    assert placed == {"p1": "cpu", "s1": "gpu", "s3": "cpu"}


def test_a_call_s_arguments_give_its_estimate_when_the_tool_says_how() -> None:
    toolset = load_tool_modules(["memory.tools", "tests.toolkit.chaos"])
    sleep, host, probe = toolset.get("chaos_sleep"), toolset.get("host_metrics"), toolset.get("http_probe")
    assert sleep is not None and host is not None and probe is not None
    assert sleep.estimate({"seconds": 3}) == 3.0
    assert sleep.estimate({"seconds": -1}) is None  # invalid arguments: no hint, the learnt estimate stands
    assert host.estimate({"sample_seconds": 4}) == 4.7  # the window, a warm-up step and the rest
    assert probe.estimate({"url": "http://127.0.0.1/"}) is None


def test_a_quantile_with_tasks_still_running_counts_them_censored_at_their_age() -> None:
    rng = random.Random(3)
    ended = [rng.expovariate(1.0) for _ in range(97)]
    # nothing running: the plain empirical quantile, for any q
    for q in (0.5, 0.9, 0.95, 0.99):
        assert censored_quantile(ended, [], q) == quantile(sorted(ended), q)
    p95 = quantile(sorted(ended), 0.95)
    # tasks that just started say nothing yet: they do not pull the p95 down
    assert censored_quantile(ended, [0.0001] * 40, 0.95) == p95
    # tasks running longer than the ended p95 are in the tail whatever they end at: the p95 rises
    assert censored_quantile(ended, [p95 * 3] * 10, 0.95) > p95
    # when the whole tail is still running, the oldest age is the lower bound
    assert censored_quantile([1.0] * 10, [50.0, 60.0], 0.95) == 60.0
    assert censored_quantile([], [], 0.95) == 0.0
