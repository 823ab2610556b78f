"""The `opsgraph` command: run the whole service, run one part of it, or talk to a running API."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.settings import get_settings

app = typer.Typer(
    help="opsgraph: ask for ops work; agents plan it as a DAG of tool calls on CPU/GPU pools.",
    no_args_is_help=True,
    add_completion=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> None:
    err.print(f"error: {message}", highlight=False, markup=False)
    raise typer.Exit(code)


def _client() -> httpx.Client:
    return httpx.Client(base_url=get_settings().base_api_url, timeout=30)


def _request(method: str, path: str, **kw: Any) -> dict[str, Any]:
    try:
        with _client() as c:
            resp = c.request(method, path, **kw)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the API at {get_settings().base_api_url} ({type(exc).__name__}); start it with `make run`")
    body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
    if resp.status_code >= 400:
        e = body.get("error", {})
        fail(f"{e.get('code', resp.status_code)}: {e.get('message', resp.text[:200])}")
    return body  # type: ignore[no-any-return]


@app.command()
def run() -> None:
    """Start everything: Redis if none answers, the API and console, a worker per pool, the scheduler."""
    from services.launcher import run_service

    settings = get_settings()
    raise typer.Exit(run_service(settings, say=lambda m: out.print(m, highlight=False)))


@app.command()
def api() -> None:
    """Start only the API (and the orchestrator it hosts)."""
    import uvicorn

    from core.metrics import enable_multiprocess, multiprocess_dir

    settings = get_settings()
    # under the launcher the folder is set and emptied; alone, drop only dead processes' files (workers may run)
    enable_multiprocess(multiprocess_dir() or settings.metrics_dir, clean="stale")
    from services.api import create_app

    uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port, log_level="warning")


@app.command()
def worker(
    pool: str = typer.Option("cpu", help="Pool (queue) to consume: cpu, gpu or a declared one."),
    name: str = typer.Option("", help="Worker name; default POOL-PID@HOST."),
    concurrency: int = typer.Option(0, help="Processes (cpu) or threads (gpu); 0 uses the settings."),
) -> None:
    """Start a Celery worker for one pool. GPU pools use threads: CUDA is never set up in a forking parent."""
    settings = get_settings()
    if pool not in settings.pools:
        fail(f"unknown pool {pool!r}; declared pools: {', '.join(settings.pools)} (OPSGRAPH_POOLS)")
    from core.metrics import enable_multiprocess, multiprocess_dir

    enable_multiprocess(multiprocess_dir() or settings.metrics_dir)
    from core.logging import configure_logging
    from workers.celery_app import app as celery_app

    configure_logging(settings.log_level, settings.log_json)
    gpu = pool.startswith("gpu")
    n = concurrency or (settings.gpu_concurrency if gpu else settings.cpu_concurrency)
    hostname = name or f"{pool}-{os.getpid()}@{socket.gethostname()}"
    argv = [
        "worker",
        "-Q",
        pool,
        "-n",
        hostname,
        "-c",
        str(n),
        "-P",
        "threads" if gpu else "prefork",
        "--loglevel",
        settings.log_level,
        "--without-mingle",
        "--without-gossip",
        "-E",
    ]
    celery_app.worker_main(argv)


@app.command()
def scheduler() -> None:
    """Start the scheduler (celery beat) for the recurring tasks in OPSGRAPH_SCHEDULES."""
    from core.errors import UserError
    from core.metrics import enable_multiprocess, multiprocess_dir

    enable_multiprocess(multiprocess_dir() or get_settings().metrics_dir)
    from services.scheduler import run_beat
    from workers.celery_app import app as celery_app

    try:
        run_beat(celery_app, get_settings())
    except UserError as exc:
        fail(str(exc))


def _parse_inputs(pairs: list[str]) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            fail(f"--input {pair!r} must be KEY=VALUE")
        key, value = pair.split("=", 1)
        if key in inputs:  # repeated keys make a list: --input urls=a --input urls=b
            prev = inputs[key]
            inputs[key] = [*prev, value] if isinstance(prev, list) else [prev, value]
        else:
            inputs[key] = value
    return inputs


def follow_task(task_id: str) -> dict[str, Any]:
    """Follow a task's events with a progress bar until it ends; return the finished task."""
    settings = get_settings()
    total, finished = 0, set()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        bar = progress.add_task("planning", total=None)
        last = 0
        for _ in range(100):  # reconnects, resuming after the last event seen
            try:
                with httpx.stream(
                    "GET",
                    f"{settings.base_api_url}/v1/tasks/{task_id}/events",
                    headers={"Last-Event-ID": str(last)},
                    timeout=httpx.Timeout(30, read=60),
                ) as resp:
                    if resp.status_code >= 400:
                        fail(f"cannot follow task {task_id}: HTTP {resp.status_code}")
                    event, data = "", ""
                    for line in resp.iter_lines():
                        if line.startswith("id: "):
                            last = int(line[4:])
                        elif line.startswith("event: "):
                            event = line[7:]
                        elif line.startswith("data: "):
                            data = line[6:]
                        elif line == "" and event:
                            if event == "end":
                                progress.update(bar, description="done")
                                return _request("GET", f"/v1/tasks/{task_id}")
                            payload = json.loads(data).get("data", {}) if data else {}
                            if event == "plan.ready":
                                total = len(payload["plan"]["nodes"])
                                progress.update(
                                    bar,
                                    total=total,
                                    description=f"running {payload['plan'].get('playbook') or 'plan'}",
                                )
                            elif event in ("node.finished", "node.skipped") and payload.get("node_id"):
                                finished.add(payload["node_id"])
                                progress.update(
                                    bar,
                                    completed=len(finished),
                                    description=f"{payload['node_id']} {payload.get('status', 'skipped')}",
                                )
                            elif event == "node.started":
                                progress.update(bar, description=f"{payload['node_id']} on {payload.get('worker')}")
                            event, data = "", ""
            except httpx.HTTPError:
                continue
    return _request("GET", f"/v1/tasks/{task_id}")


