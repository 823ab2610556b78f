"""What a request is about, in one canonical form that the cache key, the verifier and slot filling share.

Two requests that name different things are different requests, however close their embeddings are
("restart payments-api" is not "restart orders-api"; with all-MiniLM-L6-v2 such pairs sit closer on average than
true paraphrases). So each request is reduced to canonical entities: clock times (14:00, 2pm, "after two"),
windows and durations (5 minutes, 5m, the last hour), numbers with units, HTTP codes and their names (502s,
bad gateway), environments (prod, production), hosts and IPs, service names (with or without -api, a namespace,
or an alias the semantic memory knows), named systems, URLs, paths and quoted strings; and to an intent: a
request that asks to change something is never served from the cache nor stored in it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

URL = re.compile(r"https?://[^\s,;'\"<>)]+")
PATH = re.compile(r"(?<![\w:/])(/(?:[\w.@-]+/?)+)")
SERVICE = re.compile(
    r"\b([a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?:api|svc|service|web|worker|db|gateway|frontend|backend|queue|cache))\b"
)
NAMED_SERVICE = re.compile(
    r"\bwhy (?:is|are) (?:the )?([a-z][a-z0-9-]{1,40}?)(?: service)? (?:so )?(?:slow|down|failing|erroring|timing out)"
)
IPV4 = re.compile(r"\b(\d{1,3}(?:\.\d{1,3}){3})(?::(\d+))?\b")
HOSTNAME = re.compile(r"\b([a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|lan|com|net|org|io|dev|cloud))\b")
QUOTED = re.compile(r"[\"']([^\"']{1,200})[\"']")

# systems an operator names by product; "check redis" and "check postgres" are different requests
SYSTEMS = {
    "redis", "postgres", "mysql", "mariadb", "mongodb", "kafka", "rabbitmq", "nginx", "apache", "haproxy",
    "envoy", "kubernetes", "docker", "celery", "elasticsearch", "opensearch", "memcached", "cassandra", "etcd",
    "consul", "vault", "prometheus", "grafana", "dns", "ntp", "ssh", "cron", "systemd", "disk", "memory", "cpu",
    "network", "tls", "gpu", "swap", "inodes", "zookeeper", "jenkins", "s3", "rds", "alertmanager",
}  # fmt: skip
_SYSTEM_ALIASES = {
    "postgresql": "postgres", "pg": "postgres", "psql": "postgres", "k8s": "kubernetes", "kube": "kubernetes",
    "ram": "memory", "mem": "memory", "ssl": "tls", "cert": "tls", "certificate": "tls", "certs": "tls",
    "certificates": "tls", "storage": "disk", "filesystem": "disk", "filesystems": "disk", "disks": "disk",
    "processor": "cpu", "cpus": "cpu", "mongo": "mongodb", "elastic": "elasticsearch", "es": "elasticsearch",
    "rabbit": "rabbitmq", "postgre": "postgres", "gpus": "gpu", "nvidia": "gpu",
}  # fmt: skip

# what asks for a change: never served from the cache, never stored
_CHANGE_VERBS = {
    "restart", "reboot", "stop", "start", "kill", "scale", "delete", "remove", "drop", "rollback", "revert",
    "clear", "flush", "purge", "silence", "mute", "terminate", "cancel", "drain", "cordon", "uncordon", "evict",
    "deploy", "redeploy", "upgrade", "downgrade", "apply", "patch", "set", "change", "update", "increase",
    "decrease", "raise", "lower", "resize", "truncate", "vacuum", "reindex", "failover", "promote", "rotate",
    "revoke", "disable", "enable", "pause", "resume", "wipe", "reset", "fix", "remediate", "bounce", "recycle",
    "expire", "invalidate", "rerun", "retry", "trigger", "install", "uninstall", "reload", "shutdown", "suspend",
    "unsuspend", "free", "clean", "cleanup", "grow", "shrink", "add", "create", "provision", "deprovision",
    "migrate", "unblock", "block", "allow", "deny", "ban", "unban", "throttle", "edit", "modify", "replace",
    "renew", "roll", "bump", "move", "evacuate", "quarantine", "isolate", "disconnect", "reconnect",
}  # fmt: skip
# a change verb after these is asked about, not asked for ("why did it restart", "when was it deployed")
_ASKED_ABOUT = {
    "why", "did", "does", "do", "was", "were", "has", "have", "had", "after", "since", "when", "what", "who",
    "how", "is", "are", "keeps", "keep", "kept", "before", "until", "caused", "causing", "cause", "last", "many",
    "often", "the", "a", "an", "its", "their", "of", "no", "not", "any", "every", "each", "frequent",
}  # fmt: skip
_POLITE = {
    "please", "pls", "plz", "kindly", "can", "could", "would", "will", "go", "ahead", "and", "then", "now", "need",
    "want", "to", "lets", "let's", "let", "us", "me", "i", "we", "you", "must", "should", "just",
}  # fmt: skip

# the ordinary words of ops requests: anything else that names something (checkout, payments, web-1) is a name
_COMMON = set(
    """
    a an the this that these those it its it's is are was were be been being am do does did done doing have has
    had having i me my we our us you your he she they them their there here what which who whom whose why how
    when where while whether if then than so as at by for from in into of off on onto out over under up down to
    with within without about above below after before since until till during between across through per via vs
    versus and or nor but not no yes any some all every each both either neither few more most less least much
    many lot lots very too also just only still yet already again ever never now currently right today tonight
    yesterday please pls plz kindly can could would will shall should may might must need needs want wants like
    let lets tell show give get got getting find found see look looking looks check checking checked verify
    confirm investigate investigation diagnose diagnosis explain analyse analyze analysis troubleshoot debug
    help figure happening happened happens going goes went wrong issue issues problem problems trouble matter
    broken break breaking fail fails failing failed failure failures error errors erroring err exception
    exceptions crash crashes crashing crashed down outage outages dead died dying unavailable unreachable
    unresponsive hang hangs hanging hung stuck slow slower slowly sluggish laggy lag lagging latency latencies
    delay delays delayed delayed response responses respond responding responsive request requests timing time
    times timeout timeouts timed spike spikes spiking spiked high higher low lower rising rise growing grew drop
    dropped dropping full almost usage use used using load loaded busy saturated saturation pressure capacity
    headroom utilisation utilization throughput traffic rate rates count counts number numbers total percent
    percentage level levels health healthy unhealthy status state ok okay fine alive up running run runs ran
    working work works ready readiness liveness probe probes reachable responding available availability uptime
    report reports reporting summary summarise summarize overview nightly daily weekly monthly hourly morning
    evening night afternoon noon midnight o'clock oclock clock ago last past previous recent recently next
    minute minutes min mins second seconds sec secs hour hours hr hrs day days week weeks month months window
    period span range between start started starting begin began since around roughly about approx service
    services svc app apps application applications api apis server servers machine machines host hosts box boxes
    node nodes instance instances cluster clusters pod pods container containers deployment deployments
    namespace namespaces endpoint endpoints url urls site website page pages frontend backend system systems
    database db databases queue queues cache caches worker workers job jobs cronjob process processes daemon
    connection connections connect connecting connected client clients session sessions query queries lock locks
    locking locked blocked blocking block waits waiting wait deadlock deadlocks transaction transactions
    replication replica replicas lag primary standby leader follower log logs logging line lines message
    messages event events alert alerts alerting alarm alarms incident incidents metric metrics graph graphs
    dashboard dashboards trend trends anomaly anomalies unusual weird strange odd spike certificate expiry
    expire expires expiring expired http https status code codes gateway bad internal not found forbidden
    unauthorized unavailable quick quickly fast faster performance perform performing degraded degradation
    impact impacted affecting affected users user customers customer everyone people everything anything
    something nothing thing things stuff whole entire overall general generally overnight lately yet one two
    three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty fifty sixty ninety
    hundred half quarter couple several since going on okay k kinda sort kind please thanks thank hey hi hello
    quick fyi asap urgent urgently top biggest largest most least worst best main primary big small free space
    left remaining usage size sizes grow growing consumed consumption consuming eating eats open opened close
    closed closing handle handles file files descriptor descriptors fd fds new old latest current recent same
    different other another again still keeps kept keep restarting restarted restarts rebooting crashlooping
    looping loop loops oom oomkilled killed kill kills memory leak leaking leaks dns resolve resolving
    resolution name names lookup lookups tls ssl handshake config configuration configured settings setting env
    environment environments variable variables deploy deployed deploying deploys rollout rollouts release
    released releases version versions rollback rolled change changes changed my our their his her your isn't
    aren't wasn't weren't doesn't don't didn't can't cannot won't wouldn't couldn't shouldn't haven't hasn't i'm
    we're they're you're that's what's there's here's how's where's who's let's whats hows thats theres
    percentile percentiles p50 p90 p95 p99 average avg mean median max min peak
    """.split()
)
_COMMON |= _CHANGE_VERBS

# verbs, adjectives and adverbs of ordinary English that requests use around the things they name: never names
_VERBS = """
    make cause drive throw return get seem break exceed trend report call lag jump go rise produce take see
    say ask fire page notify hit reach pass affect impact happen begin end keep stay become grow fall climb
    spike peak drop dip flap fluctuate vary slow speed fail error crash hang stall freeze timeout time wait
    block lock leak eat consume use run serve handle process respond answer load fetch read write send receive
    connect reject refuse deny accept open close find search grep look scan list show print display count
    measure monitor watch track trace observe notice spot detect start stop die kill exit quit behave act
    work function perform degrade improve recover heal explain tell know think guess suspect believe mean
    compare correlate relate match differ change shift move spread hurt suffer complain notice seem appear
    look feel sound need want try help have give put bring hold let cover include contain tie link point
    happen occur trigger follow precede last continue persist remain repeat recur retry spin loop bounce
    flood overload saturate starve throttle queue pile back build stack explode balloon creep slip
    summarise summarize overview review audit assess evaluate inspect examine check verify validate confirm
    test probe ping query poll scrape collect gather fetch pull push sync miss lose drop corrupt
