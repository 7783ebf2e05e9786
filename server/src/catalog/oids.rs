//! The oid every catalog object answers to in `pg_catalog`: derived from
//! its id, so it is stable across restarts without being stored.

use weir_common::ObjectId;

/// A relation's oid (table, projection, source); the next two are its
/// primary-key index and constraint (`pg::pkey_index_oid`,
/// `pg::pkey_constraint_oid`), the third is unused.
pub fn table_oid(id: ObjectId) -> i64 {
    16384 + 4 * id.0 as i64
}
