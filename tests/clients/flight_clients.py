#!/usr/bin/env python3
"""Weir Arrow Flight SQL client test.

Runs real clients against a running Weir server's Flight SQL port:

* ADBC (``adbc_driver_flightsql.dbapi``): DDL, parameterized prepared
  inserts (``execute`` and ``executemany``), bulk ingest with
  ``adbc_ingest`` (append, create, append-to-missing-table error), queries with
  and without parameters (types and values checked), SQLSTATE-bearing errors,
  ``adbc_get_info``, ``adbc_get_objects``, ``adbc_get_table_schema`` and
  ``adbc_get_table_types``.
* ``pyarrow.flight`` directly, with hand-encoded Flight SQL protobuf commands:
  basic-auth handshake, ``list_actions``, a plain ``CommandStatementQuery``
  (GetFlightInfo + DoGet), and a plain ``DoPut`` with a
  ``CommandStatementIngest`` descriptor.

Usage: flight_clients.py --port PORT [--host HOST]

Every check is reported; the script ends with ``N passed, M failed`` and exits
non-zero when anything failed.
"""

import argparse
import sys
import traceback
import uuid

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight

SQL_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."


class Failure(Exception):
    pass


def expect(cond, message):
    if not cond:
        raise Failure(message)


def expect_eq(actual, expected, what):
    if actual != expected:
        raise Failure(f"{what}: expected {expected!r}, got {actual!r}")


def is_string_type(t):
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


# ---- minimal protobuf encoding for Flight SQL commands ------------------------


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, pos


