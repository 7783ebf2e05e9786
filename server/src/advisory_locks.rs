//! Session-level advisory locks (`pg_advisory_lock` and friends), held by
//! the database so every session sees the same ones; the SQL functions
//! over them are in [`crate::session`].

use std::collections::HashMap;

use parking_lot::Mutex;

/// Session-level advisory locks: key -> (holding backend, re-entry count).
#[derive(Debug, Default)]
pub struct AdvisoryLocks {
    held: Mutex<HashMap<i64, (i32, u32)>>,
}

impl AdvisoryLocks {
    pub fn try_lock(&self, key: i64, pid: i32) -> bool {
        let mut held = self.held.lock();
        match held.get_mut(&key) {
            Some((owner, count)) if *owner == pid => {
                *count += 1;
                true
            }
            Some(_) => false,
            None => {
                held.insert(key, (pid, 1));
                true
            }
        }
    }

    pub fn unlock(&self, key: i64, pid: i32) -> bool {
        let mut held = self.held.lock();
        match held.get_mut(&key) {
            Some((owner, count)) if *owner == pid => {
                *count -= 1;
                if *count == 0 {
                    held.remove(&key);
                }
                true
            }
            _ => false,
        }
    }

    pub fn release_all(&self, pid: i32) {
        self.held.lock().retain(|_, (owner, _)| *owner != pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_locks_are_reentrant_per_backend_and_exclusive_across() {
        let locks = AdvisoryLocks::default();
        assert!(locks.try_lock(1, 10));
        assert!(locks.try_lock(1, 10));
        assert!(!locks.try_lock(1, 11));
        assert!(locks.unlock(1, 10));
        assert!(!locks.try_lock(1, 11));
        assert!(locks.unlock(1, 10));
        assert!(locks.try_lock(1, 11));
        locks.release_all(11);
        assert!(locks.try_lock(1, 12));
        assert!(!locks.unlock(1, 10));
    }
}
