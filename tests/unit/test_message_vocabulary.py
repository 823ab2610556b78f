"""The logs analyzer's vocabulary across runtimes: the same failure reads differently in Python, Go, Node, Java
and Ruby, and a missing setting is a configuration error whatever exception the code raises on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

PY_ENV = """Traceback (most recent call last):
  File "/app/worker/main.py", line 12, in <module>
    settings = Settings.from_env()
  File "/app/worker/settings.py", line 41, in from_env
    api_key=os.environ["PAYMENT_API_KEY"],
  File "/usr/local/lib/python3.11/os.py", line 679, in __getitem__
    raise KeyError(key) from None
KeyError: 'PAYMENT_API_KEY'"""

PY_DICT = """Traceback (most recent call last):
  File "/app/orders/views.py", line 88, in create_order
    price = catalog[item["sku"]]
KeyError: 'sku'"""

# (case, the error line(s) each failure writes after a timestamp, category, words the root cause names)
CASES = [
    ("python env var", "ERROR payments-worker failed to start\n" + PY_ENV, "configuration_error", ["PAYMENT_API_KEY"]),
    ("python dict key", "ERROR payments-worker request failed\n" + PY_DICT, "code_defect", ["KeyError"]),
    (
        "go env var",
        'level=fatal msg="required env DATABASE_URL not set" service=ledger-api',
        "configuration_error",
        ["DATABASE_URL"],
    ),
    (
        "node env var",
        "ERROR Error: Missing required environment variable STRIPE_SECRET_KEY",
        "configuration_error",
        ["STRIPE_SECRET_KEY"],
    ),
    ("go unknown flag", "ERROR flag provided but not defined: -listen-addr", "configuration_error", ["flag"]),
    (
        "java npe",
        "ERROR [main] c.a.b.SettlementJob - job failed\njava.lang.NullPointerException: Cannot invoke "
        '"Account.getId()" because "acct" is null\n\tat c.a.b.SettlementJob.run(SettlementJob.java:77)',
        "code_defect",
        ["NullPointerException"],
    ),
    (
        "node type error",
        "ERROR TypeError: Cannot read properties of undefined (reading 'currency')\n"
        "    at priceOf (/app/src/cart.js:41:22)",
        "code_defect",
        ["TypeError"],
    ),
    (
        "ruby no method",
        "E, [ERROR] -- : NoMethodError (undefined method `strftime' for nil:NilClass)\n"
        "  app/helpers/bookings_helper.rb:41:in `checkin_label'",
        "code_defect",
        ["NoMethodError"],
    ),
    (
        "amqp vhost that does not exist",
        "ERROR -- : Bunny::NotAllowedError: Connection.Open: 530 NOT_ALLOWED - vhost /notifications not found",
        "configuration_error",
        ["vhost /notifications"],
    ),
    (
        "postgres database that does not exist",
        'FATAL: database "ledger_prod" does not exist',
        "configuration_error",
        ['database "ledger_prod"'],
    ),
]


def test_a_datastore_failure_relayed_by_its_client_is_not_a_bug_here(tmp_path: Path) -> None:
    line = (
        "ERROR ProductSearchService : search failed : co.elastic.clients.elasticsearch._types.ElasticsearchException: "
        "[es/search] failed: [search_phase_execution_exception] Search rejected due to missing shards [[products][3]]"
    )
    diagnosis = investigate(load_bundle(_bundle(tmp_path, line)), "why is search failing?")
    assert diagnosis.category != Category.CODE_DEFECT, diagnosis.root_cause


def _bundle(tmp_path: Path, lines: str) -> Path:
    out = []
    for i in range(8):
        out.append(f"2026-03-02T10:{10 + i:02d}:00Z INFO serving requests")
        first, *rest = lines.split("\n")
        out.append(f"2026-03-02T10:{10 + i:02d}:30Z {first}")
        out.extend(rest)
    (tmp_path / "app.log").write_text("\n".join(out) + "\n")
    return tmp_path


@pytest.mark.parametrize(("case", "lines", "category", "words"), CASES, ids=[c[0] for c in CASES])
def test_failure_wordings(tmp_path: Path, case: str, lines: str, category: str, words: list[str]) -> None:
    diagnosis = investigate(load_bundle(_bundle(tmp_path, lines)), "why is it failing?")
    assert diagnosis.category == Category(category), (case, diagnosis.root_cause)
    for word in words:
        assert word in diagnosis.root_cause, (case, diagnosis.root_cause)


def test_traceback_names_what_was_raised(tmp_path: Path) -> None:
    diagnosis = investigate(load_bundle(_bundle(tmp_path, "ERROR request failed\n" + PY_DICT)), None)
    assert "Traceback (most recent call last)" not in diagnosis.root_cause.split(":")[0]


def test_errors_that_begin_after_a_clean_stretch_are_not_background(tmp_path: Path) -> None:
    """A job that ran clean for 50 minutes, then rejects every file: few errors over most of the log, but they
    began with the fault, so they are not a background 'present all along'."""
    lines = []
    for i in range(14):  # every 10 minutes from 04:00 to 06:10
        stamp = f"2026-03-09T{4 + i // 6:02d}:{(i % 6) * 10:02d}:00Z"
        lines.append(f"{stamp} INFO ingest: fetched manifest_{i:02d}.csv")
        if i < 5:
            lines.append(f"{stamp} INFO ingest: loaded rows=1900 rejected=0")
        else:
            lines.append(
                f"{stamp} ERROR ingest: file manifest_{i:02d}.csv rejected: CSV error: record 1 (line: 2, byte: 131): "
                "found record with 1 fields, but the previous record has 14 fields"
            )
    (tmp_path / "ingest.log").write_text("\n".join(lines) + "\n")
    diagnosis = investigate(load_bundle(tmp_path), "why are no files loaded?")
    assert diagnosis.category == Category.DATA_QUALITY, diagnosis.root_cause


def test_serilog_compact_json_is_read_and_a_frequent_error_is_not_background(tmp_path: Path) -> None:
    """Serilog CLEF: @t, @mt (filled from the properties), @l left out for Information, @x the exception. A third
    of the requests failing at a low absolute rate is a fault, not a background."""
    import json

    lines = []
    for i in range(60):
        stamp = f"2025-03-27T13:{i:02d}:10.000Z"
        status = 500 if i % 3 == 0 else 201
        if status == 500:
            lines.append(
                {
                    "@t": stamp,
                    "@mt": "An unhandled exception has occurred while executing the request.",
                    "@l": "Error",
                    "@x": "System.InvalidOperationException: Nullable object must have a value.\n"
                    "   at Claims.PolicyCoverage.CoversLossDate(DateOnly lossDate)",
                }
            )
        lines.append(
            {
                "@t": stamp,
                "@mt": "HTTP {RequestMethod} {RequestPath} responded {StatusCode} in {Elapsed:0.0000} ms",
                **({"@l": "Error"} if status == 500 else {}),
                "RequestMethod": "POST",
                "RequestPath": "/v2/claims",
                "StatusCode": status,
                "Elapsed": 57.2,
            }
        )
    (tmp_path / "claims-intake.log").write_text("".join(json.dumps(x) + "\n" for x in lines))
    ev = load_bundle(tmp_path)
    (log,) = ev.kind("log")
    first = log.data["records"][1]
    assert first["msg"] == "HTTP POST /v2/claims responded 500 in 57.2 ms" and first["level"] == "error"
    assert log.data["records"][2]["level"] == "info"
    diagnosis = investigate(ev, "why do claim submissions fail?")
    assert diagnosis.category == Category.CODE_DEFECT, diagnosis.root_cause
    assert "System.InvalidOperationException" in diagnosis.root_cause


def test_a_task_killed_by_a_signal_from_outside_is_not_its_bug(tmp_path: Path) -> None:
    line = (
        "ERROR - Received SIGTERM. Terminating subprocesses.\n"
        "airflow.exceptions.AirflowTaskTerminated: Task received SIGTERM signal"
    )
    diagnosis = investigate(load_bundle(_bundle(tmp_path, line)), "why did the nightly dbt task fail?")
    assert diagnosis.category is Category.UNKNOWN, diagnosis.root_cause
    assert any("who stopped" in m for m in diagnosis.missing)


def test_a_syslog_line_takes_the_zoned_time_its_program_wrote() -> None:
    from diagnosis.formats.logs import LineParser

    ts, level, _ = LineParser().parse(
        "Apr 22 13:46:15 gb-ingest-1 ingest[2231]: 2026-04-22T13:46:15.900-04:00 ERR publish failed"
    )
    assert ts == 1776879975.9 and level == "error"


def test_a_broker_refusing_writes_at_an_account_limit_is_exhaustion(tmp_path: Path) -> None:
    line = 'ERR publish failed stream=GB_TELEMETRY error="nats: resource limits exceeded for account" err_code=10002'
    diagnosis = investigate(load_bundle(_bundle(tmp_path, line)), "why is telemetry not ingested?")
    assert diagnosis.category is Category.RESOURCE_EXHAUSTION, diagnosis.root_cause


def test_a_store_saying_the_table_is_not_there_is_no_bug_and_a_refused_token_is_configuration(tmp_path: Path) -> None:
    line = ("ERROR - airflow.exceptions.AirflowException: BigQuery job failed: {'reason': 'notFound', 'message': "
            "'Not found: Table acme:survey_raw.responses_20260112 was not found in location EU'}")  # fmt: skip
    diagnosis = investigate(load_bundle(_bundle(tmp_path, line)), "why does the export fail?")
    assert diagnosis.category is not Category.CODE_DEFECT, diagnosis.root_cause
    line = (
        'failed to get instance metadata: Get "https://sqladmin.googleapis.com/sql/v1beta4/projects/p/instances/'
        'ledger-pg/connectSettings": compute: Received 403 `Unable to generate access token; IAM returned 403`'
    )
    diagnosis = investigate(load_bundle(_bundle(tmp_path, "ERROR " + line)), "why can't the ledger reach its database?")
    assert diagnosis.category is Category.CONFIGURATION_ERROR, diagnosis.root_cause
