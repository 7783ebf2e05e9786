//! The `log` and `stdout` sinks, for debugging: each committed change is
//! printed as one line (`+1 | a | b`), to the server log (`log`, at info
//! level, target `weir::sink`) or the process's standard output (`stdout`).
//!
//! Lines are printed after the seal (save, then handle), so a crash
//! between a seal and its commit loses those lines: at-most-once.

use std::collections::BTreeMap;

use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use weir_common::ChangeBatch;

use crate::spec::{Capabilities, ConnectorKind, ConnectorSpec, Delivery};
use crate::{Connector, ConnectorError, Sink, SinkOpen};

const CAPABILITIES: Capabilities = Capabilities {
    read_modes: &[],
    append_only: false,
    replayable: false,
    bounded: false,
    delivery: &[Delivery::AtMostOnce],
    skips: false,
};

static LOG_SPEC: ConnectorSpec = ConnectorSpec {
    name: "log",
    kind: ConnectorKind::Sink,
    help: "prints each change to the server log (debugging)",
    options: &[],
    capabilities: CAPABILITIES,
};

static STDOUT_SPEC: ConnectorSpec = ConnectorSpec {
    name: "stdout",
    kind: ConnectorKind::Sink,
    help: "prints each change to the server's standard output (debugging)",
    options: &[],
    capabilities: CAPABILITIES,
};

pub(crate) struct PrintConnector {
    spec: &'static ConnectorSpec,
    to_stdout: bool,
}

pub(crate) static LOG: PrintConnector = PrintConnector {
    spec: &LOG_SPEC,
    to_stdout: false,
};
pub(crate) static STDOUT: PrintConnector = PrintConnector {
    spec: &STDOUT_SPEC,
    to_stdout: true,
};

impl Connector for PrintConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        self.spec
    }

    fn open_sink(&self, open: SinkOpen<'_>) -> Result<Box<dyn Sink>, ConnectorError> {
        Ok(Box::new(PrintSink {
            name: open.name.to_string(),
            connector: self.spec.name,
            to_stdout: self.to_stdout,
            staged: Vec::new(),
            prepared: BTreeMap::new(),
            tally: Default::default(),
        }))
    }
}

struct PrintSink {
    name: String,
    connector: &'static str,
    to_stdout: bool,
    /// Lines written since the last pre-commit.
    staged: Vec<String>,
    /// Lines per pre-committed epoch, printed at commit.
    prepared: BTreeMap<u64, Vec<String>>,
    tally: crate::Tally,
}

#[async_trait]
impl Sink for PrintSink {
    fn receipt(&mut self) -> crate::Receipt {
        self.tally.take()
    }

    async fn write(&mut self, _epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        let options = FormatOptions::default().with_null("NULL");
        let formatters = changes
            .rows()
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ConnectorError::arrow(self.connector, e))?;
        self.tally
            .add_changes(changes)
            .map_err(|e| ConnectorError::arrow(self.connector, e))?;
        for (row, weight) in changes.weights().values().iter().enumerate() {
            let mut line = format!("{weight:+}");
            for f in &formatters {
                line.push_str(" | ");
                line.push_str(&f.value(row).to_string());
            }
            self.staged.push(line);
        }
        Ok(())
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<String, ConnectorError> {
        let lines = std::mem::take(&mut self.staged);
        self.prepared.entry(epoch).or_default().extend(lines);
        Ok(epoch.to_string())
    }

    async fn commit(&mut self, epoch: u64, _descriptor: &str) -> Result<(), ConnectorError> {
        let later = self.prepared.split_off(&(epoch + 1));
        for (e, lines) in std::mem::replace(&mut self.prepared, later) {
            for line in lines {
                if self.to_stdout {
                    println!("{} epoch {e}: {line}", self.name);
                } else {
                    tracing::info!(target: "weir::sink", sink = %self.name, epoch = e, "{line}");
                }
            }
        }
        Ok(())
    }

    async fn abort(&mut self, epoch: u64) -> Result<(), ConnectorError> {
        self.prepared.split_off(&(epoch + 1));
        self.staged.clear();
        Ok(())
    }
}
