"""Change records pasted from a change tool (ServiceNow, Jira Service Management, a Markdown change template):
a change id, a title, a state and its planned or actual window, and dated work notes. Read as the `log` of the
change: it started (planned maintenance, so the changes analyzer's planned work knows it), its work notes, and how
it ended; a change that failed or was backed out says so at error level, and is not planned work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

_CHANGE_ID = re.compile(
    r"\b(CHG[-_ ]?\d{3,}|RFC[-_ ]?\d{3,}|CRQ\d{4,}|Change (?:Request|Record|Ticket) #?\d{3,})\b", re.I
)
# "Planned start: 2025-11-19 01:00 CET", "| Planned start | 2025-04-16 09:00 UTC |"
_FIELD = re.compile(
    r"(?im)(?:^|\||[ \t]{2})[ \t]*"
    r"(?P<key>(?:planned|scheduled|actual|implementation)[ _](?:start|end)(?:[ _](?:date|time))?|"
    r"short description|title|summary|state|status|type|window)"
    r"[ \t]*(?::|\|)[ \t]*(?P<value>[^|\n]+?)[ \t]*(?=\s{2,}\S|\||$)"
)
# "01:45 - 03:15 UTC" with a hyphen or a dash, or "02:00-03:00 UTC" with none around it (not an offset: a time follows)
_WINDOW_SPLIT = re.compile(
    r"\s+(?:-|\u2013|\u2014|to)\s+|(?:(?<=\s\d:\d\d)|(?<=\s\d\d:\d\d))(?:-|\u2013|\u2014)(?=\d{1,2}:\d\d(?!\d))"
)
_ZONE_AT_END = re.compile(r"\s((?:[A-Z]{2,5})|[+-]\d{2}:?\d{2}|Z)$")
_NOTE = re.compile(
    r"^\s*(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?(?:\s*(?:[A-Z]{2,5}|[+-]\d{2}:?\d{2}|Z))?)\s+(?P<msg>\S.*)$"
)
_FAILED_STATE = re.compile(r"fail|unsuccessful|backed out|backout|rolled back|cancel", re.I)


def _fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    text = text[:6000].replace("**", "").replace("__", "")  # Markdown bold: "**Window:** 2024-12-09 08:00-10:00 UTC"
    for m in _FIELD.finditer(text):
        key = re.sub(r"[ _]+", " ", m["key"].lower()).replace(" date", "").replace(" time", "")
        out.setdefault(key, m["value"].strip())
    return out


def detect(doc: Document) -> bool:
    head = doc.text[:4000]
    if not _CHANGE_ID.search(head):
        return False
    fields = _fields(head)
    starts = ("planned start", "actual start", "scheduled start")
    window = _WINDOW_SPLIT.split(fields.get("window", ""), maxsplit=1)[0]
    return any(parse_ts(fields.get(k)) is not None for k in starts) or parse_ts(window) is not None


@FORMATS.format("change-record", shapes={"text"}, detect=detect, order=16)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    text = doc.text
    change_id = _CHANGE_ID.search(text[:4000])
    assert change_id is not None
    cid = re.sub(r"\s+", " ", change_id.group(1))
    fields = _fields(text)
    heading = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")
    title = fields.get("short description") or fields.get("title") or fields.get("summary") or heading or cid
    title = title.replace(cid, "").strip(" -—:") or cid
    state = fields.get("state") or fields.get("status") or ""
    start = (
        parse_ts(fields.get("actual start"))
        or parse_ts(fields.get("planned start"))
        or parse_ts(fields.get("scheduled start"))
    )
    end = (
        parse_ts(fields.get("actual end"))
        or parse_ts(fields.get("planned end"))
        or parse_ts(fields.get("scheduled end"))
    )
    window = _WINDOW_SPLIT.split(fields.get("window", ""), maxsplit=1)
    if len(window) == 2 and (zone := _ZONE_AT_END.search(window[1])) and not _ZONE_AT_END.search(window[0]):
        window[0] = f"{window[0]} {zone.group(1)}"  # "02:00-03:00 UTC": the zone written once is the start's too
    if start is None and window[0]:
        start = parse_ts(window[0])
    if end is None and len(window) == 2 and start is not None:
        # "01:45 - 03:15 UTC": the end may carry only a time, on the start's day and in its zone
        end = parse_ts(window[1]) or parse_ts(f"{window[0].split()[0]} {window[1]}")
    failed = bool(_FAILED_STATE.search(state))
    kind = fields.get("type", "")
    records: list[dict[str, Any]] = [
        {
            "ts": start,
            "level": "info",
            "msg": f"planned maintenance {cid} started: {title}" + (f" ({kind})" if kind else ""),
            "line": 1,
        }
    ]
    for n, line in enumerate(text.splitlines(), 1):
        m = _NOTE.match(line)
        if m and (ts := parse_ts(m["ts"])) is not None:
            records.append({"ts": ts, "level": "info", "msg": m["msg"].strip(), "line": n})
    if end is not None or state:
        records.append(
            {
                "ts": end,
                "level": "error" if failed else "info",
                "msg": f"change {cid} {'failed' if failed else 'ended'}: {state or 'no state given'} ({title})",
                "line": len(text.splitlines()),
            }
        )
    records.sort(key=lambda r: (r["ts"] is None, r["ts"] or 0.0))
    stamps = [r["ts"] for r in records if r["ts"] is not None]
    data = {
        "records": records,
        "source": {"path": doc.path, "format": "change record", "change": cid, "state": state, "title": title},
        "truncated": False,
    }
    yield ctx.item(doc.path, "log", f"change {cid}", data, max(stamps) if stamps else None)


# --- `helm history RELEASE`: one row per revision (REVISION, UPDATED, STATUS, CHART, APP VERSION, DESCRIPTION)
_HELM_HEADER = re.compile(r"^REVISION\s+UPDATED\s+STATUS\s+CHART\s+APP VERSION\s+DESCRIPTION\s*$", re.M)
_HELM_ROW = re.compile(
    r"^(?P<rev>\d+)\s+(?P<updated>\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\s+(?P<status>[\w-]+)\s+"
    r"(?P<chart>\S+)\s+(?P<app>\S+)\s+(?P<desc>.*?)\s*$"
)
_HELM_CMD = re.compile(
    r"helm(?:\s+-{1,2}[\w-]+(?:[ =](?!history\b|hist\b)\S+)?)*\s+(?:history|hist)"
    r"(?:\s+-{1,2}[\w-]+(?:[ =]\S+)?)*\s+(?P<release>[a-z0-9][\w.\-]*)"
)


def detect_helm_history(doc: Document) -> bool:
    return bool(_HELM_HEADER.search(doc.text[:4000]))


@FORMATS.format("helm-history", shapes={"text"}, detect=detect_helm_history, order=20)
def parse_helm_history(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """The release's revisions as the log of its deploys ("deployed checkout-api v2.31.0 (revision 87, chart
    checkout-api-3.9.2): Upgrade complete"), which the changes analyzers read as releases; a failed revision or a
    rollback says so at warning level. Helm prints UPDATED in the client's local time: read as UTC."""
    from datetime import UTC, datetime

    cmd = _HELM_CMD.search(doc.command or doc.text[:400])
    records: list[dict[str, Any]] = []
    for n, line in enumerate(doc.lines(), 1):
        m = _HELM_ROW.match(line.strip())
        if not m:
            continue
        try:
            ts = datetime.strptime(" ".join(m["updated"].split()), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)
        except ValueError:
            continue
        release = cmd["release"] if cmd else re.sub(r"-v?\d+(?:\.\d+)+$", "", m["chart"])
        status, desc = m["status"].lower(), m["desc"]
        bad = status in ("failed", "pending-upgrade", "pending-rollback") or desc.lower().startswith("rollback")
        version = m["app"] if m["app"] not in ("", "<none>") else m["chart"].rsplit("-", 1)[-1]
        records.append(
            {
                "ts": ts.timestamp(),
                "level": "warning" if bad else "info",
                "msg": f"{'deployed' if status != 'failed' else 'failed to deploy'} {release} "
                f"{'v' if not version.startswith('v') else ''}{version} (revision {m['rev']}, chart {m['chart']}, "
                f"{status}): {desc}",
                "line": n,
            }
        )
    if not records:
        return
    release = cmd["release"] if cmd else "release"
    data = {"records": records, "source": {"path": doc.path, "export": "helm-history"}, "truncated": False}
    yield ctx.item(doc.path, "log", f"helm/{release}", data, max(r["ts"] for r in records))


