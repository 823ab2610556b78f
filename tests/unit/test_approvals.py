"""The approvals store on SQLite and PostgreSQL: requests, decisions, four-eyes, expiry, and its migration."""

from __future__ import annotations

import importlib.util
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.approvals import Approval, ApprovalClosed, ApprovalStatus, ApprovalStore, SelfApprovalRefused
from core.db import ApprovalRow, Base, Store, TaskRow, make_engine
from core.errors import NotFound, UserError
from core.settings import Settings
from core.types import EventType

ROOT = Path(__file__).resolve().parents[2]
PREVIEW = {
    "summary": "would terminate pid 4711 (app@orders) idle in transaction for 240s, blocks 3 session(s)",
    "data": {"session": {"pid": 4711, "state": "idle in transaction"}},
}


@pytest.fixture
def store(database_url: str, tmp_path: Path) -> Store:
    return Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))


@pytest.fixture
def acme() -> str:
    """A tenant of this test alone (the PostgreSQL database is shared by the module's tests)."""
    return f"acme-{uuid.uuid4().hex[:8]}"


def _request(approvals: ApprovalStore, store: Store, *, tenant: str, **over: Any) -> Approval:
    task_id = over.pop("task_id", None) or store.create_task("remediate orders locks", tenant=tenant).id
    fields: dict[str, Any] = {
        "tenant": tenant,
        "task_id": task_id,
        "node_id": "terminate",
        "tool": "postgres_terminate_session",
        "args": {"pid": 4711, "dsn": "postgresql://app:hunter2@db/orders"},
        "preview": PREVIEW,
        "reason": "session 4711 idle in transaction holds row locks on orders; 3 writers wait",
        "requested_by": "key:alice",
    }
    return approvals.create(**(fields | over))


def _events(store: Store, task_id: str, type: EventType) -> list[dict[str, Any]]:
    return [e.data for e in store.events_after(task_id) if e.type == type.value]


def test_a_request_is_pending_redacted_listed_and_asked_once(store: Store, acme: str) -> None:
    approvals = ApprovalStore(store, ttl_s=600)
    a = _request(approvals, store, tenant=acme)
    assert a.status == ApprovalStatus.PENDING and a.requested_by == "key:alice"
    assert a.args["pid"] == 4711 and "hunter2" not in str(a.args) and "***" in a.args["dsn"]
    assert a.preview == PREVIEW and a.expires_at == pytest.approx(a.created_at + 600)
    assert (
        _request(approvals, store, tenant=acme, task_id=a.task_id).id == a.id
    )  # a replayed interrupt does not ask twice
    assert approvals.latest_for(a.task_id, "terminate") == a
    requested = _events(store, a.task_id, EventType.APPROVAL_REQUESTED)
    assert len(requested) == 1 and requested[0]["approval_id"] == a.id and requested[0]["summary"] == PREVIEW["summary"]

    other = _request(approvals, store, tenant=acme + "-globex")
    assert [x.id for x in approvals.list(tenant=acme, status="pending")] == [a.id]
    assert [x.id for x in approvals.list(tenant=acme, task_id=other.task_id)] == []  # by task, in the query
    # the newest request overall is another task's: a filter applied after the limit would find nothing
    assert [x.id for x in approvals.list(tenant=None, task_id=a.task_id, limit=1)] == [a.id]
    assert [x.id for x in approvals.list(tenant=acme + "-globex")] == [other.id]
    assert {x.id for x in approvals.list(tenant=None)} >= {a.id, other.id}
    assert approvals.list(tenant=acme, status=ApprovalStatus.APPROVED) == []
    with pytest.raises(NotFound):
        approvals.get(a.id, tenant=acme + "-globex")  # another tenant's request does not exist for them
    with pytest.raises(UserError):
        _request(approvals, store, tenant=acme, requested_by="")


