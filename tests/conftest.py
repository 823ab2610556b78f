from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import PostgresDatabase, RedisServer

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module", params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """ "" means the embedded SQLite default; postgres runs when OPSGRAPH_TEST_POSTGRES_URL names a server."""
    if request.param == "sqlite":
        yield ""
        return
    admin = os.environ.get("OPSGRAPH_TEST_POSTGRES_URL")
    if not admin:
        pytest.skip("OPSGRAPH_TEST_POSTGRES_URL is not set (.ci/run sets it when PostgreSQL answers)")
    db = PostgresDatabase(admin)
    yield db.url
    db.drop()


@pytest.fixture(scope="session")
def embedder():  # type: ignore[no-untyped-def]
    """The real all-MiniLM-L6-v2, loaded once for the whole session."""
    from memory.embeddings import MiniLMEmbedder

    return MiniLMEmbedder(device="cpu").load()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
