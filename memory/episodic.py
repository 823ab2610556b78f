"""Episodic memory: every finished task becomes an episode. Recall ranks by similarity, recency and outcome,
so the planner can reuse what worked and the answer can cite similar past incidents."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from core.db import Store
from memory._tables import EpisodeRow, init_memory_tables
from memory.embeddings import Embedder
from memory.entities import extract_entities, same_entities
from memory.index.partitioned import PartitionedIndex, arrays_from_rows

RECENCY_HALF_LIFE_S = 7 * 86_400
OUTCOME_WEIGHT = {"succeeded": 1.0, "failed": 0.8, "cancelled": 0.5}


@dataclass
class Recalled:
    episode_id: int
    task_id: str
    goal: str
    outcome: str
    headline: str
    playbook: str | None
    plan: dict[str, Any]
    similarity: float
    score: float
    age_s: float
    same_entities: bool
    feedback: dict[str, Any] | None

    def cite(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "goal": self.goal,
            "outcome": self.outcome,
            "headline": self.headline,
            "similarity": round(self.similarity, 3),
            "age_s": round(self.age_s),
            "feedback": self.feedback,
        }


class EpisodicMemory:
    def __init__(self, store: Store, embedder: Embedder, index_folder: Path | None = None) -> None:
        self.store = store
        self.embedder = embedder
        init_memory_tables(store.engine)
        self.index = PartitionedIndex(embedder.dim, index_folder, loader=self._load)

    def _load(self, tenant: str) -> tuple[np.ndarray, np.ndarray]:
        with self.store.session() as s:
            rows = s.execute(sa.select(EpisodeRow.id, EpisodeRow.vector).where(EpisodeRow.tenant == tenant)).all()
        return arrays_from_rows(rows, self.embedder.dim)

    def record(
        self,
        *,
        tenant: str,
        task_id: str,
        goal: str,
        category: str,
        plan: dict[str, Any],
        outcome: str,
        answer: dict[str, Any],
        duration_s: float,
        vector: np.ndarray | None = None,
    ) -> int | None:
        """Write the episode of a finished task (once per task; a second call is ignored)."""
        vec = vector if vector is not None else self.embedder.embed([goal])[0]
        findings = [
            {"severity": f["severity"], "message": f["message"], "node_id": f.get("node_id")}
            for f in answer.get("findings", [])
            if f.get("severity") in ("warn", "critical")
        ]
        row = EpisodeRow(
            tenant=tenant,
            task_id=task_id,
            goal=goal,
            category=category,
            playbook=plan.get("playbook"),
            plan=plan,
            outcome=outcome,
            headline=str(answer.get("headline", "")),
            findings=findings,
            entities={k: sorted(v) for k, v in extract_entities(goal).items()},
            duration_s=duration_s,
            feedback=None,
            repeats=1,
            vector=np.asarray(vec, dtype=np.float32).tobytes(),
            created_at=time.time(),
        )
        with self.store.session() as s:
            if s.scalar(sa.select(EpisodeRow.id).where(EpisodeRow.task_id == task_id)) is not None:
                return None
            s.add(row)
            s.flush()
            episode_id = int(row.id)
        self.index.add(tenant, np.array([episode_id], dtype=np.int64), np.asarray(vec, np.float32).reshape(1, -1))
        return episode_id

    def recall(
        self,
        tenant: str,
        text: str,
        *,
        k: int = 3,
        min_similarity: float = 0.55,
        exclude_task: str | None = None,
        vector: np.ndarray | None = None,
    ) -> list[Recalled]:
        """Similar episodes of this tenant, best first by similarity x recency x outcome (x feedback)."""
        vec = vector if vector is not None else self.embedder.embed([text])[0]
        found = [(i, s) for i, s in self.index.search(tenant, vec, k * 4 + 1) if s >= min_similarity]
        if not found:
            return []
        sims = dict(found)
        wanted = extract_entities(text)
        now = time.time()
        with self.store.session() as s:
            rows = list(s.scalars(sa.select(EpisodeRow).where(EpisodeRow.id.in_(list(sims)))))
        out = []
        for r in rows:
            if r.tenant != tenant or r.task_id == exclude_task:
                continue
            age = max(0.0, now - r.created_at)
            recency = math.pow(0.5, age / RECENCY_HALF_LIFE_S)
            weight = OUTCOME_WEIGHT.get(r.outcome, 0.5)
            if r.feedback is not None:
                weight *= 1.2 if r.feedback.get("helpful") else 0.5
            score = sims[r.id] * (0.5 + 0.5 * recency) * weight
            same = same_entities(wanted, {kk: frozenset(v) for kk, v in r.entities.items()})[0]
            out.append(
                Recalled(
                    r.id,
                    r.task_id,
                    r.goal,
                    r.outcome,
                    r.headline,
                    r.playbook,
                    r.plan,
                    sims[r.id],
                    score,
                    age,
                    same,
                    r.feedback,
                )
            )
        return sorted(out, key=lambda e: e.score, reverse=True)[:k]

    def merge_duplicates(self) -> int:
        """Fold episodes of the same request (same words, outcome and playbook) into the newest one."""
        with self.store.session() as s:
            rows = list(s.scalars(sa.select(EpisodeRow).order_by(EpisodeRow.created_at)))
            groups: dict[tuple[str, str, str, str | None], list[EpisodeRow]] = {}
            for r in rows:
                key = (r.tenant, " ".join(r.goal.lower().split()), r.outcome, r.playbook)
                groups.setdefault(key, []).append(r)
            removed: dict[str, list[int]] = {}
            for group in groups.values():
                if len(group) < 2:
                    continue
                keep, older = group[-1], group[:-1]
                keep.repeats = sum(r.repeats for r in group)
                if keep.feedback is None:
                    keep.feedback = next((r.feedback for r in reversed(older) if r.feedback), None)
                for r in older:
                    removed.setdefault(r.tenant, []).append(r.id)
                    s.delete(r)
        for tenant, ids in removed.items():
            self.index.remove(tenant, np.array(ids, np.int64))
        return sum(len(v) for v in removed.values())

    def playbook_candidates(self, min_repeats: int = 3) -> list[dict[str, Any]]:
        """Plans not from a playbook that succeeded at least min_repeats times: worth keeping as playbooks."""
        with self.store.session() as s:
            rows = s.scalars(
                sa.select(EpisodeRow).where(EpisodeRow.outcome == "succeeded", EpisodeRow.repeats >= min_repeats)
            )
            return [
                {"tenant": r.tenant, "goal": r.goal, "repeats": r.repeats, "plan": r.plan, "task_id": r.task_id}
                for r in rows
                if r.plan.get("source") not in ("playbook", "cache", "episode")
            ]

    def feedback(self, task_id: str, helpful: bool, note: str | None = None) -> bool:
        with self.store.session() as s:
            row = s.scalar(sa.select(EpisodeRow).where(EpisodeRow.task_id == task_id))
            if row is None:
                return False
            row.feedback = {"helpful": helpful, "note": note, "at": time.time()}
            return True
