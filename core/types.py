"""Shared contracts: task and node states, plans, tool results, events."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TaskStatus(StrEnum):
    QUEUED = "queued"
    PLANNING = "planning"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class NodeStatus(StrEnum):
    PENDING = "pending"  # row written, message not yet handed to the broker
    QUEUED = "queued"  # message on the pool's queue
    RUNNING = "running"  # a worker started it
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"  # its worker vanished; a new attempt replaces it
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a dependency failed and on_failure said stop

    @property
    def final(self) -> bool:
        return self in (
            NodeStatus.SUCCEEDED,
            NodeStatus.FAILED,
            NodeStatus.LOST,
            NodeStatus.CANCELLED,
            NodeStatus.SKIPPED,
        )


class ToolStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"
    NO_DATA = "no_data"
    APPROVAL_REQUIRED = "approval_required"


class Effect(StrEnum):
    READ = "read"
    WRITE = "write"


class OnFailure(StrEnum):
    CONTINUE = "continue"  # dependents still run; the answer reports the failure
    STOP = "stop"  # dependents are skipped


class ToolResult(BaseModel):
    """What every tool returns: a status, structured data, one-line summary and evidence lines."""

    status: ToolStatus
    summary: str
    data: dict[str, Any] = Field(default_factory=dict)
    evidence: list[str] = Field(default_factory=list)


class PlanNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    pool: str | None = None  # None: the tool's own pool
    on_failure: OnFailure = OnFailure.CONTINUE


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goal: str
    category: str = "triage"
    source: str = "playbook"  # playbook | llm | cache
    playbook: str | None = None
    nodes: list[PlanNode]


class EventType(StrEnum):
    TASK_CREATED = "task.created"
    TASK_STATUS = "task.status"
    PLAN_READY = "plan.ready"
    PLAN_REJECTED = "plan.rejected"
    NODE_QUEUED = "node.queued"
    NODE_STARTED = "node.started"
    NODE_FINISHED = "node.finished"
    NODE_LOST = "node.lost"
    NODE_SKIPPED = "node.skipped"
    ANSWER = "task.answer"
    CACHE_LOOKUP = "cache.lookup"
    CACHE_STORED = "cache.stored"
    LOG = "log"


class Event(BaseModel):
    task_id: str
    seq: int
    ts: float
    type: str
    data: dict[str, Any] = Field(default_factory=dict)
