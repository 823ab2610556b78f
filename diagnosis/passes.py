"""Passes over the checked findings before they are ranked: what a finding's role really is, given the rest.

- `recovered_by_alerts`: weak symptoms of an episode a resolved alert says is over are benign.
- `asked_about_the_failing_upstream`: asked about X itself, X's callers' failed calls are the symptom already known.
- `callers_only`: calls failing to one of our own servers with nothing from that server are missing evidence.
- `false_alarms`: an alert that a benign finding on its object explains (a memory alert counting the page cache)
  is benign too.
- `starved_by_a_failing_upstream`: a thread pool starved while an upstream it calls already failed is its symptom.
Each returns the findings with some of them re-roled (`evidence_missing` turns a cause that only shows that
something fails into a symptom saying what evidence would show why).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from diagnosis.evidence import EvidenceSet, control_plane
from diagnosis.links import BENIGN, CAUSE, SYMPTOM, WORD, code_in, entity_names, is_alert, workload_of_pod
from diagnosis.model import Category, EvidenceItem, Finding

_CALL_FAILURES = {"upstream_timeout", "upstream_5xx", "upstream_reset", "connection_refused"}
_SELF_REPORTED = {"dependency_unhealthy", "search_cluster_red"}  # a service's own health status, red or down
# evidence that comes from a service itself (its pods, logs, metrics, containers, alerts), not from its callers


# the names a service that serves `x` goes by: x-api, x-web ... (not x-db or x-cache: a datastore of x's)
_SERVING = ("-api", "-web", "-app", "-service", "-svc", "-server", "-frontend")


def _subject(names: Iterable[str], question: str) -> str | None:
    """The upstream name the question asks about: the name itself, or the name behind a namespace or domain
    ('billing-invoice-renderer' or 'invoice-renderer.billing.svc' for 'invoice-renderer')."""
    words = {w for w in WORD.findall(question.lower()) if len(w) >= 5 or "-" in w}
    # a plural names the service too: "checkouts" for checkout
    words |= {w[:-1] for w in words if len(w) >= 6 and w.endswith("s") and not w.endswith("ss")}
    # a public host name names the service that serves it: "reports.example.org" for reports-api
    hosts = {w.split(".", 1)[0] for w in words if w.count(".") >= 2 and len(w.split(".", 1)[0]) >= 4}
    for n in names:
        n = n.lower()
        for w in words | hosts:
            if n == w or n.endswith("-" + w) or n.startswith(w + ".") or n in {w + s for s in _SERVING}:
                return w
    return None


def asked_about_the_failing_upstream(
    findings: list[Finding], evidence: EvidenceSet, question: str | None
) -> list[Finding]:
    """Calls to X failing are X's callers' dependency failure; when the operator asks what is wrong with X itself,
    they are the symptom they already know, and the cause is inside X: found there by another analyzer (which
    then explains them), or, with nothing wrong seen in X (its pods running, its logs quiet), missing evidence,
    not an answer."""
    if not question:
        return findings
    out: list[Finding] = []
    for f in findings:
        subject = (
            # the upstream's own names only: its `service:` tags also name its callers
            _subject([t.split(":", 1)[1] for t in f.tags if t.startswith("upstream:")], question)
            if f.role == CAUSE and f.category == Category.DEPENDENCY_FAILURE and f.code in _CALL_FAILURES
            else None
        )
        if subject is not None and _third_party(f) and any(t.startswith("provider:") for t in f.tags):
            subject = None  # a provider whose own status page confirms it: its failing is the answer
        if subject is None and f.role == CAUSE and f.code in _SELF_REPORTED:
            # X reporting itself unhealthy (a red cluster) is what the operator asks about, not why: the cause is
            # inside X (a member that crashed, a disk, a setting), found there or missing
            subject = _subject([t.split(":", 1)[1] for t in f.tags if t.startswith("upstream:")], question)
        if subject is None:
            out.append(f)
            continue
        out.append(
            evidence_missing(
                f,
                f"why {subject} reports itself unhealthy: the logs of its members and what their state says "
                "(for a search cluster, _cluster/allocation/explain)"
                if f.code in _SELF_REPORTED
                else f"evidence from {subject} itself (its pods and events, logs, metrics): its callers only show "
                "that it fails, not why",
            )
        )
    return out


_INTERNAL_SUFFIX = re.compile(r"\.(?:svc|local|internal|corp|lan|intranet|cluster|consul|home|private)\.?$", re.I)


def _third_party(f: Finding) -> bool:
    """Whether the failing upstream is a provider on the internet (a public DNS name: api.smarty.com), not ours."""
    target = f.object.removeprefix("upstream ").split(" (", 1)[0].strip().lower()
    host = re.sub(r":\d+$", "", target)
    return (
        "." in host
        and bool(re.search(r"\.[a-z]{2,}$", host))
        and not _INTERNAL_SUFFIX.search(host)
        and not _PRIVATE_ADDRESS.match(host)
    )


def evidence_missing(f: Finding, need: str) -> Finding:
    """A cause candidate that only shows that something fails, not why: a symptom, and the evidence that would."""
    return f.model_copy(update={"role": SYMPTOM, "category": Category.UNKNOWN, "needs": [need]})


_PRIVATE_ADDRESS = re.compile(r"^(?:10\.\d+|172\.(?:1[6-9]|2\d|3[01])|192\.168)\.\d+\.\d+$")
# a datastore a service reads and writes is a dependency whether or not its own evidence is here
_DATASTORE_PORTS = {"5432", "3306", "6379", "27017", "9092", "11211", "9200", "5672", "9042", "2181", "1433", "1521"}
_DATASTORE_NAME = re.compile(r"postgres|pg|mysql|maria|redis|mongo|kafka|memcache|elastic|opensearch|rabbit|"
                             r"cassandra|\bdb\b|-db\b|database|sql", re.I)  # fmt: skip


_LB_BACKEND_FAILED = re.compile(
    r"\bstatusDetails=(?:backend_timeout|failed_to_connect_to_backend)\b|"
    r"\berrorInfo=(?:OriginTimeout|OriginConnectionError|OriginConnectionAborted|OriginConnectionRefused)\b"
)


# Envoy's response flags for a reply the caller's proxy made itself because the upstream never answered: a
# connection that failed (UF) or was reset (UC), retries used up on such failures (URX), no healthy endpoint (UH),
# the route's timeout (UT). The 503/504 then says nothing about the upstream's own health.
_PROXY_MADE = re.compile(r"response_flags=(?:[A-Z]+,)*(?:UF|URX|UH|UT|UC)\b")
# the same in an Envoy access log line: `" 503 UF,URX upstream_reset_before_response_started{connection_timeout}`
_PROXY_MADE_LINE = re.compile(r"\s50[34] (?:[A-Z]+,)*(?:UF|URX|UH|UT|UC)\b|upstream connect error or disconnect/reset")


def _proxy_made(f: Finding, evidence: EvidenceSet) -> bool:
    """Whether a call failure's series says the caller's mesh proxy made the error (the upstream never answered)."""
    for r in f.evidence:
        item = evidence.get(r.item)
        if item is not None and item.kind == "metric" and _PROXY_MADE.search(item.object):
            return True
        if isinstance(r.value, str) and _PROXY_MADE_LINE.search(r.value):
            return True
    return False


def _cluster_workloads(evidence: EvidenceSet) -> frozenset[str]:
    """The names of the cluster's own Services and of the workloads its exported pods belong to."""
    names = {i.object.rsplit("/", 1)[-1].lower() for i in evidence.kind("k8s/Service")}
    names |= {workload_of_pod(i.object.rsplit("/", 1)[-1]).lower() for i in evidence.kind("k8s/Pod")}
    return frozenset(names)


