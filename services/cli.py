"""The `opsgraph` command: run the whole service, run one part of it, or talk to a running API."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.settings import get_settings

if TYPE_CHECKING:  # httpx loads only for the commands that talk to the API (investigate starts faster)
    import httpx

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


def api_key() -> str:
    """The key the CLI sends: OPSGRAPH_API_KEY, else the one `opsgraph login` kept (VAR_DIR/cli.key), else the
    first-run admin key (VAR_DIR/admin.key) when the CLI runs beside the service."""
    settings = get_settings()
    if settings.api_key is not None:
        return settings.api_key.get_secret_value().strip()
    for path in (settings.cli_key_file, settings.admin_key_file):
        try:
            return path.read_text().strip()
        except OSError:
            continue
    fail(
        "no API key: set OPSGRAPH_API_KEY, run `opsgraph login KEY`, or create one with "
        "`opsgraph keys create --tenant NAME --scope read`"
    )
    raise AssertionError  # unreachable: fail exits


def _auth_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key()}"}


def _client() -> httpx.Client:
    import httpx

    return httpx.Client(base_url=get_settings().base_api_url, timeout=30, headers=_auth_headers())


def _refused(resp: httpx.Response, body: dict[str, Any]) -> None:
    e = body.get("error", {})
    if resp.status_code == 401:
        fail(
            f"the API refused the key ({e.get('message', 'unauthenticated')}); "
            "check OPSGRAPH_API_KEY or `opsgraph login`"
        )
    fail(f"{e.get('code', resp.status_code)}: {e.get('message', resp.text[:200])}")


def _request(method: str, path: str, **kw: Any) -> dict[str, Any]:
    import httpx

    try:
        with _client() as c:
            resp = c.request(method, path, **kw)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the API at {get_settings().base_api_url} ({type(exc).__name__}); start it with `make run`")
    body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
    if resp.status_code >= 400:
        _refused(resp, body)
    return body  # type: ignore[no-any-return]


keys_app = typer.Typer(help="API keys, on the database directly (no API needed): create, list, revoke.")
app.add_typer(keys_app, name="keys")


def _key_book():  # type: ignore[no-untyped-def]
    from core.apikeys import KeyBook
    from core.db import Store

    return KeyBook(Store.from_settings(get_settings()))


def _cli_audit(action: str, tenant: str, target: str, details: dict[str, Any]) -> None:
    import getpass

    from core.audit import Actor, record

    book = _key_book()
    record(book.store, Actor(f"cli:{getpass.getuser()}", "opsgraph keys", "cli", "local"), action, tenant=tenant,
           target=target, details=details)  # fmt: skip


@keys_app.command("create")
def keys_create(
    tenant: str = typer.Option(..., "--tenant", help="The tenant the key acts for."),
    scope: list[str] = typer.Option(..., "--scope", help="read, operate, approve or admin; repeat for more."),
    name: str = typer.Option("", "--name", help="What the key is for."),
    expires_in: float = typer.Option(0, "--expires-in", min=0, help="Days until it expires (0: never)."),
) -> None:
    """Issue a key; the key itself is the last line of the output, shown this once (only its hash is kept)."""
    from core.errors import UserError

    try:
        issued = _key_book().create(
            tenant, scope, name=name, expires_in_s=expires_in * 86_400 if expires_in else None, created_by="cli"
        )
    except UserError as exc:
        fail(str(exc))
    row = issued.row
    _cli_audit(
        "key.create", row.tenant, row.id, {"scopes": list(row.scopes), "name": name, "expires_at": row.expires_at}
    )
    err.print(
        f"key {row.id} for tenant {row.tenant}, scopes {' '.join(row.scopes)}; it is shown once:", highlight=False
    )
    print(issued.token)


@keys_app.command("list")
def keys_list(
    tenant: str = typer.Option("", "--tenant", help="Only this tenant's keys."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Every key (never the secret): id, tenant, scopes, state, name, last use."""
    from core.apikeys import key_view

    rows = [key_view(r) for r in _key_book().list(tenant=tenant or None)]
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        out.print(
            f"{r['id']}  {r['tenant']:<16} {','.join(r['scopes']):<22} {r['state']:<8} {r['name']}",
            highlight=False,
            markup=False,
        )


