"""A write tool for Alertmanager: create a silence for label matchers, or expire one (its v2 API).

The preview lists the alerts firing now that the silence would mute, so the approver sees what goes quiet.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.logging import redact
from core.settings import Settings
from core.types import Effect, ToolResult, ToolStatus
from tools._registry import CATALOG
from tools._remediation import failed, refused
from tools.base import ToolArgs, ToolContext

_SILENCE_ID = re.compile(r"^[0-9a-fA-F-]{8,64}$")
_SHOWN_ALERTS = 20


def _alertmanager_configured(settings: Settings) -> str | None:
    return None if settings.alertmanager_url else "no Alertmanager: set OPSGRAPH_ALERTMANAGER_URL"


class Matcher(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]{0,127}$", description="A label name.")
    value: str = Field(max_length=256, description="The label value (a regex when is_regex).")
    is_regex: bool = False
    is_equal: bool = True

    def expression(self) -> str:
        """The matcher in Alertmanager's filter syntax: name="v", name!="v", name=~"v", name!~"v"."""
        op = ("=~" if self.is_regex else "=") if self.is_equal else ("!~" if self.is_regex else "!=")
        value = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.name}{op}"{value}"'


class AlertmanagerSilenceArgs(ToolArgs):
    action: Literal["create", "expire"] = "create"
    matchers: list[Matcher] = Field(default_factory=list, max_length=16, description="For create: label matchers.")
    duration_s: float = Field(3600, gt=0, description="For create: how long the silence lasts.")
    comment: str = Field("silenced by opsgraph after approval", max_length=500)
    created_by: str = Field("opsgraph", max_length=128, description="Recorded as the silence's author.")
    silence_id: str | None = Field(None, description="For expire: the silence's id.")

    @model_validator(mode="after")
    def _fits_action(self) -> AlertmanagerSilenceArgs:
        if self.action == "create":
            # like Alertmanager itself: a silence must name something, not mute everything
            if not any(m.is_equal and not m.is_regex and m.value for m in self.matchers):
                raise ValueError("a silence needs at least one equality matcher with a value (e.g. alertname=X)")
        elif not (self.silence_id and _SILENCE_ID.fullmatch(self.silence_id)):
            raise ValueError("expire needs the silence_id of an existing silence")
        return self


def _client(settings: Settings) -> httpx.Client:
    return httpx.Client(base_url=settings.alertmanager_url.rstrip("/"), timeout=10)


def _firing(client: httpx.Client, matchers: list[Matcher]) -> list[dict[str, Any]]:
    """Active (not yet silenced or inhibited) alerts the matchers select, as the approver should see them."""
    params = httpx.QueryParams([("filter", m.expression()) for m in matchers])
    params = params.merge({"active": "true", "silenced": "false", "inhibited": "false"})
    response = client.get("/api/v2/alerts", params=params)
    response.raise_for_status()
    return [
        {
            "labels": a.get("labels", {}),
            "starts_at": a.get("startsAt"),
            "summary": (a.get("annotations") or {}).get("summary", ""),
        }
        for a in response.json()
    ]


def _silence(client: httpx.Client, silence_id: str) -> dict[str, Any] | None:
    response = client.get(f"/api/v2/silence/{silence_id}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return dict(response.json())


def _unreachable(settings: Settings, exc: Exception) -> ToolResult:
    return failed(f"Alertmanager at {redact(settings.alertmanager_url)} failed: {redact(str(exc))}", "unreachable")


def _cap_refusal(args: AlertmanagerSilenceArgs, settings: Settings) -> ToolResult | None:
    if args.action == "create" and args.duration_s > settings.alertmanager_max_silence_s:
        return refused(
            f"alertmanager_silence refused: {args.duration_s:g}s is longer than the "
            f"{settings.alertmanager_max_silence_s:g}s OPSGRAPH_ALERTMANAGER_MAX_SILENCE_S allows"
        )
    return None


def _preview_silence(args: AlertmanagerSilenceArgs, ctx: ToolContext) -> ToolResult:
    if capped := _cap_refusal(args, ctx.settings):
        return capped
    try:
        with _client(ctx.settings) as client:
            if args.action == "expire":
                assert args.silence_id is not None  # checked by the args model
                silence = _silence(client, args.silence_id)
                if silence is None:
                    return failed(f"no silence {args.silence_id}", "not_found")
                return ToolResult(
                    status=ToolStatus.SUCCESS,
                    summary=f"would expire silence {args.silence_id} ({silence.get('status', {}).get('state')}, "
                    f"{_matchers_text(silence.get('matchers', []))}, ends {silence.get('endsAt')})",
                    data={"action": "expire", "silence": silence},
                )
            firing = _firing(client, args.matchers)
    except httpx.HTTPError as exc:
        return _unreachable(ctx.settings, exc)
    names = sorted({str(a["labels"].get("alertname", "?")) for a in firing})
    expressions = [m.expression() for m in args.matchers]
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"would silence {{{', '.join(expressions)}}} for {args.duration_s:g}s: "
        + (f"{len(firing)} alert(s) firing now go quiet ({', '.join(names[:5])})" if firing else "no alert fires now"),
        data={
            "action": "create",
            "matchers": expressions,
            "duration_s": args.duration_s,
            "firing": firing[:_SHOWN_ALERTS],
            "firing_count": len(firing),
        },
    )


