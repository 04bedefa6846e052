//! The service-time model: what one request costs the core that serves it.
//!
//! ```text
//!  full cost      = fixed_ns + transfer
//!  transfer       = per_byte_ns × wire bytes + per_packet_ns × ⌈wire bytes / 1500⌉
//!                   (wire bytes: the reply for a GET, the request for a SET)
//!  fixed_ns       = read + parse + lookup + the fixed part of the reply's send
//!
//!  size-aware     small core: fixed_ns + transfer           (small request, served in place)
//!                 small core: fixed_ns + handoff_ns          (large request) ─► large core: transfer
//!  early binding  the key's core: fixed_ns + transfer        (NIC steering: no software hand-off)
//!  stealing       the home core (or a thief, + steal_ns once per stolen connection): full cost
//!  late binding   dispatcher: parse_share × fixed_ns + dispatch_ns ─► a worker: the rest
//!  pinned         the connection's core: full cost
//! ```
//!
//! `fixed_ns` and `per_byte_ns` come from a [`Profile`]: `tailtrim sim profile` measures them on
//! the machine it runs on (least squares of `a + b × bytes` over a sweep of reply sizes through
//! the real server code and a loopback socket). The profile measured on the development machine
//! is embedded ([`Profile::embedded`]); the hand-off, steal and dispatch costs are documented
//! constants ([`DEFAULT_HANDOFF_NS`], [`DEFAULT_STEAL_NS`], [`DEFAULT_DISPATCH_NS`]).

use serde::{Deserialize, Serialize};
use tailtrim_policy::sizeaware::packet_cost;

use crate::SimError;

/// Fixed cost per request when no profile is available (µs-scale syscall-bound server).
pub const DEFAULT_FIXED_NS: f64 = 6_000.0;
/// Cost per byte moved when no profile is available (~4 GB/s of copy + loopback send).
pub const DEFAULT_PER_BYTE_NS: f64 = 0.25;
/// Cost per 1500-byte packet: 0 by default, the measured per-byte slope already holds it
/// (loopback TCP has no per-MTU work; a DPDK NIC path would).
pub const DEFAULT_PER_PACKET_NS: f64 = 0.0;
/// Share of `fixed_ns` that is receiving and parsing (the late-binding dispatcher's part).
pub const DEFAULT_PARSE_SHARE: f64 = 0.5;
/// Hand-off of a large request from a small to a large core: an enqueue on a shared queue and
/// a wake-up (a crossbeam send plus an eventfd write in the real server, ~1.5 µs).
pub const DEFAULT_HANDOFF_NS: f64 = 1_500.0;
/// A thief's cost to take one connection from another core's queue (locking the victim's
/// ready list and moving the connection: ~1 µs, ZygOS reports sub-µs with IPIs).
pub const DEFAULT_STEAL_NS: f64 = 1_000.0;
/// The late-binding dispatcher's hand-off per request, on top of its receive + parse share.
pub const DEFAULT_DISPATCH_NS: f64 = 1_500.0;

/// Parameters of the service-time model. All in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Per request: read, parse, lookup, and the fixed part of sending the reply.
    pub fixed_ns: f64,
    /// Per byte of the reply (GET) or request (SET) moved.
    pub per_byte_ns: f64,
    /// Per 1500-byte packet moved.
    pub per_packet_ns: f64,
    /// Share (0..=1) of `fixed_ns` spent receiving and parsing.
    pub parse_share: f64,
    /// Small core's cost to hand a large request to a large core (size-aware).
    pub handoff_ns: f64,
    /// Thief's cost per stolen connection (stealing).
    pub steal_ns: f64,
    /// Dispatcher's per-request hand-off cost (late binding), on top of its parse share.
    pub dispatch_ns: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            fixed_ns: DEFAULT_FIXED_NS,
            per_byte_ns: DEFAULT_PER_BYTE_NS,
            per_packet_ns: DEFAULT_PER_PACKET_NS,
            parse_share: DEFAULT_PARSE_SHARE,
            handoff_ns: DEFAULT_HANDOFF_NS,
            steal_ns: DEFAULT_STEAL_NS,
            dispatch_ns: DEFAULT_DISPATCH_NS,
        }
    }
}

impl CostModel {
    /// Checks that every field is a finite non-negative number and `parse_share ≤ 1`.
    pub fn validate(&self) -> Result<(), SimError> {
        let fields = [
            ("fixed_ns", self.fixed_ns),
            ("per_byte_ns", self.per_byte_ns),
            ("per_packet_ns", self.per_packet_ns),
            ("parse_share", self.parse_share),
            ("handoff_ns", self.handoff_ns),
            ("steal_ns", self.steal_ns),
            ("dispatch_ns", self.dispatch_ns),
        ];
        for (name, value) in fields {
            if !value.is_finite() || value < 0.0 {
                return Err(SimError::Config(format!(
                    "cost model: {name} = {value} must be a finite number >= 0"
                )));
            }
        }
        if self.parse_share > 1.0 {
            return Err(SimError::Config(format!(
                "cost model: parse_share = {} must be at most 1",
                self.parse_share
            )));
        }
        Ok(())
    }

