"""Stop 27: query results pasted from SQL clients (boxed, aligned, unicode boxes, CSV heads) read as tables, and a
key whose value broke away from its own steady history named as a data fault."""

from __future__ import annotations

import time
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.tables import result_tables
from diagnosis.investigate import investigate
from diagnosis.model import Category
from diagnosis.timeline import fmt_ts

BQ = """analyst@cloudshell:~ (prod)$ bq query --use_legacy_sql=false --format=pretty '
SELECT table_name, partition_id, total_rows FROM `prod.crm.INFORMATION_SCHEMA.PARTITIONS`
WHERE table_name IN ("contacts_de","contacts_fr") ORDER BY 1, 2'
+-------------+--------------+------------+
| table_name  | partition_id | total_rows |
+-------------+--------------+------------+
| contacts_de | 20250301     |     812004 |
| contacts_de | 20250302     |     812990 |
| contacts_de | 20250303     |     813412 |
| contacts_de | 20250304     |          0 |
| contacts_fr | 20250301     |     640113 |
| contacts_fr | 20250302     |     640870 |
| contacts_fr | 20250303     |     641002 |
| contacts_fr | 20250304     |     641577 |
+-------------+--------------+------------+
"""

PSQL = """fx=> SELECT currency, rate, valid_from FROM fx_rates ORDER BY currency, valid_from;
 currency |   rate   |       valid_from
----------+----------+------------------------
 CHF      |   0.9312 | 2025-03-01 06:00:00+00
 CHF      |   0.9301 | 2025-03-02 06:00:00+00
 CHF      |   0.9320 | 2025-03-03 06:00:00+00
 SEK      |  11.5415 | 2025-03-01 06:00:00+00
 SEK      |   0.0000 | 2025-03-02 06:00:00+00
 SEK      |  11.5590 | 2025-03-03 06:00:00+00
(6 rows)
"""

DUCKDB = """D SELECT day, COUNT(*) AS n FROM events GROUP BY 1 ORDER BY 1;
┌────────────┬───────┐
│    day     │   n   │
│    date    │ int64 │
├────────────┼───────┤
│ 2025-03-01 │ 10211 │
│ 2025-03-02 │ 10305 │
│ 2025-03-03 │ 10190 │
└────────────┴───────┘
"""


def test_pasted_result_tables_are_read_with_the_query_above_them() -> None:
    tables, covered = result_tables(BQ + "\n" + PSQL + "\n" + DUCKDB)
    assert [len(rows) for _, rows in tables] == [8, 6, 3]
    assert "INFORMATION_SCHEMA.PARTITIONS" in tables[0][0] and tables[0][1][3]["total_rows"] == "0"
    assert tables[1][1][4] == {"currency": "SEK", "rate": "0.0000", "valid_from": "2025-03-02 06:00:00+00"}
    assert tables[2][1][0] == {"day": "2025-03-01", "n": "10211"}  # DuckDB's row of column types is not a row
    assert covered > 20


