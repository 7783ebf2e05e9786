//! What a seal records of sources and sinks: each source's covered
//! offsets and each sink's entry (the epoch it pre-committed and its
//! commit descriptor), read back at a start.

use std::collections::{BTreeMap, HashMap};

use weir_common::ObjectId;
use weir_connectors::Offsets;

/// What a seal holds of sources and sinks, read at a start.
#[derive(Debug, Clone, Default)]
pub struct SealedStreams {
    pub epoch: u64,
    pub offsets: HashMap<ObjectId, Offsets>,
    /// Per sink: the epoch it pre-committed and its descriptor.
    pub sinks: HashMap<ObjectId, SinkSeal>,
}

/// A sink's entry in a seal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SinkSeal {
    pub epoch: u64,
    pub descriptor: String,
    /// Rows the sink had received when it pre-committed (for status).
    pub rows: u64,
    /// The sink was failed when the seal was taken: its graph's state in
    /// the seal is past what it delivered, so a start from this seal
    /// cannot give it the changes between. (A paused or backing-off
    /// sink's changes since its entry are in its outbox instead.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub behind: bool,
}

impl SinkSeal {
    /// The entry of a sink that never pre-committed (paused or backing
    /// off from its start): a restore opens it as a new sink.
    pub fn is_empty(&self) -> bool {
        self.epoch == 0 && self.descriptor.is_empty()
    }
}

impl SealedStreams {
    /// The sources' and sinks' entries of a seal's maps.
    pub fn from_seal(
        epoch: u64,
        source_offsets: &BTreeMap<String, String>,
        sink_descriptors: &BTreeMap<String, String>,
    ) -> Self {
        let id_of = |key: &str, prefix: &str| {
            key.strip_prefix(prefix)
                .and_then(|n| n.parse::<u64>().ok())
                .map(ObjectId)
        };
        let offsets = source_offsets
            .iter()
            .filter_map(|(k, v)| Some((id_of(k, "source:")?, serde_json::from_str(v).ok()?)))
            .collect();
        let sinks = sink_descriptors
            .iter()
            .filter_map(|(k, v)| Some((id_of(k, "sink:")?, serde_json::from_str(v).ok()?)))
            .collect();
        Self {
            epoch,
            offsets,
            sinks,
        }
    }
}
