//! How a sink recovers from a failed write: the `on_error` and restart
//! options every sink (and destination) takes, parsed once for the check
//! at CREATE and for the runtime that applies them.
//!
//! - no `on_error`: a retryable error (the target unreachable, a dropped
//!   connection) backs off `min(restart_min_backoff * 2^(n-1),
//!   restart_max_backoff) * (1 + U(0, restart_random_factor))` before
//!   retry `n` (3 s, 30 s, 0.2), the jitter after the cap; `n` counts
//!   from the last successful commit. After `restart_max` retries within
//!   `restart_window` (unlimited by default) the sink fails.
//! - `on_error = 'fail'`: the first error fails the sink.
//! - `on_error = 'retry_and_fail(n, delay)'` (`retry_and_fail` alone: 5
//!   times, 1 s apart): `n` retries `delay` apart, then the sink fails.
//! - `on_error = 'skip'`: an epoch whose changes the target refuses (a
//!   constraint, a value it cannot hold, a key that is not unique) is
//!   skipped: its offset is committed without its changes, which are
//!   counted and, with `dead_letter = 'table'`, kept in a table beside the
//!   target. Other errors back off as with no `on_error`.
//! - `on_error = 'retry_and_skip(n, delay)'` (alone: 5 times, 1 s apart):
//!   a refused epoch is retried `n` times `delay` apart (a constraint may
//!   hold later, when a parent row arrives), then skipped; an unreachable
//!   target is retried as often, then the sink fails (nothing can be
//!   committed where it cannot be reached, not even an offset).
//!
//! The unit retried is the sink's epoch: the sink is opened again from
//! its latest seal and handed every epoch since, so nothing is lost or
//! applied twice. The unit skipped is an epoch too (all of its changes or
//! none), and only sinks that can commit an offset alone offer skipping
//! (`Capabilities::skips`). An error that retrying cannot fix (a missing
//! column, a deposed writer) fails the sink at once whatever `on_error`
//! says; so does a refused epoch under `fail` and `retry_and_fail`.

use std::collections::BTreeMap;
use std::time::Duration;

/// What a sink does after a retryable error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnError {
    /// Back off with the restart options, up to `restart_max` times.
    Backoff,
    /// Fail at the first error.
    Fail,
    /// Retry `times` times, `delay` apart, then fail.
    RetryAndFail { times: u32, delay: Duration },
    /// Skip a refused epoch at once; back off otherwise.
    Skip,
    /// Retry `times` times, `delay` apart, then skip a refused epoch (or
    /// fail when the target cannot be reached).
    RetryAndSkip { times: u32, delay: Duration },
}

impl OnError {
    /// Whether an epoch the target refuses is skipped by a sink opened
    /// after `failures` failures in a row (`false`: the error fails the
    /// sink, or is retried first).
    pub fn skips_after(&self, failures: u32) -> bool {
        match self {
            Self::Skip => true,
            Self::RetryAndSkip { times, .. } => failures > *times,
            _ => false,
        }
    }

    /// Whether the strategy skips at all (`dead_letter` needs one that does).
    pub fn skips(&self) -> bool {
        matches!(self, Self::Skip | Self::RetryAndSkip { .. })
    }
}

/// A sink's recovery options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recovery {
    pub on_error: OnError,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    pub random_factor: f64,
    /// Retries allowed within `restart_window` (or in all) before failing.
    pub restart_max: Option<u32>,
    pub restart_window: Option<Duration>,
    /// `dead_letter = 'table'`: skipped epochs' changes are kept.
    pub dead_letter: bool,
}

impl Default for Recovery {
    fn default() -> Self {
        Self {
            on_error: OnError::Backoff,
            min_backoff: Duration::from_secs(3),
            max_backoff: Duration::from_secs(30),
            random_factor: 0.2,
            restart_max: None,
            restart_window: None,
            dead_letter: false,
        }
    }
}

