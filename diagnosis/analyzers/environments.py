"""Production sent to a non-production system: a service whose configured address names a sandbox, staging or test
system (`https://api.sandbox.push.apple.com`, `payments-staging.example.net`, a card scheme's `ds-mtf` test
facility) while it fails on what that system answers. The far end is not failing: it is the wrong far end, which
answers production requests with rejections (APNs' BadDeviceToken, a directory server's "invalid endpoint"),
unknown accounts or nothing useful. A configuration error, named by the setting (a ConfigMap key, a changed line)
that points there.

Read from: the address in any log record (the log reader keeps such addresses from any field), a ConfigMap's values,
a change's new value; and, beside a logged address, the environment switches in the service's ConfigMaps
(`APNS_PRODUCTION=false`, `USE_SANDBOX=true`). A service that itself runs in a non-production namespace or under a
non-production name is left alone: staging talking to a sandbox is by design. Only a service whose own records
fail after the address was set (or that name the address in their failures) gives a finding."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from diagnosis.analyzers._common import is_error, level_of, service_of
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.formats.logs import NONPROD_URL
from diagnosis.links import workload_of_pod
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts

# an object that is itself non-production (namespace, pod or file name)
_NONPROD_NAME = re.compile(
    r"(?:^|[/\-_.])(?:sandbox|staging|stage|stg|uat|qa|test|testing|preprod|nonprod|dev)(?:$|[/\-_.])"
)
# an environment switch set to its non-production side: APNS_PRODUCTION=false, USE_SANDBOX=true, apns.production
_PROD_SWITCH = re.compile(r"production|prod(?:uction)?_?mode|live_?mode", re.I)
_SANDBOX_SWITCH = re.compile(r"sandbox|test_?mode|use_?staging", re.I)
_PROD_LABEL = re.compile(r"(?:^|[.\-])(?:prod|production|prd|live)(?:$|[.\-])", re.I)
MIN_FAILURES = 3
_LABEL_WORDS = {"mtf": "test facility", "stg": "staging", "stage": "staging", "uat": "user-acceptance test",
                "qa": "QA", "testing": "test", "preprod": "pre-production", "nonprod": "non-production"}  # fmt: skip


@dataclass
class _Place:
    """Where the non-production address is set or used, and the failures that followed."""

    host: str
    label: str
    service: str
    refs: list[EvidenceRef] = field(default_factory=list)
    since: float | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    namespace: str | None = None  # the service's namespace, where its ConfigMaps' environment switches are looked for


def _host(url_match: re.Match[str]) -> str:
    text = url_match.group(0)
    return text.split("://", 1)[1].split("/", 1)[0].split(":", 1)[0]


def _namespace_of(log: EvidenceItem) -> str | None:
    """A log's namespace: its source's, or the one in its `Pod/<namespace>/<pod>` name."""
    src = log.data.get("source")
    if isinstance(src, dict) and src.get("namespace"):
        return str(src["namespace"])
    parts = log.object.split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == "Pod" else None


def _nonprod_object(item: EvidenceItem) -> bool:
    ns = str((item.data.get("metadata") or {}).get("namespace") or "")
    return bool(_NONPROD_NAME.search(item.object.lower()) or _NONPROD_NAME.search(ns.lower()))


def _switches(evidence: EvidenceSet, namespace: str | None) -> list[tuple[str, EvidenceRef]]:
    """ConfigMap keys that turn production off (APNS_PRODUCTION=false, USE_SANDBOX=true)."""
    out = []
    for cm in evidence.kind("k8s/ConfigMap"):
        meta = cm.data.get("metadata") or {}
        if namespace and meta.get("namespace") not in (None, namespace):
            continue
        if _nonprod_object(cm):
            continue
        for key, value in (cm.data.get("data") or {}).items():
            v = str(value).strip().lower()
            off = (_PROD_SWITCH.search(str(key)) and v in ("false", "0", "no", "off")) or (
                _SANDBOX_SWITCH.search(str(key)) and v in ("true", "1", "yes", "on")
            )
            if off:
                out.append((f"{key}={value}", EvidenceRef(item=cm.id, field=f"data.{key}", value=value)))
    return out


def _from_logs(evidence: EvidenceSet) -> list[_Place]:
    places: list[_Place] = []
    for item in evidence.kind("log"):
        if _nonprod_object(item):
            continue
        records = item.data.get("records") or ()
        seen: dict[str, _Place] = {}
        for r in records:
            msg = str(r.get("msg") or "")
            if "://" not in msg or not (m := NONPROD_URL.search(msg)):
                continue
            host = _host(m)
            if _PROD_LABEL.search(host):
                continue  # fin-data-prod-dataproc-staging: production's own staging area, not another environment
            place = seen.get(host)
            if place is None:
                label = _LABEL_WORDS.get(m.group(1).lower(), m.group(1).lower())
                place = seen[host] = _Place(host, label, workload_of_pod(service_of(item) or item.object))
                place.since = r.get("ts") if isinstance(r.get("ts"), int | float) else None
                place.refs.append(EvidenceRef(item=item.id, line=r.get("line"), value=msg[:300]))
                place.namespace = _namespace_of(item)
        for host, place in seen.items():
            since = place.since or 0.0
            # the service's failures after it took the address, or any failure that names it
            place.failures = [
                r
                for r in records
                if (is_error(r) or level_of(r) == "warn")
                and (host in str(r.get("msg") or "") or (isinstance(r.get("ts"), int | float) and r["ts"] >= since))
            ]
            places.append(place)
    return places


def _configmap_settings(evidence: EvidenceSet, host: str) -> list[tuple[str, EvidenceRef]]:
    out = []
    for cm in evidence.kind("k8s/ConfigMap"):
        if _nonprod_object(cm):
            continue
        name = (cm.data.get("metadata") or {}).get("name") or cm.object
        for key, value in (cm.data.get("data") or {}).items():
            if host in str(value):
                ref = EvidenceRef(item=cm.id, field=f"data.{key}", value=str(value)[:300])
                out.append((f"ConfigMap {name} {key}", ref))
    return out


def _change_of(evidence: EvidenceSet, host: str) -> tuple[str, EvidenceRef] | None:
    """The change whose new value put the address in (and whose old value did not have it)."""
    for item in evidence.kind("change/diff"):
        for f in item.data.get("files") or ():
            for s in f.get("settings") or ():
                new, old = str(s.get("new") or ""), str(s.get("old") or "")
                if host in new and host not in old:
                    what = f"{item.object} ({item.data.get('subject') or ''})".strip()
                    return (
                        f"{what}: {s.get('key')} {old or '(unset)'} -> {new}",
                        EvidenceRef(item=item.id, field=f"settings.{s.get('key')}", value=new[:300]),
                    )
    return None


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "k8s/ConfigMap", "change/diff"})
def production_sent_to_nonproduction(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    done: set[tuple[str, str]] = set()
    for place in sorted(_from_logs(evidence), key=lambda p: -len(p.failures)):
        if len(place.failures) < MIN_FAILURES or (place.service, place.host) in done:
            continue
        done.add((place.service, place.host))  # one finding per service and address, from its busiest log
        settings = _configmap_settings(evidence, place.host)
        switches = _switches(evidence, place.namespace) if not settings else []
        change = _change_of(evidence, place.host)
        where = [s for s, _ in settings[:2]] + [s for s, _ in switches[:2]]
        refs = [*place.refs, *(r for _, r in settings[:2]), *(r for _, r in switches[:2])]
        if change:
            refs.append(change[1])
        sample = " ".join(str(place.failures[-1].get("msg") or "").split())[:200]
        fail_ref = EvidenceRef(item=place.refs[0].item, line=place.failures[-1].get("line"), value=sample)
        set_by = f"; set by {'; '.join(where)}" if where else ""
        changed = f" The change that set it: {change[0]}." if change else ""
        out.append(
            Finding(
                analyzer="production_sent_to_nonproduction",
                domain=Domain.NETWORK,
                role="cause",
                code="nonproduction_endpoint",
                category=Category.CONFIGURATION_ERROR,
                title=f"{place.service} sends production traffic to {place.host}, a {place.label} endpoint{set_by}",
                mechanism=(
                    f"{place.service} is configured with {place.host} (by its name, a {place.label} system) "
                    f"since {fmt_ts(place.since) if place.since else 'the start of its log'}{set_by}; "
                    f"its calls fail since ({len(place.failures)}x, e.g. '{sample}'): the far end is not failing, "
                    f"it is the wrong far end, answering production requests as a {place.label} system does." + changed
                ),
                object=place.service,
                score=0.85 if (change or where) else 0.75,
                ts=place.since,
                tags=[f"service:{place.service}", f"upstream:{place.host}"],
                explains=[
                    "errors",
                    "alert:*",
                    "http_4xx",
                    "http_403",
                    "access_denied*",
                    "upstream_*",
                    "metric_shift",
                    "step_change",
                    "exception",
                    "bad_data",
                    "data_*",
                ],
                evidence=[*refs, fail_ref],
                actions=[
                    Action(
                        description=f"Point {place.service} back at the production endpoint"
                        + (f" ({where[0]})" if where else "")
                        + " and roll it out; revert the change if one set it",
                        command="kubectl -n <namespace> edit configmap <name>  # or revert the commit",
                        kind="write",
                    )
                ],
            )
        )
    return out


# ---------------------------------------------------------------- a job sent to the wrong location

# BigQuery's answer to a job run in another location than the dataset's: "Not found: Dataset p:d was not found in
# location US" (the same words when the dataset is missing everywhere: a setting that names that location decides)
_NOT_IN_LOCATION = re.compile(r"(?:Dataset|Table) (?P<what>[\w\-.:]+) was not found in location (?P<loc>[\w\-]+)", re.I)
_LOCATION_KEY = re.compile(r"location|region", re.I)


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "k8s/ConfigMap"})
def wrong_location(evidence: EvidenceSet) -> list[Finding]:
    """Jobs that look for a dataset in one location while a setting of the service names that location: the
    dataset lives elsewhere, and the setting sends every job to the wrong place."""
    hits: dict[tuple[str, str], list[tuple[EvidenceItem, dict[str, Any]]]] = {}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "in location" in msg and (m := _NOT_IN_LOCATION.search(msg)):
                hits.setdefault((m["what"], m["loc"]), []).append((item, r))
    out: list[Finding] = []
    for (what, loc), recs in hits.items():
        if len(recs) < MIN_FAILURES:
            continue
        setting = None
        for cm in evidence.kind("k8s/ConfigMap"):
            for key, value in ((cm.data.get("data") or {}) if isinstance(cm.data.get("data"), dict) else {}).items():
                if _LOCATION_KEY.search(str(key)) and str(value).strip().lower() == loc.lower():
                    name = (cm.data.get("metadata") or {}).get("name") or cm.object
                    setting = (
                        f"{key}={value} in ConfigMap {name}",
                        EvidenceRef(item=cm.id, field=f"data.{key}", value=str(value)),
                    )
                    break
            if setting:
                break
        if setting is None:
            continue
        item, r = recs[0]
        who = service_of(item) or item.object
        out.append(
            Finding(
                analyzer="wrong_location",
                domain=Domain.NETWORK,
                role="cause",
                code="wrong_location",
                category=Category.CONFIGURATION_ERROR,
                title=f"{who} runs its jobs in location {loc}, where {what} is not ({setting[0]})",
                mechanism=(
                    f"{setting[0]} sends {who}'s jobs to location {loc}, and {what} is not there: "
                    f"'{str(r.get('msg') or '').strip()[:160]}' x{len(recs)}; the dataset lives in another location, "
                    "so every job that reads or writes it fails until the setting names the dataset's location."
                ),
                object=setting[0].split(" in ", 1)[0],
                score=0.85,
                ts=recs[0][1].get("ts") if isinstance(recs[0][1].get("ts"), int | float) else None,
                tags=[f"service:{who}"],
                explains=["errors", "exception", "job_failed", "task_failed", "alert:*"],
                evidence=[setting[1], EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:300])],
                actions=[
                    Action(
                        description=f"Where {what} lives", command=f"bq show --format=prettyjson {what} | grep location"
                    ),
                    Action(
                        description="Set the location to the dataset's and rerun",
                        command=f"kubectl edit configmap  # {setting[0]}",
                        kind="write",
                    ),
                ],
            )
        )
    return out
