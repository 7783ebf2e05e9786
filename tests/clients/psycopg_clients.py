#!/usr/bin/env python3
"""Weir psycopg 3 client test.

Runs psycopg 3 against a running Weir server's pgwire port:

* parameters of every mapped type round-trip, with text parameters and text
  results (``%t``) and with binary parameters and binary results (``%b``);
* NULL of every type, ``executemany``;
* ``cursor.copy`` in and out (text rows, and binary COPY);
* transactions (``conn.transaction()``, commit, rollback, an error inside a block);
* errors carry SQLSTATEs as psycopg exception classes;
* date text parameters and COPY fields follow the session's DateStyle.

Usage: psycopg_clients.py --port PORT [--host HOST] [--flight-port PORT]

Every check is reported; the script ends with ``N passed, M failed`` and exits
non-zero when anything failed.
"""

import argparse
import datetime as dt
import sys
import traceback
import uuid
from decimal import Decimal

import psycopg
import psycopg.adapt
from psycopg import errors
from psycopg.types.json import Json, Jsonb

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
    """Runs a check, recording pass/fail with the reason."""
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


COLUMNS = [
    ("b", "boolean", True),
    ("i2", "smallint", -7),
    ("i4", "integer", 123456),
    ("i8", "bigint", 9_000_000_000),
    ("f4", "real", 2.5),
    ("f8", "double precision", -0.125),
    ("n", "numeric(12,3)", Decimal("1234.500")),
    ("t", "text", "héllo, wörld"),
    ("vc", "varchar(10)", "short"),
    ("by", "bytea", b"\x00\x01\xff"),
    ("d", "date", dt.date(1999, 12, 31)),
    ("tm", "time", dt.time(23, 59, 59, 999000)),
    ("ts", "timestamp", dt.datetime(2000, 1, 1, 0, 0, 0, 500000)),
    ("tz", "timestamptz", dt.datetime(1999, 12, 31, 23, 0, 0, tzinfo=dt.timezone.utc)),
    ("iv", "interval", dt.timedelta(days=3, seconds=4)),
    ("u", "uuid", uuid.UUID("123e4567-e89b-12d3-a456-426614174000")),
    ("j", "json", [1, "two"]),
    ("jb", "jsonb", {"k": [True, None]}),
    ("ai", "integer[]", [4, 5, 6]),
    ("at", "text[]", ["x y", "z"]),
]


