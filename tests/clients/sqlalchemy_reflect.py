#!/usr/bin/env python3
"""Weir SQLAlchemy reflection test (psycopg 3 driver).

SQLAlchemy's PostgreSQL dialect reads pg_catalog to reflect tables: this
checks ``inspect(engine).get_schema_names() / get_table_names() / has_table()
/ get_columns() / get_pk_constraint()``, then reflects a ``Table`` and uses it
for Core inserts and selects.

Usage: sqlalchemy_reflect.py --port PORT [--host HOST] [--flight-port PORT]

Every check is reported; the script ends with ``N passed, M failed`` and exits
non-zero when anything failed.
"""

import argparse
import sys
import traceback
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

RESULTS = []

# Known server gaps (strict expected failures): a check listed here that fails
# prints `gap  name: reason` and does not count as failed; a listed check that
# passes counts as a failure, so the entry must be removed once the gap is fixed.
KNOWN_GAPS = {
}
GAPS = []


class Failure(Exception):
    pass


def expect_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


def check(fn):
    name = fn.__name__
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported
        detail = str(e) if isinstance(e, Failure) else "".join(traceback.format_exception(e)).strip()
        if name in KNOWN_GAPS:
            GAPS.append(name)
            print(f"gap  {name}: {KNOWN_GAPS[name]}", flush=True)
        else:
            RESULTS.append((name, detail))
            print(f"FAIL {name}: {detail}", flush=True)
        return
    if name in KNOWN_GAPS:
        detail = f"known gap now passes: remove it from KNOWN_GAPS ({KNOWN_GAPS[name]})"
        RESULTS.append((name, detail))
        print(f"FAIL {name}: {detail}", flush=True)
    else:
        RESULTS.append((name, None))
        print(f"ok   {name}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--flight-port", type=int, help="unused; accepted for a uniform command line")
    args = parser.parse_args()
    engine = sa.create_engine(
        f"postgresql+psycopg://weir@{args.host}:{args.port}/weir",
        connect_args={"connect_timeout": 30},
    )

    def connect_and_query():
        # The dialect's first connect runs version(), current_schema(),
        # SHOW standard_conforming_strings, SHOW transaction isolation level.
        with engine.connect() as conn:
            expect_eq(conn.execute(sa.text("SELECT 1 + 1")).scalar(), 2, "SELECT 1 + 1")
        if engine.dialect.server_version_info < (10,):
            raise Failure(f"server_version_info {engine.dialect.server_version_info}")
        expect_eq(engine.dialect.default_schema_name, "public", "default schema")

    def create_tables():
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE IF EXISTS sa_orders"))
            conn.execute(sa.text("DROP TABLE IF EXISTS sa_lines"))
            conn.execute(sa.text("DROP SCHEMA IF EXISTS sa_other CASCADE"))
            conn.execute(
                sa.text(
                    "CREATE TABLE sa_orders (id bigint PRIMARY KEY, customer text NOT NULL, "
                    "amount numeric(10,2), placed_at timestamptz, note varchar(40), paid boolean DEFAULT false)"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE TABLE sa_lines (order_id bigint NOT NULL, line int NOT NULL, sku text, "
                    "qty int, PRIMARY KEY (order_id, line))"
                )
            )
            conn.execute(sa.text("CREATE SCHEMA sa_other"))
            conn.execute(sa.text("CREATE TABLE sa_other.sa_elsewhere (k text PRIMARY KEY)"))

    def inspector_lists_schemas_and_tables():
        insp = sa.inspect(engine)
        schemas = insp.get_schema_names()
        for s in ("public", "sa_other"):
            if s not in schemas:
                raise Failure(f"schema {s} missing from get_schema_names(): {schemas}")
        tables = insp.get_table_names()
        for t in ("sa_orders", "sa_lines"):
            if t not in tables:
                raise Failure(f"{t} missing from get_table_names(): {tables}")
        if "sa_elsewhere" in tables:
            raise Failure(f"get_table_names() of public lists sa_elsewhere: {tables}")
        expect_eq(insp.get_table_names(schema="sa_other"), ["sa_elsewhere"], "tables of schema sa_other")
        expect_eq(insp.has_table("sa_orders"), True, "has_table(sa_orders)")
        expect_eq(insp.has_table("sa_missing"), False, "has_table(sa_missing)")

    def get_columns_reports_types_and_nullability():
        cols = sa.inspect(engine).get_columns("sa_orders")
        expect_eq([c["name"] for c in cols], ["id", "customer", "amount", "placed_at", "note", "paid"], "column names")
        by_name = {c["name"]: c for c in cols}
        expect_eq([c["nullable"] for c in cols], [False, False, True, True, True, True], "nullable flags")
        checks = [
            ("id", sa.BigInteger),
            ("customer", sa.Text),
            ("amount", sa.Numeric),
            ("placed_at", sa.DateTime),
            ("note", sa.String),
            ("paid", sa.Boolean),
        ]
        for name, kind in checks:
            if not isinstance(by_name[name]["type"], kind):
                raise Failure(f"type of {name}: expected {kind.__name__}, got {by_name[name]['type']!r}")
        amount = by_name["amount"]["type"]
        expect_eq((amount.precision, amount.scale), (10, 2), "numeric(10,2) precision and scale")
        expect_eq(by_name["note"]["type"].length, 40, "varchar(40) length")
        expect_eq(by_name["placed_at"]["type"].timezone, True, "timestamptz has a time zone")
        default = by_name["paid"]["default"]
        if default is None or "false" not in str(default).lower():
            raise Failure(f"default of paid: expected false, got {default!r}")
        # No sequences or identity columns: nothing autoincrements.
        expect_eq([c["autoincrement"] for c in cols], [False] * 6, "autoincrement flags")
        expect_eq([c for c in cols if "identity" in c], [], "identity columns")
        # The primary key's index is no secondary index.
        expect_eq(sa.inspect(engine).get_indexes("sa_orders"), [], "indexes")

    def get_pk_constraint_names_key_columns():
        insp = sa.inspect(engine)
        expect_eq(insp.get_pk_constraint("sa_orders")["constrained_columns"], ["id"], "primary key of sa_orders")
        expect_eq(
            insp.get_pk_constraint("sa_lines")["constrained_columns"],
            ["order_id", "line"],
            "composite primary key of sa_lines, in key order",
        )
        expect_eq(
            insp.get_pk_constraint("sa_elsewhere", schema="sa_other")["constrained_columns"],
            ["k"],
            "primary key in another schema",
        )

    def reflected_table_works_with_core():
        meta = sa.MetaData()
        orders = sa.Table("sa_orders", meta, autoload_with=engine)
        expect_eq([c.name for c in orders.primary_key.columns], ["id"], "reflected primary key")
        with engine.begin() as conn:
            conn.execute(
                orders.insert(),
                [
                    {"id": 1, "customer": "ana", "amount": Decimal("12.50"), "note": "first"},
                    {"id": 2, "customer": "ben", "amount": Decimal("7.25"), "note": None},
                ],
            )
        with engine.connect() as conn:
            rows = conn.execute(sa.select(orders.c.id, orders.c.customer, orders.c.amount).order_by(orders.c.id)).all()
            expect_eq([tuple(r) for r in rows], [(1, "ana", Decimal("12.50")), (2, "ben", Decimal("7.25"))], "rows")
            total = conn.execute(sa.select(sa.func.sum(orders.c.amount))).scalar()
            expect_eq(total, Decimal("19.75"), "sum(amount)")
        # An upsert through the PostgreSQL dialect.
        stmt = postgresql.insert(orders).values(id=1, customer="ana", amount=Decimal("99.00"))
        stmt = stmt.on_conflict_do_update(index_elements=["id"], set_={"amount": stmt.excluded.amount})
        with engine.begin() as conn:
            conn.execute(stmt)
        with engine.connect() as conn:
            amount = conn.execute(sa.select(orders.c.amount).where(orders.c.id == 1)).scalar()
            expect_eq(amount, Decimal("99.00"), "amount after ON CONFLICT DO UPDATE")

    def cleanup():
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE IF EXISTS sa_orders"))
            conn.execute(sa.text("DROP TABLE IF EXISTS sa_lines"))
            conn.execute(sa.text("DROP SCHEMA IF EXISTS sa_other CASCADE"))

    for fn in (
        connect_and_query,
        create_tables,
        inspector_lists_schemas_and_tables,
        get_columns_reports_types_and_nullability,
        get_pk_constraint_names_key_columns,
        reflected_table_works_with_core,
        cleanup,
    ):
        check(fn)
    engine.dispose()

    failed = [n for n, d in RESULTS if d is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed, {len(GAPS)} known gaps")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
