//! Sequence values: what `nextval` hands out, durable across kill -9.
//!
//! Values are not catalog state (a `nextval` must neither wait for DDL nor
//! be undone by a rollback, as in PostgreSQL). Each sequence's position is
//! kept in memory and, ahead of it, a *reservation* is written to
//! `sequences.json` in the data directory (temporary file, `fsync`,
//! rename, directory `fsync`) before any value it covers is handed out.
//! After a crash a sequence resumes after its last reservation: values
//! reserved but never handed out are skipped (a gap, which PostgreSQL
//! allows too), and no value is ever handed out twice.
//!
//! A reservation covers at least [`BLOCK`] values, or all the values one
//! call asks for (an `INSERT` of a million `SERIAL` rows writes one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::catalog::sequence::SequenceDef;
use crate::error::ServerError;

/// The fewest values one reservation covers (PostgreSQL logs 32 ahead).
const BLOCK: usize = 32;

/// A sequence's position, as PostgreSQL's `last_value` and `is_called`:
/// the next value is `last` itself when not called, else the one after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    last: i64,
    is_called: bool,
}

#[derive(Debug)]
struct Live {
    position: Position,
    /// Values that may still be handed out before the next reservation.
    reserved: usize,
}

#[derive(Debug, Default)]
struct Values {
    live: HashMap<uuid::Uuid, Live>,
    /// What is on disk: each sequence's position after its reservation.
    durable: HashMap<uuid::Uuid, Position>,
}

#[derive(Debug)]
pub struct SequenceValues {
    path: PathBuf,
    values: Mutex<Values>,
}

impl SequenceValues {
    /// Loads `sequences.json` of `data_dir` (none yet: no values handed out).
    pub fn open(data_dir: &Path) -> Result<Self, ServerError> {
        let path = data_dir.join("sequences.json");
        let durable: HashMap<uuid::Uuid, Position> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                ServerError::internal(format!("{} is unreadable: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => return Err(ServerError::internal(format!("{}: {e}", path.display()))),
        };
        Ok(Self {
            path,
            values: Mutex::new(Values {
                live: HashMap::new(),
                durable,
            }),
        })
    }

    /// The next `n` values of `def`, reserving durably first when the
    /// current reservation does not cover them. Fails with 2200H past
    /// the bound of a sequence that does not cycle (handing out none).
    pub fn next(&self, def: &SequenceDef, n: usize) -> Result<Vec<i64>, ServerError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut values = self.values.lock();
        let mut live = values.current(def);
        let mut out = Vec::with_capacity(n);
        let mut position = live.position;
        for _ in 0..n {
            let value = if position.is_called {
                def.after(position.last).ok_or_else(|| exhausted(def))?
            } else {
                position.last
            };
            out.push(value);
            position = Position {
                last: value,
                is_called: true,
            };
        }
        if live.reserved < n {
            // Reserve what this call takes, and a block beyond it.
            let mut ahead = position;
            live.reserved = 0;
            while live.reserved < BLOCK.max(n / 4) {
                match def.after(ahead.last) {
                    Some(next) => ahead.last = next,
                    None => break,
                }
                live.reserved += 1;
            }
            values.durable.insert(def.incarnation, ahead);
            self.persist(&values.durable)?;
        } else {
            live.reserved -= n;
        }
        live.position = position;
        values.live.insert(def.incarnation, live);
        Ok(out)
    }

    /// `setval`: the sequence goes on from `value`, durably before this
    /// returns.
    pub fn set(&self, def: &SequenceDef, value: i64, is_called: bool) -> Result<(), ServerError> {
        let mut values = self.values.lock();
        let position = Position {
            last: value,
            is_called,
        };
        values.durable.insert(def.incarnation, position);
        self.persist(&values.durable)?;
        values.live.insert(
            def.incarnation,
            Live {
                position,
                reserved: 0,
            },
        );
        Ok(())
    }

    /// The sequence's `last_value` and `is_called` as a reader sees them
    /// (`SELECT * FROM seq`): values reserved but not handed out do not
    /// count.
    pub fn peek(&self, def: &SequenceDef) -> (i64, bool) {
        let position = self.values.lock().current(def).position;
        (position.last, position.is_called)
    }

