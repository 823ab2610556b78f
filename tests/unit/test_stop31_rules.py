"""Stop 31: readers and rules from the dev40-dev45 batches, each a mechanism rather than a stack: MySQL metadata-lock
queues, a datastore refusing a password (and a rotation the clients caught up with), a router whose BGP sessions all
went down, a CDN serving private responses from its cache, Terraform plans, a queue's visibility timeout cut, BIND's
refused zone transfers, a DHCP pool out of leases, a checksum check that failed, and a few readers (CloudFront's
tab-separated times, Samba's levels, `curl -sI` headers, a cloud CLI's operations table). Each test asserts the
negative case too where a rule could over-fire."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import LineParser
from diagnosis.investigate import investigate
from diagnosis.model import Category

# ---------------------------------------------------------------- MySQL: DDL queued behind an open transaction

_MYSQL = """\
mysql> SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE, INFO FROM information_schema.processlist;
+-------+---------------+-----------------+-----------+---------+-------+---------------------------------+---------------------------------------------------------------+
| ID    | USER          | HOST            | DB        | COMMAND | TIME  | STATE                           | INFO                                                          |
+-------+---------------+-----------------+-----------+---------+-------+---------------------------------+---------------------------------------------------------------+
| 88413 | reconciler    | 10.8.3.77:51030 | inventory | Sleep   | 27480 |                                 | NULL                                                          |
| 90117 | migrator      | 10.8.6.12:40388 | inventory | Query   |  1062 | Waiting for table metadata lock | ALTER TABLE stock_levels ADD COLUMN reserved_qty INT NOT NULL |
| 90134 | inventory_api | 10.8.5.48:50319 | inventory | Query   |  1043 | Waiting for table metadata lock | UPDATE stock_levels SET on_hand = on_hand - 1 WHERE sku = 'a' |
| 90161 | inventory_api | 10.8.5.48:55753 | inventory | Query   |  1023 | Waiting for table metadata lock | SELECT sku, on_hand FROM stock_levels WHERE sku = 'b'         |
| 90182 | inventory_api | 10.8.4.12:38201 | inventory | Query   |   986 | Waiting for table metadata lock | SELECT sku, on_hand FROM stock_levels WHERE sku = 'c'         |
+-------+---------------+-----------------+-----------+---------+-------+---------------------------------+---------------------------------------------------------------+

mysql> SELECT ml.OBJECT_SCHEMA, ml.OBJECT_NAME, ml.LOCK_TYPE, ml.LOCK_STATUS, t.PROCESSLIST_ID FROM performance_schema.metadata_locks ml JOIN performance_schema.threads t ON t.THREAD_ID = ml.OWNER_THREAD_ID;
+---------------+--------------+-------------------+-------------+----------------+
| OBJECT_SCHEMA | OBJECT_NAME  | LOCK_TYPE         | LOCK_STATUS | PROCESSLIST_ID |
+---------------+--------------+-------------------+-------------+----------------+
| inventory     | stock_levels | SHARED_READ       | GRANTED     | 88413          |
| inventory     | stock_levels | SHARED_UPGRADABLE | GRANTED     | 90117          |
| inventory     | stock_levels | EXCLUSIVE         | PENDING     | 90117          |
| inventory     | stock_levels | SHARED_WRITE      | PENDING     | 90134          |
| inventory     | stock_levels | SHARED_READ       | PENDING     | 90161          |
+---------------+--------------+-------------------+-------------+----------------+

