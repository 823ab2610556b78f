"""Reading one pod (its containers' states, its events, its logs) into findings.

Registered by `diagnosis.analyzers.kubernetes`; this module only reads.
"""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import NET_REFUSED, NET_TIMEOUT, PG_DOWN, is_error, service_of
from diagnosis.analyzers._kube import (
    RECENT_S,
    KubeIndex,
    crash_target,
    event_ts,
    owner_workload,
    pod_tags,
    read_crash,
    ref,
)
from diagnosis.links import workload_of_pod
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import fmt_age, fmt_ts, parse_ts

K8S = Domain.KUBERNETES
CAUSE, SYMPTOM, BENIGN = "cause", "symptom", "benign"
WARMED_UP_AFTER_S = 120.0  # a pod Ready now whose probe last failed this long ago is past its start-up

# what a failing container explains: its own restarts and unreadiness, its workload's rollout and replicas, the
# Service endpoints it should fill and the errors its callers see; alerts on the same objects are implied
POD_EFFECTS = [
    "pod_not_ready",
    "pod_restarts",
    "crashloop",
    "replicas_unavailable",
    "rollout_stuck",
    "no_ready_endpoints",
    "job_failed",
    "probe_refused",
    "probe_unhealthy",
    "http_5xx",
    "error_rate",
    "log_errors",
    "latency",
    "upstream_unavailable",
    "connection_refused",
    "errors",
    "exception",
    "crash_loop",
    "probe_failed",
    # a crashing or OOM-killed pod fails its callers' calls: timeouts, resets, refusals and 5xx from the upstream
    # it serves, and NXDOMAIN/SERVFAIL when it is the resolver (CoreDNS); the reasoning links them by name
    "upstream_*",
    "connection_*",
    "dns_*",
]
IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}
CONFIG_WAIT = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreCreateHookError"}

RECOVERED_AFTER_S = 600.0  # a container restarted once and running and ready this long since has recovered


def k8s_finding(analyzer: str, **kw: Any) -> Finding:
    return Finding(analyzer=analyzer, domain=K8S, **kw)


def _c(category: str) -> Category:
    return Category(category)


def _pod_workload(idx: KubeIndex, ns: str, pod: str) -> tuple[str, str]:
    item = idx.pods.get((ns, pod))
    owner = owner_workload(item) if item is not None else None
    if owner:
        return owner
    return "Deployment", workload_of_pod(pod)


def kubectl_kind(kind: str) -> str:
    return {"Deployment": "deployment", "StatefulSet": "statefulset", "DaemonSet": "daemonset", "Job": "job"}.get(
        kind, kind.lower()
    )


# ------------------------------------------------------------------------------------------ quantities


_UNITS = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "m": 1e-3,
    "": 1.0,
}
_QTY = re.compile(r"^\s*([0-9.]+)\s*([A-Za-z]*)\s*$")


def quantity(value: Any) -> float | None:
    """A Kubernetes quantity ("500m", "2", "512Mi", "1Gi") as a number (cores, bytes)."""
    if isinstance(value, int | float):
        return float(value)
    m = _QTY.match(str(value or ""))
    if not m or m.group(2) not in _UNITS:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)]


# ------------------------------------------------------------------------------------------ pods


def _containers(pod: EvidenceItem) -> dict[str, dict[str, Any]]:
    spec = pod.data.get("spec") or {}
    out: dict[str, dict[str, Any]] = {}
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or ():
            if isinstance(c, dict) and c.get("name"):
                out[str(c["name"])] = c
    return out


def _statuses(pod: EvidenceItem) -> list[tuple[str, dict[str, Any]]]:
    status = pod.data.get("status") or {}
    out: list[tuple[str, dict[str, Any]]] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for i, cs in enumerate(status.get(key) or ()):
            if isinstance(cs, dict):
                out.append((f"status.{key}.{i}", cs))
    return out


def warning_events(events: list[EvidenceItem]) -> list[EvidenceItem]:
    return [e for e in events if str(e.data.get("type") or "").lower() != "normal"]


def _first_seen(evs: list[EvidenceItem]) -> float | None:
    """When the first of these events was seen (None when none is dated)."""
    return min((event_ts(e) or 0.0 for e in evs), default=0.0) or None


def _event_count(ev: EvidenceItem) -> int:
    try:
        return max(1, int(ev.data.get("count") or 1))
    except (TypeError, ValueError):
        return 1


def _mentions_container(ev: EvidenceItem, container: str) -> bool:
    msg = str(ev.data.get("message") or "")
    return f"container {container}" in msg or f'"{container}"' in msg or f"container/{container}" in msg


WARM_UP_S = 120.0  # a readiness probe failing once this soon after its container started is the start-up


_CORDONED = re.compile(r"\d+ node\(s\) were unschedulable")
STARTUP_S = 60.0  # readiness failures in a new pod's first minute are its start


