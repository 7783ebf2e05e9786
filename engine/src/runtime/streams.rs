//! Sources and sinks inside the runtime's loop: one shared reader per source object, one
//! writer per sink, and the offsets and descriptors every seal records.
//!
//! - A source is read once, by a reader task started when the first
//!   projection or sink over it is deployed, at the offsets the loop has
//!   received so far (after a start: the latest seal's). Its batches come
//!   back to the loop as [`SourceMessage`]s, in order, through the loop's
//!   bounded command channel, so a slow loop slows the reader.
//! - A projection or sink deployed over a source that is already being
//!   read backfills from offset 0 up to the received offsets with a
//!   private reader, then follows the shared reader. Over a source that
//!   cannot replay it starts at the shared reader's position (CREATE says
//!   so); rebuilt after a start over such a source that was read before,
//!   it is failed instead ([`Streams::cannot_replay`]): its input before
//!   the sealed offsets is gone, and a result of the rest would be wrong.
//! - Each closed epoch fixes the *covered* offsets (everything received is
//!   in it), writes each sink's share of the epoch and pre-commits every
//!   sink. A seal records the covered offsets (`source:<id>`) and the
//!   latest descriptors (`sink:<id>`); after it, sinks commit and sources
//!   hear `on_sealed`.
//! - A source that covers several upstream tables (a shared postgres-cdc
//!   source) is read once too: each batch's split names the table whose
//!   relation its rows feed (the relation id in decimal), and the source's
//!   own `stream` split feeds none. Every split's offset is received,
//!   covered and sealed under the source, so an epoch takes a transaction
//!   over several tables whole; `weir_catalog.sources` shows each table
//!   with its own offset, rows and failure (`source_tables`).
//! - A source or sink that fails is marked failed alone (its error in
//!   `weir_catalog.sources` / `sinks`); the rest keep running. A sink
//!   whose error is retryable backs off and catches up instead
//!   (`sink_retry`). A sink restored from a seal that it had fallen
//!   behind (it was failed or backing off when the seal was taken) is
//!   failed at open, saying so: the changes between are gone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use parking_lot::RwLock;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_common::{ChangeBatch, ObjectId};
use weir_connectors::grouping::Grouping;

use super::sink_retry::RetryState;
use crate::watermark::WatermarkSpec;
use weir_connectors::{ConnectorError, Offsets, SourceBatch};

use super::Command;
use super::reader::{ReaderTask, Route, open_source, read, read_up_to};
use super::source_tables;
use crate::EngineError;

/// The seal key of a source's covered offsets.
pub fn source_key(id: ObjectId) -> String {
    format!("source:{}", id.0)
}

/// The seal key of a sink's descriptor.
pub fn sink_key(id: ObjectId) -> String {
    format!("sink:{}", id.0)
}

pub use super::sink_seal::{SealedStreams, SinkSeal};
use super::sink_worker::SinkEvent;

/// A source a deployment reads, as the runtime opens it.
#[derive(Debug, Clone)]
pub struct SourceToRead {
    pub id: ObjectId,
    pub name: String,
    pub connector: String,
    pub options: BTreeMap<String, String>,
    pub schema: SchemaRef,
    /// The connector's `replayable` capability: it can read its rows again
    /// from offset 0. A deployment over a source that cannot replay starts
    /// at the shared reader's position instead of backfilling.
    pub replayable: bool,
    /// Paused (`ALTER SOURCE ... PAUSE`): no reader runs for it; it keeps
    /// its position until it is resumed.
    pub paused: bool,
    /// For a source that covers several upstream tables (a shared
    /// postgres-cdc source): the tables read now, ordered by id, each its
    /// own relation. Empty for every other source, whose rows are the
    /// relation `id` itself.
    pub tables: Vec<TableToRead>,
    /// Which input the source reads: changed by an option that names
    /// another one (`ALTER SOURCE ... SET (path = ...)`). Sealed with its
    /// offsets ([`GENERATION_SPLIT`]); offsets sealed under another
    /// generation are of the input before, and its reader starts from the
    /// beginning instead.
    pub generation: u64,
    /// `WATERMARK FOR`: how the watermark of the relation `id` is
    /// generated (for a source that covers no tables; each table has its
    /// own).
    pub watermark: Option<WatermarkSpec>,
}

