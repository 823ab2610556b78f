"""Callers pointed at the wrong port: a server that moved to another port (its callers' connections to the old one
are refused while its own log says it now listens elsewhere), and a client speaking another protocol than the port
it calls (gRPC to an HTTP/1 port, plain text to a TLS port, TLS to a plain one)."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import NET_REFUSED, Rec, service_of, signature_records, span_text, with_aliases
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.network._shared import MIN_FAILURES, _refs
from diagnosis.analyzers.network.extraction import _target, _target_tags
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding

# a server announcing where it listens: "http server listening" addr=0.0.0.0:8081, "Listening on 0.0.0.0:8081",
# "Tomcat started on port 8081", "Uvicorn running on http://0.0.0.0:8081"
_LISTENING = re.compile(
    r"(?:listening|started|running|serving|bound)\b[^\n]{0,60}?(?:\baddr(?:ess)?[=:]\s*\"?|\bon (?:port )?|://|"
    r"\bport[=: ]\s*)(?:[\w.\-]*|\[[0-9a-f:]*\]):?(?P<port>\d{2,5})\b",
    re.I,
)
_LOCAL = re.compile(r"^(?:127\.\d+\.\d+\.\d+|localhost|\[?::1\]?|0\.0\.0\.0)$")
# a journal or syslog line's program: "geo-01 geocoder[61402]: ..."
_PROGRAM = re.compile(r"^(?:\S+ )?(?P<name>[A-Za-z][\w.\-]*)\[\d+\]: ")
MOVED_BEFORE_S = 600.0  # the server came up on its new port at most this long before the first refusal


def _setting(evidence: EvidenceSet, ts: float, port: str) -> str | None:
    """The setting that carries the new port ("LISTEN_ADDR=0.0.0.0:8081"), where the server logged its config
    shortly before it listened."""
    rx = re.compile(rf"\b(?!addr\b|address\b|port\b)[A-Za-z_][\w.]*\s*[=:]\s*\"?[\w.\-]*:{port}\b")
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            t = r.get("ts")
            if isinstance(t, int | float) and ts - MOVED_BEFORE_S <= t <= ts:
                m = rx.search(str(r.get("msg") or ""))
                if m:
                    return m.group(0)
    return None


def loopback_refusals(evidence: EvidenceSet) -> dict[tuple[str, str], list[Rec]]:
    """Connections to a server on this machine (127.0.0.1, localhost) refused, by (host, port)."""
    refused: dict[tuple[str, str], list[Rec]] = {}
    for rec in signature_records(evidence):
        if not NET_REFUSED.search(rec.msg):
            continue
        host, _, port = (_target(rec.msg) or "").rpartition(":")
        if port.isdigit() and _LOCAL.match(host):
            refused.setdefault((host, port), []).append(rec)
    return refused


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def port_moved(evidence: EvidenceSet) -> list[Finding]:
    """Connections to a local server's port refused from just after that server restarted listening on another
    port: the server is up, the caller (a proxy's upstream, a client's URL) points at the old port. A
    configuration error of one of the two, not a dependency that is down."""
    refused = loopback_refusals(evidence)
    if not refused:
        return []
    listens: list[tuple[float, str, Rec]] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            ts = r.get("ts")
            if not isinstance(ts, int | float) or ("isten" not in msg and "tart" not in msg and "unning" not in msg):
                continue
            m = _LISTENING.search(msg)
            if m and not NET_REFUSED.search(msg):
                listens.append((float(ts), m["port"], Rec(item, ts, msg, r.get("line"), "info")))
    out: list[Finding] = []
    for (host, port), recs in refused.items():
        if len(recs) < MIN_FAILURES:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        first = recs[0].ts
        if first is None:
            continue
        # the last announcement before the refusals began: the server came back on another port
        before = [x for x in listens if first - MOVED_BEFORE_S <= x[0] <= first + 60]
        if not before:
            continue
        ts, new_port, said = max(before, key=lambda x: (x[0], _PROGRAM.search(x[2].msg) is not None))
        if new_port == port or any(x[1] == port and ts < x[0] for x in listens):
            continue
        prog = _PROGRAM.search(said.msg)
        server = prog["name"] if prog else service_of(said.item) or said.item.object
        setting = _setting(evidence, ts, new_port)
        callers = sorted({c for r in recs if (c := service_of(r.item))})
        out.append(
            Finding(
                analyzer="port_moved",
                domain=Domain.NETWORK,
                role="cause",
                code="port_mismatch",
                category=Category.CONFIGURATION_ERROR,
                title=f"{server} listens on port {new_port}, its callers still connect to {host}:{port}",
                mechanism=(
                    f"{server} restarted listening on port {new_port}"
                    + (f" ({setting})" if setting else "")
                    + f" ('{said.msg.strip()[:140]}'), but "
                    f"{', '.join(callers) or 'its caller'} still connects to {host}:{port}, where nothing listens: "
                    f"{len(recs)} connections refused {span_text(first, recs[-1].ts)}; the listen address and the "
                    "caller's upstream disagree (a changed port on one side only)."
                ),
                object=f"{host}:{port}",
                score=0.85,
                ts=first,
                tags=[*_target_tags(f"{host}:{port}"), f"service:{server}", *(f"service:{c}" for c in callers)],
                explains=["connection_refused", "upstream_*", "errors", "http_5xx", "alert:*"],
                evidence=_refs([said, *recs]),
                actions=[
                    Action(description="See which ports the server listens on", command="ss -ltnp"),
                    Action(
                        description=f"Point the caller at port {new_port}, or set the server back to {port}",
                        command=f"grep -rn ':{port}' /etc/nginx/ /etc/{server}/",
                    ),
                ],
            )
        )
    return with_aliases(out)


# the client and the port it calls speak different protocols: gRPC/HTTP2 reading an HTTP/1 answer ("error reading
# server preface: http2: frame too large"), TLS to a plain port ("first record does not look like a TLS handshake",
# OpenSSL's "wrong version number"), plain HTTP to a TLS port ("malformed HTTP response \x15\x03")
_PROTOCOL_MISMATCH = re.compile(
    r"error reading server preface|http2: frame too large|first record does not look like a TLS handshake|"
    r"SSL routines:[^\n]{0,60}wrong version number|\bwrong version number\b|malformed HTTP response \"\\x15|"
    r"server gave HTTP response to HTTPS client|HTTP/1\.x transport connection broken|"
    # a standalone Redis client sent to a Redis Cluster (it gets MOVED redirects it does not follow), and the reverse
    r"(?-i:\bMOVED \d{1,5} [\w.\-]+:\d+)|This instance has cluster support disabled",
    re.I,
)
_REDIS_MODE = re.compile(r"(?-i:\bMOVED \d{1,5} )|cluster support disabled", re.I)


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def protocol_mismatch(evidence: EvidenceSet) -> list[Finding]:
    """Calls to one address failing because the client speaks another protocol than the port answers with: the
    port (or the TLS setting) in the client's configuration is wrong, whatever the server's health."""
    groups: dict[str, list[Rec]] = {}
    for rec in signature_records(evidence):
        if (
            "preface" not in rec.msg
            and "ersion number" not in rec.msg
            and "TLS" not in rec.msg
            and "HTTP" not in (rec.msg)
            and "MOVED" not in rec.msg
            and "cluster support" not in rec.msg
        ):
            continue
        if _PROTOCOL_MISMATCH.search(rec.msg):
            groups.setdefault(_target(rec.msg) or service_of(rec.item) or rec.item.object, []).append(rec)
    out: list[Finding] = []
    for target, recs in groups.items():
        if len(recs) < MIN_FAILURES:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        hit = _PROTOCOL_MISMATCH.search(recs[-1].msg)
        said = hit.group(0) if hit else "protocol mismatch"
        callers = sorted({c for r in recs if (c := service_of(r.item))})
        port = target.rpartition(":")[2] if re.search(r":\d+$", target) else ""
        out.append(
            Finding(
                analyzer="protocol_mismatch",
                domain=Domain.NETWORK,
                role="cause",
                code="protocol_mismatch",
                category=Category.CONFIGURATION_ERROR,
                title=f"{', '.join(callers) or 'a client'} speaks another protocol than {target} ({len(recs)}x)",
                mechanism=(
                    f"{', '.join(callers) or 'the client'} calls {target} with a protocol that port does not speak "
                    f"('{said}' {len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}): "
                    + (
                        "the client talks to a Redis Cluster in standalone mode (or the reverse): its cluster setting "
                        "does not match the server, so every key the server does not hold is redirected and fails"
                        if _REDIS_MODE.search(said)
                        else f"the client is configured with the wrong port{f' ({port})' if port else ''} or TLS "
                        "setting (gRPC sent to an HTTP/1 port, TLS to a plain one), so every call fails"
                    )
                    + " while the server itself is healthy."
                ),
                object=target,
                score=0.85,
                ts=recs[0].ts,
                tags=[*_target_tags(target), *(f"service:{c}" for c in callers)],
                explains=["connection_refused", "upstream_*", "errors", "exception", "metric_shift", "alert:*"],
                evidence=_refs(recs),
                actions=[
                    Action(
                        description=f"Check which protocol and port {target} serves and which the client uses",
                        command=f"grep -rn ':{port or '<port>'}' <client configuration>",
                    )
                ],
            )
        )
    return with_aliases(out)


# Envoy's access log: the route names a cluster (a subset) that does not exist ("503 NC cluster_not_found")
_NO_CLUSTER = re.compile(r"\" (?P<code>\d{3}) NC\b|\bcluster_not_found\b|response_flags=NC\b|\"response_flags\":\"NC\"")
_AUTHORITY = re.compile(r"\"(?P<host>[A-Za-z0-9][\w.\-]*(?::\d+)?)\" \"[^\"]*\" [\d.:\-]+ [\d.:\-]+ (?P<up>\S+)")


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def route_to_missing_cluster(evidence: EvidenceSet) -> list[Finding]:
    """A mesh proxy answering 503 NC (no cluster): its route sends requests to a cluster that is not defined (a
    VirtualService subset its DestinationRule does not declare, a route to a removed Service), a configuration
    error of the routing, whatever the pods behind it."""
    groups: dict[str, list[Rec]] = {}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if " NC" not in msg and "cluster_not_found" not in msg and 'NC"' not in msg:
                continue
            if _NO_CLUSTER.search(msg):
                host = next((m.group(1) for m in re.finditer(r"\"([a-z0-9][\w.\-]*\.[a-z][\w.\-]*(?::\d+)?)\"", msg)
                             if not m.group(1)[0].isdigit()), None)  # fmt: skip
                groups.setdefault(host or service_of(item) or item.object, []).append(
                    Rec(item, r.get("ts"), msg, r.get("line"), "error")
                )
    out: list[Finding] = []
    for host, recs in groups.items():
        if len(recs) < MIN_FAILURES:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        out.append(
            Finding(
                analyzer="route_to_missing_cluster",
                domain=Domain.NETWORK,
                role="cause",
                code="route_cluster_missing",
                category=Category.CONFIGURATION_ERROR,
                title=f"requests to {host} routed to a cluster that does not exist (503 NC, {len(recs)}x)",
                mechanism=(
                    f"the proxy answers 503 NC (cluster_not_found) for {len(recs)} requests to {host} "
                    f"{span_text(recs[0].ts, recs[-1].ts)}: its route sends them to a cluster the mesh does not "
                    "define (a VirtualService subset missing from its DestinationRule, or a route to a removed "
                    "Service), so that share of the traffic fails before any pod sees it."
                ),
                object=f"route to {host}",
                score=0.85,
                ts=recs[0].ts,
                tags=[*_target_tags(host), *{f"service:{s}" for r in recs if (s := service_of(r.item))}],
                explains=["http_5xx", "upstream_*", "errors", "alert:*", "metric_shift"],
                evidence=_refs(recs),
                actions=[
                    Action(description="Check the routes and subsets", command="istioctl analyze -A"),
                    Action(
                        description=f"Compare the VirtualService's subsets for {host} with its DestinationRule",
                        command="kubectl get virtualservice,destinationrule -A -o yaml",
                    ),
                ],
            )
        )
    return with_aliases(out)


# ---------------------------------------------------------------- a unix socket that is not there

# a client connecting to a unix socket that does not exist: nginx's "connect() to unix:/run/php/php7.4-fpm.sock
# failed (2: No such file or directory)", Go's "dial unix /run/x.sock: connect: no such file or directory"
_MISSING_SOCKET = re.compile(
    r"connect\(\) to unix:(?P<p1>/[^\s:]+) failed \(2: No such file or directory\)|"
    r"dial unix (?P<p2>/\S+?): connect: no such file or directory",
    re.I,
)
_SOCKET_PATH = re.compile(r"(?<![\w/])(/(?:run|var/run|tmp|var/lib)/[\w./\-]*?[\w\-]+\.sock)\b")


def _family(path: str) -> str:
    """A socket's name less its version and suffix: php7.4-fpm.sock and php8.2-fpm.sock are both "php-fpm"."""
    return re.sub(r"[\d.]+", "", path.rsplit("/", 1)[-1].removesuffix(".sock"))


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def missing_socket(evidence: EvidenceSet) -> list[Finding]:
    """Calls to a unix socket that is not there while the evidence shows its server at another socket of the same
    family (php7.4-fpm.sock asked for, php8.2-fpm.sock served after an upgrade): the caller's configuration names
    the old path."""
    misses: dict[str, list[Rec]] = {}
    for rec in signature_records(evidence):
        if "unix" in rec.msg and (m := _MISSING_SOCKET.search(rec.msg)):
            misses.setdefault(m["p1"] or m["p2"], []).append(rec)
    if not misses:
        return []
    seen: dict[str, str] = {}  # other socket paths the evidence names -> where
    for item in evidence.kind("log"):
        # a server's own log, named after it (php8.2-fpm.log): the server runs under that name
        stem = item.source.rsplit("/", 1)[-1].split(".log", 1)[0]
        if re.search(r"\d", stem) and not stem.endswith(".sock"):
            seen.setdefault(f"{stem}.sock", f"by its own log {item.source}")
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if ".sock" in msg:
                for p in _SOCKET_PATH.findall(msg):
                    seen.setdefault(p, f"named in {item.object}")
    out: list[Finding] = []
    for path, recs in misses.items():
        name = path.rsplit("/", 1)[-1]
        served = sorted(
            p for p in seen if p.rsplit("/", 1)[-1] != name and _family(p) == _family(path) and p not in misses
        )
        if not served or len(recs) < 2:
            continue
        caller = service_of(recs[0].item) or recs[0].item.object
        out.append(
            Finding(
                analyzer="missing_socket",
                domain=Domain.NETWORK,
                role="cause",
                code="socket_path_mismatch",
                category=Category.CONFIGURATION_ERROR,
                title=f"{caller} connects to {path}, which does not exist; the server is at {served[0]}",
                mechanism=(
                    f"{caller} connects to the unix socket {path}, which does not exist ('{recs[0].msg.strip()[:160]}' "
                    f"{len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}), while the evidence shows its server at "
                    f"{served[0]} ({seen[served[0]]}): the caller's configuration (nginx fastcgi_pass, a client's "
                    "socket setting) still names the old path, after an upgrade moved the server."
                ),
                object=f"socket setting of {caller} ({path})",
                score=0.85,
                ts=recs[0].ts,
                tags=[f"service:{caller}", f"path:{path}"],
                explains=["http_5xx", "http_502", "errors", "upstream_unavailable", "metric_shift", "alert:*"],
                evidence=_refs(recs),
                actions=[
                    Action(
                        description=f"Where the configuration still names {path}",
                        command=f"grep -rn '{path}' /etc/nginx/ /etc/php/ 2>/dev/null",
                    ),
                    Action(
                        description=f"Point it at {served[0]} and reload",
                        command=f"sed -i 's#{path}#{served[0]}#' /etc/nginx/sites-enabled/* && nginx -t && "
                        "systemctl reload nginx",
                        kind="write",
                    ),
                ],
            )
        )
    return with_aliases(out)
