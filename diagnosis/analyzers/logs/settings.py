"""Settings: a framework refusing the request's Host, configuration changes quoted by the errors that followed,
and a setting the application says is missing."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from diagnosis.analyzers._common import (
    MISSING_SETTING,
    Rec,
    Template,
    now_of,
    object_tags,
    records_with,
    ref_of,
    service_of,
    span_text,
    with_aliases,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs._shared import CAPACITY_MIN, SPORADIC, STOPPED_AFTER_S
from diagnosis.analyzers.logs.data import _around, _grep_word, _short
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

# A web framework refusing the request's Host header (Django ALLOWED_HOSTS, Rails config.hosts, ASP.NET Core
# AllowedHosts, Vite/webpack dev servers): the host named is missing from the allow-list. Group 1: the host.
HOST_REJECTED = re.compile(
    r"Invalid HTTP_HOST header: '([^']+)'|\bBlocked hosts?: ([\w.\-:]+)|"
    r"The host '([^']+)' does not match an allowed host|This host \(\"?([\w.\-:]+)\"?\) is not allowed|"
    r"Invalid Host header(?: '([^']+)')?",
)
_HOST_SETTING = (
    ("HTTP_HOST", "ALLOWED_HOSTS"),
    ("Blocked host", "config.hosts"),
    ("allowed host", "AllowedHosts"),
)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def host_not_allowed(evidence: EvidenceSet) -> list[Finding]:
    """A service rejecting requests because their Host header is not on its allow-list (typically after a domain
    or DNS change sent a new name to an unchanged app): a configuration error of the allow-list, whatever the CDN
    or the 400s around it look like."""
    now = now_of(evidence)
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hosts: dict[str, list[dict[str, Any]]] = {}
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "host" not in msg.lower():
                continue
            m = HOST_REJECTED.search(msg)
            if m:
                hosts.setdefault(next((g for g in m.groups() if g), "?"), []).append(r)
        for host, recs in hosts.items():
            last = max((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            if len(recs) < CAPACITY_MIN or (now is not None and last is not None and now - last >= STOPPED_AFTER_S):
                continue
            first = min((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            who = service_of(item) or item.object
            sample = " ".join(str(recs[0].get("msg") or "").split())[:200]
            setting = next((v for k, v in _HOST_SETTING if k.lower() in sample.lower()), "the allowed-hosts setting")
            if re.fullmatch(r"localhost|[\d.]+(?::\d+)?|\[?[0-9a-f:]+\]?", host.lower()):
                # an address, not a name users type: a health check or a scanner reaching the app directly
                out.append(
                    Finding(
                        analyzer="host_not_allowed",
                        domain=Domain.LOGS,
                        role="benign",
                        code="host_not_allowed_probe",
                        category=Category.HEALTHY,
                        title=f"{who} rejects requests for host {host} ({len(recs)}x): probes or scanners",
                        mechanism=f"{who} rejects requests addressed to {host} ('{sample}' x{len(recs)}): a health "
                        "check or a scanner asking for an address rather than the site's name; users are not "
                        "affected.",
                        object=who,
                        score=0.2,
                        ts=first,
                        tags=[*object_tags(item, service_of(item)), f"host:{host}"],
                        evidence=[EvidenceRef(item=item.id, line=recs[0].get("line"), value=sample)],
                    )
                )
                continue
            out.append(
                Finding(
                    analyzer="host_not_allowed",
                    domain=Domain.LOGS,
                    role="cause",
                    code="host_not_allowed",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"{who} rejects requests for host {host}: not in {setting} ({len(recs)}x)",
                    mechanism=(
                        f"{who} refuses every request whose Host header is {host} (answering 400): {host} is missing "
                        f"from {setting}: '{sample}' x{len(recs)} {span_text(first, last)}."
                    ),
                    object=who,
                    score=0.8,
                    ts=first,
                    tags=[*object_tags(item, service_of(item)), f"host:{host}"],
                    explains=["errors", "http_4xx", "http_5xx", "metric_shift", "alert:*"],
                    evidence=_record_refs(item, recs),
                    actions=[
                        Action(
                            description=f"Add {host} to {setting} and redeploy; list the hosts refused",
                            command=f"grep -c '{host}' <{item.object} log>",
                        )
                    ],
                )
            )
    return with_aliases(out)


def _span(recs: list[Rec]) -> tuple[float | None, float | None]:
    """The first and the last time among records (None where none is dated)."""
    stamps = [r.ts for r in recs if isinstance(r.ts, int | float)]
    return (min(stamps), max(stamps)) if stamps else (None, None)


def _record_refs(item: EvidenceItem, recs: list[dict[str, Any]]) -> list[EvidenceRef]:
    """The first two of a log item's matching records, as references to their lines."""
    return [EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:300]) for r in recs[:2]]


