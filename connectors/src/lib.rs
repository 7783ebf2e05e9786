//! Connectors: where data enters Weir (sources) and where it leaves (sinks).
//!
//! This crate is the home of the `Source`/`Sink` traits, the connector
//! registry and each connector behind its Cargo feature (ARCHITECTURE.md §6).
//! It is empty until the first source lands: tables, the only way data enters
//! today, are written through SQL and live in `weir-server`/`weir-storage`.
