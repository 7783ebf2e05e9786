//! Integration tests of `weir-storage` (one test binary for the crate).
//!
//! - `conformance`: one suite for [`weir_storage::ObjectStateBackend`], run
//!   against memory, a local directory and S3 (moto, in `s3`);
//! - `faults`: the same backend over a fault-injecting store;
//! - `model`: property tests of the seal/fence protocol model;
//! - `table_log`: group commit of the table log (LSN tickets in enqueue
//!   order, shared fsyncs) and the poisoning after a failed fsync.

mod conformance;
mod faults;
mod model;
mod s3;
mod table_log;