def field_bytes(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def pack_any(message_name, payload):
    return field_bytes(1, (SQL_PREFIX + message_name).encode()) + field_bytes(2, payload)


def statement_query(sql):
    return pack_any("CommandStatementQuery", field_bytes(1, sql.encode()))


def statement_ingest(table, if_not_exist, if_exists):
    options = field_varint(1, if_not_exist) + field_varint(2, if_exists)
    return pack_any(
        "CommandStatementIngest", field_bytes(1, options) + field_bytes(2, table.encode())
    )


def decode_update_result(buf):
    """DoPutUpdateResult { int64 record_count = 1; }"""
    pos = 0
    count = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        if key == 0x08:
            count, pos = read_varint(buf, pos)
            if count >= 1 << 63:
                count -= 1 << 64
        else:
            raise Failure(f"unexpected field {key} in DoPutUpdateResult")
    return count


# ---- the checks --------------------------------------------------------------


class Suite:
    def __init__(self, host, port):
        self.host = host
        self.port = port
        self.uri = f"grpc://{host}:{port}"
        self.table = f"flight_t_{uuid.uuid4().hex[:8]}"
        self.created = f"flight_c_{uuid.uuid4().hex[:8]}"
        self.flight_ingested = f"flight_p_{uuid.uuid4().hex[:8]}"
        self.conn = None

    def cursor(self):
        return self.conn.cursor()

    def test_connect(self):
        self.conn = flight_sql.connect(self.uri, autocommit=True)
        info = self.conn.adbc_get_info()
        expect_eq(info.get("vendor_name"), "weir", "adbc_get_info vendor_name")
        expect(info.get("vendor_version"), f"vendor_version missing: {info}")

    def test_create_table(self):
        with self.cursor() as cur:
            cur.execute(
                f"CREATE TABLE {self.table} ("
                "id BIGINT PRIMARY KEY, name TEXT, score DOUBLE PRECISION, ok BOOLEAN)"
            )
            cur.fetchall()

    def test_prepared_insert(self):
        with self.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.table} VALUES ($1, $2, $3, $4)", (1, "alice", 1.5, True)
            )
            expect_eq(cur.rowcount, 1, "rowcount of a one-row prepared insert")
            cur.executemany(
                f"INSERT INTO {self.table} VALUES ($1, $2, $3, $4)",
                [(2, "bob", 2.5, False), (3, None, None, None)],
            )
            expect_eq(cur.rowcount, 2, "rowcount of executemany over two rows")

    def test_bulk_ingest_append(self):
        data = pa.table(
            {
                "id": pa.array([10, 11], pa.int64()),
                "name": pa.array(["carol", "dave"], pa.string()),
                "score": pa.array([10.25, None], pa.float64()),
                "ok": pa.array([True, False], pa.bool_()),
            }
        )
        with self.cursor() as cur:
            written = cur.adbc_ingest(self.table, data, mode="append")
            expect_eq(written, 2, "rows written by adbc_ingest(append)")

    def test_query_types_and_values(self):
        with self.cursor() as cur:
            cur.execute(f"SELECT id, name, score, ok FROM {self.table} ORDER BY id")
            result = cur.fetch_arrow_table()
        schema = result.schema
        expect_eq(schema.names, ["id", "name", "score", "ok"], "column names")
        expect_eq(schema.field("id").type, pa.int64(), "type of id")
        expect(is_string_type(schema.field("name").type), f"name is {schema.field('name').type}")
        expect_eq(schema.field("score").type, pa.float64(), "type of score")
        expect_eq(schema.field("ok").type, pa.bool_(), "type of ok")
        rows = [tuple(r.values()) for r in result.to_pylist()]
        expect_eq(
            rows,
            [
                (1, "alice", 1.5, True),
                (2, "bob", 2.5, False),
                (3, None, None, None),
                (10, "carol", 10.25, True),
                (11, "dave", None, False),
            ],
            "rows read back",
        )

    def test_parameterized_query(self):
        with self.cursor() as cur:
            cur.execute(f"SELECT name, score FROM {self.table} WHERE id = $1", (2,))
            expect_eq(cur.fetchall(), [("bob", 2.5)], "rows for id = 2")
            cur.execute(f"SELECT count(*) AS n FROM {self.table} WHERE score > $1", (2.0,))
            expect_eq(cur.fetchall(), [(2,)], "count for score > 2.0")

    def test_errors_carry_sqlstate(self):
        with self.cursor() as cur:
            try:
                cur.execute("SELECT * FROM flight_no_such_table")
                cur.fetchall()
            except flight_sql.Error as e:
                expect("42P01" in str(e), f"missing 42P01 in {e}")
            else:
                raise Failure("querying a missing table did not fail")
            try:
                cur.execute("SELEC 1")
                cur.fetchall()
            except flight_sql.Error as e:
                expect("42601" in str(e), f"missing 42601 in {e}")
            else:
                raise Failure("a syntax error did not fail")

    def test_ingest_missing_table_fails(self):
        data = pa.table({"x": pa.array([1], pa.int64())})
        with self.cursor() as cur:
            try:
                cur.adbc_ingest(f"flight_missing_{uuid.uuid4().hex[:8]}", data, mode="append")
            except flight_sql.Error as e:
                expect("42P01" in str(e), f"missing 42P01 in {e}")
            else:
                raise Failure("append into a missing table did not fail")

    def test_ingest_create(self):
        data = pa.table(
            {
                "k": pa.array([1, 2, 3], pa.int32()),
                "v": pa.array(["x", "y", None], pa.string()),
            }
        )
        with self.cursor() as cur:
            written = cur.adbc_ingest(self.created, data, mode="create")
            expect_eq(written, 3, "rows written by adbc_ingest(create)")
            cur.execute(f"SELECT k, v FROM {self.created} ORDER BY k")
            result = cur.fetch_arrow_table()
        expect_eq(result.schema.field("k").type, pa.int32(), "type of created k")
        expect_eq(
            [tuple(r.values()) for r in result.to_pylist()],
            [(1, "x"), (2, "y"), (3, None)],
            "rows of created table",
        )

    def test_get_objects(self):
        objects = self.conn.adbc_get_objects(depth="all").read_all().to_pylist()
        found = None
        for catalog in objects:
            for db_schema in catalog.get("catalog_db_schemas") or []:
                for table in db_schema.get("db_schema_tables") or []:
                    if table["table_name"] == self.table:
                        found = (catalog["catalog_name"], db_schema["db_schema_name"], table)
        expect(found is not None, f"{self.table} not in adbc_get_objects()")
        _, _, table = found
        expect_eq(table["table_type"], "TABLE", "table_type")
        columns = [c["column_name"] for c in table.get("table_columns") or []]
        expect_eq(columns, ["id", "name", "score", "ok"], "columns from adbc_get_objects")

    def test_get_table_schema(self):
        schema = self.conn.adbc_get_table_schema(self.table)
        expect_eq(schema.names, ["id", "name", "score", "ok"], "adbc_get_table_schema names")
        expect_eq(schema.field("id").type, pa.int64(), "schema type of id")
        expect_eq(schema.field("ok").type, pa.bool_(), "schema type of ok")
        types = self.conn.adbc_get_table_types()
        expect("TABLE" in types, f"TABLE not in table types {types}")

    # ---- pyarrow.flight, no ADBC -------------------------------------------

    def flight_client(self):
        return flight.connect(f"grpc://{self.host}:{self.port}")

    def test_flight_handshake_and_actions(self):
        client = self.flight_client()
        key, value = client.authenticate_basic_token("weir", "any-password")
        expect_eq(key.lower(), b"authorization", "handshake header key")
        expect(value.startswith(b"Bearer "), f"handshake header value {value!r}")
        actions = {a.type for a in client.list_actions()}
        expect(
            {"CreatePreparedStatement", "ClosePreparedStatement"} <= actions,
            f"prepared statement actions missing from {sorted(actions)}",
        )
        client.close()

    def test_flight_plain_query(self):
        client = self.flight_client()
        descriptor = flight.FlightDescriptor.for_command(
            statement_query(f"SELECT id, name FROM {self.table} WHERE id < 3 ORDER BY id")
        )
        info = client.get_flight_info(descriptor)
        expect_eq(info.schema.names, ["id", "name"], "FlightInfo schema names")
        expect_eq(len(info.endpoints), 1, "endpoints of a query")
        table = client.do_get(info.endpoints[0].ticket).read_all()
        expect(table.schema.equals(info.schema), f"{table.schema} != {info.schema}")
        expect_eq(table.to_pylist(), [{"id": 1, "name": "alice"}, {"id": 2, "name": "bob"}],
                  "rows from DoGet")
        client.close()

    def test_flight_plain_ingest(self):
        client = self.flight_client()
        ddl = flight.FlightDescriptor.for_command(
            statement_query(f"CREATE TABLE {self.flight_ingested} (a BIGINT, b TEXT)")
        )
        info = client.get_flight_info(ddl)
        expect_eq(len(info.endpoints), 0, "endpoints of a DDL statement (already executed)")
        data = pa.table({"b": pa.array(["p", "q"]), "a": pa.array([7, 8], pa.int64())})
        # if_not_exist = FAIL (2), if_exists = APPEND (2)
        descriptor = flight.FlightDescriptor.for_command(
            statement_ingest(self.flight_ingested, 2, 2)
        )
        writer, reader = client.do_put(descriptor, data.schema)
        writer.write_table(data)
        writer.done_writing()
        metadata = reader.read()
        writer.close()
        expect(metadata is not None, "DoPut returned no PutResult")
        expect_eq(decode_update_result(metadata.to_pybytes()), 2, "DoPut ingest record_count")
        info = client.get_flight_info(flight.FlightDescriptor.for_command(
            statement_query(f"SELECT a, b FROM {self.flight_ingested} ORDER BY a")))
        table = client.do_get(info.endpoints[0].ticket).read_all()
        expect_eq(table.to_pylist(), [{"a": 7, "b": "p"}, {"a": 8, "b": "q"}],
                  "rows ingested by plain DoPut (matched by name)")
        client.close()

    def test_cleanup(self):
        with self.cursor() as cur:
            for t in (self.table, self.created, self.flight_ingested):
                cur.execute(f"DROP TABLE {t}")
                cur.fetchall()
        self.conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()

    suite = Suite(args.host, args.port)
    tests = [name for name in Suite.__dict__ if name.startswith("test_")]
    passed = failed = 0
    for name in tests:
        try:
            getattr(suite, name)()
        except Failure as e:
            failed += 1
            print(f"FAIL {name}: {e}")
        except Exception as e:  # a client error is a failure too, with context
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
        else:
            passed += 1
            print(f"ok   {name}")
        if name == "test_connect" and suite.conn is None:
            print("cannot continue without a connection")
            break
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