/// The split, among a source's sealed offsets, that records the generation
/// they were read under. The runtime's own: connectors never see it
/// ([`for_connector`]).
pub const GENERATION_SPLIT: &str = "weir.generation";

/// The prefix of the runtime's own splits among a source's offsets (the
/// generation, watermarks).
const RUNTIME_SPLITS: &str = "weir.";

/// `offsets` as a connector knows them: without the runtime's own splits.
pub(super) fn for_connector(offsets: &Offsets) -> Offsets {
    let mut offsets = offsets.clone();
    offsets.retain(|split, _| !split.starts_with(RUNTIME_SPLITS));
    offsets
}

/// Whether `offsets` hold a position of the connector's (not only the
/// runtime's own splits).
fn holds_a_position(offsets: &Offsets) -> bool {
    offsets
        .keys()
        .any(|split| !split.starts_with(RUNTIME_SPLITS))
}

/// One upstream table of a source that covers several: the relation its
/// rows feed (whose id, in decimal, is the table's split).
#[derive(Debug, Clone)]
pub struct TableToRead {
    pub id: ObjectId,
    pub name: String,
    /// The upstream table, as `name` or `schema.name`.
    pub upstream: String,
    pub schema: SchemaRef,
    /// Retention gaps accepted for this table.
    pub gaps_accepted: u32,
    /// `WATERMARK FOR` of this table's relation.
    pub watermark: Option<WatermarkSpec>,
}

/// The connector a sink deployment writes to.
#[derive(Debug, Clone)]
pub struct SinkToOpen {
    pub name: String,
    pub connector: String,
    pub options: BTreeMap<String, String>,
    pub schema: SchemaRef,
    /// Paused (`ALTER SINK ... PAUSE`): it writes nothing until resumed,
    /// and keeps what it misses meanwhile ([`super::sink_pause`]).
    pub paused: bool,
}

/// One run of a source's shared reader: messages of a reader that was
/// stopped (and maybe replaced since) are told apart and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderId {
    pub source: ObjectId,
    pub run: u64,
}

/// What a reader task tells the loop.
pub enum SourceMessage {
    /// One batch, or the batches of one transaction (an epoch takes all or
    /// none), with the permit that bounds the reader's batches in flight;
    /// dropping the message (once handled) returns it.
    Batch(
        ReaderId,
        Vec<SourceBatch>,
        tokio::sync::OwnedSemaphorePermit,
    ),
    /// Every split ended: the source is complete.
    Ended(ReaderId),
    /// The source cannot go on.
    Failed(ReaderId, String),
    /// The upstream lost changes the source had not read: it stops, with
    /// status `gap`, until the gap is accepted.
    Gap(ReaderId, String),
    /// A retryable error; the reader backs off and tries again.
    Retrying(ReaderId, String),
    /// One split cannot go on, the others do: (split, whether changes
    /// were lost upstream, why). Its offset is final.
    SplitFailed(ReaderId, String, bool, String),
}

impl SourceMessage {
    /// The reader run that sent it.
    pub fn reader(&self) -> ReaderId {
        match self {
            Self::Batch(reader, ..)
            | Self::Ended(reader)
            | Self::Failed(reader, _)
            | Self::Gap(reader, _)
            | Self::Retrying(reader, _)
            | Self::SplitFailed(reader, ..) => *reader,
        }
    }
}

/// One source's state, for `weir_catalog.sources`.
#[derive(Debug, Clone, Default)]
pub struct SourceStatus {
    /// `idle` (nothing reads it), `running`, `completed`, `retrying`,
    /// `failed`, `gap` (the upstream lost changes it had not read).
    pub status: &'static str,
    pub rows_in: u64,
    /// Input records `on_error = 'skip'` dropped, since this process started.
    pub rows_skipped: u64,
    pub offsets: Offsets,
    /// The largest event time seen, µs since the Unix epoch.
    pub max_event_time: Option<i64>,
    /// The watermark of its `WATERMARK FOR` column, µs since the Unix
    /// epoch (`i64::MAX` once final), when one has been generated.
    pub watermark: Option<i64>,
    /// Rows that arrived behind the watermark, since this process started.
    pub late_rows: u64,
    pub error: Option<String>,
}