impl Recovery {
    /// Reads the recovery options out of a sink's options; an error names
    /// the option and says what is wrong.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Self, (String, String)> {
        let mut out = Self::restarts(options)?;
        let bad = |option: &str, message: String| (option.to_string(), message);
        if let Some(text) = options.get("on_error") {
            out.on_error = parse_on_error(text).map_err(|m| bad("on_error", m))?;
        }
        match options.get("dead_letter").map(|t| t.trim()) {
            None | Some("none") => {}
            Some("table") if out.on_error.skips() => out.dead_letter = true,
            Some("table") => {
                return Err(bad(
                    "dead_letter",
                    "a dead letter keeps what was skipped, and nothing is: set on_error = 'skip' or 'retry_and_skip(n, delay)' too".into(),
                ));
            }
            Some(other) => {
                return Err(bad(
                    "dead_letter",
                    format!("{other}: expected 'table' or 'none'"),
                ));
            }
        }
        Ok(out)
    }

    /// Only the `restart_*` options (a source's: its `on_error`, if any,
    /// is about rows, not retries), with `on_error` left to back off.
    pub fn restarts(options: &BTreeMap<String, String>) -> Result<Self, (String, String)> {
        let mut out = Self::default();
        let bad = |option: &str, message: String| (option.to_string(), message);
        let duration = |option: &str| -> Result<Option<Duration>, (String, String)> {
            options
                .get(option)
                .map(|t| parse_duration(t).map_err(|m| bad(option, m)))
                .transpose()
        };
        if let Some(d) = duration("restart_min_backoff")? {
            out.min_backoff = d;
        }
        if let Some(d) = duration("restart_max_backoff")? {
            out.max_backoff = d;
        }
        if out.max_backoff < out.min_backoff {
            return Err(bad(
                "restart_max_backoff",
                format!(
                    "{:?} is shorter than restart_min_backoff ({:?})",
                    out.max_backoff, out.min_backoff
                ),
            ));
        }
        out.restart_window = duration("restart_window")?;
        if let Some(text) = options.get("restart_random_factor") {
            out.random_factor = text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| (0.0..=10.0).contains(f))
                .ok_or_else(|| {
                    bad(
                        "restart_random_factor",
                        format!("{text}: a fraction from 0 to 10, like 0.2"),
                    )
                })?;
        }
        if let Some(text) = options.get("restart_max") {
            out.restart_max = Some(text.trim().parse::<u32>().map_err(|_| {
                bad(
                    "restart_max",
                    format!("{text}: a number of retries, like 10"),
                )
            })?);
        }
        Ok(out)
    }

    /// The delay before retry `failures` (1-based, counted from the last
    /// successful commit), given `random` in [0, 1); `None` when the sink
    /// must fail instead. `recent` is the retries within the window.
    pub fn delay(&self, failures: u32, recent: u32, random: f64) -> Option<Duration> {
        match self.on_error {
            OnError::Fail => None,
            OnError::RetryAndFail { times, delay } => (failures <= times).then_some(delay),
            // One try more than `times`: the sink opened after the last
            // retry is the one that skips.
            OnError::RetryAndSkip { times, delay } => (failures <= times + 1).then_some(delay),
            OnError::Backoff | OnError::Skip => {
                if self.restart_max.is_some_and(|max| recent > max) {
                    return None;
                }
                let doubled = self
                    .min_backoff
                    .saturating_mul(1 << failures.saturating_sub(1).min(16));
                Some(
                    doubled
                        .min(self.max_backoff)
                        .mul_f64(1.0 + self.random_factor * random),
                )
            }
        }
    }
}

fn parse_on_error(text: &str) -> Result<OnError, String> {
    let text = text.trim().to_ascii_lowercase();
    let (name, args) = match text.split_once('(') {
        Some((name, rest)) => {
            let args = rest
                .strip_suffix(')')
                .ok_or_else(|| format!("{text}: a missing ')'"))?;
            (name.trim(), Some(args))
        }
        None => (text.as_str(), None),
    };
    match (name, args) {
        ("fail", None) => Ok(OnError::Fail),
        ("skip", None) => Ok(OnError::Skip),
        ("retry_and_fail", args) => {
            let (times, delay) = retries(&text, "retry_and_fail", args)?;
            Ok(OnError::RetryAndFail { times, delay })
        }
        ("retry_and_skip", args) => {
            let (times, delay) = retries(&text, "retry_and_skip", args)?;
            Ok(OnError::RetryAndSkip { times, delay })
        }
        _ => Err(format!(
            "{text}: expected 'fail', 'skip', 'retry_and_fail(n, delay)' or 'retry_and_skip(n, delay)'"
        )),
    }
}

