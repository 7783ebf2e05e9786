//! Opening a sink deployment: its options checked, its connector opened
//! at its seal entry, a worker started for it, and what a restore kept
//! for it handed over. A sink that cannot open is failed, and its seal
//! entry says so from then on.

use weir_common::{ChangeBatch, ObjectId};
use weir_connectors::grouping::Grouping;
use weir_connectors::{ConnectorError, ConnectorKind, Sink, SinkOpen};

use super::sink_worker::SinkWorker;
use super::streams::{SinkSeal, SinkSlot, SinkToOpen, Streams};

/// A sink's recovery and grouping options and its opened connector.
type Opened = (
    weir_connectors::recovery::Recovery,
    Option<Grouping>,
    Box<dyn Sink>,
);

impl Streams {
    /// Opens a sink deployment's connector. `backfill` is its graph's
    /// output over everything before it: written unless the latest seal
    /// already holds this sink (then that output was delivered before).
    /// `undelivered` is what the seal's outbox kept for it (a restore).
    /// The caller pre-commits it: a deploy at once, a restore with the
    /// epoch close that follows (one pre-commit per epoch, so the seal's
    /// entry and outbox always split a sink's epochs cleanly).
    pub fn open_sink(
        &mut self,
        id: ObjectId,
        spec: &SinkToOpen,
        backfill: Option<ChangeBatch>,
        epoch: u64,
        undelivered: Vec<(u64, ChangeBatch)>,
    ) {
        let sealed = self.sealed_sinks.remove(&id);
        let opened = self.open_connector(spec, sealed.as_ref());
        let (recovery, grouping, sink) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                // Its graph's state moves on into every seal while it
                // delivers nothing: every later start must fail it too,
                // never open it as new.
                let entry = sealed.unwrap_or(SinkSeal {
                    epoch: 0,
                    descriptor: String::new(),
                    rows: 0,
                    behind: true,
                });
                self.failed_at_open.insert(
                    id,
                    SinkSeal {
                        behind: true,
                        ..entry
                    },
                );
                return self.sink_failed(id, &error);
            }
        };
        {
            let mut status = self.status.write();
            let entry = status.sinks.entry(id).or_default();
            entry.status = "running";
            entry.error = None;
            if let Some(s) = &sealed {
                entry.rows_out = s.rows;
                entry.committed_rows = s.rows;
                entry.committed_epoch = s.epoch;
                entry.committed_descriptor = Some(s.descriptor.clone());
            }
        }
        let restored = sealed.is_some();
        let worker = self.start_worker(id, sink, &spec.connector);
        self.sinks.insert(
            id,
            SinkSlot {
                worker,
                spec: spec.clone(),
                prepared: None,
                in_flight: Default::default(),
                unprecommitted_rows: 0,
                // Its first pre-commit takes the target over (re-commits
                // the sealed entry), even with nothing to write.
                pre_commit_due: true,
                durable: sealed.clone(),
                sealed,
                unsealed: Vec::new(),
                unsealed_rows: 0,
                unsealed_dropped_through: None,
                backoff: None,
                retry: super::sink_retry::RetryState::new(recovery),
                grouping,
                waiting_since: None,
                paused: spec.paused,
                failed: false,
            },
        );
        self.deliver_restored(id, undelivered);
        if let Some(out) = backfill.filter(|b| !b.is_empty() && !restored) {
            self.collect(id, epoch, &out);
            self.write(id, epoch, &out);
        }
    }

    /// A sink's options and connector, opened at its seal entry `sealed`,
    /// or why it cannot run.
    fn open_connector(
        &self,
        spec: &SinkToOpen,
        sealed: Option<&SinkSeal>,
    ) -> Result<Opened, String> {
        if let Some(s) = sealed.filter(|s| s.behind) {
            // Its graph's state moved on while it could not write: what it
            // missed is gone.
            return Err(format!(
                "the sink was failing when Weir last checkpointed (it had delivered up to epoch {}), so the changes after that are gone: drop and create the sink (a destination: ALTER DESTINATION ... REPAIR)",
                s.epoch
            ));
        }
        let recovery = weir_connectors::recovery::Recovery::from_options(&spec.options)
            .map_err(|(option, message)| format!("option {option}: {message}"))?;
        let grouping = Grouping::from_options(&spec.options)
            .map_err(|(option, message)| format!("option {option}: {message}"))?;
        let sink = self
            .connect_sink(spec, sealed.filter(|s| !s.is_empty()), 0)
            .map_err(|e| e.to_string())?;
        Ok((recovery, grouping, sink))
    }

    /// Starts a worker for `sink`, a new run of sink `id`'s.
    pub(super) fn start_worker(
        &mut self,
        id: ObjectId,
        sink: Box<dyn Sink>,
        connector: &str,
    ) -> SinkWorker {
        self.sink_runs += 1;
        SinkWorker::start(
            id,
            self.sink_runs,
            sink,
            connector.to_string(),
            self.events_to_loop.clone(),
        )
    }

    /// Opens `spec`'s connector with the seal entry `sealed`, after
    /// `failures` failed attempts in a row.
    pub(super) fn connect_sink(
        &self,
        spec: &SinkToOpen,
        sealed: Option<&SinkSeal>,
        failures: u32,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        let connector = weir_connectors::connector(&spec.connector, ConnectorKind::Sink)?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            connector.open_sink(SinkOpen {
                name: &spec.name,
                schema: spec.schema.clone(),
                options: &spec.options,
                sealed: sealed.map(|s| (s.epoch, s.descriptor.as_str())),
                generation: self.generation,
                failures,
            })
        }))
        .unwrap_or_else(|panic| Err(ConnectorError::panicked(&spec.connector, &*panic)))
    }
}
