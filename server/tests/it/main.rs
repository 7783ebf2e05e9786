//! Integration tests of the `weir` binary: one test binary for the crate
//! (each links all of DataFusion). Every test starts its own server through
//! [`harness::WeirServer`] on free ports with a temporary data directory.
//!
//! Helpers: `harness` (the server process, a raw pgwire client), `postgres`
//! (a throwaway PostgreSQL cluster), `pgcodec`
//! (binary NUMERIC and INTERVAL for tokio-postgres).
//!
//! Modules by client or concern:
//! - `slt`: every `sqllogictest/tests/*.slt` file against one server.
//! - `tokio_pg`: the Rust driver: extended protocol, binary/text, COPY, cancel;
//!   `pg_cursors_copy`: cursors, binary COPY, statements after COPY FROM STDIN.
//! - `psql`, `python`, `jdbc`: real clients (psql; psycopg, asyncpg,
//!   SQLAlchemy and the Flight SQL scripts in `tests/clients/`; pgjdbc).
//! - `crash`: `kill -9` during ingestion loses no acknowledged row;
//!   `crash_projections`: 20 `kill -9` rounds under projections, which must
//!   equal their queries ad hoc after each restore.
//! - `groupcommit`: many concurrent sessions inserting distinct and
//!   contested keys: every acknowledged row visible and kept across
//!   `kill -9`, every duplicate refused with 23505, a projection equal to
//!   its query ad hoc.
//! - `projections`: projections across `kill -9`, read-your-writes, epochs.
//! - `projections_diff`: every projection shape against its query run ad hoc,
//!   after random writes (seeded by `WEIR_DIFF_SEED`).
//! - `sources`: CREATE SOURCE/SINK validation, SHOW CREATE round trips,
//!   DROP CASCADE, restarts, and `kill -9` under a nexmark source with a
//!   projection and a blackhole sink (exactly-once).
//! - `pg_cdc`: the `postgres-cdc` source against a throwaway PostgreSQL:
//!   CREATE checks upstream, and a changing table through a projection to
//!   a postgres sink and a destination exactly across `kill -9`; a dropped
//!   slot blocks a destination until ACCEPT GAP.
//! - `pg_cdc_tables`: a shared `postgres-cdc` source and its tables
//!   (`CREATE SOURCE t FROM shared TABLE '...'`): checks at CREATE, SHOW
//!   CREATE round trips, DROP CASCADE letting the slot go; one table read
//!   into a projection.
//! - `event_time`: watermarks from `WATERMARK FOR`, windows closing on
//!   them, `EMIT ON WINDOW CLOSE` exact across `kill -9`.
//! - `append_only`: APPEND ONLY tables with `WATERMARK FOR`: windows
//!   closing as rows are inserted, across `kill -9`; writes that change
//!   rows refused.
//! - `sessions`: SESSION windows ad hoc and in projections equal to them
//!   as rows merge and split sessions; closing on a watermark with rows
//!   out of order, late rows counted, once each across `kill -9`.
//! - `destination`: CREATE DESTINATION checks, a projection mirrored into
//!   a created target, SHOW CREATE, REPAIR under a new generation.
//! - `sequences`: values from `nextval`, `SERIAL` on INSERT and COPY, and
//!   `setval`, never handed out twice across `kill -9`.
//! - `secrets`: CREATE SECRET / CONNECTION: a password that reaches a real
//!   PostgreSQL (SCRAM) and is never shown or stored in plain text.
//! - `pg_sink`: the `postgres` sink against a throwaway PostgreSQL: checks
//!   at CREATE, its fencing protocol, exactness across `kill -9`.
//! - `files`: the `files` sink and source: checks at CREATE, Parquet and
//!   CSV changelog files exact across `kill -9`, a watched directory read
//!   into a projection and a sink exactly across `kill -9`.
//! - `kafka`: a tansu topic read into a projection (exact) and copied by a
//!   kafka sink (at least once) across `kill -9`.
//! - `kafka_tls`: the kafka source and sink over TLS (tansu behind a TLS
//!   terminator), with a client certificate, and their refusals at CREATE.
//! - `nexmark`: every Nexmark query maintained over nexmark sources equals
//!   it run ad hoc over the same events.
//! - `point_reads`: scans narrowed by primary key and prepared point
//!   queries, against full scans after random writes.
//! - `http`, `auth`, `tls`: health/metrics, SCRAM, TLS.
//!
//! External tools (psql, java with pgjdbc, the Python venv) are installed by
//! `scripts/test-all.sh`; a test whose tool is missing fails and says how to get it.

mod harness;
mod pgcodec;
mod postgres;

mod alter_options;
mod alter_table;
mod append_only;
mod auth;
mod constraints;
mod crash;
mod crash_projections;
mod destination;
mod event_time;
mod files;
mod groupcommit;
mod http;
mod jdbc;
mod kafka;
mod kafka_tls;
mod migrations;
mod nexmark;
mod pg_cdc;
mod pg_cdc_several;
mod pg_cdc_tables;
mod pg_cursors_copy;
mod pg_sink;
mod pg_sink_skip;
mod pg_table;
mod point_reads;
mod projections;
mod projections_diff;
mod psql;
mod python;
mod secrets;
mod sequences;
mod sessions;
mod slt;
mod sources;
mod temporal;
mod tls;
mod tokio_pg;