# ---------------------------------------------------------------- configuration changes quoted by errors

CONFIG_CHANGE_WINDOW_S = 6 * 3600  # a change this long before the errors began can still be what they quote
_CHANGE_WORD = re.compile(
    r"\b(?:flag|feature|toggle|config(?:uration)?|setting|parameter|param|variable|env|property|option|key|"
    r"variation|override|configmap|secret|rollout rule|targeting)\b",
    re.I,
)
_NEW_VALUE = re.compile(
    r"\b(?:new_?value|new|to_?value|after|value_?after|variation|value)=\"?([^\s\",;)]+)|"
    r"\bfrom\s+['\"]?[^\s'\"]*['\"]?\s+to\s+['\"]?([^\s'\",;)]+)|"
    r"\b(?:set|changed|updated|switched)\b[^=]{0,80}?\bto\s+['\"]?([^\s'\",;)]+)",
    re.I,
)
_CHANGE_SUBJECT = re.compile(
    r"\b(?:flag|feature|key|setting|parameter|param|name|property|option|variable|config)[=:]\s*['\"]?([\w.\-/]+)",
    re.I,
)
# values too common to attribute an error to: booleans, on/off, empties, small numbers
_PLAIN_VALUES = frozenset({"true", "false", "on", "off", "yes", "no", "null", "none", "enabled", "disabled", "0", "1"})


@dataclass(frozen=True)
class ConfigChange:
    ts: float
    subject: str
    value: str
    ref: EvidenceRef


def config_changes(evidence: EvidenceSet) -> list[ConfigChange]:
    """Records that set a flag, setting or variable to a new value (audit exports, change logs, flag services)."""
    out: list[ConfigChange] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            ts = r.get("ts")
            if not isinstance(ts, int | float) or ("=" not in msg and " to " not in msg):
                continue
            if str(r.get("level") or "").lower() in ("error", "fatal", "warn"):
                continue  # an error's own words ("the data set are disabled ... configured to report") change nothing
            if not _CHANGE_WORD.search(msg):
                continue
            m = _NEW_VALUE.search(msg)
            value = next((g for g in m.groups() if g), None) if m else None
            if not value or len(value) < 3 or value.lower() in _PLAIN_VALUES or value.replace(".", "").isdigit():
                continue
            subj = _CHANGE_SUBJECT.search(msg)
            out.append(
                ConfigChange(
                    float(ts),
                    subj.group(1) if subj else "a setting",
                    value,
                    EvidenceRef(item=item.id, line=r.get("line"), value=msg[:200]),
                )
            )
    return out


def _quoted_change(changes: list[ConfigChange], tpl: Template) -> ConfigChange | None:
    """The latest change before the errors began whose new value the errors quote."""
    if tpl.sample is None or tpl.first_ts is None:
        return None
    msg = tpl.sample.msg
    best: ConfigChange | None = None
    for c in changes:
        if not -300.0 <= tpl.first_ts - c.ts <= CONFIG_CHANGE_WINDOW_S:  # clocks disagree a little
            continue
        if not re.search(rf"(?<![\w\-]){re.escape(c.value)}(?![\w\-])", msg):
            continue
        if best is None or c.ts > best.ts:
            best = c
    return best


def _spaced(text: str) -> str:
    return f" {text}" if text else ""


_SETTING_NAME = re.compile(
    r"KeyError: [\"'](\w+)|\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b|ParameterNotFound:? (/?[\w./-]+)|"
    r"(vhost [\"']?[^\s\"']+|database [\"'][^\"']+[\"']|Unknown database [\"'][^\"']+[\"'])"
)


