"""Routing: requests for one path that a proxy started sending to another backend, which answers them with errors.

A proxy's access log says which backend served each request (ingress-nginx `[ns-service-port]`, Envoy/Istio's
upstream cluster or its `NR` no-route flag, HAProxy `backend/server`, an ALB's target group, Traefik's router).
When the requests for one path prefix went to backend A and, from a moment on, go to backend B (often the
catch-all or the default backend) and fail there, the routing rule changed: a configuration error in the rule,
not a fault of A (unchanged) or B (answering as it should for a path it does not serve). An Ingress in the
evidence says which rule: the path that still points at A but no longer matches what clients ask for (a typo),
or A's path removed; an event on it at that moment is the change.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from diagnosis.analyzers._common import fmt_ts, now_of, service_of
from diagnosis.analyzers._kube import event_ts, meta, ns_name
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import parse_ts

MIN_SIDE = 5  # requests on each side of the change (fewer is a blip, not a route)
DOMINANT = 0.8  # share of one backend that makes it "the" backend of a prefix
ERROR_RISE = 0.5  # the failing share must rise at least this much after the change
CHANGE_WINDOW_S = 15 * 60  # an Ingress change this long before (or 2 min after) the move is the move's change
STOPPED_AFTER_S = 15 * 60
_PROBE_LINES = 200  # lines read to decide whether a log is an access log with backends at all

# "no backend": the proxy had no rule for the request (ingress-nginx, Envoy NR, HAProxy <NOSRV>, ALB default)
_NO_ROUTE = {
    "upstream-default-backend",
    "default-http-backend",
    "default-backend",
    "(no route)",
    "(fixed-response)",
}

# ingress-nginx: ... "GET /p HTTP/1.1" 404 12 "ref" "ua" 48 0.002 [ns-svc-80] [alt] 10.0.0.1:8080 ...
_NGINX = re.compile(
    r"\"(?P<method>[A-Z]+) (?P<path>\S+) [^\"]*\" (?P<status>\d{3}) \d+ \"[^\"]*\" \"[^\"]*\" \d+ [\d.]+ "
    r"\[(?P<backend>[^\]]*)\]"
)
# Envoy / Istio default format: "GET /p HTTP/1.1" 404 NR ... "authority" "upstream_host" [upstream_cluster ...]
_ENVOY = re.compile(
    r"\"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+\" (?P<status>\d{3}) (?P<flags>[A-Z,]+|-) "
    r".*\"[^\"]*\" \"(?P<host>[^\"]*)\"(?:\s+(?P<cluster>[^\s\"]+))?"
)
# HAProxy HTTP log: ... fe_https~ be_api/api-05 0/0/1/178/179 200 5622 ... "GET /p HTTP/1.1"
_HAPROXY = re.compile(
    r"\] \S+ (?P<backend>[^/\s]+)/(?P<server>\S+) -?\d+/-?\d+/-?\d+/-?\d+/\+?-?\d+ (?P<status>\d{3}) "
    r".*\"(?P<method>[A-Z]+) (?P<path>\S+)"
)
# AWS ALB: type time elb client target rt rt rt elb_status target_status rx tx "GET https://h:443/p HTTP/1.1"
# "ua" cipher proto target_group_arn ...
_ALB = re.compile(
    r"^(?:https?|h2|grpcs|wss?) \S+ \S+ \S+ \S+ \S+ \S+ \S+ (?P<status>\d{3}|-) \S+ \d+ \d+ "
    r"\"(?P<method>[A-Z-]+) (?P<path>\S+) [^\"]*\" \"[^\"]*\" \S+ \S+ (?P<tg>\S+)"
)
# Traefik common log: ... "GET /p HTTP/1.1" 404 19 "-" "-" 3 "router@provider" "http://10.0.0.1:80" 0ms
_TRAEFIK = re.compile(
    r"\"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+\" (?P<status>\d{3}) \S+ \"[^\"]*\" \"[^\"]*\" \d+ "
    r"\"(?P<router>[^\"]*)\" \"(?P<server>[^\"]*)\" \d+ms"
)
_CLUSTER = re.compile(r"^(?:outbound|inbound)\|\d*\|[^|]*\|(?P<svc>[^|\s]+)$")


@dataclass(slots=True)
class Hit:
    ts: float
    prefix: str
    path: str
    status: int
    backend: str
    item: EvidenceItem
    line: int | None
    msg: str


def _prefix(path: str) -> str:
    """The route a path belongs to: its first segment (`/account/orders?x=1` -> `/account`)."""
    if not path.startswith("/"):  # an absolute URL (ALB): drop scheme and host
        rest = path.split("://", 1)[-1]
        path = rest[rest.find("/") :] if "/" in rest else "/"
    seg = path[1:].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return "/" + seg if seg else "/"


def _nginx(m: re.Match[str]) -> tuple[str, int, str] | None:
    return m["path"], int(m["status"]), m["backend"] or "(no route)"


def _traefik(m: re.Match[str]) -> tuple[str, int, str] | None:
    router = m["router"]
    return m["path"], int(m["status"]), router if router not in ("", "-") else "(no route)"


def _haproxy(m: re.Match[str]) -> tuple[str, int, str] | None:
    return m["path"], int(m["status"]), m["backend"] if m["server"] != "<NOSRV>" else "(no route)"


def _alb(m: re.Match[str]) -> tuple[str, int, str] | None:
    if m["status"] == "-":
        return None
    tg = m["tg"]
    name = tg.split("targetgroup/", 1)[1].split("/", 1)[0] if "targetgroup/" in tg else "(fixed-response)"
    return m["path"], int(m["status"]), name


def _envoy(m: re.Match[str]) -> tuple[str, int, str] | None:
    if "NR" in m["flags"].split(","):
        return m["path"], int(m["status"]), "(no route)"
    cm = _CLUSTER.match(m["cluster"] or "")
    backend = cm["svc"].split(".")[0] if cm else (m["cluster"] or m["host"])
    if backend in ("", "-"):
        return None
    return m["path"], int(m["status"]), backend


Reader = tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, int, str] | None]]
# the most specific first: an ingress-nginx line also reads as a generic one
_READERS: list[Reader] = [(_NGINX, _nginx), (_TRAEFIK, _traefik), (_HAPROXY, _haproxy), (_ALB, _alb), (_ENVOY, _envoy)]


def _parse(msg: str, readers: list[Reader] = _READERS) -> tuple[str, int, str] | None:
    """(path, status, backend) of one access-log line that names its backend, else None."""
    if "HTTP/" not in msg:
        return None
    for rx, read in readers:
        m = rx.search(msg)
        if m:
            return read(m)
    return None


def _reader_of(records: Any) -> list[Reader] | None:
    """The access-log format of a log (from its first lines), or None when it names no backends."""
    for r in records[:_PROBE_LINES]:
        msg = str(r.get("msg") or "")
        if "HTTP/" not in msg:
            continue
        for reader in _READERS:
            m = reader[0].search(msg)
            if m and reader[1](m):
                return [reader]
    return None


def _hits(evidence: EvidenceSet) -> dict[str, list[Hit]]:
    """The requests of every access log that names backends, by path prefix."""
    by_prefix: dict[str, list[Hit]] = {}
    for item in evidence.kind("log"):
        records = item.data.get("records") or ()
        readers = _reader_of(records)
        if readers is None:
            continue
        rows: dict[str, list[tuple[float, str, int, str, dict[str, Any]]]] = {}
        backends: dict[str, set[str]] = {}
        for r in records:
            ts = r.get("ts")
            if ts is None:
                continue
            parsed = _parse(str(r.get("msg") or ""), readers)
            if parsed is None:
                continue
            path, status, backend = parsed
            p = _prefix(path)
            rows.setdefault(p, []).append((float(ts), path, status, backend, r))
            backends.setdefault(p, set()).add(backend)
        # only a prefix served by more than one backend can have moved
        for p, got in rows.items():
            if len(backends[p]) > 1:
                by_prefix.setdefault(p, []).extend(
                    Hit(ts, p, path, status, be, item, r.get("line"), str(r.get("msg") or ""))
                    for ts, path, status, be, r in got
                )
    return by_prefix


def _failing(h: Hit) -> bool:
    return h.status >= 500 or h.status in (404, 421)


@dataclass
class Move:
    prefix: str
    old: str
    new: str
    at: float
    before: list[Hit]
    after: list[Hit]

    def err_share(self, hits: list[Hit]) -> float:
        return sum(_failing(h) for h in hits) / len(hits)


def _move(prefix: str, hits: list[Hit]) -> Move | None:
    """The moment the prefix's requests went from one dominant backend to another, when they fail after it."""
    hits.sort(key=lambda h: h.ts)
    if len(hits) < 2 * MIN_SIDE:
        return None
    tail = hits[-max(MIN_SIDE, len(hits) // 4) :]
    new, n_new = Counter(h.backend for h in tail).most_common(1)[0]
    if n_new < DOMINANT * len(tail):
        return None
    # the change: the first request to `new` after which `new` stays dominant
    start = None
    for i, h in enumerate(hits):
        if h.backend != new:
            continue
        after = hits[i:]
        if sum(x.backend == new for x in after) >= DOMINANT * len(after):
            start = i
            break
    if start is None or start < MIN_SIDE or len(hits) - start < MIN_SIDE:
        return None
    before, after = hits[:start], hits[start:]
    old, n_old = Counter(h.backend for h in before).most_common(1)[0]
    if old == new or n_old < DOMINANT * len(before):
        return None
    mv = Move(prefix, old, new, after[0].ts, before, after)
    if mv.err_share(after) - mv.err_share(before) < ERROR_RISE:
        return None
    return mv


# ---------------------------------------------------------------- the Ingress that routes it


@dataclass
class IngressPath:
    item: EvidenceItem
    field: str
    path: str
    path_type: str
    service: str
    port: str
    host: str


def _ingress_paths(item: EvidenceItem) -> Iterable[IngressPath]:
    spec = item.data.get("spec") or {}
    for i, rule in enumerate(spec.get("rules") or ()):
        for j, p in enumerate(((rule or {}).get("http") or {}).get("paths") or ()):
            backend = (p or {}).get("backend") or {}
            svc = backend.get("service") or {}
            name = svc.get("name") or backend.get("serviceName")
            port = (svc.get("port") or {}).get("number") or (svc.get("port") or {}).get("name")
            port = port or backend.get("servicePort") or ""
            if name:
                yield IngressPath(
                    item,
                    f"spec.rules.{i}.http.paths.{j}.path",
                    str(p.get("path") or "/"),
                    str(p.get("pathType") or "ImplementationSpecific"),
                    str(name),
                    str(port),
                    str((rule or {}).get("host") or "*"),
                )


def _names(ip: IngressPath) -> set[str]:
    """How proxies name this path's backend: ingress-nginx `ns-svc-port`, a cluster's service, the service."""
    ns, _ = ns_name(ip.item)
    return {ip.service, f"{ns}-{ip.service}-{ip.port}", f"{ns}/{ip.service}", f"{ns}-{ip.service}"}


def _matches(ip: IngressPath, path: str) -> bool:
    path = re.sub(r"^[a-z]+://[^/]+", "", path).split("?", 1)[0] or "/"
    annotations = meta(ip.item).get("annotations") or {}
    regex = str(annotations.get("nginx.ingress.kubernetes.io/use-regex", "")).lower() == "true" or bool(
        re.search(r"[()\[\]|$^*+?\\]", ip.path)
    )
    if ip.path_type == "Exact":
        return path == ip.path
    if ip.path_type == "ImplementationSpecific" and regex:
        try:
            return re.match(ip.path, path, re.I) is not None
        except re.error:
            return path.startswith(ip.path)
    want = [s for s in ip.path.split("/") if s]
    have = [s for s in path.split("/") if s]
    return have[: len(want)] == want


def _ingress_change(item: EvidenceItem, evidence: EvidenceSet, at: float) -> tuple[EvidenceItem, float] | None:
    """An event on this Ingress (a sync, an update) shortly before the move, or a managed-field update then."""
    ns, name = ns_name(item)
    best: tuple[EvidenceItem, float] | None = None
    for ev in evidence.kind("k8s/Event"):
        inv = ev.data.get("involved") or {}
        if inv.get("kind") != "Ingress" or inv.get("name") != name or (inv.get("namespace") or ns) != ns:
            continue
        t = event_ts(ev)
        if t is not None and at - CHANGE_WINDOW_S <= t <= at + 120 and (best is None or t > best[1]):
            best = (ev, t)
    if best is None:
        for mf in meta(item).get("managedFields") or ():
            t = parse_ts((mf or {}).get("time"))
            if t is not None and at - CHANGE_WINDOW_S <= t <= at + 120:
                best = (item, t)
    return best


def _explain_with_ingress(mv: Move, evidence: EvidenceSet) -> dict[str, Any] | None:
    """The Ingress rule behind a move: the path that sends to the old backend and does not match the requests any
    more (or the old backend gone from the rules), and the rule that catches them now."""
    for item in evidence.kind("k8s/Ingress"):
        paths = list(_ingress_paths(item))
        old = [p for p in paths if mv.old in _names(p)]
        new = [p for p in paths if mv.new in _names(p)]
        if not old and not new:
            continue
        asked = [h.path for h in mv.after[:20]]
        wrong = [p for p in old if not any(_matches(p, a) for a in asked)]
        if old and not wrong:
            continue  # this Ingress still routes the requests to the old backend: not the rule that moved them
        catch = next((p for p in new if any(_matches(p, a) for a in asked)), new[0] if new else None)
        return {"item": item, "wrong": wrong, "catch": catch, "change": _ingress_change(item, evidence, mv.at)}
    return None


def _svc(backend: str, found: dict[str, Any] | None, which: str) -> str:
    if found:
        paths = found["wrong"] if which == "old" else ([found["catch"]] if found["catch"] else [])
        if paths:
            return paths[0].service
    return re.sub(r"-\d+$", "", backend)


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def routing_changes(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    out: list[Finding] = []
    for prefix, hits in _hits(evidence).items():
        mv = _move(prefix, hits)
        if mv is None:
            continue
        found = _explain_with_ingress(mv, evidence)
        old_svc, new_svc = _svc(mv.old, found, "old"), _svc(mv.new, found, "new")
        failed = [h for h in mv.after if _failing(h)]
        codes = Counter(str(h.status) for h in failed)
        listing = ", ".join(f"{k} x{v}" for k, v in codes.most_common(3))
        no_route = mv.new in _NO_ROUTE
        where = "the proxy's default backend (no rule matched)" if no_route else new_svc
        mechanism = (
            f"requests for {prefix}/* went to {old_svc} until {fmt_ts(mv.at)} and since then to {where}, which "
            f"answers {len(failed)} of {len(mv.after)} of them with errors ({listing}): the routing rule for "
            f"{prefix} changed, so the requests no longer reach {old_svc}"
        )
        refs = [
            EvidenceRef(item=mv.before[-1].item.id, line=mv.before[-1].line, value=mv.before[-1].msg[:300]),
            EvidenceRef(item=mv.after[0].item.id, line=mv.after[0].line, value=mv.after[0].msg[:300]),
        ]
        tags = [f"route:{prefix}", f"upstream:{old_svc}"]
        obj = f"route {prefix}"
        score = 0.7
        actions = [
            Action(
                description="Which rules send this path where",
                command="kubectl get ingress -A -o wide && kubectl describe ingress -A | grep -B2 -A8 'Rules:'",
            )
        ]
        if found:
            ing = found["item"]
            ns, name = ns_name(ing)
            obj = f"Ingress {ns}/{name} path for {prefix}"
            tags += [f"ingress:{ns}/{name}", f"service:{name}"]
            score = 0.8
            if found["wrong"]:
                p = found["wrong"][0]
                mechanism += (
                    f"; Ingress {ns}/{name} routes path '{p.path}' ({p.path_type}) to {p.service}, which does not "
                    f"match the {prefix} requests clients send (a wrong path in the rule)"
                )
                refs.append(EvidenceRef(item=ing.id, field=p.field, value=p.path))
            else:
                mechanism += f"; Ingress {ns}/{name} no longer has a path to {old_svc}"
            if found["catch"]:
                c = found["catch"]
                mechanism += f", so they fall through to its path '{c.path}' -> {c.service}"
                refs.append(EvidenceRef(item=ing.id, field=c.field, value=c.path))
            change = found["change"]
            if change:
                ev, t = change
                score = 0.85
                mechanism += f"; the Ingress changed at {fmt_ts(t)}"
                if ev.kind == "k8s/Event":
                    refs.append(EvidenceRef(item=ev.id, field="reason", value=ev.data.get("reason")))
            actions = [
                Action(
                    description=f"The rules of Ingress {ns}/{name} and its recent changes",
                    command=f"kubectl -n {ns} get ingress {name} -o yaml && kubectl -n {ns} describe ingress {name}",
                ),
                Action(
                    description=f"Fix the path for {prefix} (or roll the Ingress back) and re-apply it",
                    command=f"kubectl -n {ns} edit ingress {name}",
                    kind="write",
                ),
            ]
        last = mv.after[-1].ts
        stopped = now is not None and now - last >= STOPPED_AFTER_S
        out.append(
            Finding(
                analyzer="routing_changes",
                domain=Domain.NETWORK,
                role="benign" if stopped else "cause",
                code="route_changed_stopped" if stopped else "route_changed",
                category=Category.HEALTHY if stopped else Category.CONFIGURATION_ERROR,
                title=f"{prefix}/* moved from {old_svc} to {where} at {fmt_ts(mv.at)}; {len(failed)} errors since",
                mechanism=mechanism + ".",
                object=obj,
                score=0.2 if stopped else score,
                ts=mv.at,
                tags=list(dict.fromkeys(tags)),
                explains=["http_4xx", "http_5xx", "errors", "error_rate", "log_errors", "latency"],
                evidence=refs,
                actions=actions,
            )
        )
    return out


# ---------------------------------------------------------------- a route timeout shorter than the work

# Envoy/Istio: "GET /p HTTP/1.1" 504 UT [details ...] rx tx duration upstream_time "xff" ... "authority" "host"
_ENVOY_TIMING = re.compile(
    r"\"[A-Z]+ (?P<path>\S+) HTTP/[\d.]+\" (?P<code>\d{3}) (?P<flags>[A-Z,]+|-) .*?(?P<rx>\d+) (?P<tx>\d+) "
    r"(?P<dur>\d+) (?:\d+|-) \"[^\"]*\" \"[^\"]*\" \"[^\"]*\" \"(?P<authority>[^\"]*)\" \"[^\"]*\""
    r"(?:\s+(?P<cluster>\S+))?"
)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
TIMEOUT_MIN = 5  # upstream timeouts that all end at one duration
SAME_DURATION = 0.1  # within 10% of their median: a configured timeout, not a slow upstream's spread
ROOMY = 0.25  # answered calls whose median takes under this share of the timeout leave it plenty of room


def _seconds(value: Any) -> float | None:
    m = _DURATION.match(str(value).strip()) if value is not None else None
    if not m:
        return None
    return float(m[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m[2]]


def _route_timeouts(evidence: EvidenceSet) -> Iterable[tuple[EvidenceItem, str, str, float, str]]:
    """(object, field, backend service, timeout in seconds, the rule's match) for every route timeout configured in
    an Istio VirtualService, a Gateway API HTTPRoute or an ingress-nginx Ingress annotation."""
    for item in evidence.kind("k8s/VirtualService"):
        for i, route in enumerate((item.data.get("spec") or {}).get("http") or ()):
            t = _seconds((route or {}).get("timeout"))
            if t is None:
                continue
            match = ", ".join(
                str(v) for m in route.get("match") or () for u in [m.get("uri") or {}] for v in u.values()
            )
            for dest in route.get("route") or ():
                host = str(((dest or {}).get("destination") or {}).get("host") or "")
                if host:
                    yield item, f"spec.http.{i}.timeout", host.split(".")[0], t, match or "all paths"
    for item in evidence.kind("k8s/HTTPRoute"):
        for i, rule in enumerate((item.data.get("spec") or {}).get("rules") or ()):
            timeouts = (rule or {}).get("timeouts") or {}
            t = _seconds(timeouts.get("request") or timeouts.get("backendRequest"))
            if t is None:
                continue
            for ref in rule.get("backendRefs") or ():
                if ref.get("name"):
                    yield item, f"spec.rules.{i}.timeouts", str(ref["name"]), t, "its matches"
    for item in evidence.kind("k8s/Ingress"):
        t = _seconds((meta(item).get("annotations") or {}).get("nginx.ingress.kubernetes.io/proxy-read-timeout"))
        if t is None:
            continue
        for p in _ingress_paths(item):
            yield item, "metadata.annotations", p.service, t, p.path


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def route_timeouts(evidence: EvidenceSet) -> list[Finding]:
    """Gateway timeouts that all end at one duration equal to a route's configured timeout: the setting cuts off
    work the backend still does (it is not slower), a configuration error on the route rather than a failing
    upstream. One finding per configured timeout that the access logs hit."""
    configured = list(_route_timeouts(evidence))
    if not configured:
        return []
    cut: dict[str, list[tuple[float, Any, dict[str, Any], EvidenceItem]]] = {}
    authorities: dict[str, set[str]] = {}  # the host names clients called it by (the gateway's failures name them)
    answered: dict[str, list[float]] = {}  # durations of the calls to each service that it answered in time
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            timed_out = " UT" in msg or "response_timeout" in msg
            if not timed_out and '" 2' not in msg:
                continue
            m = _ENVOY_TIMING.search(msg)
            if not m:
                continue
            cm = _CLUSTER.match(m["cluster"] or "")
            svc = cm["svc"].split(".")[0] if cm else m["authority"].split(":")[0].split(".")[0]
            if "UT" not in m["flags"].split(","):
                if m["flags"] == "-" and m["code"].startswith("2"):
                    answered.setdefault(svc, []).append(float(m["dur"]) / 1000.0)
                continue
            cut.setdefault(svc, []).append((float(m["dur"]) / 1000.0, r.get("ts"), r, item))
            authorities.setdefault(svc, set()).add(m["authority"].split(":")[0])
    out: list[Finding] = []
    for svc, hits in cut.items():
        if len(hits) < TIMEOUT_MIN:
            continue
        durs = sorted(h[0] for h in hits)
        median = durs[len(durs) // 2]
        if median <= 0 or sum(abs(d - median) <= SAME_DURATION * median for d in durs) < 0.8 * len(durs):
            continue
        rule = next(
            (c for c in configured if c[2] == svc and abs(c[3] - median) <= max(SAME_DURATION * c[3], 0.05)), None
        )
        if rule is None:
            continue
        obj, field, _, timeout, match = rule
        ok = sorted(answered.get(svc, ()))
        if len(ok) >= TIMEOUT_MIN * 2 and ok[len(ok) // 2] < ROOMY * timeout:
            # its answers take a fraction of the timeout: the setting leaves the work plenty of room, and the calls
            # that ran into it are the service being slow on them, not a timeout set too tight
            continue
        ns, name = ns_name(obj)
        stamps = [h[1] for h in hits if h[1] is not None]
        first = min(stamps) if stamps else None
        sample = hits[0]
        out.append(
            Finding(
                analyzer="route_timeouts",
                domain=Domain.NETWORK,
                role="cause",
                code="route_timeout_too_short",
                category=Category.CONFIGURATION_ERROR,
                title=f"{obj.object}: timeout {timeout:g}s cuts off {svc}",
                mechanism=(
                    f"{obj.object} sets a {timeout:g}s timeout on {match} to {svc}, and the gateway gave up on "
                    f"{len(hits)} requests to {svc} after exactly ~{median:g}s (Envoy UT, 504) "
                    f"{'from ' + fmt_ts(first) if first else ''}: the route's timeout is shorter than the work "
                    f"{svc} does, so the setting, not {svc}, fails them."
                ),
                object=f"{obj.object} timeout",
                score=0.92,
                ts=first,
                tags=[
                    f"service:{svc}",
                    f"upstream:{svc}",
                    f"route:{ns}/{name}",
                    *(
                        f"upstream:{n}"
                        for a in sorted(authorities.get(svc, ()))
                        if a and a != "-"
                        for n in (a, a.split(".")[0])
                    ),
                    # the gateway whose 504s these are
                    *sorted({f"service:{g}" for h in hits if (g := service_of(h[3]))}),
                ],
                explains=["upstream_timeout", "http_5xx", "errors", "latency", "error_rate"],
                evidence=[
                    EvidenceRef(item=obj.id, field=field, value=f"{timeout:g}s"),
                    EvidenceRef(item=sample[3].id, line=sample[2].get("line"), value=str(sample[2].get("msg"))[:300]),
                ],
                actions=[
                    Action(
                        description=f"The route's timeout and how long {svc} really takes",
                        command=f"kubectl -n {ns} get {obj.object.split('/')[0].lower()} {name} -o yaml",
                    ),
                    Action(
                        description=f"Raise the timeout above {svc}'s p99 (or revert the change that lowered it)",
                        command=f"kubectl -n {ns} edit {obj.object.split('/')[0].lower()} {name}",
                        kind="write",
                    ),
                ],
            )
        )
    return out


# ---------------------------------------------------------------- an Ingress whose backend is not there


@ANALYZERS.analyzer(domain=Domain.KUBERNETES, reads={"k8s/Ingress", "k8s/Service"})
def ingress_backends(evidence: EvidenceSet) -> list[Finding]:
    """An Ingress path whose backend Service port matches none of the Service's ports (by number or name), or
    whose Service does not exist though the namespace's Services were exported: the controller has no endpoint
    for it and answers 503 for every request on that path, whatever the pods' health."""
    services = {ns_name(s): s for s in evidence.kind("k8s/Service")}
    if not services:
        return []
    exported = {ns for ns, _ in services}
    out: list[Finding] = []
    for ing in evidence.kind("k8s/Ingress"):
        ns, ing_name = ns_name(ing)
        for ip in _ingress_paths(ing):
            svc = services.get((ns, ip.service))
            field = ip.field.removesuffix(".path") + ".backend"
            if svc is None:
                if ns not in exported:
                    continue
                why = f"Service {ns}/{ip.service} does not exist"
                ref = EvidenceRef(item=ing.id, field=field, value=f"{ip.service}:{ip.port}")
            else:
                ports = (svc.data.get("spec") or {}).get("ports") or ()
                numbers = {str(p.get("port")) for p in ports if p.get("port") is not None}
                names = {str(p.get("name")) for p in ports if p.get("name")}
                if not ip.port or ip.port in numbers or ip.port in names:
                    continue
                listed = ", ".join(sorted(numbers | names))
                why = f"Service {ns}/{ip.service} has no port {ip.port} (its ports: {listed})"
                ref = EvidenceRef(item=ing.id, field=field, value=f"{ip.service}:{ip.port}")
            out.append(
                Finding(
                    analyzer="ingress_backends",
                    domain=Domain.KUBERNETES,
                    role="cause",
                    code="ingress_backend_missing",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"Ingress {ns}/{ing_name} routes {ip.host}{ip.path} to {ip.service}:{ip.port}: {why}",
                    mechanism=(
                        f"Ingress {ns}/{ing_name} sends {ip.host}{ip.path} to Service {ip.service} port {ip.port}, "
                        f"but {why}: the ingress controller has no endpoint for the path and answers 503, although "
                        "the pods behind the Service are fine."
                    ),
                    object=f"Ingress {ns}/{ing_name}",
                    score=0.85,
                    ts=None,
                    tags=[
                        f"ingress:{ns}/{ing_name}",
                        f"service:{ip.service}",
                        f"host:{ip.host}",
                        "service:ingress-nginx-controller",
                        "service:ingress-nginx",
                    ],
                    explains=["http_5xx", "http_503", "errors", "upstream_5xx", "no_ready_endpoints", "alert:*"],
                    evidence=[ref],
                    actions=[
                        Action(
                            description="The Service's ports",
                            command=f"kubectl get svc {ip.service} -n {ns} -o jsonpath='{{.spec.ports}}'",
                        ),
                        Action(
                            description="Point the Ingress at a port the Service has",
                            command=f"kubectl edit ingress {ing_name} -n {ns}",
                            kind="write",
                        ),
                    ],
                )
            )
    return out