mysql> SELECT trx_id, trx_state, trx_started, trx_mysql_thread_id, trx_query FROM information_schema.innodb_trx;
+-----------+-----------+---------------------+---------------------+-----------+
| trx_id    | trx_state | trx_started         | trx_mysql_thread_id | trx_query |
+-----------+-----------+---------------------+---------------------+-----------+
| 421893114 | RUNNING   | 2024-10-21 18:09:41 | 88413               | NULL      |
+-----------+-----------+---------------------+---------------------+-----------+
"""  # noqa: E501 (the client's boxed tables as it prints them)


def test_ddl_queued_behind_an_open_transaction_names_the_transaction_and_the_metadata_lock(tmp_path: Path) -> None:
    (tmp_path / "mysql-session.txt").write_text(_MYSQL)
    d = investigate(load_bundle(tmp_path), "why are queries on stock_levels hanging?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "88413" in d.root_cause and "stock_levels" in d.root_cause and "metadata lock" in d.root_cause
    assert "90117" in d.root_cause  # the DDL every later statement queues behind
    assert any("KILL 88413" in a.command for a in d.actions)  # MySQL's own command, not psql's


def test_without_the_lock_table_nothing_ties_the_waiters_to_the_idle_session(tmp_path: Path) -> None:
    # the processlist says who waits, but not for whom: the open transaction may not be named as their blocker
    processlist, rest = _MYSQL.split("mysql> SELECT ml.OBJECT_SCHEMA")
    (tmp_path / "mysql-session.txt").write_text(
        processlist + "mysql> SELECT trx_id" + rest.split("mysql> SELECT trx_id")[1]
    )
    d = investigate(load_bundle(tmp_path), "why are queries on stock_levels hanging?")
    assert not any(f.code == "idle_in_transaction_blocker" for f in d.findings), d.root_cause


# ---------------------------------------------------------------- a datastore refusing a password

_DJANGO = """\
2024-08-06 09:05:{s:02d},100 ERROR django.request Internal Server Error: /api/v2/invoices
psycopg2.OperationalError: connection to server at "pgb-billing.db.internal" (10.20.4.30), port 6432 failed: FATAL:  password authentication failed for user "billing_app"
"""  # noqa: E501


def test_a_refused_database_password_is_configuration(tmp_path: Path) -> None:
    (tmp_path / "billing-web.log").write_text("".join(_DJANGO.format(s=s) for s in range(0, 50, 5)))
    d = investigate(load_bundle(tmp_path), "why is billing-web returning 500s?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "password" in d.root_cause and "billing_app" in d.root_cause


def test_a_rotation_the_clients_caught_up_with_is_over(tmp_path: Path) -> None:
    lines = "".join(_DJANGO.format(s=s) for s in range(0, 20, 5))
    ok = "".join(f"2024-08-06 09:{m:02d}:00,000 INFO django.request GET /api/v2/invoices 200\n" for m in range(6, 12))
    (tmp_path / "billing-web.log").write_text(lines + ok)
    (tmp_path / "cloudtrail.json").write_text(
        json.dumps(
            {
                "Records": [
                    {
                        "eventTime": "2024-08-06T09:04:55Z",
                        "eventSource": "secretsmanager.amazonaws.com",
                        "eventName": "RotationSucceeded",
                        "awsRegion": "eu-west-1",
                        "eventType": "AwsServiceEvent",
                    }
                ]
            }
        )
    )
    d = investigate(load_bundle(tmp_path), "billing-web paged for 500s - is the database credential broken?")
    assert d.category == Category.HEALTHY, d.root_cause


# ---------------------------------------------------------------- a switch whose BGP sessions all went down

_LEAF = (
    "".join(
        f"Nov 14 03:11:05.33{i} leaf-b2 NOTICE bgp#bgpd[41]: %ADJCHANGE: neighbor 10.2.16.1{i}(worker-b0{i}) in vrf "
        "default Down Interface down\n"
        for i in range(1, 6)
    )
    + "Nov 14 03:11:09.864270 leaf-b2 CRIT kernel: [3987214.552130] watchdog: BUG: soft lockup - CPU#2 stuck for 22s!\n"
)
_SPINE = (
    "2024/11/14 03:12:33.119 BGP: %ADJCHANGE: neighbor 10.1.0.9(leaf-b2) in vrf default Down BGP Notification send\n"
    "2024/11/14 03:14:44.772 BGP: 10.1.0.9(leaf-b2) connect: No route to host\n"
)
_CALLER = "".join(
    f"2024-11-14T03:1{i}:27.000Z ERROR search backend request failed: connect ETIMEDOUT 10.244.130.17:9200\n"
    for i in range(2, 8)
)


def test_a_switch_that_lost_all_its_bgp_sessions_is_the_infrastructure_cause(tmp_path: Path) -> None:
    (tmp_path / "leaf-b2-console.txt").write_text(_LEAF)
    (tmp_path / "spine-1-bgpd.log").write_text(_SPINE)
    (tmp_path / "catalog-api.log").write_text(_CALLER)
    d = investigate(load_bundle(tmp_path), "why did catalog search time out?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "leaf-b2" in d.root_cause


def test_one_session_flapping_names_no_device(tmp_path: Path) -> None:
    (tmp_path / "spine-1-bgpd.log").write_text(_SPINE.splitlines()[0] + "\n")
    (tmp_path / "catalog-api.log").write_text(_CALLER)
    d = investigate(load_bundle(tmp_path), "why did catalog search time out?")
    assert not any(f.code.startswith("routing_device_down") for f in d.findings)


# ---------------------------------------------------------------- a CDN serving private responses from its cache

_CURL = """\
ops@bastion:~$ curl -sI https://www.shop.example/api/v1/cart
HTTP/2 200
date: Thu, 05 Sep 2024 15:44:11 GMT
content-type: application/json
cache-control: private, no-store
age: 1921
cf-cache-status: {status}
server: cloudflare
"""


def test_a_cdn_hit_on_a_private_response_is_a_cache_rule_error(tmp_path: Path) -> None:
    (tmp_path / "curl-checks.txt").write_text(_CURL.format(status="HIT"))
    d = investigate(load_bundle(tmp_path), "why do customers see other people's carts?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "cache" in d.root_cause and "/api/v1/cart" in d.root_cause


def test_a_private_response_the_cdn_passes_through_is_fine(tmp_path: Path) -> None:
    (tmp_path / "curl-checks.txt").write_text(_CURL.format(status="DYNAMIC"))
    d = investigate(load_bundle(tmp_path))
    assert not any(f.code == "cache_serves_private" for f in d.findings)


# ---------------------------------------------------------------- Terraform: a visibility timeout cut

_TF = """\
$ terraform apply -target=module.invoice_render_queue
Terraform will perform the following actions:

  # module.invoice_render_queue.aws_sqs_queue.this will be updated in-place
  ~ resource "aws_sqs_queue" "this" {
        name                              = "invoice-render"
      ~ visibility_timeout_seconds        = 900 -> 30
        # (11 unchanged attributes hidden)
    }

