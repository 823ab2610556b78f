"""Kubernetes: what is wrong with pods, nodes, rollouts, services and capacity, from objects, events and pod logs.

Each finding is a cause candidate (OOMKilled container, crash with the reason its last log lines give, image that
cannot be pulled, misconfigured probe, unschedulable pod, exhausted quota, node NotReady or under pressure,
Service selecting no pods ...), a symptom another cause explains (rollout stuck, replicas unavailable, pod not
ready), or benign (an old restart of a container running fine since, a recovered node, a pending volume waiting
for its first consumer). Recency is measured against the evidence's own "now", never the wall clock.
"""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._kube import (
    RECENT_S,
    KubeIndex,
    app_name,
    event_ts,
    kube_index,
    meta,
    ns_name,
    owner_workload,
    pod_tags,
    read_crash,
    ref,
    workload_tags,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.reasoning import workload_of_pod
from diagnosis.timeline import fmt_age, fmt_ts, parse_ts

K8S = Domain.KUBERNETES
CAUSE, SYMPTOM, BENIGN = "cause", "symptom", "benign"

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
]
IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}
CONFIG_WAIT = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreCreateHookError"}


def _f(analyzer: str, **kw: Any) -> Finding:
    return Finding(analyzer=analyzer, domain=K8S, **kw)


def _c(category: str) -> Category:
    return Category(category)


def _pod_workload(idx: KubeIndex, ns: str, pod: str) -> tuple[str, str]:
    item = idx.pods.get((ns, pod))
    owner = owner_workload(item) if item is not None else None
    if owner:
        return owner
    return "Deployment", workload_of_pod(pod)


def _kubectl_kind(kind: str) -> str:
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


def _warning_events(events: list[EvidenceItem]) -> list[EvidenceItem]:
    return [e for e in events if str(e.data.get("type") or "").lower() != "normal"]


def _event_count(ev: EvidenceItem) -> int:
    try:
        return max(1, int(ev.data.get("count") or 1))
    except (TypeError, ValueError):
        return 1


def _mentions_container(ev: EvidenceItem, container: str) -> bool:
    msg = str(ev.data.get("message") or "")
    return f"container {container}" in msg or f'"{container}"' in msg or f"container/{container}" in msg