"""
_IRREGULAR = """
    made caused driven drove thrown threw got gotten broke broken rose risen went gone took taken saw seen
    said fired hit ran began begun became grew grown fell fallen kept stayed froze frozen ate eaten read sent
    found shown showed knew known thought meant brought held led left lost spun built blew blown crept slipped
    seemed been did done had gave given put let
"""
_OTHER_WORDS = """
    against behind beyond beside besides near toward towards upon onto inside outside along among amongst
    around throughout despite except unlike like per regarding concerning overall whole instead otherwise
    valid invalid long short longer shorter big bigger small smaller huge tiny heavy light hot cold warm
    constant constantly repeatedly intermittent intermittently sudden suddenly random randomly sporadic
    sporadically frequent frequently often sometimes always usually normal normally abnormal unusual unusually
    expected unexpected unexpectedly possible possibly likely maybe perhaps probably actually really
    still even ever quite rather pretty somewhat bit little lot way far back forward further
    null none true false nil group groups handshake handshakes resource resources capacity limit limits
    quota quotas threshold thresholds budget
    over under above below beneath past within beyond across
    pager paging page oncall on-call someone somebody anyone anybody everybody nobody
    right wrong good bad better worse worst best healthy sick ill fine great poor
    again anymore any more less least most much many several various certain particular specific
    details detail info information data insight insights cause causes reason reasons root rca
    lines entries entry output outputs result results figure figures stats statistics numbers
    current currently latest recent recently earlier later soon since ago today's yesterday's tonight's
    tell show give me us them it this that which whatever whichever whenever wherever however