    /// Cost of moving `wire_bytes` (the size-dependent part).
    pub fn transfer_ns(&self, wire_bytes: u64) -> f64 {
        self.per_byte_ns * wire_bytes as f64 + self.per_packet_ns * packet_cost(wire_bytes) as f64
    }

    /// Whole cost of a request moving `wire_bytes`, served by one core.
    pub fn full_ns(&self, wire_bytes: u64) -> f64 {
        self.fixed_ns + self.transfer_ns(wire_bytes)
    }
}

/// One measured point of a profile: mean cost of serving a GET whose reply is `reply_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProfileSample {
    /// Reply size in bytes.
    pub reply_bytes: u64,
    /// Measured cost per request (median over batches), nanoseconds.
    pub ns: f64,
}

/// A measured (or written) cost model with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// What was measured, how, where.
    pub description: String,
    /// The model the simulator uses.
    pub cost: CostModel,
    /// The measured points the fit came from (empty for a written profile).
    #[serde(default)]
    pub samples: Vec<ProfileSample>,
    /// Coefficient of determination of the fit (1 = perfect), if fitted.
    #[serde(default)]
    pub r_squared: Option<f64>,
    /// Service-time dispersion: quantiles 0, 1 %, …, 100 % of each measured request's time
    /// over the median of its size, pooled over sizes (empty: none measured). Used by
    /// `--service-dispersion` ([`dispersion_factor`]).
    #[serde(default)]
    pub dispersion: Vec<f64>,
}

/// Quantile points kept in [`Profile::dispersion`].
pub const DISPERSION_POINTS: usize = 101;

/// The [`DISPERSION_POINTS`] evenly spaced quantiles of `ratios` (sorted in place).
pub fn dispersion_quantiles(ratios: &mut [f64]) -> Vec<f64> {
    ratios.sort_by(f64::total_cmp);
    if ratios.is_empty() {
        return Vec::new();
    }
    let last = ratios.len() - 1;
    (0..DISPERSION_POINTS)
        .map(|index| {
            let position = index as f64 / (DISPERSION_POINTS - 1) as f64 * last as f64;
            ratios[position.round() as usize]
        })
        .collect()
}

/// The multiplicative factor at uniform `u` in `[0, 1)` of a quantile table (linear between
/// points); 1 for an empty table.
pub fn dispersion_factor(table: &[f64], u: f64) -> f64 {
    match table.len() {
        0 => 1.0,
        1 => table[0],
        len => {
            let position = u.clamp(0.0, 1.0) * (len - 1) as f64;
            let low = (position.floor() as usize).min(len - 2);
            let weight = position - low as f64;
            table[low] * (1.0 - weight) + table[low + 1] * weight
        }
    }
}

/// The profile measured on the development machine (`crates/sim/profiles/default.json`).
const EMBEDDED_PROFILE: &str = include_str!("../profiles/default.json");
/// An assumed kernel-bypass cost model (`crates/sim/profiles/dpdk-like.json`).
const DPDK_LIKE_PROFILE: &str = include_str!("../profiles/dpdk-like.json");

/// Names accepted by [`Profile::builtin`].
pub const BUILTIN_PROFILES: [&str; 3] = ["measured", "dpdk-like", "constants"];

impl Profile {
    /// The embedded default profile. Falls back to the documented constants if the embedded
    /// file does not parse (a unit test makes sure it does).
    pub fn embedded() -> Profile {
        Profile::from_json(EMBEDDED_PROFILE).unwrap_or_else(|_| Profile::constants())
    }

    /// A built-in profile by name ([`BUILTIN_PROFILES`]): `measured` (the embedded
    /// measurement), `dpdk-like` (an assumption: cost proportional to packets, as on the Minos
    /// testbed's kernel-bypass stack, see `docs/sim.md`), `constants` (this module's constants).
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            "measured" => Some(Profile::embedded()),
            "dpdk-like" => Profile::from_json(DPDK_LIKE_PROFILE).ok(),
            "constants" => Some(Profile::constants()),
            _ => None,
        }
    }

    /// The documented constants of this module, unmeasured.
    pub fn constants() -> Profile {
        Profile {
            description: "documented constants (no measurement)".to_string(),
            cost: CostModel::default(),
            samples: Vec::new(),
            r_squared: None,
            dispersion: Vec::new(),
        }
    }

    /// Parses a profile written by `tailtrim sim profile` (or by hand) and validates it.
    pub fn from_json(text: &str) -> Result<Profile, SimError> {
        let profile: Profile =
            serde_json::from_str(text).map_err(|error| SimError::Config(error.to_string()))?;
        profile.cost.validate()?;
        Ok(profile)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A profile fitted to `samples` by least squares of `ns = fixed + per_byte × bytes`,
    /// keeping the other fields of `base`. `None` with fewer than two distinct sizes.
    pub fn fit(
        description: String,
        samples: Vec<ProfileSample>,
        base: CostModel,
    ) -> Option<Profile> {
        let points: Vec<(f64, f64)> = samples
            .iter()
            .map(|sample| (sample.reply_bytes as f64, sample.ns))
            .collect();
        let line = least_squares(&points)?;
        let cost = CostModel {
            fixed_ns: line.intercept.max(0.0),
            per_byte_ns: line.slope.max(0.0),
            ..base
        };
        Some(Profile {
            description,
            cost,
            samples,
            r_squared: Some(line.r_squared),
            dispersion: Vec::new(),
        })
    }
}

