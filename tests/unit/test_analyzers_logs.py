"""Logs analyzer: templates, exceptions after a deploy, bad data, app OOM; stopped and background errors."""

from __future__ import annotations

from diagnosis.analyzers._common import group_templates, log_records, template_of
from diagnosis.analyzers.logs import log_errors
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code, causes


def test_templates_mask_numbers_ids_ips_durations_and_quoted_strings() -> None:
    a = template_of('user 42 from 10.1.2.3:5555 req 3f2a9c0e-1b2c-4d5e-8f90-0123456789ab took 5000ms "foo"')
    b = template_of('user 7 from 10.9.9.9:1 req 00000000-1111-2222-3333-444444444444 took 12.5s "bar baz"')
    assert a == b == "user <n> from <ip> req <id> took <dur> <str>"
    assert template_of("ERROR orders-api upstream payments-api timed out after 5000ms") == (
        "ERROR orders-api upstream payments-api timed out after <dur>"
    )


def test_grouping_counts_and_spans() -> None:
    b = Builder()
    b.log(
        "logs/a.log",
        [(T0 + i, "error", f"job {i} failed after {i}ms") for i in range(10)] + [(T0 + 100, "info", "started")],
    )
    groups = group_templates(list(log_records(b.set())))
    assert groups[0].count == 10 and groups[0].first_ts == T0 and groups[0].last_ts == T0 + 9


def test_the_200_timeouts_give_an_errors_symptom_and_leave_the_cause_to_network() -> None:
    b = Builder()
    b.log(
        "logs/orders-api.log",
        [(T0 + i * 3, "error", "ERROR orders-api upstream payments-api timed out after 5000ms") for i in range(200)],
    )
    found = log_errors(b.set())
    assert not causes(found)
    [sym] = by_code(found, "errors")
    assert sym.role == "symptom" and "service:orders-api" in sym.tags
    assert "200" in sym.title


def test_a_deployment_whose_rollout_just_completed_names_the_release_of_the_exceptions() -> None:
    """Only the Deployment object in the bundle: its Progressing condition was last updated when the new
    ReplicaSet became available, a minute after the new pods began to throw."""
    from datetime import UTC, datetime

    def fmt_iso(ts: float) -> str:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    b = Builder()
    b._add(
        "k8s/Deployment",
        "Deployment/shop/checkout",
        {
            "metadata": {"name": "checkout", "namespace": "shop"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "shop/checkout:2.4.0"}]}}},
            "status": {
                "conditions": [
                    {
                        "type": "Progressing",
                        "status": "True",
                        "reason": "NewReplicaSetAvailable",
                        "lastUpdateTime": fmt_iso(T0 + 60),
                        "lastTransitionTime": fmt_iso(T0 - 86400 * 20),
                    }
                ]
            },
        },
    )
    lines = [(T0 - 600 + i * 10, "info", "GET /cart 200 8ms") for i in range(50)]
    lines += [(T0 + i, "error", "java.lang.IllegalStateException: cart has no currency") for i in range(40)]
    b.log("Pod/shop/checkout-6f7b9c8d5-x7k2p/app", lines)
    [cause] = causes(log_errors(b.set()))
    assert cause.category == "code_defect" and "checkout:2.4.0" in cause.mechanism


def test_exception_right_after_a_deploy_is_a_code_defect() -> None:
    b = Builder()
    b.event(
        "Deployment",
        "shop",
        "checkout",
        "ScalingReplicaSet",
        "Scaled up replica set checkout-6f7b9c8d5 to 3",
        T0,
        type_="Normal",
    )
    lines = [(T0 - 600 + i * 10, "info", "GET /cart 200 8ms") for i in range(50)]
    lines += [
        (T0 + 120 + i, "error", 'java.lang.NullPointerException: Cannot invoke "Cart.total()" because "cart" is null')
        for i in range(40)
    ]
    b.log("Pod/shop/checkout-6f7b9c8d5-x7k2p/app", lines)
    ev = b.set()
    found = log_errors(ev)
    [cause] = causes(found)
    assert cause.code == "exception" and cause.category == "code_defect"
    assert "NullPointerException" in cause.title and "checkout" in cause.object
    assert "after the rollout" in cause.mechanism
    assert cause.score > 0.8
    assert_refs_real(ev, found)