@keys_app.command("revoke")
def keys_revoke(key_id: str = typer.Argument(..., help="The key's id (opsgraph keys list).")) -> None:
    """Revoke a key: refused from its next request on."""
    from core.errors import NotFound

    try:
        row = _key_book().revoke(key_id)
    except NotFound as exc:
        fail(str(exc))
    _cli_audit("key.revoke", row.tenant, row.id, {"name": row.name})
    out.print(f"revoked {row.id} ({row.tenant})", highlight=False)


@app.command()
def login(key: str = typer.Argument("", help="An API key (og_...); read from stdin when left out.")) -> None:
    """Keep a key for the CLI in VAR_DIR/cli.key (mode 0600), checked against the API first."""
    import httpx

    from core.apikeys import parse_key, write_secret_file

    key = (key or sys.stdin.readline()).strip()
    if parse_key(key) is None:
        fail("that is not an opsgraph API key (og_<id>_<secret>)")
    settings = get_settings()
    try:
        resp = httpx.get(f"{settings.base_api_url}/v1/tools", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the API at {settings.base_api_url} ({type(exc).__name__}); start it with `make run`")
    if resp.status_code == 401:
        fail("the API refused that key (unknown, revoked or expired)")
    write_secret_file(settings.cli_key_file, key)
    out.print(f"saved to {settings.cli_key_file}", highlight=False)


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
    import httpx

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
                    headers={"Last-Event-ID": str(last), **_auth_headers()},
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
                            elif event == "approval.requested":
                                progress.update(bar, description=f"waiting for approval of {payload['node_id']}")
                                err.print(
                                    f"waiting for approval {payload['approval_id']}: {payload.get('summary', '')}\n"
                                    f"  approve: opsgraph approvals approve {payload['approval_id']} --reason ...\n"
                                    f"  reject:  opsgraph approvals reject {payload['approval_id']} --reason ...",
                                    highlight=False,
                                    markup=False,
                                )
                            elif event == "approval.decided":
                                err.print(
                                    f"approval {payload['approval_id']} {payload['status']}"
                                    + (f" by {payload['decided_by']}" if payload.get("decided_by") else ""),
                                    highlight=False,
                                    markup=False,
                                )
                            elif event == "node.started":
                                progress.update(bar, description=f"{payload['node_id']} on {payload.get('worker')}")
                            event, data = "", ""
            except httpx.HTTPError:
                continue
    return _request("GET", f"/v1/tasks/{task_id}")


def answer_provenance(task: dict[str, Any]) -> str:
    """When the figures of an answer were taken, and whether they came from the cache."""
    import datetime as dt

    answer = task.get("answer") or {}
    cached = answer.get("from_cache")
    if cached:
        age = float(cached.get("age_s") or 0)
        taken = dt.datetime.fromtimestamp((task.get("finished_at") or 0) - age).strftime("%H:%M:%S")
        return (
            f"from cache, {age:.0f} s old (figures taken at {taken} for: {cached.get('cached_request')!r}); "
            "run again with `opsgraph submit --fresh ...`"
        )
    if task.get("finished_at"):
        return f"figures taken at {dt.datetime.fromtimestamp(task['finished_at']).strftime('%H:%M:%S')}"
    return ""


@app.command()
def submit(
    goal: str = typer.Argument(..., help="What to do, in plain words."),
    wait: bool = typer.Option(False, "--wait", help="Follow the task with a progress bar and print the answer."),
    input: list[str] = typer.Option([], "--input", "-i", help="KEY=VALUE inputs (urls, service, log_path...)."),
    priority: int = typer.Option(5, min=0, max=9),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    fresh: bool = typer.Option(False, "--fresh", help="Run again with fresh figures; never answer from the cache."),
) -> None:
    """Submit a task to the running API."""
    body = {"goal": goal, "inputs": _parse_inputs(input), "priority": priority, "cache": "skip" if fresh else "use"}
    created = _request("POST", "/v1/tasks", json=body)
    if not wait:
        out.print_json(data=created) if as_json else out.print(created["id"])
        return
    task = follow_task(created["id"])
    _print_answer(task, as_json)
    if task["status"] != "succeeded":
        raise typer.Exit(1)


def _print_answer(task: dict[str, Any], as_json: bool) -> None:
    if as_json:
        out.print_json(data=task)
        return
    answer = task.get("answer") or {}
    out.print(f"task {task['id']} {task['status']}", highlight=False)
    out.print(answer_provenance(task), highlight=False, markup=False)
    out.print(answer.get("text") or task.get("error") or "", markup=False, highlight=False)


@app.command()
def remediate(
    task_id: str = typer.Argument(..., help="A task whose answer has a Diagnosis."),
    action: list[int] = typer.Option([], "--action", "-a", help="Index of a Diagnosis action to do (repeatable)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow the remediation task until it ends."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Do what a Diagnosis proposes: every write waits for a person's approval (`opsgraph approvals`), then the
    checks run again and the answer says whether the fix worked."""
    created = _request("POST", f"/v1/tasks/{task_id}/remediate", json={"actions": action or None})
    if not wait:
        out.print_json(data=created) if as_json else out.print(created["id"])
        return
    task = follow_task(created["id"])
    _print_answer(task, as_json)
    if task["status"] != "succeeded" or (task.get("answer") or {}).get("remediation", {}).get("outcome") != "fixed":
        raise typer.Exit(1)


approvals_app = typer.Typer(help="Writes waiting for a person: list them, approve or reject with a reason.")
app.add_typer(approvals_app, name="approvals")


def _approval_line(a: dict[str, Any]) -> str:
    import datetime as dt

    when = dt.datetime.fromtimestamp(a["expires_at"]).strftime("%H:%M:%S")
    head = f"{a['id']}  {a['status']:<8} {a['tool']}  task {a['task_id']} node {a['node_id']}"
    lines = [head, f"    what: {a['preview'].get('summary', '')}", f"    why:  {a['reason']}"]
    lines.append(f"    asked by {a['requested_by']}; expires {when}")
    if a.get("decided_by"):
        lines.append(f"    {a['status']} by {a['decided_by']}: {a.get('decision_reason') or ''}")
    elif not a.get("may_decide"):
        lines.append("    you may not decide it (no approve scope, or four-eyes: you asked for it)")
    return "\n".join(lines)


@approvals_app.command("list")
def approvals_list(
    every: bool = typer.Option(False, "--all", help="Decided and expired ones too, not only pending."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Approval requests, newest first (pending only unless --all)."""
    found = _request("GET", "/v1/approvals", params={} if every else {"status": "pending"})["approvals"]
    if as_json:
        out.print_json(data=found)
        return
    if not found:
        out.print("no approval requests" + ("" if every else " pending"))
    for a in found:
        out.print(_approval_line(a), highlight=False, markup=False)


def _decide(approval_id: str, verb: str, reason: str, as_json: bool) -> None:
    decided = _request("POST", f"/v1/approvals/{approval_id}/{verb}", json={"reason": reason})
    if as_json:
        out.print_json(data=decided)
    else:
        out.print(_approval_line(decided), highlight=False, markup=False)


@approvals_app.command("approve")
def approvals_approve(
    approval_id: str,
    reason: str = typer.Option("", "--reason", "-r", help="Why: kept with the decision."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Approve a write: its task runs it, then verifies the fix."""
    _decide(approval_id, "approve", reason, as_json)


@approvals_app.command("reject")
def approvals_reject(
    approval_id: str,
    reason: str = typer.Option(..., "--reason", "-r", help="Why not: the task's answer says it."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Reject a write: it is skipped and the task's answer says why."""
    _decide(approval_id, "reject", reason, as_json)


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
        out.print(answer_provenance(task), highlight=False, markup=False)
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

    def f3(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    out.print(
        f"{'category':<10} {'tp':>4} {'fp':>4} {'fn':>4} {'tn':>4} {'precision':>9} {'recall':>7} "
        f"{'in-sample p/r':>13} {'configured p/r':>14} {'threshold':>9} {'proposed':>8} {'ms p50':>7}",
        highlight=False,
    )
    rows = [*report["categories"].items(), ("overall", report["overall"])]
    for name, r in rows:
        ins, conf = r["in_sample"], r["configured"]
        out.print(
            f"{name:<10} {r['tp']:>4} {r['fp']:>4} {r['fn']:>4} {r['tn']:>4} {f3(r['precision']):>9} "
            f"{f3(r['recall']):>7} {f3(ins['precision']) + '/' + f3(ins['recall']):>13} "
            f"{f3(conf['precision']) + '/' + f3(conf['recall']):>14} {r.get('threshold', ''):>9} "
            f"{r.get('proposed_threshold') or '':>8} {r['lookup_ms_p50']:>7}",
            highlight=False,
        )
    g = report["global_threshold"]
    out.print(
        f"one global threshold (out of fold): precision {f3(g['precision'])} recall {f3(g['recall'])} "
        f"(thresholds per fold {g['thresholds_per_fold']})",
        highlight=False,
    )
    kinds = ", ".join(
        f"{k}: {v['tp'] + v['fn']} same / {v['fp'] + v['tn']} not, {v['fp']} wrongly served"
        for k, v in report["by_kind"].items()
    )
    out.print(f"by kind (out of fold): {kinds}", highlight=False)
    out.print(
        f"precision and recall are out of fold ({report['overall']['folds']}-fold cross-validation: each fold's "
        "thresholds chosen on the other folds only); in-sample and configured beside them",
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


_DIAGNOSIS_KEYS = (
    "category",
    "root_cause",
    "confidence",
    "causal_chain",
    "evidence",
    "ruled_out",
    "actions",
    "text",
    "other_causes",
    "missing",
    "checked",
    "ignored",
    "errors",
    "source",
)


def _load_bundle(path: Any, exclude: tuple[str, ...] = ()) -> Any:
    """diagnosis.bundle.load_bundle under its default limits (what agents.investigation.load_bundle does, without
    importing LangGraph)."""
    from diagnosis.bundle import BundleLimits, load_bundle

    return load_bundle(path, BundleLimits(), exclude=exclude)


def _diagnose(evidence: Any, question: str | None) -> Any:
    """The Diagnosis of `evidence`. With an LLM configured: the LangGraph investigation (specialists, the lead, the
    LLM refinement). Without one the graph adds nothing the rules do not give (a bundle cannot fetch more
    evidence), so the same analyzers and reasoning run directly: importing LangGraph is most of the start-up."""
    settings = get_settings()
    if not settings.llm_base_url:
        from diagnosis.investigate import investigate as investigate_evidence

        return investigate_evidence(evidence, question)
    from agents.investigation import DiagnosisRefiner, run_investigation

    refiner = DiagnosisRefiner.from_settings(settings)
    return run_investigation(evidence, question=question, refiner=refiner).diagnosis


def _investigate_bundle(path: Any, question: str | None, exclude: tuple[str, ...] = ()) -> Any:
    """Load a bundle and investigate it in this process (no API, Redis or workers).

    Only diagnosis loads here (and LangGraph when an LLM is configured): no Celery, FAISS, torch or embedding model."""
    return _diagnose(_load_bundle(path, exclude), question)


@app.command()
def investigate(
    path: str = typer.Argument(
        ..., help="An evidence bundle: a folder, .tar.gz or .zip of exports, one file, or - for standard input."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the Diagnosis as one JSON object."),
    question: str = typer.Option("", "--question", "-q", help="What the operator asks, e.g. why checkout is slow."),
) -> None:
    """Investigate an evidence bundle in-process and print the Diagnosis (post-mortems, CI).

    `kubectl describe pod x | opsgraph investigate -` reads what is piped in as one file of evidence."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="opsgraph-stdin-") as scratch:
        if path == "-":
            from diagnosis.bundle import BundleLimits

            limit = BundleLimits().max_file_bytes
            data = sys.stdin.buffer.read(limit + 1)
            if not data.strip():
                fail(
                    "nothing on standard input: pipe evidence in, e.g. kubectl describe pod x | opsgraph investigate -",
                    2,
                )
            if len(data) > limit:
                fail(f"standard input is larger than the {limit} bytes one file of a bundle may hold", 2)
            bundle = Path(scratch) / "stdin"
            bundle.write_bytes(data)
        else:
            bundle = Path(path)
        _investigate_and_print(bundle, path, as_json, question)


def _investigate_and_print(bundle: Any, path: str, as_json: bool, question: str) -> None:
    if not bundle.exists():
        fail(f"no such bundle: {path}", 2)
    try:
        evidence = _load_bundle(bundle)
    except ModuleNotFoundError as exc:  # a part of opsgraph is missing, not the bundle's fault
        fail(f"{exc.name} is not installed: the investigation needs it", 1)
    except Exception as exc:  # whatever load_bundle refuses (limits, escaping entries, a bad archive): one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(f"bundle refused: {first}", 2)
    try:
        diagnosis = _diagnose(evidence, question or None)
    except ModuleNotFoundError as exc:
        fail(f"{exc.name} is not installed: the investigation needs it", 1)
    except RuntimeError as exc:  # agents.investigation.InvestigationError on the LLM path
        fail(str(exc), 1)
    if as_json:
        print(json.dumps(diagnosis.model_dump(mode="json", include=set(_DIAGNOSIS_KEYS))))
        return
    out.print(diagnosis.text, markup=False, highlight=False)


@app.command("diagnose-eval")
def diagnose_eval(
    folder: str = typer.Argument(..., help="A corpus: tests/data/incidents, or its dev/ or test/ split."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    workers: int = typer.Option(
        1, "--workers", "-j", min=1, help="Processes to spread the scenarios over (times are then measured under load)."
    ),
) -> None:
    """Investigate every scenario (a folder with answer.yaml) and score the diagnoses: accuracy, keyword recall,
    forbidden categories, time per investigation."""
    from pathlib import Path

    from diagnosis.evaluation import CorpusError, evaluate

    try:
        report = evaluate(Path(folder), _investigate_bundle, workers)
    except CorpusError as exc:
        fail(str(exc), 2)
    if as_json:
        print(json.dumps(report))
        return
    for r in report["results"]:
        mark = "pass" if r["passed"] else "FAIL"
        line = f"{mark} {r['name']:<48} expected {r['expected']:<20} got {r['got'] or '-':<20} {r['seconds']:.3f}s"
        if r["forbidden"]:
            line += "  FORBIDDEN"
        if r["keywords_missing"]:
            line += f"  missing: {', '.join(r['keywords_missing'])}"
        if r["error"]:
            line += f"  error: {r['error']}"
        for failure in r.get("analyzer_failures", []):
            line += f"  analyzer failed: {failure}"
        out.print(line, markup=False, highlight=False)

    def row(name: str, s: dict[str, Any]) -> str:
        recall = "-" if s["keyword_recall"] is None else f"{s['keyword_recall']:.1%}"
        return (
            f"{name:<24} {s['passed']:>4}/{s['scenarios']:<4} {s['accuracy']:>7.1%} {recall:>8} "
            f"{s['forbidden']:>9} {s['seconds_p50']:>8.3f} {s['seconds_p95']:>8.3f}"
        )

    out.print("", highlight=False)
    out.print(
        f"{'group':<24} {'passed':>9} {'accuracy':>7} {'kw recall':>8} {'forbidden':>9} {'p50 s':>8} {'p95 s':>8}",
        highlight=False,
    )
    out.print(row("overall", report["overall"]), markup=False, highlight=False)
    for title, key in (("split", "per_split"), ("category", "per_category"), ("difficulty", "per_difficulty")):
        for name, s in report.get(key, {}).items():
            out.print(row(f"{title} {name}", s), markup=False, highlight=False)
    if report["overall"]["analyzer_failures"]:
        out.print(
            f"{report['overall']['analyzer_failures']} scenario(s) lost an analyzer to an exception (listed above)",
            markup=False,
            highlight=False,
        )


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