Plan: 0 to add, 1 to change, 0 to destroy.
Apply complete! Resources: 0 added, 1 changed, 0 destroyed.
"""


def _dlq(values: list[float]) -> str:
    stamps = [f"2025-05-14T{8 + (i * 10) // 60:02d}:{(i * 10) % 60:02d}:00Z" for i in range(len(values))][::-1]
    return json.dumps(
        {
            "MetricDataResults": [
                {
                    "Id": "dlq",
                    "Label": "invoice-render-dlq ApproximateNumberOfMessagesVisible",
                    "Timestamps": stamps,
                    "Values": values[::-1],
                    "StatusCode": "Complete",
                }
            ]
        }
    )


def test_terraform_plans_read_as_changes_of_attributes(tmp_path: Path) -> None:
    (tmp_path / "terraform.txt").write_text(_TF)
    ev = load_bundle(tmp_path)
    diff = ev.kind("change/diff")[0]
    settings = diff.data["files"][0]["settings"]
    assert {"key": "visibility_timeout_seconds", "old": "900", "new": "30"} in settings
    assert diff.data["applied"] is True


def test_a_visibility_timeout_cut_before_dead_letters_rose_is_the_cause(tmp_path: Path) -> None:
    (tmp_path / "terraform.txt").write_text(_TF)
    (tmp_path / "cw-dlq.json").write_text(_dlq([0, 0, 0, 0, 40, 300, 1200, 3100, 6100]))
    d = investigate(load_bundle(tmp_path), "why did the invoice-render DLQ fill up?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "visibility_timeout_seconds" in d.root_cause


def test_a_flat_dead_letter_queue_says_nothing_of_the_cut(tmp_path: Path) -> None:
    (tmp_path / "terraform.txt").write_text(_TF)
    (tmp_path / "cw-dlq.json").write_text(_dlq([0, 0, 1, 0, 0, 1, 0, 0, 0]))
    d = investigate(load_bundle(tmp_path))
    assert not any(f.code == "setting_cut" for f in d.findings)


# ---------------------------------------------------------------- BIND: zone transfers refused

_BIND = "".join(
    f"04-Nov-2024 15:{m:02d}:07.256 security: error: client @0x7f3a3680 10.20.0.12#44306 (corp.internal): zone "
    "transfer 'corp.internal/IXFR/IN' denied\n"
    for m in range(38, 50)
)


def test_bind_levels_and_refused_zone_transfers_are_configuration(tmp_path: Path) -> None:
    assert LineParser().parse(_BIND.splitlines()[0])[1] == "error"
    (tmp_path / "ns1-named.log").write_text(
        "04-Nov-2024 09:12:00.160 notify: info: zone corp.internal/IN: sending notifies (serial 2024110401)\n" + _BIND
    )
    d = investigate(load_bundle(tmp_path), "why don't new hosts resolve?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "corp.internal" in d.root_cause and "10.20.0.12" in d.root_cause


# ---------------------------------------------------------------- a DHCP pool out of leases

_KEA = "".join(
    f"2024-05-21 09:{m:02d}:07.781 WARN  [kea-dhcp4.alloc-engine/1187.139912445] ALLOC_ENGINE_V4_ALLOC_FAIL_SUBNET "
    "[hwtype=1 6f:e5:48:d5:46:1d], tid=0xa74cf2b8: failed to allocate an IPv4 lease in the subnet 10.88.0.0/23, "
    "subnet-id 8\n"
    for m in range(17, 30)
)


def test_a_dhcp_server_with_no_free_lease_is_capacity(tmp_path: Path) -> None:
    (tmp_path / "kea-dhcp4.log").write_text(_KEA)
    d = investigate(load_bundle(tmp_path), "why can't guests get on the wifi?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "10.88.0.0/23" in d.root_cause


# ---------------------------------------------------------------- files that fail their checksum

_MD5 = """\
[svc@gx-login01 run]$ md5sum -c --quiet md5sums.txt
S17_L002_R1_001.fastq.gz: FAILED
S42_L003_R2_001.fastq.gz: FAILED
md5sum: WARNING: 2 computed checksums did NOT match
[svc@gx-login01 run]$ gzip -t S17_L002_R1_001.fastq.gz
gzip: S17_L002_R1_001.fastq.gz: unexpected end of file
"""


def test_files_that_fail_their_checksum_are_bad_data(tmp_path: Path) -> None:
    (tmp_path / "integrity-check.txt").write_text(_MD5)
    d = investigate(load_bundle(tmp_path), "why did three alignment tasks fail?")
    assert d.category == Category.DATA_QUALITY, d.root_cause


# ---------------------------------------------------------------- readers


def test_cloudfront_tab_separated_times_and_samba_levels_are_read() -> None:
    ts, _, _ = LineParser().parse(
        "2025-01-21\t09:58:20\tLHR61-P3\t146526\t176.228.249.45\tGET\td.cloudfront.net\t/\t502"
    )
    assert ts is not None
    ts, level, msg = LineParser().parse(
        "[2024/07/09 08:14:02.149436,  1] ../../source3/winbindd/winbindd_cm.c:1442(connection_ok)"
    )
    assert ts is not None and level == "warn" and "source3" not in msg


def test_a_cloud_cli_operations_table_is_planned_work(tmp_path: Path) -> None:
    (tmp_path / "gke-operations.txt").write_text(
        "$ gcloud container operations list --filter=targetLink~shop-prod\n"
        "NAME                                  TYPE           LOCATION      TARGET    STATUS_MESSAGE  STATUS  "
        "START_TIME                      END_TIME\n"
        "operation-1741053660123-7f1e2c3d-9a8b  UPGRADE_NODES  europe-west4  web-pool                  DONE    "
        "2025-03-04T02:01:00.123456789Z  2025-03-04T02:49:12.987654321Z\n"
    )
    d = investigate(load_bundle(tmp_path))
    planned = [f for f in d.findings if f.code == "planned_work"]
    assert planned and "upgrade nodes of web-pool" in planned[0].mechanism
