"""A file a process could not find when it started, and has served without since.

A server that logs at start-up that a file it was configured to load is not there ("(stat): /data/valhalla/
valhalla_tiles.tar No such file or directory", "could not load /etc/app/rules.yaml") and then starts anyway says so
once: the log goes on with requests, and the error looks like a line from the past. But the process never tried
again, so everything that needs the file fails (a routing engine without its road graph answers 400 to every
route). The path in its configuration (or the volume mounted where it looks) is wrong: a configuration error,
still true while the process runs.
"""

from __future__ import annotations

import re

from diagnosis.analyzers._common import level_of, service_of, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

START_RECORDS = 10  # the error is among the process's first log lines
MIN_AFTER = 3  # ... and the process logged this many warnings or errors since (what needs the file fails)
_MISSING_FILE = re.compile(
    r"(?P<path>/[\w.\-/]+\.[A-Za-z0-9]{1,8})\b[^\n]{0,20}(?:No such file or directory|not found|does not exist)|"
    r"(?:No such file or directory|not found|does not exist|could not (?:open|load|read))[:\s'\"]{1,4}"
    r"(?P<path2>/[\w.\-/]+\.[A-Za-z0-9]{1,8})\b",
    re.I,
)
# a banner a process logs when it starts: a second one means it restarted (and tried again)
_STARTED = re.compile(
    r"\b(?:Listening (?:on|with|at)|Started \w+ in|server started|starting server|ready to accept connections|"
    r"Serving (?:on|at)|Running on https?://)",
    re.I,
)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def missing_at_start(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("log"):
        records = item.data.get("records") or ()
        if len(records) < START_RECORDS + MIN_AFTER:
            continue
        head = records[:START_RECORDS]
        missing = [
            (r, m)
            for r in head
            if level_of(r) in ("error", "fatal")
            and "client:" not in str(r.get("msg") or "")  # (nginx: a request's file, not the server's own)
            and (m := _MISSING_FILE.search(str(r.get("msg") or "")))
        ]
        # (a process's start, said among those first lines: not a request's error in a log cut mid-run)
        if not missing or not any(_STARTED.search(str(r.get("msg") or "")) for r in head):
            continue
        rest = records[START_RECORDS:]
        if any(_STARTED.search(str(r.get("msg") or "")) for r in rest):
            continue  # it restarted since: the first start's complaint is not the state now
        failing = [r for r in rest if level_of(r) in ("warn", "error", "fatal")]
        if len(failing) < MIN_AFTER:
            continue
        rec, m = missing[0]
        path = m["path"] or m["path2"]
        who = service_of(item) or item.object
        sample = " ".join(str(failing[-1].get("msg") or "").split())[:160]
        out.append(
            Finding(
                analyzer="missing_at_start",
                domain=Domain.LOGS,
                role="cause",
                code="file_missing_at_start",
                category=Category.CONFIGURATION_ERROR,
                title=f"{who} started without {path} and has run without it since",
                mechanism=(
                    f"{who} could not find {path} when it started ('{str(rec.get('msg') or '').strip()[:160]}'), "
                    f"started anyway and has run without it: {len(failing)} warnings or errors "
                    f"{span_text(failing[0].get('ts'), failing[-1].get('ts'))} (e.g. '{sample}'); the path it is "
                    "configured to load (or the volume mounted where it looks) is wrong"
                ),
                object=f"{who} {path}",
                score=0.7,
                ts=rec.get("ts"),
                tags=[f"service:{who}", f"file:{path}"],
                explains=["errors", "http_4xx", "http_5xx", "alert:*", "error_rate", "exception"],
                evidence=[
                    EvidenceRef(item=item.id, line=rec.get("line"), value=str(rec.get("msg"))[:300]),
                    EvidenceRef(item=item.id, line=failing[-1].get("line"), value=sample),
                ],
                actions=[
                    Action(
                        description=f"Check where {path} is expected and what is mounted there",
                        command=f"kubectl exec deploy/{who} -- ls -l {path.rsplit('/', 1)[0]}  # and the config "
                        "key that names it",
                    )
                ],
            )
        )
    return out
