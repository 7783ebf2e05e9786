//! The reader task: the one consumer of a running [`Source`], for an
//! external source object and for the table log alike.
//!
//! It pulls the source, hands each batch (or each transaction's batches,
//! as one message, so an epoch takes all or none of them) to the loop
//! through the loop's bounded command channel, and passes every seal the
//! loop reports back to the source's `on_sealed`. Retryable errors back off
//! and try again; others end the reader and say why. What differs between
//! the two kinds of reader is only where the messages go ([`Route`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use weir_common::{ChangeBatch, ObjectId};
use weir_connectors::{
    ConnectorError, ConnectorKind, Offsets, Source, SourceBatch, SourceEvent, SourceOpen,
};

use super::Command;
use super::sink_retry::RetryState;
use super::streams::{ReaderId, SourceMessage, SourceToRead, guarded};
use crate::EngineError;

/// Batches one reader may have queued for the loop. The loop's command
/// queue is sized for commits; a source batch is thousands of rows, so
/// each reader is held to a few in flight (bounded memory, and commits
/// are not queued behind a flood of source rows).
const BATCHES_IN_FLIGHT: usize = 16;

/// Where a reader's messages go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Route {
    /// An external source object, by its current reader run.
    Source(ReaderId),
    /// The table log: its batches are table changes positioned by LSN.
    TableLog,
}

/// What the table log's reader hands the loop: one commit.
pub(crate) struct TableLogCommit {
    /// The commit's LSN: the table log's position after it.
    pub lsn: u64,
    /// Its changes, one batch per table (the split names the table).
    pub batches: Vec<SourceBatch>,
    /// Returned to the reader when the loop drops the message.
    pub _permit: OwnedSemaphorePermit,
}

/// One running reader.
pub(super) struct ReaderTask {
    /// For logs.
    pub name: String,
    /// The connector's name, for errors.
    pub connector: String,
    pub route: Route,
    pub commands: mpsc::WeakSender<Command>,
    pub stop: CancellationToken,
    /// Seals that cover this source: `(epoch, offsets)`, in epoch order.
    pub sealed: mpsc::UnboundedReceiver<(u64, Offsets)>,
    /// Its `restart_*` options and the retries so far: after a retryable
    /// error it waits (3 s doubling to 30 s, with jitter, by default) and
    /// reads on; past `restart_max` retries within `restart_window` it
    /// fails. The count resets at the next event.
    pub retry: RetryState,
}

impl ReaderTask {
    async fn send(&self, command: Command) -> bool {
        match self.commands.upgrade() {
            Some(tx) => tx.send(command).await.is_ok(),
            None => false,
        }
    }

    /// Tells the loop about the source's state; the table log has none to
    /// show, so its reader only logs.
    async fn report(&self, message: impl FnOnce(ReaderId) -> SourceMessage) -> bool {
        match self.route {
            Route::Source(id) => self.send(Command::Source(message(id))).await,
            Route::TableLog => true,
        }
    }

    /// Hands the loop one batch or one transaction's batches.
    async fn deliver(
        &self,
        batches: Vec<SourceBatch>,
        position: Option<String>,
        permit: OwnedSemaphorePermit,
    ) -> bool {
        match self.route {
            Route::Source(id) => {
                self.send(Command::Source(SourceMessage::Batch(id, batches, permit)))
                    .await
            }
            Route::TableLog => {
                let position = position.or_else(|| batches.last().map(|b| b.offset.clone()));
                let Some(lsn) = position.and_then(|p| p.parse::<u64>().ok()) else {
                    tracing::error!("the table log produced a batch without an LSN");
                    return false;
                };
                let commit = TableLogCommit {
                    lsn,
                    batches,
                    _permit: permit,
                };
                self.send(Command::TableLog(commit)).await
            }
        }
    }
}

