"""Investigations: evidence in (an alert, evidence items, a bundle archive), a task out whose answer carries the
Diagnosis; and Alertmanager's webhook receiver, one investigation per alert group.

The evidence of a task is stored under VAR_DIR/investigations/<id>/ (request.json, alerts/alertmanager.json,
bundle.tar.gz or bundle.zip) before the task is created, so the runner never sees a task without its evidence.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import shutil
import tarfile
import uuid
import zipfile
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.investigation import ALERTS_FOLDER, REQUEST_FILE, investigations_root
from core import alert_groups
from core.errors import UserError
from services.api.deps import Ctx, Operator, Reader, Runner
from services.api.errors import error_body, error_responses

router = APIRouter(tags=["investigations"])

_MAX_QUESTION = 2000
_MAX_ITEMS = 5000


class EvidenceIn(BaseModel):
    """One evidence item as diagnosis/model.py describes it (kind, object, data in the normalised shape)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=64)
    object: str = Field(min_length=1, max_length=512)
    data: dict[str, Any] = Field(default_factory=dict)
    ts: float | None = None
    source: str | None = Field(None, max_length=512)


class InvestigationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alert: dict[str, Any] | None = Field(None, description="An Alertmanager webhook payload, or one of its alerts.")
    evidence: list[EvidenceIn] = Field(default_factory=list, max_length=_MAX_ITEMS)
    question: str | None = Field(None, max_length=_MAX_QUESTION)
    bundle: str | None = Field(None, description="A .tar.gz or .zip evidence bundle, base64-encoded.")
    priority: int = Field(3, ge=0, le=9)


class AlertIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"] = "firing"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str | None = None  # Alertmanager's field names
    endsAt: str | None = None
    generatorURL: str | None = None
    fingerprint: str | None = None


