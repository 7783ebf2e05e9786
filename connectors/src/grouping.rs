//! Grouped delivery: a sink that commits once per group of epochs
//! instead of once per checkpoint (`group_size`, `group_max_wait`), so
//! its target sees fewer, larger transactions at the cost of freshness.
//!
//! The unit stays the epoch: a group is every epoch sealed since the
//! sink's last commit, committed together when it holds `group_size`
//! row changes or its oldest epoch has waited `group_max_wait`, whichever
//! comes first. Epochs are staged (pre-committed) and sealed as before,
//! so a crash loses nothing: a restart commits what the seal holds. A
//! retry or a skip applies to the whole group, which one commit covers.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::recovery::parse_duration;

/// The wait when only `group_size` is given.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grouping {
    /// Commit once this many row changes wait (`None`: only the wait counts).
    pub size: Option<u64>,
    /// Commit once the oldest waiting epoch has waited this long.
    pub max_wait: Duration,
}

impl Grouping {
    /// The sink's grouping, or `None` when it commits at every checkpoint;
    /// an error names the option and says what is wrong.
    pub fn from_options(
        options: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, (String, String)> {
        let size = match options.get("group_size") {
            None => None,
            Some(text) => Some(
                text.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        (
                            "group_size".to_string(),
                            format!("{text}: a number of row changes, at least 1"),
                        )
                    })?,
            ),
        };
        let max_wait = options
            .get("group_max_wait")
            .map(|t| parse_duration(t).map_err(|m| ("group_max_wait".to_string(), m)))
            .transpose()?;
        Ok(match (size, max_wait) {
            (None, None) => None,
            (size, max_wait) => Some(Self {
                size,
                max_wait: max_wait.unwrap_or(DEFAULT_MAX_WAIT),
            }),
        })
    }

    /// Whether a group of `rows` row changes whose oldest epoch has
    /// waited `waited` is due.
    pub fn due(&self, rows: u64, waited: Duration) -> bool {
        self.size.is_some_and(|size| rows >= size) || waited >= self.max_wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grouping(pairs: &[(&str, &str)]) -> Result<Option<Grouping>, (String, String)> {
        Grouping::from_options(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_group_closes_on_its_size_or_its_wait() {
        assert_eq!(grouping(&[]).unwrap(), None);
        let g = grouping(&[("group_size", "100")]).unwrap().unwrap();
        assert_eq!(g.max_wait, DEFAULT_MAX_WAIT);
        assert!(!g.due(99, Duration::from_secs(1)));
        assert!(g.due(100, Duration::ZERO));
        assert!(g.due(1, DEFAULT_MAX_WAIT));
        let g = grouping(&[("group_max_wait", "200ms")]).unwrap().unwrap();
        assert!(!g.due(u64::MAX, Duration::from_millis(199)));
        assert!(g.due(0, Duration::from_millis(200)));
        assert_eq!(
            grouping(&[("group_size", "0")]).unwrap_err().0,
            "group_size"
        );
        assert_eq!(
            grouping(&[("group_max_wait", "soon")]).unwrap_err().0,
            "group_max_wait"
        );
    }
}
