"""Bounds on caller-given JSON (task inputs, plans): what every layer below can store and serialise.

Python's json reads integers of any size and the literals NaN and Infinity; msgpack (the LangGraph
checkpointer), PostgreSQL's BIGINT and strict JSON parsers do not. A value outside these bounds is refused
where it enters, not met as a TypeError in the orchestrator later."""

from __future__ import annotations

import math
from typing import Any

from core.errors import UserError

MIN_INT = -(2**63)
MAX_INT = 2**63 - 1
MAX_DEPTH = 32


def json_value_problem(value: Any, where: str = "", depth: int = 0) -> str | None:
    """The first value here that a lower layer could not hold, described with its path; None if all fit."""
    if depth > MAX_DEPTH:
        return f"{where or 'value'}: nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        if not MIN_INT <= value <= MAX_INT:
            return f"{where or 'value'}: integer outside the signed 64-bit range"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where or 'value'}: {value} is not a finite number"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = json_value_problem(item, f"{where}.{key}" if where else str(key), depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = json_value_problem(item, f"{where}[{i}]", depth + 1)
            if problem:
                return problem
        return None
    return f"{where or 'value'}: {type(value).__name__} is not a JSON value"


def check_json_value(value: Any, where: str = "") -> None:
    """Raise UserError (422 invalid_request at the API) if `value` holds something a lower layer cannot hold."""
    problem = json_value_problem(value, where)
    if problem:
        raise UserError(problem)