def test_bad_data_is_data_quality() -> None:
    b = Builder()
    b.log(
        "logs/importer.log",
        [(T0 + i, "error", f'ERROR: invalid input syntax for type integer: "N/A" at row {i}') for i in range(12)],
    )
    [cause] = causes(log_errors(b.set()))
    assert cause.code == "bad_data" and cause.category == "data_quality"
    assert "importer" in cause.object


def test_java_heap_exhaustion_is_resource_exhaustion() -> None:
    b = Builder()
    b.log(
        "Pod/shop/search-7c9d8f6b5-qwrtz/app",
        [(T0 + i, "error", "java.lang.OutOfMemoryError: Java heap space") for i in range(3)],
    )
    [cause] = causes(log_errors(b.set()))
    assert cause.code == "app_out_of_memory" and cause.category == "resource_exhaustion"


def test_errors_that_stopped_long_before_now_are_benign() -> None:
    b = Builder()
    b.log("logs/api.log", [(T0 + i, "error", "java.lang.IllegalStateException: cache not warmed") for i in range(5)])
    b.log("logs/other.log", [(T0 + 3 * 3600, "info", "all good")])
    found = log_errors(b.set())
    assert not causes(found)
    assert by_code(found, "errors_stopped")


def test_a_steady_low_background_is_not_a_new_cause() -> None:
    b = Builder()
    # one error every 4 minutes for 2 hours, among normal traffic: the same before and during the incident window
    lines = [(T0 + i * 240, "error", "ValueError: could not round-trip price for legacy sku") for i in range(30)]
    lines += [(T0 + i * 30, "info", "GET / 200") for i in range(240)]
    lines.sort()
    b.log("logs/shop.log", lines)
    found = log_errors(b.set())
    assert not causes(found)
    assert by_code(found, "errors_background")


def test_a_burst_on_top_of_a_background_is_live() -> None:
    b = Builder()
    lines = [(T0 + i * 240, "error", "ValueError: could not round-trip price for legacy sku") for i in range(30)]
    lines += [(T0 + 7000 + i, "error", "ValueError: could not round-trip price for legacy sku") for i in range(60)]
    b.log("logs/shop.log", sorted(lines))
    found = log_errors(b.set())
    assert by_code(found, "exception")


def test_healthy_log_gives_nothing() -> None:
    b = Builder()
    b.log("logs/api.log", [(T0 + i, "info", f"GET /orders/{i} 200") for i in range(100)])
    assert log_errors(b.set()) == []


def test_a_client_exception_about_a_failing_server_is_not_a_code_defect() -> None:
    b = Builder()
    msg = (
        "ERROR search.views: query failed: TransportError(503, 'search_phase_execution_exception', 'all shards failed')"
    )
    b.log("Pod/search/search-frontend-6d5f8b7c9d-dvlnp/app", [(T0 + i, "error", msg) for i in range(50)])
    found = log_errors(b.set())
    assert not causes(found)
    assert by_code(found, "errors")


def test_java_root_cause_is_the_last_caused_by() -> None:
    b = Builder()
    trace = (
        "java.lang.IllegalStateException: Failed to execute CommandLineRunner\n\tat org.springframework.boot.X.run(X.java:1)\n"  # noqa: E501 (an exact command or data line reads better whole)
        'Caused by: java.lang.NullPointerException: Cannot invoke "Settlement.id()" because "s" is null\n\tat com.acme.Y.z(Y.java:42)'  # noqa: E501 (an exact command or data line reads better whole)
    )
    b.log("Pod/payments/payments-worker-59d7f8c6b9-rd5n5/app", [(T0, "error", trace)])
    [cause] = causes(log_errors(b.set()))
    assert "NullPointerException" in cause.title


