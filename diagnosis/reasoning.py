"""From findings to one Diagnosis: hypotheses, causes separated from symptoms, ranking, the written answer.

How it decides (docs/investigations.md says it at more length; the linking primitives are in links.py, the passes
that re-role findings before ranking in passes.py):
1. Findings whose every reference is unreal are dropped; references are checked one by one.
2. Two findings are *linked* when they name a common object (tags reduced to entity names: a pod's name also
   names its workload, `host:web-1:9100` names `web-1`). A cause *explains* a finding when they are linked, the
   finding's code is in the cause's `explains` (an alert is explained by any linked cause: it is a symptom of
   the objects its labels name), and the cause did not begin after it.
3. A cause candidate explained by another cause is a symptom of it (CPU high because of one query): it is
   demoted, and what it explained counts for the cause above it.
4. Remaining causes of one code on linked objects merge into one hypothesis (three pods of one Deployment
   OOMKilled is one fault). Hypotheses rank by evidence strength, the share of observed symptoms they explain
   (alerts count double: they are what the operator saw), time order, how many objects show it, and whether the
   question names their object. A weak candidate (score < 0.5) stands only when it explains an observed symptom.
5. The top hypothesis is the root cause; other strong ones on unrelated objects are independent faults; the
   rest are ruled out with the reason. No standing hypothesis: `unknown` when something is failing (saying what
   evidence is missing), `healthy` when nothing is (saying what was checked).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from diagnosis.evidence import EvidenceSet
from diagnosis.links import (
    BENIGN,
    CAUSE,
    SYMPTOM,
    TIME_SLACK_S,
    WORD,
    checked_findings,
    code_in,
    entity_names,
    explains,
    is_alert,
    link_strength,
    upstream_names,
)
from diagnosis.model import (
    Action,
    Category,
    Claim,
    Diagnosis,
    Domain,
    EvidenceRef,
    Finding,
    RuledOut,
)
from diagnosis.passes import (
    asked_about_the_failing_upstream,
    callers_only,
    false_alarms,
    recovered_by_alerts,
    starved_by_a_failing_upstream,
)
from diagnosis.timeline import evidence_now, fmt_age

FORECAST = "trend_to_exhaustion"  # a metric trend projected to its limit (analyzers/metrics.py)
PLANNED_WORK = "planned_work"  # the code of a benign finding that announces planned work (analyzers/changes.py)
STANDALONE_SCORE = 0.5  # a cause candidate below this needs an observed symptom it explains to stand
INDEPENDENT_SCORE = 0.55  # an unrelated hypothesis at least this strong is a second fault, not an alternative
MIN_RANK = 0.4  # below this the best hypothesis does not decide: unknown
FAINT_SYMPTOM = 0.35  # a symptom this weak (a few error lines) does not make a bundle failing on its own
MAX_CHAIN = 7
MAX_CLAIMS = 12

_QUESTION_DOMAINS: dict[Domain, tuple[str, ...]] = {
    Domain.DATABASE: ("database", "query", "queries", "postgres", "sql", "lock", "db", "rds", "replica", "table"),
    Domain.KUBERNETES: ("pod", "pods", "deploy", "deployment", "kubernetes", "k8s", "crash", "restart", "node"),
    Domain.HOST: ("disk", "cpu", "memory", "host", "server", "machine", "load", "filesystem"),
    Domain.NETWORK: ("timeout", "dns", "tls", "certificate", "upstream", "5xx", "502", "503", "504", "latency"),
}


@dataclass(eq=False)
class _Node:
    finding: Finding
    names: frozenset[str]
    demoted_by: _Node | None = None


@dataclass(eq=False)  # identity: hypotheses are compared as objects, never field by field
class Hypothesis:
    """One candidate root cause: findings of one code on linked objects, and what they explain."""

    members: list[Finding]
    names: frozenset[str]
    explained: list[Finding] = field(default_factory=list)  # symptoms and demoted causes, transitively
    demoted: list[Finding] = field(default_factory=list)  # causes that turned out to be its symptoms
    strength: float = 0.0
    coverage: float = 0.0
    rank: float = 0.0
    precedes: bool = False

    @property
    def lead(self) -> Finding:
        return max(self.members, key=lambda f: (f.score, len(f.evidence)))

    @property
    def ts(self) -> float | None:
        times = [f.ts for f in self.members if f.ts is not None]
        return min(times) if times else None


def _real(refs: Iterable[EvidenceRef], evidence: EvidenceSet) -> list[EvidenceRef]:
    return [r for r in refs if evidence.check(r)]


# ----------------------------------------------------------------------------------------------- ranking


def _question_bonus(h: Hypothesis, question: str | None) -> float:
    if not question:
        return 0.0
    q = question.lower()
    words = set(WORD.findall(q))
    bonus = 0.0
    lead = h.lead
    # the question names what the operator saw, which is as often the victim as the cause: a nudge, not a verdict
    if any(len(n) >= 3 and (n in words or n in q) for n in h.names):
        bonus += 0.06
    elif any(len(w) >= 4 and w in lead.object.lower() for w in words):
        bonus += 0.03
    for domain, keys in _QUESTION_DOMAINS.items():
        if lead.domain == domain and words & set(keys):
            bonus += 0.03
            break
    return bonus


class _DemotionIndex:
    """The causes that could explain a cause: by the codes they list in `explains` (exact, or a `prefix*`), by the
    names they carry (for n's upstreams, or n's own names when n is an alert); returned in their original order."""

    def __init__(self, causes: list[_Node]) -> None:
        self.order = {id(c): i for i, c in enumerate(causes)}
        self.by_code: dict[str, list[_Node]] = {}
        self.by_prefix: dict[str, list[_Node]] = {}
        self.by_name: dict[str, list[_Node]] = {}
        for c in causes:
            for e in set(c.finding.explains):
                if e.endswith("*"):
                    self.by_prefix.setdefault(e[:-1], []).append(c)
                else:
                    self.by_code.setdefault(e, []).append(c)
            for name in c.names:
                self.by_name.setdefault(name, []).append(c)

    def for_(self, n: _Node, upstream: frozenset[str]) -> list[_Node]:
        code = n.finding.code
        found: dict[int, _Node] = {id(c): c for c in self.by_code.get(code, ())}
        for prefix, nodes in self.by_prefix.items():
            if code.startswith(prefix):
                found.update((id(c), c) for c in nodes)
        names = upstream | (n.names if is_alert(n.finding) else frozenset())
        for name in names:
            found.update((id(c), c) for c in self.by_name.get(name, ()))
        return sorted(found.values(), key=lambda c: self.order[id(c)])


def build_hypotheses(findings: list[Finding], question: str | None = None) -> tuple[list[Hypothesis], list[Finding]]:
    """Hypotheses ranked best first, and the active symptoms (including demoted causes) none of them explain."""
    nodes = [_Node(f, entity_names(f)) for f in findings if f.role in (CAUSE, SYMPTOM)]
    causes = [n for n in nodes if n.finding.role == CAUSE]

    # 3. demote causes that another cause explains; mutual explanation goes to the earlier, then the stronger.
    # Only a cause that lists n's code, names what n depends on, or (n an alert) names n's objects can explain n
    # strongly enough (see `explains`), so each n meets only those candidates: linear in practice, not n^2.
    candidates = _DemotionIndex(causes)
    for n in causes:
        best: tuple[float, _Node] | None = None
        up_n = upstream_names(n.finding)
        for m in candidates.for_(n, up_n):
            if m is n:
                continue
            w = explains(m.finding, m.names, n.finding, n.names)
            upstream = bool(m.names & up_n)
            if w < 1.0 and not code_in(n.finding.code, m.finding.explains) and not upstream:
                continue
            if w == 0.0:
                continue
            back = explains(n.finding, n.names, m.finding, m.names)
            if back > 0.0 and _earlier_or_stronger(n.finding, m.finding):
                continue
            key = (w + m.finding.score, m)
            if best is None or key[0] > best[0]:
                best = key
        if best is not None:
            n.demoted_by = best[1]
    # break demotion cycles (a -> b -> a) by keeping the stronger of each cycle as a root
    for n in causes:
        seen: set[int] = set()
        cur: _Node | None = n
        while cur is not None and cur.demoted_by is not None:
            if id(cur) in seen:
                strongest = max((c for c in causes if id(c) in seen), key=lambda c: c.finding.score)
                strongest.demoted_by = None
                break
            seen.add(id(cur))
            cur = cur.demoted_by
    roots = [n for n in causes if n.demoted_by is None]
    effects = [n for n in nodes if n.finding.role == SYMPTOM or n.demoted_by is not None]

    # 4. merge roots of one code on linked objects
    groups: list[list[_Node]] = []
    for n in sorted(roots, key=lambda x: -x.finding.score):
        for g in groups:
            g0 = g[0].finding
            if g0.code == n.finding.code and g0.category == n.finding.category and (g[0].names & n.names):
                g.append(n)
                break
        else:
            groups.append([n])

    observed_weight = sum(2.0 if is_alert(e.finding) else 1.0 for e in effects)
    hypotheses: list[Hypothesis] = []
    explained_ids: set[int] = set()
    for g in groups:
        names = frozenset().union(*(n.names for n in g))
        h = Hypothesis(members=[n.finding for n in g], names=names)
        # transitive: what a member explains directly, and what its demoted causes explain
        frontier = list(g)
        visited: set[int] = {id(n) for n in g}
        weight = 0.0
        while frontier:
            src = frontier.pop()
            for e in effects:
                if id(e) in visited:
                    continue
                w = 1.0 if e.demoted_by is src else explains(src.finding, src.names, e.finding, e.names)
                if w == 0.0:
                    continue
                visited.add(id(e))
                h.explained.append(e.finding)
                if e.demoted_by is not None:
                    h.demoted.append(e.finding)
                weight += w * (2.0 if is_alert(e.finding) else 1.0)
                frontier.append(e)
        explained_ids.update(id(f) for f in h.explained)
        h.strength = max(f.score for f in h.members)
        h.coverage = weight / observed_weight if observed_weight else 0.0
        times = [f.ts for f in h.explained if f.ts is not None]
        h.precedes = bool(times) and h.ts is not None and h.ts <= min(times) + TIME_SLACK_S
        h.rank = (
            h.strength
            + 0.3 * h.coverage
            + 0.04 * min(len(h.explained), 5)
            + 0.03 * min(len(h.members) - 1, 3)
            + (0.03 if h.precedes else 0.0)
            + _question_bonus(h, question)
            - (0.15 if h.lead.category == Category.UNKNOWN else 0.0)
        )
        hypotheses.append(h)
    hypotheses.sort(key=lambda h: (-h.rank, h.ts if h.ts is not None else float("inf")))
    unexplained = [e.finding for e in effects if id(e.finding) not in explained_ids]
    return hypotheses, unexplained


def _earlier_or_stronger(a: Finding, b: Finding) -> bool:
    """Whether a, rather than b, is the cause when each could explain the other."""
    if a.ts is not None and b.ts is not None and abs(a.ts - b.ts) > TIME_SLACK_S:
        return a.ts < b.ts
    return a.score > b.score


# words with which an operator reports a failure ("why is pricing slow?"): the report is itself a symptom
REPORTED_PROBLEM = re.compile(
    r"\b(?:slow|latency|lag(?:ging)?|behind|timing out|time ?outs?|timed out|fail(?:s|ing|ed|ures?)?|errors?|"
    r"erroring|5\d\d|down|crash\w*|restart\w*|hang\w*|hung|stuck|can'?t|cannot|won'?t|not working|unavailable|"
    r"outage|broken|oom\w*|pending|backlog)\b",
    re.I,
)


def _stands(h: Hypothesis, question: str | None = None, resolved: frozenset[str] = frozenset()) -> bool:
    """A strong candidate stands alone; a weak one when it explains an observed symptom, or when the operator
    reports a failure of the very object it names (their report is the symptom the evidence lacks), unless what
    they report is an alert on that object the evidence shows resolved (`resolved`: the names of such alerts'
    objects): the page they saw is accounted for, and over."""
    if h.strength >= STANDALONE_SCORE or h.explained:
        return True
    if not question or not REPORTED_PROBLEM.search(question):
        return False
    if h.names & resolved and not _says_failing_now(question):
        return False
    words = set(WORD.findall(question.lower()))
    return any(len(n) >= 3 and n in words for n in h.names)


# an operator saying it fails now ("is failing", "keeps", "still"), not only that it paged
_FAILING_NOW_WORDS = re.compile(r"\b(?:still|keeps?|is failing|are failing|is down|are down|since)\b", re.I)
# a clause that asks rather than says ("is anything still wrong?", "are we still degraded?")
_ASKS = re.compile(r"^\s*(?:is|are|do|does|has|have|anything|something|can|could)\b", re.I)


def _says_failing_now(question: str) -> bool:
    """Whether the operator says it fails now ("checkout is still failing", "keeps paging"), not asks whether it
    still does ("is anything still wrong?"): the words, in a clause that is not a question."""
    return any(
        _FAILING_NOW_WORDS.search(clause) and not _ASKS.match(clause)
        for clause in re.split(r"[:;.,?!]| - | -- ", question)
    )


_QUOTED = re.compile(
    r"(?<![\w])'([^'\n]{10,200}?)'(?![\w])|(?<![\w])\"([^\"\n]{10,200}?)\"(?![\w])|`([^`\n]{10,200}?)`"
)  # an apostrophe (the team's) opens no quote


def _quoted_failure_seen(question: str | None, evidence: EvidenceSet) -> bool:
    """Whether the operator quotes an error ("fails with 'Not found: Table x'") that a log line shows: the failure
    they report is real, so a handful of its lines are not faint noise. Every word of the quote must be in one line."""
    if not question:
        return False
    quotes = [set(WORD.findall("".join(m.groups("")).lower())) for m in _QUOTED.finditer(question)]
    quotes = [q for q in quotes if len(q) >= 2]
    if not quotes:
        return False
    for item in evidence.kind("log"):
        for record in item.data.get("records", ()):
            words = set(WORD.findall(str(record.get("msg", "")).lower()))
            if any(q <= words for q in quotes):
                return True
    return False


PLANNED_ALERT_WINDOW_S = 6 * 3600  # alerts that began within this long after planned work started are its own
# a change record's newest line may be the work's end ("Implemented - awaiting closure"): alerts from up to this
# long before it began during the work's window
PLANNED_ALERT_BEFORE_S = 2 * 3600


PLANNED_AFTER_END_S = 15 * 60  # what begins this long after a run known to have completed is not that run's load


def _planned_windows(benign: list[Finding]) -> list[tuple[float, float]]:
    """Each planned work's window: from two hours before it to six after, or to a quarter of an hour after the end
    of a run known to have completed (a scheduled Job's completionTime, tagged `until:`)."""
    out = []
    for f in benign:
        if f.code != PLANNED_WORK or f.ts is None:
            continue
        until = next((float(t[6:]) for t in f.tags if t.startswith("until:")), None)
        end = (
            f.ts + PLANNED_ALERT_WINDOW_S
            if until is None
            else min(f.ts + PLANNED_ALERT_WINDOW_S, until + PLANNED_AFTER_END_S)
        )
        out.append((f.ts - PLANNED_ALERT_BEFORE_S, end))
        # the time the announcement gives for the work ("runs Tue 02:00-04:00 UTC"), when it was said before
        window = next((t[7:].split(":") for t in f.tags if t.startswith("window:")), None)
        if window:
            out.append((float(window[0]) - PLANNED_AFTER_END_S, float(window[1]) + PLANNED_AFTER_END_S))
    return out


def _during_planned_work(seen: list[Finding], benign: list[Finding]) -> bool:
    """Whether every signal began with planned work (from two hours before its newest announcement to six after, or
    to shortly after the end of a run known to have completed)."""
    windows = _planned_windows(benign)
    return bool(windows) and all(f.ts is not None and any(a <= f.ts <= b for a, b in windows) for f in seen)


def _resolved_during_planned_work(seen: list[Finding], benign: list[Finding]) -> bool:
    """Whether every signal began with planned work (a chaos experiment, a maintenance) and an alert that fired
    with them has resolved since, none firing: the monitoring says the work's effect is over."""
    starts = [f.ts for f in seen if f.ts is not None]
    resolved = [f for f in benign if is_alert(f) and f.ts is not None]
    return (
        not any(is_alert(f) for f in seen)
        and bool(starts)
        and any(r.ts is not None and r.ts >= min(starts) - PLANNED_ALERT_BEFORE_S for r in resolved)
        and _during_planned_work(seen, benign)
    )


def _alerts_of_planned_work(seen: list[Finding], benign: list[Finding]) -> bool:
    """Whether every unexplained signal is an alert, or a series or error count that moved with it, that began with
    planned work (from two hours before its newest announcement, which may be its end, to six hours after): what the
    work's traffic (a scan, a replay, a scheduled sweep) moved, the monitoring paged on (and may have resolved), and
    nothing else fails."""
    return (
        any(is_alert(f) for f in seen + [b for b in benign if b.code != PLANNED_WORK])
        and all(is_alert(f) or f.domain == Domain.METRICS or f.code == "errors" for f in seen)
        and _during_planned_work(seen, benign)
    )


def _forecast_beside_failures(h: Hypothesis, unexplained: list[Finding]) -> bool:
    """A trend that has not reached its limit yet (memory that would run out in three hours) explains nothing that
    already failed: beside failures it does not explain (a process killed, a task that died) it is a forecast to
    mention, not their cause."""
    if h.lead.code != FORECAST or h.explained:
        return False
    return any(f.role == SYMPTOM and f.domain != Domain.METRICS and not is_alert(f) for f in unexplained)


# ----------------------------------------------------------------------------------------------- writing


def _dedupe_actions(actions: Iterable[Action]) -> list[Action]:
    seen: set[str] = set()
    out: list[Action] = []
    for a in actions:
        if a.command in seen:
            continue
        seen.add(a.command)
        out.append(a)
    return out


def _chain(h: Hypothesis, context: list[Finding]) -> list[str]:
    steps: list[str] = [c.title for c in context]
    steps.append(h.lead.mechanism or h.lead.title)

    def when(f: Finding) -> float:
        return f.ts if f.ts is not None else float("inf")

    middle = sorted((f for f in h.explained if not is_alert(f)), key=when)
    alerts = sorted((f for f in h.explained if is_alert(f)), key=when)
    seen = {s.lower() for s in steps}
    for f in middle + alerts:
        if f.title.lower() not in seen:
            seen.add(f.title.lower())
            steps.append(f.title)
    if len(steps) > MAX_CHAIN:  # keep the cause and what the operator saw; drop from the middle
        steps = [*steps[: MAX_CHAIN - 2], "...", *steps[-1:]]
    return steps


def _claims(findings: Iterable[Finding], evidence: EvidenceSet) -> list[Claim]:
    claims: list[Claim] = []
    seen: set[str] = set()
    for f in findings:
        refs = _real(f.evidence, evidence)
        if not refs or f.title in seen:
            continue
        seen.add(f.title)
        claims.append(Claim(claim=f.title, refs=refs[:5]))
        if len(claims) >= MAX_CLAIMS:
            break
    return claims


def _ruled_out_entry(f: Finding, why: str, evidence: EvidenceSet) -> RuledOut:
    return RuledOut(alternative=f.title, why=why, refs=_real(f.evidence, evidence)[:3])


def _what_was_checked(evidence: EvidenceSet, findings: list[Finding]) -> list[str]:
    counts = Counter(item.kind for item in evidence)
    out = [f"{n} {kind} item{'s' if n != 1 else ''}" for kind, n in sorted(counts.items())]
    domains = sorted({f.domain.value for f in findings})
    if domains:
        out.append("analyzers with findings: " + ", ".join(domains))
    return out


def _changes_before(h: Hypothesis, findings: list[Finding], now: float | None) -> list[Finding]:
    """Changes (deploys, rollouts) on the hypothesis's objects shortly before it began: context for the chain."""
    out: list[Finding] = []
    start = h.ts
    members = {id(f) for f in h.members}
    for f in findings:
        if f.domain != Domain.CHANGES or id(f) in members or f.role == BENIGN:
            continue
        if link_strength(entity_names(f), h.names) < 1.0:
            continue
        if f.ts is not None and start is not None and f.ts > start + TIME_SLACK_S:
            continue
        out.append(f)
    return sorted(out, key=lambda f: f.ts or 0.0)[:2]


def _confidence(top: Hypothesis, rival: Hypothesis | None, unexplained: int) -> float:
    margin = (top.rank - rival.rank) if rival is not None else 0.4
    conf = 0.3 + 0.4 * top.strength + 0.15 * top.coverage + 0.5 * min(max(margin, 0.0), 0.3)
    if unexplained:
        conf -= min(0.1, 0.03 * unexplained)
    return round(min(0.97, max(0.1, conf)), 2)


def _why_not(h: Hypothesis, top: Hypothesis) -> str:
    lead = h.lead
    if not h.explained and h.strength < STANDALONE_SCORE:
        return f"weak signal (score {lead.score:.2f}) that explains none of the observed symptoms"
    shared = {id(f) for f in h.explained} & {id(f) for f in top.explained}
    parts = [
        f"explains {len(h.explained)} observed symptom(s) against {len(top.explained)} for the root cause",
        f"evidence strength {h.strength:.2f} against {top.strength:.2f}",
    ]
    if top.ts is not None and h.ts is not None and h.ts > top.ts + TIME_SLACK_S:
        parts.append(f"began {fmt_age(h.ts - top.ts)} after the root cause")
    if shared:
        parts.insert(0, "competes for the same symptoms")
    return "; ".join(parts)


def _unread(evidence: EvidenceSet) -> list[str]:
    out = []
    for e in evidence.errors[:5]:
        path, error = e.get("path", "?"), e.get("error", "")
        if path.startswith("analyzer:"):
            out.append(f"the findings of {path.removeprefix('analyzer:')}, which failed: {error}")
        else:
            out.append(f"a readable copy of {path}: {error}")
    return out


def _why_weak(h: Hypothesis) -> str:
    """Why a hypothesis did not decide when none did."""
    lead = h.lead
    if not h.explained and h.strength < STANDALONE_SCORE:
        return f"weak signal (score {lead.score:.2f}) that explains none of the observed symptoms"
    if lead.category == Category.UNKNOWN:
        return "seen, but the evidence does not say by which mechanism" + (
            f" (needs: {'; '.join(lead.needs[:2])})" if lead.needs else ""
        )
    return f"too weak to decide (score {lead.score:.2f}, explains {len(h.explained)} observed symptom(s))"


def _benign_signals(benign: list[Finding]) -> list[str]:
    """The benign signals, planned work aside, one per kind and object: the same alert on the servers of one
    instance is said once, with how many more there were."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in benign:
        if f.code != PLANNED_WORK:
            groups.setdefault((f.code, f.object.split(" (")[0]), []).append(f)
    return [g[0].title + (f" (and {len(g) - 1} more like it)" if len(g) > 1 else "") for g in groups.values()]


def _healthy_chain(benign: list[Finding]) -> list[str]:
    """What a healthy answer saw and why each signal is benign: the planned work first (it explains the signals
    around it), then each benign signal once per kind and object with its reason."""
    planned = [f for f in benign if f.code == PLANNED_WORK]
    steps = [f.mechanism for f in planned[:2]]
    seen: set[tuple[str, str]] = set()
    for f in benign:
        key = (f.code, f.object.split(" (")[0])
        if f.code == PLANNED_WORK or key in seen:
            continue
        seen.add(key)
        steps.append(f"{f.title}: {f.mechanism}")
    return steps[: min(MAX_CHAIN, 6)]


def _markdown(d: Diagnosis) -> str:
    lines = [f"**Root cause** ({d.category.value}, confidence {d.confidence:.2f}): {d.root_cause}", ""]
    if d.other_causes:
        lines.append("**Also failing, independently:**")
        lines.extend(f"- {c}" for c in d.other_causes)
        lines.append("")
    if d.causal_chain:
        lines.append("**Causal chain**")
        lines.extend(f"{i}. {step}" for i, step in enumerate(d.causal_chain, 1))
        lines.append("")
    if d.evidence:
        lines.append("**Evidence**")
        for c in d.evidence:
            shown = []
            for r in c.refs[:3]:
                where = (
                    r.item + (f" line {r.line}" if r.line is not None else "") + (f" `{r.field}`" if r.field else "")
                )
                shown.append(f"{where}: {str(r.value)[:160]}" if r.value is not None else where)
            lines.append(f"- {c.claim} — " + "; ".join(shown))
        lines.append("")
    if d.ruled_out:
        lines.append("**Ruled out**")
        lines.extend(f"- {r.alternative}: {r.why}" for r in d.ruled_out)
        lines.append("")
    if d.missing:
        lines.append("**Missing evidence**")
        lines.extend(f"- {m}" for m in d.missing)
        lines.append("")
    if d.checked and d.category in (Category.HEALTHY, Category.UNKNOWN):
        lines.append("**Checked**")
        lines.extend(f"- {c}" for c in d.checked)
        lines.append("")
    if d.actions:
        lines.append("**Actions**")
        for a in d.actions:
            tool = f" (tool `{a.tool}`)" if a.tool else ""
            lines.append(f"- [{a.kind}] {a.description}: `{a.command}`{tool}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------- entry


def reason(findings: list[Finding], evidence: EvidenceSet, question: str | None = None) -> Diagnosis:
    """The Diagnosis the findings support. Pure; references are checked against `evidence`."""
    findings = false_alarms(recovered_by_alerts(checked_findings(findings, evidence)))
    findings = starved_by_a_failing_upstream(findings)
    findings = asked_about_the_failing_upstream(findings, evidence, question)
    findings = callers_only(findings, evidence)
    now = evidence_now(evidence)
    benign = [f for f in findings if f.role == BENIGN]
    active = [f for f in findings if f.role in (CAUSE, SYMPTOM)]
    hypotheses, unexplained = build_hypotheses(findings, question)
    resolved = frozenset(n for f in benign if is_alert(f) for n in entity_names(f))
    standing = [
        h for h in hypotheses if _stands(h, question, resolved) and not _forecast_beside_failures(h, unexplained)
    ]
    checked = _what_was_checked(evidence, findings)
    base = {
        "findings": findings,
        "ignored": list(evidence.ignored),
        "errors": list(evidence.errors),
        "checked": checked,
    }
    # planned work is context for a healthy answer; beside a fault it may be the fault's origin, so it is not ruled out
    ruled_out = [_ruled_out_entry(f, f.mechanism, evidence) for f in benign if f.code != PLANNED_WORK]

    if not standing or standing[0].rank < MIN_RANK:
        weak = [_ruled_out_entry(h.lead, _why_weak(h), evidence) for h in hypotheses]
        if not active and not len(evidence):
            d = Diagnosis(
                category=Category.UNKNOWN,
                root_cause="No evidence was given, so nothing can be decided.",
                confidence=0.05,
                missing=["any evidence: alerts, Kubernetes objects and events, logs, metrics or database sessions"],
                **base,
            )
        else:
            seen_objects = [f for f in active if f.role == SYMPTOM]
            seen_objects += [h.lead for h in hypotheses if h.lead.category == Category.UNKNOWN and h.strength >= 0.5]
            if (
                seen_objects
                and all(f.score < FAINT_SYMPTOM and not is_alert(f) for f in seen_objects)
                and (_during_planned_work(seen_objects, benign) or not _quoted_failure_seen(question, evidence))
            ):
                # only faint signals (a handful of error lines, a blip): nothing an operator would call failing
                benign = benign + seen_objects
                seen_objects = []
            if seen_objects and (
                _alerts_of_planned_work(seen_objects, benign) or _resolved_during_planned_work(seen_objects, benign)
            ):
                # alerts that began with planned work (a scan, a migration), and nothing else failing: its noise
                benign = benign + seen_objects
                seen_objects = []
            if not seen_objects:  # nothing failing; at most weak candidates that explain nothing
                signals = _benign_signals(benign)
                benign_note = "; benign: " + "; ".join(signals[:4]) if signals else ""
                planned = [f for f in benign if f.code == PLANNED_WORK]
                if planned:
                    what = planned[0].title.split(": ", 1)[-1]
                    benign_note += f" (during planned work: {what})" if signals else f"; planned work ran: {what}"
                ruled_out = [_ruled_out_entry(f, f.mechanism, evidence) for f in benign]
                weak_note = f"; {len(weak)} weak signal(s) explain no symptom" if weak else ""
                unread = [e.get("path", "?") for e in evidence.errors]
                if unread:  # what could not be read may hold the failure: say so, and be less sure
                    weak_note += f"; {len(unread)} file(s) could not be read ({', '.join(unread[:3])})"
                d = Diagnosis(
                    category=Category.HEALTHY,
                    root_cause=f"Nothing is failing now: {len(evidence)} evidence item(s) checked{benign_note}"
                    f"{weak_note}.",
                    confidence=(0.85 if len(evidence) >= 3 else 0.6)
                    - (0.1 if weak else 0.0)
                    - (0.25 if evidence.errors else 0.0),
                    causal_chain=_healthy_chain(benign),
                    missing=_unread(evidence),
                    ruled_out=ruled_out + weak,
                    evidence=_claims(benign, evidence),
                    **base,
                )
            else:
                missing: list[str] = []
                for f in seen_objects:
                    missing.extend(f.needs or [f"evidence about {f.object} that shows why: {f.title}"])
                missing = list(dict.fromkeys(missing))[:8]
                names = "; ".join(dict.fromkeys(f.title for f in seen_objects[:4]))
                d = Diagnosis(
                    category=Category.UNKNOWN,
                    root_cause=f"The evidence does not decide the cause of: {names}; missing: {missing[0]}.",
                    confidence=0.2,
                    causal_chain=[f.title for f in seen_objects[:MAX_CHAIN]],
                    evidence=_claims(seen_objects, evidence),
                    ruled_out=ruled_out + weak,
                    missing=missing,
                    actions=_dedupe_actions(a for f in active for a in f.actions),
                    **base,
                )
        d.text = _markdown(d)
        return d

    top = standing[0]
    others = standing[1:]
    independent: list[Hypothesis] = []
    alternatives: list[Hypothesis] = []
    top_effects = {id(f) for f in top.explained if not is_alert(f)}
    for h in others:
        # a second fault: on other objects, or on the same ones through another mechanism that explains none of
        # the same observed effects (alerts aside: any cause on an object explains its alerts)
        competing = bool(top_effects & {id(f) for f in h.explained if not is_alert(f)})
        unrelated = bool(h.names) and bool(top.names) and not (h.names & top.names)
        separate = not competing and h.lead.category != top.lead.category
        if (unrelated or separate) and h.strength >= INDEPENDENT_SCORE and h.lead.category != Category.UNKNOWN:
            independent.append(h)
        else:
            alternatives.append(h)
    alternatives += [h for h in hypotheses if h not in standing]
    context = _changes_before(top, findings, now)
    context_ids = {id(f) for f in context}
    alternatives = [h for h in alternatives if not any(id(f) in context_ids for f in h.members)]
    lead = top.lead
    root = lead.mechanism.rstrip(".")
    if len(top.members) > 1:
        root += f" (the same on {len(top.members) - 1} more)"
    if context and lead.domain != Domain.CHANGES:
        root += f", after {context[-1].title}"
    if independent:
        root += "; independently, " + "; ".join(h.lead.title for h in independent[:2])
        if len(independent) > 2:
            root += f" and {len(independent) - 2} more"
    root += "."

    for f in top.demoted:
        ruled_out.append(
            _ruled_out_entry(f, f"a symptom, not the cause: it follows from {lead.object} ({lead.code})", evidence)
        )
    rival = alternatives[0] if alternatives else None
    for h in alternatives:
        ruled_out.append(_ruled_out_entry(h.lead, _why_not(h, top), evidence))
    for h in independent:
        for f in h.demoted:
            ruled_out.append(
                _ruled_out_entry(f, f"a symptom of {h.lead.object} ({h.lead.code}), not a cause", evidence)
            )

    explained_elsewhere = {id(f) for h in independent for f in h.explained}
    unexplained_now = [f for f in unexplained if id(f) not in explained_elsewhere]
    claims = _claims([*top.members, *context, *top.explained], evidence)
    for h in independent:
        claims += _claims(h.members, evidence)
    # the lead's actions, then one of each kind from the other objects that show the same fault
    member_actions = [*top.lead.actions]
    seen_descriptions = {a.description for a in member_actions}
    for f in top.members:
        for a in f.actions:
            if a.description not in seen_descriptions:
                seen_descriptions.add(a.description)
                member_actions.append(a)
    actions = _dedupe_actions(
        [*member_actions, *(a for f in context for a in f.actions)] + [a for h in independent for a in h.lead.actions]
    )
    missing = list(dict.fromkeys(n for f in top.members for n in f.needs))
    if unexplained_now:
        missing.append("not explained by the root cause: " + "; ".join(f.title for f in unexplained_now[:4]))
    d = Diagnosis(
        category=lead.category,
        root_cause=root,
        confidence=_confidence(top, rival, len(unexplained_now)),
        causal_chain=_chain(top, context if lead.domain != Domain.CHANGES else []),
        evidence=claims[:MAX_CLAIMS],
        ruled_out=ruled_out,
        actions=actions,
        other_causes=[f"{h.lead.mechanism.rstrip('.')} ({h.lead.category.value})." for h in independent],
        missing=missing,
        **base,
    )
    d.text = _markdown(d)
    return d
