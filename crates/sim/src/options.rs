//! A sweep's settings as a user gives them (`tailtrim sim minos` / `validate` flags, by name
//! and in plain units) turned into a checked [`SweepConfig`].
//!
//! ```text
//!   SweepOptions (names, µs/ms/ns, optional overrides) + Profile + cores, connections,
//!   policies, rates ──► SweepOptions::config ──► SweepConfig (the Minos setup, overridden)
//! ```

use tailtrim_bench::workload::{Popularity, WorkloadOverrides};
use tailtrim_policy::sizeaware::SplitBy;

use crate::cost::Profile;
use crate::engine::{Steering, DEFAULT_WARMUP_FRACTION};
use crate::sweep::{SweepConfig, DEFAULT_KNEE_US, DEFAULT_REQUESTS, DEFAULT_SEED};
use crate::time::Nanos;
use crate::{Policy, SimError};

/// Overrides of a profile's costs, nanoseconds (`None`: the profile's own).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CostOverrides {
    /// Hand-off of a large request to a large core.
    pub handoff_ns: Option<f64>,
    /// Steal, per stolen connection.
    pub steal_ns: Option<f64>,
    /// The late-binding dispatcher's per-request hand-off.
    pub dispatch_ns: Option<f64>,
    /// Per packet (1500 bytes).
    pub per_packet_ns: Option<f64>,
}

impl CostOverrides {
    /// `profile` with these costs in place, checked.
    pub fn apply(&self, mut profile: Profile) -> Result<Profile, SimError> {
        let cost = &mut profile.cost;
        for (given, field) in [
            (self.handoff_ns, &mut cost.handoff_ns),
            (self.steal_ns, &mut cost.steal_ns),
            (self.dispatch_ns, &mut cost.dispatch_ns),
            (self.per_packet_ns, &mut cost.per_packet_ns),
        ] {
            if let Some(value) = given {
                *field = value;
            }
        }
        profile.cost.validate()?;
        Ok(profile)
    }
}

/// The settings of a sweep besides its scale (cores, connections), policies and rates.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepOptions {
    /// Requests simulated per point.
    pub requests: usize,
    /// Seed of the trace.
    pub seed: u64,
    /// Share of the first requests left out of the statistics.
    pub warmup: f64,
    /// Size-aware epoch, simulated milliseconds (`None`: 1/40 of each run).
    pub epoch_ms: Option<f64>,
    /// Size-aware: a fixed threshold in bytes.
    pub threshold: Option<u64>,
    /// Size-aware: a fixed number of small cores.
    pub small_workers: Option<usize>,
    /// Size-aware: the percentile of accessed sizes that becomes the threshold.
    pub percentile: f64,
    /// Size-aware: what the worker split follows (`packets` or `busy`).
    pub split_by: String,
    /// Size-aware: idle large cores take new requests too.
    pub large_workers_help: bool,
    /// Share of requests on large keys (`None`: the preset's).
    pub large_share: Option<f64>,
    /// Key popularity (`uniform`, `zipf`, `zipf:S`; `None`: the preset's).
    pub popularity: Option<String>,
    /// Costs replacing the profile's.
    pub costs: CostOverrides,
    /// Early binding's steering: `nic` (`None` too) or `software`.
    pub early_steering: Option<String>,
    /// One executing request per connection.
    pub serialize_connections: bool,
    /// Spread service times by the profile's dispersion.
    pub service_dispersion: bool,
    /// Knee latency of the summary, microseconds.
    pub knee_us: f64,
}

impl Default for SweepOptions {
    fn default() -> SweepOptions {
        SweepOptions {
            requests: DEFAULT_REQUESTS,
            seed: DEFAULT_SEED,
            warmup: DEFAULT_WARMUP_FRACTION,
            epoch_ms: None,
            threshold: None,
            small_workers: None,
            percentile: tailtrim_policy::sizeaware::DEFAULT_PERCENTILE,
            split_by: "packets".to_string(),
            large_workers_help: false,
            large_share: None,
            popularity: None,
            costs: CostOverrides::default(),
            early_steering: None,
            serialize_connections: false,
            service_dispersion: false,
            knee_us: DEFAULT_KNEE_US,
        }
    }
}