def param(name, value):
    """Wraps JSON values so psycopg sends them as json/jsonb."""
    if name == "j":
        return Json(value)
    if name == "jb":
        return Jsonb(value)
    return value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--flight-port", type=int, help="unused; accepted for a uniform command line")
    args = parser.parse_args()
    dsn = f"host={args.host} port={args.port} user=weir dbname=weir connect_timeout=30"

    live = {}

    def db():
        """The shared autocommit connection, reopened if the server dropped it, so
        one crashed session fails one check instead of every later one."""
        if "conn" not in live or live["conn"].closed:
            live["conn"] = psycopg.connect(dsn, autocommit=True)
            live["conn"].execute("SET TimeZone = 'UTC'")
        return live["conn"]

    names = ", ".join(c for c, _, _ in COLUMNS)

    def connect_reports_server_parameters():
        conn = db()
        version = conn.info.server_version
        if version < 90000:
            raise Failure(f"server_version_num should look like PostgreSQL's, got {version}")
        expect_eq(conn.info.parameter_status("client_encoding"), "UTF8", "client_encoding")
        expect_eq(conn.info.parameter_status("standard_conforming_strings"), "on", "standard_conforming_strings")
        expect_eq(conn.execute("SELECT current_database()").fetchone()[0], "weir", "current_database()")

    def create_table_of_every_type():
        conn = db()
        conn.execute("DROP TABLE IF EXISTS py_types")
        cols = ", ".join(f"{c} {t}" for c, t, _ in COLUMNS)
        conn.execute(f"CREATE TABLE py_types (id integer PRIMARY KEY, {cols})")

    def round_trip(row_id, placeholder, binary):
        conn = db()
        values = [param(c, v) for c, _, v in COLUMNS]
        marks = ", ".join([placeholder] * (len(COLUMNS) + 1))
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO py_types (id, {names}) VALUES ({marks})", [row_id, *values])
            expect_eq(cur.rowcount, 1, "rowcount of one INSERT")
        with conn.cursor(binary=binary) as cur:
            cur.execute(f"SELECT {names} FROM py_types WHERE id = {placeholder}", [row_id])
            row = cur.fetchone()
            if row is None:
                raise Failure(f"row {row_id} not found")
            for (c, t, v), got in zip(COLUMNS, row):
                expect_eq(got, v, f"{t} column {c} ({'binary' if binary else 'text'})")
            types = [d.type_code for d in cur.description]
            expect_eq(types[0], 16, "bool result OID")
            expect_eq(types[6], 1700, "numeric result OID")
            expect_eq(types[13], 1184, "timestamptz result OID")

    def text_parameters_and_text_results():
        round_trip(1, "%t", False)

    def binary_parameters_and_binary_results():
        round_trip(2, "%b", True)

    def null_of_every_type():
        conn = db()
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * (len(COLUMNS) + 1))
            cur.execute(f"INSERT INTO py_types (id, {names}) VALUES ({marks})", [3] + [None] * len(COLUMNS))
        for binary in (False, True):
            with conn.cursor(binary=binary) as cur:
                row = cur.execute(f"SELECT {names} FROM py_types WHERE id = 3").fetchone()
                expect_eq(list(row), [None] * len(COLUMNS), f"NULLs ({'binary' if binary else 'text'})")

    def parameters_in_where_clauses():
        conn = db()
        with conn.cursor() as cur:
            for c, t, v in COLUMNS:
                if t == "json":
                    continue  # json has no equality operator
                # psycopg sends a Python int list as smallint[]: cast arrays (and real) to the column type
                cast = f"::{t}" if t in ("integer[]", "text[]", "real") else ""
                cur.execute(f"SELECT id FROM py_types WHERE {c} = %s{cast} ORDER BY id", [param(c, v)])
                expect_eq([r[0] for r in cur.fetchall()], [1, 2], f"rows where {c} = {v!r}")

    def executemany_inserts_every_row():
        conn = db()
        conn.execute("DROP TABLE IF EXISTS py_many")
        conn.execute("CREATE TABLE py_many (id integer PRIMARY KEY, label text, amount numeric(10,2))")
        rows = [(i, f"row {i}", Decimal(i) / 4) for i in range(200)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO py_many VALUES (%s, %s, %s)", rows)
        got = conn.execute("SELECT count(*), sum(amount), max(label) FROM py_many").fetchone()
        expect_eq(tuple(got), (200, Decimal("4975.00"), "row 99"), "count, sum and max after executemany")

    def copy_rows_in_and_out():
        conn = db()
        conn.execute("DROP TABLE IF EXISTS py_copy")
        conn.execute("CREATE TABLE py_copy (id integer PRIMARY KEY, name text, at timestamptz, tags text[])")
        rows = [
            (1, "tab\there", dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), ["a", "b"]),
            (2, None, None, None),
            (3, "back\\slash, comma", dt.datetime(2024, 6, 1, 12, 30, tzinfo=dt.timezone.utc), []),
        ]
        with conn.cursor() as cur:
            with cur.copy("COPY py_copy (id, name, at, tags) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row(r)
            expect_eq(cur.rowcount, 3, "rowcount of COPY FROM STDIN")
        got = conn.execute("SELECT id, name, at, tags FROM py_copy ORDER BY id").fetchall()
        expect_eq(got, rows, "rows loaded by COPY")
        with conn.cursor() as cur:
            with cur.copy("COPY (SELECT id, name FROM py_copy ORDER BY id) TO STDOUT") as copy:
                out = list(copy.rows())
        expect_eq(out, [("1", "tab\there"), ("2", None), ("3", "back\\slash, comma")], "rows of COPY TO STDOUT")
        with conn.cursor() as cur:
            with cur.copy("COPY (SELECT id, name FROM py_copy ORDER BY id) TO STDOUT WITH (FORMAT csv)") as copy:
                text = b"".join(bytes(chunk) for chunk in copy).decode()
        expect_eq(text, '1,tab\there\n2,\n3,"back\\slash, comma"\n', "CSV of COPY TO STDOUT")

    def binary_copy_in():
        conn = db()
        conn.execute("DROP TABLE IF EXISTS py_copy_bin")
        conn.execute("CREATE TABLE py_copy_bin (id integer PRIMARY KEY, amount numeric(8,2), at date)")
        with conn.cursor() as cur:
            with cur.copy("COPY py_copy_bin FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "numeric", "date"])
                copy.write_row((1, Decimal("1.50"), dt.date(2024, 2, 29)))
                copy.write_row((2, None, None))
        got = conn.execute("SELECT id, amount, at FROM py_copy_bin ORDER BY id").fetchall()
        expect_eq(got, [(1, Decimal("1.50"), dt.date(2024, 2, 29)), (2, None, None)], "rows of binary COPY")

    def transactions_commit_and_roll_back():
        conn = db()
        conn.execute("DROP TABLE IF EXISTS py_txn")
        conn.execute("CREATE TABLE py_txn (id integer PRIMARY KEY, v text)")
        with conn.transaction():
            conn.execute("INSERT INTO py_txn VALUES (1, 'kept')")
        try:
            with conn.transaction():
                conn.execute("INSERT INTO py_txn VALUES (2, 'rolled back')")
                raise RuntimeError("abort the block")
        except RuntimeError:
            pass
        expect_eq(conn.execute("SELECT id FROM py_txn ORDER BY id").fetchall(), [(1,)], "after commit and rollback")

        # Non-autocommit connection: explicit commit() and rollback().
        with psycopg.connect(dsn) as tx:
            tx.execute("INSERT INTO py_txn VALUES (3, 'committed')")
            tx.commit()
            tx.execute("INSERT INTO py_txn VALUES (4, 'rolled back')")
            tx.rollback()
            # An error aborts the transaction until rollback.
            try:
                tx.execute("INSERT INTO py_txn VALUES (1, 'duplicate')")
                raise Failure("duplicate key accepted")
            except errors.UniqueViolation:
                pass
            try:
                tx.execute("SELECT 1")
                raise Failure("a statement in a failed transaction succeeded")
            except errors.InFailedSqlTransaction:
                pass
            tx.rollback()
            expect_eq(tx.execute("SELECT count(*) FROM py_txn").fetchone()[0], 2, "rows after the failed block")
            tx.rollback()
        expect_eq(conn.execute("SELECT id FROM py_txn ORDER BY id").fetchall(), [(1,), (3,)], "committed rows")

    def errors_carry_sqlstates():
        conn = db()
        cases = [
            ("SELECT * FROM py_no_such_table", errors.UndefinedTable, "42P01"),
            ("SELEC 1", errors.SyntaxError, "42601"),
            ("SELECT 1/0", errors.DivisionByZero, "22012"),
            ("INSERT INTO py_txn VALUES (1, 'dup')", errors.UniqueViolation, "23505"),
            ("INSERT INTO py_txn (v) VALUES ('no key')", errors.NotNullViolation, "23502"),
            ("SELECT no_such_column FROM py_txn", errors.UndefinedColumn, "42703"),
        ]
        for sql, cls, code in cases:
            try:
                conn.execute(sql)
                raise Failure(f"{sql!r} succeeded")
            except psycopg.Error as e:
                expect_eq(e.sqlstate, code, f"SQLSTATE of {sql!r}")
                if not isinstance(e, cls):
                    raise Failure(f"{sql!r} raised {type(e).__name__}, expected {cls.__name__}")

    def server_side_cursor_fetches_in_batches():
        with psycopg.connect(dsn) as tx:
            with tx.cursor(name="py_named") as cur:
                cur.itersize = 7
                cur.execute("SELECT id FROM py_many ORDER BY id")
                ids = [r[0] for r in cur]
            expect_eq(ids, list(range(200)), "ids through a named cursor")

    def untyped_null_is_null():
        # An untyped NULL (Arrow's Null type) is NULL on the wire, in text
        # and binary results, not an empty string.
        conn = db()
        for binary in (False, True):
            got = conn.execute("SELECT NULL, CASE WHEN 1 = 0 THEN NULL END, 1", binary=binary).fetchone()
            expect_eq(got, (None, None, 1), f"untyped NULLs (binary={binary})")

    def end_of_day_time_in_binary():
        # time '24:00:00' is PostgreSQL's end of the day; Python's time has
        # no such value, so the raw binary form (microseconds) is checked.
        class RawTime(psycopg.adapt.Loader):
            format = psycopg.pq.Format.BINARY

            def load(self, data):
                return int.from_bytes(bytes(data), "big", signed=True)

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.adapters.register_loader("time", RawTime)
            got = conn.execute("SELECT '24:00:00'::time, '10:00'::time", binary=True).fetchone()
            expect_eq(got, (86_400_000_000, 36_000_000_000), "binary time microseconds")

    def date_text_parameters_follow_datestyle():
        # A Python str goes as text of unknown type; the server reads it as
        # the date the cast asks for, in the session's DateStyle order, as
        # PostgreSQL does. COPY reads date fields the same way.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET DateStyle = 'ISO, DMY'")
            got = conn.execute("SELECT %s::date, %s::timestamp", ["02/01/2024", "02/01/2024 10:30"]).fetchone()
            expect_eq(got, (dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 10, 30)), "DMY text parameters")
            conn.execute("CREATE TABLE py_dates (d date)")
            with conn.cursor().copy("COPY py_dates FROM STDIN") as copy:
                copy.write("03/01/2024\n")
            got = conn.execute("SELECT d FROM py_dates").fetchone()
            expect_eq(got, (dt.date(2024, 1, 3),), "DMY date through COPY")
            conn.execute("SET DateStyle = 'MDY'")
            try:
                conn.execute("SELECT %s::date", ["13/01/2024"])
                raise Failure("13/01/2024 in MDY should be out of range")
            except errors.DatetimeFieldOverflow:
                pass

    def cleanup():
        conn = db()
        for t in ("py_types", "py_many", "py_copy", "py_copy_bin", "py_txn", "py_dates"):
            conn.execute(f"DROP TABLE IF EXISTS {t}")

    for fn in (
        connect_reports_server_parameters,
        create_table_of_every_type,
        text_parameters_and_text_results,
        binary_parameters_and_binary_results,
        null_of_every_type,
        parameters_in_where_clauses,
        executemany_inserts_every_row,
        copy_rows_in_and_out,
        binary_copy_in,
        transactions_commit_and_roll_back,
        errors_carry_sqlstates,
        server_side_cursor_fetches_in_batches,
        untyped_null_is_null,
        end_of_day_time_in_binary,
        date_text_parameters_follow_datestyle,
        cleanup,
    ):
        check(fn)

    failed = [n for n, d in RESULTS if d is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed, {len(GAPS)} known gaps")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
