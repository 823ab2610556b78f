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
    READY = "ready"  # dependencies ended; the orchestrator holds it until policy releases it
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
    transient: bool = False  # an error that may pass (a timeout, a refused connection): worth a retry
    plan_changes: PlanChanges | None = None  # what this result adds to or cancels in the task's plan


class PlanChanges(BaseModel):
    """A node's result may grow its DAG (a high error rate adds a log search) or cancel nodes not yet run."""

    model_config = ConfigDict(extra="forbid")

    add: list[dict[str, Any]] = Field(default_factory=list, max_length=16)  # plan nodes; ids get a prefix
    cancel: list[str] = Field(default_factory=list, max_length=64)
    reason: str = ""


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
    applied: list[str] = Field(default_factory=list)  # attempts whose plan_changes this plan already holds


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
    NODE_READY = "node.ready"
    NODE_RETRY = "node.retry"
    NODE_HEDGED = "node.hedged"
    PLAN_CHANGED = "plan.changed"
    ANSWER = "task.answer"
    CACHE_LOOKUP = "cache.lookup"
    CACHE_STORED = "cache.stored"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_DECIDED = "approval.decided"  # approved, rejected or expired
    REMEDIATION_VERIFIED = "remediation.verified"
    LOG = "log"


class Event(BaseModel):
    task_id: str
    seq: int
    ts: float
    type: str
    data: dict[str, Any] = Field(default_factory=dict)
