"""Network: a failing upstream (timeouts, refused or reset connections, 5xx it returns), DNS failures, TLS
certificates that expired or do not verify. The cause is named after the thing that fails (the upstream, the
DNS name, the certificate's host), and the service that saw it is its symptom.

The package's modules: `extraction` (failure lines into caller, target and kind), `upstreams` (failing upstreams,
the caller's own egress, a provider's status page), `dns`, `tls`, `probes` (HTTP probes, access-log 5xx share),
`not_found` (paths served before that answer 404 now), `refusals` (credentials refused, our own rate limiter),
`interface` (a node's interface taking errors), `bgp` (a router or switch whose BGP sessions all went down),
`flows` (firewalls rejecting connections in VPC flow logs);
`_shared` holds the thresholds and what they all read.
"""

from __future__ import annotations

import functools
import re

from diagnosis.analyzers._common import (
    DNS_NXDOMAIN,
    DNS_TEMPORARY,
    HOST_EPHEMERAL,
    TLS_EXPIRED,
    TLS_INVALID,
    TLS_REMOTE,
    UPSTREAM_5XX,
    Rec,
    may_carry_signature,
    now_of,
    service_of,
    with_aliases,
    workload_of_pod,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.network._shared import Failures, _base
from diagnosis.analyzers.network.bgp import routing_device_down
from diagnosis.analyzers.network.dns import (
    _COREDNS_QUERY,
    _LOG_FETCH,
    _dead_nameserver,
    _dns_event_benign,
    _dns_findings,
    _pods_not_published,
)
from diagnosis.analyzers.network.extraction import (
    _CALLER,
    _LEVEL_WORDS,
    _NOT_A_CALLER,
    _RESOLVER,
    _add,
    _call_failure,
    _dns_name,
    _envoy_failures,
    _named_by_cluster,
    _records_with_events,
    _request_targets,
    _target,
    _target_of_request,
    _target_tags,
)
from diagnosis.analyzers.network.flows import rejected_flows
from diagnosis.analyzers.network.interface import interface_errors, link_failing
from diagnosis.analyzers.network.loss import packet_loss
from diagnosis.analyzers.network.not_found import not_found_steps
from diagnosis.analyzers.network.policy import egress_blocks_dns, policy_drops
from diagnosis.analyzers.network.ports import port_moved, protocol_mismatch, route_to_missing_cluster
from diagnosis.analyzers.network.probes import _access_log_5xx, _probe_findings
from diagnosis.analyzers.network.refusals import access_denied, credentials_refused_since, own_rate_limits
from diagnosis.analyzers.network.tls import _tls_findings, incomplete_chain
from diagnosis.analyzers.network.upstreams import (
    _KIND_WORDS,
    _call_findings,
    _caller_side,
    _container_ports,
    _demoted,
    _nat_ports,
    _with_provider_status,
)
from diagnosis.analyzers.network.vrrp import vrrp_split_brain
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Domain, Finding
from diagnosis.timeline import parse_ts

# the quota a throttled call names ("resource monitor 'RM_TRANSFORM_MONTHLY' has exceeded its quota"): what ran out
_QUOTA_OWNER = re.compile(
    r"\b(?:resource monitor|quota|budget|usage plan|spending limit)\s+['\"`]?([\w.\-/]{3,})['\"`]?", re.I
)


def _quota_owner(msg: str) -> str | None:
    m = _QUOTA_OWNER.search(msg)
    return m.group(1) if m and m.group(1).lower() not in ("exceeded", "limit", "has") else None


# a server looking up the names of its clients' addresses (MySQL without skip-name-resolve): routine, not a failure
_REVERSE_LOOKUP = re.compile(r"IP address '[\d.:a-fA-F]+' could not be resolved|reverse (?:DNS )?lookup", re.I)


_OPERATION = re.compile(r"^(?:[\w.\-]+ ){0,5}?[\w.\-]+ (?:failed|error|errored)(?=: )")


def _broker_of(msg: str) -> str | None:
    """The system a broker or datastore error that names no host comes from, by its own words."""
    low = msg.lower()
    for name in ("redis", "pulsar", "kafka"):
        if name in low:
            return name
    return "kafka" if re.search(r"NOT_LEADER|LEADER_NOT|NotEnoughReplicas|NOT_ENOUGH_REPLICAS", msg) else None


def _operation(msg: str) -> str | None:
    """The operation a failure line reports before its error ("route matrix failed" in "route matrix failed: ...")."""
    if " failed: " not in msg and " error: " not in msg and " errored: " not in msg:
        return None
    m = _OPERATION.match(msg.strip())
    return m.group(0).lower() if m else None


def _operation_targets(evidence: EvidenceSet) -> dict[tuple[str, str | None], str]:
    """(log item, operation) -> the one target the operation's failures name where they name one; (log item, None)
    -> the one target all of the log's failures that name one name (a client that only ever calls one service: its
    other failure lines are about that service too)."""
    seen: dict[tuple[str, str | None], set[str]] = {}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if not may_carry_signature(msg, r.get("level")):
                continue
            if (t := _target(msg)) and _call_failure(msg):
                seen.setdefault((item.id, None), set()).add(t)
                if op := _operation(msg):
                    seen.setdefault((item.id, op), set()).add(t)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}