"""


def _inflect(verb: str) -> set[str]:
    forms = {verb, verb + "s", verb + "es", verb + "ed", verb + "d", verb + "ing", verb + "er", verb + "ers"}
    if verb.endswith("e"):
        forms |= {verb[:-1] + "ing", verb + "d"}
    if verb.endswith("y"):
        forms |= {verb[:-1] + "ies", verb[:-1] + "ied"}
    if len(verb) > 2 and verb[-1] not in "aeiouwxy" and verb[-2] in "aeiou" and verb[-3] not in "aeiou":
        forms |= {verb + verb[-1] + "ed", verb + verb[-1] + "ing"}  # drop -> dropped, stop -> stopping
    return forms


_COMMON |= {form for verb in _VERBS.split() for form in _inflect(verb)}
_COMMON |= set(_IRREGULAR.split()) | set(_OTHER_WORDS.split())
# a word before one of these names a component of its own: "checkout worker" is not "checkout"
_COMPONENTS = {"worker": "worker", "workers": "worker", "db": "db", "database": "db", "databases": "db",
               "frontend": "frontend", "backend": "backend", "web": "web", "queue": "queue", "cache": "cache",
               "consumer": "consumer", "consumers": "consumer", "scheduler": "scheduler", "cron": "cron",
               "cronjob": "cron", "replica": "replica", "primary": "primary", "gateway": "gateway",
               "proxy": "proxy", "ui": "ui", "cluster": "cluster", "bucket": "bucket", "topic": "topic"}  # fmt: skip
# words that never name a service, even before "service" ("which service", "per service")
_DETERMINERS = {"the", "a", "an", "this", "that", "these", "those", "our", "my", "your", "their", "its", "which",
                "what", "every", "all", "each", "any", "some", "no", "one", "other", "another", "same", "per",
                "whole", "entire", "main", "new", "old", "of", "for", "on", "in", "to", "from", "at", "by", "is",
                "are", "and", "or", "with", "backend", "frontend", "web", "internal", "external"}  # fmt: skip
# service nouns that add nothing: "checkout api", "checkout service" and "checkout" are one service
_SERVICE_NOUNS = {"api", "apis", "service", "services", "svc", "server", "app", "application", "deployment"}
# what kind of trouble: paraphrases keep it ("slow" is not "down"); compared only when both requests say one
_SYMPTOMS = {
    "down": "down", "outage": "down", "unavailable": "down", "unreachable": "down", "dead": "down",
    "offline": "down", "up": "down", "alive": "down", "reachable": "down",
    "slow": "slow", "slower": "slow", "sluggish": "slow", "latency": "slow", "laggy": "slow", "slowly": "slow",
    "restarting": "restart", "restarts": "restart", "restarted": "restart", "crashlooping": "restart",
    "crashloop": "restart", "crashloopbackoff": "restart",
}  # fmt: skip
_PERIODS = {"hourly": "3600", "daily": "86400", "nightly": "86400", "today": "86400", "tonight": "86400",
            "weekly": "604800", "monthly": "2592000"}  # fmt: skip

_ENVIRONMENTS = {
    "prod": "prod", "production": "prod", "prd": "prod", "live": "prod",
    "staging": "staging", "stage": "staging", "stg": "staging",
    "dev": "dev", "development": "dev", "qa": "qa", "uat": "uat", "preprod": "preprod", "pre-prod": "preprod",
    "sandbox": "sandbox", "canary": "canary", "test": "test", "testing": "test", "perf": "perf", "demo": "demo",
}  # fmt: skip
_ENV_CONTEXT = {"test", "testing", "live", "stage", "demo", "perf"}  # environment words only beside env/environment

_HTTP_NAMES = {
    "bad request": "400", "unauthorized": "401", "unauthorised": "401", "forbidden": "403", "not found": "404",
    "method not allowed": "405", "request timeout": "408", "conflict": "409", "payload too large": "413",
    "too many requests": "429", "rate limited": "429", "rate-limited": "429", "internal server error": "500",
    "internal server errors": "500", "internal error": "500", "not implemented": "501", "bad gateway": "502",
    "service unavailable": "503", "gateway timeout": "504", "gateway timeouts": "504", "gateway time-out": "504",
}  # fmt: skip
_HTTP_NAME = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _HTTP_NAMES), key=len, reverse=True)) + r")\b")
_HTTP_CLASS = re.compile(r"\b([1-5])xx\b")
_HTTP_CODE = re.compile(r"(?<![\w.:/-])([45]\d\d)(?:s\b|(?=\s*(?:errors?|responses?|codes?|status|statuses)\b))")
_HTTP_CONTEXT = re.compile(r"\b(?:http|status|code|returning|returns|return|throwing)\s+([1-5]\d\d)\b(?![.\d])")

_WORD_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40,
    "forty-five": 45, "fifty": 50, "sixty": 60, "ninety": 90, "couple": 2, "few": 3,
}  # fmt: skip
_UNIT_SECONDS = {
    "ms": 0.001, "msec": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400, "w": 604800, "wk": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_UNIT_BYTES = {
    "b": 1, "kb": 1024, "kib": 1024, "k": 1024, "mb": 1024**2, "mib": 1024**2, "gb": 1024**3, "gib": 1024**3,
    "g": 1024**3, "tb": 1024**4, "tib": 1024**4,
}  # fmt: skip
_NUM = r"(\d+(?:\.\d+)?|" + "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True)) + r")"
_WORDS_RE = "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True))
_UNITS_RE = "|".join(sorted(_UNIT_SECONDS, key=len, reverse=True))
# digits may touch their unit (5m); a number word may not ("and" is not "an d")
_DURATION = re.compile(r"\b(?:(\d+(?:\.\d+)?)\s*|(" + _WORDS_RE + r")[\s-]+)(" + _UNITS_RE + r")\b(?![:.]\d)")
_BYTES = re.compile(r"(\d+(?:\.\d+)?)\s*(" + "|".join(sorted(_UNIT_BYTES, key=len, reverse=True)) + r")\b")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent\b|pct\b)")
# "the last hour", "past day": a window of one unit
_BARE_WINDOW = re.compile(r"\b(?:last|past|previous|this)\s+(minute|hour|day|week)\b")
_PAST_TO = re.compile(
    r"\b(half|quarter|ten|five|twenty)\s+(past|to)\s+(\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b"
)
_HALF = re.compile(r"\bhalf(?:\s+an)?\s+hour\b|\b30\s*mins?\b")
_QUARTER = re.compile(r"\bquarter(?:\s+of)?\s+(?:an\s+)?hour\b")

_TZ = {"utc": 0, "gmt": 0, "z": 0, "cet": 60, "cest": 120, "bst": 60, "eet": 120, "eest": 180, "est": -300,
       "edt": -240, "cst": -360, "cdt": -300, "mst": -420, "mdt": -360, "pst": -480, "pdt": -420, "ist": 330,
       "jst": 540, "aest": 600}  # fmt: skip
_TZ_RE = r"(?:\s*(" + "|".join(sorted(_TZ, key=len, reverse=True)) + r"|[+-]\d{2}:?\d{2})\b)?"
_CLOCK_24 = re.compile(r"(?<![\d.:])\b(\d{1,2}):(\d{2})(?::\d{2})?\s*(am|pm|a\.m\.|p\.m\.)?" + _TZ_RE)
_CLOCK_12 = re.compile(r"\b(\d{1,2})\s*(am|pm|a\.m\.|p\.m\.)" + _TZ_RE)
_CLOCK_WORD = re.compile(
    r"\b(?:since|after|from|at|around|before|until|till|by)\s+(?:about\s+|around\s+)?"
    r"(\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
    r"(?:\s*(o'clock|oclock|in the afternoon|in the evening|in the morning|tonight))?(?![\d:.%]|\s*(?:"
    + "|".join(sorted(_UNIT_SECONDS, key=len, reverse=True))
    + r"|%|percent|gb|mb|kb|tb|am|pm|a\.m\.|p\.m\.)\b)"
)
_CLOCK_HHMM = re.compile(r"\b(?:since|after|from|at|around|before|until|till|by)\s+([01]\d|2[0-3])([0-5]\d)\b")
_NOON = re.compile(r"\b(noon|midday|midnight)\b")
_DATE_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTHS = {
    m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)
}
_DATE_WORDS = re.compile(
    r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b"
    r"|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\s+(\d{1,2})(?:st|nd|rd|th)?\b"
)
_RELATIVE_DAY = re.compile(r"\b(yesterday|last night|this morning|this afternoon|this evening)(?:'s)?\b")
_DAY_WORDS = {"this morning": "today", "this afternoon": "today", "this evening": "today",
              "yesterday": "yesterday", "last night": "yesterday"}  # fmt: skip
_PERCENTILE = re.compile(r"\bp(50|75|90|95|99|999)\b|\b(50|75|90|95|99)(?:th)?[\s-]+percentile\b")
_NAMESPACE = re.compile(
    r"\b(?:in|on)\s+(?:the\s+)?([a-z0-9][a-z0-9-]*)\s+(?:namespace|ns)\b|\b(?:namespace|ns|-n)\s+([a-z0-9][a-z0-9-]*)\b"
)
_K8S_DNS = re.compile(r"\b([a-z0-9][a-z0-9-]*)\.([a-z0-9][a-z0-9-]*)\.svc(?:\.cluster\.local)?\b")
_SLASHED = re.compile(r"(?<![\w/:.])([a-z0-9][a-z0-9-]*)/([a-z][a-z0-9-]*)(?![\w/])")
_HOSTLIKE = re.compile(r"^([a-z]+(?:-[a-z]+)*)-?0*(\d+)$")  # web-01, db1, node-3: names with a number
_TOKEN = re.compile(r"[a-z0-9][a-z0-9.'-]*[a-z0-9]|[a-z0-9]")  # redis_info names redis
_NUMBER = re.compile(r"(?<![\w.:/-])(\d+(?:\.\d+)?)(?![\w.:%/-])")
_GENERIC_SUFFIXES = ("-api", "-svc", "-service", "-server", "-srv", "-app", "-deployment", "-deploy")
_COMPONENT_SUFFIXES = {"-database": "-db", "-workers": "-worker", "-consumers": "-consumer"}

KINDS = (
    "intent", "symptoms", "names", "namespaces", "environments", "hosts", "urls", "paths", "times", "days", "durations",
    "sizes", "percents", "numbers", "http", "systems", "quoted",
)  # fmt: skip


def _num(word: str) -> float:
    return float(_WORD_NUMBERS[word]) if word in _WORD_NUMBERS else float(word)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _tz_minutes(tz: str | None) -> int | None:
    if not tz:
        return None
    tz = tz.strip()
    if tz in _TZ:
        return _TZ[tz]
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 60 + int(digits[2:]))


def _clock(hours: list[int], minute: int, tz: str | None) -> str:
    """A clock time as the minutes of day it may mean ("02:00|14:00" when am or pm is not said), plus its zone."""
    offset = _tz_minutes(tz)
    values = sorted({(h % 24) * 60 + minute for h in hours})
    if offset is not None:  # compare in UTC when a zone is given
        values = sorted({(v - offset) % 1440 for v in values})
    text = "|".join(f"{v // 60:02d}:{v % 60:02d}" for v in values)
    return text + ("@utc" if offset is not None else "")


def _hours_12(hour: int, meridiem: str | None) -> list[int]:
    if meridiem is None:
        return [hour] if hour == 0 or hour > 12 else [hour % 12, hour % 12 + 12]
    pm = meridiem.startswith("p") or meridiem in ("in the afternoon", "in the evening", "tonight")
    return [hour % 12 + (12 if pm else 0)]


def _clock_past_to(m: re.Match[str]) -> str:
    minutes = {"half": 30, "quarter": 15, "ten": 10, "five": 5, "twenty": 20}[m.group(1)]
    hour = int(_num(m.group(3)))
    if m.group(2) == "to":
        hour, minutes = hour - 1, 60 - minutes
    return _clock(_hours_12(hour % 24, None), minutes, None)


def change_intent(text: str) -> str | None:
    """The change a request asks for ("restart"), or None when it only asks to look.

    A change verb asked about ("why did checkout restart", "how many restarts") is not a change; one asked for
    ("restart checkout", "please scale it to 3", "can you roll back the deploy") is. When in doubt it is a change:
    a change request served from the cache is the worst mistake a cache can make.
    """
    tokens = _TOKEN.findall(text.lower().replace("roll back", "rollback").replace("shut down", "shutdown"))
    for i, tok in enumerate(tokens):
        if tok not in _CHANGE_VERBS:
            continue
        before = [t for t in tokens[max(0, i - 4) : i] if t not in _POLITE]
        if i == 0 or not before or tokens[i - 1] in _POLITE:
            if tok == "start" and any(t in ("since", "from", "the", "at") for t in tokens[max(0, i - 2) : i]):
                continue
            return tok
        if tokens[i - 1] in (",", ";") or any(t in _ASKED_ABOUT for t in before):
            continue
        if tokens[i - 1] in ("and", "then"):
            return tok
    return None


def extract_entities(text: str, aliases: Mapping[str, str] | None = None) -> dict[str, frozenset[str]]:
    """The canonical entities of a request. `aliases` maps other names of a service to its canonical name
    (from semantic-memory facts: "checkout is also called shop-frontend")."""
    low = text.lower()
    out: dict[str, set[str]] = {k: set() for k in KINDS}
    intent = change_intent(text)
    if intent:
        out["intent"].add(f"change:{intent}")
    out["quoted"] = set(QUOTED.findall(text))
    # quoted text is an entity whole and is read for the entities inside it too (a JSON argument "redis-server")
    out["urls"] = {u.rstrip(".") for u in URL.findall(low)}
    rest = URL.sub(" ", low)

    def take(pattern: re.Pattern[str], fn, text: str) -> str:  # type: ignore[no-untyped-def]
        """Apply fn to each match and blank the match out, so a span is read as one entity only."""

        def sub(m: re.Match[str]) -> str:
            fn(m)
            return " "

        return pattern.sub(sub, text)

    # cluster DNS names, hosts and addresses first: 10.0.0.5:6379 holds no clock time
    def service_in_namespace(name: str, namespace: str) -> None:
        out["names"].add(_service(name, aliases))
        out["namespaces"].add(namespace)

    rest = take(_K8S_DNS, lambda m: service_in_namespace(m.group(1), m.group(2)), rest)
    rest = take(IPV4, lambda m: out["hosts"].add(m.group(1) + (f":{m.group(2)}" if m.group(2) else "")), rest)
    rest = take(HOSTNAME, lambda m: out["hosts"].add(m.group(1)), rest)
    # times, before numbers and durations read their digits
    rest = take(_DATE_ISO, lambda m: out["days"].add(f"{m.group(2)}-{m.group(3)}"), rest)
    rest = take(
        _DATE_WORDS,
        lambda m: out["days"].add(f"{_MONTHS[(m.group(2) or m.group(3))[:3]]:02d}-{int(m.group(1) or m.group(4)):02d}"),
        rest,
    )
    rest = take(_RELATIVE_DAY, lambda m: out["days"].add(_DAY_WORDS[m.group(1)]), rest)
    rest = take(_PERCENTILE, lambda m: out["numbers"].add(f"p{m.group(1) or m.group(2)}"), rest)
    rest = take(
        _CLOCK_24,
        lambda m: (
            out["times"].add(
                _clock(
                    _hours_12(int(m.group(1)), m.group(3)) if m.group(3) else [int(m.group(1))],
                    int(m.group(2)),
                    m.group(4),
                )
            )
            if int(m.group(1)) < 24 and int(m.group(2)) < 60
            else None
        ),
        rest,
    )
    rest = take(
        _CLOCK_12, lambda m: out["times"].add(_clock(_hours_12(int(m.group(1)), m.group(2)), 0, m.group(3))), rest
    )
    rest = take(_CLOCK_HHMM, lambda m: out["times"].add(_clock([int(m.group(1))], int(m.group(2)), None)), rest)
    rest = take(_NOON, lambda m: out["times"].add(_clock([0 if m.group(1) == "midnight" else 12], 0, None)), rest)

    def word_clock(m: re.Match[str]) -> None:
        hour = int(_num(m.group(1)))
        if hour <= 23:
            out["times"].add(
                _clock(
                    _hours_12(hour, m.group(2) if m.group(2) not in ("o'clock", "oclock") else None)
                    if hour <= 12
                    else [hour],
                    0,
                    None,
                )
            )

    rest = take(_CLOCK_WORD, word_clock, rest)
    # HTTP codes by number or name (before durations: "502s" are errors, not seconds)
    rest = take(_HTTP_NAME, lambda m: out["http"].add(_HTTP_NAMES[m.group(1)]), rest)
    rest = take(_HTTP_CLASS, lambda m: out["http"].add(f"{m.group(1)}xx"), rest)
    rest = take(_HTTP_CODE, lambda m: out["http"].add(m.group(1)), rest)
    rest = take(_HTTP_CONTEXT, lambda m: out["http"].add(m.group(1)), rest)
    # windows and durations, in seconds
    rest = take(_PAST_TO, lambda m: out["times"].add(_clock_past_to(m)), rest)
    rest = take(_HALF, lambda m: out["durations"].add("1800"), rest)
    rest = take(_QUARTER, lambda m: out["durations"].add("900"), rest)
    rest = take(_BARE_WINDOW, lambda m: out["durations"].add(_fmt(_UNIT_SECONDS[m.group(1)])), rest)
    rest = take(_PERCENT, lambda m: out["percents"].add(_fmt(float(m.group(1)))), rest)
    rest = take(_BYTES, lambda m: out["sizes"].add(_fmt(round(float(m.group(1)) * _UNIT_BYTES[m.group(2)]))), rest)
    rest = take(
        _DURATION,
        lambda m: out["durations"].add(_fmt(_num(m.group(1) or m.group(2)) * _UNIT_SECONDS[m.group(3)])),
        rest,
    )
    out["paths"] = set(PATH.findall(rest))
    rest = PATH.sub(" ", rest)
    # namespaces, and services written with one
    rest = take(_NAMESPACE, lambda m: out["namespaces"].add(m.group(1) or m.group(2)), rest)
    rest = take(_SLASHED, lambda m: service_in_namespace(m.group(2), m.group(1)), rest)
    tokens = [t.strip("'.-_") for t in _TOKEN.findall(rest)]
    for i, tok in enumerate(tokens):
        if not tok:
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        prev = tokens[i - 1] if i else ""
        if tok in _ENVIRONMENTS and (tok not in _ENV_CONTEXT or nxt.startswith("env") or prev in ("in", "on")):
            out["environments"].add(_ENVIRONMENTS[tok])
            continue
        if tok in SYSTEMS or tok in _SYSTEM_ALIASES:
            out["systems"].add(_SYSTEM_ALIASES.get(tok, tok))
            continue
        bare = tok.removesuffix("'s")
        if bare in _SYMPTOMS:
            out["symptoms"].add(_SYMPTOMS[bare])
            continue
        if bare in _PERIODS:
            out["durations"].add(_PERIODS[bare])
            continue
        if re.fullmatch(r"\d+(?:\.\d+)?", tok):
            # a bare 4xx/5xx in an ops request is a status code ("orders-api 502")
            out["http" if tok.isdigit() and 400 <= int(tok) <= 599 else "numbers"].add(_fmt(float(tok)))
            continue
        if tok in _WORD_NUMBERS and tok not in ("a", "an", "one", "couple", "few"):
            out["numbers"].add(_fmt(_num(tok)))  # "top five" is "top 5"
            continue
        named_by_noun = nxt in _SERVICE_NOUNS and bare not in _DETERMINERS and bare not in _SERVICE_NOUNS
        if not named_by_noun and (bare in _COMMON or bare in _WORD_NUMBERS or bare in _COMPONENTS or len(bare) < 2):
            continue  # "search api" names search; "search the logs" does not
        parts = bare.split("-")
        if (
            len(parts) > 1
            and all(part in _COMMON or part in _SERVICE_NOUNS for part in parts)
            and not (parts[-1] in _SERVICE_NOUNS and parts[0] not in _DETERMINERS)
        ):
            continue  # per-service and on-call name nothing; search-api does
        host = _HOSTLIKE.match(bare)
        if host:
            out["hosts"].add(f"{host.group(1)}-{int(host.group(2))}")
            continue
        if any(c.isdigit() for c in bare) and not any(c.isalpha() for c in bare):
            out["numbers"].add(bare)
            continue
        name = _service(bare, aliases)
        if name in SYSTEMS:
            out["systems"].add(name)
            continue
        if nxt in _COMPONENTS and "-" not in bare:  # "billing worker" is billing-worker, not billing
            name = f"{name}-{_COMPONENTS[nxt]}"
        out["names"].add(name)
    return {k: frozenset(v) for k, v in out.items() if v}


def _service(name: str, aliases: Mapping[str, str] | None) -> str:
    """One name for a service however it is written: checkout-api, checkout service, shop/checkout."""
    if aliases and name in aliases:
        return aliases[name]
    for suffix in _GENERIC_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix) + 1:
            name = name[: -len(suffix)]
            break
    for suffix, short in _COMPONENT_SUFFIXES.items():
        if name.endswith(suffix):
            name = name[: -len(suffix)] + short
    if name in SYSTEMS or name in _SYSTEM_ALIASES:
        return _SYSTEM_ALIASES.get(name, name)  # redis-server is redis (and redis is no plural)
    head, dash, tail = name.rpartition("-")
    first = head if dash else tail
    if len(first) > 4 and first.endswith("s") and not first.endswith("ss"):
        first = first[:-1]  # payments and payment are one service; payments-worker and payment-worker too
    name = f"{first}-{tail}" if dash else first
    return aliases.get(name, name) if aliases else name


def entity_values(entities: Mapping[str, frozenset[str]]) -> list[str]:
    return sorted(v for values in entities.values() for v in values)


def _times_agree(left: frozenset[str], right: frozenset[str]) -> bool:
    """Every time on one side may mean one on the other ("after two" may be 14:00); zones compared when both
    sides give one."""

    def parse(value: str) -> tuple[set[str], bool]:
        clock, _, zone = value.partition("@")
        return set(clock.split("|")), bool(zone)

    a, b = [parse(v) for v in left], [parse(v) for v in right]
    if len(a) != len(b):
        return False
    # a zone on one side only is read as the same wall clock: operators often leave it out
    return all(any(x[0] & y[0] for y in b) for x in a) and all(any(x[0] & y[0] for x in a) for y in b)


def same_entities(a: Mapping[str, frozenset[str]], b: Mapping[str, frozenset[str]]) -> tuple[bool, str]:
    """Whether two requests name the same things and only look; the reason when they do not."""
    if a.get("intent") or b.get("intent"):
        return False, "asks for a change: never served from the cache"
    for kind in sorted(a.keys() | b.keys()):
        left, right = a.get(kind, frozenset()), b.get(kind, frozenset())
        if kind == "symptoms" and not (left and right):
            continue  # "what's wrong with checkout" may be the same request as "why is checkout slow"
        if kind == "times" and left and right:
            if not _times_agree(left, right):
                return False, f"times differ: {sorted(left)} vs {sorted(right)}"
            continue
        if left != right:
            return False, f"{kind} differ: {sorted(left)} vs {sorted(right)}"
    return True, ""
