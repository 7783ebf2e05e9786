//! The table log as a [`Source`]: how committed table changes reach the
//! loop, on the same path as an external source's rows.
//!
//! - Its splits are the tables (named by [`split_of`]); its offset, and
//!   the position of each commit, is the commit's LSN. A commit is one
//!   [`SourceEvent::Transaction`], so an epoch never holds half of one.
//! - Commits arrive through a bounded inbox ([`Runtime::changes`] waits
//!   for room), so a runtime that falls behind slows writers down.
//! - It is opened at the log's end when the runtime starts: everything
//!   before is in the tables deployments backfill from, or replayed by a
//!   restore into the projections it restores.
//! - Its acknowledgement after a seal (`on_sealed`) is log compaction: the
//!   tables are snapshotted as of the sealed LSN, so the log kept is what
//!   a restore from that seal replays. It keeps the tables after each
//!   commit until a seal passes it, to have the tables of any LSN a seal
//!   may name.
//!
//! [`Runtime::changes`]: super::Runtime::changes

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use weir_common::{ChangeBatch, ObjectId};
use weir_connectors::{ConnectorError, Offsets, Source, SourceBatch, SourceEvent};

use super::{TableLogCompaction, Tables};

/// The key of the table log's position in the offsets a seal acknowledges.
pub(crate) const POSITION: &str = "lsn";

/// How long `next` waits for a commit before reporting idle.
const IDLE_AFTER: Duration = Duration::from_millis(250);

/// The split that names `table`.
pub(crate) fn split_of(table: ObjectId) -> String {
    table.0.to_string()
}

/// The table a split of the table log names.
pub(crate) fn table_of(split: &str) -> Option<ObjectId> {
    split.parse().ok().map(ObjectId)
}

/// One commit handed to the runtime.
pub(crate) struct Commit {
    pub lsn: u64,
    pub changes: Vec<(ObjectId, ChangeBatch)>,
    /// Every table after the commit.
    pub tables: Tables,
}

/// The table log's reader side.
pub(crate) struct TableLogSource {
    inbox: mpsc::Receiver<Commit>,
    /// `(lsn, tables after it)` for the LSN opened at and each commit
    /// since, oldest first, until a seal passes them.
    tables: VecDeque<(u64, Tables)>,
    compaction: Box<dyn TableLogCompaction>,
}

impl TableLogSource {
    /// The source opened at `lsn`, the log's end, where the tables are
    /// `tables`; commits come through `inbox`.
    pub(crate) fn open(
        inbox: mpsc::Receiver<Commit>,
        lsn: u64,
        tables: Tables,
        compaction: Box<dyn TableLogCompaction>,
    ) -> Self {
        Self {
            inbox,
            tables: VecDeque::from([(lsn, tables)]),
            compaction,
        }
    }

    fn stopped() -> ConnectorError {
        ConnectorError::Stopped {
            connector: "table log".into(),
        }
    }
}

#[async_trait]
impl Source for TableLogSource {
    /// The tables as of the latest commit handed out. Unlike other
    /// sources' splits these change with DDL, and none ever ends.
    fn splits(&self) -> Vec<String> {
        self.tables
            .back()
            .map(|(_, tables)| tables.keys().copied().map(split_of).collect())
            .unwrap_or_default()
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
        let commit = match tokio::time::timeout(IDLE_AFTER, self.inbox.recv()).await {
            Err(_) => return Ok(SourceEvent::Idle),
            Ok(None) => return Err(Self::stopped()),
            Ok(Some(commit)) => commit,
        };
        let position = commit.lsn.to_string();
        self.tables.push_back((commit.lsn, commit.tables));
        let batches = commit
            .changes
            .into_iter()
            .map(|(table, changes)| SourceBatch {
                split: split_of(table),
                changes,
                offset: position.clone(),
                max_event_time: None,
                skipped: 0,
            })
            .collect();
        Ok(SourceEvent::Transaction { batches, position })
    }

    /// Compacts the log up to the sealed LSN (when due) with the tables as
    /// of it, and forgets the tables of every LSN before.
    async fn on_sealed(&mut self, _epoch: u64, offsets: &Offsets) -> Result<(), ConnectorError> {
        let Some(lsn) = offsets.get(POSITION).and_then(|p| p.parse::<u64>().ok()) else {
            return Err(ConnectorError::BadPosition {
                connector: "table log".into(),
                value: format!("{offsets:?}"),
                message: format!("no \"{POSITION}\" to acknowledge"),
            });
        };
        while self.tables.len() > 1 && self.tables[1].0 <= lsn {
            self.tables.pop_front();
        }
        if let Some((at, tables)) = self.tables.front()
            && *at == lsn
            && self.compaction.due(lsn)
        {
            self.compaction.compact(lsn, tables.clone());
        }
        Ok(())
    }
}

/// The offsets that acknowledge the table log up to `lsn`.
pub(crate) fn sealed_at(lsn: u64) -> Offsets {
    Offsets::from([(POSITION.to_string(), lsn.to_string())])
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Default, Clone)]
    struct Compacted(Arc<Mutex<Vec<u64>>>);

    impl TableLogCompaction for Compacted {
        fn due(&self, _lsn: u64) -> bool {
            true
        }
        fn compact(&self, lsn: u64, _tables: Tables) {
            self.0.lock().unwrap().push(lsn);
        }
    }

    fn commit(lsn: u64) -> Commit {
        Commit {
            lsn,
            changes: Vec::new(),
            tables: Tables::default(),
        }
    }

    #[tokio::test]
    async fn a_commit_is_one_transaction_at_its_lsn_and_a_seal_compacts_at_exactly_its_lsn() {
        let (tx, rx) = mpsc::channel(8);
        let compacted = Compacted::default();
        let mut source =
            TableLogSource::open(rx, 3, Tables::default(), Box::new(compacted.clone()));
        for lsn in [4, 5, 6] {
            tx.send(commit(lsn)).await.unwrap();
        }
        for lsn in [4, 5, 6] {
            match source.next().await.unwrap() {
                SourceEvent::Transaction { batches, position } => {
                    assert!(batches.is_empty());
                    assert_eq!(position, lsn.to_string());
                }
                other => panic!("expected a transaction, got {other:?}"),
            }
        }
        source.on_sealed(1, &sealed_at(5)).await.unwrap();
        assert_eq!(*compacted.0.lock().unwrap(), vec![5]);
        // The tables of 5 and later are kept, those before are not.
        assert_eq!(
            source.tables.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            vec![5, 6]
        );
        // An older seal acknowledged again changes nothing.
        source.on_sealed(2, &sealed_at(3)).await.unwrap();
        assert_eq!(*compacted.0.lock().unwrap(), vec![5]);
        drop(tx);
        assert!(matches!(
            source.next().await,
            Err(ConnectorError::Stopped { .. })
        ));
    }
}
