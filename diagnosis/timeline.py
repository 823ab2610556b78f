"""Time in an investigation: parsing the timestamps exports carry, and the evidence set's "now".

Evidence bundles are exports from the past, so "now" is the newest timestamp in the evidence, never the wall
clock: a restart an hour before the export is recent, one a week before it is history.
"""

from __future__ import annotations

import re
import weakref
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from diagnosis.evidence import EvidenceSet
from diagnosis.formats._time import parse_ts as parse_export_ts

_NOW_CACHE: weakref.WeakKeyDictionary[EvidenceSet, tuple[int, float | None]] = weakref.WeakKeyDictionary()
_FRACTION = re.compile(r"\.(\d+)")


def parse_ts(value: Any) -> float | None:
    """Epoch seconds from any timestamp an export carries (the bundle parsers' one parser); None when unset."""
    if isinstance(value, str):
        return _parse_text(value)
    return parse_export_ts(value)


@lru_cache(maxsize=65536)  # exports repeat the same timestamps many times over
def _parse_text(value: str) -> float | None:
    return parse_export_ts(value)


def fmt_ts(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_age(seconds: float) -> str:
    s = abs(seconds)
    if s < 120:
        return f"{int(s)}s"
    if s < 7200:
        return f"{int(s // 60)}m"
    if s < 172800:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def _pod_times(data: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    status = data.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            for state_key in ("state", "lastState"):
                for st in (cs.get(state_key) or {}).values():
                    if isinstance(st, dict):
                        out.extend((st.get("startedAt"), st.get("finishedAt")))
    for cond in status.get("conditions") or ():
        out.append(cond.get("lastTransitionTime"))
    return out


_FORECAST = re.compile(
    r"\b(?:status|state)[=:\s]+[\"']?(?:scheduled|planned|pending|approved|upcoming|not started)\b|"
    r"[,;|]\s*(?:scheduled|planned|pending|approved|upcoming)\s*$",
    re.I,
)


def evidence_now(evidence: EvidenceSet) -> float | None:
    """The newest timestamp in the evidence (None when nothing in it carries a time), or the time the set is read
    as of (`EvidenceSet.at`). Cached per set and size."""
    if evidence.as_of is not None:
        return evidence.as_of
    cached = _NOW_CACHE.get(evidence)
    if cached is not None and cached[0] == len(evidence):
        return cached[1]
    newest: float | None = None

    def see(value: Any) -> None:
        nonlocal newest
        ts = parse_ts(value)
        if ts is not None and ts > 0 and (newest is None or ts > newest):
            newest = ts

    for item in evidence:
        d = item.data
        kind = item.kind
        if kind != "log":
            see(item.ts)
        if kind == "log":
            recs = d.get("records") or ()
            if recs:
                # a change calendar's row for work still to come is a forecast, not an observation
                see(next((r.get("ts") for r in reversed(recs) if not _FORECAST.search(str(r.get("msg") or ""))), None))
                see(recs[0].get("ts"))
        elif kind == "metric":
            pts = d.get("points") or ()
            if pts:
                see(pts[-1][0])
        elif kind == "k8s/Event":
            see(d.get("last_ts"))
            see(d.get("first_ts"))
        elif kind == "alert":
            see(d.get("starts_at"))
            if d.get("status") == "resolved":  # a firing alert's endsAt is a forecast, not an observation
                see(d.get("ends_at"))
        elif kind == "pg/session":
            see(d.get("captured_at"))
        elif kind in ("rds/event",):
            see(d.get("ts"))
        elif kind == "k8s/Pod":
            for v in _pod_times(d):
                see(v)
        elif kind.startswith("k8s/"):
            for cond in (d.get("status") or {}).get("conditions") or ():
                if isinstance(cond, dict):
                    see(cond.get("lastTransitionTime"))
                    see(cond.get("lastUpdateTime"))
                    see(cond.get("lastHeartbeatTime"))
    _NOW_CACHE[evidence] = (len(evidence), newest)
    return newest
