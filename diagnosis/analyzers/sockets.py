"""Connections a process never closes: sockets piling up in CLOSE-WAIT.

A socket is in CLOSE-WAIT when the peer closed its end and the local process has not closed its own: the kernel
keeps it (and its file descriptor) until the process does. A few are normal for a moment; hundreds or thousands,
most of the process's sockets, mean the code does not close what it opened (a response body never read to the end
or closed, a client made per request, a pool that forgets returned connections). The process then runs out of file
descriptors or ports, and raising the limit only delays it: a code_defect, named by the peer the leaked
connections go to where the evidence counts them by peer.
"""

from __future__ import annotations

import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

CLOSE_WAIT_MIN = 200  # sockets in CLOSE-WAIT
CLOSE_WAIT_SHARE = 0.5  # of the process's (or host's) sockets counted


def _process_name(evidence: EvidenceSet, pid: str) -> str | None:
    """The program a pid belongs to, from a syslog/journal line of it ("inv01 invoicing[41877]: ...")."""
    rx = re.compile(rf"(?:^|\s)([A-Za-z][\w.\-]*)\[{re.escape(pid)}\]:")
    for item in evidence.kind("log"):
        for r in (item.data.get("records") or ())[:200]:
            if (m := rx.search(str(r.get("msg") or ""))) is not None:
                return m[1]
    return None


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"host/sockets"})
def close_wait_leak(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    items = evidence.kind("host/sockets")
    for item in items:
        states = item.data.get("states") or {}
        stuck = int(states.get("CLOSE-WAIT") or 0)
        total = sum(int(v) for k, v in states.items() if k != "LISTEN")
        if stuck < CLOSE_WAIT_MIN or stuck < CLOSE_WAIT_SHARE * max(total, 1):
            continue
        host = item.object.removeprefix("host/")
        pid = item.data.get("pid")
        peers = next(
            (
                p.data.get("peers") or []
                for p in items
                if p.object == item.object and p.data.get("state") == "CLOSE-WAIT" and p.data.get("peers")
            ),
            [],
        )
        top = max(peers, key=lambda p: p["count"]) if peers else None
        to = f" to {top['peer']} ({top['count']} of them)" if top else ""
        service = _process_name(evidence, str(pid)) if pid else None
        who = f"{service or 'process'} (pid {pid}) on {host}" if pid else host
        refs = [EvidenceRef(item=item.id, field="states.CLOSE-WAIT", value=stuck)]
        out.append(
            Finding(
                analyzer="close_wait_leak",
                domain=Domain.HOST,
                role="cause",
                code="connection_leak",
                category=Category.CODE_DEFECT,
                title=f"{who}: {stuck} sockets in CLOSE-WAIT{to}",
                mechanism=(
                    f"{who} holds {stuck} TCP connections in CLOSE-WAIT{to}, {stuck / max(total, 1):.0%} of its "
                    "sockets: their peers closed them and the process never did, so each keeps a file descriptor "
                    "until it runs out; the code does not close the connections it opens (a response body not "
                    "closed, a client per request), and a higher open-file limit only delays it"
                ),
                object=f"connections of {who}",
                score=0.9,
                ts=item.ts,
                tags=[
                    f"host:{host}",
                    *([f"service:{service}"] if service else []),
                    *([f"upstream:{top['peer'].split(':')[0]}"] if top else []),
                ],
                explains=[
                    "fd_exhaustion",
                    "errors",
                    "exception",
                    "upstream_*",
                    "latency",
                    "http_5xx",
                    "alert:*",
                    "saturation",
                    "process_down",
                ],
                evidence=refs,
                actions=[
                    Action(
                        description="Which peers and code paths hold the CLOSE-WAIT sockets",
                        command=f"ss -tanp state close-wait{f' | grep pid={pid},' if pid else ''} | head -20",
                    ),
                    Action(
                        description="Restart the process to release them (stopgap), then fix where it skips closing",
                        command="systemctl restart <unit>",
                        kind="write",
                    ),
                ],
            )
        )
    return out