/// A fitted line `y = intercept + slope × x`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// Value at x = 0.
    pub intercept: f64,
    /// Change of y per unit of x.
    pub slope: f64,
    /// Coefficient of determination.
    pub r_squared: f64,
}

/// Ordinary least squares over `(x, y)` points. `None` if fewer than two distinct `x`.
pub fn least_squares(points: &[(f64, f64)]) -> Option<Line> {
    let count = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|point| point.0).sum::<f64>() / count;
    let mean_y = points.iter().map(|point| point.1).sum::<f64>() / count;
    let sxx: f64 = points.iter().map(|point| (point.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points
        .iter()
        .map(|point| (point.0 - mean_x) * (point.1 - mean_y))
        .sum();
    let syy: f64 = points.iter().map(|point| (point.1 - mean_y).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let r_squared = if syy > 0.0 {
        (sxy * sxy) / (sxx * syy)
    } else {
        1.0
    };
    Some(Line {
        intercept,
        slope,
        r_squared,
    })
}

#[cfg(test)]
mod tests {
    use super::{
        dispersion_factor, dispersion_quantiles, least_squares, CostModel, Profile, ProfileSample,
        DISPERSION_POINTS,
    };

    #[test]
    fn dispersion_table_and_interpolation() {
        let mut ratios: Vec<f64> = (0..=1000).rev().map(|i| 0.5 + i as f64 / 1000.0).collect();
        let table = dispersion_quantiles(&mut ratios);
        assert_eq!(table.len(), DISPERSION_POINTS);
        assert_eq!(table[0], 0.5);
        assert_eq!(table[100], 1.5);
        assert!((table[50] - 1.0).abs() < 1e-12);
        assert!(table.windows(2).all(|pair| pair[0] <= pair[1]));
        assert!((dispersion_factor(&[0.5, 1.0, 2.0], 0.25) - 0.75).abs() < 1e-12);
        assert!((dispersion_factor(&[0.5, 1.0, 2.0], 0.75) - 1.5).abs() < 1e-12);
        assert_eq!(dispersion_factor(&[0.5, 1.0, 2.0], 1.0), 2.0);
        assert_eq!(dispersion_factor(&[], 0.3), 1.0);
        assert!(dispersion_quantiles(&mut []).is_empty());
    }

    #[test]
    fn embedded_profile_parses_and_is_measured() {
        let profile = Profile::from_json(super::EMBEDDED_PROFILE);
        assert!(profile.is_ok(), "{profile:?}");
        let profile = Profile::embedded();
        assert!(!profile.samples.is_empty());
        for name in super::BUILTIN_PROFILES {
            assert!(Profile::builtin(name).is_some(), "{name}");
        }
        assert!(Profile::builtin("nope").is_none());
        assert!(profile.cost.fixed_ns > 0.0 && profile.cost.per_byte_ns > 0.0);
    }

    #[test]
    fn least_squares_recovers_a_line() {
        let points: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 3.0 + 2.0 * x as f64)).collect();
        let line = least_squares(&points).expect("line");
        assert!((line.intercept - 3.0).abs() < 1e-9);
        assert!((line.slope - 2.0).abs() < 1e-9);
        assert!((line.r_squared - 1.0).abs() < 1e-9);
        assert!(least_squares(&[(1.0, 2.0), (1.0, 3.0)]).is_none());
    }

    #[test]
    fn fit_keeps_the_constants_and_costs_add_up() {
        let samples = vec![
            ProfileSample {
                reply_bytes: 100,
                ns: 5_100.0,
            },
            ProfileSample {
                reply_bytes: 100_100,
                ns: 30_100.0,
            },
        ];
        let base = CostModel {
            handoff_ns: 7.0,
            ..CostModel::default()
        };
        let profile = Profile::fit("t".into(), samples, base).expect("fit");
        assert!((profile.cost.fixed_ns - 5_075.0).abs() < 1e-6);
        assert!((profile.cost.per_byte_ns - 0.25).abs() < 1e-9);
        assert_eq!(profile.cost.handoff_ns, 7.0);
        let cost = CostModel {
            per_packet_ns: 100.0,
            ..profile.cost
        };
        // 3000 bytes = 2 packets.
        assert!((cost.full_ns(3_000) - (5_075.0 + 750.0 + 200.0)).abs() < 1e-6);
        assert!(CostModel {
            parse_share: 1.5,
            ..cost
        }
        .validate()
        .is_err());
        assert!(CostModel {
            fixed_ns: f64::NAN,
            ..cost
        }
        .validate()
        .is_err());
    }
}
