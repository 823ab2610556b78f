"""Bad data behind spent retries: a consumer that logs each failed try as a warning and only the give-up as an
error ("reached MaxDeliveryCount 10 and was moved to the dead-letter queue", "retries exhausted"). The errors say
only that it gave up; why is in the tries, and when the tries fail on the message's content (a value that does not
parse, a missing field) the input is bad: data_quality, named by the field and the producer where the lines say."""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import claimed_elsewhere, is_error, level_of, service_of, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs._shared import BAD_DATA, RETRIES_SPENT
from diagnosis.analyzers.logs.data import _bad_field, _data_error_name, _producer
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

# a message given up: its delivery count spent and dead-lettered, or its retries spent (RETRIES_SPENT)
_GAVE_UP = re.compile(
    r"MaxDeliveryCount|maxReceiveCount|(?:moved|sent|routed) to (?:the )?dead[- ]?letter|dead[- ]?lettered|"
    r"after \d+ deliveries|" + RETRIES_SPENT.pattern,
    re.I,
)
# a give-up that names the far end failing (a 5xx, a server error, a timeout) gave up on the service it calls,
# not on the message's content: the tries' bad data elsewhere in the log is another matter
_FAR_END = re.compile(
    r"ServerError|\bcode:? 5\d\d\b|\b5\d\d (?:Service Unavailable|Bad Gateway|Gateway Timeout|Internal Server Error)|"
    r"Service Unavailable|Service call failed|timed? ?out|connection (?:refused|reset)",
    re.I,
)
MIN = 3


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def bad_data_behind_retries(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("log"):
        records = item.data.get("records") or ()
        # the give-ups first (a cheap expression): only a log that has them is read for its tries' bad data
        gave_up = [
            r
            for r in records
            if _GAVE_UP.search(msg := str(r.get("msg") or "")) and is_error(r) and not _FAR_END.search(msg)
        ]
        if len(gave_up) < MIN:
            continue
        tries: list[dict[str, Any]] = [
            r
            for r in records
            if level_of(r) == "warn" and BAD_DATA.search(msg := str(r.get("msg") or "")) and not claimed_elsewhere(msg)
        ]
        if len(tries) < MIN:
            continue
        stamps = [r["ts"] for r in tries if isinstance(r.get("ts"), int | float)]
        first = min(stamps, default=None)
        sample = " ".join(str(tries[-1].get("msg") or "").split())
        who = service_of(item) or item.object
        what = _data_error_name(sample)
        gave = " ".join(str(gave_up[-1].get("msg") or "").split())
        where = _bad_field(sample) + _producer(item, first, sample)
        out.append(
            Finding(
                analyzer="bad_data_behind_retries",
                domain=Domain.LOGS,
                role="cause",
                code="bad_data",
                category=Category.DATA_QUALITY,
                title=f"{who}: messages fail every try on their content ({what}) and are given up ({len(gave_up)}x)",
                mechanism=(
                    f"{who}'s messages fail each delivery on their content with {what}{where} ('{sample[:200]}' "
                    f"x{len(tries)} {span_text(first, max(stamps, default=None))}) until their retries run out and "
                    f"they are given up ({len(gave_up)}x: '{gave[:120]}'):"
                    " the input does not match what the code expects, and retrying cannot fix it"
                ),
                object=who,
                score=0.75,
                ts=first,
                tags=[f"service:{who}"],
                explains=["errors", "alert:*", "queue_backlog", "backlog", "dead_letters", "metric_shift", "exception"],
                evidence=[
                    EvidenceRef(item=item.id, line=tries[0].get("line"), value=str(tries[0].get("msg"))[:300]),
                    EvidenceRef(item=item.id, line=gave_up[-1].get("line"), value=str(gave_up[-1].get("msg"))[:300]),
                ],
                actions=[
                    Action(
                        description="Peek at the dead-lettered messages and their producer",
                        command="az servicebus queue ... / aws sqs receive-message --queue-url <dlq> --max 10",
                    )
                ],
            )
        )
    return out
