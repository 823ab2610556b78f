"""Pure numeric helpers on metric points (`[[ts, value], ...]`, sorted by ts): the arithmetic analyzers share.

Everything here is robust statistics on small series (a bundle's metric is tens to a few thousand points):
median and MAD instead of mean and standard deviation, so one spike does not move the baseline it is judged
against. No numpy: the series are short and the analyzers must start in well under a second.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

Point = tuple[float, float]

# 1.4826 * MAD estimates the standard deviation of normally distributed data; robust z-scores use it.
MAD_TO_SIGMA = 1.4826
# longest series the O(n^2) helpers (step search) look at; longer ones are bucketed by median first
MAX_POINTS = 120


def points_of(raw: Sequence[Sequence[float]] | None) -> list[Point]:
    """Clean points: numeric, finite, sorted by ts (NaN and None dropped: CloudWatch and Prometheus both emit them)."""
    out: list[Point] = []
    for p in raw or ():
        try:
            ts, v = float(p[0]), float(p[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(ts) and math.isfinite(v):
            out.append((ts, v))
    out.sort(key=lambda p: p[0])
    return out


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of an empty series")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def thirds(values: Sequence[float]) -> tuple[float, float]:
    """The median of a series' first third and of its last third: where it started and where it ended up."""
    third = max(1, len(values) // 3)
    return median(values[:third]), median(values[-third:])


def mad(xs: Sequence[float], center: float | None = None) -> float:
    """Median absolute deviation from `center` (the median by default)."""
    c = median(xs) if center is None else center
    return median([abs(x - c) for x in xs])


@dataclass(frozen=True)
class Baseline:
    median: float
    mad: float
    scale: float  # the noise level a robust z-score divides by (never 0)

    def z(self, x: float) -> float:
        return (x - self.median) / self.scale


def robust_baseline(values: Sequence[float], floor_fraction: float = 0.05) -> Baseline:
    """Median and MAD of `values`. The scale has a floor (5% of the series' magnitude): on a flat series every
    wiggle would otherwise be "anomalous"."""
    med = median(values)
    m = mad(values, med)
    magnitude = max((abs(v) for v in values), default=0.0)
    scale = MAD_TO_SIGMA * max(m, floor_fraction * magnitude, 1e-9)
    return Baseline(med, m, scale)


def _lower_median(xs: Sequence[float]) -> float:
    """torch.median's median: the lower middle value of an even count."""
    s = sorted(xs)
    return s[(len(s) - 1) // 2]


def robust_scores(values: Sequence[float], window: int = 20) -> list[float]:
    """|x - rolling median| / (1.4826 * rolling MAD), each point against its trailing window.

    The same algorithm as the metric_anomalies tool (tools/anomalies.py, batched there in torch, whose median of
    an even count is the lower middle value, as here): the start of the series is reflected, so the first
    points are compared with real neighbours rather than copies of themselves, and the scale has a floor of 5%
    of the series' largest magnitude (or its global MAD).
    """
    n = len(values)
    if n == 0:
        return []
    w = min(window, n)
    padded = list(reversed(values[1:w])) + list(values)
    gmed = _lower_median(values)
    global_mad = _lower_median([abs(v - gmed) for v in values])
    floor = max(global_mad, 0.05 * max(abs(v) for v in values), 1e-6)
    out = []
    for i in range(n):
        win = padded[i : i + w]
        med = _lower_median(win)
        scale = MAD_TO_SIGMA * max(_lower_median([abs(x - med) for x in win]), floor)
        out.append(abs(values[i] - med) / scale)
    return out


def warmup_points(n: int) -> int:
    """How many leading points are sampling warm-up and never judged: the first point of a series (a counter's
    first delta, psutil's first cpu_percent) and, on longer series, up to 3 more."""
    return 1 if n < 10 else min(4, 1 + n // 20)


@dataclass(frozen=True)
class Anomaly:
    index: int
    ts: float
    value: float
    score: float


def anomalies(points: Sequence[Point], threshold: float = 3.5, window: int = 20) -> list[Anomaly]:
    """Points whose robust z-score exceeds `threshold`, the warm-up excluded."""
    if len(points) < 5:
        return []
    values = [v for _, v in points]
    scores = robust_scores(values, window)
    skip = warmup_points(len(points))
    return [
        Anomaly(i, points[i][0], values[i], round(scores[i], 2))
        for i in range(skip, len(points))
        if scores[i] > threshold
    ]


@dataclass(frozen=True)
class StepChange:
    ts: float  # the first point of the new level
    index: int
    before: float  # median before
    after: float  # median after
    z: float  # |after - before| in units of the segments' pooled robust noise

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf


def bucket(points: Sequence[Point], max_points: int = MAX_POINTS) -> list[Point]:
    """At most `max_points` points: consecutive buckets replaced by (last ts, median value)."""
    if len(points) <= max_points:
        return list(points)
    size = math.ceil(len(points) / max_points)
    return [
        (points[min(i + size, len(points)) - 1][0], median([v for _, v in points[i : i + size]]))
        for i in range(0, len(points), size)
    ]


def step_change(
    points: Sequence[Point], min_segment: int = 3, min_z: float = 6.0, min_relative: float = 0.5
) -> StepChange | None:
    """The strongest level shift that lasts to the end of the series, or None.

    Every split leaving `min_segment` points on each side is tried; a split counts when the medians differ by
    `min_z` times the pooled noise (MAD of both segments around their own medians) and by `min_relative` of
    the old level (a 2% shift on a quiet series is not an incident). The new level must hold: at most a fifth
    of the points after the split may be back within the old level's noise, so a spike that recovered is not
    a step.
    """
    pts = bucket(points)
    n = len(pts)
    if n < 2 * min_segment:
        return None
    values = [v for _, v in pts]
    magnitude = max(abs(v) for v in values) or 1.0
    # the split that best explains the series as two flat levels (least squares, from prefix sums: O(n)), then
    # whether that shift is large, lasting and beyond the noise, judged robustly (medians and MADs)
    prefix, prefix_sq = [0.0], [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
        prefix_sq.append(prefix_sq[-1] + v * v)

    def sse(i: int, j: int) -> float:
        s, q, m = prefix[j] - prefix[i], prefix_sq[j] - prefix_sq[i], j - i
        return q - s * s / m

    best_k = min(range(min_segment, n - min_segment + 1), key=lambda k: sse(0, k) + sse(k, n))
    before, after = values[:best_k], values[best_k:]
    mb, ma = median(before), median(after)
    noise = max(mad(before, mb), mad(after, ma), 0.02 * magnitude)
    z = abs(ma - mb) / (MAD_TO_SIGMA * noise)
    if abs(ma - mb) < min_relative * max(abs(mb), 0.05 * magnitude):
        return None
    apart = _apart(before, after)
    if z < min_z and not apart:
        return None
    back = sum(1 for v in after if abs(v - mb) <= 3 * MAD_TO_SIGMA * noise)
    if back > len(after) / 5 and not apart:
        return None
    return StepChange(pts[best_k][0], best_k, mb, ma, round(z, 1))


def _apart(before: list[float], after: list[float]) -> bool:
    """Two levels that do not overlap at all, the new one at least twice (or at most half) the old: a jump from
    40 ms to 2-5 s is a step although the new level is noisy (its MAD alone would hide it from the z test)."""
    if len(before) < 5 or len(after) < 5:
        return False
    b, a = sorted(before), sorted(after)
    b_lo, b_hi = b[len(b) // 10], b[-1 - len(b) // 10]
    a_lo, a_hi = a[len(a) // 10], a[-1 - len(a) // 10]
    # and the new level holds to the end: a backlog draining back towards the old level is an episode, not a step
    tail, level = after[-3:], median(after)
    if a_lo > b_hi and b_hi >= 0:
        return a_lo >= 2 * b_hi and min(tail) >= 2 * b_hi and median(tail) >= 0.5 * level
    if a_hi < b_lo and a_hi >= 0:
        return 2 * a_hi <= b_lo and 2 * max(tail) <= b_lo and median(tail) <= 2 * level
    return False


@dataclass(frozen=True)
class Saturation:
    since: float  # ts the trailing run of saturated points began
    value: float  # the latest value
    fraction: float  # latest value / limit
    points: int  # how many trailing points are saturated


def saturation(points: Sequence[Point], limit: float, fraction: float = 0.9, min_points: int = 2) -> Saturation | None:
    """The trailing run of points at or above `fraction` of `limit`, when it is at least `min_points` long (one
    sample at the limit is a spike; a run is saturation)."""
    if limit <= 0 or not points:
        return None
    run = 0
    for _, v in reversed(points):
        if v >= fraction * limit:
            run += 1
        else:
            break
    if run < min(min_points, len(points)):
        return None
    return Saturation(points[-run][0], points[-1][1], points[-1][1] / limit, run)


@dataclass(frozen=True)
class Trend:
    slope: float  # units per second
    intercept: float  # value at ts 0 of the fit's own origin (the first point's ts)
    r2: float
    origin: float

    def at(self, ts: float) -> float:
        return self.intercept + self.slope * (ts - self.origin)


def linear_trend(points: Sequence[Point]) -> Trend | None:
    """Least-squares line through the points, with r² (how well a straight line explains them)."""
    n = len(points)
    if n < 3:
        return None
    t0 = points[0][0]
    xs = [t - t0 for t, _ in points]
    ys = [v for _, v in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    return Trend(slope, intercept, r2, t0)


def time_to_reach(points: Sequence[Point], target: float, min_r2: float = 0.8) -> float | None:
    """Seconds after the last point until the recent linear trend reaches `target` (0 when it already has), or
    None when the trend does not head there or is not linear enough to extrapolate (r² < `min_r2`).

    The fit uses the latest half of the series (at least 5 points): a resource being eaten now is what
    matters, not last week's slope.
    """
    if len(points) < 3:
        return None
    last = points[-1][1]
    rising = target > points[0][1]
    if (rising and last >= target) or (not rising and last <= target):
        return 0.0
    recent = points[-max(5, len(points) // 2) :]
    trend = linear_trend(recent)
    if trend is None or trend.r2 < min_r2 or trend.slope == 0:
        return None
    if (target - last) / trend.slope <= 0:
        return None  # moving away from the target
    end = points[-1][0]
    return max(0.0, (target - trend.at(end)) / trend.slope)


def time_to_exhaustion(points: Sequence[Point], min_r2: float = 0.8) -> float | None:
    """Seconds until a falling series (free space, burst balance, credits) reaches zero."""
    return time_to_reach(points, 0.0, min_r2)


def counter_rate(points: Sequence[Point]) -> list[Point]:
    """Per-second rate of a monotonic counter, one point per interval (at its end). A drop is a counter reset
    (a restarted process): the new value is the increase since the reset, as Prometheus' rate() assumes."""
    out: list[Point] = []
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        dt = t1 - t0
        if dt <= 0:
            continue
        inc = v1 - v0 if v1 >= v0 else v1
        out.append((t1, inc / dt))
    return out


def recovered(
    points: Sequence[Point], since_index: int, baseline: Baseline, tail: int = 3, within: float = 3.0
) -> bool:
    """Whether the last `tail` points after `since_index` are back within `within` robust sigmas of `baseline`."""
    after = points[since_index + 1 :]
    if len(after) < min(tail, 1):
        return False
    last = after[-tail:]
    return bool(last) and all(abs(baseline.z(v)) <= within for _, v in last)


def human_duration(seconds: float) -> str:
    """5400 -> '1h30m'; 90 -> '1m30s'; 3 days -> '3d'."""
    s = round(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        m, r = divmod(s, 60)
        return f"{m}m{r:02d}s" if r else f"{m}m"
    if s < 86400:
        h, r = divmod(s, 3600)
        return f"{h}h{r // 60:02d}m" if r // 60 else f"{h}h"
    d, r = divmod(s, 86400)
    return f"{d}d{r // 3600}h" if r // 3600 else f"{d}d"