def _missing_setting(
    item: EvidenceItem, tpl: Template, who: str, tags: list[str], active: list[Template]
) -> Finding | None:
    """A process that fails because a setting it needs is unset or unreadable (an env var missing from its
    environment, an unknown flag, a config file that is not there): the configuration is the cause, whatever
    exception the code raises on it. One finding per log source, on the first such template."""
    assert tpl.sample is not None
    first = next((t for t in active if t.sample and MISSING_SETTING.search(t.sample.msg)), None)
    if first is not tpl:
        return None
    msg = tpl.sample.msg
    hit = MISSING_SETTING.search(msg)
    assert hit is not None
    named = _SETTING_NAME.search(hit.group(0)) or _SETTING_NAME.search(msg[hit.start() :]) or _SETTING_NAME.search(msg)
    name = next((g for g in named.groups() if g), None) if named else None
    what = f"the setting {name}" if name else "a setting it needs"
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="missing_setting",
        category=Category.CONFIGURATION_ERROR,
        title=f"{who} fails because {what} is missing or invalid ({tpl.count}x)",
        mechanism=(
            f"{who} cannot run because {what} is missing or invalid in its configuration: "
            f"'{_short(_around(msg, hit.group(0)))}' x{tpl.count}{_spaced(span_text(tpl.first_ts, tpl.last_ts))}; "
            "the code fails on the configuration it was given, not on a bug."
        ),
        object=f"{who} {name}" if name else who,
        score=0.8 if tpl.count >= SPORADIC else 0.6,
        ts=tpl.first_ts,
        tags=[*tags, *([f"config:{name}"] if name else [])],
        explains=["errors", "http_5xx", "pod_restarts", "crash_loop", "exception", "service_down"],
        evidence=[ref_of(tpl.sample)],
        actions=[
            Action(
                description=f"Compare {who}'s environment and config with the last version that worked"
                + (f" and set {name}" if name else ""),
                command=f"grep -n {_grep_word(hit.group(0))} <{item.object} log>",
            )
        ],
    )


# ---------------------------------------------------------------- writes sent to a read-only server