# --- `argocd app history APP`: one row per sync (ID, DATE, REVISION) --------------------------------------------
_ARGO_HEADER = re.compile(r"^ID\s+DATE\s+REVISION\s*$", re.M)
_ARGO_ROW = re.compile(
    r"^(?P<id>\d+)\s+(?P<date>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?: [+-]\d{4})?(?: [A-Z]{2,4})?)\s+(?P<rev>\S.*?)\s*$"
)
_ARGO_CMD = re.compile(r"argocd app history (?P<app>[a-z0-9][\w.\-]*)")


def detect_argocd_history(doc: Document) -> bool:
    return bool(_ARGO_HEADER.search(doc.text[:4000]))


def argo_sync_line(app: str, revision: object, history: object) -> str:
    """One Argo CD sync as a deploy line, the words the release rules read (errors._DEPLOY_LINE)."""
    return f"argocd synced {app} to revision {revision} (history {history})"


@FORMATS.format("argocd-history", shapes={"text"}, detect=detect_argocd_history, order=20)
def parse_argocd_history(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """An Argo CD application's syncs as the log of its deploys ("argocd synced checkout-prod to revision
    apps/checkout (c71e5aa), history 42"), which the release rules read."""
    cmd = _ARGO_CMD.search(doc.command or doc.text[:400])
    app = cmd["app"] if cmd else "application"
    records: list[dict[str, Any]] = []
    for n, line in enumerate(doc.lines(), 1):
        m = _ARGO_ROW.match(line.strip())
        if not m:
            continue
        date = re.sub(r" (?:UTC|GMT)$", "", m["date"])
        ts = parse_ts(date.replace(" ", "T", 1).replace(" ", ""))
        if ts is None:
            continue
        msg = argo_sync_line(app, m["rev"], m["id"])
        records.append({"ts": ts, "level": "info", "msg": msg, "line": n})
    if records:
        data = {"records": records, "source": {"path": doc.path, "export": "argocd-history"}, "truncated": False}
        yield ctx.item(doc.path, "log", f"argocd/{app}", data, max(r["ts"] for r in records))


# --- commits with their diffs (`git show`, `git log -p`) ----------------------------------------------------------

_COMMIT = re.compile(r"^commit ([0-9a-f]{7,40})\b", re.M)
_GIT_DATE = re.compile(r"^(?:Date|AuthorDate|CommitDate):\s+(.+)$", re.M)
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/\S+", re.M)
# a changed line that sets a value: YAML `key: value`, `KEY=value` (env files, properties), JSON `"key": value`
_SETTING_LINE = re.compile(
    r"^(?P<sign>[+-])(?![+-]{2})\s*(?:-\s+)?[\"']?(?P<key>[A-Za-z_][\w.\-]*)[\"']?\s*(?::|=)\s*(?P<value>[^#\n]*?)\s*,?\s*$"
)


def detect_git_diff(doc: Document) -> bool:
    head = doc.text[:200_000]
    return bool(_DIFF_FILE.search(head)) and ("\n+" in head or "\n-" in head)


def _git_ts(text: str) -> float | None:
    from email.utils import parsedate_to_datetime

    m = _GIT_DATE.search(text)
    if not m:
        return None
    raw = m[1].strip()
    try:
        return parsedate_to_datetime(raw).timestamp()  # git's default: "Tue May 21 14:06:17 2024 +0000"
    except (TypeError, ValueError):
        pass
    try:  # "Tue May 21 14:06:17 2024 +0000" without a weekday comma: reorder for the RFC 2822 parser
        wd, mon, day, clock, year, *zone = raw.split()
        return parsedate_to_datetime(f"{wd}, {day} {mon} {year} {clock} {' '.join(zone) or '+0000'}").timestamp()
    except (TypeError, ValueError):
        return parse_ts(raw)


def _sides(hunk: str) -> tuple[dict[str, str], dict[str, str]]:
    """The settings a diff's hunk removes and adds: ({key: old value}, {key: new value})."""
    old: dict[str, str] = {}
    new: dict[str, str] = {}
    for line in hunk.splitlines():
        m = _SETTING_LINE.match(line)
        if m:
            (old if m["sign"] == "-" else new)[m["key"]] = m["value"].strip().strip("\"'")
    return old, new


def _settings(hunk: str) -> list[dict[str, str]]:
    """The settings a diff changes: {key, old, new} for a key removed with one value and added with another."""
    old, new = _sides(hunk)
    return [{"key": k, "old": old[k], "new": new[k]} for k in old if k in new and old[k] != new[k]]


def _moved(sides: list[tuple[str, dict[str, str], dict[str, str]]]) -> list[dict[str, Any]]:
    """Settings one commit removed from some files and set in another (per-host overrides folded into a group's
    variables): {key, old, new, moved: "<from> -> <to>"}, the old value the first removed one."""
    out: list[dict[str, Any]] = []
    for path, old, new in sides:
        for key, value in new.items():
            if key in old:
                continue
            was = next(((p, o[key]) for p, o, n in sides if p != path and key in o and key not in n), None)
            if was is not None and was[1] != value:
                out.append({"key": key, "old": was[1], "new": value, "moved": f"{was[0]} -> {path}"})
    return out


@FORMATS.format("git-diff", shapes={"text"}, detect=detect_git_diff, order=18)
def parse_git_diff(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each commit of `git show` / `git log -p` output as a `change/diff` item: {sha, ts, subject, files: [{path,
    settings: [{key, old, new}]}]}, the settings being the lines the diff sets to another value (`key: value`,
    `KEY=value`). Without a commit header (a bare `git diff`), one item of the changes, at no known time."""
    text = doc.text
    starts = [m.start() for m in _COMMIT.finditer(text)] or [0]
    for i, start in enumerate(starts):
        block = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)]
        sha = m[1] if (m := _COMMIT.match(block)) else ""
        header = block.split("\ndiff --git", 1)[0]
        subject = next(
            (line.strip() for line in header.splitlines()[1:] if line.startswith("    ") and line.strip()), ""
        )
        parts = list(_DIFF_FILE.finditer(block))
        files: list[dict[str, Any]] = []
        sides = []
        for j, f in enumerate(parts):
            hunk = block[f.end() : parts[j + 1].start() if j + 1 < len(parts) else len(block)]
            files.append({"path": f[1], "settings": _settings(hunk)})
            sides.append((f[1], *_sides(hunk)))
        for moved in _moved(sides):
            target = next(f for f in files if f["path"] == moved["moved"].split(" -> ")[1])
            target["settings"].append(moved)
        if not files:
            continue
        ts = _git_ts(header)
        data = {"sha": sha[:12], "ts": ts, "subject": subject[:200], "files": files, "command": doc.command[:300]}
        yield ctx.item(doc.path, "change/diff", f"commit {sha[:7] or doc.stem}", data, ts)


# --- Terraform's plan and apply output: the attributes each resource changes ----------------------------------------
#   # module.q.aws_sqs_queue.this will be updated in-place
#   ~ resource "aws_sqs_queue" "this" {
#       ~ visibility_timeout_seconds        = 900 -> 30
_TF_RESOURCE = re.compile(r"^\s*# (\S+) (?:will be|must be) (updated in-place|created|destroyed|replaced)")
_TF_ATTR = re.compile(r"^\s*([~+-]) \"?([\w.\-]+)\"?\s+= (.+?)(?: -> (.+?))?(?:\s+# forces replacement)?\s*$")
# a named-setting block (an RDS parameter group's `parameter`, an ElastiCache one, a `setting`), removed or added
_TF_BLOCK = re.compile(r"^\s*([+-]) (?:parameter|setting) \{\s*$")
_TF_MARK = re.compile(
    r"Terraform will perform the following actions|^Plan: \d+ to add|^Apply complete! Resources:", re.M
)


def _named_blocks(blocks: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Removed and added `parameter {name, value}` blocks paired by name: {key: name, old, new} settings (Terraform
    prints a changed parameter as the old block removed and the new one added)."""
    old = {b["name"]: b.get("value", "") for b in blocks if b["sign"] == "-" and b.get("name")}
    new = {b["name"]: b.get("value", "") for b in blocks if b["sign"] == "+" and b.get("name")}
    return [
        {"key": name, "old": old.get(name, ""), "new": new.get(name, "null"), "parameter": True}
        for name in dict.fromkeys([*old, *new])
        if old.get(name) != new.get(name)
    ]


def detect_terraform(doc: Document) -> bool:
    head = doc.text[:200_000]
    return bool(_TF_MARK.search(head)) and bool(
        re.search(_TF_RESOURCE.pattern, head, re.M) or "Apply complete!" in head
    )


@FORMATS.format("terraform-plan", shapes={"text"}, detect=detect_terraform, order=17)
def parse_terraform(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """A plan (or the plan an apply printed) as one `change/diff` item: each resource a file entry whose settings
    are the attributes it changes ({key, old, new}; a new attribute's old value is empty). Applied or only planned
    is said by `applied`."""
    files: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    block: dict[str, str] | None = None  # a `parameter { name = ..., value = ... }` block being read
    for line in doc.lines():
        if m := _TF_RESOURCE.match(line):
            current = {"path": m.group(1), "action": m.group(2), "settings": [], "blocks": []}
            files.append(current)
            continue
        if current is None:
            continue
        if b := _TF_BLOCK.match(line):
            block = {"sign": b.group(1)}
            continue
        if block is not None:
            if line.strip() == "}":
                current["blocks"].append(block)
                block = None
            elif a := _TF_ATTR.match(line):
                block[a.group(2)] = (a.group(3) or "").strip().strip('"')
            continue
        a = _TF_ATTR.match(line)
        if a is None:
            continue
        sign, key, first, second = a.groups()
        unq = lambda v: (v or "").strip().strip('"')  # noqa: E731 (a one-line helper reads best here)
        if sign == "~" and second is not None:
            old, new = unq(first), unq(second)
        elif sign == "+":
            old, new = "", unq(first)
        elif sign == "-":
            old, new = unq(first), unq(second) if second else "null"
        else:
            continue
        if old != new and not new.startswith("{") and not new.startswith("["):
            current["settings"].append({"key": key, "old": old, "new": new})
    if not files:
        return
    for f in files:
        f["settings"] += _named_blocks(f.pop("blocks"))
    applied = "Apply complete!" in doc.text or "Modifications complete after" in doc.text
    subject = f"terraform {'apply' if applied else 'plan'}: " + ", ".join(
        f"{f['path']} {f['action']}" for f in files[:3]
    )
    data = {"sha": "", "ts": None, "subject": subject[:200], "files": files, "command": doc.command[:300],
            "applied": applied}  # fmt: skip
    yield ctx.item(doc.path, "change/diff", f"terraform {files[0]['path']}", data, None)


# --- Cloudflare's audit log (`GET /accounts/{id}/audit_logs`): who changed what in a zone, and when ----------------
def _cloudflare_audit(v: Any) -> list[dict[str, Any]] | None:
    rows = v.get("result") if isinstance(v, dict) and "success" in v else None
    if not isinstance(rows, list) or not rows:
        return None
    ok = all(isinstance(r, dict) and "when" in r and isinstance(r.get("action"), dict) for r in rows)
    return rows if ok else None


def _rule_summary(value: Any) -> str:
    """What a changed ruleset or setting now says, briefly: its rules' actions and expressions, or its fields."""
    if isinstance(value, dict) and isinstance(value.get("rules"), list):
        parts = []
        for r in value["rules"][:3]:
            if isinstance(r, dict):
                desc = r.get("description") or r.get("expression") or ""
                params = r.get("action_parameters")
                parts.append(f"{r.get('action')}: {desc}" + (f" {json.dumps(params)[:160]}" if params else ""))
        return "; ".join(parts)[:400]
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in list(value.items())[:6])[:300]
    return str(value or "")[:300]


@FORMATS.format("cloudflare-audit", shapes={"json"}, detect=lambda d: _cloudflare_audit(d.value) is not None, order=30)
def parse_cloudflare_audit(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each entry a record "<action> <resource type> (<phase>) in <zone> by <actor>: <what it now says>"; logins
    are left out. The log records operations on the zone, not how it serves."""
    records: list[dict[str, Any]] = []
    for n, e in enumerate(_cloudflare_audit(doc.value) or [], 1):
        action = str((e.get("action") or {}).get("type") or "")
        if action == "login":
            continue
        res = e.get("resource") or {}
        meta = e.get("metadata") or {}
        actor = (e.get("actor") or {}).get("email") or (e.get("actor") or {}).get("type") or "?"
        phase = meta.get("ruleset_phase") if isinstance(meta, dict) else None
        zone = meta.get("zone_name") if isinstance(meta, dict) else None
        new = _rule_summary(e.get("newValueJson") or e.get("newValue"))
        msg = (
            f"{action} {res.get('type') or 'resource'}{f' ({phase})' if phase else ''}{f' in {zone}' if zone else ''}"
            f" by {actor}" + (f": {new}" if new else "")
        )
        ok = (e.get("action") or {}).get("result")
        records.append({"ts": parse_ts(e.get("when")), "level": "error" if ok is False else "info", "msg": msg,
                        "line": n})  # fmt: skip
    records.sort(key=lambda r: r["ts"] or 0)
    stamps = [float(r["ts"]) for r in records if isinstance(r["ts"], int | float)]
    data = {"records": records, "source": {"path": doc.path, "export": "cloudflare-audit"}, "truncated": False}
    yield ctx.item(doc.path, "log", "cloudflare/audit", data, max(stamps) if stamps else None)


# --- CloudFormation's stack events (`aws cloudformation describe-stack-events`): a stack update resource by resource


def _is_stack_events(v: Any) -> bool:
    events = v.get("StackEvents") if isinstance(v, dict) else None
    return (
        isinstance(events, list)
        and bool(events)
        and all(isinstance(e, dict) and "ResourceStatus" in e and "LogicalResourceId" in e for e in events[:20])
    )


@FORMATS.format("cloudformation-events", shapes={"json"}, detect=lambda d: _is_stack_events(d.value), order=30)
def parse_stack_events(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """A stack's events as its log, oldest first (the API returns the newest first): a resource that failed to
    create, update or delete is an error with CloudFormation's reason ("Resource handler returned message: ..."),
    a rollback a warning, the rest information."""
    by_stack: dict[str, list[dict[str, Any]]] = {}
    for n, e in enumerate(doc.value["StackEvents"], 1):
        ts = parse_ts(str(e.get("Timestamp") or ""))
        status = str(e.get("ResourceStatus") or "")
        level = "error" if status.endswith("_FAILED") else "warn" if "ROLLBACK" in status else "info"
        msg = f"{e.get('LogicalResourceId')} ({e.get('ResourceType', '?')}) {status}"
        if e.get("ResourceStatusReason"):
            msg += f": {e['ResourceStatusReason']}"
        stack = str(e.get("StackName") or "stack")
        by_stack.setdefault(stack, []).append({"ts": ts, "level": level, "msg": msg, "line": n})
    for stack, records in by_stack.items():
        records.sort(key=lambda r: r["ts"] or 0)
        stamps = [r["ts"] for r in records if r["ts"] is not None]
        data = {"records": records, "source": {"path": doc.path, "service": stack}, "truncated": False}
        yield ctx.item(doc.path, "log", f"cloudformation/{stack}", data, max(stamps) if stamps else None)