def test_an_emptied_partition_of_one_table_is_a_data_fault_named_by_table_and_column(tmp_path: Path) -> None:
    (tmp_path / "checks.txt").write_text(BQ)
    d = investigate(load_bundle(tmp_path), "contact counts dropped in the CRM dashboard, did the sync job break?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "contacts_de" in d.root_cause and "total_rows" in d.root_cause
    assert "contacts_fr" not in d.root_cause.split("rest of the table")[0]


def test_a_rate_of_zero_for_one_key_between_steady_values_is_a_data_fault(tmp_path: Path) -> None:
    (tmp_path / "fx.txt").write_text(PSQL)
    d = investigate(load_bundle(tmp_path), "SEK bookings failed yesterday morning, what caused it?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "SEK" in d.root_cause and "rate" in d.root_cause


def test_a_drop_every_key_shows_on_the_same_day_is_not_one_sources_data_fault(tmp_path: Path) -> None:
    both = BQ.replace("|     641577 |", "|          0 |")
    (tmp_path / "checks.txt").write_text(both)
    d = investigate(load_bundle(tmp_path), "contact counts dropped in the CRM dashboard, did the sync job break?")
    assert d.category != Category.DATA_QUALITY, d.root_cause


def test_noisy_per_row_amounts_are_not_a_break(tmp_path: Path) -> None:
    rows = "\n".join(
        f"| R{1000 + i} | 2025-03-0{1 + i // 4} 1{i % 10}:00:00 | {amount:>8.2f} |"
        for i, amount in enumerate([12.0, 340.5, 18.2, 1250.0, 9.99, 410.0, 23.5, 3.2])
    )
    text = f"mysql> SELECT number, created_at, total FROM orders LIMIT 8;\n+-------+------+-------+\n" \
           f"| number | created_at | total |\n+-------+------+-------+\n{rows}\n+-------+------+-------+\n"  # fmt: skip
    (tmp_path / "orders.txt").write_text(text)
    ev = load_bundle(tmp_path)
    assert [i.kind for i in ev] == ["table"]
    d = investigate(ev, "are order totals wrong?")
    assert d.category != Category.DATA_QUALITY, d.root_cause


def test_a_fault_count_one_key_holds_by_the_hundred_is_a_data_fault(tmp_path: Path) -> None:
    text = """+---------+-------+--------------------+
| CARRIER | ROWS  | UNPARSED_EVENT_TIME |
|---------+-------+--------------------|
| DHX     |  6120 |                  0 |
| FRT     |  2388 |                  0 |
| LTL     |   402 |                  0 |
| SKY     |  5011 |               4212 |
+---------+-------+--------------------+
4 Row(s) produced. Time Elapsed: 2.611s
"""
    (tmp_path / "snowsql.txt").write_text(text)
    d = investigate(load_bundle(tmp_path), "on-time delivery fell overnight, why?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "SKY" in d.root_cause and "UNPARSED_EVENT_TIME" in d.root_cause


def test_a_csv_head_of_no_other_shape_is_a_table_and_steady_tables_are_no_fault(tmp_path: Path) -> None:
    (tmp_path / "rates.csv").write_text("currency,rate,source\nUSD,1.05,ECB\nGBP,0.83,ECB\nCHF,0.93,ECB\n")
    (tmp_path / "a.txt").write_text(DUCKDB)
    (tmp_path / "b.txt").write_text(DUCKDB.replace("events", "clicks"))
    ev = load_bundle(tmp_path)
    assert sorted(i.kind for i in ev) == ["table", "table", "table"] and not ev.ignored
    d = investigate(ev, "is the events pipeline ok?")
    assert d.category == Category.HEALTHY, d.root_cause


# ---------------------------------------------------------------- stop 27, dev23: formats and rules


def test_prepared_statements_lost_between_server_connections_are_the_poolers_mode(tmp_path: Path) -> None:
    lines = [
        f"2025-03-04 14:{10 + i:02d}:00.000 ERROR 1 --- [nio-8080-exec-{i}] o.h.e.j.s.SqlExceptionHelper : "
        f'ERROR: prepared statement "S_{i}" does not exist'
        for i in range(6)
    ]
    (tmp_path / "api.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why is invoicing-api returning 500s?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "pool_mode" in d.root_cause and "transaction" in d.root_cause


AUDIT = """type=PATH msg=audit(11/07/2024 09:04:12.556:5531) : item=0 name=/srv/media/a/hero.webp obj=unconfined_u:object_r:default_t:s0
type=SYSCALL msg=audit(11/07/2024 09:04:12.556:5531) : arch=x86_64 syscall=openat success=no exit=EACCES(Permission denied) comm=nginx
type=AVC msg=audit(11/07/2024 09:04:12.556:5531) : avc:  denied  { read } for  pid=2211 comm=nginx name=hero.webp scontext=system_u:system_r:httpd_t:s0 tcontext=unconfined_u:object_r:default_t:s0 tclass=file permissive=0
type=AVC msg=audit(1730970300.120:5540): avc:  denied  { read } for  pid=2212 comm="nginx" name="b.webp" scontext=system_u:system_r:httpd_t:s0 tcontext=unconfined_u:object_r:default_t:s0 tclass=file permissive=0
"""  # noqa: E501


def test_selinux_denials_in_audit_records_are_the_files_labels(tmp_path: Path) -> None:
    (tmp_path / "ausearch.txt").write_text(AUDIT)
    ev = load_bundle(tmp_path)
    (item,) = ev.kind("log")
    assert item.data["records"][0]["msg"].startswith("SELinux denied read to nginx (httpd_t) on /srv/media/a/hero.webp")
    d = investigate(ev, "images return 403 but permissions look fine, why?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "SELinux" in d.root_cause and "default_t" in d.root_cause


def test_permissive_selinux_denials_are_not_a_cause(tmp_path: Path) -> None:
    (tmp_path / "ausearch.txt").write_text(AUDIT.replace("permissive=0", "permissive=1"))
    d = investigate(load_bundle(tmp_path), "images return 403, why?")
    assert "SELinux" not in d.root_cause


def test_ibm_mq_error_log_entries_are_records_with_their_utc_time_and_severity(tmp_path: Path) -> None:
    (tmp_path / "AMQERR01.LOG").write_text(
        "----- amqlcelp.c : 1210 ------------------------------------------------------\n"
        "11/05/2024 10:21:14 AM - Process(123.1) User(mqm) Program(amqzmuc0)\n"
        "                    Host(aixmq01) Installation(Installation1)\n"
        "                    VRMF(9.3.0.10) QMgr(QMORD01)\n"
        "                    Time(2024-11-05T09:21:14.118Z)\n\n"
        "AMQ6708E: A disk full condition was encountered when formatting a new log file in location\n"
        "'/var/mqm/log/QMORD01/active/'.\n\nEXPLANATION:\nThe queue manager attempted to format a new log file.\n"
    )
    (item,) = load_bundle(tmp_path).kind("log")
    (rec,) = item.data["records"]
    assert item.object == "mq/QMORD01" and rec["level"] == "error"
    assert rec["msg"].startswith("AMQ6708E: A disk full condition") and "/var/mqm/log/QMORD01/active/" in rec["msg"]
    assert rec["ts"] == 1730798474.118


def test_a_thread_dump_cut_down_to_some_threads_is_still_a_thread_dump(tmp_path: Path) -> None:
    frames = (
        "\tat java.util.HashMap$TreeNode.balanceInsertion(HashMap.java:2330)\n"
        "\tat java.util.HashMap.put(HashMap.java:610)\n\tat com.example.FieldCache.get(FieldCache.java:58)\n"
    )
    dump = "".join(
        f'"worker-{i}" #4{i} prio=5 os_prio=0 cpu=553140.11ms tid=0x00007f3c9c0a180{i} nid={i} runnable\n'
        f"   java.lang.Thread.State: RUNNABLE\n{frames}\n"
        for i in range(4)
    )
    (tmp_path / "td.txt").write_text("[ops@idx01 ~]$ jcmd 41877 Thread.print | grep -A 14 worker\n" + dump)
    ev = load_bundle(tmp_path)
    assert not ev.ignored, ev.ignored
    d = investigate(ev, "the indexer is pegged at 400% CPU, more cores?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "HashMap" in d.root_cause


def test_a_file_in_another_character_set_than_the_reader_expects_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "task.log").write_text(
        "[2024-09-11T04:10:02.101+0000] {taskinstance.py:441} ERROR - Task failed with exception\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/airflow/dags/load.py", line 41, in load_catalog\n'
        "duckdb.duckdb.InvalidInputException: Invalid Input Error: Error in file "
        '"/data/in/catalog_20240911.csv" at line 2: Invalid unicode (byte sequence mismatch) detected.\n'
    )
    d = investigate(load_bundle(tmp_path), "why is load_catalog failing since this morning?")
    assert d.category == Category.DATA_QUALITY, d.root_cause


def test_a_memory_quota_is_not_a_rate_limit() -> None:
    from diagnosis.analyzers._common import RATE_LIMITED

    assert not RATE_LIMITED.search("heroku[web.1]: Error R14 (Memory quota exceeded)")
    assert RATE_LIMITED.search("googleapi: Error 403: Quota exceeded for quota metric 'Queries'")


def test_the_last_san_path_of_a_multipath_disk_failing_is_infrastructure(tmp_path: Path) -> None:
    (tmp_path / "messages.txt").write_text(
        "Jun  3 14:21:07 erpdb01 qlc: [ID 630585 kern.info] NOTICE: Qlogic qlc(1): Link OFFLINE\n"
        + "".join(
            f"Jun  3 14:21:27 erpdb01 genunix: [ID 408114 kern.info] /scsi_vhci/disk@g6005076{i} (sd1{i}) "
            f"multipath status: failed: path {i} fp1/disk@w500507680c11a2b4,{i} is offline\n"
            for i in range(4)
        )
    )
    d = investigate(load_bundle(tmp_path), "why has the ERP database been down since 14:21?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "multipath status: failed" in d.root_cause


def test_a_heroku_router_timeout_names_no_dependency() -> None:
    from diagnosis.analyzers.network.extraction import _call_failure

    line = 'heroku[router]: at=error code=H12 desc="Request timeout" method=GET path="/v2/p" host=api.shop.com'
    assert _call_failure(line) is None
    assert (
        _call_failure("upstream timed out (110: Connection timed out) while reading, upstream: http://pay:80")
        == "timeout"
    )


def test_a_post_mortem_of_a_dependency_that_failed_and_came_back_names_it(tmp_path: Path) -> None:
    t0 = 1720490400.0  # 2024-07-09 02:00:00Z
    lines = []
    # errors 02:10-02:40, the log goes on quietly to 03:00 (a log that ends with its errors says nothing of after)
    for i in range(121):
        t = t0 + 30 * i
        stamp = fmt_ts(t).replace("T", " ").removesuffix("Z")
        if 20 <= i < 80:
            lines.append(
                f"{stamp},100 ERROR [gw.providers.psp] req=r{i} authorize failed: upstream status=503 "
                f'body={{"error":"service_unavailable"}} attempt=3/3'
                if i % 2
                else f"{stamp},100 ERROR [gw.providers.psp] req=r{i} authorize failed: "
                "requests.exceptions.ReadTimeout: "
                "HTTPSConnectionPool(host='api.psp.example', port=443): Read timed out. (read timeout=8)"
            )
        else:
            lines.append(f"{stamp},100 INFO [gw.api.charges] req=r{i} charge authorized psp=psp ms=240")
    (tmp_path / "web.stdout.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "events.txt").write_text(
        "2024-07-09 02:11:21    WARN    Environment health has transitioned from Ok to Warning.\n"
        "2024-07-09 02:43:29    INFO    Environment health has transitioned from Warning to Ok.\n"
        "2024-07-09 03:02:44    INFO    Removed instance [i-0c93e8b2d41fa7760] from your environment.\n"
    )
    d = investigate(load_bundle(tmp_path), "post-mortem: why did payments-gw go Severe between 02:10 and 02:40?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "api.psp.example" in d.root_cause and "read as of its end" in d.root_cause


def test_a_level_that_fell_a_hundredfold_and_stayed_is_a_data_fault(tmp_path: Path) -> None:
    gross = [411872.31, 426104.77, 338215.40, 331907.12, 418220.64, 209883.52, 4237.18, 4171.96]
    rows = "\n".join(f"| 2024-03-{7 + i:02d}  |   18214 | {g:>11.2f} |" for i, g in enumerate(gross))
    (tmp_path / "revenue.txt").write_text(
        "SELECT charge_date, COUNT(*) AS charges, SUM(gross_amount_usd) AS gross_usd FROM FCT_CHARGES GROUP BY 1;\n"
        "+-------------+---------+-------------+\n| CHARGE_DATE | CHARGES |   GROSS_USD |\n"
        f"|-------------+---------+-------------|\n{rows}\n+-------------+---------+-------------+\n"
    )
    d = investigate(load_bundle(tmp_path), "why does revenue show 1% of normal while charge counts are normal?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "GROSS_USD" in d.root_cause and "2024-03-13" in d.root_cause


def test_an_identity_provider_refusing_a_clients_redirect_uri_is_the_clients_configuration(tmp_path: Path) -> None:
    lines = [
        f'2025-02-12 02:{10 + i:02d}:13,560 WARN  [org.keycloak.events] (executor-thread-30) type="LOGIN_ERROR", '
        f'realmName="customers", clientId="portal-web", userId="null", error="invalid_redirect_uri", '
        f'redirect_uri="https://www.example.com/login/callback"'
        for i in range(8)
    ]
    (tmp_path / "keycloak.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why can't customers log in to the portal?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "portal-web" in d.root_cause and "invalid_redirect_uri" in d.root_cause
    wrong_password = [line.replace("invalid_redirect_uri", "invalid_user_credentials") for line in lines]
    (tmp_path / "keycloak.log").write_text("\n".join(wrong_password) + "\n")
    d = investigate(load_bundle(tmp_path), "why can't customers log in to the portal?")
    assert "redirect" not in d.root_cause


def test_an_sdk_error_carrying_a_5xx_status_is_the_vendors_failure(tmp_path: Path) -> None:
    import json

    recs = []
    for i in range(12):
        err = {
            "type": "StripeAPIError",
            "message": "An unknown error occurred",
            "stack": "StripeAPIError: An unknown error occurred\n    at generateV1Error (/app/node_modules/stripe/cjs/"
            "Error.js:10:20)\n    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)",
            "statusCode": 500,
        }
        recs.append({"level": 50, "time": 1726585838000 + 20000 * i, "msg": "stripe paymentIntents.create failed",
                     "err": err})  # fmt: skip
    (tmp_path / "checkout.log").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    d = investigate(load_bundle(tmp_path), "checkout confirm returns 502s, what broke?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert d.root_cause.startswith("Stripe is failing") and "task_queues" not in d.root_cause


def test_call_targets_from_a_vendor_sdk_error_and_a_failed_exchange() -> None:
    from diagnosis.analyzers.network.extraction import _target

    assert _target("token exchange with auth0 failed: AxiosError: timeout of 5000ms exceeded") == "auth0"
    assert _target("payment failed: TwilioRestException: HTTP 503 error") == "Twilio"
    assert _target("failed: HttpClientError: boom") is None
    assert _target("at process.processTicksAndRejections (node:internal/process/task_queues:95:5)") is None


def test_a_named_target_port_no_pod_declares_is_the_services_configuration(tmp_path: Path) -> None:
    import json

    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ledger-api", "namespace": "ledger"},
           "spec": {"selector": {"app": "ledger-api"}, "ports": [{"port": 8080, "targetPort": "http"}]}}  # fmt: skip
    ep = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "ledger-api", "namespace": "ledger"},
          "subsets": []}  # fmt: skip
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"ledger-api-84f6b9c7d5-{s}",
                "namespace": "ledger",
                "labels": {"app": "ledger-api"},
                "creationTimestamp": "2025-05-06T09:58:10Z",
            },
            "spec": {"containers": [{"name": "ledger-api", "ports": [{"name": "http-api", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for s in ("a1b2c", "d3e4f")
    ]
    (tmp_path / "objects.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [svc, ep, *pods]}))
    d = investigate(load_bundle(tmp_path), "ledger API returns 503 since the release, pods look fine - what is wrong?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "'http'" in d.root_cause and "http-api" in d.root_cause


def test_a_failover_wrapped_in_the_instances_own_patch_events_is_planned(tmp_path: Path) -> None:
    import json

    def ev(t: str, msg: str, cats: list[str]) -> dict:
        return {"SourceIdentifier": "billing-pg", "SourceType": "db-instance", "Message": msg, "EventCategories": cats,
                "Date": t, "SourceArn": "arn:aws:rds:eu-west-1:1:db:billing-pg"}  # fmt: skip

    events = [
        ev("2024-03-12T03:01:02Z", "Applying off-line patches to DB instance", ["maintenance"]),
        ev("2024-03-12T03:03:58Z", "Multi-AZ instance failover started.", ["failover"]),
        ev("2024-03-12T03:04:52Z", "Multi-AZ instance failover completed.", ["failover"]),
        ev("2024-03-12T03:09:40Z", "Finished applying off-line patches to DB instance", ["maintenance"]),
    ]
    (tmp_path / "rds-events.json").write_text(json.dumps({"Events": events}))
    d = investigate(load_bundle(tmp_path), "billing paged for DB connection errors at 03:04 - is billing still broken?")
    assert d.category == Category.HEALTHY, d.root_cause
    (tmp_path / "rds-events.json").write_text(json.dumps({"Events": events[1:3]}))
    d = investigate(load_bundle(tmp_path), "billing paged for DB connection errors at 03:04 - is billing still broken?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause


def test_a_spring_page_not_found_is_no_dns_failure() -> None:
    from diagnosis.analyzers._common import DNS_NXDOMAIN

    assert not DNS_NXDOMAIN.search("WARN o.s.web.servlet.PageNotFound : No mapping for GET /favicon.ico")
    assert DNS_NXDOMAIN.search("Error: getaddrinfo ENOTFOUND payments.internal")


def test_uploads_nginx_refuses_as_too_large_are_its_body_size_limit(tmp_path: Path) -> None:
    lines = [
        f"2025/04/08 09:{40 + i:02d}:38 [error] 2283#2281: *8845{i} client intended to send too large body: "
        f'{1581464 + i * 100000} bytes, client: 192.0.2.7, server: docs.example.com, request: "POST /api/v1/documents '
        'HTTP/1.1", host: "docs.example.com"'
        for i in range(5)
    ]
    (tmp_path / "error.log").write_text("\n".join(lines) + "\n")
    d = investigate(
        load_bundle(tmp_path), "customers can't upload documents larger than 1 MB since this morning - why?"
    )
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "client_max_body_size" in d.root_cause and "413" in d.root_cause


def test_a_compute_engine_host_error_in_operations_is_the_vms_host(tmp_path: Path) -> None:
    import json

    ops = [
        {
            "operationType": "compute.instances.hostError",
            "targetLink": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/gke-pool-k2vd",
            "status": "DONE",
            "insertTime": "2025-08-13T20:11:58.402-07:00",
            "statusMessage": "Instance terminated by Compute Engine.",
        },
        {
            "operationType": "delete",
            "targetLink": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/gke-pool-k2vd",
            "status": "DONE",
            "insertTime": "2025-08-13T20:41:43.551-07:00",
            "statusMessage": "Instance deleted by the node auto-repair of its pool.",
        },
    ]
    (tmp_path / "operations.json").write_text(json.dumps(ops))
    ev = load_bundle(tmp_path)
    (item,) = ev.kind("log")
    msg = item.data["records"][0]["msg"]
    assert msg == "compute.instances.hostError gke-pool-k2vd: Instance terminated by Compute Engine."
    d = investigate(ev, "post-mortem: search degraded overnight around 03:12 UTC - what happened?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "gke-pool-k2vd" in d.root_cause


def test_ingress_timeouts_to_the_asked_about_services_own_pods_are_missing_evidence(tmp_path: Path) -> None:
    import json

    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"checkout-7f6d5c8b9-{s}", "namespace": "shop", "labels": {"app": "checkout"}},
            "spec": {"containers": [{"name": "checkout", "ports": [{"containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for s, ip in (("4kx2p", "10.30.27.128"), ("9qz7m", "10.30.43.244"))
    ]
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": pods}))
    lines = [
        f"2025/10/21 16:{10 + i:02d}:31 [error] 31#31: *42565{i} upstream timed out (110: Operation timed out) while "
        f'reading response header from upstream, client: 73.169.196.176, server: shop.example.com, request: "POST '
        f'/api/checkout HTTP/2.0", upstream: "http://{("10.30.27.128", "10.30.43.244")[i % 2]}:8080/api/checkout", '
        'host: "shop.example.com"'
        for i in range(10)
    ]
    (tmp_path / "logs" / "ingress-nginx").mkdir(parents=True)
    (tmp_path / "logs" / "ingress-nginx" / "ingress-nginx-controller-6b9d7c8f5-vx2kq.log").write_text("\n".join(lines))
    d = investigate(load_bundle(tmp_path), "why are about a quarter of checkouts timing out with 504?")
    assert d.category == Category.UNKNOWN, d.root_cause


def _jaeger(n_children: int) -> dict:
    t0 = 1750170438412000
    root = {"traceID": "c963cfe0afae5a3b", "spanID": "a0", "operationName": "GET /products/{id}", "references": [],
            "startTime": t0, "duration": 1844000, "processID": "p1", "tags": []}  # fmt: skip
    kids = [
        {
            "traceID": "c963cfe0afae5a3b",
            "spanID": f"b{i}",
            "operationName": "SELECT catalog.variants",
            "references": [{"refType": "CHILD_OF", "traceID": "c963cfe0afae5a3b", "spanID": "a0"}],
            "startTime": t0 + 3000 + 38000 * i,
            "duration": 37000,
            "processID": "p1",
            "tags": [{"key": "db.system", "type": "string", "value": "postgresql"}],
        }
        for i in range(n_children)
    ]
    return {"data": [{"traceID": "c963cfe0afae5a3b", "spans": [root, *kids],
                      "processes": {"p1": {"serviceName": "catalog-service", "tags": []}}}]}  # fmt: skip


def test_one_query_per_item_in_a_traced_request_is_an_n_plus_one_defect(tmp_path: Path) -> None:
    import json

    (tmp_path / "trace.json").write_text(json.dumps(_jaeger(40)))
    d = investigate(load_bundle(tmp_path), "why was /products/{id} p99 at 2s this afternoon?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "SELECT catalog.variants" in d.root_cause and "N+1" in d.root_cause
    (tmp_path / "trace.json").write_text(json.dumps(_jaeger(3)))
    d = investigate(load_bundle(tmp_path), "why was /products/{id} p99 at 2s this afternoon?")
    assert "N+1" not in d.root_cause


def test_a_fault_share_one_key_holds_while_every_other_holds_none_is_a_data_fault(tmp_path: Path) -> None:
    (tmp_path / "bq.txt").write_text(
        "+-------------+----------+---------+------------+\n"
        "| app_version | platform | events  | pct_future |\n"
        "+-------------+----------+---------+------------+\n"
        "| 7.3.2       | ios      | 4182231 |        0.0 |\n"
        "| 7.4.0       | android  | 3906417 |      41.87 |\n"
        "| 7.3.2       | android  | 1288902 |        0.0 |\n"
        "| 7.3.1       | ios      |  402118 |        0.0 |\n"
        "+-------------+----------+---------+------------+\n"
    )
    d = investigate(load_bundle(tmp_path), "why did sessions_daily jump since May 20?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "7.4.0/android" in d.root_cause and "pct_future" in d.root_cause


def test_a_column_of_terms_that_changed_from_one_load_on_is_a_data_fault(tmp_path: Path) -> None:
    table = (
        "+------------+---------------+----+----------+\n| rate_date  | base_currency | n  | usd_rate |\n"
        "+------------+---------------+----+----------+\n"
        "| 2025-02-28 | EUR           | 31 |   1.0398 |\n| 2025-03-01 | EUR           | 31 |   1.0398 |\n"
        "| 2025-03-02 | EUR           | 31 |   1.0465 |\n| 2025-03-03 | USD           | 31 |   1.0000 |\n"
        "+------------+---------------+----+----------+\n"
    )
    (tmp_path / "bq.txt").write_text(table)
    d = investigate(load_bundle(tmp_path), "revenue for 3 March is 5% above the settlement - did the upgrade break it?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "base_currency changed from EUR to USD on 2025-03-03" in d.root_cause
    (tmp_path / "bq.txt").write_text(table.replace("base_currency", "status       "))
    d = investigate(load_bundle(tmp_path), "revenue for 3 March is 5% above the settlement - did the upgrade break it?")
    assert "changed from" not in d.root_cause


def test_nginx_asking_for_a_socket_an_upgrade_renamed_is_its_configuration(tmp_path: Path) -> None:
    lines = [
        f"2025/07/14 07:{10 + 7 * i:02d}:55 [crit] 22109#22109: *{i} connect() to unix:/run/php/php7.4-fpm.sock failed "
        "(2: No such file or directory) while connecting to upstream, client: 10.4.8.51, server: helpdesk, request: "
        '"GET /scp/ HTTP/2.0", upstream: "fastcgi://unix:/run/php/php7.4-fpm.sock:", host: "helpdesk"'
        for i in range(4)
    ]
    (tmp_path / "nginx-error.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "php8.2-fpm.log").write_text(
        "[14-Jul-2025 06:40:02] NOTICE: fpm is running, pid 2210977\n"
        "[14-Jul-2025 06:40:02] NOTICE: ready to handle connections\n"
        "[14-Jul-2025 06:40:02] NOTICE: systemd monitor interval set to 10000ms\n"
    )
    d = investigate(load_bundle(tmp_path), "why does the helpdesk portal answer 502 since this morning?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "/run/php/php7.4-fpm.sock" in d.root_cause and "php8.2-fpm" in d.root_cause
    (tmp_path / "php8.2-fpm.log").unlink()
    d = investigate(load_bundle(tmp_path), "why does the helpdesk portal answer 502 since this morning?")
    assert "socket setting" not in d.root_cause


def test_a_write_refused_on_a_read_only_file_system_is_no_full_disk_and_db_api_errors_no_bug() -> None:
    from diagnosis.analyzers._common import PG_STORAGE
    from diagnosis.analyzers.logs._shared import REMOTE_FAILURE

    assert not PG_STORAGE.search('PANIC:  could not write to file "pg_wal/xlogtemp.1": Read-only file system')
    assert PG_STORAGE.search('could not write to file "pg_wal/xlogtemp.1": No space left on device')
    assert REMOTE_FAILURE.search("django.db.utils.OperationalError: connection to server failed")


def test_a_count_four_times_its_tight_history_is_a_break(tmp_path: Path) -> None:
    (tmp_path / "stock.txt").write_text(
        "+------------+--------------+-------+\n| day        | out_of_stock | skus  |\n"
        "+------------+--------------+-------+\n| 2025-10-01 |          402 | 24090 |\n"
        "| 2025-10-02 |          398 | 24101 |\n| 2025-10-03 |          411 | 24108 |\n"
        "| 2025-10-06 |         2247 | 24131 |\n+------------+--------------+-------+\n"
    )
    d = investigate(load_bundle(tmp_path), "why do 1,800 products show sold out since this morning?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "out_of_stock = 2,247 on 2025-10-06" in d.root_cause


def test_application_insights_dependency_rows_that_failed_name_the_failing_target(tmp_path: Path) -> None:
    import json

    cols = [{"name": n, "type": t} for n, t in (("TimeGenerated", "datetime"), ("Target", "string"),
            ("ResultCode", "string"), ("Calls", "long"), ("Failed", "long"))]  # fmt: skip
    rows = []
    for i in range(6):
        t = f"2025-11-04T15:{10 * i:02d}:00Z"
        rows += [
            [t, "sql-orders.database.windows.net", "0", 2500, 0],
            [t, "api.carrierhub.example.net", "504", 400, 400],
        ]
    (tmp_path / "deps.json").write_text(
        json.dumps({"tables": [{"name": "PrimaryResult", "columns": cols, "rows": rows}]})
    )
    d = investigate(load_bundle(tmp_path), "why is the carrier-sync queue backing up since 15:05?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert d.root_cause.startswith("api.carrierhub.example.net is failing")


def test_a_kafka_connect_task_failed_on_a_record_its_sink_refuses_is_bad_input(tmp_path: Path) -> None:
    import json

    trace = (
        "org.apache.kafka.connect.errors.ConnectException: Exiting WorkerSinkTask due to unrecoverable exception.\n"
        "\tat org.apache.kafka.connect.runtime.WorkerSinkTask.deliverMessages(WorkerSinkTask.java:632)\n"
        "Caused by: ElasticsearchException[Elasticsearch exception [type=document_parsing_exception, reason=[1:388] "
        "failed to parse field [shipping.weight] of type [float] in document with id 'SKU-4471902']]\n"
    )
    status = {"name": "es-sink-catalog", "connector": {"state": "RUNNING", "worker_id": "10.42.3.17:8083"},
              "tasks": [{"id": i, "state": "FAILED", "worker_id": "10.42.3.17:8083", "trace": trace} for i in (0, 1)]
              + [{"id": 2, "state": "RUNNING", "worker_id": "10.42.3.18:8083"}]}  # fmt: skip
    (tmp_path / "connect-status.json").write_text(json.dumps(status))
    ev = load_bundle(tmp_path)
    (item,) = ev.kind("log")
    assert item.object == "kafka-connect/es-sink-catalog" and [r["level"] for r in item.data["records"]] == [
        "info", "error", "error", "info"]  # fmt: skip
    d = investigate(ev, "why are search results showing stale prices since 08:15?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "shipping.weight" in d.root_cause


def test_a_cassandra_driver_set_to_another_datacenter_is_its_configuration(tmp_path: Path) -> None:
    warn = (
        "2025-11-04 10:02:35.071  WARN 1 --- [     s0-admin-1] .o.d.i.c.l.h.OptionalLocalDcHelper       : "
        "[s0|default] You specified dc1 as the local DC, but some contact points are from a different DC: "
        "Node(endPoint=/10.30.4.11:9042, hostId=8e1f3c20, hashCode=5a1e2b3c)=eu-west-1"
    )
    errors = [
        f"2025-11-04 10:{5 + i:02d}:00.091 ERROR 1 --- [   scheduling-1] c.a.ledger.jobs.ReconcileJob             : "
        "reconcile tick failed: com.datastax.oss.driver.api.core.NoNodeAvailableException: No node was available to "
        "execute the query"
        for i in range(6)
    ]
    (tmp_path / "ledger-api.log").write_text("\n".join([warn, *errors]) + "\n")
    d = investigate(load_bundle(tmp_path), "ledger-api answers 503 since the cutover to the new Cassandra cluster")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "local-datacenter = dc1" in d.root_cause and "eu-west-1" in d.root_cause


def test_a_dynamodb_index_throttling_writes_from_none_to_many_is_its_capacity(tmp_path: Path) -> None:
    import json

    t0 = 1746536400  # 2025-05-06 13:00:00Z
    stamps = [t0 + 300 * i for i in range(12)]
    values = [0.0] * 8 + [820.0, 1818.0, 2025.0, 1960.0]
    resp = {"MetricDataResults": [{"Id": "m1", "Label": "WriteThrottleEvents shipment-events gsi-carrier-status",
            "Timestamps": [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) for t in reversed(stamps)],
            "Values": list(reversed(values)), "StatusCode": "Complete"}], "Messages": []}  # fmt: skip
    (tmp_path / "cw.json").write_text(json.dumps(resp))
    d = investigate(load_bundle(tmp_path), "why is shipment-tracker returning 5xx on POST /api/carrier-events?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "gsi-carrier-status" in d.root_cause


def test_an_azure_resource_health_host_failure_is_the_vms_host(tmp_path: Path) -> None:
    import json

    rid = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-tsdb-01"
    events = [
        {"category": {"value": "ResourceHealth"}, "eventTimestamp": "2025-02-27T04:12:31.440Z", "level": "Critical",
         "description": "We're sorry, your virtual machine isn't available because an unexpected failure on the host "
         "server. Azure is investigating the problem.", "resourceId": rid},
        {"category": {"value": "ResourceHealth"}, "eventTimestamp": "2025-02-27T04:22:05.117Z",
         "level": "Informational", "description": "There aren't any known Azure platform problems affecting this "
         "virtual machine.", "resourceId": rid},
    ]  # fmt: skip
    (tmp_path / "activity.json").write_text(json.dumps(events))
    d = investigate(load_bundle(tmp_path), "why did telemetry ingestion stop between 04:12 and 04:22?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "vm-tsdb-01" in d.root_cause


def test_an_hpa_at_its_ceiling_far_over_its_target_is_the_workloads_capacity(tmp_path: Path) -> None:
    import json

    target = {"type": "Utilization", "averageUtilization": 65}
    spec = {"scaleTargetRef": {"kind": "Deployment", "name": "search-api"}, "minReplicas": 4, "maxReplicas": 12,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": target}}]}  # fmt: skip
    current = [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 138}}}]
    limited = {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas",
               "lastTransitionTime": "2025-03-14T09:07:45Z"}  # fmt: skip
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "search-api", "namespace": "catalog"},
        "spec": spec,
        "status": {"currentReplicas": 12, "desiredReplicas": 12, "currentMetrics": current, "conditions": [limited]},
    }
    (tmp_path / "hpa.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [hpa]}))
    d = investigate(load_bundle(tmp_path), "why is search timing out since the spring sale started?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "maxReplicas 12" in d.root_cause and "2.1x" in d.root_cause


def test_untargeted_failures_of_an_operation_call_what_its_other_failures_name(tmp_path: Path) -> None:
    lines = []
    for i in range(8):
        err = (
            "route matrix failed: HTTPStatusError: Server error '503 Service Unavailable' for url "
            "'https://api.routewise.io/v2/matrix'"
            if i == 3
            else "route matrix failed: httpx.ReadTimeout: The read operation timed out"
        )
        lines.append(f"2024-10-22T16:{12 + 3 * i:02d}:03Z ERROR dispatch {err}")
    (tmp_path / "dispatch.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why is dispatch returning 504?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert d.root_cause.startswith("api.routewise.io is failing")


def test_a_deploy_that_failed_and_rolled_back_is_not_planned_work_that_completed(tmp_path: Path) -> None:
    job = [
        "2025-06-03T10:02:11Z $ helm upgrade --install billing-web ./chart --atomic --timeout 5m",
        "2025-06-03T10:07:12Z Error: UPGRADE FAILED: release billing-web failed, and has been rolled back due to "
        "atomic being set: context deadline exceeded",
        "2025-06-03T10:07:13Z ERROR: Job failed: command terminated with exit code 1",
    ]
    (tmp_path / "job.log").write_text("\n".join(job) + "\n")
    d = investigate(load_bundle(tmp_path), "why did the billing-web production deploy time out and roll back?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "billing-web" in d.root_cause
    job.append("2025-06-03T10:40:02Z Release billing-web has been upgraded. Happy Helming! billing-web deployed")
    (tmp_path / "job.log").write_text("\n".join(job) + "\n")
    d = investigate(load_bundle(tmp_path), "is the billing-web release in production now?")
    assert "the deploy of billing-web failed" not in d.root_cause


def test_a_5xx_returned_from_a_host_names_it_and_ecs_streams_speak_for_their_container() -> None:
    from diagnosis.analyzers._common import service_of
    from diagnosis.analyzers.network.extraction import _call_failure, _target
    from diagnosis.model import EvidenceItem

    msg = "tax quote returned HTTP 503 from rest.avatax.com (x-correlation-id 9c2e): ServiceUnavailable"
    assert (_call_failure(msg), _target(msg)) == ("http_5xx", "rest.avatax.com")
    item = EvidenceItem(id="x#1", kind="log", source="x.json", object="cloudwatch/checkout/checkout-api/" + "6a0f" * 8)
    assert service_of(item) == "checkout-api"


def test_cloud_run_latencies_and_5xx_classes_are_failures_and_what_made_asks_about_the_past() -> None:
    from diagnosis.analyzers.metrics import _kind
    from diagnosis.investigate import _PAST_FAILURE

    assert _kind("request_latencies", {}) == "latency"
    assert _kind("request_count", {"response_code_class": "5xx"}) == "errors"
    assert _PAST_FAILURE.search("what made pricing-api time out for 25 minutes this afternoon?")