def _svc_address_of(word: str, f: Finding, evidence: EvidenceSet) -> str | None:
    """The one in-cluster Service address (`<word>-...<ns>.svc`) the logs of a failing call's finding name."""
    rx = re.compile(rf"\b({re.escape(word)}[\w\-]*\.[a-z0-9\-]+\.svc(?:\.cluster\.local)?)\b", re.I)
    found: set[str] = set()
    for item_id in {r.item for r in f.evidence}:
        item = evidence.get(item_id)
        if item is None or item.kind != "log":
            continue
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if ".svc" in msg:
                found.update(m.group(1).lower() for m in rx.finditer(msg))
    return found.pop() if len(found) == 1 else None


def _internal_upstream(f: Finding, evidence: EvidenceSet) -> tuple[str, str] | None:
    """(host, port) of the server a failing call went to, when it is one of ours inside the network that nothing
    names (a private address) or a member of our load balancer's pool, and not a datastore."""
    target = f.object.removeprefix("upstream ").split(" (", 1)[0].strip()
    host, _, port = target.rpartition(":") if re.search(r":\d+$", target) else (target, "", "")
    host = host.lower()
    # a server on the caller's own host or pod (nginx in front of php-fpm on 127.0.0.1:9000): the service itself
    if host in ("127.0.0.1", "localhost", "::1", "[::1]"):
        return host, port
    # a Service of our own cluster, addressed by its cluster DNS name, whose calls only time out: the service (a
    # datastore's too), its node or the network between could each be slow (one that answers 5xx says itself that
    # it fails)
    if re.search(r"\.svc(?:\.cluster\.local)?$", host) and f.code == "upstream_timeout":
        return host, port
    # ... or by its short name, when the bundle shows it is one of the cluster's own workloads (its pods, its
    # Service): `ts-seat-service:18898` called from a pod of the same namespace
    if "." not in host and f.code == "upstream_timeout" and host in _cluster_workloads(evidence):
        return host, port
    # ... or by a word its callers' log spells out elsewhere as an in-cluster address (CircuitBreaker 'opensearch'
    # beside requests to http://opensearch-catalog.search.svc.cluster.local:9200)
    if "." not in host and f.code == "upstream_timeout" and (svc := _svc_address_of(host, f, evidence)):
        return svc, port
    if not host or port in _DATASTORE_PORTS or _DATASTORE_NAME.search(host):
        return None
    # an address that nothing names: one server of ours behind a proxy or a pool (a named service, even
    # cluster-internal, may be another team's: its failure is their dependency failure, as the callers see it)
    named = [t.split(":", 1)[1] for t in f.tags if t.startswith("upstream:")]
    if _PRIVATE_ADDRESS.match(host) and all(_PRIVATE_ADDRESS.match(n.split(":")[0]) for n in named):
        return host, port
    # ... and one whose failures a proxy made (its sidecar's own words for them)
    if re.search(r"\.svc(?:\.cluster\.local)?$", host) and _proxy_made(f, evidence):
        return host, port
    # the backend service of our own cloud load balancer, timing out or refusing it (GCP's statusDetails
    # backend_timeout, failed_to_connect_to_backend): the service behind it is the one that fails
    if any(isinstance(r.value, str) and _LB_BACKEND_FAILED.search(r.value) for r in f.evidence):
        return host, port
    # a server of our own load balancer's pool ("Health check for server pay_gw/pay-gw-03 failed")
    pool_member = re.compile(rf"\bserver [\w.\-]+/{re.escape(host)}\b", re.I)
    if any(isinstance(r.value, str) and pool_member.search(r.value) for r in f.evidence):
        return host, port
    return None


