"""Anomalies in a metric series with torch: robust z-scores against a rolling median. CUDA when present."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import psutil
from pydantic import Field, model_validator

from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding
from tools.host import cpu_percent_without, opsgraph_pids, read_cpu_counters


def _cpu_sampler() -> Callable[[], float]:
    """CPU busy % since the previous call, opsgraph's own processes taken out (as host_metrics does)."""
    own = []
    for pid in opsgraph_pids():
        with contextlib.suppress(psutil.Error):
            own.append(psutil.Process(pid))
    last = [read_cpu_counters(own)]

    def sample() -> float:
        now = read_cpu_counters(own)
        value = cpu_percent_without(last[0], now)
        last[0] = now
        return value

    return sample


_SAMPLERS: dict[str, Callable[[], Callable[[], float]]] = {
    "cpu": _cpu_sampler,
    "memory": lambda: lambda: psutil.virtual_memory().percent,
    "load": lambda: lambda: psutil.getloadavg()[0],
}


class MetricAnomaliesArgs(ToolArgs):
    series: list[float] | None = Field(None, max_length=100_000, description="Values to scan, oldest first.")
    metric: str | None = Field(None, pattern="^(cpu|memory|load)$", description="Sample this host metric instead.")
    seconds: float = Field(5.0, gt=0, le=120, description="How long to sample `metric`.")
    window: int = Field(20, ge=3, le=10_000, description="Rolling window for the baseline.")
    threshold: float = Field(3.5, gt=0, le=100, description="Robust z-score above which a point is anomalous.")
    min_delta: float = Field(0.0, ge=0, description="Smallest distance from the baseline worth reporting.")

    @model_validator(mode="after")
    def _one_source(self) -> MetricAnomaliesArgs:
        if (self.series is None) == (self.metric is None):
            raise ValueError("give exactly one of series or metric")
        return self


def device_name() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def robust_scores(values: list[float], window: int, device: str) -> tuple[list[float], list[float]]:
    """(|x - rolling median| / (1.4826 * rolling MAD), |x - rolling median|), as one batched tensor operation."""
    import torch

    x = torch.tensor(values, dtype=torch.float32, device=device)
    n = x.numel()
    w = min(window, n)
    # reflect the series at its start, so the first points compare against real neighbours, not copies of
    # the first point (which made a high first sample turn every normal point after it into an "anomaly")
    padded = torch.cat([x[1:w].flip(0), x])
    windows = padded.unfold(0, w, 1)  # (n, w): each point's trailing window
    med = windows.median(dim=1).values
    mad = (windows - med[:, None]).abs().median(dim=1).values
    global_mad = (x - x.median()).abs().median()
    # without a floor, a flat series makes every wiggle "anomalous": deviations under 5% of the series'
    # largest magnitude are noise, whatever its MAD says
    floor = torch.clamp(torch.maximum(global_mad, 0.05 * x.abs().max()), min=1e-6)
    scale = 1.4826 * torch.maximum(mad, floor)
    dev = (x - med).abs()
    return (dev / scale).cpu().tolist(), dev.cpu().tolist()


@CATALOG.tool(
    args=MetricAnomaliesArgs,
    pool="gpu",
    timeout_s=150,
    cost_hint_s=1.5,
    cost_fn=lambda a: a.seconds + 0.5 if a.metric else None,  # sampling dominates; a given series: learnt
)
def metric_anomalies(args: MetricAnomaliesArgs, ctx: ToolContext) -> ToolResult:
    """Find anomalous points in a metric series (given, or sampled live from this host) with torch; CUDA if present."""
    series = args.series
    source = "given series"
    if series is None:
        sampler = _SAMPLERS[args.metric or "cpu"]()
        series = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end and not ctx.is_cancelled():
            time.sleep(0.5)  # shorter CPU samples on few cores are quantisation noise (0/50/100%)
            series.append(float(sampler()))
        source = f"{args.metric} sampled for {args.seconds:g}s"
    if len(series) < 3:
        return ToolResult(status=ToolStatus.NO_DATA, summary=f"too few points ({len(series)}) in {source}")
    device = device_name()
    scores, deviations = robust_scores(series, args.window, device)
    anomalies = [
        {"index": i, "value": series[i], "score": round(s, 2)}
        for i, (s, d) in enumerate(zip(scores, deviations, strict=True))
        if s > args.threshold and d >= args.min_delta
    ]
    mean = sum(series) / len(series)
    summary = (
        f"{len(anomalies)} anomalous point(s) in {len(series)} ({source}), mean {mean:.1f}, "
        f"max {max(series):.1f}, on {device}"
    )
    sev = "ok" if not anomalies else ("warn" if len(anomalies) <= max(2, len(series) // 10) else "critical")
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "points": len(series),
            "mean": mean,
            "max": max(series),
            "min": min(series),
            "anomalies": anomalies[:100],
            "device": device,
            "findings": [finding(sev, summary)],
        },
        evidence=[f"point {a['index']}: {a['value']:.2f} (score {a['score']})" for a in anomalies[:5]],
    )
