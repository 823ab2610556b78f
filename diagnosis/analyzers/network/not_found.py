"""Paths that answered and now answer 404: the routing in front of the application changed.

When the requests for a path that a web server or proxy served until some moment (2xx/3xx) answer 404 from that
moment on, most of its traffic at once, nothing that handles them is reached any more: a proxy's path or rewrite
(`proxy_pass` losing its trailing slash), the Host header a CDN sends, an ingress rule, a base path. A scanner's
404s do not count (they ask for paths nobody served), nor health checks. A configuration error of the routing,
named after the paths and the moment.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from diagnosis.analyzers._common import fmt_ts, now_of, service_of, span_text
from diagnosis.analyzers.network._shared import STOPPED_AFTER_S
from diagnosis.analyzers.network.extraction import _ACCESS_STATUS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

_PATH = re.compile(r"\"\s*[A-Z]+ (/[^\s\"?]*)|\"(?:url|path|uri|request_uri|req_path)\"\s*:\s*\"(/[^\"?]*)")
_HEALTH = re.compile(r"health|ready|live|ping|status|metrics|favicon|robots", re.I)
MIN_NOT_FOUND = 5  # 404s after the moment
MIN_BEFORE = 3  # requests served before it
NOT_FOUND_SHARE = 0.5  # of the requests after it
MIN_LOST = 2  # of them for paths it served before (a scanner asks for paths nobody served)


def _prefix(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    return "/" + "/".join(parts[:2]) if parts else "/"


def not_found_steps(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hits: list[tuple[float, int, str, dict[str, Any]]] = []
        for r in item.data.get("records") or ():
            ts = r.get("ts")
            msg = str(r.get("msg") or "")
            if not isinstance(ts, int | float) or ("HTTP/" not in msg and "status" not in msg):
                continue
            m = _ACCESS_STATUS.search(msg)
            p = _PATH.search(msg)
            if not m or not p:
                continue
            path = p.group(1) or p.group(2) or "/"
            if _HEALTH.search(path):
                continue
            hits.append((float(ts), int(next(g for g in m.groups() if g)), path, r))
        if len(hits) < MIN_BEFORE + MIN_NOT_FOUND:
            continue
        hits.sort(key=lambda h: h[0])
        first_404 = next((i for i, h in enumerate(hits) if h[1] == 404), None)
        if first_404 is None or first_404 < MIN_BEFORE:
            continue
        before, after = hits[:first_404], hits[first_404:]
        missing = [h for h in after if h[1] == 404]
        if len(missing) < MIN_NOT_FOUND or len(missing) < NOT_FOUND_SHARE * len(after):
            continue
        served = {_prefix(h[2]) for h in before if 200 <= h[1] < 400}
        lost = Counter(_prefix(h[2]) for h in missing if _prefix(h[2]) in served)
        if sum(lost.values()) < MIN_LOST:
            continue  # 404s for paths nobody served before (a scanner, a broken link): not a route that went away
        last = missing[-1][0]
        if now is not None and now - last >= STOPPED_AFTER_S and hits[-1][1] != 404:
            continue  # over
        svc = service_of(item) or item.object
        at = missing[0][0]
        paths = ", ".join(p for p, _ in lost.most_common(4))
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="cause",
                code="routes_not_found",
                category=Category.CONFIGURATION_ERROR,
                title=f"{svc}: paths it served answer 404 since {fmt_ts(at)} ({len(missing)} of {len(after)})",
                mechanism=(
                    f"{svc} answers 404 for {len(missing)} of {len(after)} requests {span_text(at, last)} under "
                    f"{paths}, which it served before ({len(before)} request(s) before {fmt_ts(at)}, none 404): the "
                    "requests no longer reach what handles them, so what routes them changed at that moment (a "
                    "proxy's path or rewrite, the Host header sent upstream, an ingress rule, a base path)"
                ),
                object=f"routing of {svc} ({paths})",
                score=0.6,
                ts=at,
                tags=[f"service:{svc}"],
                explains=["http_4xx", "errors", "error_rate", "metric_shift", "alert:*", "probe_*"],
                evidence=[
                    EvidenceRef(item=item.id, line=h[3].get("line"), value=str(h[3].get("msg"))[:300])
                    for h in (before[-1], missing[0])
                ],
                actions=[
                    Action(
                        description="What changed in the routing at that moment (proxy config, CDN version, ingress)",
                        command="git log --since '<the moment> - 1h' -p -- <proxy and ingress config>",
                    ),
                    Action(
                        description="Compare a failing path at the proxy and at the application directly",
                        command=f"curl -si https://<host>{missing[0][2]} ; curl -si http://<app>:<port>{missing[0][2]}",
                    ),
                ],
            )
        )
    return out