/// One sink's state, for `weir_catalog.sinks`.
#[derive(Debug, Clone, Default)]
pub struct SinkStatus {
    /// `running`, `backing_off` or `failed`.
    pub status: &'static str,
    /// Row changes handed to the sink (the sum of absolute weights),
    /// written, committed or not.
    pub rows_out: u64,
    /// The latest epoch pre-committed (staged, not yet known sealed).
    pub prepared_epoch: u64,
    /// The latest epoch handed to the sink to pre-commit (done or not):
    /// everything it was given is committed once `committed_epoch`
    /// reaches it.
    pub handed_epoch: u64,
    /// Rows of committed epochs.
    pub committed_rows: u64,
    pub committed_epoch: u64,
    /// The connector's descriptor of the committed epoch (what the seal
    /// recorded for it), shown so its exactly-once state can be checked.
    pub committed_descriptor: Option<String>,
    pub error: Option<String>,
    /// Retries since the last successful commit.
    pub retries: u64,
    /// When a backing-off sink tries again, ms since the Unix epoch.
    pub next_retry_ms: Option<i64>,
    /// What it skipped (`on_error = 'skip'`), as of its latest commit.
    pub skipped: Option<weir_connectors::Skips>,
}

/// Status of every source and sink, shared with the system tables.
#[derive(Debug, Default)]
pub struct StreamStatus {
    pub sources: HashMap<ObjectId, SourceStatus>,
    pub sinks: HashMap<ObjectId, SinkStatus>,
}

pub(super) struct Reader {
    run: u64,
    stop: CancellationToken,
    sealed: mpsc::UnboundedSender<(u64, Offsets)>,
}

pub(super) struct SinkSlot {
    /// The task running the opened sink's calls.
    pub worker: super::sink_worker::SinkWorker,
    /// What opened it, to open it again after a retryable error.
    pub spec: SinkToOpen,
    /// Pre-committed (completed) and not yet sealed.
    pub prepared: Option<SinkSeal>,
    /// Pre-commits sent to the worker and not completed, oldest first.
    pub in_flight: std::collections::VecDeque<super::sink_worker::InFlight>,
    /// Row changes sent since the last pre-commit sent.
    pub unprecommitted_rows: usize,
    /// It was handed something (or opened) since its last pre-commit: an
    /// epoch close pre-commits only such a sink, since a pre-commit of
    /// nothing new costs a round trip and records nothing.
    pub pre_commit_due: bool,
    /// The entry the latest seal (or the one being written) holds.
    pub sealed: Option<SinkSeal>,
    /// The entry the latest durable seal holds: where a retry reopens.
    pub durable: Option<SinkSeal>,
    /// The changes of every epoch after `durable`, in order.
    pub unsealed: Vec<(u64, ChangeBatch)>,
    pub unsealed_rows: usize,
    /// Set when epochs up to this one were dropped from `unsealed` (too
    /// many changes between two seals): no retry until a seal covers it.
    pub unsealed_dropped_through: Option<u64>,
    /// Set while it backs off after a retryable error.
    pub backoff: Option<super::sink_retry::Backoff>,
    /// Its recovery options and failures so far.
    pub retry: super::sink_retry::RetryState,
    /// Grouped delivery: commits wait for a group to fill or age.
    pub grouping: Option<Grouping>,
    /// Since when a sealed entry has waited for its group's commit.
    pub waiting_since: Option<std::time::Instant>,
    /// `ALTER SINK ... PAUSE`: no writes until RESUME.
    pub paused: bool,
    pub failed: bool,
}

