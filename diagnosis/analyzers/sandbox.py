"""A service that systemd's sandboxing keeps from writing where it must: `ProtectSystem=strict` mounts the whole
file system read-only for the unit except the paths in `ReadWritePaths=` (and its State/Cache/Logs/Runtime
directories); `ProtectSystem=full` makes /usr, /boot and /etc read-only; `ProtectHome=yes` hides /home. A unit whose
process fails with "Read-only file system" on a path the sandbox leaves read-only is the unit's configuration error
(a hardening drop-in that forgot a path), not a disk mounted read-only nor a bug."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import Rec, ref_of, service_of
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

_EROFS = re.compile(r"Read-only file system|\bEROFS\b", re.I)
_PATH = re.compile(r"['\"`(]?(?P<path>/(?:var|srv|opt|etc|usr|home|data|mnt|run)/[\w./@\-]+)")
_STATE_DIRS = {"StateDirectory": "/var/lib", "CacheDirectory": "/var/cache", "LogsDirectory": "/var/log",
               "RuntimeDirectory": "/run", "ConfigurationDirectory": "/etc"}  # fmt: skip


def _writable(directives: dict[str, str], path: str) -> bool | None:
    """Whether the unit's sandbox lets it write `path` (None: no sandbox that makes it read-only)."""
    protect = directives.get("ProtectSystem", "no").lower()
    system = ("/usr/", "/boot/", "/etc/") if protect == "full" else ("/usr/", "/boot/")
    read_only = protect == "strict" or (protect in ("full", "yes", "true") and path.startswith(system))
    if not read_only:
        return None
    allowed = directives.get("ReadWritePaths", "").split()
    for key, base in _STATE_DIRS.items():
        allowed += [f"{base}/{d}" for d in directives.get(key, "").split()]
    return any(path == a.lstrip("-+") or path.startswith(a.lstrip("-+").rstrip("/") + "/") for a in allowed)


def _logs_of(evidence: EvidenceSet, unit: str) -> list[EvidenceItem]:
    name = unit.removesuffix(".service")
    return [i for i in evidence.kind("log") if name in i.object or service_of(i) == name]


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"systemd/unit", "log"})
def sandbox_read_only(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for unit in evidence.kind("systemd/unit"):
        directives: dict[str, str] = unit.data.get("directives") or {}
        name = str(unit.data.get("unit") or unit.object)
        hit: tuple[Rec, str] | None = None
        for item in _logs_of(evidence, name):
            for r in item.data.get("records") or ():
                msg = str(r.get("msg") or "")
                if _EROFS.search(msg) and (p := _PATH.search(msg)) and _writable(directives, p["path"]) is False:
                    hit = (Rec(item, r.get("ts"), msg, r.get("line"), r.get("level")), p["path"])
                    break
            if hit:
                break
        if hit is None:
            continue
        rec, path = hit
        protect = directives.get("ProtectSystem", "")
        rw = directives.get("ReadWritePaths", "") or "nothing"
        files = ", ".join(unit.data.get("files") or [])
        out.append(
            Finding(
                analyzer="sandbox_read_only",
                domain=Domain.HOST,
                role="cause",
                code="sandbox_read_only",
                category=Category.CONFIGURATION_ERROR,
                title=f"{name}: ProtectSystem={protect} leaves {path} read-only (ReadWritePaths={rw})",
                mechanism=(
                    f"{name}'s sandbox (ProtectSystem={protect}, ReadWritePaths={rw}; from {files}) mounts {path} "
                    f"read-only for the service, so it fails writing there ('{rec.msg.strip()[:160]}'): the unit's "
                    "hardening forgot a path the service writes, not a disk mounted read-only nor a bug."
                ),
                object=f"systemd unit {name}",
                score=0.85,
                ts=rec.ts,
                tags=[f"service:{name.removesuffix('.service')}", f"unit:{name}"],
                explains=[
                    *("exception", "errors", "crash_loop", "service_down", "unit_failed", "restart_loop"),
                    *("connection_refused", "http_5xx", "alert:*", "killed", "killed_from_outside"),
                ],
                evidence=[
                    ref_of(rec),
                    EvidenceRef(item=unit.id, field="directives.ProtectSystem", value=protect),
                ],
                actions=[
                    Action(description=f"The sandbox {name} runs in", command=f"systemctl cat {name}"),
                    Action(
                        description=f"Let {name} write {path.rsplit('/', 1)[0]} and restart it",
                        command=f"systemctl edit {name}  # [Service] ReadWritePaths={path.rsplit('/', 1)[0]}; then "
                        f"systemctl daemon-reload && systemctl restart {name}",
                        kind="write",
                    ),
                ],
            )
        )
    return out
