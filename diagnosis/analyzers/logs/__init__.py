"""Logs: error templates with counts and time spans; exceptions (code_defect), bad data (data_quality), an
application running out of memory; old errors and a steady background are benign.

Messages whose mechanism another analyzer names (a timeout to an upstream, a full disk, a kernel OOM kill, too
many database clients) count toward the service's `errors` symptom here, and their cause is left to the
network, database or host analyzer.

The package's modules: `errors` (error templates per source and their causes), `data` (naming bad data and its
producer), `settings` (a refused Host, configuration changes quoted by errors, missing settings), `capacity` (an
application at its own capacity), `empty` (an input that arrived empty), `drift` (an input that changed shape and
loads anyway), `leaks` (a leak the runtime reports: the cause of a pool or heap that ran out), `retries` (bad data
in the tries behind a consumer's give-ups), `stale` (replicas that kept state from before a change a newer replica
does not have), `startup` (a file a process could not find when it started and has run without since);
`_shared` holds the thresholds and expressions they all read.
"""

from __future__ import annotations

from diagnosis.analyzers.logs.capacity import app_capacity, quota_refused
from diagnosis.analyzers.logs.drift import (
    ignored_columns_nulled,
    input_drift,
    input_layout_changed,
    rejected_records,
    stamps_refused,
)
from diagnosis.analyzers.logs.empty import empty_input
from diagnosis.analyzers.logs.errors import log_errors
from diagnosis.analyzers.logs.leaks import runtime_leaks
from diagnosis.analyzers.logs.retries import bad_data_behind_retries
from diagnosis.analyzers.logs.settings import host_not_allowed
from diagnosis.analyzers.logs.stale import stale_startup_state
from diagnosis.analyzers.logs.startup import missing_at_start

__all__ = [
    "app_capacity",
    "bad_data_behind_retries",
    "empty_input",
    "host_not_allowed",
    "ignored_columns_nulled",
    "input_drift",
    "input_layout_changed",
    "log_errors",
    "missing_at_start",
    "quota_refused",
    "rejected_records",
    "runtime_leaks",
    "stale_startup_state",
    "stamps_refused",
]