/// The loop's sources and sinks.
pub struct Streams {
    commands: mpsc::WeakSender<Command>,
    pub(super) status: Arc<RwLock<StreamStatus>>,
    pub(super) readers: HashMap<ObjectId, Reader>,
    /// The definition of every source being read.
    pub(super) defs: HashMap<ObjectId, SourceToRead>,
    /// Tables of sources being read that failed alone
    /// ([`Self::split_failed`]): the reader's own state is not theirs.
    pub(super) failed_tables: HashSet<ObjectId>,
    /// Per source, the offsets of every batch pushed to the coordinator.
    pub(super) received: HashMap<ObjectId, Offsets>,
    /// Per source, the offsets the latest closed epoch includes.
    pub(super) covered: HashMap<ObjectId, Offsets>,
    /// Per deployment, the sources it reads.
    reads: HashMap<ObjectId, Vec<ObjectId>>,
    /// Per deployment, the relations its graph reads: a source that covers
    /// several tables reads only the tables some deployment reads, so a
    /// table's snapshot is never read into nothing before its first
    /// projection exists.
    pub(super) relations_read: HashMap<ObjectId, HashSet<ObjectId>>,
    pub(super) sinks: HashMap<ObjectId, SinkSlot>,
    /// Sink entries of the seal the loop started from, until each sink opens.
    pub(super) sealed_sinks: HashMap<ObjectId, SinkSeal>,
    /// Sinks that failed as they opened: the `behind` entry every seal
    /// keeps for them.
    pub(super) failed_at_open: HashMap<ObjectId, SinkSeal>,
    /// Numbers reader runs.
    runs: u64,
    /// The seal being written: its covered offsets are acknowledged
    /// upstream once it lands (not the offsets covered by then).
    sealing: Option<Sealing>,
    /// Seals taken so far ([`Self::seal_extras`] calls).
    pub(super) seals_taken: u64,
    /// Callers of `await_seal` waiting for a seal taken after their call:
    /// (`seals_taken` then, reply).
    pub(super) seal_waiters: Vec<(u64, tokio::sync::oneshot::Sender<()>)>,
    /// The state store generation this process holds (sinks fence with it).
    pub(super) generation: u64,
    /// Where sink workers report, and what the loop takes their reports
    /// from ([`super::sink_worker`]).
    pub(super) events_to_loop: mpsc::UnboundedSender<SinkEvent>,
    pub(super) sink_events: mpsc::UnboundedReceiver<SinkEvent>,
    /// Numbers sink worker runs.
    pub(super) sink_runs: u64,
    /// Per relation with a watermark, its clock ([`super::source_clocks`]).
    pub(super) clocks: HashMap<ObjectId, super::source_clocks::RelationClock>,
}

/// The seal being written, as [`Streams::seal_extras`] took it.
struct Sealing {
    epoch: u64,
    /// Its number among the seals taken.
    number: u64,
    /// The last reader run started before it: a later run (a source
    /// reset since) must not be acknowledged its offsets.
    runs: u64,
    covered: HashMap<ObjectId, Offsets>,
}

impl Streams {
    pub(super) fn new(
        commands: mpsc::WeakSender<Command>,
        status: Arc<RwLock<StreamStatus>>,
        sealed: SealedStreams,
        generation: u64,
    ) -> Self {
        let (events_to_loop, sink_events) = mpsc::unbounded_channel();
        Self {
            events_to_loop,
            sink_events,
            sink_runs: 0,
            commands,
            status,
            readers: HashMap::new(),
            defs: HashMap::new(),
            failed_tables: HashSet::new(),
            received: sealed.offsets.clone(),
            covered: sealed.offsets,
            reads: HashMap::new(),
            relations_read: HashMap::new(),
            sinks: HashMap::new(),
            sealed_sinks: sealed.sinks,
            failed_at_open: HashMap::new(),
            runs: 0,
            sealing: None,
            seals_taken: 0,
            seal_waiters: Vec::new(),
            generation,
            clocks: HashMap::new(),
        }
    }

