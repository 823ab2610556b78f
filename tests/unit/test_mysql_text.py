"""Lock waits pasted from the mysql client (boxed tables and \\G records) follow the same blocking chain as
PostgreSQL's views: the thread whose transaction sits open with no statement is named, with the table."""

from __future__ import annotations

from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.mysql import mysql_tables
from diagnosis.investigate import investigate
from diagnosis.model import Category

SESSION = """mysql> SELECT NOW();
+---------------------+
| NOW()               |
+---------------------+
| 2025-10-07 17:48:25 |
+---------------------+
1 row in set (0.00 sec)

mysql> SELECT trx_id, trx_state, trx_started, trx_mysql_thread_id, trx_query FROM information_schema.innodb_trx;
+-----------+-----------+---------------------+---------------------+-------------------------------------------------+
| trx_id    | trx_state | trx_started         | trx_mysql_thread_id | trx_query                                       |
+-----------+-----------+---------------------+---------------------+-------------------------------------------------+
| 481090332 | RUNNING   | 2025-10-07 17:02:17 |               91822 | NULL                                            |
| 481187000 | LOCK WAIT | 2025-10-07 17:47:37 |               92106 | UPDATE invoice_counters SET n = n + 1            |
| 481187083 | LOCK WAIT | 2025-10-07 17:47:38 |               92208 | UPDATE invoice_counters SET n = n + 1            |
+-----------+-----------+---------------------+---------------------+-------------------------------------------------+
3 rows in set (0.01 sec)

mysql> SELECT * FROM information_schema.processlist WHERE id = 91822;
+-------+-----------------+------------------+---------+---------+------+-------+------+
| ID    | USER            | HOST             | DB      | COMMAND | TIME | STATE | INFO |
+-------+-----------------+------------------+---------+---------+------+-------+------+
| 91822 | billing_dunning | 10.42.7.19:51234 | billing | Sleep   | 2767 |       | NULL |
+-------+-----------------+------------------+---------+---------+------+-------+------+

mysql> SELECT * FROM sys.innodb_lock_waits\\G
*************************** 1. row ***************************
    locked_table: `billing`.`invoice_counters`
     locked_type: RECORD
     waiting_pid: 92106
   waiting_query: UPDATE invoice_counters SET n = n + 1
    blocking_pid: 91822
  blocking_query: NULL
*************************** 2. row ***************************
    locked_table: `billing`.`invoice_counters`
     locked_type: RECORD
     waiting_pid: 92208
   waiting_query: UPDATE invoice_counters SET n = n + 1
    blocking_pid: 91822
  blocking_query: NULL
2 rows in set (0.01 sec)
"""


def test_boxed_tables_and_vertical_records_are_read() -> None:
    tables = mysql_tables(SESSION)
    assert [len(t) for t in tables] == [1, 3, 1, 2]
    assert tables[3][0]["blocking_pid"] == "91822" and tables[1][0]["trx_query"] == "NULL"


def test_an_open_transaction_holding_a_row_lock_is_named_with_its_table(tmp_path: Path) -> None:
    (tmp_path / "aurora.txt").write_text(SESSION)
    ev = load_bundle(tmp_path)
    assert not ev.errors and not ev.ignored
    d = investigate(ev, "why do invoice updates time out?")
    assert d.category is Category.CODE_DEFECT, d.root_cause
    for word in ("91822", "idle in transaction", "billing.invoice_counters", "billing_dunning"):
        assert word in d.root_cause, word
