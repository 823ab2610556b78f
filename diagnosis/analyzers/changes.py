"""Changes: deploys and rollouts shortly before the evidence ends. A change is context, not a fault: its finding is
a weak cause candidate (a code defect the new version brought) that stands only when it explains failures that
began after it on the same workload, and the reasoning prepends it to the chain of a more specific cause."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from diagnosis.analyzers._kube import RECENT_S, kube_index, meta, ns_name, ref, workload_tags
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import evidence_now, fmt_age, fmt_ts, parse_ts

CHANGE_WINDOW_S = 6 * RECENT_S  # a rollout older than this before the evidence ends is settled history
DEPLOY_SCORE = 0.35  # below the stand-alone bar: a deploy is a cause only with failures after it
# what a bad new version shows: errors, restarts and unavailability of its own workload
DEPLOY_EXPLAINS = [
    "http_5xx",
    "http_500",
    "error_rate",
    "log_errors",
    "exceptions",
    "error_spike",
    "latency",
    "pod_restarts",
    "crashloop",
    "replicas_unavailable",
    "rollout_stuck",
    "no_ready_endpoints",
    "pod_not_ready",
    "probe_unhealthy",
    "probe_refused",
    "memory_high",
    "cpu_high",
    "job_failed",
    "errors",
    "crash_loop",
    "probe_failed",
]
_REVISION = "deployment.kubernetes.io/revision"
_SCALED_RS = re.compile(r"Scaled (?:up|down) replica set (\S+)")


def _images(template: dict[str, Any]) -> dict[str, str]:
    spec = template.get("spec") or {}
    return {str(c.get("name")): str(c.get("image")) for c in spec.get("containers") or () if c.get("name")}


def _revision(item: EvidenceItem) -> int:
    try:
        return int((meta(item).get("annotations") or {}).get(_REVISION) or 0)
    except (TypeError, ValueError):
        return 0


def _owned_by(rs: EvidenceItem, kind: str, name: str) -> bool:
    return any(o.get("kind") == kind and o.get("name") == name for o in meta(rs).get("ownerReferences") or ())


def _rollout_cause(
    workload: str,
    *,
    ts: float | None,
    tags: list[str],
    title: str,
    mechanism: str,
    evidence: list[EvidenceRef],
    actions: list[Action],
) -> Finding:
    """A recent rollout of `workload` ("Kind ns/name") named as the change that brought a defect."""
    return Finding(
        analyzer="kubernetes_rollouts_changes",
        domain=Domain.CHANGES,
        role="cause",
        code="recent_deploy",
        category=Category.CODE_DEFECT,
        score=DEPLOY_SCORE,
        ts=ts,
        tags=tags,
        object=workload,
        title=title,
        mechanism=mechanism,
        explains=DEPLOY_EXPLAINS,
        evidence=evidence,
        actions=actions,
    )


def _env_of(container: dict[str, Any]) -> dict[str, str]:
    out = {}
    for e in container.get("env") or ():
        if isinstance(e, dict) and e.get("name"):
            out[str(e["name"])] = str(e["value"]) if "value" in e else f"<from {e.get('valueFrom')}>"
    for e in container.get("envFrom") or ():
        if isinstance(e, dict):
            out[f"envFrom {e}"] = "present"
    return out


def _template_diff(old: EvidenceItem, new: EvidenceItem) -> list[tuple[str, str]]:
    """What a same-image rollout changed in the pod template: environment variables, args and command, per
    container, as (field, "old -> new")."""

    def containers(rs: EvidenceItem) -> dict[str, dict[str, Any]]:
        spec = ((rs.data.get("spec") or {}).get("template") or {}).get("spec") or {}
        return {str(c.get("name")): c for c in spec.get("containers") or () if isinstance(c, dict)}

    before, after = containers(old), containers(new)
    diffs: list[tuple[str, str]] = []
    for cname, c in after.items():
        prev = before.get(cname)
        if prev is None:
            continue
        env_old, env_new = _env_of(prev), _env_of(c)
        for key in sorted(set(env_old) | set(env_new)):
            if env_old.get(key) != env_new.get(key):
                diffs.append((f"{cname} env {key}", f"{env_old.get(key, '(unset)')} -> {env_new.get(key, '(unset)')}"))
        for field in ("args", "command"):
            if prev.get(field) != c.get(field):
                diffs.append((f"{cname} {field}", f"{prev.get(field)} -> {c.get(field)}"))
    return diffs


CONFIG_CHANGE_SCORE = 0.6  # stands alone, and explains the errors that begin after it on the same workload


def _config_change(
    ns: str,
    name: str,
    when: float,
    ago: str,
    diffs: list[tuple[str, str]],
    newest: EvidenceItem,
    tags: list[str],
) -> Finding:
    """A rollout that kept every image and changed only settings: whatever fails after it on that workload comes
    from the settings (new code cannot have come with it)."""
    listing = "; ".join(f"{k}: {v}" for k, v in diffs[:4])
    return Finding(
        analyzer="kubernetes_rollouts_changes",
        domain=Domain.CHANGES,
        role="cause",
        code="config_change",
        category=Category.CONFIGURATION_ERROR,
        score=CONFIG_CHANGE_SCORE,
        ts=when,
        tags=tags,
        object=f"Deployment {ns}/{name}",
        title=f"Deployment {ns}/{name} changed settings at {fmt_ts(when)} (same images): {listing}"[:200],
        mechanism=(
            f"the rollout of Deployment {ns}/{name} at {fmt_ts(when)}{ago} kept every image and changed only its "
            f"settings ({listing}): the failures that begin after it on that workload come from the new setting, "
            "not from code"
        ),
        explains=[*DEPLOY_EXPLAINS, "exception", "crash_code", "app_error", "bad_data"],
        evidence=[ref(newest, "spec.template.spec.containers", listing)],
        actions=[
            Action(
                description="Compare the two revisions' settings",
                command=f"kubectl rollout history deployment/{name} -n {ns} --revision={_revision(newest)}",
            ),
            Action(
                description="Roll back to the previous settings",
                kind="write",
                command=f"kubectl rollout undo deployment/{name} -n {ns}",
            ),
        ],
    )


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"k8s/Deployment", "k8s/ReplicaSet", "k8s/StatefulSet", "k8s/Event"})
def kubernetes_rollouts_changes(evidence: EvidenceSet) -> list[Finding]:
    """Deployments whose newest ReplicaSet (or ScalingReplicaSet event) is recent, with the image change it
    brought; StatefulSets mid-update."""
    idx = kube_index(evidence)
    now = idx.now
    out: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    replicasets = idx.of_kind("ReplicaSet")
    deploy_names = {ns_name(d) for d in idx.of_kind("Deployment")}
    deploy_names |= {(ns, n) for (k, ns, n) in idx.events if k == "Deployment"}
    for rs in replicasets:
        for o in meta(rs).get("ownerReferences") or ():
            if o.get("kind") == "Deployment":
                deploy_names.add((ns_name(rs)[0], str(o.get("name"))))
    for ns, name in sorted(deploy_names):
        dep = idx.objects.get(("Deployment", ns, name))
        owned = sorted(
            (rs for rs in replicasets if ns_name(rs)[0] == ns and _owned_by(rs, "Deployment", name)), key=_revision
        )
        refs: list[EvidenceRef] = []
        when: float | None = None
        change = ""
        config_only: list[tuple[str, str]] = []  # (field, "old -> new") when only settings changed
        if owned:
            newest = owned[-1]
            when = parse_ts(meta(newest).get("creationTimestamp"))
            refs.append(ref(newest, "metadata.creationTimestamp", meta(newest).get("creationTimestamp")))
            new_images = _images((newest.data.get("spec") or {}).get("template") or {})
            if len(owned) >= 2:
                old_images = _images((owned[-2].data.get("spec") or {}).get("template") or {})
                diffs = [
                    f"{c}: {old_images.get(c, '?')} -> {img}"
                    for c, img in new_images.items()
                    if old_images.get(c) != img
                ]
                if diffs:
                    change = "image " + "; ".join(diffs)
                    containers = (
                        ((newest.data.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers")
                    )
                    for i, c in enumerate(containers or ()):
                        if old_images.get(str(c.get("name"))) != c.get("image"):
                            refs.append(ref(newest, f"spec.template.spec.containers.{i}.image", c.get("image")))
                else:
                    change = "new pod template (same images: configuration or environment change)"
                    settings = _template_diff(owned[-2], newest)
                    if settings:
                        config_only = settings
            else:
                change = "image " + ", ".join(new_images.values()) if new_images else "first revision"
            change = f"revision {_revision(newest)}: {change}" if _revision(newest) else change
        else:
            scaling = [e for e in idx.events_for("Deployment", ns, name) if e.data.get("reason") == "ScalingReplicaSet"]
            scaled = [e for e in scaling if "Scaled up" in str(e.data.get("message") or "")]
            # a rollout moves replicas between two ReplicaSets; one ReplicaSet scaled up and down is the HPA at work
            scaled_sets = {m.group(1) for e in scaling if (m := _SCALED_RS.search(str(e.data.get("message") or "")))}
            if scaled and len(scaled_sets) >= 2:
                e = max(scaled, key=lambda x: parse_ts(x.data.get("first_ts")) or 0.0)
                when = parse_ts(e.data.get("first_ts")) or parse_ts(e.data.get("last_ts"))
                refs.append(ref(e, "message", e.data.get("message")))
                change = str(e.data.get("message") or "new ReplicaSet scaled up")
            elif dep is not None:
                prog = next(
                    (
                        c
                        for c in (dep.data.get("status") or {}).get("conditions") or ()
                        if c.get("type") == "Progressing"
                        and c.get("reason") in ("ReplicaSetUpdated", "NewReplicaSetCreated")
                    ),
                    None,
                )
                if prog:
                    when = parse_ts(prog.get("lastTransitionTime")) or parse_ts(prog.get("lastUpdateTime"))
                    refs.append(ref(dep, "status.conditions", (dep.data.get("status") or {}).get("conditions")))
                    change = str(prog.get("message") or "rollout in progress")
        if when is None or not refs or (now is not None and when < now - CHANGE_WINDOW_S):
            continue
        # a first revision with no predecessor is a new workload, not a change to a running one
        if owned and len(owned) == 1 and _revision(owned[-1]) <= 1:
            continue
        seen.add((ns, name))
        labels = ((dep.data.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") if dep else None
        ago = f", {fmt_age(now - when)} before the evidence ends" if now else ""
        if config_only:
            out.append(_config_change(ns, name, when, ago, config_only, owned[-1], workload_tags(ns, name, labels)))
            continue
        out.append(
            _rollout_cause(
                f"Deployment {ns}/{name}",
                ts=when,
                tags=workload_tags(ns, name, labels),
                title=f"Deployment {ns}/{name} rolled out at {fmt_ts(when)} ({change})",
                mechanism=f"the rollout of Deployment {ns}/{name} at {fmt_ts(when)}{ago} ({change}) brought "
                f"a defect that "
                "makes the new version fail",
                evidence=refs,
                actions=[
                    Action(
                        description="See what changed between revisions",
                        command=f"kubectl rollout history deployment/{name} -n {ns}",
                    ),
                    Action(
                        description="Roll back to the previous revision",
                        kind="write",
                        command=f"kubectl rollout undo deployment/{name} -n {ns}",
                    ),
                ],
            )
        )
    for sts in idx.of_kind("StatefulSet"):
        ns, name = ns_name(sts)
        status = sts.data.get("status") or {}
        cur, upd = status.get("currentRevision"), status.get("updateRevision")
        if not cur or not upd or cur == upd or (ns, name) in seen:
            continue
        out.append(
            _rollout_cause(
                f"StatefulSet {ns}/{name}",
                ts=None,
                tags=workload_tags(ns, name, meta(sts).get("labels")),
                title=f"StatefulSet {ns}/{name} updating ({cur} -> {upd})",
                mechanism=f"the update of StatefulSet {ns}/{name} to revision {upd} brought a defect that "
                f"makes it fail",
                evidence=[ref(sts, "status.updateRevision", upd)],
                actions=[
                    Action(
                        description="Roll back",
                        kind="write",
                        command=f"kubectl rollout undo statefulset/{name} -n {ns}",
                    )
                ],
            )
        )
    return out


def _release_action(workload: str, version: str, item: EvidenceItem | None) -> Action:
    if item is not None and item.object.startswith("lambda/"):
        return Action(
            description=f"List {workload}'s versions and where its aliases point, to move the alias back",
            command=f"aws lambda list-aliases --function-name {workload}",
        )
    return Action(
        description=f"See what changed in {workload} {version} against the version before it (its deploy history "
        "or changelog), and roll back if the failures began with it",
        command=f"git log --oneline <previous release>..{version.removeprefix('version ')}",
    )


CLEAN_AFTER_RELEASE_S = 20 * 60  # a new version that served this long without an error did not bring the errors
CLEAN_MIN_RECORDS = 5  # ...while logging at least this many lines (it was running, not gone)


def served_cleanly(evidence: EvidenceSet, workload: str, since: float) -> bool:
    """Whether the workload's own logs show it running after a release (5+ lines) with no error for 20 minutes,
    and then going on past that: errors that began later came from elsewhere."""
    name = workload.lower()
    lines = errors_early = 0
    went_on = False
    for item in evidence.kind("log"):
        if name not in item.object.lower():
            continue
        for r in item.data.get("records") or ():
            ts = r.get("ts")
            if not isinstance(ts, int | float) or ts < since:
                continue
            if ts >= since + CLEAN_AFTER_RELEASE_S:
                went_on = True
                continue
            lines += 1
            if str(r.get("level") or "").lower() in _ERROR_LEVELS:
                errors_early += 1
    return (
        went_on
        and lines >= CLEAN_MIN_RECORDS
        and errors_early == 0
        and not _failures_counted_since(evidence, name, since)
    )


def _failures_counted_since(evidence: EvidenceSet, name: str, since: float) -> bool:
    """Whether a failure series of the workload (a request counter's 5xx or 429 series, by the metrics analyzer's
    reading of its labels) rose from about nothing to something within 20 minutes of the release: the failures are
    counted where the workload answers (at the ingress, in its metrics), whatever its own log says."""
    from diagnosis.analyzers.metrics import _kind
    from diagnosis.analyzers.regressions import same_workload

    for s in evidence.kind("metric"):
        labels = {str(k): str(v) for k, v in (s.data.get("labels") or {}).items()}
        if _kind(str(s.data.get("name") or ""), labels) != "errors":
            continue
        if not any(same_workload(v, name) for v in labels.values() if v):
            continue
        pts = [(float(p[0]), float(p[1])) for p in s.data.get("points") or () if len(p) == 2]
        before = [v for t, v in pts if t < since]
        after = [v for t, v in pts if since <= t < since + CLEAN_AFTER_RELEASE_S]
        if before and after and max(before) <= 0.01 * max(after) and max(after) > 0:
            return True
    return False


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"log"})
def log_releases_changes(evidence: EvidenceSet) -> list[Finding]:
    """A release seen in logs outside Kubernetes (a deploy tool's line, a Lambda function's new version, a service
    started at a new version): like a rollout, a weak cause candidate that stands only when failures of the same
    service began after it. Only the newest release of each service, and only a recent one."""
    from diagnosis.analyzers.regressions import releases

    rels = [r for r in releases(evidence) if (item := evidence.get(r.ref.item)) is not None and item.kind == "log"]
    if not rels:
        return []
    now = evidence_now(evidence)
    newest = {r.workload: r for r in rels}  # oldest first: the last one wins
    out = []
    for rel in newest.values():
        if now is not None and rel.ts < now - CHANGE_WINDOW_S:
            continue
        if served_cleanly(evidence, rel.workload, rel.ts):
            continue  # the new version served its traffic without an error for a good while: it did not bring them
        ago = f", {fmt_age(now - rel.ts)} before the evidence ends" if now else ""
        out.append(
            _rollout_cause(
                rel.workload,
                ts=rel.ts,
                tags=[f"service:{rel.workload}", f"version:{rel.version}"],
                title=f"{rel.workload} released {rel.version} at {fmt_ts(rel.ts)}",
                mechanism=f"the release of {rel.workload} {rel.version} at {fmt_ts(rel.ts)}{ago} brought a defect that "
                "makes the new version fail",
                evidence=[rel.ref],
                actions=[_release_action(rel.workload, rel.version, evidence.get(rel.ref.item))],
            )
        )
    return out


# Planned work announced in a log or a Kubernetes event: a maintenance window or mode, a rolling deploy, restart
# or upgrade, a node or package upgrade, a drain, a replay or backfill of data. Servers leaving a pool, nodes going
# away, a backlog or a spike during it are what the work does, and end with it.
PLANNED_WORK = re.compile(
    r"\bmaintenance\b|\brolling (?:deploy\w*|restart\w*|update\w*|upgrade\w*|reboot\w*)|"
    # Elastic Beanstalk's and CodeDeploy's own words for a deployment in batches
    r"\bDeploying new version to instance|\bEnvironment update is starting\b|"
    r"\bupgrad(?:e|ed|ing)\b|\bUpgradeStarted\b|\bsurge upgrade\b|\bdrain(?:ed|ing)? (?:node|host)\b|"
    r"\b(?:replay|backfill|re-?sync|reindex|re-?index)(?:ing)? (?:requested|started|of|from|run|job)\b|"
    # an announced security scan: probes of paths and methods that do not exist, by design
    r"\b(?:vulnerability|security|penetration|pen|authenticated|web app(?:lication)?) (?:scan|test)(?:ning)?\b|"
    r"\b(?:Tenable|Nessus|Qualys|Burp Suite|OWASP ZAP)\b|"
    # a chaos experiment or game day: pods killed, latency or stress injected on purpose
    r"\bchaos (?:experiment|engineering|test|schedule|drill)s?\b|\bgame ?day\b|\bfault injection\b|"
    r"\b(?:Pod|Network|Stress|IO|Time|DNS|HTTP)Chaos\b|\bChaos(?:Engine|Experiment|Result)\b|\blitmus ?chaos\b",
    re.I,
)
# the chaos tools' own objects (Chaos Mesh, LitmusChaos): an experiment is planned fault injection
CHAOS_GROUPS = ("chaos-mesh.org/", "litmuschaos.io/")
_FAILED = re.compile(r"\b(?:fail(?:ed|ure)?|error|abort(?:ed)?|rolled back|rollback)\b", re.I)
_ERROR_LEVELS = frozenset({"error", "err", "fatal", "critical", "crit", "alert", "emerg", "panic"})


# the time an announcement gives for the work: "runs Tue 02:00-04:00 UTC", "window 22:00 to 23:30"
_ANNOUNCED_WINDOW = re.compile(
    r"(?:\b(?P<day>Mon|Tue|Wed|Thu|Fri|Sat|Sun)\w*\s+)?\b(?P<h1>[01]?\d|2[0-3]):(?P<m1>[0-5]\d)\s*(?:-|\u2013|to|until)\s*"
    r"(?P<h2>[01]?\d|2[0-3]):(?P<m2>[0-5]\d)\s*(?:UTC|Z|GMT)?",
    re.I,
)
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def announced_window(text: str, ts: float) -> tuple[float, float] | None:
    """The window an announcement at `ts` gives for its work (times read as UTC): the first such time on or after
    the day it was announced (on the weekday it names), for announcements made before the work."""
    m = _ANNOUNCED_WINDOW.search(text)
    if not m:
        return None
    said = datetime.fromtimestamp(ts, tz=UTC)
    day = said.replace(hour=int(m["h1"]), minute=int(m["m1"]), second=0, microsecond=0)
    if m["day"]:
        day += timedelta(days=(_DAYS.index(m["day"][:3].lower()) - day.weekday()) % 7)
    start = day.timestamp()
    minutes = (int(m["h2"]) * 60 + int(m["m2"])) - (int(m["h1"]) * 60 + int(m["m1"]))
    end = start + (minutes if minutes > 0 else minutes + 24 * 60) * 60
    if end < ts:  # the time of day already past on the day it was said: the next day's
        start, end = start + 86400, end + 86400
    return start, end


def _planned_finding(item: EvidenceItem, text: str, ts: float | None, ev: EvidenceRef) -> Finding:
    what = " ".join(text.split())[:160]
    when = f" at {fmt_ts(ts)}" if ts else ""
    window = announced_window(text, ts) if ts else None
    return Finding(
        analyzer="planned_work",
        domain=Domain.CHANGES,
        role="benign",
        code="planned_work",
        category=Category.HEALTHY,
        title=f"planned work{when}: '{what}'",
        mechanism=(
            f"planned work{when} ('{what}'): servers or nodes leaving and rejoining, a backlog or a spike while it "
            "runs are what the work does, and end with it"
        ),
        object=item.object,
        score=0.2,
        ts=ts,
        tags=[f"window:{window[0]:.0f}:{window[1]:.0f}"] if window else [],
        evidence=[ev],
    )


def _scheduled_changes(evidence: EvidenceSet) -> list[Finding]:
    """A cloud's own scheduled changes that have begun (AWS Health `scheduledChange` events open now: task
    retirements, maintenance): the provider's planned work."""
    now = evidence_now(evidence)
    out = []
    for item in evidence.kind("external/status"):
        for i, inc in enumerate(item.data.get("incidents") or ()):
            start = inc.get("created_at")
            if inc.get("category") != "scheduledChange" or inc.get("status") not in ("open", "closed") or start is None:
                continue
            if now is not None and start > now:
                continue  # announced for later: not what happened
            ref = EvidenceRef(item=item.id, field=f"incidents.{i}.name", value=inc.get("name"))
            out.append(_planned_finding(item, f"scheduled change {inc.get('name')} ({inc.get('service')})", start, ref))
    return out


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"log", "k8s/", "external/status"})
def planned_work(evidence: EvidenceSet) -> list[Finding]:
    """The first announcement of planned work in each log and on each kind of Kubernetes event (benign context:
    it tells a healthy answer why the signals around it were expected). Failed work is not planned work."""
    out: list[Finding] = []
    # the newest evidence other than the change list itself (a calendar lists next week's changes too)
    stamped = sorted(((i.ts, i.id) for i in evidence if i.ts is not None), reverse=True)[:2]
    for item in evidence.kind("log"):
        now = next((t for t, i in stamped if i != item.id), None)
        found: list[tuple[float | None, dict[str, Any]]] = []
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            level = str(r.get("level") or "").lower()
            if level in _ERROR_LEVELS or not PLANNED_WORK.search(msg) or _FAILED.search(msg):
                continue
            found.append((r.get("ts") if isinstance(r.get("ts"), int | float) else None, r))
            if not (item.data.get("source") or {}).get("format"):
                break  # a running log: its first announcement; a calendar or change list: read on
        if not found:
            continue
        # in a calendar of changes, the one that had begun latest by now is the one the signals come from
        dated = [f for f in found if f[0] is not None and (now is None or f[0] <= now)]
        ts, r = max(dated, key=lambda f: f[0] or 0.0) if dated else found[0]
        msg = str(r.get("msg") or "")
        out.append(_planned_finding(item, msg, ts, EvidenceRef(item=item.id, line=r.get("line"), value=msg[:300])))
    # the first chaos experiment object (Chaos Mesh, LitmusChaos) stands for the experiments
    chaos = next(
        (
            i
            for i in evidence
            if i.kind.startswith("k8s/") and str(i.data.get("apiVersion") or "").startswith(CHAOS_GROUPS)
        ),
        None,
    )
    if chaos is not None:
        spec = chaos.data.get("spec") or {}
        what = f"{chaos.object} ({spec.get('type') or chaos.kind.removeprefix('k8s/')}"
        what += f", {spec['schedule']})" if spec.get("schedule") else ")"
        out.append(
            _planned_finding(
                chaos,
                f"chaos experiment {what}",
                parse_ts((chaos.data.get("metadata") or {}).get("creationTimestamp")),
                ref(chaos, "apiVersion", chaos.data.get("apiVersion")),
            )
        )
    seen: set[str] = set()
    for item in evidence.kind("k8s/Event"):
        d = item.data
        reason, message = str(d.get("reason") or ""), str(d.get("message") or "")
        if reason in seen or str(d.get("type") or "") == "Warning" or not PLANNED_WORK.search(f"{reason} {message}"):
            continue
        seen.add(reason)
        ts = parse_ts(d.get("first_ts") or d.get("last_ts"))
        out.append(_planned_finding(item, message or reason, ts, ref(item, "message", message or reason)))
    return out + _scheduled_changes(evidence)


