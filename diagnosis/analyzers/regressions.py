"""Release regressions at flat traffic: memory that grows without levelling off (a leak) and CPU pinned at its
limit (a loop or a costlier code path) after a new version, while the request rate stayed where it was.

Both are `code_defect` naming the version: more memory or CPU would only delay or hide them. Where the traffic
grew as much as the resource, nothing is said here (the metrics analyzer's saturation rules speak for capacity).
A release is seen as a ReplicaSet created, a Deployment's new ReplicaSet, a ScalingReplicaSet event, or a new
`image` label value on the series themselves.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from diagnosis.analyzers._common import service_of, workload_of_pod
from diagnosis.analyzers._kube_pods import quantity
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import Point, human_duration, linear_trend, median, points_of, thirds
from diagnosis.timeline import fmt_ts, parse_ts

# memory in use, including the JVM's live set after GC (the truest leak signal) and its old generation
_MEMORY = re.compile(r"mem(?:ory)?|rss|heap|working[_-]?set|live_data|old_gen|tenured", re.I)
_CPU = re.compile(r"cpu", re.I)
# connections a client holds open (Envoy's upstream_cx_active, a pool's active or open connections)
_CONNECTIONS = re.compile(
    r"cx[_-]active|(?:active|open|established)[_-]?conn(?:ection)?s|conn(?:ection)?s[_-](?:active|open|in[_-]?use)",
    re.I,
)
_NOT_USAGE = re.compile(r"free|avail|limit|request|capacity|throttl|pressure|fail|oom|max_bytes|total_bytes", re.I)
_TRAFFIC = re.compile(
    r"requests?|rps|qps|tps|throughput|invocations|hits|calls|messages_in|records_in|operations|deliveries|"
    r"transactions",
    re.I,
)
_NOT_TRAFFIC = re.compile(r"duration|latency|seconds_(?:bucket|sum)|bytes|size|inflight|in_flight|error", re.I)

FLAT_TRAFFIC = (0.7, 1.4)  # after / before request rate still "the same traffic"
SAWTOOTH_DROP = 0.25  # a fall of this share of the value is a restart (the process's memory starts over)
MIN_RISE = 0.3  # a growth segment gains at least this share of where it started
RISING_STEPS = 0.65  # share of a growth segment's steps that go up
LEVELLING = 0.35  # a last segment whose second half rises at less than this share of its first half has levelled
CPU_PINNED = 0.9  # of the CPU limit
CPU_BEFORE = 0.5  # the previous version stayed under this share of the limit
CPU_JUMP = 3.0  # without a limit: the new version uses this many times the old one
MIN_POINTS = 4


def _rollback(workload: str, version: str) -> Action:
    """The write step every release regression ends with: the Deployment back to its previous revision."""
    return Action(
        description=f"Roll back {workload} to the version before {version}",
        command=f"kubectl rollout undo deployment/{workload}",
        kind="write",
    )


@dataclass(frozen=True)
class Release:
    ts: float
    workload: str
    version: str
    ref: EvidenceRef


def _tag(image: str) -> str:
    image = image.split("@", 1)[0]
    return image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else image.rsplit("/", 1)[-1]


def _template_images(data: dict[str, object]) -> list[str]:
    spec = data.get("spec") if isinstance(data, dict) else None
    tpl = spec.get("template") if isinstance(spec, dict) else None
    pod_spec = tpl.get("spec") if isinstance(tpl, dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    return [str(c.get("image")) for c in containers or [] if isinstance(c, dict) and c.get("image")]


def releases(evidence: EvidenceSet) -> list[Release]:
    """Every release the evidence shows, oldest first (a ReplicaSet's birth is its version's release)."""
    return evidence.derived("releases", _releases)


def _releases(evidence: EvidenceSet) -> list[Release]:
    out: list[Release] = []
    for rs in evidence.kind("k8s/ReplicaSet"):
        meta = rs.data.get("metadata") or {}
        ts = parse_ts(meta.get("creationTimestamp"))
        images = _template_images(rs.data)
        if ts is None or not images:
            continue
        owner = next((o.get("name") for o in meta.get("ownerReferences") or [] if isinstance(o, dict)), None)
        name = str(owner or re.sub(r"-[a-z0-9]{6,10}$", "", str(meta.get("name") or "")))
        out.append(
            Release(
                ts,
                name,
                _tag(images[0]),
                EvidenceRef(item=rs.id, field="metadata.creationTimestamp", value=meta.get("creationTimestamp")),
            )
        )
    for dep in evidence.kind("k8s/Deployment"):
        meta = dep.data.get("metadata") or {}
        images = _template_images(dep.data)
        conds = (dep.data.get("status") or {}).get("conditions") or []
        done = next(
            (
                c
                for c in conds
                if isinstance(c, dict) and c.get("reason") in ("NewReplicaSetAvailable", "ReplicaSetUpdated")
            ),
            None,
        )
        ts = parse_ts(done.get("lastUpdateTime")) if done else None
        if done is None or ts is None or not images:
            continue
        idx = conds.index(done)
        out.append(
            Release(
                ts,
                str(meta.get("name") or dep.object),
                _tag(images[0]),
                EvidenceRef(
                    item=dep.id, field=f"status.conditions.{idx}.lastUpdateTime", value=done.get("lastUpdateTime")
                ),
            )
        )
    known = {r.workload for r in out}
    out += [r for r in _pod_releases(evidence) if r.workload not in known]
    if not out:
        out += _log_releases(evidence)
    return sorted(out, key=lambda r: r.ts)


_DEPLOYMENT_POD = re.compile(r"^(?P<base>.+?)-(?P<hash>[a-z0-9]{6,10})-[a-z0-9]{5}$")


def _pod_releases(evidence: EvidenceSet) -> list[Release]:
    """A release seen only in its pods: a workload's pods of one ReplicaSet (template hash) that other evidence
    (an older pod, a metric series, a log) shows replaced another ReplicaSet's. The first new pod's creation is
    the release, its image tag the version."""
    hashes: dict[str, set[str]] = {}

    def seen(pod: str) -> None:
        m = _DEPLOYMENT_POD.match(pod)
        if m:
            hashes.setdefault(m["base"], set()).add(m["hash"])

    for m in evidence.kind("metric"):
        seen(str((m.data.get("labels") or {}).get("pod") or ""))
    for item in evidence.kind("log"):
        parts = item.object.split("/")
        if len(parts) >= 3 and parts[0] == "Pod":
            seen(parts[2])
    # per workload and ReplicaSet: its first pod (the earliest created)
    first: dict[str, dict[str, tuple[float, EvidenceItem]]] = {}
    for pod in evidence.kind("k8s/Pod"):
        meta = pod.data.get("metadata") or {}
        name = str(meta.get("name") or "")
        seen(name)
        pm = _DEPLOYMENT_POD.match(name)
        ts = parse_ts(meta.get("creationTimestamp"))
        if pm is None or ts is None:
            continue
        sets = first.setdefault(pm["base"], {})
        if pm["hash"] not in sets or ts < sets[pm["hash"]][0]:
            sets[pm["hash"]] = (ts, pod)
    out: list[Release] = []
    for base, sets in first.items():
        if len(hashes.get(base, ())) < 2:
            continue  # one ReplicaSet in sight: nothing says it replaced another
        ts, pod = max(sets.values(), key=lambda tp: tp[0])  # the newest ReplicaSet's first pod
        images = [str(c.get("image")) for c in (pod.data.get("spec") or {}).get("containers") or () if c.get("image")]
        if not images:
            continue
        created = (pod.data.get("metadata") or {}).get("creationTimestamp")
        ref = EvidenceRef(item=pod.id, field="metadata.creationTimestamp", value=created)
        out.append(Release(ts, base, _tag(images[0]), ref))
    return out


# a process (re)started at a version: systemd "Started quote-pricer (5.2.0).", "Stopping x (5.1.4)...", Spring Boot
# "Starting QuotePricerApplication v5.2.0 using Java 21", "starting orders-api version=5.2.0"
_VERSION_LINE = re.compile(
    r"\b(?P<verb>Started|Starting|Stopping|Stopped|starting|started|booting|Booting|Launching|launching)[\"']?\s+"
    r"(?P<name>[A-Za-z][\w.@\-]*)?[^\n]{0,40}?(?:\(|\bv|\bversion[\"']?[=: ]+[\"']?)"
    r"(?P<ver>v?\d+\.\d+\.\d+(?:[-+][\w.]+)?)\b"
)


# a deploy tool's log line: "orders-api 5.4.0 -> hosts ord-app-01..04 OK", "deployed orders-api 5.4.0",
# "Deploying orders-api version 5.4.0", "rolled out billing@2.3.1"
_DEPLOY_LINE = re.compile(
    # an artifact a deploy tool records: "invoicing-2.19.0.war sha256=... by deploy-bot"
    r"^(?P<name3>[a-z][\w\-]*?)-(?P<ver3>\d+\.\d+\.\d+)\.(?:war|jar|ear|tar\.gz|tgz|zip|rpm|deb|whl)\b.*\bby\b|"
    r"^(?P<name>[a-z][\w.\-]+) v?(?P<ver>\d+\.\d+\.\d+[\w.\-+]*) -> (?:hosts?|servers?|nodes?|prod|production)\b|"
    # an application's own deploy record, named by the file it is in: "4.8.0 deployed by ci (pipeline 89117) ok"
    r"^v?(?P<ver5>\d+\.\d+\.\d+[\w.\-+]*) (?:deployed|released|installed)\b|"
    # a deploy history's upgrade: "quotes 2.6.1 -> 2.7.0 qt-app-01,qt-app-02 by ci"
    r"^(?P<name4>[a-z][\w.\-]+) v?\d+\.\d+\.\d+[\w.\-+]* -> v?(?P<ver4>\d+\.\d+\.\d+[\w.\-+]*)\b|"
    r"\b(?:[Dd]eployed|[Dd]eploying|[Rr]eleased|[Rr]olled out) (?P<name2>[a-z][\w.\-]+)(?: version | v|@| )"
    r"(?P<ver2>\d+\.\d+\.\d+[\w.\-+]*)"
)

_APP_PATH = re.compile(r"/(?:srv|opt|var/www|home|apps?)/(?P<app>[\w.\-]+)/")
_VERSION_FIELD = re.compile(
    r"\b(?:version|app_version|service\.version)[\"']?[=:]\s*[\"']?(?P<ver>v?\d+\.\d+\.\d+[\w.\-+]*)"
)
_LAMBDA_START = re.compile(r"^START RequestId: \S+ Version: (?P<ver>\S+)")

# Capistrano's revisions.log: "Branch main (at 4be91c2) deployed as release 20261104130214 by jenkins"
_CAPISTRANO = re.compile(r"\(at (?P<rev>[0-9a-f]{6,40})\) deployed as release \d{14}")
_CAPISTRANO_APP = re.compile(r"/(?P<app>[\w.\-]+)/(?:shared/)?revisions\.log")


def _log_releases(evidence: EvidenceSet) -> list[Release]:
    """Releases outside Kubernetes: the first start at a version after the same process ran another version (or
    was stopped at it), from systemd and application start lines; Capistrano's revisions.log, whose newest line
    is the release running now."""
    out: list[Release] = []
    for item in evidence.kind("log"):
        last: dict[str, str] = {}
        newest: Release | None = None
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "deployed as release" in msg and (cap := _CAPISTRANO.search(msg)) and r.get("ts") is not None:
                app = _CAPISTRANO_APP.search(str((item.data.get("source") or {}).get("command") or ""))
                workload = app["app"] if app else service_of(item) or "the application"
                rel = Release(
                    float(r["ts"]), workload, cap["rev"], EvidenceRef(item=item.id, line=r.get("line"), value=msg[:300])
                )
                newest = rel if newest is None or rel.ts > newest.ts else newest
                continue
            if (dep := _DEPLOY_LINE.search(msg)) and r.get("ts") is not None:
                named = dep["name"] or dep["name2"] or dep["name3"] or dep["name4"]
                if not named:  # a version alone: the application whose file it is (`cat /srv/app/DEPLOYS`)
                    app = _APP_PATH.search(str((item.data.get("source") or {}).get("command") or ""))
                    named = app["app"] if app else service_of(item) or item.object
                out.append(
                    Release(float(r["ts"]), named,
                            dep["ver"] or dep["ver2"] or dep["ver3"] or dep["ver4"] or dep["ver5"],
                            EvidenceRef(item=item.id, line=r.get("line"), value=msg[:300]))
                )  # fmt: skip
                continue
            if msg.startswith("START RequestId:") and (lv := _LAMBDA_START.search(msg)) and r.get("ts") is not None:
                # a Lambda invocation names the function version it ran: a new version is a release
                workload = item.object.removeprefix("lambda/")
                if last.get(workload) not in (None, lv["ver"]):
                    out.append(Release(float(r["ts"]), workload, f"version {lv['ver']}",
                                       EvidenceRef(item=item.id, line=r.get("line"), value=msg[:200])))  # fmt: skip
                last[workload] = lv["ver"]
                continue
            if "tart" not in msg and "top" not in msg and "oot" not in msg and "aunch" not in msg:
                if "version" in msg and (field := _VERSION_FIELD.search(msg)):
                    # a structured line that names the version running ("request stats" version=3.13.2)
                    last[(service_of(item) or item.object).removesuffix(".service")] = field["ver"]
                continue
            m = _VERSION_LINE.search(msg)
            ts = r.get("ts")
            if not m or ts is None:
                continue
            name = m["name"] if m["name"] and m["verb"].lower() in ("started", "stopping", "stopped") else None
            workload = (name or service_of(item) or item.object).removesuffix(".service")
            prev = last.get(workload)
            if m["verb"].lower().startswith(("start", "boot", "launch")) and prev and prev != m["ver"]:
                out.append(
                    Release(
                        float(ts), workload, m["ver"], EvidenceRef(item=item.id, line=r.get("line"), value=msg[:300])
                    )
                )
            last[workload] = m["ver"]
        if newest is not None:
            out.append(newest)
    return out


def _workload(labels: dict[str, str]) -> str | None:
    """The workload a series is about: a pod names its workload better than its container does (`relay`, `app`
    are container names, not the Deployment)."""
    for key in ("deployment", "workload", "app", "service"):
        if labels.get(key) and labels[key] not in ("POD", ""):
            return labels[key]
    pod = labels.get("pod")
    if pod and workload_of_pod(pod) != pod:
        return workload_of_pod(pod)
    for key in ("job", "container"):
        if labels.get(key) and labels[key] not in ("POD", ""):
            return labels[key]
    return pod or None


def same_workload(a: str, b: str) -> bool:
    """Whether two names speak for one workload: equal, or one the other with a suffix (`cart` and `cart-api`)."""
    a, b = a.lower(), b.lower()
    return a == b or a.startswith(b + "-") or b.startswith(a + "-")


@dataclass
class _S:
    item: EvidenceItem
    name: str
    labels: dict[str, str]
    points: list[Point]
    workload: str | None


def _series(evidence: EvidenceSet) -> list[_S]:
    out = []
    for m in evidence.kind("metric"):
        labels = {str(k): str(v) for k, v in (m.data.get("labels") or {}).items()}
        out.append(
            _S(m, str(m.data.get("name") or m.object), labels, points_of(m.data.get("points")), _workload(labels))
        )
    return out


def _traffic_ratio(series: list[_S], workload: str | None, at: float) -> tuple[float, EvidenceRef] | None:
    """Mean request rate (all status codes summed) after `at` over before it, for the workload (None: all the
    request-rate series there are)."""
    mine = [
        s
        for s in series
        if _TRAFFIC.search(s.name)
        and not _NOT_TRAFFIC.search(s.name)
        and (workload is None or (s.workload and same_workload(s.workload, workload)))
    ]
    if not mine:
        return None
    total: dict[float, float] = {}
    for s in mine:
        for t, v in s.points:
            total[t] = total.get(t, 0.0) + v
    before = [v for t, v in total.items() if t < at]
    after = [v for t, v in total.items() if t >= at]
    if len(before) < 2 or len(after) < 2:
        return None
    b, a = sum(before) / len(before), sum(after) / len(after)
    if b <= 0:
        return None
    return a / b, EvidenceRef(
        item=mine[0].item.id, field="points", value=f"requests {b:.3g} -> {a:.3g}/s ({a / b:.2f}x)"
    )


def _limit(evidence: EvidenceSet, workload: str, resource: str) -> float | None:
    """The container limit of the workload's pod template (or one of its pods)."""
    for kind in ("k8s/Deployment", "k8s/StatefulSet", "k8s/ReplicaSet", "k8s/Pod"):
        for item in evidence.kind(kind):
            name = str((item.data.get("metadata") or {}).get("name") or "")
            if not same_workload(workload_of_pod(name) if kind == "k8s/Pod" else name, workload) and not same_workload(
                name, workload
            ):
                continue
            spec = item.data.get("spec") or {}
            pod_spec = (spec.get("template") or {}).get("spec") if kind != "k8s/Pod" else spec
            for c in (pod_spec or {}).get("containers") or []:
                q = quantity(((c.get("resources") or {}).get("limits") or {}).get(resource))
                if q:
                    return q
    return None


