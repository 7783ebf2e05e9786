//! A table of a source that covers several breaks alone: truncated, a
//! column dropped or changed, its replica identity lowered, a value that
//! does not parse, dropped or created again upstream. That table stops
//! being read, its failure sealed with the changes before it (so every
//! start reports it again), and the other tables and the slot go on. A
//! source that reads one table fails as a whole, as it always did.
//!
//! A failure that is a gap (the table dropped or created again) is
//! accepted like any gap: the table then goes on with the table there is
//! now. Any other is for good: DROP the table's relation and CREATE it
//! again, which reads it afresh (a new relation is a new split).

use super::progress::{Carry, TableFailure, TableProgress};
use super::{CdcSource, Phase, TableState};
use crate::{ConnectorError, SourceEvent};

impl TableState {
    pub(super) fn failed(&self) -> bool {
        self.progress.as_ref().is_some_and(|p| p.failed.is_some())
    }
}

impl CdcSource {
    /// Table `i` cannot be read on because of `error`. Reading one table,
    /// the source fails with it (the error is returned); covering several,
    /// the table is marked failed, to be sealed with the next event, and
    /// reported ([`SourceEvent::SplitFailed`]) after it.
    pub(super) fn fail_table(
        &mut self,
        i: usize,
        error: ConnectorError,
    ) -> Result<(), ConnectorError> {
        if self.single {
            return Err(error);
        }
        let gap = matches!(error, ConnectorError::Gap { .. });
        let message = match error {
            ConnectorError::Gap { message, .. } | ConnectorError::Rejected { message, .. } => {
                message
            }
            other => other.to_string(),
        };
        let table = &mut self.tables[i];
        tracing::error!(source = %self.name, table = %table.upstream.qualified(), %message, gap, "a table of the source failed; the other tables go on");
        let gaps_accepted = table.gaps_accepted;
        let progress = table.progress.get_or_insert_with(|| TableProgress {
            segments: Vec::new(),
            snapshot_done: false,
            table_oid: None,
            gaps_accepted,
            failed: None,
        });
        progress.failed = Some(TableFailure {
            gap,
            message: message.clone(),
        });
        table.layout = None;
        self.pending.push_back(SourceEvent::SplitFailed {
            split: table.split.clone(),
            gap,
            message,
        });
        self.unsealed.insert(i);
        if let Phase::Stream(stream) = &mut self.phase {
            stream.forget(i);
        }
        Ok(())
    }

    /// Failures sealed before, reported again as the source opens.
    pub(super) fn report_sealed_failures(&mut self) {
        for table in &self.tables {
            if let Some(failure) = table.progress.as_ref().and_then(|p| p.failed.as_ref()) {
                self.pending.push_back(SourceEvent::SplitFailed {
                    split: table.split.clone(),
                    gap: failure.gap,
                    message: failure.message.clone(),
                });
            }
        }
    }

    /// Gaps of tables the user accepted since they were sealed, as the
    /// source opens (so they are not reported again): those tables go on
    /// with the table there is now (their changes meanwhile, and rows of a
    /// table created again, are the gap). The acceptance is sealed with
    /// the first event.
    pub(super) fn accept_table_gaps(&mut self) {
        for (i, table) in self.tables.iter_mut().enumerate() {
            let gaps_accepted = table.gaps_accepted;
            let Some(progress) = &mut table.progress else {
                continue;
            };
            if progress.failed.as_ref().is_some_and(|f| f.gap)
                && gaps_accepted > progress.gaps_accepted
            {
                tracing::warn!(source = %self.name, table = %table.upstream.qualified(), "going on past an accepted gap of a table");
                progress.failed = None;
                progress.gaps_accepted = gaps_accepted;
                progress.table_oid = None;
                progress.snapshot_done = true;
                self.unsealed.insert(i);
            }
        }
    }

    /// The event that seals failures found outside a transaction.
    pub(super) fn seal_failures(&mut self) -> Option<SourceEvent> {
        (!self.unsealed.is_empty()).then(|| self.emit(Vec::new(), Carry::Changed, false))
    }
}
