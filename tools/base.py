"""The tool contract: a ToolSpec (what it is, where it runs, what it may touch) and a Toolset that holds them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, ValidationError

from core.settings import Settings
from core.types import Effect, ToolResult, ToolStatus


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown keys are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class ToolContext:
    """What a running tool may use. Built by the worker; tools never read globals or the environment."""

    settings: Settings
    is_cancelled: Callable[[], bool] = lambda: False
    _redis: redis.Redis | None = None
    worker: str = ""  # the Celery worker's hostname (evidence of where a call ran)

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.settings.redis_url, socket_timeout=5)
        return self._redis


ToolFn = Callable[[Any, ToolContext], ToolResult]
BatchFn = Callable[[list[Any], ToolContext], list[ToolResult]]
Prerequisite = Callable[[Settings], str | None]  # returns why the tool cannot run, or None
PreviewFn = Callable[[Any, ToolContext], ToolResult]  # what a write would do to the current state, doing nothing


@dataclass
class ToolSpec:
    name: str
    description: str
    args_model: type[ToolArgs]
    fn: ToolFn
    pool: str = "cpu"
    effect: Effect = Effect.READ
    idempotent: bool = True
    timeout_s: float = 30.0
    cost_hint_s: float = 1.0  # expected run time before telemetry says otherwise
    prerequisites: list[Prerequisite] = field(default_factory=list)
    cpu_fallback: bool = True  # a gpu tool that also runs (slower) on a cpu pool
    batch_fn: BatchFn | None = None  # calls that arrive together may run as one batch
    cost_fn: Callable[[Any], float | None] | None = None  # a call's expected seconds from its arguments
    # write tools: the state the write would change, read without changing it; its data may hold `pin`, arguments
    # the approval adds so the write refuses a target that changed after the person looked at it
    preview_fn: PreviewFn | None = None

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """What this call would do, for a person to approve: a summary and the current state it would change.
        Reads only; a tool without a preview says so (status no_data)."""
        try:
            parsed = self.parse_args(args)
        except ValidationError as exc:
            return ToolResult(status=ToolStatus.ERROR, summary=f"{self.name}: invalid arguments: {exc}")
        if self.preview_fn is None:
            return ToolResult(status=ToolStatus.NO_DATA, summary=f"{self.name} has no preview")
        return self.preview_fn(parsed, ctx)

    def estimate(self, args: dict[str, Any]) -> float | None:
        """What this call should take, when its arguments say (a sampling window); else None, and the
        scheduler's learnt estimate for the tool stands."""
        if self.cost_fn is None:
            return None
        try:
            value = self.cost_fn(self.parse_args(args))
        except (ValidationError, TypeError, ValueError):
            return None
        return None if value is None else max(0.0, float(value))

    @property
    def batchable(self) -> bool:
        return self.batch_fn is not None

    def run_batch(self, args: list[dict[str, Any]], ctx: ToolContext) -> list[ToolResult]:
        """Several calls in one go; a call with invalid arguments fails alone."""
        parsed: list[Any] = []
        results: list[ToolResult | None] = []
        for a in args:
            try:
                parsed.append(self.parse_args(a))
                results.append(None)
            except ValidationError as exc:
                results.append(ToolResult(status=ToolStatus.ERROR, summary=f"{self.name}: invalid arguments: {exc}"))
        ran = iter(self.batch_fn(parsed, ctx) if self.batch_fn and parsed else [self.fn(p, ctx) for p in parsed])
        return [r if r is not None else next(ran) for r in results]

    def check_prerequisites(self, settings: Settings) -> str | None:
        for check in self.prerequisites:
            try:
                reason = check(settings)
            except Exception as exc:  # a broken check must not hide the tool's reason
                reason = f"prerequisite check failed: {exc}"
            if reason:
                return reason
        return None

    def parse_args(self, args: dict[str, Any]) -> ToolArgs:
        return self.args_model.model_validate(args)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            parsed = self.parse_args(args)
        except ValidationError as exc:
            return ToolResult(status=ToolStatus.ERROR, summary=f"{self.name}: invalid arguments: {exc}")
        return self.fn(parsed, ctx)

    def describe(self, settings: Settings | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "pool": self.pool,
            "effect": self.effect.value,
            "idempotent": self.idempotent,
            "timeout_s": self.timeout_s,
            "cost_hint_s": self.cost_hint_s,
            "batchable": self.batchable,
            "has_preview": self.preview_fn is not None,
            "args_schema": self.args_model.model_json_schema(),
        }
        if settings is not None:
            reason = self.check_prerequisites(settings)
            out["available"] = reason is None
            out["unavailable_reason"] = reason
        return out


class Toolset:
    """A named collection of tools, filled by the @toolset.tool decorator."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def tool(
        self,
        *,
        args: type[ToolArgs],
        pool: str = "cpu",
        effect: Effect = Effect.READ,
        idempotent: bool = True,
        timeout_s: float = 30.0,
        cost_hint_s: float = 1.0,
        prerequisites: list[Prerequisite] | None = None,
        name: str | None = None,
        cpu_fallback: bool = True,
        batch_fn: BatchFn | None = None,
        cost_fn: Callable[[Any], float | None] | None = None,
        preview_fn: PreviewFn | None = None,
    ) -> Callable[[ToolFn], ToolFn]:
        def register(fn: ToolFn) -> ToolFn:
            spec = ToolSpec(
                name=name or fn.__name__,
                description=(fn.__doc__ or "").strip().split("\n\n")[0].replace("\n", " "),
                args_model=args,
                fn=fn,
                pool=pool,
                effect=effect,
                idempotent=idempotent,
                timeout_s=timeout_s,
                cost_hint_s=cost_hint_s,
                prerequisites=prerequisites or [],
                cpu_fallback=cpu_fallback,
                batch_fn=batch_fn,
                cost_fn=cost_fn,
                preview_fn=preview_fn,
            )
            if spec.name in self._tools:
                raise ValueError(f"tool {spec.name!r} registered twice")
            self._tools[spec.name] = spec
            return fn

        return register

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(self._tools.values(), key=lambda t: t.name))

    def names(self) -> list[str]:
        return sorted(self._tools)


def finding(severity: str, message: str) -> dict[str, str]:
    """One thing a tool noticed: severity ok | warn | critical."""
    return {"severity": severity, "message": message}
