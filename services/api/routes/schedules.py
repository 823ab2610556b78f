"""Users' recurring tasks: a cron expression in a timezone and a task body; each run is a normal task."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from core.errors import Conflict
from core.jobs import ScheduleBook, check_timezone, parse_cron, schedule_view
from services.api.deps import Admin, Ctx, Tenant, audit, tenant_for
from services.api.errors import error_responses
from services.api.routes.tasks import TaskCreate

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])
Name = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class ScheduledTask(TaskCreate):
    plan: None = Field(None, description="Scheduled tasks are planned when they run.")


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented: no true for 1

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    cron: str = Field(min_length=9, max_length=128, description="minute hour day-of-month month day-of-week")
    timezone: str = Field("UTC", max_length=64, description="IANA name the cron fields are read in.")
    task: ScheduledTask


def _settings_entries(ctx: Ctx, tenant: str) -> list[dict[str, Any]]:
    if tenant != "default":  # schedules from the settings run for the default tenant
        return []
    return [
        {"name": e.get("name"), "tenant": "default", "cron": e.get("cron"), "timezone": "UTC",
         "task": {"goal": e.get("goal"), "inputs": e.get("inputs") or {}}, "paused": False, "source": "settings"}
        for e in ctx.settings.schedules
    ]  # fmt: skip


@router.post("", status_code=201, responses=error_responses(409))
def create_schedule(ctx: Ctx, body: ScheduleCreate, principal: Admin, acting: Tenant, request: Request) -> JSONResponse:
    """Validated at once: the cron fields (Celery's parser), the timezone, the task body. The scheduler picks a
    new schedule up within seconds. Its tasks run for the tenant the request acts for. 409 `conflict` for a
    taken name, 409 `schedule_limit` over the tenant's cap."""
    tenant = tenant_for(principal, body.task.tenant) if body.task.tenant else acting
    task = body.task.model_dump(exclude={"plan", "tenant"})
    parse_cron(body.cron)  # a wrong body is 422 whatever the count
    check_timezone(body.timezone)
    book = ScheduleBook(ctx.store)
    cap = ctx.settings.max_schedules_per_tenant
    if book.count(tenant=tenant) >= cap:
        raise Conflict(f"{cap} schedules exist, the most allowed; delete one first", code="schedule_limit")
    row = book.create(body.name, body.cron, body.timezone, task, tenant=tenant)
    audit(request, principal, "schedule.create", tenant=tenant, target=body.name,
          details={"cron": body.cron, "timezone": body.timezone, "goal": body.task.goal})  # fmt: skip
    return JSONResponse({**schedule_view(row), "source": "api"}, status_code=201)


@router.get("")
def list_schedules(ctx: Ctx, _: Admin, tenant: Tenant) -> dict[str, Any]:
    mine = [{**schedule_view(r), "source": "api"} for r in ScheduleBook(ctx.store).all(tenant=tenant)]
    return {"schedules": [*_settings_entries(ctx, tenant), *mine]}


@router.get("/{name}")
def get_schedule(ctx: Ctx, name: Name, _: Admin, tenant: Tenant) -> dict[str, Any]:
    book = ScheduleBook(ctx.store)
    row = book.get(name, tenant=tenant)
    runs = [{"slot": r.slot, "task_id": r.ref, "fired_at": r.fired_at} for r in book.runs(name, 20)]
    return {**schedule_view(row), "source": "api", "runs": runs}


@router.post("/{name}/pause")
def pause_schedule(ctx: Ctx, name: Name, principal: Admin, tenant: Tenant, request: Request) -> dict[str, Any]:
    row = ScheduleBook(ctx.store).set_paused(name, True, tenant=tenant)
    audit(request, principal, "schedule.pause", tenant=tenant, target=name)
    return schedule_view(row)


@router.post("/{name}/resume")
def resume_schedule(ctx: Ctx, name: Name, principal: Admin, tenant: Tenant, request: Request) -> dict[str, Any]:
    row = ScheduleBook(ctx.store).set_paused(name, False, tenant=tenant)
    audit(request, principal, "schedule.resume", tenant=tenant, target=name)
    return schedule_view(row)


@router.delete("/{name}", status_code=204)
def delete_schedule(ctx: Ctx, name: Name, principal: Admin, tenant: Tenant, request: Request) -> None:
    ScheduleBook(ctx.store).delete(name, tenant=tenant)
    audit(request, principal, "schedule.delete", tenant=tenant, target=name)
