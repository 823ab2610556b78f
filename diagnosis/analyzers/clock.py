"""A host clock that is wrong: remote services refuse its signed or time-stamped requests (S3's RequestTimeTooSkewed,
an expired request signature, Kerberos' clock skew), and its time daemon says why (chronyd or ntpd stepping the
clock by a large amount to a source, or losing every source). The cause is the clock and the source it follows, an
infrastructure fault: the refusals look like credentials or the remote service failing, and are neither."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from diagnosis.analyzers._common import Rec, host_of_kernel_file, records_with, ref_of, service_of, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts

_SKEW_HINTS = ("Skew", "skew", "SKEW", "Signature expired", "clock")
_SKEWED = re.compile(
    r"RequestTimeTooSkewed|request time and the current time is too large|Signature expired: \d|"
    r"Clock skew too great|KRB_AP_ERR_SKEW|clock skew (?:detected|too (?:large|great))|time skew",
    re.I,
)
# the time daemon: a big step, a clock it calls wrong, the source it selected
_STEP = re.compile(r"System clock (?:wrong by|was stepped by) (?P<by>[+-]?\d+(?:\.\d+)?) seconds|"
                   r"(?:time|clock) (?:reset|stepped)\s+(?P<ntpd>[+-]?\d+(?:\.\d+)?) s", re.I)  # fmt: skip
_SOURCE = re.compile(r"Selected source (?P<addr>\S+)(?: \((?P<name>[^)]+)\))?|synchronized to (?P<ntp>\S+)", re.I)
BIG_STEP_S = 60.0  # a clock stepped by more than a minute was far off, whatever it follows now


def _host(rec: Rec) -> str:
    m = re.match(r"^(?:\w{3} +\d+ [\d:]+ )?(?P<h>[\w.\-]+) (?:chronyd|ntpd|systemd)\b", rec.msg)
    return m["h"] if m else ""


def _dead_sources(evidence: EvidenceSet, host: str) -> tuple[EvidenceItem, list[dict[str, Any]]] | None:
    """`chronyc sources` of the host whose clock is refused (any, when its name is not known and there is one)
    where no source is selected and every one is unreachable (reach 0): the clock free-runs."""
    items = evidence.kind("host/time_sources")
    for item in items:
        if (host and item.data.get("host") not in (host, None)) or (not host and len(items) > 1):
            continue
        sources = item.data.get("sources") or []
        if sources and all(s["state"] not in "*+" and s["reach"] == 0 for s in sources):
            return item, sources
    return None


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log", "host/time_sources"})
def clock_skew(evidence: EvidenceSet) -> list[Finding]:
    refused: dict[str, list[Rec]] = defaultdict(list)
    daemon: list[Rec] = []
    for rec in records_with(evidence, (*_SKEW_HINTS, "Selected source", "synchronized to", "stepped", "reset")):
        if _SKEWED.search(rec.msg):
            refused[service_of(rec.item) or rec.item.object].append(rec)
        elif _STEP.search(rec.msg) or _SOURCE.search(rec.msg):
            daemon.append(rec)
    out: list[Finding] = []
    # what the time daemons did is the same for every service refused as skewed: read it once
    steps = [(r, _STEP.search(r.msg)) for r in daemon]
    big = [(r, m) for r, m in steps if m and abs(float(m["by"] or m["ntpd"])) >= BIG_STEP_S]
    host = next((h for r, _ in big for h in [_host(r)] if h), "") or next(
        (h for r in daemon for h in [_host(r)] if h), ""
    )
    dead = _dead_sources(evidence, host)
    # a source chronyd selected once says nothing when `chronyc sources` shows none selected now
    sources = [] if dead else [(r, m) for r in daemon if (m := _SOURCE.search(r.msg))]
    for who, recs in refused.items():
        if len(recs) < 2:
            continue
        refs: list[EvidenceRef] = [ref_of(recs[0])]
        why = ""
        if big:
            r, m = big[-1]
            by = float(m["by"] or m["ntpd"])
            did = "finds the clock off" if "wrong by" in r.msg else "stepped the clock"
            why = f"; the time daemon {did} by {by:+.0f} s ('{r.msg.strip()[:120]}')"
            refs.append(ref_of(r))
        source = ""
        if sources:
            r, m = sources[-1]
            source = m["name"] or m["addr"] or m["ntp"] or ""
            why += f", following time source {source}"
            refs.append(ref_of(r))
        where = host or who
        category = Category.INFRASTRUCTURE
        if dead:
            item, srcs = dead
            where = item.data.get("host") or where
            names = ", ".join(s["name"] for s in srcs)
            # (a server never heard from, not a reference clock wired to the host: those fail as hardware)
            never = all(s["never_received"] and s.get("mode", "^") != "#" for s in srcs)
            why += (
                f"; its only time source{'s' if len(srcs) > 1 else ''} ({names}) "
                + ("never answered since chronyd started" if never else "stopped answering")
                + " (chronyc sources: none selected, reach 0), so the clock free-runs"
            )
            refs.append(
                EvidenceRef(item=item.id, line=srcs[0]["line"], value=f"{names}: state {srcs[0]['state']}, reach 0")
            )
            source = names
            # a source never heard from is a wrong address or one this host may not reach: the chrony configuration
            category = Category.CONFIGURATION_ERROR if never else Category.INFRASTRUCTURE
        out.append(
            Finding(
                analyzer="clock_skew",
                domain=Domain.HOST,
                role="cause",
                code="clock_skew",
                category=category,
                title=f"the clock of {where} is wrong: its requests are refused as skewed ({len(recs)}x)",
                mechanism=(
                    f"{who}'s requests are refused because their time is too far from the remote side's "
                    f"('{recs[0].msg.strip()[:140]}' {len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}){why}: the "
                    f"clock of {where}"
                    + (
                        f" has no time source it can reach ({source})"
                        if dead
                        else f" follows {source}, which serves the wrong time"
                        if source and big
                        else " is wrong"
                    )
                    + ", not the credentials or the remote service"
                ),
                object=f"clock of {where}",
                score=0.85 if big else 0.7,
                ts=recs[0].ts,
                tags=[
                    f"service:{who}",
                    *([f"host:{host}"] if host else []),
                    *([f"upstream:{source}"] if source else []),
                ],
                explains=[
                    "errors",
                    "access_denied*",
                    "credentials_refused",
                    "http_4xx",
                    "http_403",
                    "exception",
                    "job_failed",
                    "alert:*",
                ],
                evidence=refs,
                actions=[
                    Action(
                        description="Compare the host's clock with a trusted one",
                        command=f"ssh {where} 'date -u; chronyc tracking; chronyc sources -v'",
                    ),
                    Action(
                        description="Check the time source itself (its own reference, GPS or upstream servers)",
                        command=f"chronyc -h {source or '<time source>'} tracking",
                    ),
                ],
            )
        )
    return out


# the kernel's clocksource watchdog giving up on the CPU's timestamp counter: the hardware clock drifted against the
# other clocks (a broken BIOS or firmware, a failing board), the system clock jumped and the kernel fell back to a
# slower clock source (hpet, acpi_pm) for good
_UNSTABLE = re.compile(
    r"Marking clocksource '?(?P<cs>\w+)'? as unstable|Marking TSC unstable|TSC found unstable|"
    r"clocksource (?P<cs2>\w+) is unstable",
    re.I,
)
_FELL_BACK = re.compile(r"Switched to clocksource (?P<to>hpet|acpi_pm|jiffies|refined-jiffies)", re.I)


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log"})
def clocksource_unstable(evidence: EvidenceSet) -> list[Finding]:
    by_host: dict[str, list[Rec]] = defaultdict(list)
    fell: dict[str, Rec] = {}
    for rec in records_with(evidence, ("unstable", "Switched to clocksource")):
        host = host_of_kernel_file(rec.item) or service_of(rec.item) or rec.item.object
        if _UNSTABLE.search(rec.msg):
            by_host[host].append(rec)
        elif _FELL_BACK.search(rec.msg):
            fell[host] = rec
    out: list[Finding] = []
    for host, recs in by_host.items():
        first = recs[0]
        m = _UNSTABLE.search(first.msg)
        cs = (m and (m["cs"] or m["cs2"])) or "tsc"
        refs = [ref_of(first)]
        after = ""
        if host in fell:
            to = _FELL_BACK.search(fell[host].msg)
            after = f"; the kernel fell back to the slower {to['to'] if to else 'clock source'}"
            refs.append(ref_of(fell[host]))
        out.append(
            Finding(
                analyzer="clocksource_unstable",
                domain=Domain.HOST,
                role="cause",
                code="clocksource_unstable",
                category=Category.INFRASTRUCTURE,
                title=f"the hardware clock of {host} failed: the kernel marked its {cs} clocksource unstable",
                mechanism=(
                    f"the kernel's clocksource watchdog on {host} marked '{cs}' unstable at {fmt_ts(first.ts)} "
                    f"('{first.msg.strip()[:140]}'){after}: the machine's own clock hardware (or its firmware) "
                    "drifted, the system clock jumped, and what checks its clock against its peers (a database's "
                    "clock-offset check, signed requests) fails on this host alone; the time daemon and the "
                    "software are not the cause"
                ),
                object=f"clock of {host}",
                score=0.8,
                ts=first.ts,
                tags=[f"host:{host}", f"node:{host}", f"instance:{host}"],
                explains=["errors", "latency", "pod_restarts", "exception", "clock_skew", "metric_shift", "alert:*"],
                evidence=refs,
                actions=[
                    Action(
                        description="See the clocksource the host runs on and the watchdog's lines",
                        command=f"ssh {host} 'cat /sys/devices/system/clocksource/clocksource0/current_clocksource; "
                        'dmesg -T | grep -iE "clocksource|tsc"\'',
                    ),
                    Action(
                        description="Compare its BIOS/firmware with its peers' and schedule the fix or replacement",
                        command=f"ssh {host} 'sudo dmidecode -s bios-version'",
                    ),
                ],
            )
        )
    return out
