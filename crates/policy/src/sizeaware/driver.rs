//! The controller's epoch driver: at each tick of the caller's clock, the epoch's merged size
//! histogram and busy time go into the window, the controller decides, and the decision is
//! published as one unit. The server's controller thread and the simulator's epoch event both
//! run it.
//!
//! ```text
//!  tick(histogram of the epoch, busy by role) ─► window.advance_to(e + 1), absorb_epoch
//!        ─► controller.on_epoch_with_busy ─► Decision ─► published(): one PackedDecision
//! ```

use super::class::Epoch;
use super::controller::{Decision, RoleBusy, SizeAwareConfig, SizeAwareController};
use super::error::SizeAwareError;
use super::histogram::{SizeHistogram, SizeWindow};
use super::packed::PackedDecision;

/// A controller, its window and the epoch count.
#[derive(Debug, Clone)]
pub struct EpochDriver {
    controller: SizeAwareController,
    window: SizeWindow,
    epoch: Epoch,
}

impl EpochDriver {
    /// A driver for `config`, at epoch 0 with the controller's initial decision in force.
    pub fn new(config: SizeAwareConfig) -> Result<EpochDriver, SizeAwareError> {
        let controller = SizeAwareController::new(config)?;
        let window = controller.new_window();
        Ok(EpochDriver {
            controller,
            window,
            epoch: Epoch(0),
        })
    }

    /// Ends an epoch: `histogram` holds the sizes every worker recorded in it, `busy` the
    /// workers' busy time by the role each had in it. Returns the new decision (an empty
    /// window keeps the previous one).
    pub fn tick(&mut self, histogram: &SizeHistogram, busy: RoleBusy) -> Decision {
        self.epoch = self.epoch.next();
        self.window.advance_to(self.epoch);
        self.window.absorb_epoch(self.epoch, histogram);
        self.controller.on_epoch_with_busy(&self.window, busy)
    }

    /// The decision in force.
    pub fn decision(&self) -> &Decision {
        self.controller.decision()
    }

    /// The decision in force as the workers read it: threshold and split in one word.
    pub fn published(&self) -> PackedDecision {
        PackedDecision::from(self.decision())
    }

    /// Epochs ended so far.
    pub fn epochs(&self) -> u64 {
        self.epoch.0
    }
}

#[cfg(test)]
mod tests {
    use super::EpochDriver;
    use crate::sizeaware::controller::{
        DecisionReason, RoleBusy, SizeAwareConfig, DEFAULT_INITIAL_THRESHOLD_BYTES,
    };
    use crate::sizeaware::histogram::SizeHistogram;

    fn driver(workers: usize) -> EpochDriver {
        EpochDriver::new(SizeAwareConfig::with_workers(workers)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn starts_with_the_controllers_initial_decision() {
        let driver = driver(4);
        assert_eq!(driver.epochs(), 0);
        assert_eq!(driver.decision().inputs.reason, DecisionReason::Initial);
        let published = driver.published();
        assert_eq!(published.threshold(), DEFAULT_INITIAL_THRESHOLD_BYTES);
        assert_eq!(published.small_workers(), 3);
    }

    #[test]
    fn a_tick_learns_from_the_epochs_sizes_and_publishes_them_together() {
        let mut driver = driver(4);
        let mut sizes = SizeHistogram::new();
        for _ in 0..990 {
            sizes.record(100, 100);
        }
        for _ in 0..10 {
            sizes.record(500_000, 500_000);
        }
        let decision = driver.tick(&sizes, RoleBusy::default());
        assert_eq!(driver.epochs(), 1);
        assert!(decision.threshold_bytes < 500_000, "{decision:?}");
        let published = driver.published();
        assert_eq!(published.threshold(), decision.threshold_bytes);
        assert_eq!(published.small_workers(), decision.small_workers);
        // An empty epoch keeps the decision.
        let kept = driver.tick(&SizeHistogram::new(), RoleBusy::default());
        assert_eq!(kept.threshold_bytes, decision.threshold_bytes);
        assert_eq!(driver.epochs(), 2);
    }
}