/// Runs a reader of `source` (or of why it could not be opened) until it
/// is stopped, its source ends or fails, or the loop is gone.
pub(super) async fn read(mut task: ReaderTask, source: Result<Box<dyn Source>, ConnectorError>) {
    let mut source = match source {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(source = %task.name, error = %e, "opening a source failed");
            task.report(|id| SourceMessage::Failed(id, e.to_string()))
                .await;
            return;
        }
    };
    let splits: HashSet<String> = source.splits().into_iter().collect();
    let mut ended: HashSet<String> = HashSet::new();
    let in_flight = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    loop {
        while let Ok((epoch, offsets)) = task.sealed.try_recv() {
            match guarded(&task.connector, source.on_sealed(epoch, &offsets)).await {
                Ok(()) => {}
                Err(e @ ConnectorError::Panicked { .. }) => {
                    tracing::error!(source = %task.name, error = %e, "source failed");
                    task.report(|id| SourceMessage::Failed(id, e.to_string()))
                        .await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(source = %task.name, error = %e, "acknowledging a seal upstream failed")
                }
            }
        }
        let event = tokio::select! {
            _ = task.stop.cancelled() => return,
            event = guarded(&task.connector, source.next()) => event,
        };
        let (batches, position) = match event {
            Ok(SourceEvent::Batch(batch)) => (vec![batch], None),
            Ok(SourceEvent::Transaction { batches, position }) => (batches, Some(position)),
            Ok(SourceEvent::SplitEnd { split }) => {
                ended.insert(split);
                if ended.is_superset(&splits) && !task.report(SourceMessage::Ended).await {
                    return;
                }
                continue;
            }
            Ok(SourceEvent::SplitFailed {
                split,
                gap,
                message,
            }) => {
                tracing::error!(
                    source = %task.name, %split, error = %message,
                    "a split failed; the others go on"
                );
                if !task
                    .report(|id| SourceMessage::SplitFailed(id, split, gap, message))
                    .await
                {
                    return;
                }
                continue;
            }
            Ok(SourceEvent::Idle) => continue,
            Err(e) if e.is_retryable() => {
                let Some(wait) = task.retry.next_delay() else {
                    let retries = task.retry.failures - 1;
                    let error = format!(
                        "gave up after {retries} retries (see restart_max and restart_window): {e}"
                    );
                    tracing::error!(source = %task.name, %error, "source failed");
                    task.report(|id| SourceMessage::Failed(id, error)).await;
                    return;
                };
                tracing::warn!(source = %task.name, error = %e, ?wait, "source failed; retrying");
                if !task
                    .report(|id| SourceMessage::Retrying(id, e.to_string()))
                    .await
                {
                    return;
                }
                tokio::select! {
                    _ = task.stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
            Err(e) => {
                if !matches!(e, ConnectorError::Stopped { .. }) {
                    tracing::error!(source = %task.name, error = %e, "source failed");
                }
                let gap = matches!(e, ConnectorError::Gap { .. });
                task.report(|id| {
                    if gap {
                        SourceMessage::Gap(id, e.to_string())
                    } else {
                        SourceMessage::Failed(id, e.to_string())
                    }
                })
                .await;
                return;
            }
        };
        task.retry.failures = 0;
        let permit = tokio::select! {
            _ = task.stop.cancelled() => return,
            permit = in_flight.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        if !task.deliver(batches, position, permit).await {
            return;
        }
    }
}

/// Replays `source` from offset 0 up to `target` and collects its rows,
/// per relation they feed.
pub(super) async fn read_up_to(
    source: &SourceToRead,
    target: &Offsets,
) -> Result<HashMap<ObjectId, ChangeBatch>, EngineError> {
    let empty = Offsets::new();
    let mut reader = open_source(source, &empty, Some(target))?;
    let splits = reader.splits();
    let mut ended: HashSet<String> = HashSet::new();
    let mut parts: HashMap<ObjectId, Vec<ChangeBatch>> = HashMap::new();
    let mut keep = |batch: SourceBatch| {
        if let Some(to) = source.relation_of(&batch.split) {
            parts.entry(to).or_default().push(batch.changes);
        }
    };
    while ended.len() < splits.len() {
        match reader.next().await? {
            SourceEvent::Batch(batch) => keep(batch),
            SourceEvent::Transaction { batches, .. } => batches.into_iter().for_each(&mut keep),
            SourceEvent::SplitEnd { split } => {
                ended.insert(split);
            }
            // A source whose splits can fail alone (postgres-cdc) cannot
            // replay, so none comes here.
            SourceEvent::SplitFailed { .. } | SourceEvent::Idle => {}
        }
    }
    source
        .relations()
        .into_iter()
        .map(|(id, schema)| {
            let rows = parts.get(&id).map_or(&[][..], Vec::as_slice);
            Ok((id, crate::rows::concat_changes(schema, rows)?))
        })
        .collect()
}

/// Opens an external source's connector at `offsets`.
pub(super) fn open_source(
    source: &SourceToRead,
    offsets: &Offsets,
    until: Option<&Offsets>,
) -> Result<Box<dyn Source>, ConnectorError> {
    let tables = source.source_tables();
    let offsets = super::streams::for_connector(offsets);
    let until = until.map(super::streams::for_connector);
    weir_connectors::connector(&source.connector, ConnectorKind::Source)?.open_source(SourceOpen {
        name: &source.name,
        schema: source.schema.clone(),
        options: &source.options,
        offsets: &offsets,
        until: until.as_ref(),
        tables: &tables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source whose code has a bug.
    struct Panics;

    #[async_trait::async_trait]
    impl Source for Panics {
        fn splits(&self) -> Vec<String> {
            vec!["0".into()]
        }

        async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
            panic!("a bug in the connector")
        }
    }

    #[tokio::test]
    async fn a_panicking_source_fails_alone_with_the_panic_as_its_error() {
        let (commands, mut received) = mpsc::channel(4);
        let reader = ReaderId {
            source: weir_common::ObjectId(7),
            run: 1,
        };
        let (_seals, sealed) = mpsc::unbounded_channel();
        let task = ReaderTask {
            name: "public.s".into(),
            connector: "buggy".into(),
            route: Route::Source(reader),
            commands: commands.downgrade(),
            stop: CancellationToken::new(),
            sealed,
            retry: RetryState::new(Default::default()),
        };
        read(task, Ok(Box::new(Panics))).await;
        match received.recv().await {
            Some(Command::Source(SourceMessage::Failed(id, error))) => {
                assert_eq!(id, reader);
                assert!(
                    error.contains("\"buggy\" panicked: a bug in the connector"),
                    "{error}"
                );
            }
            _ => panic!("the source was not reported failed"),
        }
    }
}
