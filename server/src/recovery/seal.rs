//! What opening the database learns for recovery: the latest seal of the
//! state backend, whether projections can be restored from it, and the
//! table-log records after it that restored projections must replay.

use std::sync::Arc;

use weir_common::{ChangeBatch, ObjectId};
use weir_engine::runtime::ChainPrefetch;
use weir_engine::runtime::checkpoints::{TABLE_LOG_ID, TABLE_LOG_OFFSET};
use weir_storage::{ObjectStateBackend, SealManifest, StateBackend as _};

use crate::error::ServerError;

/// What [`super::recover`] needs from opening the database.
pub struct Recovery {
    /// The latest seal, if projections can be restored from it.
    pub seal: Option<Arc<SealManifest>>,
    /// The seal's vnode chains, being read since [`Self::prefetch`].
    pub(crate) prefetched: Option<ChainPrefetch>,
    /// The table-log LSN the seal covers.
    covered_lsn: u64,
    pub(crate) replay: Vec<(u64, Vec<(ObjectId, ChangeBatch)>)>,
    /// The latest seal's source offsets and sink descriptors, when it is a
    /// seal of this data directory: sources resume there and sinks
    /// re-commit it, whether or not projection state is restored.
    pub sealed_streams: weir_engine::runtime::streams::SealedStreams,
}

impl Recovery {
    /// Reads the latest seal of `state`. A seal of another table log than
    /// `table_log_id`, or whose covered LSN is past the log's end
    /// (`last_lsn`), describes a log this data directory does not have, so
    /// nothing is restored from it.
    /// The log before `log_start` (the table snapshot's LSN) is gone: a
    /// seal covering less cannot be replayed either.
    pub async fn start(
        state: &ObjectStateBackend,
        table_log_id: &str,
        log_start: u64,
        last_lsn: u64,
    ) -> Result<Self, ServerError> {
        let mut recovery = Self {
            seal: None,
            prefetched: None,
            covered_lsn: 0,
            replay: Vec::new(),
            sealed_streams: Default::default(),
        };
        let Some(epoch) = state.latest_committed_epoch().await? else {
            return Ok(recovery);
        };
        let Some(seal) = state.read_seal(epoch).await? else {
            return Ok(recovery);
        };
        if !seal.source_offsets.contains_key(TABLE_LOG_OFFSET) {
            // Nothing was checkpointed yet (a store's first claim).
            return Ok(recovery);
        }
        if seal.source_offsets.get(TABLE_LOG_ID).map(String::as_str) != Some(table_log_id) {
            tracing::warn!(
                epoch,
                "the latest seal is of another data directory's table log; projections are rebuilt"
            );
            return Ok(recovery);
        }
        recovery.sealed_streams = weir_engine::runtime::streams::SealedStreams::from_seal(
            epoch,
            &seal.source_offsets,
            &seal.sink_descriptors,
        );
        let covered = seal
            .source_offsets
            .get(TABLE_LOG_OFFSET)
            .and_then(|lsn| lsn.parse::<u64>().ok());
        match covered {
            Some(lsn) if lsn < log_start => tracing::warn!(
                epoch,
                covered = lsn,
                log_start,
                "the table log after the latest seal was compacted away; projections are rebuilt"
            ),
            Some(lsn) if lsn <= last_lsn => {
                recovery.covered_lsn = lsn;
                recovery.seal = Some(seal);
            }
            Some(lsn) => tracing::warn!(
                epoch,
                covered = lsn,
                log_end = last_lsn,
                "the latest seal covers more of the table log than this data directory holds; projections are rebuilt"
            ),
            None => {}
        }
        Ok(recovery)
    }

    /// Starts reading the seal's vnode chains, if projections may be
    /// restored from it. Reading goes on in the background until the
    /// restore takes it, or stops when this is dropped.
    pub fn prefetch(&mut self, state: &Arc<ObjectStateBackend>) {
        if let Some(seal) = &self.seal {
            self.prefetched = Some(ChainPrefetch::start(state.clone(), seal.epoch));
        }
    }

    /// Whether the record at `lsn` must be replayed into restored projections.
    pub fn replays(&self, lsn: u64) -> bool {
        self.seal.is_some() && lsn > self.covered_lsn
    }

    pub fn push(&mut self, lsn: u64, changes: Vec<(ObjectId, ChangeBatch)>) {
        self.replay.push((lsn, changes));
    }
}