def _segments(points: list[Point]) -> list[list[Point]]:
    """Split a memory series at restarts (sharp falls)."""
    segs: list[list[Point]] = [[]]
    prev: float | None = None
    for t, v in points:
        if prev is not None and prev > 0 and v < prev * (1 - SAWTOOTH_DROP):
            segs.append([])
        segs[-1].append((t, v))
        prev = v
    return [s for s in segs if s]


GROWTH_STEPS = 24  # a long series is judged over about this many steps: a slow leak rises under its samples' noise


def _growing(seg: list[Point]) -> bool:
    if len(seg) < MIN_POINTS or seg[0][1] <= 0:
        return False
    stride = max(1, len(seg) // GROWTH_STEPS, 3 if len(seg) >= 4 * MIN_POINTS else 1)
    sampled = seg[::stride] if seg[::stride][-1] == seg[-1] else [*seg[::stride], seg[-1]]
    ups = sum(1 for (_, a), (_, b) in itertools.pairwise(sampled) if b > a)
    return ups >= RISING_STEPS * (len(sampled) - 1) and seg[-1][1] >= seg[0][1] * (1 + MIN_RISE)


def _levelled(seg: list[Point]) -> bool:
    half = len(seg) // 2
    first, second = linear_trend(seg[: half + 1]), linear_trend(seg[half:])
    if first is None or second is None or first.slope <= 0:
        return False
    return second.slope < LEVELLING * first.slope


def _cap(seg: list[Point]) -> float | None:
    """The value a series is pinned at when it ends on three or more samples of exactly its maximum (a count held at
    a hard limit), else None."""
    top = max(v for _, v in seg)
    tail = 0
    for _, v in reversed(seg):
        if v != top:
            break
        tail += 1
    return top if tail >= 3 and tail < len(seg) - MIN_POINTS + 1 else None


def _flat(points: list[Point]) -> bool:
    vals = [v for _, v in points]
    mid = median(vals)
    return mid > 0 and (max(vals) - min(vals)) / mid < 0.35


def _release_for(rels: list[Release], workload: str, start: float, end: float) -> Release | None:
    cands = [r for r in rels if same_workload(r.workload, workload) and r.ts <= end]
    inside = [r for r in cands if r.ts >= start]
    if inside:
        return inside[-1]
    return cands[-1] if cands else None


REFILL_S = 1800  # a container that reaches its limit again this soon after each restart needs more than it has


def _first_start(evidence: EvidenceSet, workload: str, start: float, end: float) -> Release | None:
    """When no release is in sight: the workload's first start at a version (systemd, its own start line) inside
    the series' span, the series showing how it behaved before."""
    for item in evidence.kind("log"):
        if not same_workload((service_of(item) or item.object).removesuffix(".service"), workload):
            continue
        for r in item.data.get("records") or ():
            msg, ts = str(r.get("msg") or ""), r.get("ts")
            if ts is None or not start < ts <= end or "tart" not in msg:
                continue
            m = _VERSION_LINE.search(msg)
            if m and m["verb"].lower().startswith("start"):
                return Release(float(ts), workload, m["ver"], EvidenceRef(item=item.id, line=r.get("line"),
                                                                          value=msg[:300]))  # fmt: skip
    return None


# an application announcing its version as it starts: "quoting 4.2.0 (build ..., commit 3c9e1d4) started"
_STARTED_AT_VERSION = re.compile(
    r"\b(?P<name>[a-z][\w.\-]*) v?(?P<ver>\d+\.\d+\.\d+(?:[-+][\w.]+)?)\b(?: \([^)]{0,120}\))? (?:started|is up)\b"
)


def _versioned_starts(evidence: EvidenceSet) -> list[Release]:
    """Every start line that names a version ("quoting 4.2.0 (build ...) started", "Started x v1.2.3"), read once."""
    out: list[Release] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg, ts = str(r.get("msg") or ""), r.get("ts")
            if ts is None or ("tart" not in msg and "is up" not in msg):
                continue
            if m := _STARTED_AT_VERSION.search(msg):
                name = m["name"]
            elif (v := _VERSION_LINE.search(msg)) and v["verb"].lower().startswith("start"):
                m, name = v, v["name"]
            else:
                continue
            ref = EvidenceRef(item=item.id, line=r.get("line"), value=msg[:300])
            out.append(Release(float(ts), name or service_of(item) or item.object, m["ver"], ref))
    return out


def _sole_start(evidence: EvidenceSet, rels: list[Release], start: float, end: float) -> Release | None:
    """When the series' workload names no release (a JMX job, an exporter's name): the bundle's only release or
    versioned start inside the series' span, whichever workload it names."""
    found: dict[tuple[str, str], Release] = {}
    for r in [*rels, *evidence.derived("versioned_starts", _versioned_starts)]:
        if start < r.ts <= end:
            found.setdefault((r.workload, r.version), r)
    versions = {(w.lower(), v) for w, v in found}
    return next(iter(found.values())) if len(versions) == 1 else None


POD_SERIES_LAG_S = 3600.0


def _pods_started(evidence: EvidenceSet, workload: str, start: float, end: float) -> Release | None:
    """When no release is in sight: the creation of the workload's newest pods, inside the series' span, at the
    version their image carries (the series shows how the workload behaved before them)."""
    best: tuple[float, EvidenceItem] | None = None
    for pod in evidence.kind("k8s/Pod"):
        meta = pod.data.get("metadata") or {}
        ts = parse_ts(meta.get("creationTimestamp")) or parse_ts((pod.data.get("status") or {}).get("startTime"))
        if (
            ts is None
            # a pod's own series starts when it does: its creation a few minutes before the first point counts
            or not start - POD_SERIES_LAG_S < ts <= end
            or not same_workload(workload_of_pod(str(meta.get("name") or "")), workload)
        ):
            continue
        if best is None or ts < best[0]:
            best = (ts, pod)
    if best is None:
        return None
    ts, pod = best
    images = [str(c.get("image")) for c in (pod.data.get("spec") or {}).get("containers") or () if c.get("image")]
    if not images or not re.search(r"\d", _tag(images[0])):
        return None
    created = (pod.data.get("metadata") or {}).get("creationTimestamp")
    field = "metadata.creationTimestamp" if created else "status.startTime"
    value = created or (pod.data.get("status") or {}).get("startTime")
    return Release(ts, workload, _tag(images[0]), EvidenceRef(item=pod.id, field=field, value=value))


_GOROUTINES = re.compile(r"go_goroutines|goroutines", re.I)
_FDS = re.compile(r"open_?fds|open_?files|file_?descriptors|fd_?count|allocated_?fds", re.I)


def _mib(v: float) -> str:
    return f"{v / 2**20:.0f} MiB"


def _count(v: float) -> str:
    return f"{v:,.0f}"


def _fd_limit(series: list[_S], s: _S) -> float | None:
    """The process's descriptor limit, from a max_fds series of the same instance."""
    for o in series:
        if (
            re.search(r"max_?fds|fd_?limit|nofile", o.name, re.I)
            and o.points
            and o.labels.get("instance") == (s.labels.get("instance"))
        ):
            return o.points[-1][1]
    return None


# a runtime's collected heap (the JVM's, Node's, Go's, .NET's): its used bytes are a sawtooth between collections
_GC_HEAP = re.compile(r"jvm_memory|heap|gc_heap|dotnet_gc|nodejs_heap|go_memstats_heap|old_gen|tenured", re.I)
FLOOR_SAMPLES = 3  # samples per floor: a collection comes at least this often


def _collected_heap(s: _S) -> bool:
    return bool(_GC_HEAP.search(s.name)) or s.labels.get("area") == "heap"


def _floor(points: list[Point]) -> list[Point]:
    """The least of every FLOOR_SAMPLES consecutive samples, at the last one's time: a sawtooth's floor."""
    return [
        (points[i + FLOOR_SAMPLES - 1][0], min(v for _, v in points[i : i + FLOOR_SAMPLES]))
        for i in range(0, len(points) - FLOOR_SAMPLES + 1, FLOOR_SAMPLES)
    ]


# the runtime's own classes (strings, arrays, collections' nodes) hold what the application's classes point at
_RUNTIME_CLASS = re.compile(r"^(?:\[|java\.|javax\.|jdk\.|sun\.|com\.sun\.|kotlin\.|scala\.)")
RETAINED_SHARE = 0.2  # an application class holding this much of the heap is what leaks


def _retained(evidence: EvidenceSet) -> tuple[str, EvidenceRef] | None:
    """The application class a heap histogram shows holding the most of the heap, when it holds a fair share."""
    for item in evidence.kind("runtime/heap_histogram"):
        total = float(item.data.get("total_bytes") or 0)
        top = next((c for c in item.data.get("classes") or () if not _RUNTIME_CLASS.match(str(c["name"]))), None)
        if top and total and top["bytes"] >= RETAINED_SHARE * total:
            what = (
                f"the heap histogram of {item.object.removeprefix('heap/')} holds {top['instances']:,} "
                f"{top['name']} ({_mib(top['bytes'])}, {top['bytes'] / total:.0%} of the heap): what it keeps"
            )
            return what, EvidenceRef(item=item.id, field="classes.0", value=f"{top['name']} {top['bytes']}")
    return None


def _leaks(evidence: EvidenceSet, series: list[_S], rels: list[Release]) -> list[Finding]:
    """Memory, file descriptors, connections or goroutines that grow without levelling off from a release on, at flat
    traffic: the new version leaks them."""
    out: list[Finding] = []
    seen: set[str] = set()
    for s in series:
        if not s.workload or s.workload in seen or len(s.points) < 2 * MIN_POINTS:
            continue
        if _FDS.search(s.name) and not re.search(r"max|limit", s.name, re.I):
            noun, unit, code = "file descriptors", _count, "fd_leak"
            limit = _fd_limit(series, s)
        elif _MEMORY.search(s.name) and not _NOT_USAGE.search(s.name) and not _CPU.search(s.name):
            noun, unit, code = "memory", _mib, "memory_leak"
            limit = None
        elif _CONNECTIONS.search(s.name) and not re.search(r"max|limit|total", s.name, re.I):
            # connections to a backend that pile up at flat traffic: the client never closes or returns them
            noun, unit, code = "connections", _count, "connection_leak"
            limit = None
        elif _GOROUTINES.search(s.name):
            # goroutines that pile up (a connection's read and write loops never closed, a blocked send)
            noun, unit, code = "goroutines", _count, "goroutine_leak"
            limit = None
        else:
            continue
        workload = s.workload
        if noun == "memory" and _collected_heap(s):
            # a garbage-collected heap, sampled, is a sawtooth: what it holds on to is its floor after each
            # collection, so read the floor (the least of every few samples)
            s = _S(s.item, s.name, s.labels, _floor(s.points), workload)
            if len(s.points) < 2 * MIN_POINTS:
                continue
        lo, hi = s.points[0][0], s.points[-1][0]
        rel = (
            _release_for(rels, workload, lo, hi)
            or _pods_started(evidence, workload, lo, hi)
            or _first_start(evidence, workload, lo, hi)
            or _sole_start(evidence, rels, lo, hi)
        )
        if rel is None:
            continue
        before = [p for p in s.points if p[0] < rel.ts]
        after = [p for p in s.points if p[0] >= rel.ts]
        if len(before) >= MIN_POINTS and not _flat(before):
            continue  # it was not steady before the release: not this release's doing
        segs = [g for g in _segments(after) if len(g) >= MIN_POINTS]
        capped = _cap(segs[-1]) if segs and noun == "connections" else None
        if capped is not None:  # pinned at a hard cap (a pool's maximum): the growth up to it is what counts
            segs[-1] = [p for p in segs[-1] if p[1] < capped] or segs[-1]
            limit = capped
        if not segs or not all(_growing(g) for g in segs) or _levelled(segs[-1]):
            continue
        lives = sorted(g[-1][0] - g[0][0] for g in _segments(after)[:-1])
        if len(lives) >= 2 and lives[len(lives) // 2] < REFILL_S:
            continue  # back at its limit minutes after each restart: a working set bigger than the limit, no leak
        traffic = _traffic_ratio(series, workload, rel.ts) if before else None
        if traffic is not None and not FLAT_TRAFFIC[0] <= traffic[0] <= FLAT_TRAFFIC[1]:
            continue  # the load changed with it: capacity, not a leak
        trend = linear_trend(segs[-1])
        slope_h = (trend.slope * 3600) if trend else 0.0
        limit = limit if noun != "memory" else _limit(evidence, workload, "memory")
        to_full = ""
        if limit and trend and trend.slope > 0:
            left = max(0.0, limit - segs[-1][-1][1])
            to_full = (
                f"; at this rate it reaches its {unit(limit)} limit in {human_duration(left / trend.slope)}"
                if left > 0.02 * limit
                else f"; it has reached its limit of {unit(limit)}"
            )
        restarts = len(_segments(after)) - 1
        seen.add(workload)
        base = f" (flat at ~{unit(median([v for _, v in before]))} before)" if len(before) >= MIN_POINTS else ""
        refs = [
            rel.ref,
            EvidenceRef(item=s.item.id, field="points", value=f"{unit(segs[-1][0][1])} -> {unit(segs[-1][-1][1])}"),
        ]
        if traffic:
            refs.append(traffic[1])
        retained = _retained(evidence) if noun == "memory" else None
        if retained:
            refs.append(retained[1])
        # a release found under another name (the application inside a JMX job's Tomcat) names the leak, and the
        # log it was read from is the same process's
        name = workload if same_workload(rel.workload, workload) else rel.workload
        released_in = evidence.get(rel.ref.item)
        also = (
            [
                f"service:{workload}",
                *(
                    [f"service:{w}"]
                    if released_in is not None and released_in.kind == "log" and (w := service_of(released_in))
                    else []
                ),
            ]
            if name != workload
            else []
        )
        out.append(
            Finding(
                analyzer="release_regressions",
                domain=Domain.METRICS,
                role="cause",
                code=code,
                category=Category.CODE_DEFECT,
                title=f"{name} {rel.version} leaks {noun} (+{unit(slope_h)}/h without levelling off)",
                mechanism=(
                    f"since {name} {rel.version} (released {fmt_ts(rel.ts)}) its {noun} "
                    f"{'grows' if noun == 'memory' else 'grow'} "
                    f"~{unit(slope_h)}/h without levelling off{base}"
                    + (f", restarting {restarts}x and growing again" if restarts else "")
                    + (f", at the same traffic ({traffic[0]:.2f}x)" if traffic else "")
                    + f"{to_full}: a {noun.removesuffix('s')} leak in {rel.version}; a bigger limit only delays it"
                    + (f"; {retained[0]}." if retained else ".")
                ),
                object=f"{name} {rel.version}",
                score=0.8 if (traffic and before) else 0.65,
                ts=rel.ts,
                tags=[f"service:{name}", f"version:{rel.version}", f"metric:{s.name}", *also]
                + ([f"host:{s.labels['instance'].rsplit(':', 1)[0]}"] if s.labels.get("instance") else [])
                # the descriptors a process ran out of, whichever log says so, are the ones it leaks
                + (["resource:file-descriptors"] if code == "fd_leak" else []),
                explains=[
                    "oom_killed",
                    "app_out_of_memory",
                    "kernel_oom_kill",
                    "process_down",
                    "pod_restarts",
                    "crash_loop",
                    "memory_high",
                    "old_restart",
                    "fd_exhaustion",
                    "saturation",
                    "errors",
                    "latency",
                    "alert:*",
                    # the calls a leak of connections makes fail: the caller's own pool or circuit breaker full
                    *(
                        ["upstream_pool_wait", "connection_refused", "upstream_reset", "http_5xx", "upstream_5xx"]
                        if code == "connection_leak"
                        else []
                    ),
                ],
                evidence=refs,
                actions=[
                    _rollback(workload, rel.version),
                    Action(
                        description="Take two heap profiles an hour apart and diff them"
                        if noun == "memory"
                        else "List what the descriptors are (deleted files, sockets) and what opens them",
                        command=f"kubectl exec deploy/{workload} -- <heap dump / pprof heap>"
                        if noun == "memory"
                        else f"ls -l /proc/$(pgrep -f {workload} | head -1)/fd | awk '{{print $NF}}' | sort "
                        "| uniq -c | sort -rn | head",
                    ),
                ],
            )
        )
    return out


def _version_of(s: _S, rels: list[Release]) -> str | None:
    if s.labels.get("image"):
        return _tag(s.labels["image"])
    return None


def _cpu_pinned(evidence: EvidenceSet, series: list[_S], rels: list[Release]) -> list[Finding]:
    cpu = [
        s for s in series if _CPU.search(s.name) and not _NOT_USAGE.search(s.name) and s.workload and len(s.points) >= 2
    ]
    by_workload: dict[str, list[_S]] = {}
    for s in cpu:
        by_workload.setdefault(str(s.workload), []).append(s)
    if rels and not any(same_workload(str(w), rels[-1].workload) for w in by_workload):
        hosts = [s for s in cpu if s.labels.get("instance") and not s.labels.get("pod")]
        if found := _fleet_pinned(series, rels, hosts):
            return found
    out: list[Finding] = []
    for workload, group in by_workload.items():
        # a release: series of a new image that begin after those of an older one, or a recorded rollout
        versions: dict[str, list[_S]] = {}
        for s in group:
            v = _version_of(s, rels)
            if v:
                versions.setdefault(v, []).append(s)
        rel: Release | None = None
        new: list[_S] = []
        old: list[_S] = []
        if len(versions) >= 2:
            order = sorted(versions, key=lambda v: min(x.points[0][0] for x in versions[v]))
            new, old = versions[order[-1]], [x for v in order[:-1] for x in versions[v]]
            start = min(x.points[0][0] for x in new)
            rec = _release_for(rels, workload, start - 3600, start + 600)
            rel = rec or Release(
                start,
                workload,
                order[-1],
                EvidenceRef(item=new[0].item.id, field="labels.image", value=new[0].labels.get("image")),
            )
        else:
            rec = _release_for(rels, workload, min(x.points[0][0] for x in group), max(x.points[-1][0] for x in group))
            if rec is None:
                continue
            rel = rec
            new = [x for x in group if any(t >= rel.ts for t, _ in x.points)]
            old = group
        after = [v for s in new for t, v in s.points if t >= rel.ts - 60]
        before = [v for s in old for t, v in s.points if t < rel.ts]
        if len(after) < MIN_POINTS or len(before) < MIN_POINTS:
            continue
        limit = _limit(evidence, workload, "cpu")
        a, b = median(after), median(before)
        pinned = a >= CPU_PINNED * limit and b < CPU_BEFORE * limit if limit else (b > 0 and a >= CPU_JUMP * b)
        if not pinned:
            continue
        traffic = _traffic_ratio(series, workload, rel.ts)
        if traffic is not None and not FLAT_TRAFFIC[0] <= traffic[0] <= FLAT_TRAFFIC[1]:
            continue
        refs = [
            rel.ref,
            EvidenceRef(item=new[0].item.id, field="points", value=f"median {a:.2f} cores after, {b:.2f} before"),
        ]
        if traffic:
            refs.append(traffic[1])
        lim_txt = f" of its {limit:g}-core limit" if limit else ""
        out.append(
            Finding(
                analyzer="release_regressions",
                domain=Domain.METRICS,
                role="cause",
                code="cpu_regression",
                category=Category.CODE_DEFECT,
                title=f"{workload} {rel.version} pins its CPU ({a:.2f} cores{lim_txt}, {b:.2f} before) at flat traffic",
                mechanism=(
                    f"since {workload} {rel.version} (released {fmt_ts(rel.ts)}) each pod burns {a:.2f} cores{lim_txt} "
                    f"where the previous version used {b:.2f}"
                    + (f", at the same traffic ({traffic[0]:.2f}x)" if traffic else "")
                    + f": a CPU-bound loop or a far costlier code path in {rel.version} (it blocks the event loop or "
                    "worker threads, so requests time out); more CPU would not fix it."
                ),
                object=f"{workload} {rel.version}",
                score=0.8 if traffic else 0.65,
                ts=rel.ts,
                tags=[f"service:{workload}", f"version:{rel.version}"],
                explains=[
                    "cpu_high",
                    "cpu_throttled",
                    "latency",
                    "http_5xx",
                    "errors",
                    "upstream_timeout",
                    "alert:*",
                    "pod_restarts",
                ],
                evidence=refs,
                actions=[
                    _rollback(workload, rel.version),
                    Action(
                        description="Profile one pod: where the CPU goes",
                        command=f"kubectl exec deploy/{workload} -- <cpu profiler, e.g. 0x / pprof / async-profiler>",
                    ),
                ],
            )
        )
    return out


FLEET_LAG_S = 1800.0  # hosts' CPU pins within this long after a release whose own CPU series are not there


def _fleet_pinned(series: list[_S], rels: list[Release], cpu: list[_S]) -> list[Finding]:
    """A release outside Kubernetes (Capistrano, a systemd unit) has no CPU series of its own: the hosts' CPU
    (node_exporter, one series per instance) is what shows it. Every host that was under half busy before the
    newest release and pinned within half an hour after it, at flat traffic, is that release burning CPU."""
    if not rels:
        return []
    rel = rels[-1]
    pinned: list[tuple[_S, float, float]] = []
    for s in cpu:
        before = [v for t, v in s.points if t < rel.ts]
        after = [(t, v) for t, v in s.points if t >= rel.ts]
        if len(before) < MIN_POINTS or len(after) < MIN_POINTS:
            continue
        fraction = max(v for _, v in s.points) <= 1.0
        b = median(before)
        hot = CPU_PINNED if fraction else CPU_JUMP * b
        step = next((i for i, (_, v) in enumerate(after) if v >= hot), None)
        if step is None or after[step][0] - rel.ts > FLEET_LAG_S:
            return []  # one host that did not heat up after the release: not the release
        a = median([v for _, v in after[step:]])
        if not (a >= hot and (b < CPU_BEFORE if fraction else b > 0)):
            return []
        pinned.append((s, a, b))
    traffic = _traffic_ratio(series, None, rel.ts)
    if len(pinned) < 2 or traffic is None or not FLAT_TRAFFIC[0] <= traffic[0] <= FLAT_TRAFFIC[1]:
        return []
    hosts = [s.labels.get("instance") or s.labels.get("host") or s.item.object for s, _, _ in pinned]
    a = median([x[1] for x in pinned])
    b = median([x[2] for x in pinned])
    names = ", ".join(h.split(":", 1)[0] for h in hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
    return [
        Finding(
            analyzer="release_regressions",
            domain=Domain.METRICS,
            role="cause",
            code="cpu_regression",
            category=Category.CODE_DEFECT,
            title=f"{rel.workload} release {rel.version} pins the CPU of {names} ({a:.2f} busy, {b:.2f} before) at "
            "flat traffic",
            mechanism=(
                f"since {rel.workload} release {rel.version} (deployed {fmt_ts(rel.ts)}) the CPU of every host that "
                f"runs it went from {b:.2f} to {a:.2f} busy while the request rate stayed the same "
                f"({traffic[0]:.2f}x): a CPU-bound loop or a far costlier code path in {rel.version}, so requests "
                "queue and time out; more hosts would saturate the same way."
            ),
            object=f"{rel.workload} {rel.version}",
            score=0.8,
            ts=rel.ts,
            tags=[f"service:{rel.workload}", f"version:{rel.version}", *(f"host:{h.split(':', 1)[0]}" for h in hosts)],
            explains=["cpu_high", "latency", "http_5xx", "errors", "upstream_timeout", "alert:*", "saturation"],
            evidence=[
                rel.ref,
                *(
                    EvidenceRef(item=s.item.id, field="points", value=f"median {x:.2f} after, {y:.2f} before")
                    for s, x, y in pinned[:5]
                ),
                traffic[1],
            ],
            actions=[
                Action(
                    description=f"Roll back {rel.workload} to the release before {rel.version}",
                    command="cap production deploy:rollback",
                    kind="write",
                ),
                Action(
                    description="See which code the busy threads run on one host",
                    command="<a sampling profiler on the busiest process, e.g. rbspy / py-spy / async-profiler>",
                ),
            ],
        )
    ]


DB_STEP = 2.0  # the database's CPU after the release over before it
DB_SHARE = 0.5  # of the Performance Insights load one statement carries
DB_LAG_S = 1800.0  # the step begins within this long after the release


def _db_query_regression(evidence: EvidenceSet, series: list[_S], rels: list[Release]) -> list[Finding]:
    """A database's CPU that stepped up right after a client's release while that client's traffic stayed flat,
    with one statement carrying most of the load: the new version issues that statement far more often (an N+1,
    a lost cache or batch) - a code defect of the release; a bigger database only hides it."""
    from diagnosis.analyzers.database import is_db_metric

    pi = [it for it in evidence.kind("pi/sql") if isinstance(it.data.get("load"), int | float)]
    if not pi or not rels:
        return []
    total = sum(float(it.data["load"]) for it in pi)
    top = max(pi, key=lambda it: float(it.data["load"]))
    if total <= 0 or float(top.data["load"]) < DB_SHARE * total:
        return []
    out: list[Finding] = []
    for s in series:
        if s.name.lower() not in ("cpuutilization", "db.load.avg", "db.load") or not is_db_metric(s.item):
            continue
        for rel in reversed(rels):
            before = [v for t, v in s.points if t < rel.ts]
            after = [v for t, v in s.points if rel.ts <= t]
            if len(before) < MIN_POINTS or len(after) < MIN_POINTS:
                continue
            b, a = median(before), median(after)
            first_high = next((t for t, v in s.points if t >= rel.ts and v >= DB_STEP * b), None)
            if b <= 0 or a < DB_STEP * b or first_high is None or first_high - rel.ts > DB_LAG_S:
                continue
            traffic = _traffic_ratio(series, rel.workload, rel.ts) or _any_traffic_ratio(series, rel.ts)
            if traffic is None or not FLAT_TRAFFIC[0] <= traffic[0] <= FLAT_TRAFFIC[1]:
                continue
            stmt = " ".join(str(top.data.get("statement") or "").split())[:160]
            share = float(top.data["load"]) / total
            out.append(
                Finding(
                    analyzer="release_regressions",
                    domain=Domain.METRICS,
                    role="cause",
                    code="query_regression",
                    category=Category.CODE_DEFECT,
                    title=f"{rel.workload} {rel.version} floods the database with one statement",
                    mechanism=(
                        f"since {rel.workload} {rel.version} (released {fmt_ts(rel.ts)}) the database's {s.name} "
                        f"went from ~{b:.0f} to ~{a:.0f} at the same traffic ({traffic[0]:.2f}x), and one statement "
                        f"carries {share:.0%} of its load: '{stmt}' - the new version issues it far more often "
                        "(a query per item, an N+1, or a lost cache or batch); a bigger database only hides it."
                    ),
                    object=f"{rel.workload} {rel.version}",
                    score=0.8,
                    ts=rel.ts,
                    tags=[
                        f"service:{rel.workload}",
                        f"version:{rel.version}",
                        f"query:{top.data.get('id') or top.object}",
                        *(
                            f"db:{v}"
                            for k, v in s.labels.items()
                            if k in ("DBInstanceIdentifier", "DBClusterIdentifier")
                        ),
                    ],
                    explains=[
                        "cpu_high",
                        "cpu_saturated_by_query",
                        "latency",
                        "connections_high",
                        "db_waits",
                        "metric_shift",
                        "errors",
                        "alert:*",
                    ],
                    evidence=[
                        rel.ref,
                        EvidenceRef(item=s.item.id, field="points", value=f"{s.name} {b:.0f} -> {a:.0f}"),
                        EvidenceRef(item=top.id, field="statement", value=stmt),
                        traffic[1],
                    ],
                    actions=[
                        _rollback(rel.workload, rel.version),
                        Action(
                            description="Calls per second of the statement (pg_stat_statements)",
                            command=(
                                'psql -c "SELECT calls, total_exec_time, query FROM pg_stat_statements ORDER BY '
                                'calls DESC LIMIT 5"'
                            ),
                        ),
                    ],
                )
            )
            return out
    return out


TRAFFIC_SURGE = 2.0  # the request rate's last third over its first third: the load itself grew


def traffic_surge(evidence: EvidenceSet) -> tuple[float, EvidenceRef] | None:
    """The largest rise of any request-rate series over its window (last third over first third), when it at least
    doubled: work that grew with the load, not with the code."""
    best: tuple[float, EvidenceRef] | None = None
    for s in _series(evidence):
        if not _TRAFFIC.search(s.name) or _NOT_TRAFFIC.search(s.name) or len(s.points) < 6:
            continue
        b, a = thirds([v for _, v in s.points])
        if b > 0 and a / b >= TRAFFIC_SURGE and (best is None or a / b > best[0]):
            best = (
                a / b,
                EvidenceRef(item=s.item.id, field="points", value=f"requests {b:.3g} -> {a:.3g} ({a / b:.1f}x)"),
            )
    return best


def _any_traffic_ratio(series: list[_S], at: float) -> tuple[float, EvidenceRef] | None:
    """The request-rate ratio of the one traffic series in the evidence, whatever it is labelled."""
    mine = [s for s in series if _TRAFFIC.search(s.name) and not _NOT_TRAFFIC.search(s.name)]
    if len(mine) != 1:
        return None
    s = mine[0]
    before = [v for t, v in s.points if t < at]
    after = [v for t, v in s.points if t >= at]
    if len(before) < 2 or len(after) < 2 or median(before) <= 0:
        return None
    b, a = sum(before) / len(before), sum(after) / len(after)
    return a / b, EvidenceRef(item=s.item.id, field="points", value=f"requests {b:.3g} -> {a:.3g}/s ({a / b:.2f}x)")


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def release_regressions(evidence: EvidenceSet) -> list[Finding]:
    series = _series(evidence)
    rels = releases(evidence)
    return (
        _leaks(evidence, series, rels)
        + _cpu_pinned(evidence, series, rels)
        + _db_query_regression(evidence, series, rels)
        + _cache_misses(series, rels)
        + _amplified_calls(series, rels)
    )


_HIT_RATIO = re.compile(r"hit_?(?:ratio|rate)|hits?_(?:ratio|percent|pct)", re.I)
HIT_FALL = 0.5  # a hit ratio at half of what it was, or less, for good: the cache no longer serves
RELEASE_LEAD_S = 900.0  # the ratio fell within this long after the release


def _cache_misses(series: list[_S], rels: list[Release]) -> list[Finding]:
    """A service's cache hit ratio that fell and stayed down right after its release, at the same traffic: the new
    version misses what it caches (its keys or its use of the cache changed), so every lookup goes to the datastore
    behind; the datastore's load and the cache's evictions follow from it."""
    out: list[Finding] = []
    for s in series:
        if not s.workload or not _HIT_RATIO.search(s.name) or len(s.points) < 2 * MIN_POINTS:
            continue
        rel = _release_for(rels, s.workload, s.points[0][0], s.points[-1][0])
        if rel is None:
            continue
        before = [v for t, v in s.points if t < rel.ts]
        after = [v for t, v in s.points if t >= rel.ts + RELEASE_LEAD_S]
        tail = [v for _, v in s.points[-max(MIN_POINTS, len(s.points) // 5) :]]
        if len(before) < MIN_POINTS or len(after) < MIN_POINTS:
            continue
        was, now = median(before), median(after)
        if was <= 0 or now > HIT_FALL * was or max(tail) > HIT_FALL * was:
            continue
        traffic = _traffic_ratio(series, s.workload, rel.ts)
        if traffic is not None and not FLAT_TRAFFIC[0] <= traffic[0] <= FLAT_TRAFFIC[1]:
            continue  # a new mix of requests, not the same ones missing
        pct = (lambda v: f"{v:.1%}") if was <= 1.0 else (lambda v: f"{v:.1f}%")
        refs = [rel.ref, EvidenceRef(item=s.item.id, field="points", value=f"{was:.3g} -> {now:.3g}")]
        if traffic:
            refs.append(traffic[1])
        out.append(
            Finding(
                analyzer="release_regressions",
                domain=Domain.METRICS,
                role="cause",
                code="cache_miss_regression",
                category=Category.CODE_DEFECT,
                title=f"{s.workload} {rel.version}: cache hit ratio fell from {pct(was)} to {pct(now)}",
                mechanism=(
                    f"since {s.workload} {rel.version} (released {fmt_ts(rel.ts)}) its cache hit ratio fell from "
                    f"{pct(was)} to {pct(now)} and stayed there"
                    + (f", at the same traffic ({traffic[0]:.2f}x)" if traffic else "")
                    + f": {rel.version} no longer finds what it caches (the cache key it builds, or how it uses the "
                    "cache, changed), so every lookup falls through to the datastore behind it; that datastore's "
                    "load and the cache filling with single-use entries follow from it, and a bigger cache or "
                    "database only hides it."
                ),
                object=f"{s.workload} {rel.version}",
                score=0.8 if traffic else 0.65,
                ts=rel.ts,
                tags=[f"service:{s.workload}", f"version:{rel.version}", f"metric:{s.name}"],
                explains=[
                    "cpu_high",
                    "saturation",
                    "latency",
                    "db_*",
                    "slow_*",
                    "errors",
                    "shift_within_capacity",
                    "memory_high",
                    "evictions",
                    "alert:*",
                ],
                evidence=refs,
                actions=[
                    _rollback(s.workload, rel.version),
                    Action(
                        description="Compare the cache keys the new version writes with the old ones",
                        command="redis-cli --scan --count 1000 | head -20",
                    ),
                ],
            )
        )
    return out


CALLS_JUMP = 3.0  # the called service's request rate after the release over before it


def _callee_rise(s: _S, at: float) -> tuple[float, float, float] | None:
    """(before, after, when it rose) of a traffic series that jumped at or shortly after `at` and stayed up."""
    before = [v for t, v in s.points if t < at]
    after = [(t, v) for t, v in s.points if t >= at]
    if len(before) < MIN_POINTS or len(after) < MIN_POINTS:
        return None
    was = median(before)
    now = median([v for _, v in after[len(after) // 3 :]])
    if was <= 0 or now < CALLS_JUMP * was:
        return None
    rose = next((t for t, v in after if v >= 2 * was), None)
    if rose is None or rose - at > RELEASE_LEAD_S:
        return None
    return was, now, rose


def _amplified_calls(series: list[_S], rels: list[Release]) -> list[Finding]:
    """A service whose release made it call another service several times as often at the same traffic (nested
    retries, a retry without backoff, a call moved into a loop): the called service's request rate jumped within
    minutes of the release while the caller's own request rate stayed flat. The called service then saturates, slows
    and sheds load: it is the victim, and the release is the cause."""
    out: list[Finding] = []
    traffic = [s for s in series if s.workload and _TRAFFIC.search(s.name) and not _NOT_TRAFFIC.search(s.name)]
    for rel in rels:
        own = _traffic_ratio(series, rel.workload, rel.ts)
        if own is None or not FLAT_TRAFFIC[0] <= own[0] <= FLAT_TRAFFIC[1]:
            continue
        for s in traffic:
            assert s.workload is not None
            if same_workload(s.workload, rel.workload):
                continue
            if any(same_workload(r.workload, s.workload) and abs(r.ts - rel.ts) < 2 * RELEASE_LEAD_S for r in rels):
                continue  # the called service changed too: its own release may explain its traffic
            rise = _callee_rise(s, rel.ts)
            if rise is None:
                continue
            was, now, rose = rise
            ratio = now / was
            out.append(
                Finding(
                    analyzer="release_regressions",
                    domain=Domain.METRICS,
                    role="cause",
                    code="call_amplification",
                    category=Category.CODE_DEFECT,
                    title=f"{rel.workload} {rel.version} calls {s.workload} {ratio:.1f}x as often at the same traffic",
                    mechanism=(
                        f"since {rel.workload} {rel.version} (released {fmt_ts(rel.ts)}) the request rate of "
                        f"{s.workload} went from {was:.3g} to {now:.3g}/s ({ratio:.1f}x, from {fmt_ts(rose)}) while "
                        f"{rel.workload}'s own traffic stayed flat ({own[0]:.2f}x): the new version calls "
                        f"{s.workload} several times per request (retries stacked on retries, a retry without "
                        f"backoff, a call in a loop), a retry storm that saturates {s.workload}, which then slows and "
                        "sheds load. More capacity there only delays it."
                    ),
                    object=f"{rel.workload} {rel.version}",
                    score=0.85,
                    ts=rel.ts,
                    tags=[
                        f"service:{rel.workload}",
                        f"version:{rel.version}",
                        f"service:{s.workload}",
                        f"upstream:{s.workload}",
                    ],
                    explains=[
                        "cpu_high",
                        "saturation",
                        "latency",
                        "errors",
                        "http_5xx",
                        "upstream_*",
                        "rate_limited*",
                        "shift_within_capacity",
                        "metric_shift",
                        "exception",
                        "alert:*",
                    ],
                    evidence=[
                        rel.ref,
                        EvidenceRef(item=s.item.id, field="points", value=f"{was:.3g} -> {now:.3g}/s"),
                        own[1],
                    ],
                    actions=[
                        _rollback(rel.workload, rel.version),
                        Action(
                            description=f"Count the calls {rel.workload} makes to {s.workload} per request (retry "
                            "settings of the client and of the channel)",
                            command=f"kubectl logs deploy/{rel.workload} | grep -iE 'retry|attempt' | tail -20",
                        ),
                    ],
                )
            )
    return out