class _PodReader:
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
            for e in _warning_events(self.events)
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
        key = f"{code}:{kw.get('object')}"
        if key in self.done:
            return
        self.done.add(key)
        self.done.add(code)
        kw.setdefault("tags", list(self.tags))
        self.out.append(_f(self.name, **kw))

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
            title=f"Pod {self.ns}/{self.pod} evicted: node {node or '?'} low on {what}",
            mechanism=f"Pod {self.ns}/{self.pod} was evicted because node {node or '?'} ran low on {what} "
            f"(kubelet eviction threshold reached)",
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
        self._unschedulable(text, refs, min((event_ts(e) or 0.0 for e in evs), default=0.0) or None)

    def _unschedulable(self, text: str, refs: list[EvidenceRef], ts: float | None) -> None:
        category, code, why = scheduling_reason(text)
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
                pevs = _warning_events(self.idx.events_for("PersistentVolumeClaim", self.ns, claim))
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
        self._emit(
            role=CAUSE,
            code=code,
            category=_c(category),
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
        named = _claims_of(self.item) if self.item is not None else []
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
            self._image(
                cname,
                str(spec.get("image") or cs.get("image") or "?"),
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
        if treason == "OOMKilled" or self._oom_events(cname):
            self._oom(cname, spec, finished, refs, tags, obj, restarts)
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
        self._crash(cname, spec, exit_code, finished, treason, term_path, refs, tags, obj, restarts)

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
                    command=f"kubectl set resources {_kubectl_kind(self.kind)}/{self.workload} -n {self.ns} -c {cname} "
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
            refs = [*refs, ref(verdict.item, None, line, verdict.record.get("line"))]
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
                    command=f"kubectl rollout undo {_kubectl_kind(self.kind)}/{self.workload} -n {self.ns}",
                    kind="write",
                )
            )
        state = "in CrashLoopBackOff" if any(r.value == "CrashLoopBackOff" for r in refs) else "crashing"
        self._emit(
            role=SYMPTOM if code == "crash_loop" else CAUSE,
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
        state = next((str(r.value) for r in refs if r.value in IMAGE_PULL), "ErrImagePull")
        obj = self._obj(cname)
        evs = self._recent_events({"Failed", "BackOff", "ErrImagePull"}, cname)
        ts = min((event_ts(e) or 0.0 for e in evs), default=0.0) or None
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
                    command=f"kubectl get {_kubectl_kind(self.kind)} {self.workload} -n {self.ns} "
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
            ts=min((event_ts(e) or 0.0 for e in evs), default=0.0) or None,
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
        ts = min((event_ts(e) or 0.0 for e in evs), default=0.0) or None
        effect = "restarts it" if kind == "Liveness" else "keeps it out of the Service endpoints"
        listening = self._listening_port()
        status = re.search(r"statuscode: (\d{3})", msg)
        code, category, score, why = "probe_failing", Category.UNKNOWN, 0.45, f"it fails ({msg[:120]})"
        role = SYMPTOM
        if isinstance(port, str) and port not in named and ports:
            code, category, score, role = "probe_misconfigured", Category.CONFIGURATION_ERROR, 0.85, CAUSE
            why = f"it targets named port {port!r}, which the container does not declare"
        elif isinstance(port, int) and ports and port not in ports and re.search(r"refused|reset|no route", msg):
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
            if timeout <= 2:
                code, category, score, role = "probe_timeout", Category.CONFIGURATION_ERROR, 0.5, CAUSE
                why = f"its timeoutSeconds is {timeout}s and the application answers more slowly than that"
            else:
                code, why = "probe_timeout", f"the application does not answer within {timeout}s"
        self._emit(
            role=role,
            code=code,
            category=category,
            object=obj,
            score=score,
            ts=ts,
            tags=tags,
            title=f"{kind} probe of {obj} failing ({count}x)",
            mechanism=f"The {kind.lower()} probe of {obj} fails because {why}, so Kubernetes {effect}",
            explains=POD_EFFECTS if role == CAUSE else [],
            evidence=refs,
            needs=[] if role == CAUSE else [f"logs of {obj} and what its health endpoint depends on"],
            actions=[
                Action(
                    description=f"Show the {kind.lower()} probe and the ports the container declares",
                    command=f"kubectl get pod {self.pod} -n {self.ns} -o "
                    f"jsonpath='{{.spec.containers[*].{kind.lower()}Probe}} "
                    "{.spec.containers[*].ports}'",
                )
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

    def _listening_port(self) -> int | None:
        rx = re.compile(r"(?:listening|serving|started|bound|running)\b.*?(?:port\s*|:)(\d{2,5})\b", re.I)
        for item in self.logs:
            for rec in item.data.get("records") or ():
                m = rx.search(str(rec.get("msg") or ""))
                if m:
                    return int(m.group(1))
        return None

    def _started_late(self) -> bool:
        """Whether the application's logs show it still starting when the probe gave up: a slow start."""
        for item in self.logs:
            for rec in item.data.get("records") or ():
                if re.search(r"warming|loading|migrat|initializ|starting", str(rec.get("msg") or ""), re.I):
                    return True
        return bool(self._liveness_kills(""))

    def _from_events(self) -> None:
        """What the pod's recent Warning events show that its status did not (or when there is no status)."""
        for ev in _warning_events(self.events):
            if not self.idx.recent(event_ts(ev)):
                continue
            reason = str(ev.data.get("reason") or "")
            msg = str(ev.data.get("message") or "")
            refs = [ref(ev, "message", msg)]
            if reason == "FailedScheduling" and not (
                {
                    "insufficient_resources",
                    "node_selector_mismatch",
                    "untolerated_taint",
                    "unbound_pvc",
                    "requests_exceed_nodes",
                    "nodes_unavailable",
                    "unschedulable",
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

    def _volume(self, reason: str, msg: str, refs: list[EvidenceRef], ev: EvidenceItem) -> None:
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
    order = {"resource_exhaustion": 0, "configuration_error": 1, "infrastructure": 2}
    return max(votes, key=lambda k: (votes[k], -order.get(k[0], 3)))


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Pod", "k8s/Event"})
def kubernetes_pods(evidence: EvidenceSet) -> list[Finding]:
    """Containers that crash, are OOMKilled, cannot pull their image or start; pods that cannot be scheduled;
    probes that fail; old restarts and evictions as benign history."""
    idx = kube_index(evidence)
    keys = set(idx.pods) | {(ns, name) for (kind, ns, name) in idx.events if kind == "Pod"}
    out: list[Finding] = []
    for ns, pod in sorted(keys):
        out.extend(_PodReader(idx, ns, pod).read())
    return out


# ------------------------------------------------------------------------------------------ nodes

_PRESSURE = {
    "MemoryPressure": ("memory", ["evicted", "oom_killed_nolimit", "memory_high", "oom_kill"]),
    "DiskPressure": ("disk", ["evicted", "disk_full", "image_pull_disk_full"]),
    "PIDPressure": ("process ids", ["evicted", "fork_failed"]),
}


def _pods_on(idx: KubeIndex, node: str) -> list[tuple[str, str, EvidenceItem]]:
    return idx.pods_by_node.get(node, [])


_USING = re.compile(
    r"Container (\S+) was using (\d+(?:\.\d+)?[A-Za-z]*)(?:, (?:request is|which exceeds its request of) (\S+?))?[,.]",
    re.I,
)


def _top_consumer(idx: KubeIndex, node: str) -> tuple[str, EvidenceRef] | None:
    """The container the kubelet's eviction messages say used the most on a node: who filled it up."""
    best: tuple[float, str, EvidenceRef] | None = None
    for ns, name, pod in _pods_on(idx, node):
        texts: list[tuple[str, EvidenceRef]] = []
        status = pod.data.get("status") or {}
        if status.get("message"):
            texts.append((str(status["message"]), ref(pod, "status.message", status["message"])))
        for e in idx.events_for("Pod", ns, name):
            if e.data.get("reason") == "Evicted":
                texts.append((str(e.data.get("message") or ""), ref(e, "message", e.data.get("message"))))
        for text, r in texts:
            for m in _USING.finditer(text):
                used = quantity(m.group(2)) or 0.0
                request = m.group(3)
                what = re.search(r"low on resource: ([\w-]+)", text)
                desc = (
                    f"container {m.group(1)} of Pod {ns}/{name} (using {m.group(2)}"
                    f"{', request ' + request if request else ''} of {what.group(1) if what else 'the resource'})"
                )
                if best is None or used > best[0]:
                    best = (used, desc, r)
    return (best[1], best[2]) if best else None


def _troubled(item: EvidenceItem) -> bool:
    status = item.data.get("status") or {}
    if status.get("phase") in ("Succeeded",):
        return False
    if status.get("reason") in ("Evicted", "NodeLost") or status.get("phase") in ("Unknown", "Failed"):
        return True
    return any(c.get("type") == "Ready" and c.get("status") != "True" for c in status.get("conditions") or ())


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Node", "k8s/Event"})
def kubernetes_nodes(evidence: EvidenceSet) -> list[Finding]:
    """Nodes NotReady or under memory/disk/PID pressure, from their conditions or events; recovered nodes benign."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    names = {ns_name(n)[1] for n in idx.of_kind("Node")} | {name for (k, _, name) in idx.events if k == "Node"}
    for name in sorted(names):
        item = idx.objects.get(("Node", "", name))
        evs = [e for e in _warning_events(idx.events_for("Node", "", name)) if idx.recent(event_ts(e))]
        affected = [(ns, p) for ns, p, pod in _pods_on(idx, name) if _troubled(pod)]
        tags = [f"node:{name}", f"host:{name}"] + [f"pod:{ns}/{p}" for ns, p in affected]
        node_obj = f"Node {name}"
        conds = ((item.data.get("status") or {}).get("conditions") or ()) if item else ()
        reported = False
        for i, c in enumerate(conds):
            ctype, cstatus = c.get("type"), c.get("status")
            since = parse_ts(c.get("lastTransitionTime"))
            cref = [ref(item, f"status.conditions.{i}.status", cstatus)] if item else []
            if c.get("message") and item:
                cref.append(ref(item, f"status.conditions.{i}.message", c.get("message")))
            if ctype == "Ready" and cstatus != "True":
                reported = True
                out.append(
                    _f(
                        "kubernetes_nodes",
                        role=CAUSE,
                        code="node_not_ready",
                        category=Category.INFRASTRUCTURE,
                        object=node_obj,
                        score=0.85,
                        ts=since,
                        tags=tags,
                        title=f"{node_obj} NotReady since {fmt_ts(since)} "
                        f"({c.get('reason') or 'Ready=' + str(cstatus)})",
                        mechanism=f"{node_obj} is NotReady ({c.get('reason') or cstatus}: "
                        f"{str(c.get('message') or 'kubelet stopped reporting')[:140]}), so its "
                        f"{len(affected)} pod(s) are not running or not ready",
                        explains=[*POD_EFFECTS, "evicted", "pod_unknown"],
                        evidence=cref + [ref(e, "message", e.data.get("message")) for e in evs[:2]],
                        actions=[
                            Action(
                                description="Show the node's conditions and kubelet status",
                                command=f"kubectl describe node {name}",
                            ),
                            Action(
                                description="Move the workloads off the node",
                                kind="write",
                                command=f"kubectl drain {name} --ignore-daemonsets --delete-emptydir-data",
                            ),
                        ],
                    )
                )
            elif (
                ctype == "Ready"
                and cstatus == "True"
                and since
                and idx.recent(since)
                and any(
                    str(e.data.get("reason")) in ("NodeNotReady", "NodeNotSchedulable")
                    for e in idx.events_for("Node", "", name)
                )
            ):
                out.append(
                    _f(
                        "kubernetes_nodes",
                        role=BENIGN,
                        code="node_recovered",
                        category=Category.HEALTHY,
                        object=node_obj,
                        ts=since,
                        tags=[f"node:{name}"],
                        title=f"{node_obj} was NotReady and recovered at {fmt_ts(since)}",
                        mechanism=f"a recovered fault: {node_obj} is Ready again since {fmt_ts(since)}",
                        evidence=cref,
                    )
                )
            elif ctype in _PRESSURE and cstatus == "True":
                reported = True
                what, effects = _PRESSURE[str(ctype)]
                top = _top_consumer(idx, name)
                if top:
                    cref = [*cref, top[1]]
                out.append(
                    _f(
                        "kubernetes_nodes",
                        role=CAUSE,
                        code=f"node_{str(ctype).lower().replace('pressure', '')}_pressure",
                        category=Category.RESOURCE_EXHAUSTION,
                        object=node_obj,
                        score=0.75,
                        ts=since,
                        tags=tags,
                        title=f"{node_obj} under {ctype} since {fmt_ts(since)}",
                        mechanism=f"{node_obj} ran low on {what} ({ctype}), so the kubelet evicts pods and "
                        f"refuses new ones" + (f"; the biggest consumer is {top[0]}" if top else ""),
                        explains=[
                            *effects,
                            "pod_not_ready",
                            "pod_restarts",
                            "replicas_unavailable",
                            "insufficient_resources",
                        ],
                        evidence=cref,
                        actions=[
                            Action(
                                description="Show the node's usage and its pods",
                                command=f"kubectl describe node {name}",
                            )
                        ],
                    )
                )
            elif ctype == "NetworkUnavailable" and cstatus == "True":
                reported = True
                out.append(
                    _f(
                        "kubernetes_nodes",
                        role=CAUSE,
                        code="node_network_unavailable",
                        category=Category.INFRASTRUCTURE,
                        object=node_obj,
                        score=0.8,
                        ts=since,
                        tags=tags,
                        title=f"{node_obj} network unavailable",
                        mechanism=f"{node_obj} has no working pod network (NetworkUnavailable: "
                        f"{c.get('message') or ''})",
                        explains=POD_EFFECTS,
                        evidence=cref,
                        actions=[Action(description="Show the node", command=f"kubectl describe node {name}")],
                    )
                )
        if reported or not evs:
            continue
        # no conditions say it, but the node's recent Warning events do
        reasons = {str(e.data.get("reason")): e for e in evs}
        if "NodeNotReady" in reasons or "Rebooted" in reasons or "NodeNotSchedulable" in reasons:
            e = reasons.get("NodeNotReady") or reasons.get("Rebooted") or reasons["NodeNotSchedulable"]
            out.append(
                _f(
                    "kubernetes_nodes",
                    role=CAUSE,
                    code="node_not_ready",
                    category=Category.INFRASTRUCTURE,
                    object=node_obj,
                    score=0.7,
                    ts=event_ts(e),
                    tags=tags,
                    title=f"{node_obj} {e.data.get('reason')}",
                    mechanism=f"{node_obj} went NotReady ({e.data.get('message') or e.data.get('reason')})",
                    explains=[*POD_EFFECTS, "evicted", "pod_unknown"],
                    evidence=[ref(e, "message", e.data.get("message"))],
                    actions=[Action(description="Show the node", command=f"kubectl describe node {name}")],
                )
            )
        elif "SystemOOM" in reasons or "OOMKilling" in reasons:
            e = reasons.get("SystemOOM") or reasons["OOMKilling"]
            out.append(
                _f(
                    "kubernetes_nodes",
                    role=CAUSE,
                    code="node_memory_pressure",
                    category=Category.RESOURCE_EXHAUSTION,
                    object=node_obj,
                    score=0.7,
                    ts=event_ts(e),
                    tags=tags,
                    title=f"{node_obj} system OOM",
                    mechanism=f"{node_obj} ran out of memory and the kernel OOM killer killed processes "
                    f"({str(e.data.get('message') or '')[:120]})",
                    explains=["evicted", "oom_killed_nolimit", "oom_kill", "memory_high", *POD_EFFECTS],
                    evidence=[ref(e, "message", e.data.get("message"))],
                    actions=[Action(description="Show the node", command=f"kubectl describe node {name}")],
                )
            )
        elif reasons.keys() & {"FreeDiskSpaceFailed", "ImageGCFailed", "EvictionThresholdMet"}:
            e = next(
                reasons[r] for r in ("FreeDiskSpaceFailed", "ImageGCFailed", "EvictionThresholdMet") if r in reasons
            )
            out.append(
                _f(
                    "kubernetes_nodes",
                    role=CAUSE,
                    code="node_disk_pressure",
                    category=Category.RESOURCE_EXHAUSTION,
                    object=node_obj,
                    score=0.7,
                    ts=event_ts(e),
                    tags=tags,
                    title=f"{node_obj} {e.data.get('reason')}",
                    mechanism=f"{node_obj} is running out of resources "
                    f"({e.data.get('message') or e.data.get('reason')})",
                    explains=["evicted", "disk_full", "image_pull_disk_full", *POD_EFFECTS],
                    evidence=[ref(e, "message", e.data.get("message"))],
                    actions=[Action(description="Show the node", command=f"kubectl describe node {name}")],
                )
            )
    return out


# ------------------------------------------------------------------------------------------ workloads


def _cond(item: EvidenceItem, ctype: str) -> tuple[int, dict[str, Any]] | None:
    for i, c in enumerate((item.data.get("status") or {}).get("conditions") or ()):
        if c.get("type") == ctype:
            return i, c
    return None


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Deployment", "k8s/StatefulSet", "k8s/DaemonSet"})
def kubernetes_rollouts(evidence: EvidenceSet) -> list[Finding]:
    """Rollouts stuck past their progress deadline and workloads short of ready replicas: symptoms of whatever
    stops their pods."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for kind in ("Deployment", "StatefulSet", "DaemonSet"):
        for item in idx.of_kind(kind):
            ns, name = ns_name(item)
            spec, status = item.data.get("spec") or {}, item.data.get("status") or {}
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or meta(item).get("labels")
            tags = workload_tags(ns, name, labels)
            obj = f"{kind} {ns}/{name}"
            needs = [f"pods of {obj} (status, events, logs): kubectl get pods -n {ns} -l <its selector>"]
            prog = _cond(item, "Progressing")
            if prog and prog[1].get("reason") == "ProgressDeadlineExceeded":
                i, c = prog
                out.append(
                    _f(
                        "kubernetes_rollouts",
                        role=SYMPTOM,
                        code="rollout_stuck",
                        category=Category.UNKNOWN,
                        object=obj,
                        score=0.6,
                        ts=parse_ts(c.get("lastTransitionTime")),
                        tags=tags,
                        title=f"{obj} rollout stuck (ProgressDeadlineExceeded)",
                        mechanism=f"The rollout of {obj} made no progress within its deadline: "
                        f"{c.get('message') or ''}",
                        evidence=[ref(item, f"status.conditions.{i}.reason", c.get("reason"))],
                        needs=needs,
                        actions=[
                            Action(
                                description="Show the rollout and its new pods",
                                command=f"kubectl rollout status {_kubectl_kind(kind)}/{name} -n {ns} --timeout=5s",
                            )
                        ],
                    )
                )
                continue
            if kind == "DaemonSet":
                want, have, field = (
                    status.get("desiredNumberScheduled"),
                    status.get("numberReady"),
                    "status.numberReady",
                )
            else:
                want = spec.get("replicas", 1)
                have = status.get("availableReplicas" if kind == "Deployment" else "readyReplicas", 0) or 0
                field = "status.availableReplicas" if kind == "Deployment" else "status.readyReplicas"
            if isinstance(want, int) and isinstance(have, int) and want > 0 and have < want:
                avail = _cond(item, "Available")
                ts = parse_ts(avail[1].get("lastTransitionTime")) if avail else None
                refs = [ref(item, field, have)] if field.split(".")[-1] in status else [ref(item, "status", status)]
                out.append(
                    _f(
                        "kubernetes_rollouts",
                        role=SYMPTOM,
                        code="replicas_unavailable",
                        category=Category.UNKNOWN,
                        object=obj,
                        score=0.5 if have else 0.65,
                        ts=ts,
                        tags=tags,
                        title=f"{obj} has {have}/{want} replicas available",
                        mechanism=f"{obj} runs {have} of {want} desired replicas available",
                        evidence=refs,
                        needs=needs,
                    )
                )
    return out


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Service", "k8s/Endpoints"})
def kubernetes_services(evidence: EvidenceSet) -> list[Finding]:
    """Services that route to nothing: a selector matching no pod (configuration) or matching pods none of which
    is ready (a symptom of the pods' own fault); a targetPort no selected pod declares."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for svc in idx.of_kind("Service"):
        ns, name = ns_name(svc)
        spec = svc.data.get("spec") or {}
        selector = spec.get("selector") or {}
        if not selector or spec.get("type") == "ExternalName":
            continue
        pods = idx.pods_by_ns.get(ns, [])
        matching = [
            (pname, p)
            for pname, p in pods
            if all((meta(p).get("labels") or {}).get(k) == v for k, v in selector.items())
        ]
        ep = idx.objects.get(("Endpoints", ns, name))
        ready_addrs = None
        if ep is not None:
            ready_addrs = sum(len(s.get("addresses") or ()) for s in ep.data.get("subsets") or ())
        obj = f"Service {ns}/{name}"
        tags = [f"service:{name}", f"namespace:{ns}"]
        sel = ",".join(f"{k}={v}" for k, v in selector.items())
        if ready_addrs == 0 or (ep is None and pods and not matching):
            if pods and not matching:
                near = sorted({app_name(meta(p).get("labels")) or "" for _, p in pods} - {""})[:3]
                out.append(
                    _f(
                        "kubernetes_services",
                        role=CAUSE,
                        code="service_selector_mismatch",
                        category=Category.CONFIGURATION_ERROR,
                        object=obj,
                        score=0.8 if ep is not None else 0.65,
                        tags=tags + [f"workload:{ns}/{n}" for n in near],
                        title=f"{obj} selects no pods (selector {sel})",
                        mechanism=f"{obj} has no endpoints because its selector {sel} matches none of the "
                        f"{len(pods)} pods in {ns}" + (f" (their app labels: {', '.join(near)})" if near else ""),
                        explains=[
                            "no_ready_endpoints",
                            "http_5xx",
                            "http_503",
                            "upstream_unavailable",
                            "connection_refused",
                            "error_rate",
                            "log_errors",
                            "latency",
                        ],
                        evidence=[ref(svc, "spec.selector", selector)]
                        + ([ref(ep, "subsets", ep.data.get("subsets"))] if ep and "subsets" in ep.data else []),
                        actions=[
                            Action(
                                description="Compare the selector with the pods' labels",
                                command=f"kubectl get pods -n {ns} --show-labels; kubectl get endpoints {name} -n {ns}",
                            )
                        ],
                    )
                )
            elif matching:
                out.append(
                    _f(
                        "kubernetes_services",
                        role=SYMPTOM,
                        code="no_ready_endpoints",
                        category=Category.UNKNOWN,
                        object=obj,
                        score=0.6,
                        tags=tags + [f"pod:{ns}/{p}" for p, _ in matching[:10]],
                        title=f"{obj} has no ready endpoints ({len(matching)} selected pods, none ready)",
                        mechanism=f"{obj} routes to nothing: none of its {len(matching)} pods is ready",
                        evidence=[ref(ep, None, ep.data.get("subsets")) if ep else ref(svc, "spec.selector", selector)],
                        needs=[f"status and logs of the pods behind {obj}"],
                    )
                )
            continue
        # a targetPort that none of the selected pods declares
        declared: set[Any] = set()
        for _, p in matching:
            for c in (p.data.get("spec") or {}).get("containers") or ():
                for port in c.get("ports") or ():
                    declared.update((port.get("containerPort"), port.get("name")))
        declared.discard(None)
        for i, port in enumerate(spec.get("ports") or ()):
            target = port.get("targetPort", port.get("port"))
            if declared and target is not None and target not in declared:
                out.append(
                    _f(
                        "kubernetes_services",
                        role=CAUSE,
                        code="service_target_port_mismatch",
                        category=Category.CONFIGURATION_ERROR,
                        object=obj,
                        score=0.6,
                        tags=tags,
                        title=f"{obj} targetPort {target} not declared by its pods",
                        mechanism=f"{obj} sends traffic to port {target}, which none of its pods declares "
                        f"(they declare {', '.join(sorted(str(d) for d in declared))})",
                        explains=[
                            "http_5xx",
                            "http_503",
                            "upstream_unavailable",
                            "connection_refused",
                            "error_rate",
                            "log_errors",
                        ],
                        evidence=[ref(svc, f"spec.ports.{i}.targetPort", target)],
                        actions=[
                            Action(
                                description="Show the service and its endpoints",
                                command=f"kubectl describe service {name} -n {ns}",
                            )
                        ],
                    )
                )
    return out


# ------------------------------------------------------------------------------------------ capacity


@ANALYZERS.analyzer(
    domain=K8S,
    reads={"k8s/ResourceQuota", "k8s/HorizontalPodAutoscaler", "k8s/PersistentVolumeClaim", "k8s/Event"},
)
def kubernetes_capacity(evidence: EvidenceSet) -> list[Finding]:
    """Quotas that refuse pods, HPAs pinned at their maximum, PersistentVolumeClaims that cannot bind."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    # FailedCreate on controllers: quota exceeded, or admission refusing the pod spec
    for (kind, ns, name), evs in idx.events.items():
        if kind not in ("ReplicaSet", "Job", "StatefulSet", "DaemonSet", "Deployment", "CronJob"):
            continue
        fails = [e for e in _warning_events(evs) if e.data.get("reason") == "FailedCreate" and idx.recent(event_ts(e))]
        if not fails:
            continue
        e = fails[-1]
        msg = str(e.data.get("message") or "")
        workload = _RS_TO_DEPLOY(name) if kind == "ReplicaSet" else name
        tags = workload_tags(ns, workload)
        quota = re.search(r"exceeded quota: ([\w.-]+)", msg)
        if quota:
            qitem = idx.objects.get(("ResourceQuota", ns, quota.group(1)))
            refs = [ref(e, "message", msg)] + (
                [ref(qitem, "status.used", (qitem.data.get("status") or {}).get("used"))]
                if qitem and "status" in qitem.data
                else []
            )
            detail = re.search(r"requested: ([^,]+(?:,[^,]+)*?), used: ([^,]+(?:,[^,]+)*?), limited: (.+)$", msg)
            out.append(
                _f(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="quota_exceeded",
                    category=Category.RESOURCE_EXHAUSTION,
                    object=f"ResourceQuota {ns}/{quota.group(1)}",
                    score=0.85,
                    ts=event_ts(e),
                    tags=[*tags, f"quota:{ns}/{quota.group(1)}"],
                    title=f"ResourceQuota {ns}/{quota.group(1)} exhausted: {kind} {ns}/{name} cannot create pods",
                    mechanism=f"ResourceQuota {ns}/{quota.group(1)} is used up"
                    + (
                        f" (requested {detail.group(1)}, used {detail.group(2)}, limited {detail.group(3)})"
                        if detail
                        else ""
                    )
                    + f", so {kind} {ns}/{name} cannot create its pods",
                    explains=[
                        "replicas_unavailable",
                        "rollout_stuck",
                        "job_failed",
                        "no_ready_endpoints",
                        "hpa_at_max",
                    ],
                    evidence=refs,
                    actions=[
                        Action(
                            description="Show the quota's usage",
                            command=f"kubectl describe resourcequota {quota.group(1)} -n {ns}",
                        )
                    ],
                )
            )
        else:
            category = Category.CONFIGURATION_ERROR
            if re.search(r"serviceaccount|forbidden|violates|must specify|invalid|admission|denied", msg, re.I):
                why = f"the API server refuses its pod spec: {msg[:200]}"
            else:
                why = msg[:200]
                category = Category.UNKNOWN
            out.append(
                _f(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="pod_create_refused",
                    category=category,
                    object=f"{kind} {ns}/{name}",
                    score=0.7 if category != Category.UNKNOWN else 0.45,
                    ts=event_ts(e),
                    tags=tags,
                    title=f"{kind} {ns}/{name} cannot create pods",
                    mechanism=f"{kind} {ns}/{name} cannot create pods because {why}",
                    explains=["replicas_unavailable", "rollout_stuck", "job_failed", "no_ready_endpoints"],
                    evidence=[ref(e, "message", msg)],
                    actions=[
                        Action(
                            description="Show the controller's events",
                            command=f"kubectl describe {kind.lower()} {name} -n {ns}",
                        )
                    ],
                )
            )
    # quotas at their hard limit with nothing refused are worth a note, not a cause
    for q in idx.of_kind("ResourceQuota"):
        ns, name = ns_name(q)
        status = q.data.get("status") or {}
        hard, used = status.get("hard") or {}, status.get("used") or {}
        full = [r for r, h in hard.items() if _at_limit(quantity(used.get(r)), quantity(h))]
        if full and not any(f.code == "quota_exceeded" and f.object.endswith(f"{ns}/{name}") for f in out):
            out.append(
                _f(
                    "kubernetes_capacity",
                    role=BENIGN,
                    code="quota_full",
                    category=Category.HEALTHY,
                    object=f"ResourceQuota {ns}/{name}",
                    tags=[f"quota:{ns}/{name}", f"namespace:{ns}"],
                    title=f"ResourceQuota {ns}/{name} at its limit for {', '.join(full)}",
                    mechanism="a quota at its limit refused nothing in this evidence (no FailedCreate events)",
                    evidence=[ref(q, "status.used", used)],
                )
            )
    for hpa in idx.of_kind("HorizontalPodAutoscaler"):
        ns, name = ns_name(hpa)
        spec, status = hpa.data.get("spec") or {}, hpa.data.get("status") or {}
        target = (spec.get("scaleTargetRef") or {}).get("name") or name
        tags = [*workload_tags(ns, str(target)), f"hpa:{ns}/{name}"]
        maxr, cur, desired = spec.get("maxReplicas"), status.get("currentReplicas"), status.get("desiredReplicas")
        limited = _cond(hpa, "ScalingLimited")
        active = _cond(hpa, "ScalingActive")
        if active and active[1].get("status") == "False":
            i, c = active
            out.append(
                _f(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="hpa_cannot_scale",
                    category=Category.CONFIGURATION_ERROR,
                    object=f"HorizontalPodAutoscaler {ns}/{name}",
                    score=0.45,
                    ts=parse_ts(c.get("lastTransitionTime")),
                    tags=tags,
                    title=f"HPA {ns}/{name} cannot compute replicas ({c.get('reason')})",
                    mechanism=f"HPA {ns}/{name} cannot scale {target}: {str(c.get('message') or '')[:160]}",
                    explains=["latency", "cpu_high", "cpu_throttled", "http_5xx", "error_rate"],
                    evidence=[ref(hpa, f"status.conditions.{i}.message", c.get("message"))],
                    actions=[Action(description="Show the HPA", command=f"kubectl describe hpa {name} -n {ns}")],
                )
            )
        elif (
            isinstance(maxr, int)
            and isinstance(cur, int)
            and cur >= maxr
            and ((isinstance(desired, int) and desired >= maxr) or (limited and limited[1].get("status") == "True"))
        ):
            out.append(
                _f(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="hpa_at_max",
                    category=Category.RESOURCE_EXHAUSTION,
                    object=f"HorizontalPodAutoscaler {ns}/{name}",
                    score=0.45,
                    tags=tags,
                    ts=parse_ts(limited[1].get("lastTransitionTime")) if limited else None,
                    title=f"HPA {ns}/{name} pinned at maxReplicas {maxr}",
                    mechanism=f"{target} is saturated: its HPA {ns}/{name} is at maxReplicas {maxr} and wants more, "
                    "so load beyond that capacity queues up",
                    explains=["latency", "cpu_high", "cpu_throttled", "http_5xx", "error_rate", "queue_backlog"],
                    evidence=[ref(hpa, "status.currentReplicas", cur), ref(hpa, "spec.maxReplicas", maxr)],
                    actions=[
                        Action(
                            description="Show the HPA's metrics and events",
                            command=f"kubectl describe hpa {name} -n {ns}",
                        ),
                        Action(
                            description="Raise the ceiling if the nodes have room",
                            kind="write",
                            command=f'kubectl patch hpa {name} -n {ns} -p \'{{"spec":{{"maxReplicas":{maxr * 2}}}}}\'',
                        ),
                    ],
                )
            )
    for pvc in idx.of_kind("PersistentVolumeClaim"):
        ns, name = ns_name(pvc)
        phase = (pvc.data.get("status") or {}).get("phase")
        if phase not in ("Pending", "Lost"):
            continue
        evs = _warning_events(idx.events_for("PersistentVolumeClaim", ns, name))
        all_evs = idx.events_for("PersistentVolumeClaim", ns, name)
        tags = [f"pvc:{ns}/{name}", f"namespace:{ns}"]
        tags += [
            t
            for (pns, p), item in idx.pods.items()
            if pns == ns and (name in _claims_of(item) or name.endswith(f"-{p}"))
            for t in pod_tags(ns, p, item)[:1]
        ]
        tags += [f"pod:{ns}/{p}" for (k, pns, p) in idx.events if k == "Pod" and pns == ns and name.endswith(f"-{p}")]
        if phase == "Pending" and not evs and any(e.data.get("reason") == "WaitForFirstConsumer" for e in all_evs):
            out.append(
                _f(
                    "kubernetes_capacity",
                    role=BENIGN,
                    code="pvc_waiting_for_consumer",
                    category=Category.HEALTHY,
                    object=f"PersistentVolumeClaim {ns}/{name}",
                    tags=tags,
                    title=f"PersistentVolumeClaim {ns}/{name} Pending (WaitForFirstConsumer)",
                    mechanism="normal: the storage class binds the volume only when a pod uses it",
                    evidence=[ref(pvc, "status.phase", phase)],
                )
            )
            continue
        msg = str(evs[-1].data.get("message") or "") if evs else ""
        if phase == "Lost":
            category, why = Category.INFRASTRUCTURE, "its PersistentVolume is gone (Lost)"
        elif re.search(
            r"storageclass.*not found|not found|invalid|unsupported|no persistent volumes available", msg, re.I
        ):
            category, why = Category.CONFIGURATION_ERROR, f"provisioning fails: {msg[:160]}"
        elif re.search(r"quota|limit", msg, re.I):
            category, why = Category.RESOURCE_EXHAUSTION, f"provisioning is refused: {msg[:160]}"
        elif msg:
            category, why = Category.INFRASTRUCTURE, f"provisioning fails: {msg[:160]}"
        else:
            category, why = Category.CONFIGURATION_ERROR, "no volume matches it and nothing provisions one"
        out.append(
            _f(
                "kubernetes_capacity",
                role=CAUSE,
                code="pvc_pending",
                category=category,
                object=f"PersistentVolumeClaim {ns}/{name}",
                score=0.75 if msg else 0.55,
                ts=event_ts(evs[0]) if evs else None,
                tags=tags,
                title=f"PersistentVolumeClaim {ns}/{name} {phase}",
                mechanism=f"PersistentVolumeClaim {ns}/{name} stays {phase} because {why}, so pods that "
                f"mount it cannot start",
                explains=["unbound_pvc", *POD_EFFECTS],
                evidence=[ref(pvc, "status.phase", phase)]
                + [ref(e, "message", e.data.get("message")) for e in evs[-1:]],
                actions=[
                    Action(
                        description="Show the claim and its storage class",
                        command=f"kubectl describe pvc {name} -n {ns}",
                    )
                ],
            )
        )
    return out


def _at_limit(used: float | None, hard: float | None) -> bool:
    return used is not None and bool(hard) and hard is not None and used >= hard


def _claims_of(item: EvidenceItem) -> list[str]:
    vols = (item.data.get("spec") or {}).get("volumes") or ()
    return [
        str(v["persistentVolumeClaim"].get("claimName"))
        for v in vols
        if isinstance(v, dict) and v.get("persistentVolumeClaim")
    ]


def _RS_TO_DEPLOY(name: str) -> str:
    m = re.match(r"^(?P<base>.+)-[a-z0-9]{6,10}$", name)
    return m.group("base") if m else name


# ------------------------------------------------------------------------------------------ jobs


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Job"})
def kubernetes_jobs(evidence: EvidenceSet) -> list[Finding]:
    """Failed Jobs (backoff limit, deadline): a symptom of their pods' crash where the pods are in the evidence,
    else a cause to look into; old failures and completed Jobs are benign."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for job in idx.of_kind("Job"):
        ns, name = ns_name(job)
        failed = _cond(job, "Failed")
        complete = _cond(job, "Complete")
        if complete and complete[1].get("status") == "True" and not (failed and failed[1].get("status") == "True"):
            i, c = complete
            out.append(
                _f(
                    "kubernetes_jobs",
                    role=BENIGN,
                    code="job_completed",
                    category=Category.HEALTHY,
                    object=f"Job {ns}/{name}",
                    ts=parse_ts(c.get("lastTransitionTime")),
                    tags=workload_tags(ns, name, meta(job).get("labels")),
                    title=f"Job {ns}/{name} Completed ({(job.data.get('status') or {}).get('succeeded', 1)} succeeded)",
                    mechanism="a Job that completed successfully; its pods in phase Succeeded are done, not failing",
                    evidence=[ref(job, f"status.conditions.{i}.type", "Complete")],
                )
            )
            continue
        if not failed or failed[1].get("status") != "True":
            continue
        i, c = failed
        ts = parse_ts(c.get("lastTransitionTime"))
        obj = f"Job {ns}/{name}"
        tags = workload_tags(ns, name, meta(job).get("labels")) + [
            f"pod:{pns}/{p}"
            for (pns, p), item in idx.pods.items()
            if pns == ns and owner_workload(item) == ("Job", name)
        ]
        refs = [ref(job, f"status.conditions.{i}.reason", c.get("reason"))]
        if c.get("message"):
            refs.append(ref(job, f"status.conditions.{i}.message", c.get("message")))
        if not idx.recent(ts, 6 * RECENT_S):
            out.append(
                _f(
                    "kubernetes_jobs",
                    role=BENIGN,
                    code="old_job_failure",
                    category=Category.HEALTHY,
                    object=obj,
                    ts=ts,
                    tags=tags,
                    title=f"{obj} failed at {fmt_ts(ts)} ({c.get('reason')})",
                    mechanism="an old Job failure, long before the evidence ends",
                    evidence=refs,
                )
            )
            continue
        has_pods = any(t.startswith("pod:") for t in tags)
        deadline = c.get("reason") == "DeadlineExceeded"
        out.append(
            _f(
                "kubernetes_jobs",
                role=SYMPTOM if has_pods else CAUSE,
                code="job_failed",
                category=Category.UNKNOWN if has_pods or deadline else Category.CODE_DEFECT,
                object=obj,
                score=0.6 if has_pods else 0.45,
                ts=ts,
                tags=tags,
                title=f"{obj} failed ({c.get('reason')})",
                mechanism=f"{obj} failed: {c.get('message') or c.get('reason')}"
                + ("" if has_pods else ": its pods exit with errors (their logs say why)"),
                explains=[] if has_pods else ["alert:*"],
                evidence=refs,
                needs=[f"logs of the pods of {obj}: kubectl logs job/{name} -n {ns}"],
                actions=[
                    Action(description="Read the job's pod logs", command=f"kubectl logs job/{name} -n {ns} --tail=100")
                ],
            )
        )
    return out


# ------------------------------------------------------------------------------------------ other events


_DNS = re.compile(r"no such host|NXDOMAIN|server misbehaving|could not resolve|lookup \S+ on [\d.:]+:53", re.I)


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Event"})
def kubernetes_events(evidence: EvidenceSet) -> list[Finding]:
    """Warning events the object analyzers do not read: DNS failures and load balancers that cannot be synced."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for (kind, ns, name), evs in idx.events.items():
        for e in _warning_events(evs):
            if not idx.recent(event_ts(e)):
                continue
            reason = str(e.data.get("reason") or "")
            msg = str(e.data.get("message") or "")
            if reason == "DNSConfigForming":
                continue  # "Nameserver limits were exceeded": noise on most nodes
            tags = [f"{kind.lower()}:{ns}/{name}" if ns else f"{kind.lower()}:{name}", f"namespace:{ns}"]
            if kind == "Pod":
                tags = pod_tags(ns, name, idx.pods.get((ns, name)))
            if _DNS.search(msg) and kind != "Pod":
                timeout = re.search(r"i/o timeout|server misbehaving|timed out", msg, re.I)
                out.append(
                    _f(
                        "kubernetes_events",
                        role=CAUSE,
                        code="dns_failure",
                        category=Category.INFRASTRUCTURE if timeout else Category.CONFIGURATION_ERROR,
                        object=f"{kind} {ns}/{name}",
                        score=0.6,
                        ts=event_ts(e),
                        tags=tags,
                        title=f"DNS lookups fail for {kind} {ns}/{name}",
                        mechanism=f"name resolution fails for {kind} {ns}/{name}: "
                        + ("the cluster DNS does not answer" if timeout else "the name does not exist")
                        + f" ({msg[:140]})",
                        explains=[
                            "dns_failure",
                            "upstream_unavailable",
                            "connection_refused",
                            "log_errors",
                            "http_5xx",
                        ],
                        evidence=[ref(e, "message", msg)],
                        actions=[
                            Action(
                                description="Check the cluster DNS",
                                command="kubectl -n kube-system get pods -l k8s-app=kube-dns",
                            )
                        ],
                    )
                )
            elif reason in ("SyncLoadBalancerFailed", "FailedToCreateLoadBalancer", "LoadBalancerUpdateFailed"):
                out.append(
                    _f(
                        "kubernetes_events",
                        role=CAUSE,
                        code="load_balancer_failed",
                        category=Category.INFRASTRUCTURE,
                        object=f"{kind} {ns}/{name}",
                        score=0.65,
                        ts=event_ts(e),
                        tags=[*tags, f"service:{name}"],
                        title=f"{kind} {ns}/{name} load balancer cannot be synced",
                        mechanism=f"the cloud load balancer of {kind} {ns}/{name} cannot be created or "
                        f"updated: {msg[:160]}",
                        explains=["http_5xx", "upstream_unavailable", "connection_refused", "latency"],
                        evidence=[ref(e, "message", msg)],
                        actions=[
                            Action(
                                description="Show the service's events",
                                command=f"kubectl describe service {name} -n {ns}",
                            )
                        ],
                    )
                )
    return out
