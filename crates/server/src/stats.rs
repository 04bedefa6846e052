//! Server counters, declared once (name and description) and rendered both as
//! memcached `STAT` lines and as Prometheus text: each counter is also a declared
//! [`Metric`] ([`WORKER_COUNTER_METRICS`], `server_<name>` on `/metrics`).
//!
//! Each worker owns a [`WorkerCounters`] block that only it increments
//! (relaxed atomics, no contention); readers sum the blocks. Per size class
//! counters (`stats slabs`) live in each block's [`SlabCounters`].

use std::sync::atomic::{AtomicU64, Ordering};

use tailtrim_metrics::Metric;
use tailtrim_store::SIZE_CLASS_LIMIT;

/// The `/metrics` name of a worker counter: `server_<name>`, or the one declared with `as`.
macro_rules! exposed_counter_name {
    ($name:ident) => {
        concat!("server_", stringify!($name))
    };
    ($name:ident $exposed:literal) => {
        $exposed
    };
}

macro_rules! counters {
    ($( #[doc = $doc:literal] $name:ident $(as $exposed:literal)? ),* $(,)?) => {
        /// The worker counters as declared metrics, in declaration order: memcached's name
        /// in `stats`, `server_<name>` (`_total` added) on `/metrics`.
        pub const WORKER_COUNTER_METRICS: &[Metric] = &[
            $(
                Metric::counter(stringify!($name), $doc.trim_ascii())
                    .exposed_as(exposed_counter_name!($name $($exposed)?)),
            )*
        ];

        /// Per-worker request counters (memcached names).
        #[derive(Debug, Default)]
        pub struct WorkerCounters {
            $( #[doc = $doc] pub $name: AtomicU64, )*
            /// The per size class counters of `stats slabs`.
            pub slabs: SlabCounters,
        }

        /// A summed snapshot of [`WorkerCounters`].
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct CounterSnapshot {
            $( #[doc = $doc] pub $name: u64, )*
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

            /// Each counter's declaration ([`WORKER_COUNTER_METRICS`]) and value, in
            /// declaration order.
            pub fn declared(&self) -> Vec<(&'static Metric, u64)> {
                WORKER_COUNTER_METRICS
                    .iter()
                    .zip([ $( self.$name, )* ])
                    .collect()
            }
        }

        impl WorkerCounters {
            /// Zeroes every counter (`stats reset`).
            pub fn reset(&self) {
                $( self.$name.store(0, Ordering::Relaxed); )*
                self.slabs.reset();
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
    /// `me` (meta debug) commands: the only meta command memcached 1.6.18 counts here.
    cmd_meta,
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
    bytes_read as "server_read_bytes",
    /// Bytes written to clients.
    bytes_written as "server_written_bytes",
    /// Storage commands refused because the item is over `-I`.
    store_too_large,
    /// Storage commands refused for lack of memory (`-M`, or nothing left to evict).
    store_no_memory,
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

macro_rules! slab_counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Per size class counters ([`tailtrim_store::size_class`]), indexed by class id:
        /// memcached's `stats slabs` `<class>:<name>` figures.
        #[derive(Debug)]
        pub struct SlabCounters {
            $( $(#[$doc])* pub $name: [AtomicU64; SIZE_CLASS_LIMIT], )*
        }

        impl Default for SlabCounters {
            fn default() -> Self {
                SlabCounters {
                    $( $name: std::array::from_fn(|_| AtomicU64::new(0)), )*
                }
            }
        }

        impl SlabCounters {
            fn reset(&self) {
                $( for counter in &self.$name { counter.store(0, Ordering::Relaxed); } )*
            }
        }

        /// A summed snapshot of one size class's [`SlabCounters`].
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct SlabSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl SlabSnapshot {
            /// Adds one worker's counters of class `class`.
            pub fn add(&mut self, counters: &SlabCounters, class: usize) {
                $( self.$name += counters.$name[class].load(Ordering::Relaxed); )*
            }

            /// Name/value pairs in memcached's order.
            pub fn pairs(&self) -> [(&'static str, u64); 8] {
                [ $( (stringify!($name), self.$name), )* ]
            }
        }
    };
}

slab_counters! {
    /// Lookups that found a live item of the class.
    get_hits,
    /// Storage commands whose new item is of the class (not those refused as too large).
    cmd_set,
    /// Deletes that removed an item of the class.
    delete_hits,
    /// incr on an item of the class (counted in the class of the result).
    incr_hits,
    /// decr on an item of the class (counted in the class of the result).
    decr_hits,
    /// cas that stored an item of the class.
    cas_hits,
    /// cas with a stale unique (counted in the class of the item it offered).
    cas_badval,
    /// touch/gat that found an item of the class.
    touch_hits,
}

/// Bumps `counter` of the size class of an item of `item_size` bytes.
#[inline]
pub fn bump_class(counter: &[AtomicU64; SIZE_CLASS_LIMIT], item_size: u64) {
    bump(&counter[tailtrim_store::size_class(item_size)]);
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
        let declared = snap.declared();
        assert_eq!(declared.len(), snap.pairs().len());
        assert!(declared.iter().any(|(metric, v)| metric.name == "get_hits"
            && metric.help == "Lookups that found a live item."
            && metric.exposed_name() == "server_get_hits"
            && *v == 1));
        assert!(declared
            .iter()
            .any(|(metric, v)| metric.name == "bytes_read"
                && metric.exposed_name() == "server_read_bytes"
                && *v == 0));
        b.reset();
        let mut again = CounterSnapshot::default();
        again.add(&b);
        assert_eq!(again.cmd_get, 0);
    }

    #[test]
    fn slab_counters_count_by_class_and_reset() {
        let a = WorkerCounters::default();
        bump_class(&a.slabs.get_hits, 74);
        bump_class(&a.slabs.get_hits, 96);
        bump_class(&a.slabs.cmd_set, 10_000);
        let mut small = SlabSnapshot::default();
        small.add(&a.slabs, 1);
        assert_eq!((small.get_hits, small.cmd_set), (2, 0));
        let mut large = SlabSnapshot::default();
        large.add(&a.slabs, tailtrim_store::size_class(10_000));
        assert_eq!((large.get_hits, large.cmd_set), (0, 1));
        a.reset();
        let mut again = SlabSnapshot::default();
        again.add(&a.slabs, 1);
        assert_eq!(again.get_hits, 0);
    }
}
