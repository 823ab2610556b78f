"""A set of evidence items, indexed for analyzers, with the check every claimed reference goes through."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from diagnosis.model import EvidenceItem, EvidenceRef

T = TypeVar("T")


class EvidenceSet:
    """The evidence of one investigation. Analyzers read it; nothing writes to it but `add`."""

    def __init__(self, items: Iterable[EvidenceItem] = ()) -> None:
        self._items: dict[str, EvidenceItem] = {}
        self._by_kind: dict[str, list[EvidenceItem]] = defaultdict(list)
        self.ignored: list[dict[str, str]] = []  # {path, reason}
        self.errors: list[dict[str, str]] = []  # {path, error}
        self._derived: dict[str, Any] = {}
        # "now" for the analyzers when set (a past failure read as of its end); else the newest time in the evidence
        self.as_of: float | None = None
        for item in items:
            self.add(item)

    def at(self, ts: float) -> EvidenceSet:
        """The evidence as it stood at `ts`: a new set (its own derived values) whose "now" is `ts`, its logs' records
        and its series' points cut at `ts` (what came later is not known then)."""
        copy = EvidenceSet(_cut(item, ts) for item in self)
        copy.ignored = list(self.ignored)
        copy.errors = list(self.errors)
        copy.as_of = ts
        return copy

    def add(self, item: EvidenceItem) -> None:
        if item.id in self._items:
            raise ValueError(f"evidence item {item.id!r} added twice")
        self._items[item.id] = item
        self._by_kind[item.kind].append(item)
        self._derived.clear()

    def derived(self, key: str, compute: Callable[[EvidenceSet], T]) -> T:
        """A value worked out from the whole set once and shared by the analyzers that read it (the releases the
        evidence shows); adding an item forgets it."""
        if key not in self._derived:
            self._derived[key] = compute(self)
        return self._derived[key]  # type: ignore[no-any-return]

    def extend(self, other: EvidenceSet) -> None:
        for item in other:
            self.add(item)
        self.ignored.extend(other.ignored)
        self.errors.extend(other.errors)

    def kind(self, kind: str) -> list[EvidenceItem]:
        """Items of one kind; a kind ending in '/' (`k8s/`) is a prefix."""
        if kind.endswith("/"):
            return [i for k, items in self._by_kind.items() if k.startswith(kind) for i in items]
        return list(self._by_kind.get(kind, ()))

    def kinds(self) -> set[str]:
        return {k for k, v in self._by_kind.items() if v}

    def get(self, item_id: str) -> EvidenceItem | None:
        return self._items.get(item_id)

    def __iter__(self) -> Iterator[EvidenceItem]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def check(self, ref: EvidenceRef) -> bool:
        """A reference is real when its item exists, its field resolves and its line is in the item."""
        item = self._items.get(ref.item)
        if item is None:
            return False
        if ref.field and resolve(item.data, ref.field) is _MISSING:
            return False
        if ref.line is not None and item.kind == "log":
            return any(r.get("line") == ref.line for r in item.data.get("records", ()))
        return True


_MISSING: Any = object()


def resolve(data: Any, path: str) -> Any:
    """data at a dotted path ("status.containerStatuses.0.state"); _MISSING when it is not there."""
    cur = data
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit() and -len(cur) <= int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


# exports that record operations on resources (Azure's Activity Log, Cloudflare's audit log), not how the resources
# run: no evidence of health
CONTROL_PLANE_EXPORTS = frozenset({"azure-activity-log", "cloudflare-audit"})


def control_plane(item: EvidenceItem) -> bool:
    """Whether the item records operations on resources rather than how they run."""
    return item.kind == "log" and (item.data.get("source") or {}).get("export") in CONTROL_PLANE_EXPORTS


def _cut(item: EvidenceItem, ts: float) -> EvidenceItem:
    """The item as of `ts`: a log's records and a series' points up to then (records without a time are kept), an
    alert that resolved later still firing."""
    if item.kind == "log" and item.data.get("records"):
        records = [r for r in item.data["records"] if not isinstance(r.get("ts"), int | float) or r["ts"] <= ts]
        return item.model_copy(update={"data": {**item.data, "records": records}})
    if item.kind == "metric" and item.data.get("points"):
        points = [p for p in item.data["points"] if not isinstance(p[0], int | float) or p[0] <= ts]
        return item.model_copy(update={"data": {**item.data, "points": points}})
    if item.kind == "alert" and item.data.get("status") == "resolved":
        end = item.data.get("ends_at")
        if isinstance(end, int | float) and end > ts:  # it still fired then
            return item.model_copy(update={"data": {**item.data, "status": "firing", "ends_at": None}})
    return item