    /// Streams with no sources or sinks and no loop to report to (for
    /// driving a [`super::Checkpointer`] outside the runtime, as tests do).
    pub fn detached() -> Self {
        let (commands, _) = mpsc::channel(1);
        Self::new(
            commands.downgrade(),
            Arc::default(),
            SealedStreams::default(),
            0,
        )
    }

    /// Backfills for the sources `sources` that already have received
    /// offsets: their rows from offset 0 up to those offsets, per relation
    /// they feed. Call right after an epoch closed (received == covered).
    pub fn backfills(
        &self,
        sources: &[SourceToRead],
    ) -> impl std::future::Future<Output = Result<HashMap<ObjectId, ChangeBatch>, EngineError>>
    + Send
    + 'static {
        // Owned targets: the future must not borrow the loop's streams
        // (sinks are not `Sync`).
        let targets: Vec<(SourceToRead, Offsets)> = sources
            .iter()
            .filter(|s| s.replayable)
            .filter_map(|s| {
                let target = self.received.get(&s.id).filter(|o| holds_a_position(o))?;
                Some((s.clone(), target.clone()))
            })
            .collect();
        async move {
            let mut out = HashMap::new();
            for (source, target) in targets {
                out.extend(read_up_to(&source, &target).await?);
            }
            Ok(out)
        }
    }

    /// The first of `sources` that cannot replay and was read before (in
    /// this run or before the seal the loop started from), with why a
    /// deployment that must read it from the start cannot be built.
    /// `relations` are the ones the deployment reads: of a source that
    /// covers several tables, only their splits count.
    pub fn cannot_replay(
        &self,
        sources: &[SourceToRead],
        relations: &HashSet<ObjectId>,
    ) -> Option<String> {
        let read_before = |s: &SourceToRead| {
            let Some(offsets) = self.received.get(&s.id) else {
                return false;
            };
            if s.tables.is_empty() {
                return holds_a_position(offsets);
            }
            s.tables
                .iter()
                .any(|t| relations.contains(&t.id) && offsets.contains_key(&t.split()))
        };
        let source = sources.iter().find(|s| !s.replayable && read_before(s))?;
        Some(format!(
            "its state could not be restored and source {} cannot replay the rows read before; \
             DROP and CREATE it again to start from the source's current position",
            source.name
        ))
    }

    /// Starts reading the sources of a deployment that nothing read yet;
    /// `relations` are the ones its graph reads. A source that covers
    /// several tables and is read already starts again when the deployment
    /// reads a table it did not read (the connector reads that table's
    /// snapshot, then streams on).
    pub fn start_readers(
        &mut self,
        deployment: ObjectId,
        sources: &[SourceToRead],
        relations: HashSet<ObjectId>,
    ) {
        self.reads
            .insert(deployment, sources.iter().map(|s| s.id).collect());
        self.relations_read.insert(deployment, relations);
        for source in sources {
            let source = self.narrowed(source);
            if self.readers.contains_key(&source.id) {
                let reading = self.defs.get(&source.id).map(|d| d.tables.as_slice());
                let new_table = source
                    .tables
                    .iter()
                    .any(|t| !reading.unwrap_or_default().iter().any(|r| r.id == t.id));
                if !new_table {
                    continue;
                }
                if let Some(reader) = self.readers.remove(&source.id) {
                    reader.stop.cancel();
                }
            }
            self.start_reader(&source);
        }
    }

    /// `source` with only the tables some deployment reads.
    fn narrowed(&self, source: &SourceToRead) -> SourceToRead {
        let mut source = source.clone();
        source
            .tables
            .retain(|t| self.relations_read.values().any(|r| r.contains(&t.id)));
        source
    }

    /// Starts `source`'s shared reader at the offsets received so far
    /// (or, paused, only records it).
    fn start_reader(&mut self, source: &SourceToRead) {
        if source.paused {
            self.reader_starts(source, "paused", None);
            self.defs.insert(source.id, source.clone());
            return;
        }
        let read_under = self
            .received
            .get(&source.id)
            .and_then(|o| o.get(GENERATION_SPLIT))
            .and_then(|g| g.parse::<u64>().ok())
            .unwrap_or(0);
        if read_under != source.generation {
            // Offsets of the input the source read before its options
            // named another: this one is read from the beginning (and the
            // next seal records that, whatever else moves).
            tracing::info!(source = %source.name, generation = source.generation,
                "a new input: reading it from the beginning");
            // The watermarks stay: the old input's windows stay closed.
            let received = self.received.entry(source.id).or_default();
            received.retain(|split, _| split.starts_with("weir.watermark."));
            received.insert(GENERATION_SPLIT.into(), source.generation.to_string());
        }
        let offsets = self
            .received
            .get(&source.id)
            .map(for_connector)
            .unwrap_or_default();
        self.reader_starts(source, "running", Some(&offsets));
        self.defs.insert(source.id, source.clone());
        self.start_clocks(source);
        let stop = CancellationToken::new();
        let (sealed, sealed_rx) = mpsc::unbounded_channel();
        self.runs += 1;
        let reader = ReaderId {
            source: source.id,
            run: self.runs,
        };
        let task = ReaderTask {
            name: source.name.clone(),
            connector: source.connector.clone(),
            route: Route::Source(reader),
            commands: self.commands.clone(),
            stop: stop.clone(),
            sealed: sealed_rx,
            // Checked at CREATE; a stored value that no longer reads
            // (an older build's) falls back to the defaults.
            retry: RetryState::new(
                weir_connectors::recovery::Recovery::restarts(&source.options).unwrap_or_default(),
            ),
        };
        let opened = open_source(source, &offsets, None);
        if let Ok(opened) = &opened {
            self.clock_splits(source.id, opened.splits());
        }
        tokio::spawn(read(task, opened));
        self.readers.insert(
            source.id,
            Reader {
                run: reader.run,
                stop,
                sealed,
            },
        );
    }

    /// Whether `reader` is the current run of its source's reader.
    pub(super) fn is_current(&self, reader: ReaderId) -> bool {
        self.readers
            .get(&reader.source)
            .is_some_and(|r| r.run == reader.run)
    }

    /// Whether a source's position moved since the last epoch closed
    /// without rows to carry it (a replication keepalive, a table's
    /// failure sealed, a gap accepted): an epoch then closes anyway, so a
    /// seal records the position and the upstream may let go of what is
    /// before it (an idle database's WAL does not grow for ever).
    pub fn offsets_moved(&self) -> bool {
        self.received != self.covered
    }

    /// A batch from a reader: the offsets it brings are received, under
    /// its source whatever the split. Returns the relation its rows feed
    /// ([`SourceToRead::relation_of`]); none for a batch of a stopped
    /// reader, which must be dropped, or of a split that feeds none.
    pub fn received(&mut self, reader: ReaderId, batch: &SourceBatch) -> Option<ObjectId> {
        if !self.is_current(reader) {
            return None;
        }
        self.received
            .entry(reader.source)
            .or_default()
            .insert(batch.split.clone(), batch.offset.clone());
        self.count_received(reader, batch);
        let relation = self.defs.get(&reader.source)?.relation_of(&batch.split)?;
        self.clock_read(relation, batch);
        Some(relation)
    }

    /// The state of `reader` as a whole: its source's, and that of each of
    /// its tables that did not fail alone.
    pub fn set_source_status(&self, reader: ReaderId, status: &'static str, error: Option<String>) {
        if !self.is_current(reader) {
            return;
        }
        let mut all = self.status.write();
        let entry = all.sources.entry(reader.source).or_default();
        entry.status = status;
        entry.error = error.clone();
        if let Some(def) = self.defs.get(&reader.source) {
            source_tables::tables_follow(&mut all, &def.tables, &self.failed_tables, |e| {
                e.status = status;
                e.error = error.clone();
            });
        }
    }

    /// An epoch closed: it covers everything received; `emitted` is each
    /// sink's share of it. Every sink pre-commits the epoch.
    pub async fn epoch_closed(&mut self, epoch: u64, emitted: Vec<(ObjectId, ChangeBatch)>) {
        self.covered = self.received.clone();
        for (id, out) in &emitted {
            self.collect(*id, epoch, out);
        }
        // A sink that was backing off is handed every collected epoch
        // (this one's included) when it opens again.
        let ids: Vec<ObjectId> = self.sinks.keys().copied().collect();
        let mut retried = HashSet::new();
        for &id in &ids {
            if self.retry_due(id) && self.retry(id).await {
                retried.insert(id);
            }
        }
        for (id, out) in emitted {
            if !retried.contains(&id) {
                self.write(id, epoch, &out);
            }
        }
        for &id in &ids {
            self.pre_commit(id, epoch);
        }
        for id in ids {
            self.make_room(id).await;
        }
    }

    /// Marks a sink failed with `error` (shown in `weir_catalog.sinks`);
    /// it gets nothing more to write.
    pub fn sink_failed(&mut self, id: ObjectId, error: &str) {
        tracing::error!(sink = %id, %error, "sink failed");
        if let Some(slot) = self.sinks.get_mut(&id) {
            slot.failed = true;
        }
        let mut status = self.status.write();
        let entry = status.sinks.entry(id).or_default();
        entry.status = "failed";
        entry.error = Some(error.to_string());
    }

    /// What the seal of `epoch` records: covered offsets per source, the
    /// latest pre-commit per sink (or the one sealed before, if none since).
    pub fn seal_extras(
        &mut self,
        epoch: u64,
    ) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        self.seals_taken += 1;
        self.sealing = Some(Sealing {
            epoch,
            number: self.seals_taken,
            runs: self.runs,
            covered: self.covered.clone(),
        });
        let offsets = self
            .covered
            .iter()
            .filter(|(id, _)| self.readers.contains_key(id) || self.defs.contains_key(id))
            .map(|(id, o)| {
                (
                    source_key(*id),
                    serde_json::to_string(o).expect("offsets serialize"),
                )
            })
            .collect();
        let mut sinks = BTreeMap::new();
        for (id, slot) in &mut self.sinks {
            if let Some(prepared) = slot.prepared.take() {
                slot.sealed = Some(prepared);
            }
            // A failed sink gets no new entry while its graph's state goes
            // on into this seal: marked, so a start from the seal fails it
            // instead of losing what it missed in silence. A paused or
            // backing-off one keeps what it missed in its outbox
            // ([`super::sink_pause`]), as does one whose pre-commits are
            // still in flight ([`super::sink_worker`]); each needs an
            // entry even before its first pre-commit completes, for a
            // restore to open it and deliver them.
            let entry = match (&slot.sealed, slot.failed) {
                (Some(entry), false) => entry.clone(),
                (Some(entry), true) => SinkSeal {
                    behind: true,
                    ..entry.clone()
                },
                (None, failed) if failed || !slot.writing() || !slot.in_flight.is_empty() => {
                    SinkSeal {
                        epoch: 0,
                        descriptor: String::new(),
                        rows: 0,
                        behind: failed,
                    }
                }
                (None, _) => continue,
            };
            sinks.insert(
                sink_key(*id),
                serde_json::to_string(&entry).expect("sink entries serialize"),
            );
        }
        for (id, entry) in &self.failed_at_open {
            sinks.insert(
                sink_key(*id),
                serde_json::to_string(entry).expect("sink entries serialize"),
            );
        }
        (offsets, sinks)
    }

    /// The seal of `epoch` (with [`Self::seal_extras`]) is durable: sinks
    /// commit what it holds, sources may acknowledge upstream.
    pub fn sealed(&mut self, epoch: u64) {
        let ids: Vec<ObjectId> = self.sinks.keys().copied().collect();
        for id in ids {
            let Some(slot) = self.sinks.get_mut(&id).filter(|s| !s.failed) else {
                continue;
            };
            let Some(entry) = slot.sealed.clone() else {
                continue;
            };
            // The seal holds `entry` now, whatever the commit does.
            slot.durable = Some(entry.clone());
            slot.unsealed.retain(|(e, _)| *e > entry.epoch);
            slot.unsealed_rows = slot.unsealed.iter().map(|(_, c)| c.num_rows()).sum();
            if slot
                .unsealed_dropped_through
                .is_some_and(|dropped| dropped <= entry.epoch)
            {
                slot.unsealed_dropped_through = None;
            }
            if slot.backoff.is_some() {
                // Its reopening commits the entry.
                continue;
            }
            if slot.paused {
                // What it pre-committed before the pause commits now,
                // whole, whatever its group.
                if !entry.is_empty() {
                    self.commit(id, entry);
                }
                self.settle_paused(id);
                continue;
            }
            if !self.group_due(id, &entry) {
                continue;
            }
            self.commit(id, entry);
        }
        let Some(sealing) = self.sealing.take().filter(|s| s.epoch == epoch) else {
            return;
        };
        for (id, reader) in &self.readers {
            if let Some(offsets) = sealing.covered.get(id)
                && reader.run <= sealing.runs
            {
                let _ = reader.sealed.send((epoch, for_connector(offsets)));
            }
        }
        self.sealed_for_waiters(sealing.number);
    }

    /// A deployment was dropped: its sink closes, and readers nobody else
    /// needs stop (their offsets stay, so a later reader resumes there).
    /// Returns once the sink's worker has finished the call it was in, so
    /// nothing writes to its target after the DROP.
    pub async fn dropped(&mut self, id: ObjectId) {
        if let Some(mut slot) = self.sinks.remove(&id) {
            slot.worker.stop().await;
        }
        self.failed_at_open.remove(&id);
        self.status.write().sinks.remove(&id);
        self.reads.remove(&id);
        self.relations_read.remove(&id);
        let still_read: HashSet<ObjectId> = self.reads.values().flatten().copied().collect();
        let idle: Vec<ObjectId> = self
            .readers
            .keys()
            .filter(|s| !still_read.contains(s))
            .copied()
            .collect();
        for source in idle {
            if let Some(reader) = self.readers.remove(&source) {
                reader.stop.cancel();
            }
            let mut status = self.status.write();
            let idle = |s: &mut SourceStatus| {
                if s.status == "running" {
                    s.status = "idle";
                }
            };
            if let Some(s) = status.sources.get_mut(&source) {
                idle(s);
            }
            if let Some(def) = self.defs.get(&source) {
                source_tables::tables_follow(&mut status, &def.tables, &self.failed_tables, idle);
            }
        }
    }

    /// Starts `source`'s shared reader again (stopping the running one,
    /// if any) with its options as they are now, at the offsets received:
    /// after a gap was accepted, or paused and resumed (a paused
    /// `source` only stops its reader).
    pub fn restart_source(&mut self, source: SourceToRead) {
        if let Some(reader) = self.readers.remove(&source.id) {
            reader.stop.cancel();
        }
        if !self
            .reads
            .values()
            .any(|sources| sources.contains(&source.id))
        {
            // Nothing reads it: the next reader starts with the new options.
            let state = if source.paused { "paused" } else { "idle" };
            self.reader_stops(&source, state);
            self.defs.remove(&source.id);
            return;
        }
        let source = self.narrowed(&source);
        self.start_reader(&source);
    }

    /// A source was dropped: forget it entirely. A table of a source
    /// being read leaves its reader, which goes on without it.
    pub fn source_dropped(&mut self, id: ObjectId) {
        self.table_dropped(id);
        if let Some(reader) = self.readers.remove(&id) {
            reader.stop.cancel();
        }
        self.defs.remove(&id);
        self.received.remove(&id);
        self.covered.remove(&id);
        self.clocks_dropped(id);
        self.status.write().sources.remove(&id);
    }
}

/// Runs a connector's call; a panic in it (a connector bug) becomes an
/// error, so the source or sink fails alone instead of taking the epoch
/// loop, and every other object, down with it.
pub(super) async fn guarded<T>(
    connector: &str,
    call: impl std::future::Future<Output = Result<T, ConnectorError>>,
) -> Result<T, ConnectorError> {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(call)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(ConnectorError::panicked(connector, &*panic)))
}

#[cfg(test)]
#[path = "streams_tests.rs"]
mod tests;
