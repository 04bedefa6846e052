//! Server counters, declared once and rendered both as memcached `STAT`
//! lines and as Prometheus text.
//!
//! Each worker owns a [`WorkerCounters`] block that only it increments
//! (relaxed atomics, no contention); readers sum the blocks.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Per-worker request counters (memcached names).
        #[derive(Debug, Default)]
        pub struct WorkerCounters {
            $( $(#[$doc])* pub $name: AtomicU64, )*
        }

        /// A summed snapshot of [`WorkerCounters`].
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct CounterSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl CounterSnapshot {
            /// Adds one worker's counters.
            pub fn add(&mut self, counters: &WorkerCounters) {
                $( self.$name += counters.$name.load(Ordering::Relaxed); )*
            }

            /// Name/value pairs in declaration order.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($name), self.$name), )* ]
            }
        }

        impl WorkerCounters {
            /// Zeroes every counter (`stats reset`).
            pub fn reset(&self) {
                $( self.$name.store(0, Ordering::Relaxed); )*
            }
        }
    };
}

counters! {
    /// `get`/`gets`/`gat`/`gats`/`mg` keys looked up.
    cmd_get,
    /// Storage commands (`set` … `cas`, `ms`).
    cmd_set,
    /// `flush_all` commands.
    cmd_flush,
    /// `touch`/`gat`/`gats` keys.
    cmd_touch,
    /// Lookups that found a live item.
    get_hits,
    /// Lookups that found nothing.
    get_misses,
    /// Deletes that found nothing.
    delete_misses,
    /// Deletes that removed an item.
    delete_hits,
    /// incr on a missing key.
    incr_misses,
    /// incr that succeeded.
    incr_hits,
    /// decr on a missing key.
    decr_misses,
    /// decr that succeeded.
    decr_hits,
    /// cas on a missing key.
    cas_misses,
    /// cas that stored.
    cas_hits,
    /// cas with a stale unique.
    cas_badval,
    /// touch that found the key.
    touch_hits,
    /// touch on a missing key.
    touch_misses,
    /// Authentications checked against the auth file (`-Y`), failed or not.
    auth_cmds,
    /// Authentications that failed.
    auth_errors,
    /// Bytes read from clients.
    bytes_read,
    /// Bytes written to clients.
    bytes_written,
    /// Requests that had to wait for more input before being complete.
    conn_yields,
    /// `mg` requests executed carrying priority class 0 (`p0`, the highest).
    priority_class0_requests,
    /// … class 1.
    priority_class1_requests,
    /// … class 2.
    priority_class2_requests,
    /// … class 3.
    priority_class3_requests,
    /// … class 4 (the lowest).
    priority_class4_requests,
}

impl WorkerCounters {
    /// The `priority_class<N>_requests` counter of `class` (the lowest for larger values).
    pub fn priority_requests(&self, class: u8) -> &AtomicU64 {
        match class {
            0 => &self.priority_class0_requests,
            1 => &self.priority_class1_requests,
            2 => &self.priority_class2_requests,
            3 => &self.priority_class3_requests,
            _ => &self.priority_class4_requests,
        }
    }
}

/// Bumps a counter by one.
#[inline]
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Bumps a counter by `n`.
#[inline]
pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_sums_workers() {
        let a = WorkerCounters::default();
        let b = WorkerCounters::default();
        bump(&a.cmd_get);
        add(&b.cmd_get, 4);
        bump(&b.get_hits);
        let mut snap = CounterSnapshot::default();
        snap.add(&a);
        snap.add(&b);
        assert_eq!(snap.cmd_get, 5);
        assert_eq!(snap.get_hits, 1);
        assert!(snap.pairs().iter().any(|(n, v)| *n == "cmd_get" && *v == 5));
        b.reset();
        let mut again = CounterSnapshot::default();
        again.add(&b);
        assert_eq!(again.cmd_get, 0);
    }
}
