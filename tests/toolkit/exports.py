"""Small builders of native exports for rule tests: an RFC 3339 time and a Prometheus `query_range` response."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def iso(ts: float) -> str:
    """`2024-06-05T13:00:00.000Z` (milliseconds, UTC), as kubectl, CloudWatch and most JSON loggers write it."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def prom_matrix(
    name: str, series: list[tuple[dict[str, str], list[float]]], start: float, step: int = 60
) -> dict[str, Any]:
    """A Prometheus HTTP API `query_range` response: one matrix series per (labels, values), `step` seconds apart."""
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": name, **labels},
                    "values": [[start + step * i, str(v)] for i, v in enumerate(values)],
                }
                for labels, values in series
            ],
        },
    }