class AlertmanagerPayload(BaseModel):
    """Alertmanager's webhook body, version 4 (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

    model_config = ConfigDict(extra="allow")

    version: str
    groupKey: str = Field(min_length=1, max_length=8192)
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[AlertIn] = Field(min_length=1, max_length=_MAX_ITEMS)


class InvestigationCreated(BaseModel):
    id: str
    status: str
    source: str
    links: dict[str, str]


class BundleTooLarge(UserError):
    code = "bundle_too_large"
    http_status = 413


class BadBundle(UserError):
    code = "bad_bundle"


def archive_suffix(head: bytes) -> str:
    """A bundle archive is recognised by its first bytes, not its name."""
    if head.startswith(b"\x1f\x8b"):
        return ".tar.gz"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return ".zip"
    raise BadBundle("the bundle is not a .tar.gz or .zip archive")


def check_archive(data: bytes) -> str:
    """The archive opens and lists (cheaply: the first tar member, the zip's central directory); what is inside,
    its limits and unsafe entries are load_bundle's to judge when the investigation runs."""
    suffix = archive_suffix(data[:4])
    try:
        if suffix == ".zip":
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                zf.infolist()
        else:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
                tf.next()
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as exc:
        raise BadBundle(f"the bundle archive cannot be read: {exc}") from None
    return suffix


def wrap_alert(alert: dict[str, Any]) -> dict[str, Any]:
    """One alert becomes the Alertmanager payload (version 4) that would have carried it."""
    if isinstance(alert.get("alerts"), list):
        return alert
    try:
        one = AlertIn.model_validate(alert)
    except ValidationError as exc:
        raise UserError(f"alert: not an Alertmanager payload or alert ({exc.errors()[0]['msg']})") from None
    labels = one.labels
    return {
        "version": "4",
        "groupKey": "{}:" + json.dumps(labels, sort_keys=True),
        "truncatedAlerts": 0,
        "status": one.status,
        "receiver": "api",
        "groupLabels": {"alertname": labels["alertname"]} if "alertname" in labels else {},
        "commonLabels": labels,
        "commonAnnotations": one.annotations,
        "externalURL": "",
        "alerts": [one.model_dump(exclude_none=True)],
    }


def _new_folder(ctx: Ctx) -> Path:
    folder = investigations_root(ctx.settings) / uuid.uuid4().hex
    folder.mkdir(parents=True)
    return folder


def _write_evidence(
    ctx: Ctx,
    *,
    alert: dict[str, Any] | None,
    evidence: list[dict[str, Any]],
    question: str | None,
    bundle: tuple[bytes, str] | None,
) -> Path:
    folder = _new_folder(ctx)
    try:
        (folder / REQUEST_FILE).write_text(json.dumps({"question": question, "evidence": evidence}))
        if alert is not None:
            (folder / ALERTS_FOLDER).mkdir()
            (folder / ALERTS_FOLDER / "alertmanager.json").write_text(json.dumps(alert))
        if bundle is not None:
            data, suffix = bundle
            (folder / f"bundle{suffix}").write_bytes(data)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _goal(question: str | None, alert: dict[str, Any] | None, has_bundle: bool) -> str:
    if question:
        return question
    if alert is not None:
        labels = alert.get("commonLabels") or alert.get("groupLabels") or {}
        name = labels.get("alertname") or "alerts"
        summary = (alert.get("commonAnnotations") or {}).get("summary") or ""
        return f"investigate {name}" + (f": {summary}" if summary else "")
    return "investigate the evidence bundle" if has_bundle else "investigate the evidence given"


def _open(
    ctx: Ctx,
    runner: Runner,
    tenant: str,
    folder: Path,
    goal: str,
    question: str | None,
    priority: int,
    origin: dict[str, Any],
    requested_by: str,
) -> str:
    spec = {"dir": str(folder), "question": question, **origin}
    task = ctx.store.create_task(
        goal[:4000],
        tenant=tenant,
        inputs={"investigation": spec},
        priority=priority,
        source="investigation",
        requested_by=requested_by,
    )
    runner.submit(task.id)
    return task.id


def _created(task_id: str) -> InvestigationCreated:
    return InvestigationCreated(
        id=task_id,
        status="queued",
        source="investigation",
        links={"self": f"/v1/tasks/{task_id}", "events": f"/v1/tasks/{task_id}/events"},
    )


def _too_large(ctx: Ctx, size: int) -> None:
    if size > ctx.settings.max_bundle_bytes:
        raise BundleTooLarge(f"the bundle is {size} bytes, over the limit of {ctx.settings.max_bundle_bytes}")


@router.post(
    "/v1/investigations",
    status_code=202,
    response_model=InvestigationCreated,
    responses=error_responses(400, 413, 422),  # the body is read here (JSON or multipart), not by FastAPI
)
async def create_investigation(request: Request, ctx: Ctx, runner: Runner, principal: Operator) -> Any:
    """JSON `{alert?, evidence?, question?, bundle? (base64)}`, or multipart with a `bundle` file (and optional
    `question`, `alert` and `evidence` fields as JSON text). 202 and a task; its answer carries the Diagnosis."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        body, bundle = await _from_multipart(request, ctx)
    elif content_type.startswith("application/json") or not content_type:
        try:
            raw = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse(error_body("invalid_json", "request body is not valid JSON"), status_code=400)
        body = _validated(raw)
        bundle = None
        if body.bundle:
            try:
                data = base64.b64decode(body.bundle, validate=True)
            except (binascii.Error, ValueError):
                raise BadBundle("bundle: not valid base64") from None
            _too_large(ctx, len(data))
            bundle = (data, check_archive(data))
    else:
        return JSONResponse(
            error_body("unsupported_media_type", "send application/json or multipart/form-data"), status_code=415
        )
    if body.alert is None and not body.evidence and bundle is None:
        raise UserError("give an alert, evidence items or a bundle to investigate")
    alert = wrap_alert(body.alert) if body.alert is not None else None
    folder = await run_in_threadpool(
        _write_evidence,
        ctx,
        alert=alert,
        evidence=[e.model_dump(exclude_none=True) for e in body.evidence],
        question=body.question,
        bundle=bundle,
    )
    goal = _goal(body.question, alert, bundle is not None)
    task_id = await run_in_threadpool(
        _open,
        ctx,
        runner,
        principal.tenant,
        folder,
        goal,
        body.question,
        body.priority,
        {"origin": "api"},
        principal.who,
    )
    return _created(task_id)


def _validated(raw: Any) -> InvestigationCreate:
    try:
        return InvestigationCreate.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "body"
        code = "unknown_field" if first.get("type") == "extra_forbidden" else "invalid_request"
        raise _Invalid(code, f"{loc}: {first.get('msg')}") from None


class _Invalid(UserError):
    http_status = 422

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _from_multipart(request: Request, ctx: Ctx) -> tuple[InvestigationCreate, tuple[bytes, str] | None]:
    form = await request.form(max_files=1, max_fields=8)
    try:
        fields: dict[str, Any] = {}
        for name in ("question", "alert", "evidence", "priority"):
            value = form.get(name)
            if isinstance(value, str) and value:
                fields[name] = value if name == "question" else json.loads(value)
        unknown = set(form.keys()) - {"question", "alert", "evidence", "priority", "bundle"}
        if unknown:
            raise _Invalid("unknown_field", f"unknown form field(s): {', '.join(sorted(unknown))}")
        upload = form.get("bundle")
        bundle = None
        if upload is not None and not isinstance(upload, str):
            data = await upload.read(ctx.settings.max_bundle_bytes + 1)
            _too_large(ctx, len(data))
            bundle = (data, check_archive(data))
        elif isinstance(upload, str):
            raise BadBundle("bundle: send the archive as a file part")
    except json.JSONDecodeError as exc:
        raise _Invalid("invalid_json", f"a form field is not valid JSON: {exc}") from None
    finally:
        await form.close()
    return _validated(fields), bundle


# --- Alertmanager --------------------------------------------------------------------------------------------------


@router.post("/v1/alerts/alertmanager", responses=error_responses(400, 413, 422))
async def alertmanager_webhook(request: Request, ctx: Ctx, runner: Runner, principal: Operator) -> Any:
    """Alertmanager's webhook receiver: one investigation per alert group (groupKey) per tenant while it fires."""
    try:
        raw = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return JSONResponse(error_body("invalid_json", "request body is not valid JSON"), status_code=400)
    try:
        payload = AlertmanagerPayload.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise _Invalid("invalid_request", f"not an Alertmanager webhook payload: {loc}: {first.get('msg')}") from None
    if payload.version != "4":
        raise _Invalid(
            "unsupported_version", f"Alertmanager payload version {payload.version!r}; this receiver reads 4"
        )
    tenant = principal.tenant

    def open_investigation() -> str:
        body = payload.model_dump(mode="json")
        folder = _write_evidence(ctx, alert=body, evidence=[], question=None, bundle=None)
        question = payload.commonAnnotations.get("summary") or payload.commonAnnotations.get("description")
        origin = {"origin": "alertmanager", "group_key": payload.groupKey}
        return _open(ctx, runner, tenant, folder, _goal(None, body, False), question, 2, origin, principal.who)

    notified = await run_in_threadpool(
        lambda: alert_groups.notify(
            ctx.store,
            tenant=tenant,
            group_key=payload.groupKey,
            status=payload.status,
            receiver=payload.receiver,
            labels=dict(payload.commonLabels),
            open_investigation=open_investigation,
        )
    )
    return {"group": alert_groups.group_view(notified.group), "opened": notified.opened}


@router.get("/v1/alerts/groups")
def list_alert_groups(ctx: Ctx, principal: Reader, limit: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
    """The tenant's alert groups: status, notifications, the investigation each opened."""
    return {
        "groups": [alert_groups.group_view(g) for g in alert_groups.list_groups(ctx.store, principal.tenant, limit)]
    }
