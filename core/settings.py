"""One typed settings object. Nothing else in opsgraph reads os.environ."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.policy import CachePolicy, SchedulingPolicy


class Settings(BaseSettings):
    """Every knob of the service, read from OPSGRAPH_* variables (or a .env file)."""

    model_config = SettingsConfigDict(env_prefix="OPSGRAPH_", env_file=".env", extra="ignore")

    # where state lives
    var_dir: Path = Field(Path("var"), description="Folder for the SQLite database, checkpoints and logs.")
    database_url: str = Field("", description="SQLAlchemy URL; empty means SQLite at VAR_DIR/opsgraph.db.")
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Celery broker, results and live events.")

    # API
    api_host: str = Field("127.0.0.1", description="Address the API listens on.")
    api_port: int = Field(8000, description="Port the API listens on.")
    api_url: str = Field("", description="Base URL the CLI talks to; empty means http://API_HOST:API_PORT.")
    max_body_bytes: int = Field(64 * 1024, description="Largest request body the API accepts.")
    max_bundle_bytes: int = Field(
        50 * 1024 * 1024,
        description="Largest evidence bundle (POST /v1/investigations) or Alertmanager notification accepted.",
    )
    max_running_tasks: int = Field(8, description="Tasks the API orchestrates at once; more wait queued.")

    # who may call (docs/security.md)
    api_key: SecretStr | None = Field(
        None, description="Key the CLI sends; unset means VAR_DIR/cli.key, then VAR_DIR/admin.key (first run)."
    )
    allowed_hosts: list[str] = Field(
        [],
        description="Host header values the API answers (DNS rebinding defence); empty means the loopback names, "
        "API_HOST and the host of API_URL. '*' allows any (behind a proxy that checks Host itself).",
    )
    metrics_open: bool = Field(False, description="Serve /metrics without a credential (a scraper on a private net).")
    oidc_issuer: str = Field("", description="OIDC issuer (the token's iss); empty turns OIDC bearer tokens off.")
    oidc_audience: str = Field("", description="Audience (aud) the tokens must name.")
    oidc_jwks_url: str = Field("", description="JWKS URL of the issuer's signing keys.")
    oidc_tenant_claim: str = Field("tenant", description="Claim holding the caller's tenant.")
    oidc_scopes_claim: str = Field("scope", description="Claim holding scopes (a space-separated string or a list).")
    oidc_algorithms: list[str] = Field(["RS256", "ES256"], description="Signature algorithms accepted.")
    oidc_leeway_s: float = Field(30, ge=0, le=300, description="Clock skew allowed on exp/nbf/iat.")

    # limits (docs/limits-and-metrics.md): per key, shared by API processes through Redis
    rate_limit_enabled: bool = Field(True, description="Refuse requests over the per-key rate limits (429).")
    rate_limit_reads: str = Field(
        "600/minute",
        description="Cheap reads (GET, HEAD) one key may make, in `limits` notation: N/second|minute|hour.",
    )
    rate_limit_writes: str = Field(
        "60/minute", description="Writes and submits (POST, PUT, PATCH, DELETE) one key may make."
    )
    rate_limit_storage: str = Field(
        "redis", description="Where the limiter counts: 'redis' (REDIS_URL, shared by every API process) or 'memory'."
    )
    max_schedules_per_tenant: int = Field(100, ge=1, description="Schedules one tenant may keep (409 beyond).")
    max_queued_tuning_runs: int = Field(3, ge=1, description="Tuning runs waiting at once (429 beyond).")
    max_event_streams_per_key: int = Field(
        8, ge=1, description="Event streams (SSE) one key may hold open (429 beyond)."
    )
    telemetry_summary_max_window_s: float = Field(
        7 * 86_400, gt=0, description="Longest window GET /v1/telemetry/summary reads."
    )
    telemetry_summary_max_rows: int = Field(
        200_000, ge=1000, description="Raw telemetry rows one summary reads at most (older ones come from rollups)."
    )

    # pools
    pools: list[str] = Field(["cpu", "gpu"], description="Declared pools; each is a Celery queue of that name.")
    cpu_concurrency: int = Field(2, description="Processes of a cpu-pool worker (prefork).")
    gpu_concurrency: int = Field(1, description="Threads of a gpu-pool worker (never forks after CUDA).")
    worker_heartbeat_s: float = Field(2.0, description="How often a worker says it is alive.")
    worker_lost_after_s: float = Field(8.0, description="A worker silent this long is dead; its nodes re-run.")
    max_node_starts: int = Field(3, description="Starts of one node without a result before it fails as poison.")
    visibility_timeout_s: int = Field(3600, description="Redis visibility timeout; above any tool's hard timeout.")

    # planning
    llm_base_url: str = Field("", description="OpenAI-compatible endpoint; empty means the offline planner.")
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the endpoint.")
    llm_api_key: SecretStr | None = Field(None, description="Key for the endpoint (never logged).")
    llm_timeout_s: float = Field(30.0, description="Timeout of one LLM call.")
    max_plan_nodes: int = Field(24, description="Largest plan accepted.")
    max_arg_bytes: int = Field(8 * 1024, description="Largest JSON size of one node's arguments.")

    # tools: what they may touch
    log_roots: list[Path] = Field([Path("/var/log")], description="Folders log_search may read.")
    http_targets: list[str] = Field(
        ["127.0.0.1", "localhost", "::1"],
        description="What http_probe may call: host names, IPs, CIDRs, each optionally with :port ('*' allows any "
        "address but link-local and cloud metadata ones, which need an explicit IP or CIDR entry).",
    )
    http_max_body_bytes: int = Field(1 << 20, ge=0, description="Most response bytes http_probe reads.")
    postgres_dsns: list[SecretStr] = Field([], description="DSNs postgres_activity may use.")
    tool_modules: list[str] = Field(
        ["memory.tools"], description="Python modules that register more tools in the catalog."
    )

    # remediation: write tools (each runs only after a person's approval; an empty allowlist or target
    # leaves its tool unavailable, and the tool's prerequisite says which setting to fill in)
    redis_write_urls: list[SecretStr] = Field(
        [], description="Redis servers redis_config_set and redis_delete_keys may change (never opsgraph's own)."
    )
    redis_config_allowlist: list[str] = Field(
        ["maxmemory", "maxmemory-policy", "timeout", "slowlog-log-slower-than"],
        description="Redis parameters redis_config_set may change.",
    )
    redis_delete_max_keys: int = Field(1000, ge=1, le=1_000_000, description="redis_delete_keys refuses more matches.")
    process_signal_allowlist: list[str] = Field(
        [], description="Regexes; process_signal signals only processes whose whole command line matches one."
    )
    runbooks_dir: Path | None = Field(None, description="Folder of executables run_runbook may run; None: none.")
    runbook_arg_patterns: dict[str, list[str]] = Field(
        {}, description="Per runbook (file name): one regex per positional argument; others use the safe charset."
    )
    runbook_timeout_s: float = Field(120, gt=0, le=840, description="A runbook running longer is killed.")
    runbook_output_bytes: int = Field(16 * 1024, ge=256, description="Runbook output kept (the tail beyond is cut).")
    alertmanager_url: str = Field("", description="Alertmanager base URL alertmanager_silence uses; empty: none.")
    alertmanager_max_silence_s: float = Field(7 * 86400, gt=0, description="Longest silence alertmanager_silence sets.")
    approval_ttl_s: float = Field(3600, gt=0, description="An approval request not decided in this time expires.")
    approval_four_eyes: bool = Field(False, description="Nobody may approve a request they made themselves.")

    scheduling_policy: SchedulingPolicy = Field(
        default_factory=SchedulingPolicy,
        description="Placement, release order, caps, timeouts, retries, hedging, batching (JSON).",
    )

    # scheduler (celery beat)
    schedules: list[dict[str, Any]] = Field(
        [{"name": "nightly-capacity-report", "cron": "0 2 * * *", "goal": "nightly capacity report"}],
        description="Recurring tasks: name, cron (5 fields, UTC), goal, optional inputs.",
    )

    # memory
    cache_enabled: bool = Field(True, description="Serve repeated requests from the semantic cache.")
    cache_policy: CachePolicy = Field(
        default_factory=CachePolicy, description="Per-category cache thresholds, TTLs and quotas (JSON)."
    )

    working_memory_tokens: int = Field(2000, ge=100, description="Budget of a task's compressed tool outputs.")
    consolidate_every_s: float = Field(600, gt=0, description="How often memory is consolidated (expiry, merges).")

    # telemetry and policies
    telemetry_raw_retention_s: float = Field(
        86_400, gt=0, description="Raw telemetry older than this is rolled up into per-minute aggregates."
    )
    telemetry_rollup_retention_s: float = Field(30 * 86_400, gt=0, description="Per-minute aggregates kept this long.")
    telemetry_rollup_every_s: float = Field(60, gt=0, description="How often the API rolls up old telemetry.")
    policy_refresh_s: float = Field(2.0, gt=0, description="How often readers look for a new policy version.")

    # the tuning agent
    tuning_enabled: bool = Field(True, description="Run the tuning agent on a schedule (celery beat).")
    tuning_interval_s: float = Field(3600, ge=1, description="Seconds between scheduled tuning runs.")
    tuning_window_s: float = Field(3600, gt=0, description="Telemetry window one tuning run observes.")
    tuner_knobs: list[str] = Field(
        ["release_order", "hedging", "placement", "cache"],
        description="Knob groups the tuner may change: release_order, hedging, placement, cache.",
    )
    tuner_max_step: float = Field(
        1.0,
        gt=0,
        le=10,
        description="Largest move of one numeric knob in one round: x or / (1 + step) (1.0: doubles or halves).",
    )
    tuner_max_answer_ttl_s: float = Field(
        900, ge=0, description="The tuner never keeps cached answers longer than this (freshness before speed)."
    )
    tuner_trials: int = Field(12, ge=1, le=200, description="Optuna trials per round, each one simulation.")
    tuner_seeds: int = Field(5, ge=2, le=50, description="Simulations per verified candidate (the noise estimate).")
    tuner_rollback_tolerance: float = Field(
        0.15, ge=0, le=10, description="Live p95 worse than the prediction by more than this share rolls back."
    )

    log_level: str = Field("INFO", description="Log level of every process.")
    log_json: bool = Field(False, description="JSON logs instead of console lines.")

    @field_validator("pools")
    @classmethod
    def _pools_have_cpu(cls, pools: list[str]) -> list[str]:
        if "cpu" not in pools:
            raise ValueError("pools must include 'cpu' (the fallback for every tool)")
        return pools

    @field_validator("rate_limit_reads", "rate_limit_writes")
    @classmethod
    def _rate_limit_parses(cls, value: str) -> str:
        from limits import parse_many

        try:
            parse_many(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a rate limit such as '600/minute' or '10/second;300/hour'") from None
        return value

    @field_validator("rate_limit_storage")
    @classmethod
    def _known_storage(cls, value: str) -> str:
        if value not in ("redis", "memory"):
            raise ValueError("rate_limit_storage must be 'redis' or 'memory'")
        return value

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            url = self.database_url
            # one driver for every PostgreSQL path: psycopg 3
            for prefix in ("postgresql://", "postgres://"):
                if url.startswith(prefix):
                    return "postgresql+psycopg://" + url[len(prefix) :]
            return url
        return f"sqlite:///{(self.var_dir / 'opsgraph.db').resolve()}"

    @property
    def is_postgres(self) -> bool:
        return self.sqlalchemy_url.startswith("postgresql")

    @property
    def checkpoint_dsn(self) -> str:
        """The LangGraph checkpointer's connection: a libpq DSN or a SQLite file path."""
        if self.is_postgres:
            return self.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
        return str((self.var_dir / "checkpoints.sqlite").resolve())

    @property
    def metrics_dir(self) -> Path:
        """prometheus_client's multiprocess files: every opsgraph process's counters, summed at scrape."""
        return (self.var_dir / "prometheus").resolve()

    @property
    def base_api_url(self) -> str:
        return self.api_url or f"http://{self.api_host}:{self.api_port}"

    @property
    def admin_key_file(self) -> Path:
        """The first-run admin key (mode 0600), printed in the console URL at every start."""
        return self.var_dir / "admin.key"

    @property
    def cli_key_file(self) -> Path:
        """The key `opsgraph login` keeps for the CLI (mode 0600)."""
        return self.var_dir / "cli.key"

    @property
    def host_allowlist(self) -> set[str]:
        if self.allowed_hosts:
            return set(self.allowed_hosts)
        hosts = {"127.0.0.1", "localhost", "::1", self.api_host}
        if self.api_url:  # the address the CLI and the console URL use
            hosts.add(urlsplit(self.api_url).hostname or "")
        return hosts - {""}

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_issuer and self.oidc_jwks_url and self.oidc_audience)

    def ensure_dirs(self) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings. Entry points call this once and pass the object down."""
    return Settings()


def subprocess_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for a child process of opsgraph: the parent's, with these settings made explicit."""
    env = dict(os.environ)
    env["OPSGRAPH_VAR_DIR"] = str(settings.var_dir)
    env["OPSGRAPH_REDIS_URL"] = settings.redis_url
    if settings.database_url:
        env["OPSGRAPH_DATABASE_URL"] = settings.database_url
    env.update(extra)
    return env
