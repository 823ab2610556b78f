"""Credentials and permissions refused (RBAC, 401/403 from a provider), and our own rate limiter refusing
clients."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import (
    AUTH_DENIED,
    DB_DENIED,
    Rec,
    fmt_ts,
    log_end,
    now_of,
    records_with,
    service_of,
    signature_records,
    span_text,
    with_aliases,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs._shared import ENDED_LONG_AGO_S
from diagnosis.analyzers.network._shared import MIN_FAILURES, STOPPED_AFTER_S, _refs, ended
from diagnosis.analyzers.network.extraction import _target, _target_tags
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding

# ---------------------------------------------------------------- credentials and permissions refused
_RBAC = re.compile(r'is forbidden: User "(?P<user>[^"]+)" cannot (?P<verb>\w+) resource "(?P<res>[^"]+)"')
_SECRET_NAME = re.compile(r"\b([A-Z][A-Z0-9]*_)+(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)\b")

# an MQTT broker's own refusal of a client (EMQX authz): the broker logs it, naming the client, user and topic
_BROKER_ACL = re.compile(r"authorization_permission_denied|cannot_publish_to_topic_due_to_not_authorized")
_MQTT_USER = re.compile(r"\busername: ([\w.\-]+)")
_MQTT_TOPIC = re.compile(r"\btopic: (\S+?),?(?:\s|$)")


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def access_denied(evidence: EvidenceSet) -> list[Finding]:
    """Calls the other side refused because of who made them (401/403, Kubernetes RBAC, AWS AccessDenied, gRPC
    PERMISSION_DENIED, invalid or expired keys and tokens): the credentials or permissions are set wrong, which
    no retry or scaling fixes. One finding per target (or RBAC subject) with at least MIN_FAILURES refusals."""
    now = now_of(evidence)
    groups: dict[str, list[Rec]] = {}
    for rec in signature_records(evidence):
        if not AUTH_DENIED.search(rec.msg):
            continue
        m = _RBAC.search(rec.msg)
        key = f"serviceaccount {m['user']}" if m else (_target(rec.msg) or service_of(rec.item) or rec.item.object)
        groups.setdefault(key, []).append(rec)
    out: list[Finding] = []
    for target, recs in groups.items():
        if len(recs) < MIN_FAILURES:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        first, last = recs[0].ts, recs[-1].ts
        stopped = ended(recs, last, now)
        callers = sorted({c for r in recs if (c := service_of(r.item))})
        m = _RBAC.search(recs[-1].msg)
        sample = " ".join(recs[-1].msg.split())
        hit = AUTH_DENIED.search(sample)
        shown = sample[max(0, hit.start() - 60) :][:220] if hit else sample[:220]
        secret = next((s.group(0) for r in recs for s in [_SECRET_NAME.search(r.msg)] if s), None)
        db = DB_DENIED.search(sample)
        if m:
            what = (
                f"{m['user']} is not allowed to {m['verb']} {m['res']} (Kubernetes RBAC: the API server answers "
                "forbidden); its Role/ClusterRole or binding lacks that permission"
            )
        elif _NOT_ALLOWED_ORIGIN.search(sample):
            ip = _ORIGIN_IP.search(sample)
            origin = ip.group(1) if ip else "address"
            what = (
                f"{'the partner' if target in callers else target} refuses the calls of "
                f"{', '.join(callers) or 'its caller'} because their origin {origin} is not on its allowlist: our "
                "egress address changed (a NAT gateway or elastic IP replaced, traffic moved to another egress) or "
                "the partner's allowlist was edited"
            )
        elif jwks := _KEY_SET_MISS.search(sample):
            what = (
                f"{', '.join(callers) or 'the service'} rejects the tokens it is sent: their key id {jwks['kid']} is "
                f"not in the key set it fetches{' from ' + jwks['url'] if jwks['url'] else ''} (a JWKS URL of another "
                "environment in its settings, or an issuer key it does not know)"
            )
        elif xfr := _XFR_DENIED.search(sample):
            peers = sorted({p.group(1) for r in recs if (p := _XFR_PEER.search(r.msg))})
            what = (
                f"the DNS primary {', '.join(callers) or target} refuses transfers of zone {xfr.group(1)} to its "
                f"secondaries{' ' + ', '.join(peers[:4]) if peers else ''}: its allow-transfer (or the TSIG key it "
                "now requires) does not admit them, so they keep serving the old zone and answer NXDOMAIN for "
                "records added since"
            )
        elif _NO_ENCRYPTION.search(sample):
            user = _DB_USER.search(sample)
            what = (
                f"the database refuses the unencrypted connections of {', '.join(callers) or 'its client'}"
                f"{' (user ' + user.group(1) + ')' if user else ''}: it now accepts only SSL (pg_hba `hostssl`, "
                "rds.force_ssl=1) and the client connects without it (sslmode=disable in its settings)"
            )
        elif _BROKER_ACL.search(sample):
            user = _MQTT_USER.search(sample)
            topic = _MQTT_TOPIC.search(sample)
            what = (
                f"the MQTT broker{' ' + ', '.join(callers) if callers else ''} refuses the publishes of "
                f"{'user ' + user.group(1) if user else 'a client'}"
                f"{' to ' + topic.group(1) if topic else ''} as not authorised: its ACL (authorization rules) "
                "does not allow that client that topic, so every message is dropped"
            )
        elif pw := _DATASTORE_PASSWORD.search(sample):
            user = _DB_USER.search(" ".join(r.msg for r in recs[-5:]))
            what = (
                f"the datastore {'at ' + target + ' ' if target not in callers else ''}refuses the password "
                f"{'of user ' + user.group(1) + ' ' if user else ''}that {', '.join(callers) or 'its client'} "
                f"sends ({pw.group(0)}): the credential the client holds and the one the server (or its connection "
                "pooler's auth file) checks differ, as when a rotation reached only one side"
            )
        elif db:
            what = (
                f"the database refuses the commands of {', '.join(callers) or target} ({db.group(0)}): the database "
                "user it connects as no longer has the role or grant for them (it still logs in, so the password is "
                "right and the permission is what changed)"
            )
        else:
            what = (
                f"{'the API it calls' if target in callers else target} refuses the calls of "
                f"{', '.join(callers) or 'its caller'} as unauthorised "
                f"({'the credential ' + secret if secret else 'the API key, token or permissions'} it sends "
                "is wrong, expired or lacks access)"
            )
        revoked = _revoked(evidence, [*callers, target], first)
        revoked = revoked or _policy_changed(evidence, recs, first)
        if revoked is not None:
            what += f"; {revoked[0]}"
        rotation = _rotated_before(evidence, recs) if _DATASTORE_PASSWORD.search(sample) and not stopped else None
        if rotation is not None:  # the clients refreshed the rotated password after a few refusals
            stopped = True
            what = (
                f"the password of {', '.join(callers) or 'its clients'} was rotated at {fmt_ts(rotation.ts)} "
                f"('{rotation.msg.strip()[:120]}'); they were refused while they still held the old one and "
                "reconnected with the new one: a rotation's expected blip, over since"
            )
        out.append(
            Finding(
                analyzer="access_denied",
                domain=Domain.NETWORK,
                role="benign" if stopped else "cause",
                code="access_denied_stopped" if stopped else "access_denied",
                category=Category.HEALTHY if stopped else Category.CONFIGURATION_ERROR,
                title=f"{target}: access denied {len(recs)}x",
                mechanism=f"{what}: '{shown}' x{len(recs)} {span_text(first, last)}.",
                object=target,
                score=0.8,
                ts=first,
                tags=_target_tags(target) + [f"service:{c}" for c in callers],
                explains=[
                    "errors",
                    "exception",
                    "http_5xx",
                    "upstream_5xx",
                    "job_failed",
                    "crash_loop",
                    "pod_restarts",
                ],
                evidence=_refs(recs) + (_refs([revoked[1]]) if revoked is not None else []),
                actions=[
                    Action(
                        description="Check who the caller authenticates as and what it may do",
                        command=(
                            f"kubectl auth can-i {m['verb']} {m['res']} --as={m['user']}"
                            if m
                            else f"grep -n -m 5 -E '401|403|denied|forbidden' <{recs[0].item.object} log>"
                        ),
                    )
                ],
            )
        )
    return with_aliases(out)


_ROTATION = re.compile(
    r"\bRotation(?:Succeeded|Started)\b|\bRotateSecret\b|\brotation of \S+|"
    r"rotat\w+ (?:of )?(?:the )?(?:\S+ )?(?:password|secret|credential)",
    re.I,
)
ROTATION_BEFORE_S = 15 * 60  # a rotation this long before the first refusal can be what the clients missed
ROTATION_BLIP_S = 10 * 60  # clients that refresh on a refusal reconnect within this of the rotation


def _rotated_before(evidence: EvidenceSet, recs: list[Rec]) -> Rec | None:
    """A rotation of the credential (Secrets Manager's RotationSucceeded, a change record naming a password
    rotation) shortly before the first refusal, with the refusals over within minutes of it while the clients' log
    went on: the clients refreshed the rotated password on their own."""
    first, last = recs[0].ts, recs[-1].ts
    if first is None or last is None:
        return None
    rotation = next(
        (
            r
            for r in records_with(evidence, ("otation", "otate", "OTATION"))
            if r.ts is not None and first - ROTATION_BEFORE_S <= r.ts <= first + 60 and _ROTATION.search(r.msg)
        ),
        None,
    )
    if rotation is None or rotation.ts is None or last - rotation.ts > ROTATION_BLIP_S:
        return None
    return rotation if (log_end(recs, last) or last) - last >= 120 else None


_XFR_DENIED = re.compile(r"zone transfer '([^'/]+)[^']*' denied")
_XFR_PEER = re.compile(r"client (?:@0x[0-9a-f]+ )?([\d.:a-f]+)#\d+")
_NO_ENCRYPTION = re.compile(r"no pg_hba\.conf entry for host [^\n]*(?:no encryption|SSL off)", re.I)
_DATASTORE_PASSWORD = re.compile(
    r"password authentication failed|Access denied for user|Login failed for user|WRONGPASS|NOAUTH|"
    r"SASL authentication failed",
    re.I,
)
_DB_USER = re.compile(
    r"(?:password authentication failed for user|Access denied for user|Login failed for user|\buser[= ])"
    r"\W{0,2}([\w.\-]+)",
    re.I,
)
_NOT_ALLOWED_ORIGIN = re.compile(r"not (?:on the allow-?list|(?:allow|white)listed|allowed)|IP_NOT_ALLOWED", re.I)
_ORIGIN_IP = re.compile(r"\b(\d{1,3}(?:\.\d{1,3}){3})\b[^\n]{0,40}?not (?:on|allow|white)", re.I)
_KEY_SET_MISS = re.compile(
    r"kid \\?\"?(?P<kid>[\w.\-]+)\\?\"? not found in (?:the )?key ?set(?: fetched from (?P<url>\S+))?", re.I
)
# an audit log's IAM change that took a role from a principal ("bindingDeltas: REMOVE roles/x for serviceAccount:y")
_REMOVED = re.compile(r"\bREMOVE (?P<role>\S+) for (?:\w+:)?(?P<member>[\w.\-]+)(?:@[\w.\-]+)?")
_CHANGED_BY = re.compile(r"^(?P<method>\S+) (?P<resource>\S+) by (?:\w+:)?(?P<who>[\w.\-@]+)")


def _revoked(evidence: EvidenceSet, names: list[str], first: float | None) -> tuple[str, Rec] | None:
    """The IAM change that removed a role from the refused caller before its first refusal: what set it wrong."""
    wanted = {n.lower() for n in names if n}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "REMOVE " not in msg:
                continue
            ts = r.get("ts")
            if first is not None and isinstance(ts, int | float) and ts > first:
                continue
            for m in _REMOVED.finditer(msg):
                if m["member"].lower() in wanted:
                    by = _CHANGED_BY.match(msg)
                    where = f" on {by['resource']} by {by['who']}" if by else ""
                    return (
                        f"the IAM policy change{where} removed {m['role']} from {m['member']} just before",
                        Rec(item, ts, msg, r.get("line"), "info"),
                    )
    return None


# an audit log's call that rewrites who may do what on a resource (CloudTrail, Cloud Audit Logs)
_POLICY_CALL = re.compile(
    r"^(?P<call>Set\w*(?:Policy|Attributes)|Put\w*Policy|Update\w*Policy|(?:Attach|Detach|Delete)\w*Policy|"
    r"SetIamPolicy|Add\w*Permission|Remove\w*Permission|\S*\.SetIamPolicy)\s+(?P<res>\S+)"
)
POLICY_BEFORE_S = 2 * 3600  # a policy change this long before the first refusal may be what refused it


def _policy_changed(evidence: EvidenceSet, recs: list[Rec], first: float | None) -> tuple[str, Rec] | None:
    """The newest policy change, shortly before the first refusal, on a resource the refusals name (the queue,
    bucket or topic in their messages): the change that now refuses the caller."""
    if first is None:
        return None
    denied = " ".join(r.msg for r in recs[:20])
    best: tuple[float, str, Rec] | None = None
    for item in evidence.kind("log"):
        if not item.object.startswith(("cloudtrail/", "gcp/")) and "audit" not in item.object:
            continue
        for r in item.data.get("records") or ():
            ts, msg = r.get("ts"), str(r.get("msg") or "")
            m = _POLICY_CALL.match(msg)
            if not m or not isinstance(ts, int | float) or not 0 <= first - ts <= POLICY_BEFORE_S:
                continue
            name = re.split(r"[/:]", m["res"].rstrip("/"))[-1]
            if len(name) >= 4 and name in denied and (best is None or ts > best[0]):
                by = re.search(r" by (\S+)", msg)
                what = f"{m['call']} on {name}{' by ' + by.group(1) if by else ''} changed its policy just before"
                best = (float(ts), what, Rec(item, ts, msg, r.get("line"), "info"))
    return (best[1], best[2]) if best else None


# ---------------------------------------------------------------- our own rate limiter refusing clients
# nginx limit_req / limit_conn ("limiting requests, excess: 21.064 by zone "api_per_ip", client: 203.0.113.14"),
# Envoy's local rate limit (response flag RL, details local_rate_limited)
_OWN_LIMIT = re.compile(
    r"limiting (?:requests|connections)(?:, excess: [\d.]+)? by zone \"(?P<zone>[^\"]+)\"|local_rate_limited|"
    r"\" 429 RL\b"
)
_CLIENT = re.compile(r"\bclient: ([\d.:a-fA-F]+)|^(\d{1,3}(?:\.\d{1,3}){3}) ")
LIMITED_CLIENTS = 5  # distinct clients refused: fewer is the limiter stopping an abuser, as it should


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def own_rate_limits(evidence: EvidenceSet) -> list[Finding]:
    """Our own proxy's rate limit refusing many different clients: the limit is set below the real traffic (a
    configuration error, often right after a change to it); a few clients refused is the limit doing its job."""
    now = now_of(evidence)
    groups: dict[str, list[Rec]] = {}
    clients: dict[str, set[str]] = {}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "limit" not in msg and " RL" not in msg:
                continue
            m = _OWN_LIMIT.search(msg)
            if not m:
                continue
            zone = m["zone"] or "local rate limit"
            groups.setdefault(zone, []).append(Rec(item, r.get("ts"), msg, r.get("line"), "error"))
            c = _CLIENT.search(msg)
            if c:
                clients.setdefault(zone, set()).add(c.group(1) or c.group(2))
    out: list[Finding] = []
    for zone, recs in groups.items():
        if len(recs) < MIN_FAILURES * 3:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        n_clients = len(clients.get(zone, ()))
        many = n_clients >= LIMITED_CLIENTS or not clients.get(zone)
        stopped = now is not None and recs[-1].ts is not None and now - recs[-1].ts >= STOPPED_AFTER_S
        svcs = sorted({s for r in recs if (s := service_of(r.item))})
        cause = many and not stopped
        out.append(
            Finding(
                analyzer="own_rate_limits",
                domain=Domain.NETWORK,
                role="cause" if cause else "benign",
                code="rate_limit_too_low" if cause else "rate_limit_working",
                category=Category.CONFIGURATION_ERROR if cause else Category.HEALTHY,
                title=f"limit_req zone {zone} refuses {len(recs)} requests from {n_clients} clients",
                mechanism=(
                    f'our own rate limit (nginx limit_req zone "{zone}") refused {len(recs)} requests from '
                    f"{n_clients or 'many'} different clients {span_text(recs[0].ts, recs[-1].ts)}"
                    + (
                        ": the limit is set below the real traffic (check the zone's rate= and burst= and their "
                        "last change)."
                        if cause
                        else ": a few clients over the limit, which is the limiter doing its job."
                    )
                ),
                object=f"rate limit zone {zone}",
                score=0.8 if cause else 0.2,
                ts=recs[0].ts,
                tags=[f"service:{s}" for s in svcs] + [f"zone:{zone}"],
                explains=["http_5xx", "errors", "http_4xx", "error_rate"] if cause else [],
                evidence=_refs(recs),
                actions=[
                    Action(
                        description="The zone's configured rate and burst",
                        command=f"nginx -T 2>/dev/null | grep -nE 'limit_req(_zone)?.*{zone}'",
                    )
                ],
            )
        )
    return out


# ---------------------------------------------------------------- a server refusing its clients' credentials

_REQUEST = re.compile(r"\"\s*(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+\"\s+(?P<status>\d{3})\b")
# a server's own record of a credential changing: "User ci-deploy password changed", "API key for svc-x rotated"
_CREDENTIAL_CHANGED = re.compile(
    r"\b(?:user|account|service account|client|key|token|credential)s?\s+['\"]?(?P<who>[\w.@\-]{3,})['\"]?\s+"
    r"(?:password|secret|token|key|credentials?)?\s*(?:was |has been )?(?:changed|rotated|reset|revoked|regenerated|"
    r"updated)\b",
    re.I,
)
_CHANGE_WORDS = ("changed", "rotated", "reset", "revoked", "regenerated", "updated")
REFUSED_MIN = 10  # 401s of one method before it reads as a broken credential
REFUSED_SHARE = 0.8  # of that method's requests since the first 401
ACCEPTED_BEFORE_MIN = 3  # the same method answered 2xx before: the credential worked until then


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def credentials_refused_since(evidence: EvidenceSet) -> list[Finding]:
    """A server's access log where one method's requests (the writes: PUT, POST) went from 2xx to 401 at one moment
    and stayed there: the credential its clients send stopped being accepted (rotated, revoked, expired) while
    the clients kept the old one. A server record of that credential changing just before names it."""
    now = now_of(evidence)
    out: list[Finding] = []
    for item in evidence.kind("log"):
        by_method: dict[str, list[tuple[Rec, str]]] = {}
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "HTTP/" not in msg or (m := _REQUEST.search(msg)) is None:
                continue
            by_method.setdefault(m["method"], []).append(
                (Rec(item, r.get("ts"), msg, r.get("line"), None), m["status"])
            )
        for method, reqs in by_method.items():
            refused = [rec for rec, st in reqs if st == "401"]
            if len(refused) < REFUSED_MIN:
                continue
            first = refused[0]
            before = [rec for rec, st in reqs if st.startswith("2") and rec.ts is not None and first.ts is not None
                      and rec.ts < first.ts]  # fmt: skip
            since = [st for rec, st in reqs if rec.ts is not None and first.ts is not None and rec.ts >= first.ts]
            if len(before) < ACCEPTED_BEFORE_MIN or len(refused) < REFUSED_SHARE * len(since):
                continue
            last = refused[-1]
            if now is not None and last.ts is not None and now - last.ts >= ENDED_LONG_AGO_S:
                continue
            svc = service_of(item) or item.object
            if svc.lower() in ("request", "requests", "access", "access_log", "http"):
                svc = f"the server of {item.source}"  # an access log named for what it holds, not whose it is
            changed = _credential_change(evidence, before[-1].ts, first.ts)
            who = f"the credential of {changed[0]}" if changed else "the credential its clients send"
            note = f"; {changed[1].msg.strip()[:140]!r} just before" if changed else ""
            out.append(
                Finding(
                    analyzer="credentials_refused_since",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="credentials_refused",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"{svc} refuses {method} requests with 401 since {span_text(first.ts, None)}"
                    + (f" ({changed[0]})" if changed else ""),
                    mechanism=(
                        f"{svc} answered {len(refused)} {method} requests 401 Unauthorized "
                        f"{span_text(first.ts, last.ts)} where it accepted them before: {who} is no longer "
                        f"accepted (rotated, revoked or expired) and the clients still send the old one{note}."
                    ),
                    object=f"{who} at {svc}",
                    score=0.75,
                    ts=first.ts,
                    tags=[f"service:{svc}", *([f"user:{changed[0]}"] if changed else [])],
                    explains=["errors", "deploy_failed", "exception", "http_4xx", "alert:*", "metric_shift"],
                    evidence=_refs([before[-1], first, last] + ([changed[1]] if changed else [])),
                    actions=[
                        Action(
                            description=f"Which user the refused {method} requests authenticate as, and when its "
                            "credential last changed",
                            command=f"grep ' 401 ' <access log of {svc}> | tail; check the server's audit log",
                        ),
                        Action(
                            description="Put the current credential where the clients read it (CI credential store, "
                            "secret manager) and rerun",
                            command="# update the stored credential the clients use",
                            kind="write",
                        ),
                    ],
                )
            )
    return out


def _credential_change(evidence: EvidenceSet, after: float | None, before: float | None) -> tuple[str, Rec] | None:
    """A server's record of a credential changing between the last accepted and the first refused request."""
    if after is None or before is None:
        return None
    for rec in records_with(evidence, _CHANGE_WORDS):
        if rec.ts is not None and after - 60 <= rec.ts <= before + 60 and (m := _CREDENTIAL_CHANGED.search(rec.msg)):
            return m["who"], rec
    return None
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            ts = r.get("ts")
            if not isinstance(ts, int | float) or not (after - 60 <= ts <= before + 60):
                continue
            msg = str(r.get("msg") or "")
            if (m := _CREDENTIAL_CHANGED.search(msg)) is not None:
                return m["who"], Rec(item, ts, msg, r.get("line"), None)
    return None