# series labels that name the other end of a call, not the series' source
_PEER_LABEL = re.compile(
    r"\b(?:target|upstream|peer\w*|dest\w*|dst\w*|remote\w*|server_address|net_peer\w*|grpc_service|backend\w*|subgraph\w*|"
    # a client's request series (Micrometer's http_client_requests: client_name, uri) names the server it called
    r"client_?name|uri|url|http_url)"
    r"=[^,}]*"
)


# an alert that fires on what the callers see (errors, 5xx, latency, availability), not on a cause (disk, memory)
_SYMPTOM_ALERT = re.compile(
    r"5xx|errors?\b|error_?rat(?:e|io)|latency|slow|availability|slo\b|burn|down\b|unhealthy|timeout", re.I
)


def _seen_itself(host: str, evidence: EvidenceSet, findings: list[Finding], call: Finding) -> bool:
    """Whether anything in the bundle comes from the upstream itself that could show why it fails: its logs or
    series, or a finding about it other than its callers' failed calls (pods that run, and say nothing else, do not
    show why)."""
    names = {host} if _PRIVATE_ADDRESS.match(host) else {host.split(".")[0]}
    for item in evidence:
        if control_plane(item):
            continue  # operations on it (a restart, a scale-out) say nothing of why it fails
        if item.kind in ("log", "container/state", "trace/spans") or (
            item.kind == "metric" and not _quiet_series(item)
        ):
            # a caller's series about its calls to it (`target="ledger-writer..."`) is not from it
            obj = _PEER_LABEL.sub("", item.object.lower())
            if any(n in obj for n in names) and not _callers_series(item, names) and not _ok_spans(item):
                return True
    for f in findings:
        if f is call or f.code in _CALL_FAILURES or f.role == BENIGN:
            continue
        if is_alert(f) and _SYMPTOM_ALERT.search(f.code):
            continue  # an alert on its error rate or latency repeats what the callers see, and not why
        if any(n in entity_names(f) for n in names):
            return True
    return False