class PodReader:
    """The findings of one pod, from its status, its events and its logs."""

    name = "kubernetes_pods"

    def __init__(self, idx: KubeIndex, ns: str, pod: str) -> None:
        self.idx = idx
        self.ns = ns
        self.pod = pod
        self.item = idx.pods.get((ns, pod))
        self.events = idx.events_for("Pod", ns, pod)
        self.logs = idx.logs.get((ns, pod), [])
        self.tags = pod_tags(ns, pod, self.item)
        self.kind, self.workload = _pod_workload(idx, ns, pod)
        self.out: list[Finding] = []
        self.done: set[str] = set()  # codes already reported (status first, events fill the gaps)

    # -- helpers
    def _obj(self, container: str | None = None) -> str:
        return f"Pod {self.ns}/{self.pod}" + (f" container {container}" if container else "")

    def _ev_refs(self, events: list[EvidenceItem]) -> list[EvidenceRef]:
        return [ref(e, "message", e.data.get("message")) for e in events[:3]]

    def _recent_events(self, reasons: set[str], container: str | None = None) -> list[EvidenceItem]:
        out = [
            e
            for e in warning_events(self.events)
            if str(e.data.get("reason") or "") in reasons and self.idx.recent(event_ts(e))
        ]
        if container:
            named = [e for e in out if _mentions_container(e, container)]
            return named or out
        return out

    def _describe(self) -> Action:
        return Action(
            description="Show the pod's status and events",
            command=f"kubectl describe pod {self.pod} -n {self.ns}",
        )

    def _logs_action(self, container: str, previous: bool = True) -> Action:
        prev = " --previous" if previous else ""
        return Action(
            description="Read the crashed container's last log lines",
            command=f"kubectl logs {self.pod} -n {self.ns} -c {container}{prev} --tail=100",
        )

    def _emit(self, **kw: Any) -> None:
        code = kw["code"]
        key = f"{code}:{kw.get('object')}:{kw.get('title')}"
        if key in self.done:
            return
        self.done.add(key)
        self.done.add(code)
        kw.setdefault("tags", list(self.tags))
        self.out.append(k8s_finding(self.name, **kw))

    # -- the reading
    def read(self) -> list[Finding]:
        if self.item is not None:
            evicted = self._evicted()
            self._scheduling()
            if not evicted:  # an evicted pod's containers were stopped by the kubelet, not by their own fault
                for path, cs in _statuses(self.item):
                    self._container(path, cs)
        self._probes()
        self._from_events()
        return self.out

    def _evicted(self) -> bool:
        assert self.item is not None
        status = self.item.data.get("status") or {}
        if status.get("reason") != "Evicted":
            return False
        msg = str(status.get("message") or "evicted")
        node = str((self.item.data.get("spec") or {}).get("nodeName") or "")
        ts = max((parse_ts(c.get("lastTransitionTime")) or 0.0 for c in status.get("conditions") or ()), default=0.0)
        evs = self._recent_events({"Evicted"})
        if evs:  # the conditions keep the pod's start times; the event says when it was evicted
            ts = min(event_ts(e) or ts for e in evs)
        resource = re.search(r"low on resource: (\S+?)\.?(?:\s|$)", msg)
        what = resource.group(1) if resource else "a resource"
        # the kubelet also evicts a pod that exceeds its own local-storage limit (the node is fine): the pod's
        # ephemeral storage, a container's, or an emptyDir volume's sizeLimit
        own = re.search(
            r"(?:ephemeral local storage usage exceeds the total limit of containers|"
            r"exceeded its local ephemeral storage limit|Usage of EmptyDir volume \S+ exceeds the limit) "
            r"\"?(\d[\d.]*[KMGTPE]?i?)",
            msg,
        )
        tags = [*self.tags] + ([f"node:{node}"] if node else [])
        if not evs and not self.idx.recent(ts or None, RECENT_S):
            self._emit(
                role=BENIGN,
                code="old_eviction",
                category=Category.HEALTHY,
                object=self._obj(),
                title=f"Pod {self.ns}/{self.pod} evicted {fmt_age((self.idx.now or ts) - ts)} ago (left-over)",
                mechanism="an old eviction: the failed pod object is left over and the workload has replaced it",
                ts=ts or None,
                evidence=[ref(self.item, "status.message", msg)],
                tags=tags,
            )
            return True
        self._emit(
            role=CAUSE,
            code="evicted",
            category=Category.RESOURCE_EXHAUSTION,
            object=self._obj(),
            score=0.6,
            title=f"Pod {self.ns}/{self.pod} evicted: "
            + (f"over its ephemeral-storage limit {own.group(1)}" if own else f"node {node or '?'} low on {what}"),
            mechanism=(
                f"Pod {self.ns}/{self.pod} was evicted because it wrote more local data than its ephemeral-storage "
                f"limit {own.group(1)} (kubelet eviction on node {node or '?'})"
                if own
                else f"Pod {self.ns}/{self.pod} was evicted because node {node or '?'} ran low on {what} "
                f"(kubelet eviction threshold reached)"
            ),
            ts=ts or None,
            tags=tags,
            explains=POD_EFFECTS,
            evidence=[ref(self.item, "status.message", msg), *self._ev_refs(evs)],
            actions=[
                Action(
                    description="Check the node's pressure conditions and its biggest consumers",
                    command=f"kubectl describe node {node}",
                )
            ]
            if node
            else [self._describe()],
        )
        return True

    def _scheduling(self) -> None:
        assert self.item is not None
        status = self.item.data.get("status") or {}
        if status.get("phase") not in (None, "Pending"):
            return
        msg = None
        field = None
        for i, cond in enumerate(status.get("conditions") or ()):
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                msg = str(cond.get("message") or cond.get("reason") or "")
                field = f"status.conditions.{i}.message"
        evs = self._recent_events({"FailedScheduling"})
        if msg is None and not evs:
            return
        text = msg or str(evs[-1].data.get("message") or "")
        refs = ([ref(self.item, field, msg)] if field and msg else []) + self._ev_refs(evs[-1:])
        self._unschedulable(text, refs, _first_seen(evs))

    def _unschedulable(self, text: str, refs: list[EvidenceRef], ts: float | None) -> None:
        category, code, why = scheduling_reason(text)
        # the cluster autoscaler will not add a node because the pod's volume is pinned to a zone no node group it
        # may use covers: whatever the existing nodes lack, no new node can take it
        refused = [
            e
            for e in self.events
            if e.data.get("reason") == "NotTriggerScaleUp"
            and "volume node affinity conflict" in str(e.data.get("message") or "")
        ]
        if refused and code != "volume_zone_conflict":
            category, code = "configuration_error", "volume_zone_conflict"
            why = _VOLUME_ZONE + "; the cluster autoscaler will not add a node for it"
            refs = [*refs, ref(refused[-1], "message", refused[-1].data.get("message"))]
        said = re.search(r"\d+/\d+ nodes are available: [^.]*", text)
        if said and code != "unbound_pvc":
            why += f" ({said.group(0)[:160]})"
        if code == "node_selector_mismatch" and self.item is not None:
            spec = self.item.data.get("spec") or {}
            selector = spec.get("nodeSelector") or {}
            if selector:
                why += " - nodeSelector " + ", ".join(f"{k}={v}" for k, v in selector.items())
                refs = [*refs, ref(self.item, "spec.nodeSelector", selector)]
            terms = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            ) or {}
            exprs = [e for t in terms.get("nodeSelectorTerms") or () for e in t.get("matchExpressions") or ()]
            if exprs:
                why += " - node affinity " + "; ".join(
                    f"{e.get('key')} {e.get('operator')} {','.join(map(str, e.get('values') or []))}" for e in exprs
                )
                affinity = (spec.get("affinity") or {}).get("nodeAffinity")
                refs = [*refs, ref(self.item, "spec.affinity.nodeAffinity", affinity)]
        requests = self._requests()
        if code == "insufficient_resources" and requests:
            biggest = _largest_node(self.idx)
            too_big = [r for r, v in requests.items() if biggest.get(r) and v > biggest[r]]
            if too_big:
                category, code = "configuration_error", "requests_exceed_nodes"
                why = f"it requests more {', '.join(too_big)} than any node has allocatable"
        if code == "unbound_pvc":
            # the claim's own state says why it is unbound
            for claim in self._claims():
                pvc = self.idx.objects.get(("PersistentVolumeClaim", self.ns, claim))
                pevs = warning_events(self.idx.events_for("PersistentVolumeClaim", self.ns, claim))
                if pevs:
                    pmsg = str(pevs[-1].data.get("message") or "")
                    refs = [*refs, ref(pevs[-1], "message", pmsg)]
                    why = f"its PersistentVolumeClaim {claim} is unbound: {pmsg[:160]}"
                    category = (
                        "configuration_error"
                        if re.search(r"not found|invalid|unsupported", pmsg, re.I)
                        else "infrastructure"
                    )
                elif pvc is not None:
                    refs = [*refs, ref(pvc, "status.phase", (pvc.data.get("status") or {}).get("phase"))]
        # no GPU free because a GPU failed (its driver reports it lost): the node's hardware is the cause
        gpu_lost = code == "insufficient_resources" and "gpu" in text.lower() and self.idx.gpu_lost()
        if gpu_lost:
            why += "; a GPU the driver reports lost (Xid) took its node's GPUs out of the allocatable pool"
        self._emit(
            role=SYMPTOM if gpu_lost else CAUSE,
            code=code,
            category=Category.UNKNOWN if gpu_lost else _c(category),
            object=self._obj(),
            score=0.75,
            ts=ts,
            title=f"Pod {self.ns}/{self.pod} cannot be scheduled: {why}",
            mechanism=f"Pod {self.ns}/{self.pod} stays Pending because the scheduler finds no node: {why}",
            evidence=refs,
            explains=POD_EFFECTS,
            actions=[
                self._describe(),
                Action(
                    description="Compare requests with what the nodes have free",
                    command="kubectl describe nodes | grep -A8 'Allocated resources'",
                ),
            ],
        )

    def _requests(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.item is None:
            return out
        for c in (self.item.data.get("spec") or {}).get("containers") or ():
            for r, v in ((c.get("resources") or {}).get("requests") or {}).items():
                q = quantity(v)
                if q is not None:
                    out[r] = out.get(r, 0.0) + q
        return out

    def _claims(self) -> list[str]:
        named = claims_of(self.item) if self.item is not None else []
        # a StatefulSet's claims are <template>-<pod>; they may be in the evidence when the pod spec is not
        named += [
            n
            for (k, ns, n) in self.idx.objects
            if k == "PersistentVolumeClaim" and ns == self.ns and n.endswith(f"-{self.pod}") and n not in named
        ]
        named += [
            n
            for (k, ns, n) in self.idx.events
            if k == "PersistentVolumeClaim" and ns == self.ns and n.endswith(f"-{self.pod}") and n not in named
        ]
        return named

    def _container(self, path: str, cs: dict[str, Any]) -> None:
        assert self.item is not None
        cname = str(cs.get("name") or "")
        spec = _containers(self.item).get(cname, {})
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        running = state.get("running")
        term_now = state.get("terminated") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        term = term_now or last
        term_path = f"{path}.state.terminated" if term_now else f"{path}.lastState.terminated"
        restarts = int(cs.get("restartCount") or 0)
        wreason = str(waiting.get("reason") or "")
        wmsg = str(waiting.get("message") or "")
        tags = [*self.tags, f"container:{self.ns}/{self.pod}/{cname}"]
        obj = self._obj(cname)
        wref = [ref(self.item, f"{path}.state.waiting.reason", wreason)] if wreason else []
        if wmsg:
            wref.append(ref(self.item, f"{path}.state.waiting.message", wmsg))

        if wreason in IMAGE_PULL:
            evs = self._recent_events({"Failed", "ErrImagePull", "BackOff"}, cname)
            evs = [e for e in evs if "image" in str(e.data.get("message") or "").lower()] or evs
            named = (re.search(r'image "([^"]+)"', str(e.data.get("message") or "")) for e in evs)
            self._image(
                cname,
                # `kubectl get pods` names no image: the kubelet's events do
                str(spec.get("image") or cs.get("image") or next((m.group(1) for m in named if m), "?")),
                wmsg + " " + " ".join(str(e.data.get("message") or "") for e in evs),
                wref + self._ev_refs(evs),
                tags,
            )
            return
        if wreason in CONFIG_WAIT:
            self._config_wait(cname, wreason, wmsg, wref, tags)
            return

        finished = parse_ts(term.get("finishedAt")) if term else None
        exit_code = term.get("exitCode") if term else None
        treason = str(term.get("reason") or "") if term else ""
        crashlooping = wreason == "CrashLoopBackOff"
        ready = bool(cs.get("ready"))
        recent = (
            crashlooping
            or (finished is not None and self.idx.recent(finished))
            or (bool(term) and finished is None and not ready)
        )
        if not term:
            if crashlooping:  # back-off with no termination recorded: the events or logs must say why
                self._crash(cname, spec, None, None, "", None, wref, tags, obj, restarts)
            elif (
                running is not None and not ready and self.idx.recent(parse_ts(running.get("startedAt")), 10 * RECENT_S)
            ):
                self._not_ready(cname, path, tags, obj)
            return
        term_refs = [ref(self.item, f"{term_path}.reason", treason)] if treason else []
        if exit_code is not None:
            term_refs.append(ref(self.item, f"{term_path}.exitCode", exit_code))
        if not recent:
            if treason == "Completed" or exit_code == 0:
                return
            age = fmt_age((self.idx.now or 0) - finished) if finished and self.idx.now else "long"
            self._emit(
                role=BENIGN,
                code="old_restart",
                category=Category.HEALTHY,
                object=obj,
                ts=finished,
                title=f"{obj} last restarted {age} ago ({treason or 'exit ' + str(exit_code)})",
                mechanism=f"an old restart: the container has run without failing since {fmt_ts(finished)}",
                evidence=[*term_refs, ref(self.item, f"{path}.restartCount", restarts)],
                tags=tags,
            )
            return
        refs = term_refs + wref + [ref(self.item, f"{path}.restartCount", restarts)]
        up_since = parse_ts(running.get("startedAt")) if running else None
        if (
            restarts == 1
            and ready
            and not crashlooping
            and treason != "OOMKilled"
            and finished is not None
            and up_since is not None
            and self.idx.now is not None
            and self.idx.now - up_since >= RECOVERED_AFTER_S
        ):
            # one failed start (a dependency not up yet, a migration still running), then up and ready for long
            self._emit(
                role=BENIGN,
                code="restarted_once",
                category=Category.HEALTHY,
                object=obj,
                ts=finished,
                title=f"{obj} failed once at {fmt_ts(finished)} ({treason or 'exit ' + str(exit_code)}), running since",
                mechanism=(
                    f"{obj} failed once (exit {exit_code}) and has run and been ready since {fmt_ts(up_since)}: a "
                    "failed start that recovered, not a crash loop"
                ),
                evidence=refs,
                tags=tags,
            )
            return
        if treason == "OOMKilled" or self._oom_events(cname):
            self._oom(cname, spec, self._began(finished, restarts), refs, tags, obj, restarts)
            return
        if exit_code == 0 and crashlooping:
            self._emit(
                role=CAUSE,
                code="exits_zero",
                category=Category.CONFIGURATION_ERROR,
                object=obj,
                score=0.65,
                ts=finished,
                tags=tags,
                explains=POD_EFFECTS,
                evidence=refs,
                title=f"{obj} exits with code 0 and is restarted ({restarts} restarts)",
                mechanism=f"{obj} runs a command that finishes (exit 0) under restartPolicy Always, so Kubernetes "
                "restarts it in a loop: the command/args run a one-off task instead of a server",
                actions=[self._logs_action(cname)],
            )
            return
        if exit_code in (137, 143) and self._liveness_kills(cname):
            return  # the probe reading below names it
        if exit_code == 0 or (treason == "Completed" and not crashlooping):
            return
        self._crash(
            cname, spec, exit_code, self._began(finished, restarts), treason, term_path, refs, tags, obj, restarts
        )

    def _began(self, finished: float | None, restarts: int) -> float | None:
        """When a container that keeps failing began to: its last termination is only the latest of them; the
        first back-off or kill event on the pod says when the series started."""
        if restarts <= 1:
            return finished
        failing = {"BackOff", "OOMKilling", "OOMKilled", "Killing", "Unhealthy"}
        # a container started again and again ("Started", count 7) began restarting at that event's first time
        again = {"Started", "Created", "Pulled"}
        began = [
            parse_ts(e.data.get("first_ts")) or event_ts(e)
            for e in self.events
            if self.idx.recent(event_ts(e))
            and (
                str(e.data.get("reason") or "") in failing
                or (str(e.data.get("reason") or "") in again and _event_count(e) > 1)
            )
        ]
        times = [t for t in (*began, finished) if t is not None]
        return min(times) if times else None

    def _oom_events(self, cname: str) -> list[EvidenceItem]:
        return [
            e
            for e in self._recent_events({"OOMKilling", "OOMKilled", "SystemOOM"})
            if "oom" in str(e.data.get("message") or "").lower() or "OOM" in str(e.data.get("reason") or "")
        ]

    def _oom(
        self,
        cname: str,
        spec: dict[str, Any],
        ts: float | None,
        refs: list[EvidenceRef],
        tags: list[str],
        obj: str,
        restarts: int,
    ) -> None:
        limits = (spec.get("resources") or {}).get("limits") or {}
        limit = limits.get("memory")
        node = str(((self.item.data.get("spec") if self.item else None) or {}).get("nodeName") or "")
        if limit:
            code = "oom_killed"
            mech = (
                f"{obj} is OOMKilled (exit 137): its memory use reaches the container limit {limit}, "
                f"so the kernel kills it ({restarts} restarts)"
            )
        else:
            code = "oom_killed_nolimit"
            mech = (
                f"{obj} is OOMKilled (exit 137) with no memory limit set: the node"
                f"{' ' + node if node else ''} ran out of memory and the kernel killed it ({restarts} restarts)"
            )
        idx_path = self._spec_path(cname)
        if limit and idx_path:
            refs = [*refs, ref(self.item, f"{idx_path}.resources.limits.memory", limit)] if self.item else refs
        refs = refs + self._ev_refs(self._oom_events(cname))
        actions = [
            Action(
                description="Compare the container's memory use with its limit",
                command=f"kubectl top pod {self.pod} -n {self.ns} --containers",
            ),
            self._describe(),
        ]
        if limit:
            mem = quantity(limit)
            new = f"{int(mem * 2 / 2**20)}Mi" if mem else "<higher>"
            actions.append(
                Action(
                    description="Raise the memory limit (or fix the leak) once the working set is known",
                    command=f"kubectl set resources {kubectl_kind(self.kind)}/{self.workload} -n {self.ns} -c {cname} "
                    f"--limits=memory={new}",
                    kind="write",
                )
            )
        self._emit(
            role=CAUSE,
            code=code,
            category=Category.RESOURCE_EXHAUSTION,
            object=obj,
            score=0.85,
            ts=ts,
            title=f"{obj} OOMKilled (exit 137), {restarts} restarts" + (f", limit {limit}" if limit else ", no limit"),
            mechanism=mech,
            tags=tags + ([f"node:{node}"] if node and not limit else []),
            explains=[*POD_EFFECTS, "memory_high", "oom_kill"],
            evidence=refs,
            actions=actions,
        )

    def _spec_path(self, cname: str) -> str | None:
        if self.item is None:
            return None
        spec = self.item.data.get("spec") or {}
        for key in ("containers", "initContainers"):
            for i, c in enumerate(spec.get(key) or ()):
                if c.get("name") == cname:
                    return f"spec.{key}.{i}"
        return None

    def _crash(
        self,
        cname: str,
        spec: dict[str, Any],
        exit_code: Any,
        ts: float | None,
        treason: str,
        term_path: str | None,
        refs: list[EvidenceRef],
        tags: list[str],
        obj: str,
        restarts: int,
    ) -> None:
        verdict = read_crash(self.logs, cname)
        actions = [self._logs_action(cname), self._describe()]
        code, category, score = "crash_unknown", Category.CODE_DEFECT, 0.5
        needs: list[str] = []
        msg = ""
        if term_path and self.item is not None:
            m = (self.item.data.get("status") and _resolve_str(self.item.data, f"{term_path}.message")) or ""
            msg = m
            if m:
                refs = [*refs, ref(self.item, f"{term_path}.message", m)]
        exit_desc = f"exit code {exit_code}" if exit_code is not None else "crash"
        if exit_code in (126, 127) or re.search(
            r"executable file not found|no such file or directory|permission denied", msg, re.I
        ):
            code, category, score = "bad_command", Category.CONFIGURATION_ERROR, 0.8
            why = f"its command cannot be run ({msg[:120] or exit_desc})"
        elif verdict is not None:
            code, category, score = verdict.code, Category(verdict.category), 0.8
            line = verdict.text or str(verdict.record.get("msg") or "")
            why = f'{verdict.why}: "{line.strip()[:160]}"'
            from diagnosis.analyzers.logs._shared import BAD_DATA  # (logs imports the release rules, which import this)

            if code == "crash_code" and BAD_DATA.search(line):  # its last words name input it cannot read
                code, category = "crash_data", Category.DATA_QUALITY
                why = f'it could not process malformed or unexpected input data: "{line.strip()[:160]}"'
            refs = [*refs, ref(verdict.item, None, line, verdict.record.get("line"))]
            target = crash_target(verdict) if code == "crash_dependency" else None
            if target:
                # what it could not reach: a fault there (its node lost, its pods gone) explains the crash
                why += f" (it could not reach {target})"
                tags = [*tags, f"upstream:{target}"]
        elif exit_code == 139:
            code, category, score = "crash_code", Category.CODE_DEFECT, 0.7
            why = "it dies with a segmentation fault (exit 139)"
        elif exit_code == 137:
            code, category, score = "killed", Category.UNKNOWN, 0.5
            why = (
                "it is killed with SIGKILL (exit 137) without an OOMKilled reason: an external kill or the node's "
                "OOM killer"
            )
            needs.append(f"the node's kernel log or events for {obj}")
        elif (env := self._missing_env_source(cname, spec)) is not None:
            code, category, score = "crash_config", Category.CONFIGURATION_ERROR, 0.75
            why, env_ref = env
            refs = [*refs, env_ref]
        else:
            why = f"it exits with {exit_desc}" + (f" ({treason})" if treason and treason != "Error" else "")
            needs.append(f"logs of {obj} (kubectl logs --previous) to tell a bug from a configuration error")
            needs.append(
                f"recent changes to the image, ConfigMaps and Secrets of {self.kind} {self.ns}/{self.workload}"
            )
            # nothing says why: a symptom, which a recent rollout or another cause may explain
            code, category, score = "crash_loop", Category.UNKNOWN, 0.5
        if category == Category.CODE_DEFECT:
            actions.append(
                Action(
                    description="Roll back to the previous revision if the crash began with a rollout",
                    command=f"kubectl rollout undo {kubectl_kind(self.kind)}/{self.workload} -n {self.ns}",
                    kind="write",
                )
            )
        state = "in CrashLoopBackOff" if any(r.value == "CrashLoopBackOff" for r in refs) else "crashing"
        self._emit(
            role=SYMPTOM if code in ("crash_loop", "crash_peer") else CAUSE,
            code=code,
            category=category,
            object=obj,
            score=score,
            ts=ts,
            tags=tags,
            title=f"{obj} {state} ({exit_desc}, {restarts} restarts)",
            mechanism=f"{obj} keeps crashing because {why}",
            explains=POD_EFFECTS,
            evidence=refs,
            actions=actions,
            needs=needs,
        )

    def _missing_env_source(self, cname: str, spec: dict[str, Any]) -> tuple[str, EvidenceRef] | None:
        """An env var taken from a ConfigMap or Secret key that the evidence shows is missing (an optional ref
        leaves the variable unset, and the application exits on start)."""
        spath = self._spec_path(cname)
        for i, env in enumerate(spec.get("env") or ()):
            source = env.get("valueFrom") or {}
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                sel = source.get(key)
                if not isinstance(sel, dict):
                    continue
                obj = self.idx.objects.get((kind, self.ns, str(sel.get("name"))))
                if (
                    obj is None
                    or sel.get("key") in (obj.data.get("data") or {})
                    or sel.get("key") in (obj.data.get("stringData") or {})
                ):
                    continue
                why = (
                    f"env {env.get('name')} comes from key {sel.get('key')} of {kind} {sel.get('name')}, which has "
                    "no such key, so the variable is unset"
                )
                return why, ref(self.item, f"{spath}.env.{i}", env) if self.item is not None and spath else ref(obj)
        return None

    def _image(self, cname: str, image: str, text: str, refs: list[EvidenceRef], tags: list[str]) -> None:
        category, code, why = image_reason(text)
        registry = _registry_of(image)
        status = _HTTP_STATUS.search(text)
        if registry and code in ("image_registry_unreachable", "image_pull_rate_limited"):
            why = f"the registry {registry} answers {status.group(0)}" if status else f"{why} ({registry})"
            tags = [*tags, f"upstream:{registry}"]
        state = next((str(r.value) for r in refs if r.value in IMAGE_PULL), "ErrImagePull")
        obj = self._obj(cname)
        evs = self._recent_events({"Failed", "BackOff", "ErrImagePull"}, cname)
        ts = _first_seen(evs)
        self._emit(
            role=CAUSE,
            code=code,
            category=_c(category),
            object=obj,
            score=0.85,
            ts=ts,
            tags=[*tags, f"image:{image}"],
            title=f"{obj} cannot pull image {image}",
            mechanism=f"{obj} cannot start because image {image} cannot be pulled ({state}): {why}",
            explains=POD_EFFECTS,
            evidence=refs,
            actions=[
                self._describe(),
                Action(
                    description="Check the image reference the workload asks for",
                    command=f"kubectl get {kubectl_kind(self.kind)} {self.workload} -n {self.ns} "
                    "-o jsonpath='{.spec.template.spec.containers[*].image}'",
                ),
            ],
        )

    def _config_wait(self, cname: str, wreason: str, wmsg: str, refs: list[EvidenceRef], tags: list[str]) -> None:
        obj = self._obj(cname)
        evs = self._recent_events({"Failed", "FailedCreate"}, cname)
        text = wmsg or " ".join(str(e.data.get("message") or "") for e in evs)
        missing = re.search(r"(secret|configmap)s? \"?([\w.-]+)\"? not found", text, re.I)
        key = re.search(r"couldn't find key (\S+) in (Secret|ConfigMap) ([\w./-]+)", text, re.I)
        if missing:
            why = f"{missing.group(1).lower()} {missing.group(2)} that it references does not exist"
            tags = [*tags, f"{missing.group(1).lower()}:{self.ns}/{missing.group(2)}"]
        elif key:
            why = f"key {key.group(1)} is missing from {key.group(2)} {key.group(3)}"
        else:
            why = f"{wreason}: {text[:160]}" if text else wreason
        self._emit(
            role=CAUSE,
            code="container_config_error",
            category=Category.CONFIGURATION_ERROR,
            object=obj,
            score=0.85,
            ts=_first_seen(evs),
            tags=tags,
            title=f"{obj} cannot be created: {why}",
            mechanism=f"{obj} cannot start because the {why}",
            explains=POD_EFFECTS,
            evidence=refs + self._ev_refs(evs),
            actions=[self._describe()],
        )

    def _not_ready(self, cname: str, path: str, tags: list[str], obj: str) -> None:
        if self._recent_events({"Unhealthy"}):
            return  # the probe reading names it
        assert self.item is not None
        self._emit(
            role=SYMPTOM,
            code="pod_not_ready",
            category=Category.UNKNOWN,
            object=obj,
            score=0.4,
            tags=tags,
            title=f"{obj} running but not ready",
            mechanism=f"{obj} is running but not ready, so it receives no traffic",
            evidence=[ref(self.item, f"{path}.ready", False)],
            needs=[f"readiness probe results and logs of {obj}"],
        )

    def _liveness_kills(self, cname: str) -> list[EvidenceItem]:
        return [
            e
            for e in self._recent_events({"Killing", "Unhealthy"}, cname)
            if "liveness" in str(e.data.get("message") or "").lower()
        ]

    def _probes(self) -> None:
        unhealthy = self._recent_events({"Unhealthy", "ProbeWarning"})
        if not unhealthy:
            return
        for kind in ("Liveness", "Readiness", "Startup"):
            evs = [e for e in unhealthy if str(e.data.get("message") or "").startswith(f"{kind} probe")]
            if not evs:
                continue
            self._probe(kind, evs)

    def _probe(self, kind: str, evs: list[EvidenceItem]) -> None:
        last = evs[-1]
        msg = str(last.data.get("message") or "")
        count = sum(_event_count(e) for e in evs)
        cname, cspec = self._probe_container(kind, msg)
        ready = self._ready_after(max((event_ts(e) or 0.0 for e in evs), default=0.0))
        if kind != "Liveness" and ready is not None:
            self._warmed_up(kind, evs, cname, count, ready)
            return
        if kind == "Readiness" and count == 1 and (started := self._started_just_before(evs[0])) is not None:
            self._emit(
                role=BENIGN,
                code="probe_warmed_up",
                category=Category.HEALTHY,
                object=self._obj(cname),
                score=0.2,
                ts=_first_seen(evs),
                title=f"Readiness probe of {self._obj(cname)} failed once as it started",
                mechanism=(
                    f"The readiness probe of {self._obj(cname)} failed once, {started[0]:.0f}s "
                    "after its container started, and never again: the application warming up, not a fault"
                ),
                evidence=[ref(last, "message", msg), ref(started[1], "reason", "Started")],
            )
            return
        probe = (cspec or {}).get(f"{kind.lower()}Probe") or {}
        http = probe.get("httpGet") or probe.get("tcpSocket") or {}
        port = http.get("port")
        path = http.get("path")
        ports = {
            p.get("containerPort"): p.get("name") for p in (cspec or {}).get("ports") or () if p.get("containerPort")
        }
        named = {v: k for k, v in ports.items() if v}
        obj = self._obj(cname)
        tags = [*self.tags] + ([f"container:{self.ns}/{self.pod}/{cname}"] if cname else [])
        refs = [ref(last, "message", msg)]
        spath = self._spec_path(cname) if cname else None
        if spath and probe and self.item is not None:
            refs.append(ref(self.item, f"{spath}.{kind.lower()}Probe", probe))
        ts = _first_seen(evs)
        effect = "restarts it" if kind == "Liveness" else "keeps it out of the Service endpoints"
        listening = self._listening_port(cname)
        status = re.search(r"statuscode: (\d{3})", msg)
        code, category, score, why = "probe_failing", Category.UNKNOWN, 0.45, f"it fails ({msg[:120]})"
        role = SYMPTOM
        if isinstance(port, str) and port not in named and ports:
            code, category, score, role = "probe_misconfigured", Category.CONFIGURATION_ERROR, 0.85, CAUSE
            why = f"it targets named port {port!r}, which the container does not declare"
        elif (
            isinstance(port, int)
            and ports
            and port not in ports
            and re.search(r"refused|reset|no route", msg)
            # declared ports are informational (istio-proxy serves its probe on an undeclared 15021): a container
            # that itself keeps terminating refuses any port while it is down, so the refusal is no proof
            and not self._terminated_before(cname, killed_by_probe=kind == "Liveness")
        ):
            code, category, score, role = "probe_misconfigured", Category.CONFIGURATION_ERROR, 0.85, CAUSE
            why = f"it targets port {port} but the container listens on {', '.join(str(p) for p in ports)}"
        elif isinstance(port, int) and listening and listening != port and re.search(r"refused|reset", msg):
            code, category, score, role = "probe_misconfigured", Category.CONFIGURATION_ERROR, 0.8, CAUSE
            why = f"it targets port {port} but the application logs that it listens on {listening}"
        elif status and status.group(1) == "404":
            code, category, score, role = "probe_misconfigured", Category.CONFIGURATION_ERROR, 0.8, CAUSE
            why = f"its path {path or '?'} does not exist on the application (HTTP 404)"
        elif status and status.group(1).startswith("5"):
            code, why = "probe_unhealthy", f"the application's health endpoint answers HTTP {status.group(1)}"
        elif re.search(r"refused", msg):
            delay = int(probe.get("initialDelaySeconds") or 0)
            if kind == "Liveness" and delay < 15 and not (cspec or {}).get("startupProbe") and self._started_late():
                code, category, score, role = "probe_too_early", Category.CONFIGURATION_ERROR, 0.75, CAUSE
                why = (
                    f"it starts after {delay}s (initialDelaySeconds) but the application takes longer to listen, "
                    "so it is killed before it is up"
                )
            else:
                code, why = "probe_refused", "nothing listens on the probed port"
        elif re.search(r"timeout|deadline exceeded|timed out", msg, re.I):
            timeout = int(probe.get("timeoutSeconds") or 1)
            # a liveness probe that failed fewer times than its failureThreshold restarted nothing
            few = count <= 2 and (kind == "Readiness" or count < int(probe.get("failureThreshold") or 3))
            if few and not self._unready_now():
                # one or two slow answers to a readiness probe (a GC pause, a node busy for a moment) took the pod
                # out of rotation for a probe period: a blip, not a misconfigured probe
                code, category, score, role = "probe_blip", Category.HEALTHY, 0.2, BENIGN
                why = f"it timed out {count}x and passed since: a slow moment, not a fault"
            elif (
                timeout <= 2
                and not self._reports_unhealthy()
                and not self._calls_time_out()
                and not self._cpu_throttled()
            ):
                code, category, score, role = "probe_timeout", Category.CONFIGURATION_ERROR, 0.5, CAUSE
                why = f"its timeoutSeconds is {timeout}s and the application answers more slowly than that"
            else:
                code, why = "probe_timeout", f"the application does not answer within {timeout}s"
        if kind == "Readiness" and role == SYMPTOM and self._rollout_went_on(evs):
            # unready in its first moments, then the rollout went on and retired the old pods: it became ready
            code, category, score, role = "probe_blip", Category.HEALTHY, 0.2, BENIGN
            why = f"it failed {count}x while the new pod started, and its rollout completed after ({msg[:120]})"
        few = count <= 2 and (kind == "Readiness" or count < int((probe or {}).get("failureThreshold") or 3))
        if few and role == SYMPTOM and not self._unready_now():
            # a readiness probe that failed once or twice (refused while the pod shut down on a scale-in, slow
            # for a moment) and not since is no fault of its own; nor a liveness probe that restarted nothing
            code, category, score, role = "probe_blip", Category.HEALTHY, 0.2, BENIGN
            why = f"it failed {count}x and passed since ({msg[:120]})"
        self._emit(
            role=role,
            # a failing probe that is a symptom shares the code other domains' causes list in `explains`
            code=code if role in (CAUSE, BENIGN) else "probe_failed",
            category=category,
            object=obj,
            score=score,
            ts=ts,
            tags=tags,
            title=f"{kind} probe of {obj} failing ({count}x)",
            mechanism=f"The {kind.lower()} probe of {obj} fails because {why}, so Kubernetes {effect}",
            explains=POD_EFFECTS if role == CAUSE else [],
            evidence=refs,
            needs=[] if role != SYMPTOM else [f"logs of {obj} and what its health endpoint depends on"],
            actions=[
                Action(
                    description=f"Show the {kind.lower()} probe and the ports the container declares",
                    command=f"kubectl get pod {self.pod} -n {self.ns} -o "
                    f"jsonpath='{{.spec.containers[*].{kind.lower()}Probe}} "
                    "{.spec.containers[*].ports}'",
                )
            ],
        )

    def _rollout_went_on(self, evs: list[EvidenceItem]) -> bool:
        """Whether every readiness failure came in the pod's first minute after its container started, and its
        Deployment then scaled an old ReplicaSet down to 0: the rollout waited for this pod to be ready, and was."""
        started = [
            event_ts(e) for e in self.idx.events_for("Pod", self.ns, self.pod) if e.data.get("reason") == "Started"
        ]
        last = max((t for e in evs if (t := e.data.get("last_ts") or event_ts(e)) is not None), default=None)
        first_start = min((t for t in started if t is not None), default=None)
        if last is None or first_start is None or last - first_start > STARTUP_S:
            return False
        rs = re.sub(r"-[a-z0-9]{5}$", "", self.pod)
        workload = re.sub(r"-[a-z0-9]{6,10}$", "", rs)
        if workload == rs:
            return False
        for e in self.idx.events_for("Deployment", self.ns, workload):
            msg = str(e.data.get("message") or "")
            t = event_ts(e)
            if t is not None and t >= last and re.search(r"Scaled down replica set \S+ to 0\b", msg) and rs not in msg:
                return True
        return False

    def _unready_now(self) -> bool:
        """Whether the pod's own status says it is not Ready now (an exported pod only)."""
        status = (self.item.data.get("status") or {}) if self.item is not None else {}
        return any(c.get("type") == "Ready" and c.get("status") == "False" for c in status.get("conditions") or ())

    def _ready_after(self, last_failure: float) -> tuple[int, float] | None:
        """(index, time) of the pod's Ready condition when it turned Ready after the given failure and is Ready now."""
        status = (self.item.data.get("status") or {}) if self.item is not None else {}
        for i, cond in enumerate(status.get("conditions") or ()):
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                since = parse_ts(cond.get("lastTransitionTime"))
                if since is not None and last_failure and since >= last_failure:
                    return i, since
                # a `kubectl get pods` table says Ready now but not since when: failures that ended well before
                # the snapshot were its start
                now = self.idx.now
                if since is None and last_failure and now is not None and now - last_failure >= WARMED_UP_AFTER_S:
                    return i, last_failure
        return None

    def _started_just_before(self, failure: EvidenceItem) -> tuple[float, EvidenceItem] | None:
        """(seconds from the container's Started event to the probe's failure, that event), when at most two
        minutes (read from the pod's events: there may be no pod object)."""
        at = event_ts(failure)
        for e in self.events:
            ts = event_ts(e)
            started = str(e.data.get("reason") or "") == "Started"
            if started and at is not None and ts is not None and 0 <= at - ts <= WARM_UP_S:
                return at - ts, e
        return None

    def _warmed_up(
        self, kind: str, evs: list[EvidenceItem], cname: str | None, count: int, ready: tuple[int, float]
    ) -> None:
        """Readiness (or startup) failures that ended with the pod Ready: a start-up warming, not a fault."""
        assert self.item is not None
        obj = self._obj(cname)
        self._emit(
            role=BENIGN,
            code="probe_warmed_up",
            category=Category.HEALTHY,
            object=obj,
            score=0.2,
            ts=_first_seen(evs),
            title=f"{kind} probe of {obj} failed {count}x while it started, then passed",
            mechanism=(
                f"The {kind.lower()} probe of {obj} failed {count} time(s) until the pod turned Ready at "
                f"{fmt_ts(ready[1])}, and it is Ready now: the application warming up, not a current fault"
            ),
            evidence=[
                ref(evs[-1], "message", evs[-1].data.get("message")),
                ref(self.item, f"status.conditions.{ready[0]}.status", "True"),
            ],
        )

    def _probe_container(self, kind: str, msg: str) -> tuple[str | None, dict[str, Any] | None]:
        if self.item is None:
            return None, None
        containers = _containers(self.item)
        for name, c in containers.items():
            if c.get(f"{kind.lower()}Probe") and (len(containers) == 1 or name in msg):
                return name, c
        for name, c in containers.items():
            if c.get(f"{kind.lower()}Probe"):
                return name, c
        return (next(iter(containers)), next(iter(containers.values()))) if containers else (None, None)

    def _reports_unhealthy(self) -> bool:
        """Whether a probe of this pod got an answer that says the application is unhealthy (gRPC NOT_SERVING, an
        HTTP 5xx): then a probe that times out is the application hanging, not a timeout set too tight."""
        return any(
            re.search(r"NOT_SERVING|statuscode: 5\d\d|responded with", str(e.data.get("message") or ""))
            for e in self._recent_events({"Unhealthy"})
        )

    def _calls_time_out(self) -> bool:
        """Whether the application's own log (the pod's, or a file named for its workload) shows its calls to a
        database or another service timing out or failing to connect: then a probe that times out is the
        application stuck waiting on them, not a probe timeout set too tight."""
        wl = self.workload or ""
        items = list(self.logs)
        if len(wl) >= 3:
            items += [
                it
                for it in self.idx.other_logs
                if (svc := service_of(it)) and (svc.startswith(wl) or wl.startswith(svc))
            ]
            # its sibling pods' logs: replicas of one workload call the same things
            items += [
                it
                for (ns, pod), logs in self.idx.logs.items()
                if ns == self.ns and pod != self.pod and workload_of_pod(pod) == wl
                for it in logs
            ]
        n = 0
        for it in items:
            for r in it.data.get("records") or ():
                msg = str(r.get("msg") or "")
                if is_error(r) and (NET_TIMEOUT.search(msg) or PG_DOWN.search(msg) or NET_REFUSED.search(msg)):
                    n += 1
                    if n >= 3:
                        return True
        return False

    def _cpu_throttled(self) -> bool:
        """Whether an alert says this pod's CPU is throttled (kube-prometheus' CPUThrottlingHigh): a probe that times
        out then waits on a starved CPU, and the probe's timeout is not what is wrong."""
        if self.idx.evidence is None:
            return False
        for a in self.idx.evidence.kind("alert"):
            labels = a.data.get("labels") or {}
            if "throttl" in str(labels.get("alertname", "")).lower() and labels.get("pod") == self.pod:
                return a.data.get("status") != "resolved"
        return False

    def _terminated_before(self, cname: str | None, *, killed_by_probe: bool) -> bool:
        """Whether this container has restarted after terminating for a reason of its own (its lastState says how
        it ended); a failing liveness probe kills it too, so then only an OOM kill counts."""
        if self.item is None or cname is None:
            return False
        for _, cs in _statuses(self.item):
            last = (cs.get("lastState") or {}).get("terminated") or {}
            if cs.get("name") != cname or int(cs.get("restartCount") or 0) == 0 or not last:
                continue
            if not killed_by_probe or last.get("reason") == "OOMKilled":
                return True
        return False

    def _listening_port(self, cname: str | None = None) -> int | None:
        rx = re.compile(r"\b(?:listening|serving|started|bound|running)\b.{0,40}?(?:port\s*|:)(\d{2,5})\b", re.I)
        for item in self.logs:
            src = item.data.get("source") or {}
            own = src.get("container") if isinstance(src, dict) else None
            if cname and own and own != cname:  # another container of the pod (a sidecar) listens elsewhere
                continue
            for rec in item.data.get("records") or ():
                m = rx.search(str(rec.get("msg") or ""))
                if m:
                    return int(m.group(1))
        return None

    def _cordons_lifted(self) -> bool:
        """Whether the Nodes exported show every node schedulable again (none cordoned): a drain or upgrade that
        left the scheduler short of room while it ran is over."""
        nodes = self.idx.of_kind("Node")
        return bool(nodes) and not any((n.data.get("spec") or {}).get("unschedulable") for n in nodes)

    def _scheduled_after(self, ts: float | None) -> bool:
        """Whether the pod was scheduled after the given time (a Scheduled event, or its status says it runs)."""
        for e in self.idx.events_for("Pod", self.ns, self.pod):
            t = event_ts(e)
            if e.data.get("reason") == "Scheduled" and (ts is None or (t is not None and t >= ts)):
                return True
        status = (self.item.data.get("status") or {}) if self.item is not None else {}
        return status.get("phase") in ("Running", "Succeeded")

    def _pulled_after(self, ts: float | None) -> bool:
        """Whether the kubelet pulled the image and started the container after a failed pull (a registry that was
        briefly away: the retry worked), with no pull failing after that."""
        pulled = [
            t
            for e in self.idx.events_for("Pod", self.ns, self.pod)
            if e.data.get("reason") in ("Pulled", "Started")
            and (t := event_ts(e)) is not None
            and (ts is None or t >= ts)
        ]
        if not pulled:
            return False
        return not any(
            (t := event_ts(e)) is not None
            and t > max(pulled)
            and e.data.get("reason") in ("Failed", "ErrImagePull", "BackOff")
            and re.search(r"pull|image", str(e.data.get("message") or ""), re.I)
            for e in self.idx.events_for("Pod", self.ns, self.pod)
        )

    def _started_late(self) -> bool:
        """Whether the application's logs show it still starting when the probe gave up: a slow start."""
        for item in self.logs:
            for rec in item.data.get("records") or ():
                if re.search(r"warming|loading|migrat|initializ|starting", str(rec.get("msg") or ""), re.I):
                    return True
        return bool(self._liveness_kills(""))

    def _from_events(self) -> None:
        """What the pod's recent Warning events show that its status did not (or when there is no status)."""
        for ev in warning_events(self.events):
            if not self.idx.recent(event_ts(ev)):
                continue
            reason = str(ev.data.get("reason") or "")
            msg = str(ev.data.get("message") or "")
            refs = [ref(ev, "message", msg)]
            if reason == "FailedScheduling" and self._scheduled_after(event_ts(ev)):
                continue  # it waited, then a node took it (a new node, freed capacity): not why anything fails now
            if reason == "FailedScheduling" and _CORDONED.search(msg) and self._cordons_lifted():
                continue  # it counted nodes cordoned for an upgrade or drain, and every node takes pods again
            if reason == "FailedScheduling" and not (
                {
                    "insufficient_resources",
                    "node_selector_mismatch",
                    "untolerated_taint",
                    "unbound_pvc",
                    "requests_exceed_nodes",
                    "nodes_unavailable",
                    "unschedulable",
                    "volume_zone_conflict",
                }
                & self.done
            ):
                self._unschedulable(msg, refs, event_ts(ev))
            elif (reason in ("Failed", "ErrImagePull") and re.search(r"pull|image", msg, re.I)) and not (
                self.done
                & {
                    "image_not_found",
                    "image_pull_auth",
                    "image_pull_rate_limited",
                    "image_registry_unreachable",
                    "image_pull_error",
                }
            ):
                if self._pulled_after(event_ts(ev)):
                    continue  # the retry pulled it and the container started: a registry briefly away, over
                image = re.search(r"image \"([^\"]+)\"", msg)
                self._image(_container_in(msg) or "?", image.group(1) if image else "?", msg, refs, list(self.tags))
            elif reason == "Failed" and re.search(
                r"(secret|configmap)s? \"?[\w.-]+\"? not found|couldn't find key", msg, re.I
            ):
                if "container_config_error" not in self.done:
                    self._config_wait(_container_in(msg) or "?", reason, msg, refs, list(self.tags))
            elif reason in ("FailedMount", "FailedAttachVolume"):
                self._volume(reason, msg, refs, ev)
            elif reason == "FailedCreatePodSandBox":
                ip = re.search(r"assign an IP|no available IP|ip.*exhaust|insufficient.*ip", msg, re.I)
                self._emit(
                    role=CAUSE,
                    code="sandbox_failed",
                    object=self._obj(),
                    score=0.75,
                    ts=event_ts(ev),
                    category=Category.RESOURCE_EXHAUSTION if ip else Category.INFRASTRUCTURE,
                    title=f"Pod {self.ns}/{self.pod} sandbox cannot be created" + (" (no free IP)" if ip else ""),
                    mechanism=f"Pod {self.ns}/{self.pod} cannot start because the node's container network (CNI) fails "
                    f"to set up its sandbox: {msg[:160]}",
                    explains=POD_EFFECTS,
                    evidence=refs,
                    actions=[self._describe()],
                )
            elif (
                reason == "BackOff"
                and "restarting failed container" in msg
                and not (
                    self.done
                    & {
                        "crash_unknown",
                        "crash_config",
                        "crash_code",
                        "crash_dependency",
                        "crash_data",
                        "crash_resource",
                        "crash_dns",
                        "bad_command",
                        "oom_killed",
                        "oom_killed_nolimit",
                        "killed",
                        "exits_zero",
                        "probe_misconfigured",
                        "probe_too_early",
                        "probe_timeout",
                    }
                )
                and self.item is None
            ):
                cname = _container_in(msg) or "?"
                obj = self._obj(cname)
                self._crash(cname, {}, None, event_ts(ev), "", None, refs, list(self.tags), obj, _event_count(ev))
            elif reason in ("OOMKilling",) and not (self.done & {"oom_killed", "oom_killed_nolimit"}):
                self._oom(
                    _container_in(msg) or "?", {}, event_ts(ev), refs, list(self.tags), self._obj(), _event_count(ev)
                )
            elif reason in ("FailedPostStartHook", "FailedPreStopHook") and "hook_failed" not in self.done:
                self._emit(
                    role=CAUSE,
                    code="hook_failed",
                    category=Category.CONFIGURATION_ERROR,
                    object=self._obj(),
                    score=0.7,
                    ts=event_ts(ev),
                    title=f"Pod {self.ns}/{self.pod} lifecycle hook fails",
                    mechanism=f"A lifecycle hook of Pod {self.ns}/{self.pod} fails ({msg[:140]}), so the "
                    f"container is killed",
                    explains=POD_EFFECTS,
                    evidence=refs,
                    actions=[self._describe()],
                )

    def _running_ready(self) -> bool:
        """Whether the pod's export shows it Running with every container running and ready."""
        if self.item is None:
            return False
        status = self.item.data.get("status") or {}
        statuses = status.get("containerStatuses") or []
        return (
            status.get("phase") == "Running"
            and bool(statuses)
            and all(cs.get("ready") and "running" in (cs.get("state") or {}) for cs in statuses)
        )

    def _volume(self, reason: str, msg: str, refs: list[EvidenceRef], ev: EvidenceItem) -> None:
        if _KUBELET_NOT_REGISTERED.search(msg):
            return  # the kubelet's cache not yet holding a projected object at pod start (or node stop): it retries
        missing = re.search(r"(secret|configmap)s? \"?([\w.-]+)\"? not found", msg, re.I)
        if missing:
            code, category = "volume_source_missing", Category.CONFIGURATION_ERROR
            why = f"{missing.group(1).lower()} {missing.group(2)} mounted as a volume does not exist"
        elif re.search(r"multi-attach", msg, re.I):
            code, category = "volume_multi_attach", Category.INFRASTRUCTURE
            why = "its volume is still attached to another node (Multi-Attach error)"
        elif re.search(r"not found|no such|does not exist|invalid", msg, re.I):
            code, category = "volume_mount_failed", Category.CONFIGURATION_ERROR
            why = f"a volume cannot be mounted: {msg[:160]}"
        else:
            code, category = "volume_mount_failed", Category.INFRASTRUCTURE
            why = f"a volume cannot be attached or mounted: {msg[:160]}"
        if code in self.done:
            return
        if self._running_ready():
            # the kubelet retried and the volume mounted: the pod runs and is ready now
            self._emit(
                role=BENIGN,
                code="volume_mounted_late",
                category=Category.HEALTHY,
                object=self._obj(),
                ts=event_ts(ev),
                title=f"Pod {self.ns}/{self.pod}: a volume mount failed at first ({reason}), then succeeded",
                mechanism=f"Pod {self.ns}/{self.pod} had {why}, then started: it runs and is ready now",
                evidence=refs,
            )
            self.done.add(code)
            return
        self._emit(
            role=CAUSE,
            code=code,
            category=category,
            object=self._obj(),
            score=0.75,
            ts=event_ts(ev),
            title=f"Pod {self.ns}/{self.pod} stuck in ContainerCreating: {why}",
            mechanism=f"Pod {self.ns}/{self.pod} cannot start because {why}",
            explains=POD_EFFECTS,
            evidence=refs,
            actions=[self._describe()],
        )


def _container_in(msg: str) -> str | None:
    m = re.search(r"container[ /]\"?([a-z0-9][a-z0-9-]*)", msg)
    return m.group(1) if m else None


def _resolve_str(data: dict[str, Any], path: str) -> str:
    cur: Any = data
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return ""
    return cur if isinstance(cur, str) else ""


def _largest_node(idx: KubeIndex) -> dict[str, float]:
    best: dict[str, float] = {}
    for node in idx.of_kind("Node"):
        alloc = (node.data.get("status") or {}).get("allocatable") or {}
        for r, v in alloc.items():
            q = quantity(v)
            if q is not None and q > best.get(r, 0.0):
                best[r] = q
    return best


_HTTP_STATUS = re.compile(
    r"\b(?:429 Too Many Requests|500 Internal Server Error|502 Bad Gateway|503 Service Unavailable|504 Gateway "
    r"Time-?out|5\d\d)\b"
)


def _registry_of(image: str) -> str | None:
    """The registry host of an image reference (`quay.io/org/app:1.2` -> quay.io); Docker Hub's when it has none."""
    if not image or image == "?":
        return None
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


# "MountVolume.SetUp failed for volume "kube-api-access-8w2zl" : object "kube-system"/"kube-root-ca.crt" not
# registered": the kubelet's object cache racing a pod's start or its node's shutdown, retried until it passes
_KUBELET_NOT_REGISTERED = re.compile(r"object \"[\w.\-]+\"/\"[\w.\-]+\" not registered")


def image_reason(text: str) -> tuple[str, str, str]:
    """(category, code, why) of an image pull failure from the kubelet's message."""
    m = text.lower()
    if re.search(r"toomanyrequests|rate limit|429", m):
        return "dependency_failure", "image_pull_rate_limited", "the registry rate-limits pulls (toomanyrequests)"
    if re.search(r"no space left", m):
        return "resource_exhaustion", "image_pull_disk_full", "the node's disk is full"
    if re.search(
        r"unauthori[sz]ed|authentication required|no basic auth|pull access denied|access denied|forbidden|\b40[13]\b",
        m,
    ):
        return (
            "configuration_error",
            "image_pull_auth",
            "the registry refuses the pull (imagePullSecrets missing or wrong)",
        )
    if re.search(
        r"not found|manifest unknown|does not exist|\b404\b|invalid reference|invalidimagename|unknown tag", m
    ):
        return "configuration_error", "image_not_found", "the image tag or repository does not exist"
    if re.search(
        r"i/o timeout|no such host|connection refused|tls handshake|deadline exceeded|\b50[234]\b|dial "
        r"tcp|connection reset",
        m,
    ):
        return "dependency_failure", "image_registry_unreachable", "the registry cannot be reached"
    return "configuration_error", "image_pull_error", "the image reference cannot be pulled"


_VOLUME_ZONE = "its volume is bound to a zone where no node it may run on is (volume node affinity conflict)"
_SCHED_PART = re.compile(r"(\d+)\s+([^,]+?)(?=,\s*\d+\s|\.\s|$)")


def scheduling_reason(text: str) -> tuple[str, str, str]:
    """(category, code, why) of a FailedScheduling message: the reason most nodes give wins; the control-plane taint
    every small cluster reports is noise."""
    body = text.split("preemption:")[0]
    m = re.search(r"nodes are available:\s*(.*)", body, re.S)
    votes: dict[tuple[str, str, str], int] = {}
    for n, part in _SCHED_PART.findall(m.group(1) if m else body):
        p = part.strip().lower()
        if "control-plane" in p or "node-role.kubernetes.io/master" in p:
            continue
        res = re.search(r"insufficient (\S+)", p)
        if res:
            key = ("resource_exhaustion", "insufficient_resources", f"not enough free {res.group(1)} on any node")
        elif "too many pods" in p:
            key = ("resource_exhaustion", "insufficient_resources", "the nodes are at their pod limit")
        elif "not-ready" in p or "unreachable" in p:
            key = ("infrastructure", "nodes_unavailable", "the nodes are NotReady or unreachable")
        elif "disk-pressure" in p or "memory-pressure" in p or "pid-pressure" in p:
            key = ("resource_exhaustion", "insufficient_resources", "the nodes are under resource pressure")
        elif "taint" in p:
            key = (
                "configuration_error",
                "untolerated_taint",
                f"the pod does not tolerate the nodes' taint ({part.strip()[:80]})",
            )
        elif "volume node affinity" in p:
            key = ("configuration_error", "volume_zone_conflict", _VOLUME_ZONE)
        elif "affinity" in p or "selector" in p:
            key = ("configuration_error", "node_selector_mismatch", "no node matches its node selector or affinity")
        elif "persistentvolumeclaim" in p:
            key = ("configuration_error", "unbound_pvc", "its PersistentVolumeClaim is not bound")
        elif "were unschedulable" in p:
            key = ("infrastructure", "nodes_unavailable", "the nodes are cordoned (unschedulable)")
        elif "free ports" in p:
            key = ("configuration_error", "host_port_conflict", "the host port it asks for is taken on every node")
        else:
            continue
        votes[key] = votes.get(key, 0) + int(n)
    if not votes:
        if re.search(r"persistentvolumeclaim", text, re.I):
            return "configuration_error", "unbound_pvc", "its PersistentVolumeClaim is not bound"
        return "configuration_error", "unschedulable", f"no node fits it ({text[:120]})"
    # nodes its selector or a taint keeps it off are excluded by design: when the nodes it may run on give another
    # reason (no free cpu, NotReady), that reason is what keeps it Pending
    by_design = {k for k in votes if k[1] in ("node_selector_mismatch", "untolerated_taint")}
    if by_design and len(by_design) < len(votes):
        votes = {k: v for k, v in votes.items() if k not in by_design}
    order = {"resource_exhaustion": 0, "configuration_error": 1, "infrastructure": 2}
    return max(votes, key=lambda k: (votes[k], -order.get(k[0], 3)))


def claims_of(item: EvidenceItem) -> list[str]:
    vols = (item.data.get("spec") or {}).get("volumes") or ()
    return [
        str(v["persistentVolumeClaim"].get("claimName"))
        for v in vols
        if isinstance(v, dict) and v.get("persistentVolumeClaim")
    ]
