"""Containers on a Docker host (`container/state` from `docker inspect` / `docker ps`): killed at the memory
limit, unable to start, crash-restarting, failing its health check; a container that stopped long ago is history.

A crash without a reason is a symptom: the container's own log (a file named after it, `docker logs <name>`) says
why, and the logs analyzer's finding on that service explains it.
"""

from __future__ import annotations

import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import evidence_now, fmt_age

# A stop older than this before "now" is history, not the current fault (unless it is still restarting).
STALE_AFTER_S = 3600
# What Docker writes to State.Error when it cannot start the container: the container's own configuration.
_START_CONFIG = re.compile(
    r"executable file not found|no such file or directory|permission denied|port is already allocated|"
    r"invalid mount config|bind source path does not exist|unknown or invalid runtime|invalid reference format|"
    r"pull access denied|manifest unknown|not found",
    re.I,
)
_EFFECTS = ["errors", "http_5xx", "crash_loop", "container_restarts", "latency", "service_down", "unhealthy"]


def _mib(n: int) -> str:
    return f"{n / 1048576:.0f}MiB" if n % 1048576 == 0 or n > 1048576 * 10 else f"{n} bytes"


def _ref(item: EvidenceItem, field: str) -> EvidenceRef:
    value = item.data.get(field)
    return EvidenceRef(item=item.id, field=field, value=str(value)[:300] if value is not None else None)


def _finding(item: EvidenceItem, **kw: object) -> Finding:
    name = str(item.data.get("name"))
    return Finding(
        analyzer="containers",
        domain=Domain.HOST,
        object=f"container {name}",
        # an ECS task's container is one of its service's: the service links the tasks to each other
        tags=[f"container:{name}", f"service:{item.data.get('service') or name}"],
        **kw,  # type: ignore[arg-type]
    )


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"container/state"})
def containers(evidence: EvidenceSet) -> list[Finding]:
    now = evidence_now(evidence)
    out: list[Finding] = []
    for item in evidence.kind("container/state"):
        d = item.data
        name = str(d.get("name"))
        code = d.get("exit_code")
        restarts = int(d.get("restart_count") or 0)
        stopped = d.get("finished_at")
        live = bool(d.get("restarting")) or (stopped is None or now is None or stopped >= now - STALE_AFTER_S)
        restarted = f"; Docker restarted it {restarts} time(s)" if restarts else ""
        logs = Action(description="Read the container's last log lines", command=f"docker logs --tail 100 {name}")
        if d.get("oom_killed") and not live:
            out.append(
                _finding(
                    item,
                    role="benign",
                    code="old_container_oom",
                    category=Category.HEALTHY,
                    title=f"container {name} was OOMKilled {fmt_age(now - stopped) if now and stopped else ''} ago",
                    mechanism=f"container {name} was killed at its memory limit long ago and has not been since",
                    ts=stopped,
                    evidence=[_ref(item, "oom_killed")],
                )
            )
        elif d.get("oom_killed"):
            limit = d.get("memory_limit_bytes")
            where = (
                f"its memory limit {_mib(int(limit))}"
                + (" (its task definition)" if d.get("from") == "ecs describe-tasks" else " (docker run --memory)")
                if limit
                else "the host's memory (it runs without a memory limit)"
            )
            out.append(
                _finding(
                    item,
                    role="cause",
                    code="container_oom",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"container {name} OOMKilled (exit {code}){f', {restarts} restarts' if restarts else ''}",
                    mechanism=f"container {name} is OOMKilled (exit {code}): its memory use reaches {where}, so the "
                    f"kernel kills it{restarted}.",
                    score=0.8,
                    ts=stopped,
                    explains=_EFFECTS,
                    evidence=[_ref(item, "oom_killed"), _ref(item, "exit_code")]
                    + ([_ref(item, "memory_limit_bytes")] if limit else []),
                    actions=[
                        Action(
                            description="Compare the container's memory use with its limit",
                            command=f"docker stats --no-stream {name}",
                        ),
                        logs,
                    ],
                )
            )
        elif d.get("error"):
            error = str(d["error"])
            config = bool(_START_CONFIG.search(error))
            out.append(
                _finding(
                    item,
                    role="cause",
                    code="container_start_error",
                    category=Category.CONFIGURATION_ERROR if config else Category.INFRASTRUCTURE,
                    title=f"container {name} cannot start",
                    mechanism=f"container {name} cannot start: Docker reports '{error[:200]}'"
                    + (" (its image, command, mounts or ports as configured)" if config else ""),
                    score=0.75,
                    ts=stopped,
                    explains=_EFFECTS,
                    evidence=[_ref(item, "error")],
                    actions=[
                        Action(description="Show how the container is configured", command=f"docker inspect {name}")
                    ],
                )
            )
        elif isinstance(code, int) and code not in (0, 143) and live and (restarts or d.get("restarting") or stopped):
            killed = " (SIGKILL: the host's OOM killer, a docker kill, or a stop timeout)" if code == 137 else ""
            out.append(
                _finding(
                    item,
                    role="symptom",
                    code="crash_loop",
                    category=Category.UNKNOWN,
                    title=f"container {name} exited with code {code}{killed}"
                    + (f", {restarts} restarts" if restarts else ""),
                    mechanism=f"container {name} exits with code {code}{killed}{restarted}; its log says why",
                    score=0.6,
                    ts=stopped,
                    evidence=[_ref(item, "exit_code")] + ([_ref(item, "restart_count")] if restarts else []),
                    actions=[logs],
                    needs=[f"the log of container {name} (docker logs {name})"],
                )
            )
        health = d.get("health") or {}
        if health.get("status") == "unhealthy":
            output = str(health.get("last_output") or "")
            out.append(
                _finding(
                    item,
                    role="symptom",
                    code="unhealthy",
                    category=Category.UNKNOWN,
                    title=f"container {name} fails its health check",
                    mechanism=f"container {name} is unhealthy"
                    + (f": its health check answers '{output[:200]}'" if output else ""),
                    score=0.5,
                    ts=item.ts,
                    evidence=[EvidenceRef(item=item.id, field="health.status", value="unhealthy")],
                    actions=[logs],
                    needs=[f"the log of container {name} (docker logs {name})"],
                )
            )
    return out