def _quiet_series(item: EvidenceItem) -> bool:
    """A host's scrape status or load that says nothing is wrong with it (`up`, a flat load average): present, but it
    cannot show why calls to it fail."""
    name = str(item.data.get("name") or "")
    return name == "up" or name.startswith("node_load")


def _ok_spans(item: EvidenceItem) -> bool:
    """The upstream's own spans in a trace export that all succeeded: they show it answering, not why calls fail."""
    src = item.data.get("source")
    if item.kind != "log" or not isinstance(src, dict) or src.get("export") not in ("jaeger", "zipkin", "otlp"):
        return False
    return not any(r.get("level") in ("error", "fatal", "warn") for r in item.data.get("records") or ())


_OWNER_LABEL = re.compile(r"\b(?:job|service|app|application|container|pod|instance)=([^,}]*)")


def _callers_series(item: EvidenceItem, names: set[str]) -> bool:
    """A series about calls to the upstream (named for them, "storefront-pricing-client", or naming it in a `host=`
    or `client=` label) whose labels say another service exports it (`job=storefront-web`), or one Istio's sidecar
    reported at the source: the caller's view of the upstream, not the upstream's own."""
    if item.kind != "metric":
        return False
    obj = item.object.lower()
    labels = obj.partition("{")[2]
    if re.search(r"\breporter=source\b", labels):
        return True  # Istio's standard metrics as the caller's sidecar reported them
    labels = re.sub(r"\bclient=[^,}]*", "", labels)  # the client a caller configured for the upstream
    owners = _OWNER_LABEL.findall(labels)
    if owners and all(not any(n in o for n in names) for o in owners):
        # exported by another service, about its calls to the host it names (`app=search-api,host=opensearch-...`)
        labels = re.sub(r"\bhost=[^,}]*", "", labels)
    # (the series names the upstream somewhere: in its name, or in a peer label just removed)
    return bool(owners) and not any(n in labels for n in names) and all(not any(n in o for n in names) for o in owners)


_STATUS_SERIES = re.compile(r"5xx|\b5\d\d\b|status|code", re.I)


def _series_only(f: Finding, evidence: EvidenceSet) -> str | None:
    """The upstream's short name when a call failure rests on its callers' series alone and they say no status
    (an error ratio counts timeouts as much as 5xx)."""
    items = [evidence.get(r.item) for r in f.evidence]
    if not items or any(i is None or i.kind != "metric" or _STATUS_SERIES.search(i.object) for i in items):
        return None
    return f.object.removeprefix("upstream ").split(" (", 1)[0].split(":", 1)[0].split(".", 1)[0].strip().lower()


_5XX_LABEL = re.compile(r"\b(?:status|code|status_code|http_status)=5\d\d\b")


def _answered_5xx(host: str, evidence: EvidenceSet) -> bool:
    """Whether a caller's request series counts answers of 5xx from this server (`client_name=pim-service...,
    status=503` above zero): it was reached and answered that it failed, so the fault is in it, not on the way."""
    short = host.split(".")[0].lower()
    for item in evidence.kind("metric"):
        obj = item.object.lower()
        if short not in obj or not _5XX_LABEL.search(obj):
            continue
        if any(float(p[1]) > 0 for p in item.data.get("points") or () if len(p) == 2):
            return True
    return False