impl SweepOptions {
    /// The Minos sweep at `cores` and `connections` with these settings, `profile` (its costs
    /// overridden as asked), `policies` and `rates` (empty: the automatic rates).
    pub fn config(
        &self,
        profile: Profile,
        cores: usize,
        connections: usize,
        policies: Vec<Policy>,
        rates: Vec<f64>,
    ) -> Result<SweepConfig, SimError> {
        if cores == 0 || connections == 0 || self.requests < 10 {
            return Err(SimError::Option(
                "cores and connections must be positive and --requests at least 10".into(),
            ));
        }
        let option = |error: &dyn std::fmt::Display| SimError::Option(error.to_string());
        let mut config = SweepConfig::minos().map_err(|error| option(&error))?;
        let popularity = match &self.popularity {
            Some(text) => Some(text.parse::<Popularity>().map_err(|error| option(&error))?),
            None => None,
        };
        if self.large_share.is_some() || popularity.is_some() {
            let overrides = WorkloadOverrides {
                large_share: self.large_share,
                popularity,
                ..WorkloadOverrides::default()
            };
            config
                .workload
                .apply(&overrides)
                .map_err(|error| option(&error))?;
        }
        config.policies = policies;
        config.rates = rates;
        config.cores = cores;
        config.connections = connections;
        config.requests = self.requests;
        config.seed = self.seed;
        config.warmup_fraction = self.warmup;
        if let Some(millis) = self.epoch_ms {
            if !(millis.is_finite() && millis > 0.0) {
                return Err(SimError::Option("--epoch-ms must be positive".into()));
            }
            config.epoch = Some(Nanos::from_f64(millis * 1e6));
        }
        config.knee_us = self.knee_us;
        config.profile = self.costs.apply(profile).map_err(|error| option(&error))?;
        config.steering = match self.early_steering.as_deref() {
            None | Some("nic") => Steering::Nic,
            Some("software") => Steering::Software,
            Some(other) => {
                return Err(SimError::Option(format!(
                    "--early-steering must be nic or software, got {other:?}"
                )))
            }
        };
        config.serialize_connections = self.serialize_connections;
        config.service_dispersion = self.service_dispersion;
        config.sizeaware.percentile = self.percentile;
        config.sizeaware.fixed_threshold_bytes = self.threshold;
        config.sizeaware.fixed_small_workers = self.small_workers;
        config.sizeaware.split_by =
            SplitBy::parse(&self.split_by).map_err(|error| option(&error))?;
        config.sizeaware.large_workers_help = self.large_workers_help;
        Ok(config)
    }
}

/// The name of a steering as the options and the reports spell it.
pub fn steering_name(steering: Steering) -> &'static str {
    match steering {
        Steering::Nic => "nic",
        Steering::Software => "software",
    }
}

#[cfg(test)]
mod tests {
    use super::{CostOverrides, SweepOptions};
    use crate::cost::Profile;
    use crate::engine::Steering;
    use crate::Policy;

    #[test]
    fn options_override_the_minos_setup_and_bad_ones_are_refused() {
        let options = SweepOptions {
            early_steering: Some("software".into()),
            epoch_ms: Some(5.0),
            costs: CostOverrides {
                steal_ns: Some(123.0),
                ..CostOverrides::default()
            },
            ..SweepOptions::default()
        };
        let config = options
            .config(Profile::embedded(), 4, 32, vec![Policy::Pinned], vec![1e5])
            .expect("valid options");
        assert_eq!((config.cores, config.connections), (4, 32));
        assert_eq!(config.steering, Steering::Software);
        assert_eq!(config.profile.cost.steal_ns, 123.0);
        assert_eq!(config.rates, vec![1e5]);
        for bad in [
            SweepOptions {
                early_steering: Some("kernel".into()),
                ..SweepOptions::default()
            },
            SweepOptions {
                epoch_ms: Some(0.0),
                ..SweepOptions::default()
            },
            SweepOptions {
                split_by: "nothing".into(),
                ..SweepOptions::default()
            },
        ] {
            assert!(bad
                .config(Profile::embedded(), 4, 32, Vec::new(), Vec::new())
                .is_err());
        }
        assert!(options
            .config(Profile::embedded(), 0, 32, Vec::new(), Vec::new())
            .is_err());
    }
}