/// The `(times, delay)` of `retry_and_*`: 5 times 1 s apart when absent.
fn retries(text: &str, name: &str, args: Option<&str>) -> Result<(u32, Duration), String> {
    let Some(args) = args else {
        return Ok((5, Duration::from_secs(1)));
    };
    let (times, delay) = args
        .split_once(',')
        .ok_or_else(|| format!("{text}: {name}(times, delay), like {name}(5, 1s)"))?;
    let times = times
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("{text}: the number of retries is not a count"))?;
    Ok((times, parse_duration(delay)?))
}

/// `500ms`, `3s`, `2m`, `1h`, or a number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text}: a duration like 500ms, 3s, 2m or 1h"))?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "second" | "seconds" => value,
        "ms" | "millisecond" | "milliseconds" => value / 1000.0,
        "m" | "min" | "minute" | "minutes" => value * 60.0,
        "h" | "hour" | "hours" => value * 3600.0,
        _ => return Err(format!("{text}: a duration like 500ms, 3s, 2m or 1h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text}: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recovery(pairs: &[(&str, &str)]) -> Result<Recovery, (String, String)> {
        Recovery::from_options(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_then_jitters() {
        let r = Recovery::default();
        let secs = |failures, random| r.delay(failures, 0, random).unwrap().as_secs_f64();
        assert_eq!(secs(1, 0.0), 3.0);
        assert_eq!(secs(2, 0.0), 6.0);
        assert_eq!(secs(4, 0.0), 24.0);
        assert_eq!(secs(5, 0.0), 30.0);
        assert!((secs(9, 0.5) - 33.0).abs() < 1e-9);
        let limited = recovery(&[("restart_max", "2"), ("restart_min_backoff", "100ms")]).unwrap();
        assert_eq!(limited.delay(1, 2, 0.0), Some(Duration::from_millis(100)));
        assert_eq!(limited.delay(3, 3, 0.0), None);
    }

    #[test]
    fn on_error_reads_each_strategy_and_refuses_the_rest() {
        assert_eq!(
            recovery(&[("on_error", "fail")]).unwrap().delay(1, 1, 0.0),
            None
        );
        let r = recovery(&[("on_error", "retry_and_fail(2, 500ms)")]).unwrap();
        assert_eq!(r.delay(2, 2, 0.9), Some(Duration::from_millis(500)));
        assert_eq!(r.delay(3, 3, 0.0), None);
        assert_eq!(
            recovery(&[("on_error", "retry_and_fail")])
                .unwrap()
                .on_error,
            OnError::RetryAndFail {
                times: 5,
                delay: Duration::from_secs(1)
            }
        );
        let skip = recovery(&[("on_error", "retry_and_skip(3, 1s)")]).unwrap();
        assert!(!skip.on_error.skips_after(3));
        assert!(skip.on_error.skips_after(4));
        assert_eq!(skip.delay(4, 4, 0.0), Some(Duration::from_secs(1)));
        assert_eq!(skip.delay(5, 5, 0.0), None);
        assert!(
            recovery(&[("on_error", "skip")])
                .unwrap()
                .on_error
                .skips_after(0)
        );
        assert!(
            recovery(&[("on_error", "skip"), ("dead_letter", "table")])
                .unwrap()
                .dead_letter
        );
        let (option, _) = recovery(&[("dead_letter", "table")]).unwrap_err();
        assert_eq!(option, "dead_letter");
        let (option, message) = recovery(&[("on_error", "skip_all")]).unwrap_err();
        assert_eq!(option, "on_error");
        assert!(message.contains("retry_and_skip"), "{message}");
        assert!(recovery(&[("on_error", "retry_and_fail(x, 1s)")]).is_err());
        assert!(recovery(&[("restart_min_backoff", "soon")]).is_err());
        assert!(
            recovery(&[
                ("restart_min_backoff", "10s"),
                ("restart_max_backoff", "1s")
            ])
            .is_err()
        );
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
    }
}
