"""Network file systems whose server stopped answering: the kernel's NFS client ("nfs: server filer01 not
responding, still trying"), CIFS/SMB client ("Server x has not responded in 60 seconds. Reconnecting") and CephFS
client, whose metadata server stopped serving it ("ceph: mds0 caps stale", "ceph: mds0 hung").

On a hard mount every process that touches the share waits in the kernel (state D) until the server answers:
the host's load average climbs with blocked tasks while its CPU idles, worker pools fill with workers stuck in a
stat() or read(), and the hung-task watchdog prints "blocked for more than 120 seconds". All of that is the
server's symptom: the cause is a dependency (the file server, another team's filer), not the host's capacity.
A server that answered again ("nfs: server x OK") and stayed quiet is over.
"""

from __future__ import annotations

import re
from collections import defaultdict

from diagnosis.analyzers._common import Rec, now_of, signature_records, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

_NOT_RESPONDING = re.compile(
    r"\b(?P<fs>nfs|lockd|cifs|smb3?): (?:VFS: )?[Ss]erver (?P<server>[\w.\-:\[\]\\]+?)"
    r"(?: not responding| has not responded in \d+ seconds)"
)
_CEPH_MDS_STALLED = re.compile(r"\bceph: (?P<server>mds\d+) (?:hung|caps stale)\b")
_OK = re.compile(
    r"\b(?:nfs|lockd): server (?P<server>[\w.\-:\[\]]+) OK\b|\bceph: (?P<mds>mds\d+) (?:recovered|reconnect success)"
)


def _stalled(msg: str) -> tuple[str, str] | None:
    """(kind, server) of a kernel line saying a file server stopped answering."""
    if m := _NOT_RESPONDING.search(msg):
        return ("NFS" if m["fs"] in ("nfs", "lockd") else "SMB"), m["server"].lower()
    if m := _CEPH_MDS_STALLED.search(msg):
        return "CephFS metadata", m["server"]
    return None


STILL_QUIET_S = 15 * 60  # a server back this long with no new "not responding" is over
MIN_RECORDS = 2  # the kernel prints one per stalled RPC; one line alone is a blip


def file_server_stalled_by(evidence: EvidenceSet, ts: float | None, slack_s: float = 120.0) -> bool:
    """Whether a kernel reported a file server not responding (twice or more) by `ts` (plus `slack_s`): a worker pool
    that filled up then is full of workers waiting on the share, not short of workers."""
    stamps = [rec.ts for rec in signature_records(evidence) if _stalled(rec.msg)]
    known = [t for t in stamps if t is not None]
    return len(stamps) >= MIN_RECORDS and (ts is None or not known or min(known) <= ts + slack_s)


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log"})
def remote_fs_unresponsive(evidence: EvidenceSet) -> list[Finding]:
    """A file server (NFS, SMB) its clients' kernels report not responding, still at the end of the evidence."""
    now = now_of(evidence)
    down: dict[str, list[Rec]] = defaultdict(list)
    back: dict[str, list[Rec]] = defaultdict(list)
    kinds: dict[str, str] = {}
    for rec in signature_records(evidence):
        if stalled := _stalled(rec.msg):
            kinds[stalled[1]] = stalled[0]
            down[stalled[1]].append(rec)
    if not down:
        return []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if (" OK" in msg or "ceph: mds" in msg) and (m := _OK.search(msg)):
                back[(m["server"] or m["mds"]).lower()].append(Rec(item, r.get("ts"), msg, r.get("line"), None))
    out: list[Finding] = []
    for server, hits in down.items():
        if len(hits) < MIN_RECORDS:
            continue
        first = min((r.ts for r in hits if r.ts is not None), default=None)
        last = max((r.ts for r in hits if r.ts is not None), default=None)
        last_ok = max((r.ts for r in back.get(server, ()) if r.ts is not None), default=None)
        over = (
            last_ok is not None
            and last is not None
            and last_ok > last
            and (now is None or now - last_ok >= STILL_QUIET_S)
        )
        kind = kinds[server]
        blocked = sum(
            1
            for item in {r.item.id: r.item for r in hits}.values()
            for r in item.data.get("records") or ()
            if "blocked for more than" in str(r.get("msg") or "")
            and (first is None or not isinstance(r.get("ts"), int | float) or r["ts"] >= first)
        )
        hung = f"; {blocked} task(s) hung waiting on it (blocked for more than 120 s)" if blocked else ""
        out.append(
            Finding(
                analyzer="remote_fs_unresponsive",
                domain=Domain.HOST,
                role="benign" if over else "cause",
                code="file_server_unresponsive",
                category=Category.HEALTHY if over else Category.DEPENDENCY_FAILURE,
                title=f"{kind} server {server} not responding ({len(hits)}x)" + (", since back" if over else ""),
                mechanism=(
                    f"{kind} server {server} stops answering its clients' requests ('{hits[-1].msg.strip()[:140]}' "
                    f"x{len(hits)} {span_text(first, last)}){hung}: on a hard mount every process touching the "
                    "share waits in the kernel, so load rises with blocked tasks, worker pools fill and requests time "
                    "out while the CPU idles" + ("; it answered again since." if over else ".")
                ),
                object=f"{kind} server {server}",
                score=0.4 if over else 0.85,
                ts=first,
                tags=[f"host:{server}", f"upstream:{server.split('.')[0]}"],
                explains=[
                    "app_pool_exhausted",
                    "load_high",
                    "cpu_iowait",
                    "io_wait",
                    "hung_task",
                    "latency",
                    "errors",
                    "upstream_timeout",
                    "http_5xx",
                    "probe_*",
                    "alert:*",
                ],
                evidence=[
                    EvidenceRef(item=r.item.id, line=r.line, value=r.msg.strip()[:300]) for r in (hits[0], hits[-1])
                ],
                actions=_actions(kind, server),
            )
        )
    return out


def _actions(kind: str, server: str) -> list[Action]:
    if kind.startswith("CephFS"):
        return [
            Action(
                description="Ask the Ceph cluster what its metadata servers are doing",
                command="ceph fs status; ceph mds stat",
            ),
            Action(
                description="See the cluster's health detail (a rank stuck in replay, slow requests)",
                command="ceph health detail",
            ),
        ]
    return [
        Action(description="Ask the server whether its NFS service answers", command=f"rpcinfo -t {server} nfs 4"),
        Action(description="See the mount's retransmissions and timeouts", command="nfsstat -c; nfsiostat 5 3"),
    ]
