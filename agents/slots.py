"""Fill a playbook's slots from the request text and its structured inputs (inputs win)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from memory.entities import NAMED_SERVICE, PATH, QUOTED, SERVICE, URL
from memory.playbooks import Playbook

_SINCE_CLOCK = re.compile(r"\bsince\s+(\d{1,2}):(\d{2})\b")
_LAST_N = re.compile(r"\b(?:last|past)\s+(\d+)\s*(m|min|mins|minutes?|h|hrs?|hours?|d|days?)\b")
_PROCESS = re.compile(r"\b(?:is|are)\s+([a-z][\w.-]{1,40})\s+running\b|\bprocess(?:es)?\s+([a-z][\w.-]{1,40})")


class SlotError(ValueError):
    pass


def _window_minutes(text: str, now: datetime) -> float | None:
    m = _SINCE_CLOCK.search(text)
    if m:
        hour, minute = int(m.group(1)), int(m.group(2))
        if hour < 24 and minute < 60:
            since = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
            if since > now:
                since -= timedelta(days=1)
            return max(1.0, round((now - since).total_seconds() / 60, 1))
    m = _LAST_N.search(text)
    if m:
        n, unit = int(m.group(1)), m.group(2)[0]
        return float(n * {"m": 1, "h": 60, "d": 1440}[unit])
    return None


def extract(kind: str, text: str, now: datetime) -> Any:
    low = text.lower()
    if kind == "urls":
        return list(dict.fromkeys(u.rstrip(".") for u in URL.findall(text))) or None
    if kind == "window_minutes":
        return _window_minutes(low, now)
    if kind == "path":
        paths = PATH.findall(URL.sub(" ", text))
        return paths[0] if paths else None
    if kind == "service":
        m = SERVICE.search(low) or NAMED_SERVICE.search(low)
        return m.group(1) if m else None
    if kind == "pattern":
        m = QUOTED.search(text)
        return re.escape(m.group(1)) if m else None
    if kind == "processes":
        found = [a or b for a, b in _PROCESS.findall(low)]
        return found or None
    return None


def fill_slots(playbook: Playbook, text: str, inputs: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    now = now or datetime.now()
    values: dict[str, Any] = {}
    missing = []
    for name, spec in playbook.slots.items():
        if name in inputs and inputs[name] not in (None, "", []):
            value = inputs[name]
            if spec.kind in ("urls", "processes") and isinstance(value, str):
                value = [value]
        else:
            value = extract(spec.kind, text, now)
        if value is None:
            value = spec.default
        if spec.required and value in (None, "", []):
            missing.append(name)
        values[name] = value
    if missing:
        raise SlotError(f"playbook {playbook.name} needs {', '.join(missing)}; none found in the request or inputs")
    return values
