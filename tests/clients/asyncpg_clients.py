#!/usr/bin/env python3
"""Weir asyncpg client test.

Runs asyncpg against a running Weir server's pgwire port:

* connecting, and asyncpg's type introspection: ``set_type_codec`` looks json
  and jsonb up in pg_type, and array types are resolved by its introspection
  query on first use;
* prepared statements: parameter and attribute types, reuse, ``fetch``/``fetchrow``/``fetchval``;
* every mapped type inserted with parameters and fetched back (asyncpg always
  uses the binary format), plus NULLs;
* ``executemany``, ``copy_records_to_table`` (binary COPY), ``copy_from_query``;
* transactions and SQLSTATE-carrying exceptions.

Usage: asyncpg_clients.py --port PORT [--host HOST] [--flight-port PORT]

Every check is reported; the script ends with ``N passed, M failed`` and exits
non-zero when anything failed.
"""

import argparse
import asyncio
import datetime as dt
import io
import json
import sys
import traceback
import uuid
from decimal import Decimal

import asyncpg

RESULTS = []

# Known server gaps (strict expected failures): a check listed here that fails
# prints `gap  name: reason` and does not count as failed; a listed check that
# passes counts as a failure, so the entry must be removed once the gap is fixed.
KNOWN_GAPS = {}
GAPS = []


class Failure(Exception):
    pass


def expect_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