# a deploy tool reporting that the release did not roll out: helm's "UPGRADE FAILED ... context deadline exceeded"
# (with --atomic: "has been rolled back"), helm history's failed revision, Argo CD's "sync failed"
_DEPLOY_FAILED = re.compile(
    r"UPGRADE FAILED|INSTALL FAILED|Upgrade \"[\w.\-]+\" failed|failed to deploy \S+|rolled back due to atomic|"
    r"(?:sync|rollout|deployment) (?:operation )?failed",
    re.I,
)


_DEPLOYED = re.compile(r"\bdeployed\b|\bhas been upgraded\b|upgraded successfully|\bsync(?:ed)? succeeded\b", re.I)


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"log"})
def failed_deploys(evidence: EvidenceSet) -> list[Finding]:
    """A release the deploy tool reports as failed is no planned work that completed: why it did not become ready
    is in the new pods (their status, events and logs), which must be in the evidence to say."""
    hits: dict[str, tuple[EvidenceItem, dict[str, Any]]] = {}
    succeeded: list[tuple[float, str]] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if ("ail" in msg or "AIL" in msg) and _DEPLOY_FAILED.search(msg):
                m = re.search(r"release ([\w.\-]+)|Upgrade \"([\w.\-]+)\"|deploy ([\w.\-]+)", msg)
                name = next((g for g in m.groups() if g), item.object) if m else item.object
                hits.setdefault(name, (item, r))
            elif (
                ("eployed" in msg or "upgraded" in msg or "ucceeded" in msg)
                and _DEPLOYED.search(msg)
                and ("roll" not in msg.lower() and isinstance(r.get("ts"), int | float))
            ):
                succeeded.append((r["ts"], msg))
    out: list[Finding] = []
    for name, (item, r) in hits.items():
        ts = r.get("ts")
        if isinstance(ts, int | float) and any(t > ts and name in m for t, m in succeeded):
            continue  # deployed again since, and it went through

        out.append(
            Finding(
                analyzer="failed_deploys",
                domain=Domain.CHANGES,
                role="symptom",
                code="deploy_failed",
                category=Category.UNKNOWN,
                title=f"the deploy of {name} failed",
                mechanism=(
                    f"the deploy of {name} failed ('{' '.join(str(r.get('msg') or '').split())[:200]}'): its new "
                    "version did not become ready in time; why is in its new pods' status, events and logs"
                ),
                object=f"release {name}",
                score=0.6,
                ts=r.get("ts"),
                tags=[f"service:{name}", f"workload:{name}"],
                evidence=[EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:300])],
                needs=[f"the status, events and logs of {name}'s new pods in the namespace it was deployed to"],
            )
        )
    return out
