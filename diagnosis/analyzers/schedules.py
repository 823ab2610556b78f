"""Schedules: a job the scheduler ran like clockwork that stopped running while the scheduler goes on.

- `schedule_stopped` (cause, configuration_error): cron's own log (`CRON[pid]: (user) CMD (command)`) shows a
  command run at a steady period (3+ runs) whose runs stopped more than one and a half periods before the evidence
  ends, while cron kept running other commands after it was due: its schedule is gone (a crontab or /etc/cron.d
  file removed, renamed to a name cron ignores, or edited). A file cron dropped or reloaded at about that time
  (`(*system*name) DELETE (/etc/cron.d/name)`) is named.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict

from diagnosis.analyzers._common import Rec, now_of, ref_of
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding
from diagnosis.series import median
from diagnosis.timeline import fmt_ts

_CRON_RUN = re.compile(r"\bCRON\[\d+\]: \((?P<user>[\w.\-]+)\) CMD \((?P<cmd>.+)\)\s*$")
_CRON_FILE = re.compile(r"\(\*system\*(?P<name>[\w.\-]+)\) (?P<what>DELETE|RELOAD|WRONG INODE INFO|ORPHAN)\b[^(]*"
                        r"\((?P<path>[^)]+)\)")  # fmt: skip
MIN_RUNS = 3
LATE = 1.5  # periods without a run that make a steady job missing
STEADY = 0.1  # the gaps between its runs vary by at most this share of the period


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log"})
def schedule_stopped(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    if now is None:
        return []
    runs: dict[tuple[str, str], list[Rec]] = defaultdict(list)
    files: list[Rec] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "CRON" not in msg and "*system*" not in msg:
                continue
            ts = r.get("ts")
            rec = Rec(item, ts, msg, r.get("line"), "info")
            if (m := _CRON_RUN.search(msg)) and isinstance(ts, int | float):
                runs[(m["user"], m["cmd"].strip())].append(rec)
            elif _CRON_FILE.search(msg):
                files.append(rec)
    if len(runs) < 2:
        return []
    out: list[Finding] = []
    for (user, cmd), recs in runs.items():
        stamps = sorted(float(r.ts) for r in recs if r.ts is not None)
        if len(stamps) < MIN_RUNS:
            continue
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        period = median(gaps)
        if period <= 0 or any(abs(g - period) > STEADY * period for g in gaps):
            continue
        last = stamps[-1]
        if now - last < LATE * period:
            continue
        # cron went on running other commands after this one was due
        due = last + period
        others = [r for key, rs in runs.items() if key != (user, cmd) for r in rs if r.ts is not None and r.ts > due]
        if not others:
            continue
        dropped = next(
            (f for f in sorted(files, key=lambda r: r.ts or 0) if f.ts is not None and last <= f.ts <= due), None
        )
        said = ""
        if dropped is not None and (m := _CRON_FILE.search(dropped.msg)):
            said = f"; cron dropped {m['path']} ({m['what']}) at {fmt_ts(dropped.ts)}"
        out.append(
            Finding(
                analyzer="schedule_stopped",
                domain=Domain.HOST,
                role="cause",
                code="schedule_stopped",
                category=Category.CONFIGURATION_ERROR,
                title=f"cron stopped running {user}'s job ({cmd[:80]}) after {fmt_ts(last)}",
                mechanism=(
                    f"cron ran {user}'s job '{cmd[:140]}' every {period / 3600:.3g}h ({len(stamps)} runs) and last at "
                    f"{fmt_ts(last)}; it was due at {fmt_ts(due)} and has not run since, while cron kept running "
                    f"other jobs{said}: its schedule is gone (the crontab entry or /etc/cron.d file removed, renamed "
                    "to a name cron ignores - one with a dot - or edited)."
                ),
                object=f"cron job {cmd[:60]}",
                score=0.8,
                ts=due,
                tags=[f"user:{user}", f"service:{cmd.split()[0].rsplit('/', 1)[-1]}"],
                explains=["job_failed", "metric_shift", "alert:*", "errors", "throughput_drop", "missing_*"],
                evidence=[ref_of(recs[-1]), *([ref_of(dropped)] if dropped is not None else []), ref_of(others[0])],
                actions=[
                    Action(description="List what cron reads", command="ls -la /etc/cron.d/; crontab -l -u " + user),
                    Action(
                        description="Run the missed job by hand once the schedule is restored",
                        command=cmd[:200],
                        kind="write",
                    ),
                ],
            )
        )
    return out