def test_duplicate_rows_are_bad_data() -> None:
    b = Builder()
    msg = 'ERROR: duplicate key value violates unique constraint "payments_pkey" DETAIL: Key (id)=(42) already exists.'
    b.log("logs/ledger-consumer.log", [(T0 + i, "error", msg) for i in range(30)])
    [cause] = causes(log_errors(b.set()))
    assert cause.code == "bad_data"


def test_a_single_exception_needs_a_symptom_to_stand() -> None:
    b = Builder()
    b.log(
        "logs/api.log", [(T0, "error", "KeyError: 'currency'")] + [(T0 + i, "info", "GET / 200") for i in range(1, 50)]
    )
    [cause] = causes(log_errors(b.set()))
    assert cause.score < 0.5


# ---------------------------------------------------------------- configuration changes quoted by errors


def _quote_errors(b: Builder, value: str) -> None:
    b.log(
        "datadog/quotes",
        [
            (T0 + 600 + i * 10, "error", f"quote failed: java.lang.IllegalArgumentException: bad mode {value}")
            for i in range(12)
        ],
        service="quotes",
    )


def test_errors_quoting_a_value_a_recent_flag_change_set_are_a_configuration_error() -> None:
    b = Builder()
    b.log("flags.csv", [(T0, None, "flag=quotes.mode actor=ci old_value=STRICT new_value=STRIKT")])
    _quote_errors(b, "STRIKT")
    found = log_errors(b.set())
    [cause] = causes(found)
    assert cause.code == "bad_config_value" and cause.category == "configuration_error"
    assert "quotes.mode" in cause.mechanism and "STRIKT" in cause.mechanism
    assert_refs_real(b.set(), found)


def test_a_setting_changed_in_prose_is_read_too() -> None:
    b = Builder()
    b.log("audit.log", [(T0, "info", "config key payments.endpoint changed from v1 to api-v9.internal by bob")])
    _quote_errors(b, "api-v9.internal")
    [cause] = causes(log_errors(b.set()))
    assert cause.code == "bad_config_value"


def test_an_exception_that_quotes_no_changed_value_stays_a_code_defect() -> None:
    b = Builder()
    b.log("flags.csv", [(T0, None, "flag=quotes.mode actor=ci old_value=STRICT new_value=LENIENT")])
    _quote_errors(b, "STRIKT")
    [cause] = causes(log_errors(b.set()))
    assert cause.category == "code_defect"


def test_a_change_long_before_the_errors_is_not_their_cause() -> None:
    b = Builder()
    b.log("flags.csv", [(T0 - 3 * 86400, None, "flag=quotes.mode old_value=STRICT new_value=STRIKT")])
    _quote_errors(b, "STRIKT")
    [cause] = causes(log_errors(b.set()))
    assert cause.category == "code_defect"


def test_rejected_rows_dead_letters_and_column_counts_are_bad_data() -> None:
    for msg in (
        "batch 17: rejected 312 rows from orders_2025-03-01.csv",
        "record at partition 4 offset 991 sent to dead-letter topic orders.DLT",
        "pandas.errors.ParserError: Error tokenizing data. C error: Expected 7 fields in line 88, saw 9",
        "feature 'price' contains NaN for 4,210 rows of supplier feed",
        "dbt: not_null test failed on column customer_id (48 rows)",
    ):
        b = Builder()
        b.log("etl.log", [(T0 + i, "error", msg) for i in range(5)], service="etl")
        [cause] = causes(log_errors(b.set()))
        assert cause.category == "data_quality", msg


