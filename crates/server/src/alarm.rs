//! [`Alarm`]: where the server's background threads (the expiry crawler, the `watch` logger)
//! sleep between their duties. No dependency on the rest of the crate.

use std::time::Duration;

/// Where a background thread sleeps between its duties: a timed wait that [`Alarm::ring`]
/// ends at once (a shutdown, new work). A ring that comes while nobody sleeps is kept for the
/// next [`Alarm::sleep`], so a ring just before the sleep is never lost. One sleeper per
/// alarm. The crawler and the logger wait here rather than polling every 50 ms: an idle
/// server's threads sleep until they have something to do (`docs/server.md`, "Background
/// threads").
#[derive(Debug, Default)]
pub struct Alarm {
    rung: parking_lot::Mutex<bool>,
    bell: parking_lot::Condvar,
}

impl Alarm {
    /// Sleeps until rung or until `limit` has passed; true when it was rung.
    pub fn sleep(&self, limit: Duration) -> bool {
        let mut rung = self.rung.lock();
        if !*rung {
            let _ = self.bell.wait_for(&mut rung, limit);
        }
        std::mem::take(&mut *rung)
    }

    /// Wakes the sleeper, or the next one to sleep.
    pub fn ring(&self) {
        *self.rung.lock() = true;
        self.bell.notify_one();
    }
}