async def check(fn):
    name = fn.__name__
    try:
        await asyncio.wait_for(fn(), timeout=120)
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
    ("b", "boolean", "bool", True),
    ("i2", "smallint", "int2", -7),
    ("i4", "integer", "int4", 123456),
    ("i8", "bigint", "int8", 9_000_000_000),
    ("f4", "real", "float4", 2.5),
    ("f8", "double precision", "float8", -0.125),
    ("n", "numeric(12,3)", "numeric", Decimal("1234.500")),
    ("t", "text", "text", "héllo, wörld"),
    ("vc", "varchar(10)", "varchar", "short"),
    ("by", "bytea", "bytea", b"\x00\x01\xff"),
    ("d", "date", "date", dt.date(1999, 12, 31)),
    ("tm", "time", "time", dt.time(23, 59, 59, 999000)),
    ("ts", "timestamp", "timestamp", dt.datetime(2000, 1, 1, 0, 0, 0, 500000)),
    ("tz", "timestamptz", "timestamptz", dt.datetime(1999, 12, 31, 23, 0, 0, tzinfo=dt.timezone.utc)),
    ("iv", "interval", "interval", dt.timedelta(days=3, seconds=4)),
    ("u", "uuid", "uuid", uuid.UUID("123e4567-e89b-12d3-a456-426614174000")),
    ("j", "json", "json", [1, "two"]),
    ("jb", "jsonb", "jsonb", {"k": [True, None]}),
    ("ai", "integer[]", "int4[]", [4, 5, 6]),
    ("at", "text[]", "text[]", ["x y", "z"]),
]


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--flight-port", type=int, help="unused; accepted for a uniform command line")
    args = parser.parse_args()

    async def connect():
        return await asyncpg.connect(host=args.host, port=args.port, user="weir", database="weir", timeout=30)

    live = {}

    async def db():
        """The shared connection, reopened if the server dropped it, so one crashed
        session fails one check instead of every later one. Codecs installed by
        type_introspection_with_set_type_codec are reinstalled on a new one."""
        if "conn" not in live or live["conn"].is_closed():
            live["conn"] = await connect()
            if live.get("codecs"):
                for typename in ("json", "jsonb"):
                    await live["conn"].set_type_codec(
                        typename, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
                    )
        return live["conn"]

    names = ", ".join(c for c, _, _, _ in COLUMNS)

    async def connects_and_reports_the_server_version():
        conn = await db()
        v = conn.get_server_version()
        if v.major < 10:
            raise Failure(f"server version should look like PostgreSQL's, got {v}")
        expect_eq(conn.get_settings().client_encoding, "UTF8", "client_encoding")
        expect_eq(await conn.fetchval("SELECT current_user"), "weir", "current_user")

    async def type_introspection_with_set_type_codec():
        conn = await db()
        # asyncpg looks json/jsonb up in pg_catalog.pg_type to install the codec.
        live["codecs"] = True
        for typename in ("json", "jsonb"):
            await conn.set_type_codec(typename, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
        expect_eq(await conn.fetchval("SELECT '{\"a\": [1, 2]}'::jsonb"), {"a": [1, 2]}, "jsonb through the codec")
        expect_eq(await conn.fetchval("SELECT $1::json", {"x": None}), {"x": None}, "json parameter through the codec")

    async def introspects_array_types_through_pg_type():
        # asyncpg has no built-in codec for array types: on first use it runs its
        # introspection query (a recursive CTE over pg_catalog.pg_type and friends).
        introspected = []

        class CountingConnection(asyncpg.Connection):
            async def _introspect_types(self, typeoids, timeout):
                introspected.append(sorted(typeoids))
                return await super()._introspect_types(typeoids, timeout)

        c = await asyncpg.connect(
            host=args.host, port=args.port, user="weir", database="weir", timeout=30,
            connection_class=CountingConnection,
        )
        try:
            expect_eq(await c.fetchval("SELECT ARRAY['a', 'b']::varchar[]"), ["a", "b"], "varchar[] value")
            expect_eq(await c.fetchval("SELECT ARRAY[1, NULL, 3]::int[]"), [1, None, 3], "int[] value")
            expect_eq(introspected, [[1015], [1007]], "type OIDs asyncpg introspected")
            # Every other mapped array type resolves too, NULL elements included.
            arrays = [
                ("bool[]", "ARRAY[true, NULL]", [True, None]),
                ("int2[]", "ARRAY[1, 2]", [1, 2]),
                ("int8[]", "ARRAY[9000000000]", [9000000000]),
                ("float4[]", "ARRAY[1.5]", [1.5]),
                ("float8[]", "ARRAY[-0.25, NULL]", [-0.25, None]),
                ("numeric[]", "ARRAY[1.50, 2]", [Decimal("1.50"), Decimal("2")]),
                ("text[]", "ARRAY['a,b', 'c\"d', NULL]", ["a,b", 'c"d', None]),
                ("bytea[]", "ARRAY['\\x00ff'::bytea]", [b"\x00\xff"]),
                ("date[]", "ARRAY['2024-02-29'::date]", [dt.date(2024, 2, 29)]),
                ("uuid[]", "ARRAY['123e4567-e89b-12d3-a456-426614174000'::uuid]",
                 [uuid.UUID("123e4567-e89b-12d3-a456-426614174000")]),
                ("jsonb[]", "ARRAY['{\"k\": 1}'::jsonb]", ['{"k": 1}']),
            ]
            for type_name, literal, expected in arrays:
                expect_eq(await c.fetchval(f"SELECT {literal}::{type_name}"), expected, f"{type_name} value")
                expect_eq(await c.fetchval(f"SELECT $1::{type_name}", expected), expected, f"{type_name} parameter")
        finally:
            await c.close()

    async def create_table_of_every_type():
        conn = await db()
        await conn.execute("DROP TABLE IF EXISTS apg_types")
        cols = ", ".join(f"{c} {t}" for c, t, _, _ in COLUMNS)
        await conn.execute(f"CREATE TABLE apg_types (id integer PRIMARY KEY, {cols})")

    async def insert_and_fetch_every_type():
        conn = await db()
        marks = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 2))
        stmt = await conn.prepare(f"INSERT INTO apg_types (id, {names}) VALUES ({marks})")
        param_types = [p.name for p in stmt.get_parameters()]
        expect_eq(param_types, ["int4"] + [pg for _, _, pg, _ in COLUMNS], "parameter types of the INSERT")
        await stmt.fetch(1, *[v for _, _, _, v in COLUMNS])
        await stmt.fetch(2, *[None] * len(COLUMNS))

        row = await conn.fetchrow(f"SELECT {names} FROM apg_types WHERE id = $1", 1)
        for c, t, _, v in COLUMNS:
            expect_eq(row[c], v, f"{t} column {c}")
        row = await conn.fetchrow(f"SELECT {names} FROM apg_types WHERE id = $1", 2)
        expect_eq(list(row.values()), [None] * len(COLUMNS), "the all-NULL row")

    async def prepared_statements_describe_and_reuse():
        conn = await db()
        stmt = await conn.prepare("SELECT id, n, tz FROM apg_types WHERE id >= $1 ORDER BY id")
        expect_eq([a.name for a in stmt.get_attributes()], ["id", "n", "tz"], "attribute names")
        expect_eq([a.type.name for a in stmt.get_attributes()], ["int4", "numeric", "timestamptz"], "attribute types")
        expect_eq([p.name for p in stmt.get_parameters()], ["int4"], "parameter types")
        expect_eq([r["id"] for r in await stmt.fetch(1)], [1, 2], "ids >= 1")
        expect_eq([r["id"] for r in await stmt.fetch(2)], [2], "ids >= 2")
        expect_eq(await stmt.fetchval(1, column=1), Decimal("1234.500"), "fetchval of column n")
        expect_eq(await conn.fetchval("SELECT $1::int8 * 2", 21), 42, "parameter in an expression")

    async def executemany_and_copy():
        conn = await db()
        await conn.execute("DROP TABLE IF EXISTS apg_many")
        await conn.execute("CREATE TABLE apg_many (id integer PRIMARY KEY, label text, at date)")
        await conn.executemany(
            "INSERT INTO apg_many VALUES ($1, $2, $3)",
            [(i, f"row {i}", dt.date(2024, 1, 1) + dt.timedelta(days=i)) for i in range(100)],
        )
        expect_eq(await conn.fetchval("SELECT count(*) FROM apg_many"), 100, "rows after executemany")
        out = io.BytesIO()
        await conn.copy_from_query("SELECT id, label FROM apg_many WHERE id < 3 ORDER BY id", output=out)
        expect_eq(out.getvalue().decode(), "0\trow 0\n1\trow 1\n2\trow 2\n", "copy_from_query text output")

    async def copy_records_to_table_binary():
        conn = await db()
        result = await conn.copy_records_to_table(
            "apg_many",
            records=[(1000 + i, f"copied {i}", None) for i in range(50)],
            columns=["id", "label", "at"],
        )
        expect_eq(result, "COPY 50", "status of copy_records_to_table")
        expect_eq(await conn.fetchval("SELECT count(*) FROM apg_many WHERE id >= 1000"), 50, "rows copied")

    async def transactions_commit_and_roll_back():
        conn = await db()
        await conn.execute("DROP TABLE IF EXISTS apg_txn")
        await conn.execute("CREATE TABLE apg_txn (id integer PRIMARY KEY)")
        async with conn.transaction():
            await conn.execute("INSERT INTO apg_txn VALUES (1)")
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO apg_txn VALUES (2)")
                await conn.execute("INSERT INTO apg_txn VALUES (1)")
            raise Failure("a duplicate key was accepted")
        except asyncpg.UniqueViolationError:
            pass
        expect_eq([r["id"] for r in await conn.fetch("SELECT id FROM apg_txn ORDER BY id")], [1], "after rollback")

    async def errors_carry_sqlstates():
        conn = await db()
        cases = [
            ("SELECT * FROM apg_no_such_table", "42P01"),
            ("SELEC 1", "42601"),
            ("SELECT 1/0", "22012"),
            ("SELECT no_such_column FROM apg_txn", "42703"),
        ]
        for sql, code in cases:
            try:
                await conn.execute(sql)
                raise Failure(f"{sql!r} succeeded")
            except asyncpg.PostgresError as e:
                expect_eq(e.sqlstate, code, f"SQLSTATE of {sql!r}")
        expect_eq(await conn.fetchval("SELECT 1"), 1, "the connection works after errors")

    async def cleanup():
        conn = await db()
        for t in ("apg_types", "apg_many", "apg_txn"):
            await conn.execute(f"DROP TABLE IF EXISTS {t}")

    for fn in (
        connects_and_reports_the_server_version,
        type_introspection_with_set_type_codec,
        introspects_array_types_through_pg_type,
        create_table_of_every_type,
        insert_and_fetch_every_type,
        prepared_statements_describe_and_reuse,
        executemany_and_copy,
        copy_records_to_table_binary,
        transactions_commit_and_roll_back,
        errors_carry_sqlstates,
        cleanup,
    ):
        await check(fn)
    if "conn" in live and not live["conn"].is_closed():
        await live["conn"].close()

    failed = [n for n, d in RESULTS if d is not None]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed, {len(GAPS)} known gaps")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
