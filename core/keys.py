"""Every Redis key and channel opsgraph uses, named once (arq's habit). Nothing here is the only copy."""

PREFIX = "opsgraph"
WORKER_HEARTBEAT = f"{PREFIX}:worker:"  # + worker hostname -> JSON {pool, queues, pid, ts}; expires
TASK_CHANNEL = f"{PREFIX}:task:"  # + task id; pub/sub wake-ups carrying the newest event seq
TASKS_CHANNEL = f"{PREFIX}:tasks"  # a task was created or needs the orchestrator's attention
CANCEL_FLAG = f"{PREFIX}:cancel:"  # + task id; workers check it cooperatively
CANCEL_RUN = f"{PREFIX}:cancel-run:"  # + attempt id; a hedge's loser (or one attempt) stops cooperatively
BEAT_LOCK = f"{PREFIX}:beat:leader"  # token of the scheduler that fires; expires when it stops renewing
DUPLICATE_SLOTS = f"{PREFIX}:beat:duplicate-slots"  # count of firings refused because their slot had fired
RATE_LIMIT_PREFIX = f"{PREFIX}:ratelimit"  # the `limits` library's counters, per caller key and class
EVENT_STREAMS = f"{PREFIX}:streams:"  # + caller key; sorted set of open SSE streams scored by last refresh
MEMORY_REEMBEDDED = f"{PREFIX}:memory:reembedded_at"  # memory_reembed finished: API indexes reload


def worker_key(hostname: str) -> str:
    return WORKER_HEARTBEAT + hostname


def task_channel(task_id: str) -> str:
    return TASK_CHANNEL + task_id
