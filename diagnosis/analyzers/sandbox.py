"""A service that systemd's sandboxing keeps from writing where it must: `ProtectSystem=strict` mounts the whole
file system read-only for the unit except the paths in `ReadWritePaths=` (and its State/Cache/Logs/Runtime
directories); `ProtectSystem=full` makes /usr, /boot and /etc read-only; `ProtectHome=yes` hides /home. A unit whose
process fails with "Read-only file system" on a path the sandbox leaves read-only is the unit's configuration error
(a hardening drop-in that forgot a path), not a disk mounted read-only nor a bug. Likewise a unit systemd cannot
start on its own settings (an EnvironmentFile, ExecStart or WorkingDirectory that is not there): `unit_setup_failed`."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import Rec, records_with, ref_of, service_of
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.network.extraction import _target_tags
from diagnosis.analyzers.network.ports import loopback_refusals
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import evidence_now

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


# systemd failing to start a unit on its own settings, before the program runs: an EnvironmentFile that is gone,
# an ExecStart binary or WorkingDirectory missing, a User that does not exist, a namespace it cannot set up
_UNIT_SETUP = re.compile(
    r"(?P<unit>[\w@.\-]+\.service): (?P<what>Failed to load environment files|Failed at step \w+ spawning|"
    r"Failed to (?:execute|locate executable|set up mount namespacing|determine user credentials|"
    r"change directory)[^:]*|Main process exited, code=exited, status=(?:203/EXEC|200/CHDIR|217/USER|"
    r"226/NAMESPACE|209/STDOUT|243/CREDENTIALS))"
)


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log"})
def unit_setup_failed(evidence: EvidenceSet) -> list[Finding]:
    """A systemd unit that cannot start because of its own settings (what systemd says before the program runs):
    the unit's configuration points at something that is not there, so the service is down and its callers are
    refused, whatever the program's health."""
    hits: dict[str, list[tuple[Rec, str]]] = {}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if ".service: " not in msg:
                continue
            m = _UNIT_SETUP.search(msg)
            if m:
                hits.setdefault(m["unit"], []).append((Rec(item, r.get("ts"), msg, r.get("line"), "error"), m["what"]))
    out: list[Finding] = []
    local = [f"{host}:{port}" for host, port in loopback_refusals(evidence)] if hits else []
    for unit, recs in hits.items():
        name = unit.removesuffix(".service")
        what = recs[0][1]
        out.append(
            Finding(
                analyzer="unit_setup_failed",
                domain=Domain.HOST,
                role="cause",
                code="unit_setup_failed",
                category=Category.CONFIGURATION_ERROR,
                title=f"systemd cannot start {unit}: {what} ({len(recs)}x)",
                mechanism=(
                    f"systemd cannot start {unit}: '{recs[0][0].msg.strip()[:160]}' {len(recs)}x: the unit's own "
                    "settings (EnvironmentFile=, ExecStart=, WorkingDirectory=, User=) point at something that is not "
                    f"there, so {name} never runs and whatever calls it is refused."
                ),
                object=f"unit {unit}",
                score=0.85,
                ts=min((r.ts for r, _ in recs if r.ts is not None), default=None),
                # the one local port callers are refused on is the one this unit would have served
                tags=[f"service:{name}", f"unit:{unit}", *(_target_tags(local[0]) if len(local) == 1 else [])],
                explains=[
                    "connection_refused",
                    "upstream_*",
                    "process_down",
                    "errors",
                    "http_5xx",
                    "alert:*",
                    "probe_*",
                ],
                evidence=[ref_of(recs[0][0]), ref_of(recs[-1][0])],
                actions=[
                    Action(description="The unit as systemd reads it", command=f"systemctl cat {unit}"),
                    Action(description="Why it fails", command=f"journalctl -u {unit} -n 50 --no-pager"),
                ],
            )
        )
    return out


# ---------------------------------------------------------------- SELinux denials (Linux audit records)

_SELINUX_DENIED = re.compile(
    r"^SELinux denied (?P<perm>.+?) to (?P<comm>\S+) \((?P<src>[\w.]+)\) on (?P<path>\S+) labelled (?P<label>[\w.]+)"
    r".*permissive=0"
)
SELINUX_QUIET_S = 6 * 3600  # denials that stopped this long before "now" are an old story


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log"})
def selinux_denied(evidence: EvidenceSet) -> list[Finding]:
    """A process SELinux keeps from files or ports its policy does not give it: files moved or created where they
    took a label the process's domain may not read (default_t, user_home_t after a move or a new volume), or a port
    the policy does not know. Ordinary permissions look right, so it reads as a mystery 403 or EACCES; it is the
    host's configuration (the files' labels), fixed with semanage fcontext and restorecon."""
    # (process, domain, label) -> (a path and the access denied there, the denials)
    groups: dict[tuple[str, str, str], tuple[str, str, list[Rec]]] = {}
    for rec in records_with(evidence, ("SELinux denied",)):
        if m := _SELINUX_DENIED.match(rec.msg):
            groups.setdefault((m["comm"], m["src"], m["label"]), (m["path"], m["perm"], []))[2].append(rec)
    now = evidence_now(evidence)
    out: list[Finding] = []
    for (comm, src, label), (path, perm, recs) in groups.items():
        last = max((r.ts for r in recs if r.ts is not None), default=None)
        if now is not None and last is not None and now - last > SELINUX_QUIET_S:
            continue
        folder = path.rsplit("/", 1)[0] if "/" in path else path
        out.append(
            Finding(
                analyzer="selinux_denied",
                domain=Domain.HOST,
                role="cause",
                code="selinux_denied",
                category=Category.CONFIGURATION_ERROR,
                title=f"SELinux denies {comm} ({src}) {perm} on files labelled {label} ({len(recs)}x)",
                mechanism=(
                    f"SELinux (enforcing) denies {comm}, running as {src}, {perm} on {path} and the like, "
                    f"whose label is {label} ({len(recs)} denials in the audit records): the files sit where they "
                    f"took a label {src} may not read (moved or created on a new volume without the file context), "
                    "so requests for them fail with permission errors while ordinary permissions look right."
                ),
                object=f"SELinux label of {folder}",
                score=0.85,
                ts=recs[0].ts,
                tags=[f"service:{comm}", f"process:{comm}", f"path:{folder}"],
                explains=["errors", "http_4xx", "http_5xx", "exception", "metric_shift", "alert:*"],
                evidence=[ref_of(r) for r in recs[:3]],
                actions=[
                    Action(description="The files' labels next to a path that works", command=f"ls -Z {folder}"),
                    Action(
                        description=f"Give the path the file context {comm} may read, then relabel it",
                        command=f"semanage fcontext -a -t httpd_sys_content_t '{folder}(/.*)?' && restorecon -Rv "
                        f"{folder}",
                        kind="write",
                    ),
                ],
            )
        )
    return out