def test_a_partition_that_arrived_empty_is_missing_data_not_the_consumers_code() -> None:
    from diagnosis.analyzers.logs import empty_input
    from diagnosis.investigate import investigate
    from tests.unit._evidence_builders import T0, Builder, assert_refs_real, causes

    b = Builder()
    b.log(
        "export-user-activity.log",
        [
            (T0, "info", "export_user_activity: dt=2025-04-15 query returned 42014551 rows"),
            (
                T0 + 86400,
                "info",
                "export_user_activity: wrote s3a://feats/dt=2025-04-16/part-0.parquet (0 rows, 1.2 KiB)",
            ),
        ],
    )
    b.log(
        "train-ranker-driver.log",
        [
            (T0 + 97000, "info", "FeatureLoader: dt=2025-04-15 rows=42014551"),
            (T0 + 97001, "warn", "FeatureLoader: dt=2025-04-16 rows=0 (partition is empty)"),
            (T0 + 99000, "error", "ModelGate: ranker rejected: AUC 0.5021 below gate 0.71"),
        ],
    )
    ev = b.set()
    found = empty_input(ev)
    [cause] = causes(found)
    assert cause.category == "data_quality" and "dt=2025-04-16" in cause.object and "0 rows" in cause.mechanism
    assert "service:train-ranker-driver" in cause.tags
    assert_refs_real(ev, found)
    assert investigate(ev).category == "data_quality"


def test_a_feed_that_is_always_small_has_no_empty_partition_fault() -> None:
    from diagnosis.analyzers.logs import empty_input
    from tests.unit._evidence_builders import T0, Builder

    b = Builder()
    b.log("job.log", [(T0, "info", "loaded dt=2025-04-15 rows=3"), (T0 + 60, "info", "loaded dt=2025-04-16 rows=0")])
    assert empty_input(b.set()) == []


def test_an_input_file_that_is_not_xml_in_the_expected_encoding_is_bad_data_naming_the_file() -> None:
    for msg in (
        "System.Xml.XmlException: Data at the root level is invalid. Line 1, position 1.",
        "org.xml.sax.SAXParseException; lineNumber: 1; columnNumber: 1; Content is not allowed in prolog.",
        "lxml.etree.XMLSyntaxError: Start tag expected, '<' not found, line 1, column 1",
        "Invalid byte 1 of 1-byte UTF-8 sequence.",
    ):
        b = Builder()
        b.log(
            "importer.log",
            [(T0 + 60 * i, "error", f"Failed to import orders_{i}.xml: {msg}") for i in range(5)],
            service="importer",
        )
        [cause] = causes(log_errors(b.set()))
        assert cause.code == "bad_data" and cause.category == "data_quality", msg
        assert "System.Xml" not in cause.mechanism.split(": '", 1)[0], "a namespace is no data file"


def test_a_rust_panic_is_an_exception_like_a_go_panic() -> None:
    b = Builder()
    lines: list[tuple[float, str | None, str]] = []
    for i in range(4):
        lines.append((T0 + i, "error", "thread 'tokio-runtime-worker' panicked at src/pricing/fuel.rs:212:48:"))
        lines.append((T0 + i, None, "called `Option::unwrap()` on a `None` value"))
    b.log("quote.log", lines, service="quote")
    [cause] = causes(log_errors(b.set()))
    assert cause.code == "exception" and cause.category == "code_defect"
    assert "Option::unwrap()" in cause.mechanism, "the line after 'panicked at' is what panicked"


def test_requests_refused_for_a_host_missing_from_the_allow_list_are_a_configuration_error() -> None:
    from diagnosis.analyzers.logs import host_not_allowed

    for msg, host, setting in (
        (
            "django.security.DisallowedHost: Invalid HTTP_HOST header: 'shop.new.example'.",
            "shop.new.example",
            "ALLOWED",
        ),
        (
            "[ActionDispatch::HostAuthorization::DefaultResponseApp] Blocked hosts: shop.new.example",
            "shop.new",
            "hosts",
        ),
        ("The host 'shop.new.example' does not match an allowed host.", "shop.new.example", "AllowedHosts"),
    ):
        b = Builder()
        b.log("web.log", [(T0 + i, "warn", msg) for i in range(5)], service="web")
        [cause] = causes(host_not_allowed(b.set()))
        assert cause.category == "configuration_error" and host in cause.title and setting in cause.title, msg
    b = Builder()
    b.log("web.log", [(T0, "warn", "Invalid HTTP_HOST header: 'scanner.example'.")], service="web")
    assert host_not_allowed(b.set()) == [], "one probe by a scanner is no outage"