# Go's x509 error says the verifier's own time: "current time 2000-01-01T00:14:56Z is before 2025-01-15T00:00:00Z"
_VERIFIER_TIME = re.compile(r"current time (\d{4}-\d\d-\d\dT[\d:.]+Z?) is (?:before|after)")
CLOCK_OFF_S = 86400.0


def _clock_off(msg: str, ts: float | None) -> bool:
    """A certificate refused by a verifier whose clock is days off the log's (a device that booted at 2000-01-01):
    its clock, not the certificate, is wrong."""
    m = _VERIFIER_TIME.search(msg) if "current time" in msg else None
    said = parse_ts(m.group(1)) if m else None
    return said is not None and ts is not None and abs(said - ts) > CLOCK_OFF_S


RETRIED_ATTEMPTS_MIN = 5  # retried attempts of a resilience pipeline that make a failing upstream on their own


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "http/probe", "k8s/Event", "external/status", "host/resolv"})
def network_failures(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    calls: dict[tuple[str, str], Failures] = {}
    dns_nx: dict[str, Failures] = {}
    dns_tmp: dict[str, Failures] = {}
    tls: dict[str, Failures] = {}
    services: dict[str, str | None] = {}

    def caller_of(rec: Rec) -> str | None:
        m = _CALLER.search(rec.msg)
        name = (m.group(1) or m.group(2)) if m else None
        if name and name.lower() not in _LEVEL_WORDS and not _NOT_A_CALLER.fullmatch(name.lower()):
            return name
        if rec.item.kind != "log":
            return rec.item.object
        if rec.item.id not in services:
            services[rec.item.id] = service_of(rec.item)
        return services[rec.item.id]

    # request id -> target, built only when a failure line names no target but a request id
    requests = functools.cache(lambda: _request_targets(evidence))
    # (log, operation) -> target: "route matrix failed: ReadTimeout" calls what "route matrix failed: 503 for url
    # https://api.x/..." names, in the same log
    operations = functools.cache(lambda: _operation_targets(evidence))
    for rec in _records_with_events(evidence):
        msg = rec.msg
        if HOST_EPHEMERAL.search(msg):
            continue  # our own side ran out of local ports: the host analyzer's, not the target's fault
        tls_remote = bool(TLS_REMOTE.search(msg)) and not TLS_EXPIRED.search(msg)
        if (TLS_EXPIRED.search(msg) or TLS_INVALID.search(msg)) and not tls_remote and not _clock_off(msg, rec.ts):
            tls_kind = "expired" if TLS_EXPIRED.search(msg) else "invalid"
            _add(tls, _target(msg) or "unknown host", tls_kind, rec, caller_of(rec))
        elif DNS_TEMPORARY.search(msg):
            m = _RESOLVER.search(msg)
            q = _COREDNS_QUERY.search(msg)  # CoreDNS's own error line names the query, not a host:port
            name = q.group(1) if q else _target(msg)
            _add(dns_tmp, m.group(1) if m else "the resolver", "dns_temporary", rec, caller_of(rec), name=name)
        elif DNS_NXDOMAIN.search(msg):
            if _LOG_FETCH.search(msg) or _REVERSE_LOOKUP.search(msg):
                continue  # a log viewer that cannot reach a worker that is gone; a server naming its clients
            name = _dns_name(msg)
            _add(dns_nx, name or "unknown name", "nxdomain", rec, caller_of(rec))
        else:
            call_kind = _call_failure(msg)
            if call_kind is None:
                continue
            caller = caller_of(rec)
            target = (
                _target(msg)
                or _target_of_request(msg, requests)
                or operations().get((rec.item.id, _operation(msg)))
                # a one-line failure that names nothing; a stack trace says what it was calling or says nothing
                or (operations().get((rec.item.id, None)) if "\n" not in msg else None)
                or (_quota_owner(msg) if call_kind == "rate_limited" else None)
                or {"rate_limited": "a rate-limited API", "broker_error": _broker_of(msg)}.get(call_kind)
            )
            if not target or _base(target) == caller:
                continue
            if call_kind == "pool_wait" and any(t.startswith("db:") for t in _target_tags(target)):
                continue  # a database pool is the database analyzer's (app_pool_exhausted)
            f = calls.setdefault((target, call_kind), Failures(target, call_kind))
            f.recs.append(rec)
            if caller:
                f.callers.add(caller)
            if call_kind == "http_5xx":
                m5 = UPSTREAM_5XX.search(msg)
                if m5:
                    status = next(g for g in m5.groups() if g)
                    f.statuses[status] = f.statuses.get(status, 0) + 1
    for rec, kind, target, status in _envoy_failures(evidence):
        f = calls.setdefault((target, kind), Failures(target, kind))
        f.recs.append(rec)
        src = rec.item.data.get("source") or {}
        # a sidecar's log speaks for its pod's workload, not for the proxy container
        caller = workload_of_pod(str(src["pod"])) if src.get("pod") else caller_of(rec)
        if caller and _base(target) != caller:
            f.callers.add(caller)
        if status.startswith("5"):
            f.statuses[status] = f.statuses.get(status, 0) + 1
    # a resilience pipeline's retried attempts alone (Polly's "Execution attempt ... Handled: 'True'"), a handful of
    # them: retries that did their job during a blip, not an upstream failing
    calls = {
        k: f
        for k, f in calls.items()
        if len(f.recs) >= RETRIED_ATTEMPTS_MIN or not all("Execution attempt" in r.msg for r in f.recs)
    }
    findings: list[Finding] = []
    egress = _caller_side(calls, now) + _nat_ports(evidence)
    findings += egress
    findings += _demoted(_named_by_cluster(_call_findings(calls, now, _container_ports(evidence)), evidence), egress)
    findings += _pods_not_published(_dns_findings(dns_nx, dns_tmp, now), evidence)
    findings += _dead_nameserver(evidence, dns_tmp)
    findings += _tls_findings(tls, now, evidence)
    findings += _probe_findings(evidence)
    findings += _dns_event_benign(evidence)
    findings += _access_log_5xx(evidence, now)
    findings += not_found_steps(evidence)
    findings = _with_provider_status(findings, evidence)
    return with_aliases(findings)


__all__ = [
    "_KIND_WORDS",
    "_base",
    "_target",
    "access_denied",
    "credentials_refused_since",
    "egress_blocks_dns",
    "incomplete_chain",
    "interface_errors",
    "link_failing",
    "network_failures",
    "own_rate_limits",
    "packet_loss",
    "policy_drops",
    "port_moved",
    "protocol_mismatch",
    "rejected_flows",
    "route_to_missing_cluster",
    "routing_device_down",
    "vrrp_split_brain",
]