def test_approve_records_who_when_why_and_from_where_once(store: Store, acme: str) -> None:
    approvals = ApprovalStore(store)
    a = _request(approvals, store, tenant=acme)
    before = time.time()
    decided = approvals.decide(
        a.id, approve=True, decided_by="key:bob", reason="writers stuck", tenant=acme, from_addr="10.1.2.3"
    )
    assert decided.status == ApprovalStatus.APPROVED and decided.decided_by == "key:bob"
    assert decided.decision_reason == "writers stuck" and decided.from_addr == "10.1.2.3"
    assert decided.decided_at is not None and decided.decided_at >= before
    assert approvals.get(a.id) == decided == approvals.latest_for(a.task_id, "terminate")
    for approve in (True, False):
        with pytest.raises(ApprovalClosed, match="already approved by key:bob") as info:
            approvals.decide(a.id, approve=approve, decided_by="key:carol", tenant=acme)
        assert info.value.code == "approval_closed"
    assert approvals.get(a.id).decided_by == "key:bob"
    decided_events = _events(store, a.task_id, EventType.APPROVAL_DECIDED)
    assert [(e["status"], e["decided_by"]) for e in decided_events] == [("approved", "key:bob")]
    with pytest.raises(NotFound):
        approvals.decide(a.id, approve=True, decided_by="key:eve", tenant=acme + "-globex")
    with pytest.raises(NotFound):
        approvals.decide("no-such-id", approve=True, decided_by="key:bob")


def test_reject_closes_the_request(store: Store, acme: str) -> None:
    approvals = ApprovalStore(store)
    a = _request(approvals, store, tenant=acme)
    rejected = approvals.decide(a.id, approve=False, decided_by="key:bob", reason="take a dump first")
    assert rejected.status == ApprovalStatus.REJECTED and rejected.decision_reason == "take a dump first"
    with pytest.raises(ApprovalClosed, match="already rejected"):
        approvals.decide(a.id, approve=True, decided_by="key:carol")
    assert [x.id for x in approvals.list(tenant=acme, status="rejected")] == [a.id]


def test_four_eyes_refuses_self_approval_only_when_configured(store: Store, acme: str) -> None:
    strict = ApprovalStore(store, four_eyes=True)
    a = _request(strict, store, tenant=acme)
    with pytest.raises(SelfApprovalRefused, match="four-eyes") as info:
        strict.decide(a.id, approve=True, decided_by="key:alice")
    assert info.value.code == "four_eyes" and strict.get(a.id).status == ApprovalStatus.PENDING
    assert strict.decide(a.id, approve=True, decided_by="key:bob").status == ApprovalStatus.APPROVED
    withdrawn = _request(strict, store, tenant=acme)
    assert strict.decide(withdrawn.id, approve=False, decided_by="key:alice").status == ApprovalStatus.REJECTED
    relaxed = ApprovalStore(store, four_eyes=False)
    own = _request(relaxed, store, tenant=acme)
    assert relaxed.decide(own.id, approve=True, decided_by="key:alice").status == ApprovalStatus.APPROVED


