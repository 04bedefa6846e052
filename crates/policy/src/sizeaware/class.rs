//! The size-aware policy's small shared vocabulary: epochs, size classes and the packet cost
//! model, used by the controller, the histograms and the packed decision alike.

/// Bytes of payload one packet carries in the cost model (an Ethernet MTU).
pub const PACKET_BYTES: u64 = 1500;

/// An epoch number: the controller's unit of time. The caller's clock decides when an epoch
/// ends (the server's default is one second); the policy only compares epoch numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch after this one (saturating).
    pub const fn next(self) -> Epoch {
        Epoch(self.0.saturating_add(1))
    }
}

/// The size class of a request under a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SizeClass {
    /// `size <= threshold`: served in place by the small worker that parsed it.
    Small,
    /// `size > threshold`: handed off to a large worker.
    Large,
}

impl SizeClass {
    /// `"small"` or `"large"`, for stats names.
    pub const fn as_str(self) -> &'static str {
        match self {
            SizeClass::Small => "small",
            SizeClass::Large => "large",
        }
    }
}

/// Classifies a request of `size_bytes` against `threshold_bytes`: large iff strictly above.
pub const fn classify(size_bytes: u64, threshold_bytes: u64) -> SizeClass {
    if size_bytes > threshold_bytes {
        SizeClass::Large
    } else {
        SizeClass::Small
    }
}

/// Cost of a request that moves `wire_bytes` bytes: ⌈wire_bytes / 1500⌉ packets, at least 1
/// (an empty reply still costs a packet).
pub const fn packet_cost(wire_bytes: u64) -> u64 {
    if wire_bytes == 0 {
        1
    } else {
        wire_bytes.div_ceil(PACKET_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::{classify, packet_cost, Epoch, SizeClass, PACKET_BYTES};

    #[test]
    fn packet_cost_rounds_up_and_is_at_least_one() {
        assert_eq!(packet_cost(0), 1);
        assert_eq!(packet_cost(1), 1);
        assert_eq!(packet_cost(PACKET_BYTES), 1);
        assert_eq!(packet_cost(PACKET_BYTES + 1), 2);
        assert_eq!(packet_cost(1024 * 1024), 700); // 1 MiB / 1500 = 699.05
        assert_eq!(packet_cost(u64::MAX), u64::MAX / PACKET_BYTES + 1);
        for bytes in [1u64, 1499, 1500, 1501, 2999, 3000, 3001, 100_000] {
            let cost = packet_cost(bytes);
            assert!(cost * PACKET_BYTES >= bytes && (cost - 1) * PACKET_BYTES < bytes);
        }
    }

    #[test]
    fn classify_is_strictly_above_threshold() {
        assert_eq!(classify(100, 100), SizeClass::Small);
        assert_eq!(classify(101, 100), SizeClass::Large);
        assert_eq!(classify(0, 0), SizeClass::Small);
        assert_eq!(classify(u64::MAX, u64::MAX), SizeClass::Small);
        assert_eq!(SizeClass::Large.as_str(), "large");
    }

    #[test]
    fn epoch_next_saturates() {
        assert_eq!(Epoch(3).next(), Epoch(4));
        assert_eq!(Epoch(u64::MAX).next(), Epoch(u64::MAX));
    }
}