@app.command()
def submit(
    goal: str = typer.Argument(..., help="What to do, in plain words."),
    wait: bool = typer.Option(False, "--wait", help="Follow the task with a progress bar and print the answer."),
    input: list[str] = typer.Option([], "--input", "-i", help="KEY=VALUE inputs (urls, service, log_path...)."),
    priority: int = typer.Option(5, min=0, max=9),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Submit a task to the running API."""
    created = _request("POST", "/v1/tasks", json={"goal": goal, "inputs": _parse_inputs(input), "priority": priority})
    if not wait:
        out.print_json(data=created) if as_json else out.print(created["id"])
        return
    task = follow_task(created["id"])
    if as_json:
        out.print_json(data=task)
    else:
        answer = task.get("answer") or {}
        out.print(f"task {task['id']} {task['status']}", highlight=False)
        out.print(answer.get("text") or task.get("error") or "", markup=False, highlight=False)
    if task["status"] != "succeeded":
        raise typer.Exit(1)


@app.command()
def status(task_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show a task: status, plan nodes with their worker and queue, answer."""
    task = _request("GET", f"/v1/tasks/{task_id}")
    if as_json:
        out.print_json(data=task)
        return
    out.print(f"{task['id']}  {task['status']}  {task['goal']}", highlight=False, markup=False)
    for r in task["node_runs"]:
        out.print(
            f"  {r['node_id']:<14} {r['tool']:<18} {r['status']:<10} "
            f"attempt {r['attempt']}  {r['queue']:<4} {r['worker'] or ''}",
            highlight=False,
            markup=False,
        )
    if task.get("answer"):
        out.print(task["answer"]["text"], markup=False, highlight=False)


@app.command()
def tools(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the tools, their pool, and whether their prerequisites hold here (no API needed)."""
    from tools import CATALOG

    settings = get_settings()
    rows = [t.describe(settings) for t in CATALOG]
    if as_json:
        out.print_json(data=rows)
        return
    for r in rows:
        avail = "available" if r["available"] else f"unavailable: {r['unavailable_reason']}"
        out.print(
            f"{r['name']:<18} {r['pool']:<4} {r['effect']:<5} {avail}\n    {r['description']}",
            highlight=False,
            markup=False,
        )


@app.command("cache-eval")
def cache_eval(
    file: str = typer.Argument(..., help='JSON lines of {"a", "b", "category", "same"}.'),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    no_verifier: bool = typer.Option(False, "--no-verifier", help="Embedding similarity alone."),
) -> None:
    """Would b hit a cache entry stored for a? Precision and recall per category, and proposed thresholds."""
    from pathlib import Path

    from core.errors import UserError
    from memory.embeddings import MiniLMEmbedder
    from memory.evaluation import evaluate, load_pairs

    try:
        pairs = load_pairs(Path(file))
    except UserError as exc:
        fail(str(exc))
    report = evaluate(pairs, MiniLMEmbedder().load(), get_settings().cache_policy, verify=not no_verifier)
    if as_json:
        print(json.dumps(report))
        return
    out.print(
        f"{'category':<10} {'tp':>4} {'fp':>4} {'fn':>4} {'tn':>4} {'precision':>9} {'recall':>7} "
        f"{'threshold':>9} {'proposed':>8} {'ms p50':>7}",
        highlight=False,
    )
    rows = [*report["categories"].items(), ("overall", report["overall"])]
    for name, r in rows:
        out.print(
            f"{name:<10} {r['tp']:>4} {r['fp']:>4} {r['fn']:>4} {r['tn']:>4} {r['precision'] or 0:>9.3f} "
            f"{r['recall'] or 0:>7.3f} {r.get('threshold', ''):>9} {r.get('proposed_threshold') or '':>8} "
            f"{r['lookup_ms_p50']:>7}",
            highlight=False,
        )


@app.command()
def simulate(
    trace: str = typer.Option(..., "--trace", help="CSV with TIMESTAMP, ContextTokens, GeneratedTokens."),
    policy: str = typer.Option("current", "--policy", help="fifo, priority, srpt, srpt_aging or current."),
    workers: int = typer.Option(4, "--workers", min=1, max=4096, help="Workers in the pool."),
    utilisation: float = typer.Option(0.85, "--utilisation", min=0.01, max=2.0, help="Offered load / capacity."),
    slow: float = typer.Option(1.0, "--slow", min=1.0, help="Make worker 0 this many times slower."),
    limit: int = typer.Option(0, "--limit", min=0, help="Replay only the first N requests (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Replay a trace in the simulator with the production scheduling code: flow times, makespan, hedges."""
    from pathlib import Path

    from core.policy import preset
    from workers.simulator import simulate_trace

    current = get_settings().scheduling_policy
    try:
        chosen = current if policy == "current" else preset(policy, current)
    except KeyError as exc:
        fail(str(exc.args[0]))
    path = Path(trace)
    if not path.is_file():
        fail(f"no such trace file: {trace}")
    try:
        result = simulate_trace(
            path,
            chosen,
            workers=workers,
            utilisation=utilisation,
            slow_workers={0: slow} if slow > 1 else None,
            limit=limit or None,
        )
    except ValueError as exc:
        fail(str(exc))
    summary = result.summary()
    if as_json:
        print(json.dumps(summary))
        return
    out.print(
        f"{summary['tasks']} requests, policy {policy} ({chosen.release_order}), {workers} workers at "
        f"{utilisation:g} utilisation",
        highlight=False,
    )
    out.print(
        f"flow time s: mean {summary['mean']:.3f}  p50 {summary['p50']:.3f}  p95 {summary['p95']:.3f}  "
        f"p99 {summary['p99']:.3f}",
        highlight=False,
    )
    util = ", ".join(f"{k} {v:.1%}" for k, v in summary["utilisation"].items())
    out.print(f"makespan {summary['makespan']:.1f} s; utilisation {util}; hedges {summary['hedges']}", highlight=False)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