    /// Forgets the values of sequences no longer in the catalog (called
    /// once the catalog is loaded).
    pub fn retain(&self, live: impl Fn(&uuid::Uuid) -> bool) -> Result<(), ServerError> {
        let mut values = self.values.lock();
        let before = values.durable.len();
        values.durable.retain(|id, _| live(id));
        values.live.retain(|id, _| live(id));
        if values.durable.len() != before {
            self.persist(&values.durable)?;
        }
        Ok(())
    }

    fn persist(&self, durable: &HashMap<uuid::Uuid, Position>) -> Result<(), ServerError> {
        let io = |e: std::io::Error| {
            ServerError::internal(format!(
                "could not write sequence values to {}: {e}",
                self.path.display()
            ))
        };
        let bytes =
            serde_json::to_vec(durable).map_err(|e| ServerError::internal(e.to_string()))?;
        let tmp = self.path.with_extension("json.tmp");
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp).map_err(io)?;
            file.write_all(&bytes).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        Ok(())
    }
}

impl Values {
    /// The live position of `def`: from memory, else from its last
    /// reservation (after a restart), else its start.
    fn current(&self, def: &SequenceDef) -> Live {
        if let Some(live) = self.live.get(&def.incarnation) {
            return Live {
                position: live.position,
                reserved: live.reserved,
            };
        }
        let position = self
            .durable
            .get(&def.incarnation)
            .copied()
            .unwrap_or(Position {
                last: def.start,
                is_called: false,
            });
        Live {
            position,
            reserved: 0,
        }
    }
}

fn exhausted(def: &SequenceDef) -> ServerError {
    let (bound, which) = if def.increment > 0 {
        (def.max, "maximum")
    } else {
        (def.min, "minimum")
    };
    ServerError::Sqlstate {
        code: "2200H",
        message: format!(
            "nextval: reached {which} value of sequence \"{}\" ({bound})",
            def.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::ObjectId;
    use weir_pgsem::SqlType;

    fn def(start: i64, increment: i64, max: i64) -> SequenceDef {
        SequenceDef {
            id: ObjectId(1),
            schema: "public".into(),
            name: "s".into(),
            incarnation: uuid::Uuid::new_v4(),
            data_type: SqlType::Int8,
            start,
            increment,
            min: 1,
            max,
            cache: 1,
            cycle: false,
            owned_by: None,
        }
    }

    #[test]
    fn a_reopened_store_never_hands_out_a_value_twice() {
        let dir = tempfile::tempdir().unwrap();
        let s = def(1, 1, i64::MAX);
        let mut seen = Vec::new();
        for round in 0..5 {
            // Each round is a process that stops without warning.
            let values = SequenceValues::open(dir.path()).unwrap();
            for n in [1, 3, 40, 1, 100] {
                seen.extend(values.next(&s, n).unwrap());
            }
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]),
                "round {round}: {seen:?}"
            );
        }
        assert_eq!(seen[..5], [1, 2, 3, 4, 5]);
    }

    #[test]
    fn setval_is_durable_and_is_called_decides_the_next_value() {
        let dir = tempfile::tempdir().unwrap();
        let s = def(1, 5, i64::MAX);
        let values = SequenceValues::open(dir.path()).unwrap();
        values.next(&s, 10).unwrap();
        values.set(&s, 100, false).unwrap();
        assert_eq!(values.peek(&s), (100, false));
        let reopened = SequenceValues::open(dir.path()).unwrap();
        assert_eq!(reopened.next(&s, 2).unwrap(), [100, 105]);
        reopened.set(&s, 7, true).unwrap();
        let reopened = SequenceValues::open(dir.path()).unwrap();
        assert_eq!(reopened.next(&s, 1).unwrap(), [12]);
    }

    #[test]
    fn a_sequence_that_does_not_cycle_stops_at_its_bound_handing_out_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = def(1, 1, 3);
        let values = SequenceValues::open(dir.path()).unwrap();
        assert_eq!(values.next(&s, 2).unwrap(), [1, 2]);
        let e = values.next(&s, 2).unwrap_err();
        assert_eq!(e.sqlstate(), "2200H");
        assert_eq!(values.next(&s, 1).unwrap(), [3]);
        assert!(values.next(&s, 1).is_err());
    }
}
