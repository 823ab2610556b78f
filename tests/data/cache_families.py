"""The labelled request pairs of tests/data/cache_pairs.jsonl, written as families (run this file to rebuild it).

A family is one request written several ways, the entities in other surface forms (14:00 / 2pm / after two,
the last hour / 60 minutes, 502s / bad gateway, checkout-api / checkout service / shop/checkout, prod /
production), plus near misses: the same words with one thing changed (a number, a status code, a window, an
environment, a host, a service). Every two phrasings of a family are a pair labelled same; every near miss
against each phrasing is a pair labelled not same. `change` families ask for a change: the cache must never
serve them, so their pairs are labelled not same and kind "change".

Written for this project from how operators phrase requests; no public labelled set was read.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

# (category, [phrasings of one request], [near misses: other requests that look the same])
FAMILIES: list[tuple[str, list[str], list[str]]] = [
    # --- diagnose -------------------------------------------------------------------------------------------
    (
        "diagnose",
        [
            "why is checkout slow since 14:00",
            "why has checkout-api been slow since 2pm",
            "checkout service sluggish since 2 pm, what's going on?",
        ],
        ["why is checkout slow since 15:00", "why is payments slow since 14:00", "why is checkout slow since 14:30"],
    ),
    (
        "diagnose",
        [
            "why are orders-api requests timing out in the last hour",
            "orders api timeouts over the past 60 minutes: why?",
            "what is causing timeouts on the orders service in the last 1h",
        ],
        [
            "why are orders-api requests timing out in the last 5 minutes",
            "why are orders-api requests timing out in staging in the last hour",
            "why are inventory-api requests timing out in the last hour",
        ],
    ),
    (
        "diagnose",
        [
            "why is the payments api returning 502s",
            "payments-api is throwing bad gateway errors, why",
            "what causes the 502 errors from payments-api",
        ],
        [
            "why is the payments api returning 504s",
            "why is the payments api returning 500s",
            "why is the refunds api returning 502s",
        ],
    ),
    (
        "diagnose",
        [
            "why is search-api p95 latency high in prod",
            "search api 95th percentile latency is high in production, why",
            "what's driving the high p95 latency of the search service in prod",
        ],
        [
            "why is search-api p99 latency high in prod",
            "why is search-api p95 latency high in staging",
            "why is search-api p50 latency high in prod",
        ],
    ),
    (
        "diagnose",
        [
            "why does cart-api keep restarting",
            "cart api pods keep restarting, why?",
            "what makes the cart service restart over and over",
        ],
        ["why does cart-worker keep restarting", "why does catalog-api keep restarting"],
    ),
    (
        "diagnose",
        [
            "why are queries on the shop database hanging",
            "queries against the shop db are hanging, why",
            "what is blocking queries on the shop database",
        ],
        ["why are queries on the billing database hanging", "why are queries on the shop database slow since 09:00"],
    ),
    (
        "diagnose",
        [
            "why did error rate of login-api jump after 10:30",
            "login api errors jumped after half past ten, why",
            "why did login-api start erroring after 10:30am",
        ],
        [
            "why did error rate of login-api jump after 11:30",
            "why did error rate of signup-api jump after 10:30",
            "why did error rate of login-api jump after 10:30pm",
        ],
    ),
    (
        "diagnose",
        [
            "why is web-1 running out of memory",
            "web-01 is running out of memory, why",
            "what is eating the memory on web1",
        ],
        ["why is web-2 running out of memory", "why is web-1 running out of disk", "why is db-1 running out of memory"],
    ),
    (
        "diagnose",
        [
            "why are there 503s on the gateway in staging",
            "gateway returns service unavailable in stage, why",
            "what's behind the 503 errors of the staging gateway",
        ],
        ["why are there 503s on the gateway in prod", "why are there 502s on the gateway in staging"],
    ),
    (
        "diagnose",
        [
            "why is kafka consumer lag growing for the billing group",
            "billing consumer group lag on kafka keeps growing, why",
            "what makes the kafka lag of the billing consumers grow",
        ],
        [
            "why is kafka consumer lag growing for the shipping group",
            "why is rabbitmq queue depth growing for the billing group",
        ],
    ),
    (
        "diagnose",
        [
            "why is checkout slow for the last 30 minutes",
            "checkout has been slow for half an hour, why?",
            "why has checkout-api been slow in the past 30 mins",
        ],
        ["why is checkout slow for the last 3 hours", "why is checkout slow for the last 15 minutes"],
    ),
    (
        "diagnose",
        [
            "why is 10.0.3.17 dropping connections",
            "what makes host 10.0.3.17 drop connections",
            "10.0.3.17 keeps dropping connections, why",
        ],
        ["why is 10.0.3.18 dropping connections", "why is 10.0.4.17 dropping connections"],
    ),
    (
        "diagnose",
        [
            "why did the nightly etl job fail yesterday",
            "the etl job failed last night, why",
            "why did yesterday's etl run fail",
        ],
        ["why did the nightly etl job fail today", "why did the nightly backup job fail yesterday"],
    ),
    (
        "diagnose",
        [
            "why is replication lag on the orders replica above 30s",
            "orders replica lags more than 30 seconds, why",
            "what causes orders replica replication lag over 30 s",
        ],
        [
            "why is replication lag on the orders replica above 300s",
            "why is replication lag on the users replica above 30s",
        ],
    ),
    (
        "diagnose",
        [
            "why is the tls handshake failing on api.example.com",
            "tls handshakes to api.example.com fail, why",
            "what breaks the ssl handshake for api.example.com",
        ],
        ["why is the tls handshake failing on www.example.com", "why is dns resolution failing on api.example.com"],
    ),
    (
        "diagnose",
        [
            "why do 5xx errors spike on checkout at 14:00 utc",
            "checkout 5xx spike at 2pm UTC, why",
            "what caused the checkout 5xx spike at 14:00 UTC",
        ],
        ["why do 4xx errors spike on checkout at 14:00 utc", "why do 5xx errors spike on checkout at 16:00 utc"],
    ),
    # --- health ---------------------------------------------------------------------------------------------
    (
        "health",
        ["check the health of web-1", "is web-01 healthy?", "how is web1 doing"],
        ["check the health of web-2", "check the health of db-1", "check the health of web-11"],
    ),
    (
        "health",
        ["is redis ok in prod", "check redis in production", "is the production redis healthy"],
        ["is redis ok in staging", "is postgres ok in prod", "is memcached ok in prod"],
    ),
    (
        "health",
        [
            "check http://127.0.0.1:8080/healthz",
            "is http://127.0.0.1:8080/healthz up?",
            "probe http://127.0.0.1:8080/healthz",
        ],
        [
            "check http://127.0.0.1:8081/healthz",
            "check http://127.0.0.1:8080/readyz",
            "check https://127.0.0.1:8080/healthz",
        ],
    ),
    (
        "health",
        ["is the checkout service up", "is checkout-api up?", "check whether checkout is running"],
        ["is the payments service up", "is the checkout worker up"],
    ),
    (
        "health",
        ["how much free disk space is left on db-3", "disk space left on db03?", "check free storage on db-3"],
        [
            "how much free disk space is left on db-4",
            "how much free memory is left on db-3",
            "how much free disk space is left on db-3 /var",
        ],
    ),
    (
        "health",
        ["check the health of this machine", "is this machine healthy?", "how is this host doing"],
        ["check the memory of this machine", "check the disk of this machine"],
    ),
    (
        "health",
        ["is postgres on 10.1.2.3 healthy", "check postgresql at 10.1.2.3", "how is the pg server 10.1.2.3"],
        ["is postgres on 10.1.2.4 healthy", "is mysql on 10.1.2.3 healthy"],
    ),
    (
        "health",
        ["are the kafka brokers healthy in staging", "check kafka brokers in stage", "kafka broker health on staging"],
        ["are the kafka brokers healthy in prod", "are the zookeeper nodes healthy in staging"],
    ),
    (
        "health",
        ["is disk usage on web-2 over 80%", "web-02 disk above 80 percent?", "check if web2 disk usage exceeds 80%"],
        ["is disk usage on web-2 over 90%", "is memory usage on web-2 over 80%", "is disk usage on web-3 over 80%"],
    ),
    (
        "health",
        [
            "is inventory-api healthy in the eu namespace",
            "check inventory in namespace eu",
            "health of eu/inventory-api",
        ],
        ["is inventory-api healthy in the us namespace", "is pricing-api healthy in the eu namespace"],
    ),
    (
        "health",
        [
            "check the tls certificate of api.example.com",
            "when does the api.example.com cert expire",
            "is the ssl certificate of api.example.com still valid",
        ],
        ["check the tls certificate of shop.example.com", "check the dns of api.example.com"],
    ),
    (
        "health",
        ["are all celery workers alive", "check the celery workers", "are the celery workers up?"],
        ["are all sidekiq workers alive", "are all celery beat schedulers alive"],
    ),
    (
        "health",
        ["check nginx on lb-1", "is nginx healthy on lb-01", "how is nginx doing on lb1"],
        ["check nginx on lb-2", "check haproxy on lb-1"],
    ),
    # --- report ---------------------------------------------------------------------------------------------
    (
        "report",
        ["nightly capacity report", "give me the nightly capacity report", "capacity report for tonight"],
        ["weekly capacity report", "nightly cost report", "nightly capacity report for staging"],
    ),
    (
        "report",
        [
            "error report for checkout for the last 24 hours",
            "checkout error summary over the past day",
            "summarise checkout errors in the last 24h",
        ],
        [
            "error report for checkout for the last 7 days",
            "error report for payments for the last 24 hours",
            "error report for checkout for the last 12 hours",
        ],
    ),
    (
        "report",
        [
            "latency report of orders-api for the last week",
            "orders api latency summary for the past 7 days",
            "weekly latency overview of the orders service",
        ],
        ["latency report of orders-api for the last month", "latency report of users-api for the last week"],
    ),
    (
        "report",
        [
            "top 5 slowest queries on the billing db",
            "show the five slowest queries of the billing database",
            "which 5 queries are slowest on billing db",
        ],
        ["top 10 slowest queries on the billing db", "top 5 slowest queries on the shop db"],
    ),
    (
        "report",
        [
            "disk usage report for all hosts in prod",
            "production hosts disk usage report",
            "report disk usage of every prod host",
        ],
        ["disk usage report for all hosts in staging", "memory usage report for all hosts in prod"],
    ),
    (
        "report",
        [
            "http 500 counts per service since midnight",
            "count of internal server errors per service since 00:00",
            "per-service 500 errors since midnight",
        ],
        ["http 404 counts per service since midnight", "http 500 counts per service since noon"],
    ),
    (
        "report",
        [
            "redis memory usage trend over the last 3 days",
            "how redis memory usage trended in the past three days",
            "trend of redis memory in the last 72 hours",
        ],
        ["redis memory usage trend over the last 3 weeks", "postgres memory usage trend over the last 3 days"],
    ),
    (
        "report",
        [
            "daily uptime report for payments-api",
            "payments api uptime report for today",
            "report today's uptime of the payments service",
        ],
        ["daily uptime report for refunds-api", "weekly uptime report for payments-api"],
    ),
    (
        "report",
        [
            "gpu utilisation report for the last 6 hours",
            "gpu utilization over the past 6h",
            "report how busy the gpus were in the last six hours",
        ],
        ["gpu utilisation report for the last 2 hours", "cpu utilisation report for the last 6 hours"],
    ),
    # --- triage ---------------------------------------------------------------------------------------------
    (
        "triage",
        ["something is wrong with checkout", "checkout seems broken", "there's a problem with the checkout service"],
        ["something is wrong with payments", "something is wrong with checkout in staging"],
    ),
    (
        "triage",
        [
            "users report errors on the login page since 9am",
            "login page errors reported by users since 09:00",
            "customers see errors logging in since nine in the morning",
        ],
        ["users report errors on the login page since 9pm", "users report errors on the signup page since 9am"],
    ),
    (
        "triage",
        [
            "alerts firing for orders-api in prod",
            "orders api has firing alerts in production",
            "what alerts are firing on orders-api in prod",
        ],
        ["alerts firing for orders-api in staging", "alerts firing for shipping-api in prod"],
    ),
    (
        "triage",
        ["the site is down", "our website is down", "site down!"],
        ["the site is slow", "the admin site is down"],
    ),
    (
        "triage",
        [
            "look at the logs of billing-worker for errors in the last 15 minutes",
            "billing worker error logs from the past quarter hour",
            "any errors in billing-worker logs in the last 15 min",
        ],
        [
            "look at the logs of billing-worker for errors in the last 50 minutes",
            "look at the logs of billing-api for errors in the last 15 minutes",
        ],
    ),
    (
        "triage",
        ["investigate high cpu on node-7", "node-07 has high cpu, investigate", "look into the cpu spike on node7"],
        ["investigate high cpu on node-8", "investigate high memory on node-7"],
    ),
    (
        "triage",
        [
            "what happened to checkout around 3pm yesterday",
            "checkout incident yesterday at 15:00, what happened",
            "what went on with checkout at 15:00 yesterday",
        ],
        ["what happened to checkout around 3pm today", "what happened to checkout around 4pm yesterday"],
    ),
    (
        "triage",
        [
            "timeouts from payments to the bank gateway",
            "payments-api timing out calling the bank gateway",
            "payments service gets timeouts from the bank gateway",
        ],
        ["timeouts from refunds to the bank gateway", "timeouts from payments to the card gateway"],
    ),
]

# requests that ask for a change: the cache must never serve them, whatever they look like
CHANGE_FAMILIES: list[tuple[str, list[str]]] = [
    ("remediate", ["restart checkout-api", "please restart the checkout api", "can you restart checkout"]),
    (
        "remediate",
        ["scale orders-api to 5 replicas", "scale the orders service up to 5", "set orders-api replicas to 5"],
    ),
    (
        "remediate",
        [
            "roll back the payments deploy",
            "rollback payments-api to the previous version",
            "revert the last payments release",
        ],
    ),
    (
        "remediate",
        ["kill pid 4711 on db-1", "terminate session 4711 on the shop database", "cancel query 4711 on db-1"],
    ),
    ("remediate", ["clear the redis cache in staging", "flush redis on staging", "purge the staging redis"]),
    (
        "remediate",
        [
            "silence the disk alerts on web-2 for 2 hours",
            "mute disk alerts for web-02 for two hours",
            "please silence web-2 disk alerts for 2h",
        ],
    ),
    ("remediate", ["drain node-7", "cordon and drain node-07", "evict all pods from node7"]),
    ("remediate", ["stop the billing worker", "shut down billing-worker", "please stop billing-worker now"]),
]
# a change request against the look-alike read request it must not be served for
CHANGE_VS_READ: list[tuple[str, str, str]] = [
    ("health", "restart checkout-api", "is checkout-api healthy"),
    ("health", "stop the billing worker", "is the billing worker running"),
    ("diagnose", "restart payments-api", "why did payments-api restart"),
    ("diagnose", "roll back the payments deploy", "why did the payments deploy fail"),
    ("report", "clear the redis cache in staging", "redis cache hit rate in staging"),
    ("triage", "kill the process eating cpu on node-7", "what process is eating cpu on node-7"),
    ("health", "scale orders-api to 5 replicas", "how many replicas does orders-api have"),
    ("triage", "silence the disk alerts on web-2", "which disk alerts fire on web-2"),
    ("diagnose", "restart checkout-api", "stop checkout-api"),
    ("health", "please restart nginx on lb-1", "check nginx on lb-1"),
]

# The held-out split: written after the entity rules were frozen and never used to change a rule or a threshold.
# `opsgraph cache-eval tests/data/cache_pairs_test.jsonl` reports it beside the calibration set.
TEST_FAMILIES: list[tuple[str, list[str], list[str]]] = [
    (
        "diagnose",
        [
            "why is the recommendations service slow since 11:15",
            "recommendations-api slow since quarter past eleven, why",
            "what slowed down recommendations after 11:15",
        ],
        ["why is the recommendations service slow since 12:15", "why is the notifications service slow since 11:15"],
    ),
    (
        "diagnose",
        [
            "why are pods of ledger-api in namespace finance crashlooping",
            "ledger api crashloopbackoff in the finance namespace, why",
            "finance/ledger-api keeps crashlooping, what's wrong",
        ],
        [
            "why are pods of ledger-api in namespace accounting crashlooping",
            "why are pods of journal-api in namespace finance crashlooping",
        ],
    ),
    (
        "diagnose",
        [
            "why do requests to profile-api fail with 429",
            "profile api is rate limiting requests (429), why",
            "why is profile-api answering too many requests",
        ],
        ["why do requests to profile-api fail with 403", "why do requests to avatar-api fail with 429"],
    ),
    (
        "diagnose",
        [
            "why is memory on cache-3 above 90%",
            "cache03 memory usage over 90 percent, why?",
            "what is using more than 90% of memory on cache-3",
        ],
        ["why is memory on cache-3 above 70%", "why is cpu on cache-3 above 90%", "why is memory on cache-4 above 90%"],
    ),
    (
        "diagnose",
        [
            "why did the deploy of pricing-api at 16:45 break checkout",
            "pricing api deploy at 4:45pm broke checkout, why",
            "how did the 16:45 pricing-api rollout break checkout",
        ],
        [
            "why did the deploy of pricing-api at 17:45 break checkout",
            "why did the deploy of pricing-api at 16:45 break search",
        ],
    ),
    (
        "health",
        ["is the dev redis healthy", "check redis in development", "how is redis doing in the dev environment"],
        ["is the qa redis healthy", "is the dev postgres healthy"],
    ),
    (
        "health",
        [
            "check https://status.internal.example.com/ping",
            "is https://status.internal.example.com/ping responding",
            "probe https://status.internal.example.com/ping please",
        ],
        ["check https://status.internal.example.com/health", "check http://status.internal.example.com/ping"],
    ),
    (
        "health",
        [
            "are the ingress controllers healthy on cluster eu-west",
            "check ingress controller health in the eu-west cluster",
            "ingress controllers on eu-west: healthy?",
        ],
        ["are the ingress controllers healthy on cluster us-east", "are the cert managers healthy on cluster eu-west"],
    ),
    (
        "health",
        ["is 192.168.10.5:6379 reachable", "can we reach 192.168.10.5:6379", "check connectivity to 192.168.10.5:6379"],
        ["is 192.168.10.5:6380 reachable", "is 192.168.10.6:6379 reachable"],
    ),
    (
        "report",
        [
            "error budget report for the checkout slo this month",
            "checkout slo error budget for the current month",
            "monthly checkout slo error budget report",
        ],
        ["error budget report for the checkout slo this week", "error budget report for the search slo this month"],
    ),
    (
        "report",
        [
            "list the 3 biggest tables in the analytics db",
            "three largest tables of the analytics database",
            "which 3 tables are biggest in analytics db",
        ],
        ["list the 10 biggest tables in the analytics db", "list the 3 biggest tables in the events db"],
    ),
    (
        "report",
        [
            "queue depth of the email queue over the last 2 hours",
            "email queue depth for the past two hours",
            "how deep was the email queue in the last 120 minutes",
        ],
        ["queue depth of the email queue over the last 12 hours", "queue depth of the sms queue over the last 2 hours"],
    ),
    (
        "triage",
        [
            "customers can't pay since 8:20",
            "payments failing for customers since 08:20",
            "people are unable to pay since twenty past eight",
        ],
        ["customers can't pay since 9:20", "customers can't log in since 8:20"],
    ),
    (
        "triage",
        [
            "orders stuck in pending in prod",
            "production orders stuck pending",
            "orders are stuck in pending state on prod",
        ],
        ["orders stuck in pending in staging", "refunds stuck in pending in prod"],
    ),
]
TEST_CHANGE_FAMILIES: list[tuple[str, list[str]]] = [
    (
        "remediate",
        ["restart the recommendations service", "please bounce recommendations-api", "can you restart recommendations"],
    ),
    (
        "remediate",
        [
            "delete the stuck pods in namespace finance",
            "remove stuck pods from the finance namespace",
            "kill the stuck finance pods",
        ],
    ),
    (
        "remediate",
        [
            "increase the memory limit of cache-3 to 8GB",
            "raise cache-3 memory limit to 8 GiB",
            "set cache-3 memory limit to 8gb",
        ],
    ),
]
TEST_CHANGE_VS_READ: list[tuple[str, str, str]] = [
    ("health", "restart the recommendations service", "is the recommendations service healthy"),
    ("diagnose", "delete the stuck pods in namespace finance", "why are pods stuck in namespace finance"),
    ("report", "purge the email queue", "queue depth of the email queue"),
    ("triage", "roll back pricing-api", "what changed in pricing-api"),
]


def pairs(
    families: list[tuple[str, list[str], list[str]]] = FAMILIES,
    changes: list[tuple[str, list[str]]] = CHANGE_FAMILIES,
    change_vs_read: list[tuple[str, str, str]] = CHANGE_VS_READ,
) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for category, phrasings, misses in families:
        for a, b in itertools.combinations(phrasings, 2):
            out.append({"a": a, "b": b, "category": category, "same": True, "kind": "paraphrase"})
        for miss in misses:
            for p in phrasings:
                out.append({"a": p, "b": miss, "category": category, "same": False, "kind": "negative"})
    for category, phrasings in changes:
        for a, b in itertools.combinations(phrasings, 2):
            out.append({"a": a, "b": b, "category": category, "same": False, "kind": "change"})
    for category, change, read in change_vs_read:
        out.append({"a": read, "b": change, "category": category, "same": False, "kind": "change"})
        out.append({"a": change, "b": read, "category": category, "same": False, "kind": "change"})
    return out


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    legacy = [json.loads(line) for line in (here / "cache_pairs_v1.jsonl").read_text().splitlines() if line.strip()]
    rows = [{**p, "kind": p.get("kind") or ("paraphrase" if p["same"] else "negative")} for p in legacy] + pairs()
    (here / "cache_pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    test = pairs(TEST_FAMILIES, TEST_CHANGE_FAMILIES, TEST_CHANGE_VS_READ)
    (here / "cache_pairs_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    print(f"{len(rows)} calibration pairs, {len(test)} held-out pairs")
