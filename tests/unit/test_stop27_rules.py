"""Stop 27: query results pasted from SQL clients (boxed, aligned, unicode boxes, CSV heads) read as tables, and a
key whose value broke away from its own steady history named as a data fault."""

from __future__ import annotations

from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.tables import result_tables
from diagnosis.investigate import investigate
from diagnosis.model import Category

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


def test_a_csv_head_of_no_other_shape_is_a_table_and_pasted_tables_alone_do_not_prove_health(tmp_path: Path) -> None:
    (tmp_path / "rates.csv").write_text("currency,rate,source\nUSD,1.05,ECB\nGBP,0.83,ECB\nCHF,0.93,ECB\n")
    (tmp_path / "a.txt").write_text(DUCKDB)
    (tmp_path / "b.txt").write_text(DUCKDB.replace("events", "clicks"))
    ev = load_bundle(tmp_path)
    assert sorted(i.kind for i in ev) == ["table", "table", "table"] and not ev.ignored
    d = investigate(ev, "is the events pipeline ok?")
    assert d.category == Category.UNKNOWN, d.root_cause