def callers_only(findings: list[Finding], evidence: EvidenceSet) -> list[Finding]:
    """Calls failing to one of our own services (not a third party, not a datastore) with nothing in the bundle from
    that service itself: its callers only show that it fails, not why, so the cause is evidence that is missing."""
    out: list[Finding] = []
    calls = [
        f
        for f in findings
        if f.role == CAUSE and f.category == Category.DEPENDENCY_FAILURE and f.code in _CALL_FAILURES
    ]
    internal_of = {id(f): _internal_upstream(f, evidence) for f in calls}
    # a caller's error-ratio series about the same service ("upstream=ledger") counts the same failed calls
    hosts = {i[0].split(".")[0]: i for i in internal_of.values() if i is not None}
    for f in calls:
        if internal_of[id(f)] is None and (named := _series_only(f, evidence)) in hosts:
            internal_of[id(f)] = hosts[named]
    for f in findings:
        internal = internal_of.get(id(f))
        if internal is None or _seen_itself(internal[0], evidence, findings, f) or _answered_5xx(internal[0], evidence):
            out.append(f)
            continue
        out.append(
            evidence_missing(
                f,
                f"evidence from {internal[0]} itself (its pods and events, logs, metrics, traces): its callers only "
                "show that calls to it fail, not why",
            )
        )
    return out


RECOVERED_WINDOW_S = (
    1800.0  # a weak symptom that began this close to a since-resolved alert on its object is that episode
)


def recovered_by_alerts(findings: list[Finding]) -> list[Finding]:
    """Weak symptoms of an episode that a resolved alert on the same object says is over become benign, unless an
    alert on that object still fires: the monitoring system has already judged the episode recovered."""
    resolved = [(f, entity_names(f)) for f in findings if f.role == BENIGN and is_alert(f)]
    if not resolved:
        return findings
    firing = [entity_names(f) for f in findings if f.role == SYMPTOM and is_alert(f)]
    out: list[Finding] = []
    for f in findings:
        names = entity_names(f)
        if f.role != SYMPTOM or is_alert(f) or f.score >= 0.6 or not names or any(names & n for n in firing):
            out.append(f)
            continue
        cover = next(
            (
                a
                for a, an in resolved
                if names & an and (f.ts is None or a.ts is None or f.ts <= a.ts + RECOVERED_WINDOW_S)
            ),
            None,
        )
        if cover is None:
            out.append(f)
            continue
        out.append(
            f.model_copy(
                update={
                    "role": BENIGN,
                    "category": Category.HEALTHY,
                    "mechanism": f"a recovered episode: {cover.title}",
                }
            )
        )
    return out


def false_alarms(findings: list[Finding]) -> list[Finding]:
    """Alerts that a benign finding on the same object explains (it lists the alert in `explains`: a host memory
    alert that counts the page cache as used) are false alarms: benign, with the reason."""
    # only a benign finding that names the alerts it explains (no wildcard): it has judged those very alerts
    explainers = [
        (f, entity_names(f))
        for f in findings
        if f.role == BENIGN and any(e.startswith("alert:") and not e.endswith("*") for e in f.explains)
    ]
    if not explainers:
        return findings
    out: list[Finding] = []
    for f in findings:
        names = entity_names(f)
        why = next(
            (
                b
                for b, bn in explainers
                if f.role == SYMPTOM and is_alert(f) and names & bn and code_in(f.code, b.explains)
            ),
            None,
        )
        out.append(
            f
            if why is None
            else f.model_copy(
                update={"role": BENIGN, "category": Category.HEALTHY, "mechanism": f"a false alarm: {why.mechanism}"}
            )
        )
    return out


_STARVED = "thread_pool_starvation"
_UPSTREAM_DOWN = {"upstream_5xx", "provider_degraded"}


def starved_by_a_failing_upstream(findings: list[Finding]) -> list[Finding]:
    """A thread pool starved while an upstream it calls was already answering 5xx (or its provider says it is
    degraded): the threads block waiting on that upstream, so the starvation is a symptom of it, not a defect of
    its own. Timeouts alone do not decide it: a starved pool makes its own calls time out."""
    starved = [f for f in findings if f.role == CAUSE and f.code == _STARVED]
    if not starved:
        return findings
    downs = [
        f.ts
        for f in findings
        if f.role == CAUSE and f.category == Category.DEPENDENCY_FAILURE and f.code in _UPSTREAM_DOWN
    ]
    if not downs:
        return findings
    starved_ids = {id(f) for f in starved}
    out: list[Finding] = []
    for f in findings:
        if id(f) in starved_ids and f.ts is not None and any(t is not None and t <= f.ts for t in downs):
            f = f.model_copy(
                update={
                    "role": SYMPTOM,
                    "category": Category.UNKNOWN,
                    "mechanism": f"{f.mechanism} Here the threads wait on an upstream that was already failing.",
                }
            )
        out.append(f)
    return out
