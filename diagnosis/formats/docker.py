"""Docker hosts without an orchestrator: `docker inspect` (a JSON array of containers) and the `docker ps -a`
table, as `container/state` items, one per container:

`{name, image, status, running, restarting, oom_killed, exit_code, error, started_at, finished_at, restart_count,
memory_limit_bytes, health: {status, failing_streak, last_output} | None, from: "docker inspect" | "docker ps"}`.

`docker ps` prints ages, not times ("Exited (137) 5 minutes ago"); like kubectl's ages they count back from the
newest dated evidence of the bundle. `docker logs` output is an ordinary log file (name it after the container).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

# the default columns, or any `--format 'table ...'` choice of them that keeps STATUS and NAMES
_PS_COLUMNS = r"(?:CONTAINER ID|IMAGE|COMMAND|CREATED|STATUS|PORTS|NAMES|SIZE|LABELS|MOUNTS|NETWORKS|RUNNING FOR)"
_PS_HEADER = re.compile(rf"^{_PS_COLUMNS}(?:\s{{2,}}{_PS_COLUMNS})+\s*$")
_PS_STATUS = re.compile(
    r"^(?:(?P<up>Up) (?P<up_for>.+?)(?: \((?P<health>healthy|unhealthy|health: starting)\))?|"
    r"(?P<state>Exited|Restarting) \((?P<code>-?\d+)\) (?P<ago>.+?) ago|(?P<other>Created|Dead|Removal In Progress|"
    r"Paused))$"
)
_AGO_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800, "month": 2592000}


def _is_inspect(v: Any) -> bool:
    return (
        isinstance(v, list)
        and bool(v)
        and all(isinstance(c, dict) for c in v)
        and all(isinstance(c.get("State"), dict) and "Id" in c and ("Config" in c or "Name" in c) for c in v)
    )


@FORMATS.format("docker-inspect", shapes={"json"}, detect=lambda d: _is_inspect(d.value), order=30)
def parse_inspect(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for c in doc.value:
        state, config, host = c.get("State") or {}, c.get("Config") or {}, c.get("HostConfig") or {}
        health = state.get("Health") if isinstance(state.get("Health"), dict) else None
        name = str(c.get("Name") or c.get("Id", "")[:12]).lstrip("/")
        finished, started = parse_ts(state.get("FinishedAt")), parse_ts(state.get("StartedAt"))
        logs = (health or {}).get("Log") or []
        data = {
            "name": name,
            "image": config.get("Image") or c.get("Image"),
            "status": state.get("Status"),
            "running": bool(state.get("Running")),
            "restarting": bool(state.get("Restarting")),
            "oom_killed": bool(state.get("OOMKilled")),
            "exit_code": state.get("ExitCode"),
            "error": state.get("Error") or None,
            "started_at": started,
            "finished_at": finished,
            "restart_count": int(c.get("RestartCount") or 0),
            "memory_limit_bytes": int(host.get("Memory") or 0) or None,
            "health": {
                "status": health.get("Status"),
                "failing_streak": health.get("FailingStreak"),
                "last_output": str(logs[-1].get("Output") or "").strip()[:500] if logs else None,
            }
            if health
            else None,
            "from": "docker inspect",
        }
        yield ctx.item(
            doc.path, "container/state", f"container/{name}", data, max(filter(None, (finished, started)), default=None)
        )


def _is_ps_header(line: str) -> bool:
    return bool(_PS_HEADER.match(line)) and "STATUS" in line and "NAMES" in line


def _detect_ps(doc: Document) -> bool:
    return any(_is_ps_header(line.strip()) for line in doc.text[:8192].splitlines()[:20])


def _ago_s(text: str) -> float | None:
    m = re.match(r"^(?:(?P<n>\d+)|an?|About an?) (?P<unit>second|minute|hour|day|week|month)s?$", text.strip(), re.I)
    if not m:
        return None
    return float(int(m["n"] or 1) * _AGO_UNITS[m["unit"].lower()])


@FORMATS.format("docker-ps", shapes={"text"}, detect=_detect_ps, order=19)
def parse_ps(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    lines = doc.text.splitlines()
    start = next(i for i, line in enumerate(lines) if _is_ps_header(line.strip()))
    header = lines[start]
    cols = [(m.start(), m.group(0)) for m in re.finditer(r"\S+(?: \S+)?", header)]
    for line in lines[start + 1 :]:
        if not line.strip() or line.lstrip().startswith(("$", "#")):
            break
        cells = {
            name: line[pos : cols[i + 1][0] if i + 1 < len(cols) else None].strip()
            for i, (pos, name) in enumerate(cols)
        }
        status = _PS_STATUS.match(cells.get("STATUS", ""))
        name = cells.get("NAMES", "")
        if not name:
            continue
        state = (status["state"] or status["up"] or status["other"] or "") if status else ""
        data = {
            "name": name,
            "image": cells.get("IMAGE"),
            "status": {"Up": "running", "Exited": "exited", "Restarting": "restarting"}.get(state, state.lower()),
            "running": state == "Up",
            "restarting": state == "Restarting",
            "oom_killed": False,  # `docker ps` does not say; an exit code 137 is only a SIGKILL
            "exit_code": int(status["code"]) if status and status["code"] else (0 if state == "Up" else None),
            "error": None,
            "started_at": None,
            "finished_at": None,
            "restart_count": 0,
            "memory_limit_bytes": None,
            "health": {"status": status["health"], "failing_streak": None, "last_output": None}
            if status and status["health"]
            else None,
            "from": "docker ps",
            # the container ports it exposes ("8000/tcp", "0.0.0.0:80->80/tcp"): what it listens on
            "ports": sorted({int(p) for p in re.findall(r"(?:->|^|,\s*)(\d+)/(?:tcp|udp)", cells.get("PORTS", ""))}),
        }
        item = ctx.item(doc.path, "container/state", f"container/{name}", data)
        ago = _ago_s(status["ago"]) if status and status["ago"] else None
        if ago is not None:
            pending = ctx.shared.setdefault("docker_ps_ages", [])
            if not pending:
                ctx.after.append(_date_ages)
            pending.append((item, ago))
        yield item


def _date_ages(ctx: ParseContext) -> None:
    if ctx.latest_dated_ts is None:
        return
    for item, ago in ctx.shared.get("docker_ps_ages", []):
        item.data["finished_at"] = ctx.latest_dated_ts - ago
        item.ts = item.data["finished_at"]
