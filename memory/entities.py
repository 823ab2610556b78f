"""What a request is about: services, hosts, URLs, paths, numbers, times. Two requests that differ in any
of these are different requests, however close their embeddings are ("restart payments-api" is not
"restart orders-api"). The planner's slot filling reads the same patterns."""

from __future__ import annotations

import re

URL = re.compile(r"https?://[^\s,;'\"<>)]+")
PATH = re.compile(r"(?<![\w:/])(/(?:[\w.@-]+/?)+)")
SERVICE = re.compile(
    r"\b([a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?:api|svc|service|web|worker|db|gateway|frontend|backend|queue|cache))\b"
)
NAMED_SERVICE = re.compile(
    r"\bwhy (?:is|are) (?:the )?([a-z][a-z0-9-]{1,40}?)(?: service)? (?:so )?(?:slow|down|failing|erroring|timing out)"
)
IPV4 = re.compile(r"\b(\d{1,3}(?:\.\d{1,3}){3})(?::\d+)?\b")
HOSTNAME = re.compile(r"\b([a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|lan|com|net|org|io|dev|cloud))\b")
CLOCK = re.compile(r"\b(\d{1,2}):(\d{2})\b")
NUMBER = re.compile(r"(?<![\w.:/-])(\d+(?:\.\d+)?)\s*(%|ms|s|sec|seconds?|m|min|minutes?|h|hours?|d|days?|gb|mb)?\b")
QUOTED = re.compile(r"[\"']([^\"']{1,200})[\"']")
# systems an operator names by product; "check redis" and "check postgres" are different requests
SYSTEMS = {
    "redis", "postgres", "postgresql", "mysql", "mariadb", "mongodb", "kafka", "rabbitmq", "nginx", "apache",
    "haproxy", "envoy", "kubernetes", "k8s", "docker", "celery", "elasticsearch", "opensearch", "memcached",
    "cassandra", "etcd", "consul", "vault", "prometheus", "grafana", "dns", "ntp", "ssh", "cron", "systemd",
    "disk", "memory", "cpu", "network", "tls", "certificate", "gpu",
}  # fmt: skip
_SYSTEM_ALIASES = {
    "postgresql": "postgres", "pg": "postgres", "k8s": "kubernetes", "ram": "memory", "ssl": "tls",
    "cert": "tls", "certificate": "tls", "certs": "tls", "certificates": "tls",
}  # fmt: skip
_WORD = re.compile(r"[a-z][a-z0-9]+")


def extract_entities(text: str) -> dict[str, frozenset[str]]:
    low = text.lower()
    urls = frozenset(u.rstrip(".") for u in URL.findall(low))
    rest = URL.sub(" ", low)
    words = set(_WORD.findall(rest))
    systems = frozenset(_SYSTEM_ALIASES.get(w, w) for w in words if w in SYSTEMS or w in _SYSTEM_ALIASES)
    clock = frozenset(f"{int(h):02d}:{m}" for h, m in CLOCK.findall(rest))
    no_clock = CLOCK.sub(" ", rest)
    numbers = frozenset(f"{n}{(u or '')[:1]}" for n, u in NUMBER.findall(IPV4.sub(" ", no_clock)))
    return {
        # only the strict service pattern: "why is X slow" matches one phrasing of a request and not another,
        # and a verifier that trusts it rejects true paraphrases
        "services": frozenset(SERVICE.findall(rest)),
        "urls": urls,
        "paths": frozenset(PATH.findall(rest)),
        "hosts": frozenset(IPV4.findall(rest)) | frozenset(HOSTNAME.findall(rest)),
        "times": clock,
        "numbers": numbers,
        "systems": systems,
        "quoted": frozenset(QUOTED.findall(text)),
    }


def entity_values(entities: dict[str, frozenset[str]]) -> list[str]:
    return sorted(v for values in entities.values() for v in values)


def same_entities(a: dict[str, frozenset[str]], b: dict[str, frozenset[str]]) -> tuple[bool, str]:
    """Whether two requests name the same things; the reason when they do not."""
    for kind in a.keys() | b.keys():
        left, right = a.get(kind, frozenset()), b.get(kind, frozenset())
        if left != right:
            return False, f"{kind} differ: {sorted(left)} vs {sorted(right)}"
    return True, ""