def _matchers_text(matchers: list[dict[str, Any]]) -> str:
    parts = []
    for m in matchers:
        op = ("=~" if m.get("isRegex") else "=") if m.get("isEqual", True) else ("!~" if m.get("isRegex") else "!=")
        parts.append(f'{m.get("name")}{op}"{m.get("value")}"')
    return "{" + ", ".join(parts) + "}"


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@CATALOG.tool(
    args=AlertmanagerSilenceArgs,
    effect=Effect.WRITE,
    idempotent=False,
    timeout_s=30,
    cost_hint_s=0.3,
    prerequisites=[_alertmanager_configured],
    preview_fn=_preview_silence,
)
def alertmanager_silence(args: AlertmanagerSilenceArgs, ctx: ToolContext) -> ToolResult:
    """Create an Alertmanager silence for label matchers, or expire one (POST /api/v2/silences, DELETE
    /api/v2/silence/{id}).

    Refuses a silence without an equality matcher and one longer than OPSGRAPH_ALERTMANAGER_MAX_SILENCE_S."""
    if capped := _cap_refusal(args, ctx.settings):
        return capped
    try:
        with _client(ctx.settings) as client:
            if args.action == "expire":
                assert args.silence_id is not None
                response = client.delete(f"/api/v2/silence/{args.silence_id}")
                if response.status_code == 404:
                    return failed(f"no silence {args.silence_id}", "not_found")
                response.raise_for_status()
                after = _silence(client, args.silence_id) or {}
                state = after.get("status", {}).get("state", "expired")
                return ToolResult(
                    status=ToolStatus.SUCCESS,
                    summary=f"expired silence {args.silence_id} (now {state})",
                    data={"action": "expire", "silence_id": args.silence_id, "state": state},
                    evidence=[f"DELETE /api/v2/silence/{args.silence_id}: {response.status_code}"],
                )
            firing = _firing(client, args.matchers)
            now = dt.datetime.now(dt.UTC)
            body = {
                "matchers": [
                    {"name": m.name, "value": m.value, "isRegex": m.is_regex, "isEqual": m.is_equal}
                    for m in args.matchers
                ],
                "startsAt": _iso(now),
                "endsAt": _iso(now + dt.timedelta(seconds=args.duration_s)),
                "createdBy": args.created_by,
                "comment": args.comment,
            }
            response = client.post("/api/v2/silences", json=body)
            if response.status_code == 400:
                return failed(f"Alertmanager rejected the silence: {response.text[:300]}", "rejected_by_target")
            response.raise_for_status()
            silence_id = str(response.json()["silenceID"])
    except httpx.HTTPError as exc:
        return _unreachable(ctx.settings, exc)
    expressions = [m.expression() for m in args.matchers]
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"silence {silence_id} created for {{{', '.join(expressions)}}} until {body['endsAt']}; "
        f"{len(firing)} firing alert(s) muted",
        data={
            "action": "create",
            "silence_id": silence_id,
            "matchers": expressions,
            "ends_at": body["endsAt"],
            "silenced": firing[:_SHOWN_ALERTS],
            "silenced_count": len(firing),
        },
        evidence=[f"POST /api/v2/silences -> {silence_id} ({', '.join(expressions)})"],
    )
