//! The simulated dispatch policies and their flag names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::SimError;

/// A dispatch policy of the simulated server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Minos: small cores share the incoming requests and serve small ones in place; large
    /// ones go to large cores' queues; the controller learns threshold and split per epoch.
    SizeAware,
    /// MICA-like: request → core by key hash (NIC steering), per-core FIFO.
    EarlyBinding,
    /// ZygOS-like: connection → home core; an idle core steals a whole waiting connection's
    /// requests from the most backlogged core.
    Stealing,
    /// RAMCloud-like: one dispatcher core hands each request to an idle worker core.
    LateBinding,
    /// memcached-like: connection → core round robin, per-core FIFO, no stealing.
    Pinned,
}

impl Policy {
    /// Every policy, in report order.
    pub const ALL: [Policy; 5] = [
        Policy::SizeAware,
        Policy::EarlyBinding,
        Policy::Stealing,
        Policy::LateBinding,
        Policy::Pinned,
    ];

    /// Flag spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Policy::SizeAware => "size-aware",
            Policy::EarlyBinding => "early-binding",
            Policy::Stealing => "stealing",
            Policy::LateBinding => "late-binding",
            Policy::Pinned => "pinned",
        }
    }

    /// Worker cores that serve requests out of `cores` (late binding gives one to its
    /// dispatcher).
    pub const fn worker_cores(self, cores: usize) -> usize {
        match self {
            Policy::LateBinding => cores.saturating_sub(1),
            _ => cores,
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = SimError;

    /// Flag spellings, case-insensitive, `_` for `-`; `memcached` means `pinned`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let name = text.trim().to_ascii_lowercase().replace('_', "-");
        if name == "memcached" {
            return Ok(Policy::Pinned);
        }
        Policy::ALL
            .into_iter()
            .find(|policy| policy.as_str() == name)
            .ok_or_else(|| {
                SimError::Config(format!(
                    "unknown policy {text:?} (known: size-aware, early-binding, stealing, late-binding, pinned)"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::Policy;

    #[test]
    fn names_round_trip() {
        for policy in Policy::ALL {
            assert_eq!(policy.as_str().parse::<Policy>().ok(), Some(policy));
        }
        assert_eq!("MEMCACHED".parse::<Policy>().ok(), Some(Policy::Pinned));
        assert!("minos".parse::<Policy>().is_err());
        assert_eq!(Policy::LateBinding.worker_cores(8), 7);
        assert_eq!(Policy::SizeAware.worker_cores(8), 8);
    }
}
