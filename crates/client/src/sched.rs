//! Where the client holds requests back: the delay queue, then the per-backend priority gate
//! (`crate::routes::gate`, re-exported here).
//!
//! ```text
//!   fetch{not_before} ─► DelayQueue::hold(wait) ── tokio timer (the runtime's timer wheel;
//!                                                   one sleeping future per opset, no thread)
//!        │ at not_before
//!        ▼
//!   Backend::call_in(class) ─► Gate::admit(class) ─► connection (pipelined) ─► backend
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::stats::{Counter, LatencyHistogram};

pub use crate::routes::gate::{Gate, Permit};

/// TailX's delay queue: opsets wait here until their `not_before`. Each waiting opset is a
/// sleeping future on the runtime's timer (a hierarchical timer wheel of 1 ms slots), so the
/// queue costs no thread and no polling; its length and the delays granted are published.
#[derive(Debug, Default)]
pub struct DelayQueue {
    length: AtomicU64,
    /// `pool_delay_queued`: opsets that were delayed.
    pub delayed: Counter,
    /// `pool_delay_granted_us`: delays granted (µs).
    pub granted: LatencyHistogram,
}

impl DelayQueue {
    /// Opsets waiting now.
    pub fn len(&self) -> u64 {
        self.length.load(Ordering::Relaxed)
    }

    /// True when no opset waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Holds the caller for `wait` (returns at once for zero).
    pub async fn hold(&self, wait: Duration) {
        if wait.is_zero() {
            return;
        }
        self.delayed.incr();
        self.granted
            .record_micros(u64::try_from(wait.as_micros()).unwrap_or(u64::MAX));
        self.length.fetch_add(1, Ordering::Relaxed);
        let _leave = Leave(&self.length);
        tokio::time::sleep(wait).await;
    }
}

struct Leave<'a>(&'a AtomicU64);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn delay_queue_releases_each_opset_at_its_time_on_a_virtual_clock() {
        let queue = Arc::new(DelayQueue::default());
        let start = tokio::time::Instant::now();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for (name, millis) in [("c", 30u64), ("a", 10), ("zero", 0), ("b", 20)] {
            let queue = queue.clone();
            let done = done_tx.clone();
            tokio::spawn(async move {
                queue.hold(Duration::from_millis(millis)).await;
                let _ = done.send((name, start.elapsed()));
            });
        }
        drop(done_tx);
        tokio::task::yield_now().await;
        let mut order = Vec::new();
        while let Some((name, at)) = done_rx.recv().await {
            if name == "a" {
                assert_eq!(queue.len(), 2, "b and c still wait when a leaves");
            }
            order.push((name, at.as_millis()));
        }
        assert_eq!(order, vec![("zero", 0), ("a", 10), ("b", 20), ("c", 30)]);
        assert!(queue.is_empty());
        assert_eq!(queue.delayed.get(), 3);
        assert_eq!(queue.granted.summary(&[1.0]).0, 3);
    }
}
