from __future__ import annotations

import numpy as np


def test_embeddings_are_normalised_384_floats_and_repeats_cost_one_encode(embedder) -> None:  # type: ignore[no-untyped-def]
    vecs = embedder.embed(["is redis ok", "nightly capacity report", "is redis ok"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vecs[0], vecs[2])
    assert "is redis ok" in embedder._memo
    assert float(vecs[0] @ vecs[1]) < 0.5
    assert embedder.embed([]).shape == (0, 384)