# the server refusing a write because it is a read-only copy: PostgreSQL on a standby or an Aurora reader
# (SQLSTATE 25006), MySQL with read_only / super_read_only (ERROR 1290 / 1836), a Redis replica
READ_ONLY = re.compile(
    r"cannot execute \w+(?: \w+)? in a read-only transaction|running with the --(?:super-)?read-only option|"
    r"READONLY You can't write against a read only replica|read-only mode|ERROR 1290 \(HY000\)",
    re.I,
)
# an endpoint that names itself a reader: Aurora's cluster-ro, "-reader", "-replica", "-ro." hosts
_READER_ENDPOINT = re.compile(r"\b[\w\-]+\.cluster-ro-[\w.\-]+|\b[\w\-]*(?:-reader|-replica|-ro)\b(?:\.[\w\-]+)+", re.I)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def writes_to_read_only(evidence: EvidenceSet) -> list[Finding]:
    """An application whose writes the database refuses as read-only: it is connected to a replica (a reader
    endpoint, a standby) where its writes must go to the primary. A setting (the datasource URL) points at the
    wrong endpoint, named when the evidence shows a reader endpoint."""
    now = now_of(evidence)
    hits: dict[str, tuple[EvidenceItem, list[dict[str, Any]]]] = {}
    reader: str | None = None
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if reader is None and ("-r" in msg or "cluster-ro" in msg):
                m = _READER_ENDPOINT.search(msg)
                reader = m.group(0) if m else None
            if "read" in msg.lower() and READ_ONLY.search(msg):
                who = service_of(item) or item.object
                hits.setdefault(who, (item, []))[1].append(r)
    if hits and reader is None:  # the settings the application runs with: a ConfigMap's values
        for cm in evidence.kind("k8s/ConfigMap"):
            for key, value in ((cm.data.get("data") or {}) if isinstance(cm.data.get("data"), dict) else {}).items():
                m = _READER_ENDPOINT.search(str(value))
                if m and reader is None:
                    reader = f"{m.group(0)} in {cm.object} key {key}"
    out: list[Finding] = []
    for who, (item, recs) in hits.items():
        stamps = sorted(r["ts"] for r in recs if isinstance(r.get("ts"), int | float))
        first, last = min(stamps, default=None), max(stamps, default=None)
        # over when quiet for 15 minutes, or for three of its usual gaps when it comes every half hour or so
        gaps = sorted(b - a for a, b in itertools.pairwise(stamps))
        quiet = max(STOPPED_AFTER_S, 3 * gaps[len(gaps) // 2]) if gaps else STOPPED_AFTER_S
        if len(recs) < CAPACITY_MIN or (now is not None and last is not None and now - last >= quiet):
            continue
        sample = " ".join(str(recs[0].get("msg") or "").split())[:200]
        where = f" ({reader}: a reader endpoint)" if reader else ""
        out.append(
            Finding(
                analyzer="writes_to_read_only",
                domain=Domain.LOGS,
                role="cause",
                code="writes_to_read_only",
                category=Category.CONFIGURATION_ERROR,
                title=f"{who} sends writes to a read-only database{where} ({len(recs)}x)",
                mechanism=(
                    f"{who}'s writes are refused as read-only: '{sample}' x{len(recs)} {span_text(first, last)}: it "
                    f"is connected to a read-only copy{where} instead of the primary (writer) endpoint, so every "
                    "write fails while reads still work."
                ),
                object=f"database endpoint of {who}",
                score=0.85,
                ts=first,
                tags=[*object_tags(item, service_of(item)), *([f"upstream:{reader.split()[0]}"] if reader else [])],
                explains=["errors", "exception", "http_5xx", "db_errors", "metric_shift", "alert:*"],
                evidence=_record_refs(item, recs),
                actions=[
                    Action(
                        description=f"The database URL {who} runs with (it must name the writer endpoint)",
                        command=f"kubectl get deploy {who} -o yaml | grep -iE 'jdbc|datasource|database_url|db_host'",
                    ),
                    Action(
                        description="Point it back at the primary (writer) endpoint and restart it",
                        command=f"kubectl set env deploy/{who} <DATASOURCE_URL>=<writer endpoint>",
                        kind="write",
                    ),
                ],
            )
        )
    return with_aliases(out)


# ---------------------------------------------------------------- prepared statements behind a transaction pooler

# server-side prepared statements a client made on one server connection and used on another (pgjdbc's "S_1",
# psycopg's, asyncpg's "__asyncpg_stmt_1__", Npgsql's): the pooler between them hands out server connections per
# transaction
PREPARED_LOST = re.compile(r"prepared statement \"?[\w$]+\"? (?:does not exist|already exists)", re.I)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def prepared_statements_pooled(evidence: EvidenceSet) -> list[Finding]:
    """Clients whose prepared statements vanish or collide on the server: a connection pooler in transaction mode
    (PgBouncer pool_mode = transaction, RDS Proxy, Odyssey) hands each transaction another server connection, and
    the driver's server-side prepared statements live on the connection that made them."""
    hits = [rec for rec in records_with(evidence, ("prepared statement",)) if PREPARED_LOST.search(rec.msg)]
    if len(hits) < CAPACITY_MIN:
        return []
    first, last = _span(hits)
    now = now_of(evidence)
    if now is not None and last is not None and now - last >= STOPPED_AFTER_S:
        return []
    item = hits[0].item
    who = sorted({service_of(r.item) or r.item.object for r in hits})
    sample = " ".join(hits[0].msg.split())[:200]
    return [
        Finding(
            analyzer="prepared_statements_pooled",
            domain=Domain.LOGS,
            role="cause",
            code="prepared_statements_pooled",
            category=Category.CONFIGURATION_ERROR,
            title=f"prepared statements lost between server connections ({len(hits)}x): a transaction-mode pooler",
            mechanism=(
                f"{', '.join(who[:3])} log '{sample}' x{len(hits)} {span_text(first, last)}: the driver's server-side "
                "prepared statement was made on one server connection and used on another, which is what a "
                "connection pooler in transaction mode does (PgBouncer pool_mode = transaction, RDS Proxy): the "
                "pooler's mode does not fit a client that prepares statements."
            ),
            object="connection pooler mode (pool_mode)",
            score=0.82,
            ts=first,
            tags=[*object_tags(item, service_of(item)), "pooler:pgbouncer"],
            explains=["errors", "exception", "http_5xx", "db_errors", "metric_shift", "alert:*"],
            evidence=[ref_of(r) for r in hits[:6]],
            actions=[
                Action(
                    description="The pooler's mode and when it changed",
                    command="psql -p 6432 pgbouncer -c 'SHOW CONFIG;' | grep pool_mode",
                ),
                Action(
                    description="Put pool_mode back to session for this database (or turn off server-side "
                    "prepared statements in the driver: prepareThreshold=0), then reload the pooler",
                    command="sed -i 's/^pool_mode = transaction/pool_mode = session/' /etc/pgbouncer/pgbouncer.ini "
                    "&& systemctl reload pgbouncer",
                    kind="write",
                ),
            ],
        )
    ]


# ---------------------------------------------------------------- a database driver told another datacenter

# the DataStax Java driver (4.x) told a local datacenter the cluster does not have: it ignores every node
_WRONG_LOCAL_DC = re.compile(
    r"You specified (?P<dc>[\w.\-]+) as the local DC, but some contact points are from a different DC"
    r"(?:[^\n]*?\)=(?P<real>[\w.\-]+))?"
)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def wrong_local_datacenter(evidence: EvidenceSet) -> list[Finding]:
    """A Cassandra client whose configured local datacenter is not the cluster's: the driver's load-balancing
    policy skips every node of the other datacenter, so every query fails with NoNodeAvailableException while
    all the nodes are up."""
    found = next(
        ((rec, m) for rec in records_with(evidence, ("local DC",)) if (m := _WRONG_LOCAL_DC.search(rec.msg))), None
    )
    if found is None:
        return []
    rec, m = found
    who = service_of(rec.item) or rec.item.object
    real = f" (the cluster's datacenter is {m['real']})" if m["real"] else ""
    return [
        Finding(
            analyzer="wrong_local_datacenter",
            domain=Domain.LOGS,
            role="cause",
            code="wrong_local_datacenter",
            category=Category.CONFIGURATION_ERROR,
            title=f"{who}'s Cassandra driver is set to local datacenter {m['dc']}{real}",
            mechanism=(
                f"{who}'s Cassandra driver runs with local-datacenter = {m['dc']}, but the contact points are in "
                f"another datacenter{real}: its load-balancing policy ignores every node, so queries fail with "
                "NoNodeAvailableException while the cluster is up."
            ),
            object=f"Cassandra driver settings of {who}",
            score=0.85,
            ts=rec.ts,
            tags=[*object_tags(rec.item, service_of(rec.item)), "setting:local-datacenter"],
            explains=["errors", "exception", "http_5xx", "db_errors", "metric_shift", "alert:*"],
            evidence=[ref_of(rec)],
            actions=[
                Action(description="The datacenter the cluster reports", command="nodetool status | grep Datacenter"),
                Action(
                    description="Set the driver's local datacenter to the cluster's and restart",
                    command="datastax-java-driver.basic.load-balancing-policy.local-datacenter = "
                    f"{m['real'] or '<the cluster datacenter>'}",
                    kind="write",
                ),
            ],
        )
    ]


# ---------------------------------------------------------------- request bodies over the proxy's limit

# nginx refusing a request body over client_max_body_size (1m by default) with 413; group 1: the body's size
BODY_TOO_LARGE = re.compile(r"client intended to send too large (?:chunked )?body(?:: (\d+) bytes)?")
BODY_LIMIT_MIN = 3  # refused uploads that make a pattern rather than one odd client


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def body_size_limit(evidence: EvidenceSet) -> list[Finding]:
    """Uploads nginx refuses as too large (413): its client_max_body_size (1 MB unless set) is below what the
    application accepts, typically after a configuration change dropped or lowered the directive."""
    hits = [
        (rec, int(m[1]) if m[1] else None)
        for rec in records_with(evidence, ("too large",))
        if (m := BODY_TOO_LARGE.search(rec.msg))
    ]
    if len(hits) < BODY_LIMIT_MIN:
        return []
    first, last = _span([rec for rec, _ in hits])
    now = now_of(evidence)
    if now is not None and last is not None and now - last >= 6 * 3600:
        return []
    sizes = sorted(b for _, b in hits if b is not None)
    smallest = f"; the smallest refused body was {sizes[0] / 2**20:.1f} MiB" if sizes else ""
    item = hits[0][0].item
    who = service_of(item) or item.object
    return [
        Finding(
            analyzer="body_size_limit",
            domain=Domain.LOGS,
            role="cause",
            code="body_size_limit",
            category=Category.CONFIGURATION_ERROR,
            title=f"nginx refuses uploads as too large (413) {len(hits)}x: client_max_body_size",
            mechanism=(
                f"nginx on {who} refused {len(hits)} request bodies as too large {span_text(first, last)}"
                f"{smallest}, answering 413 Request Entity Too Large: its client_max_body_size (1 MB when unset) is "
                "below the uploads the application takes, so they fail before reaching it (a changed or dropped "
                "directive)."
            ),
            object=f"client_max_body_size of nginx on {who}",
            score=0.8,
            ts=first,
            tags=[*object_tags(item, service_of(item)), "setting:client_max_body_size"],
            explains=["errors", "http_4xx", "http_413", "metric_shift", "alert:*"],
            evidence=[ref_of(rec) for rec, _ in hits[:4]],
            actions=[
                Action(
                    description="The body size limit nginx runs with, per server block",
                    command="nginx -T 2>/dev/null | grep -n client_max_body_size",
                ),
                Action(
                    description="Set client_max_body_size to what the application accepts, then reload nginx",
                    command="echo 'client_max_body_size 25m;' > /etc/nginx/conf.d/upload-size.conf && nginx -t && "
                    "systemctl reload nginx",
                    kind="write",
                ),
            ],
        )
    ]


# ---------------------------------------------------------------- an identity provider refusing a client's settings

# an OAuth/OIDC provider refusing a login for the client's registration, not the user's credentials: Keycloak's
# error="invalid_redirect_uri", Google's and Auth0's redirect_uri_mismatch, Entra ID's AADSTS50011 (reply URL) and
# AADSTS700016 (unknown application), Okta's "The 'redirect_uri' parameter must be a Login redirect URI"
OAUTH_CLIENT_REFUSED = re.compile(
    r"error=\"?(?P<kc>invalid_redirect_uri|client_not_found|invalid_client_credentials|unauthorized_client)\b|"
    r"\b(?P<std>redirect_uri_mismatch)\b|\b(?P<aad>AADSTS(?:50011|700016|7000215|500113))\b|"
    r"'redirect_uri' parameter must be (?:a|an) (?:Login|allowed) redirect URI",
    re.I,
)
_CLIENT_ID = re.compile(r"\bclient(?:_?id|Id)[\"']?\s*[=:]\s*[\"']?(?P<client>[\w.\-]+)")


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def oauth_client_refused(evidence: EvidenceSet) -> list[Finding]:
    """Logins an identity provider refuses for the client's registration (a redirect URI it does not list, a client
    it does not know, a secret it does not accept): the client's settings at the provider or in the application
    changed, so every login of that client fails while the provider itself is up."""
    hits: dict[str, list[tuple[Rec, str]]] = {}  # client -> (refusal, its reason)
    for rec in records_with(evidence, ("redirect", "Redirect", "client", "Client", "AADSTS")):
        if m := OAUTH_CLIENT_REFUSED.search(rec.msg):
            c = _CLIENT_ID.search(rec.msg)
            reason = next((g for g in m.groups() if g), None) or "redirect_uri not registered"
            hits.setdefault(c["client"] if c else "?", []).append((rec, reason))
    now = now_of(evidence)
    out: list[Finding] = []
    for client, recs in hits.items():
        if len(recs) < CAPACITY_MIN:
            continue
        first, last = _span([r for r, _ in recs])
        stopped = now is not None and last is not None and now - last >= STOPPED_AFTER_S
        reason = Counter(x for _, x in recs).most_common(1)[0][0]
        rec = recs[0][0]
        item = rec.item
        who = f"client {client}" if client != "?" else "an OAuth client"
        out.append(
            Finding(
                analyzer="oauth_client_refused",
                domain=Domain.LOGS,
                role="benign" if stopped else "cause",
                code="oauth_client_refused_stopped" if stopped else "oauth_client_refused",
                category=Category.HEALTHY if stopped else Category.CONFIGURATION_ERROR,
                title=f"the identity provider refuses logins of {who}: {reason} ({len(recs)}x)"
                + (" (stopped)" if stopped else ""),
                mechanism=(
                    f"the identity provider refused {len(recs)} logins of {who} with {reason} "
                    f"{span_text(first, last)}: the client's registration (its redirect URIs, client id or secret) "
                    "no longer matches what the application sends, so its logins fail while the provider is up "
                    f"('{' '.join(rec.msg.split())[:180]}')."
                ),
                object=f"OAuth {who}",
                score=0.2 if stopped else 0.8,
                ts=first,
                tags=[*object_tags(item, service_of(item)), f"client:{client}"],
                explains=["errors", "http_4xx", "http_5xx", "metric_shift", "step_change", "alert:*"],
                evidence=[ref_of(r) for r, _ in recs[:4]],
                actions=[
                    Action(
                        description=f"The redirect URIs and settings registered for {who}, and their last change",
                        command=f"kcadm.sh get clients -r <realm> -q clientId={client} --fields redirectUris",
                    ),
                    Action(
                        description=f"Restore {who}'s registration (add the redirect URI the application sends)",
                        command=f"kcadm.sh update clients/<id> -r <realm> -s 'redirectUris=[...]'  # {client}",
                        kind="write",
                    ),
                ],
            )
        )
    return out


# ---------------------------------------------------------------- a server refusing to start on its configuration

# what servers print when their own configuration stops them at start-up
STARTUP_CONFIG = re.compile(
    r"Cannot start node if snitch's (?:data center|rack) \([^)]*\) differs from previous|"
    r"ConfigurationException|Invalid yaml|Fatal configuration error|"
    r"configuration file \"[^\"]+\" contains errors|invalid value for parameter \"[^\"]+\"|"
    r"\[emerg\] .*(?:unknown directive|invalid|in /etc/\S+:\d+)|"
    r"\*\*\* FATAL CONFIG FILE ERROR|unknown variable '[^']+'|"
    r"org\.apache\.kafka\.common\.config\.ConfigException|unknown setting \[[^\]]+\]|"
    r"Failed to parse (?:the )?config(?:uration)?(?: file)?",
    re.I,
)


# words every STARTUP_CONFIG line holds, found by a fast literal scan before the full pattern runs
_STARTUP_HINT = re.compile(r"snitch|onfig|ONFIG|yaml|parameter|emerg|variable|setting")
_STARTED = re.compile(
    r"ready to accept connections|Starting listening for CQL clients|startup complete|started successfully|"
    r"Server startup|listening on|Started \w",
    re.I,
)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def startup_config_refused(evidence: EvidenceSet) -> list[Finding]:
    """A server (a database node, a broker, a web server) that refuses to start because of its own configuration:
    it stays down until the setting is fixed, so restarts do not help and its clients fail. A configuration error
    of that server, named with the line it printed."""
    out: list[Finding] = []
    for item in evidence.kind("log"):
        recs = [
            r
            for r in item.data.get("records") or ()
            if r.get("level") not in ("info", "debug")
            and _STARTUP_HINT.search(str(r.get("msg") or ""))
            and STARTUP_CONFIG.search(str(r.get("msg") or ""))
        ]
        if not recs:
            continue
        stamps = [r["ts"] for r in recs if isinstance(r.get("ts"), int | float)]
        last = max(stamps, default=None)
        if last is not None and any(
            isinstance(r.get("ts"), int | float) and r["ts"] > last and _STARTED.search(str(r.get("msg") or ""))
            for r in item.data.get("records") or ()
        ):
            continue  # it started since: the error is history (a refusal to start is followed by silence)
        who = service_of(item) or item.object
        sample = " ".join(str(recs[0].get("msg") or "").split())[:220]
        out.append(
            Finding(
                analyzer="startup_config_refused",
                domain=Domain.LOGS,
                role="cause",
                code="startup_config_refused",
                category=Category.CONFIGURATION_ERROR,
                title=f"{who} refuses to start on its configuration ({len(recs)}x)",
                mechanism=(
                    f"{who} stops at start-up on its own configuration: '{sample}'"
                    + (f" ({len(recs)}x {span_text(min(stamps), last)})" if stamps else "")
                    + ": it stays down until the setting is fixed, and its clients fail meanwhile."
                ),
                object=who,
                score=0.85,
                ts=min(stamps, default=None),
                tags=object_tags(item, service_of(item)),
                explains=[
                    "process_down",
                    "connection_refused",
                    "upstream_*",
                    "errors",
                    "exception",
                    "db_*",
                    "crash_loop",
                    "pod_restarts",
                    "http_5xx",
                    "alert:*",
                ],
                evidence=_record_refs(item, recs),
                actions=[
                    Action(
                        description=f"The configuration {who} read and the line it refused",
                        command=f"grep -n -B2 -A2 '<setting>' <config of {who}>",
                    ),
                    Action(
                        description="Restore the previous setting and start it again",
                        command=f"systemctl restart {who}",
                        kind="write",
                    ),
                ],
            )
        )
    return with_aliases(out)


# ---------------------------------------------------------------- webhooks refused on their signature

# a webhook receiver rejecting deliveries whose signature does not verify against its signing secret (Stripe's
# "No signatures found matching the expected signature", GitHub's X-Hub-Signature, Slack's, Shopify's HMAC)
WEBHOOK_SIGNATURE_FAILED = re.compile(
    r"No signatures found matching the expected signature|signature verification failed|"
    r"webhook signature (?:verification )?(?:failed|mismatch|(?:is )?invalid)|invalid (?:webhook |request )?signature|"
    r"signature (?:mismatch|does not match)|HMAC (?:validation|verification) failed|"
    r"X-(?:Hub|Slack|Shopify-Hmac)-Signature\S* (?:mismatch|invalid|did not match)",
    re.I,
)
WEBHOOK_VERIFIED = re.compile(
    r"\b(?:event|signature|webhook|payload) verified\b|\bverified (?:\w+ )?(?:event|webhook)", re.I
)
SIGNATURE_FAILED_SHARE = 0.8  # of the deliveries since the first failure: all of them, not a probe or a replay


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def webhook_signature_refused(evidence: EvidenceSet) -> list[Finding]:
    """Every webhook delivery refused on its signature since some moment, where deliveries verified before: the
    sender signs with a secret the receiver does not hold (an endpoint recreated or its secret rolled, and the new
    secret never deployed). A few refusals among verified deliveries are probes or replays, not this."""
    by_service: dict[str, tuple[list[Rec], list[Rec]]] = {}
    for rec in records_with(evidence, ("ignature", "SIGNATURE", "HMAC", "verified", "Verified")):
        failed = bool(WEBHOOK_SIGNATURE_FAILED.search(rec.msg))
        if failed or WEBHOOK_VERIFIED.search(rec.msg):
            bad, ok = by_service.setdefault(service_of(rec.item) or rec.item.object, ([], []))
            (bad if failed else ok).append(rec)
    now = now_of(evidence)
    out: list[Finding] = []
    for service, (bad, ok) in by_service.items():
        if len(bad) < CAPACITY_MIN:
            continue
        first, last = _span(bad)
        ok_after = [r for r in ok if first is not None and r.ts is not None and r.ts > first]
        if len(bad) < SIGNATURE_FAILED_SHARE * (len(bad) + len(ok_after)):
            continue
        stopped = now is not None and last is not None and now - last >= STOPPED_AFTER_S
        before = " after deliveries verified until then" if len(ok) > len(ok_after) else ""
        sample = " ".join(bad[0].msg.split())[:180]
        out.append(
            Finding(
                analyzer="webhook_signature_refused",
                domain=Domain.LOGS,
                role="benign" if stopped else "cause",
                code="webhook_signature_refused_stopped" if stopped else "webhook_signature_refused",
                category=Category.HEALTHY if stopped else Category.CONFIGURATION_ERROR,
                title=f"{service} refuses webhook deliveries on their signature ({len(bad)}x)"
                + (" (stopped)" if stopped else ""),
                mechanism=(
                    f"{service} refused {len(bad)} webhook deliveries whose signature does not match its signing "
                    f"secret {span_text(first, last)}{before}: the sender signs with a secret {service} does not "
                    f"hold (the webhook endpoint was recreated or its secret rolled, and the new secret was never "
                    f"deployed) ('{sample}')."
                ),
                object=f"webhook signing secret of {service}",
                score=0.2 if stopped else 0.8,
                ts=first,
                tags=[*object_tags(bad[0].item, service_of(bad[0].item)), f"service:{service}"],
                explains=["errors", "http_4xx", "http_5xx", "metric_shift", "step_change", "alert:*", "exception"],
                evidence=[ref_of(r) for r in (bad[0], bad[-1])],
                actions=[
                    Action(
                        description=f"When the sender's webhook endpoint or its signing secret last changed, and the "
                        f"secret {service} reads",
                        command="stripe webhook_endpoints list  # or the sender's console; then the secret store "
                        f"entry {service} reads",
                    ),
                    Action(
                        description=f"Put the endpoint's current signing secret where {service} reads it and restart",
                        command=f"# update the signing secret of {service} in its secret store, then redeploy",
                        kind="write",
                    ),
                ],
            )
        )
    return out