def test_csv_with_another_delimiter_and_a_batch_refused_for_its_reject_share_are_bad_data() -> None:
    for msg in (
        "file m_0500.csv rejected: CSV error: record 1 (line: 2, byte: 131): found record with 1 fields, "
        "but the previous record has 14 fields",
        'header has 1 column(s), expected 14: "id;name;price"',
        "sync aborted: rejected share 96.4% above 5% threshold, nothing published",
    ):
        b = Builder()
        ok = [(T0 + 600 * i, "info", "loaded rows=1905 rejected=0") for i in range(6)]
        b.log("feed.log", ok + [(T0 + 3600 + 600 * i, "error", msg) for i in range(5)], service="feed")
        [cause] = causes(log_errors(b.set()))
        assert cause.code == "bad_data" and cause.category == "data_quality", msg


def test_bad_data_names_the_field_and_who_sent_it() -> None:
    b = Builder()
    lines = [(T0, "info", "fetched sftp://sftp.acmefreight.example/out/manifest_0450.csv bytes=2211")]
    lines += [
        (T0 + 5 + i, "error", f"row {i} of manifest_0450.csv rejected: null value in column \"dest_zip\" violates "
         "not-null constraint")
        for i in range(12)
    ]  # fmt: skip
    b.log("logs/loader.log", lines)
    [cause] = causes(log_errors(b.set()))
    assert cause.category == "data_quality"
    assert "in field dest_zip" in cause.mechanism and "from acmefreight" in cause.mechanism


def test_a_structured_feed_field_names_the_producer() -> None:
    b = Builder()
    b.log(
        "logs/indexer.log",
        [
            (T0 + i, "error", f"failed to parse field [price] of type [float] feed=supplier-nordic doc={i}")
            for i in range(9)
        ],
    )
    [cause] = causes(log_errors(b.set()))
    assert "in field price" in cause.mechanism and "from supplier-nordic" in cause.mechanism


def test_a_handful_of_errors_in_a_busy_log_is_background() -> None:
    b = Builder()
    lines = [(T0 + i * 30, "info", "GET /api/menu 200") for i in range(120)]
    lines += [(T0 + 3500, "error", "ResizeObserver loop completed with undelivered notifications.")]
    b.log("logs/web.log", sorted(lines))
    found = log_errors(b.set())
    assert not [f for f in found if f.role in ("cause", "symptom")]
    assert by_code(found, "errors_few")


def test_untimed_lines_under_an_error_in_a_timed_log_belong_to_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from diagnosis.bundle import load_bundle

    log = (
        "2026-01-11 01:31:21.1150|ERROR|EntityFrameworkCore.Database.Command|Failed executing DbCommand (30,012ms)\n"
        "SELECT [s].[Sku] FROM [dbo].[StockMovement] AS [s]\n"
        "Microsoft.Data.SqlClient.SqlException (0x80131904): Execution Timeout Expired.\n"
        "2026-01-11 01:31:22.0000|INFO|Api|GET /health 200\n"
    )
    (tmp_path / "app.log").write_text(log)
    recs = load_bundle(tmp_path).kind("log")[0].data["records"]
    assert len(recs) == 2 and "Execution Timeout Expired" in recs[0]["msg"]


def test_a_pool_full_of_threads_waiting_on_a_slow_dependency_is_its_symptom() -> None:
    from diagnosis.analyzers.logs import app_capacity

    b = Builder()
    lines = [(T0 + i, "error", "rates call failed: java.net.SocketTimeoutException: Read timed out (carrier-hub:443)")
             for i in range(5)]  # fmt: skip
    lines += [(T0 + 60 + i, "warn", "Thread pool is exhausted: active=64/64 queued=500") for i in range(5)]
    b.log("logs/tidewrack.log", lines)
    [f] = app_capacity(b.set())
    assert f.role == "symptom"
    b = Builder()
    b.log("logs/php-fpm.log", [(T0 + i, "warn", "server reached pm.max_children setting (24)") for i in range(5)])
    [f] = app_capacity(b.set())
    assert f.role == "cause"