def test_expiry_closes_requests_and_is_recorded_once(store: Store, acme: str) -> None:
    approvals = ApprovalStore(store, ttl_s=3600)
    due = _request(approvals, store, tenant=acme)
    fresh = _request(approvals, store, tenant=acme)
    expired = [x for x in approvals.expire_due(now=due.expires_at + 1) if x.tenant == acme]
    assert {x.id for x in expired} == {due.id, fresh.id}  # both were created within the hour before `now`
    assert all(x.status == ApprovalStatus.EXPIRED and x.decided_by == "system" for x in expired)
    assert [x for x in approvals.expire_due(now=due.expires_at + 1) if x.tenant == acme] == []
    with pytest.raises(ApprovalClosed, match="expired"):
        approvals.decide(due.id, approve=True, decided_by="key:bob")
    assert [e["status"] for e in _events(store, due.task_id, EventType.APPROVAL_DECIDED)] == ["expired"]

    lapsed = _request(approvals, store, tenant=acme, ttl_s=0)  # already past its expiry, not yet swept
    assert approvals.get(lapsed.id).status == ApprovalStatus.EXPIRED
    assert lapsed.id not in {x.id for x in approvals.list(tenant=acme, status="pending")}
    assert lapsed.id in {x.id for x in approvals.list(tenant=acme, status="expired")}
    with pytest.raises(ApprovalClosed, match="expired"):
        approvals.decide(lapsed.id, approve=True, decided_by="key:bob")
    with store.session() as s:  # the refused decision recorded the expiry
        assert s.get(ApprovalRow, lapsed.id).status == "expired"
    assert [x for x in approvals.expire_due() if x.tenant == acme] == []
    renewed = _request(approvals, store, tenant=acme, task_id=lapsed.task_id)
    assert renewed.id != lapsed.id and renewed.status == ApprovalStatus.PENDING


def test_concurrent_decisions_have_exactly_one_winner(store: Store, acme: str) -> None:
    approvals = ApprovalStore(store)
    a = _request(approvals, store, tenant=acme)
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def decide(who: int) -> None:
        barrier.wait()
        try:
            approvals.decide(a.id, approve=who % 2 == 0, decided_by=f"key:{who}")
            outcomes.append("won")
        except ApprovalClosed:
            outcomes.append("closed")

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["closed"] * 5 + ["won"]
    assert len(_events(store, a.task_id, EventType.APPROVAL_DECIDED)) == 1


def _load_migration() -> Any:
    path = ROOT / "core" / "migrations" / "versions" / "0004_approvals.py"
    spec = importlib.util.spec_from_file_location("migration_0004_approvals", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_view_says_whether_the_caller_may_decide_and_why_not(store: Store, acme: str) -> None:
    from services.api.auth import Principal
    from services.api.routes.approvals import approval_view

    strict = ApprovalStore(store, four_eyes=True)
    a = _request(strict, store, tenant=acme)

    def caller(who: str, *scopes: str) -> Principal:
        return Principal(id=who, name="", tenant=acme, scopes=frozenset(scopes))

    alice, bob = caller("key:alice", "operate", "approve"), caller("key:bob", "approve")
    assert (approval_view(a, bob, True)["may_decide"], approval_view(a, bob, True)["why_not"]) == (True, None)
    own = approval_view(a, alice, True)
    assert own["may_decide"] is False and own["why_not"].startswith("four-eyes")
    assert approval_view(a, alice, False)["may_decide"] is True  # four-eyes off: the requester may approve
    carol = caller("key:carol", "operate")
    assert "no approve scope" in approval_view(a, carol, True)["why_not"]
    done = approval_view(strict.decide(a.id, approve=True, decided_by="key:bob"), bob, True)
    assert done["may_decide"] is False and done["why_not"] == "already approved by key:bob"


def test_migration_0004_creates_exactly_the_declared_table(database_url: str, tmp_path: Path) -> None:
    pytest.importorskip("alembic")
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    migration = _load_migration()
    assert (migration.revision, migration.down_revision) == ("0004_approvals", "0003_investigations")
    engine = make_engine(Settings(var_dir=tmp_path / "fresh", database_url=database_url))
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS approvals"))
        Base.metadata.create_all(conn, tables=[TaskRow.__table__])  # what 0001 made, approvals refer to it
        context = MigrationContext.configure(conn)
        with Operations.context(context):
            migration.upgrade()
        only_approvals = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_object": lambda obj, name, kind, reflected, other: (
                    (obj.name if kind == "table" else obj.table.name) == "approvals"
                ),
            },
        )
        assert compare_metadata(only_approvals, Base.metadata) == []
        with Operations.context(context):
            migration.downgrade()
        assert not sa.inspect(conn).has_table("approvals")
    engine.dispose()
