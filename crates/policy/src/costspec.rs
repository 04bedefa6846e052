//! Cost-model specs for emulated service and network time: one parser and one sampler, shared
//! by the server's emulation (`--emulate-service`, `--emulate-network`) and the simulator, so a
//! testbed run and a simulated run draw their times from the same model.
//!
//! ```text
//!   "const=20us,key=2us,byte=1ns,dist=exp,dilation=10"
//!        │ CostSpec::parse                       Units{packets, keys, bytes} of one request
//!        ▼                                                   │
//!   CostSpec ──► mean_nanos(units) = dilation × (const + packet×P + key×K + byte×B)
//!        │                                                   │
//!        └──► sample_nanos(units, u) = mean × dispersion(u)  ◄┘  u uniform in [0, 1), caller's RNG
//! ```
//!
//! Pure: no clock, no randomness of its own (the caller passes the uniform draw), so the same
//! draws give the same times everywhere.
//!
//! Syntax: comma-separated `name=value` terms, any order, each at most once:
//!
//! | term | meaning | default |
//! |---|---|---|
//! | `const=D` | fixed part per request | 0 |
//! | `packet=D` | per packet of `mtu` bytes (at least one) | 0 |
//! | `key=D` | per key of a multiget | 0 |
//! | `byte=D` | per byte | 0 |
//! | `mtu=N` | bytes per packet | 1500 |
//! | `dist=fixed\|exp\|lognormal:SIGMA` | dispersion around the mean (mean kept) | `fixed` |
//! | `dilation=F` | multiplies every time (F > 0) | 1 |
//!
//! Durations `D` take a unit: `ns`, `us`, `ms` or `s` (fractions allowed: `2.5us`). The empty
//! spec and `off` mean zero cost.

use std::fmt;

/// Bytes per packet when the spec does not say.
pub const DEFAULT_MTU: u64 = 1500;

/// Largest accepted dilation (keeps products finite and meaningful).
pub const MAX_DILATION: f64 = 1e6;

/// Largest accepted duration term, in nanoseconds (one minute).
pub const MAX_TERM_NANOS: f64 = 60e9;

/// How a sampled time spreads around the model's mean. Every variant keeps the mean.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Dispersion {
    /// Always the mean.
    #[default]
    Fixed,
    /// Exponential with the model's mean (coefficient of variation 1).
    Exponential,
    /// Lognormal with the model's mean and log-space standard deviation `sigma`.
    Lognormal {
        /// Standard deviation of the logarithm.
        sigma: f64,
    },
}

/// What one request consists of, for the per-unit terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Units {
    /// Keys of the request (1 for a single-key command).
    pub keys: u64,
    /// Bytes (the reply of a read, the request of a write, or what crosses the network).
    pub bytes: u64,
}

/// A parsed cost model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostSpec {
    /// Fixed nanoseconds per request.
    pub const_nanos: f64,
    /// Nanoseconds per packet.
    pub per_packet_nanos: f64,
    /// Nanoseconds per key.
    pub per_key_nanos: f64,
    /// Nanoseconds per byte.
    pub per_byte_nanos: f64,
    /// Bytes per packet.
    pub mtu: u64,
    /// Spread around the mean.
    pub dispersion: Dispersion,
    /// Multiplies every time.
    pub dilation: f64,
}

impl Default for CostSpec {
    fn default() -> Self {
        CostSpec::ZERO
    }
}

/// Why a spec did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad cost spec {spec:?}: {reason}")]
pub struct CostSpecError {
    /// The text given.
    pub spec: String,
    /// What is wrong with it.
    pub reason: String,
}

impl CostSpec {
    /// The spec that costs nothing.
    pub const ZERO: CostSpec = CostSpec {
        const_nanos: 0.0,
        per_packet_nanos: 0.0,
        per_key_nanos: 0.0,
        per_byte_nanos: 0.0,
        mtu: DEFAULT_MTU,
        dispersion: Dispersion::Fixed,
        dilation: 1.0,
    };

    /// A fixed-cost spec of `nanos` per request with the given dispersion.
    pub fn constant(nanos: f64, dispersion: Dispersion) -> CostSpec {
        CostSpec {
            const_nanos: nanos,
            dispersion,
            ..CostSpec::ZERO
        }
    }

    /// Parses the syntax in the module docs.
    pub fn parse(text: &str) -> Result<CostSpec, CostSpecError> {
        let fail = |reason: String| CostSpecError {
            spec: text.to_string(),
            reason,
        };
        let mut spec = CostSpec::ZERO;
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed == "off" {
            return Ok(spec);
        }
        let mut seen: Vec<&str> = Vec::new();
        for term in trimmed.split(',') {
            let term = term.trim();
            let Some((name, value)) = term.split_once('=') else {
                return Err(fail(format!("term {term:?} is not name=value")));
            };
            let (name, value) = (name.trim(), value.trim());
            if seen.contains(&name) {
                return Err(fail(format!("{name} given twice")));
            }
            seen.push(name);
            match name {
                "const" => spec.const_nanos = parse_duration(value).map_err(fail)?,
                "packet" => spec.per_packet_nanos = parse_duration(value).map_err(fail)?,
                "key" => spec.per_key_nanos = parse_duration(value).map_err(fail)?,
                "byte" => spec.per_byte_nanos = parse_duration(value).map_err(fail)?,
                "mtu" => {
                    spec.mtu = match value.parse::<u64>() {
                        Ok(mtu) if (1..=1 << 20).contains(&mtu) => mtu,
                        _ => return Err(fail(format!("mtu {value:?} is not 1..=1048576"))),
                    }
                }
                "dilation" => {
                    spec.dilation = match value.parse::<f64>() {
                        Ok(f) if f.is_finite() && f > 0.0 && f <= MAX_DILATION => f,
                        _ => {
                            return Err(fail(format!(
                                "dilation {value:?} is not a number in (0, {MAX_DILATION}]"
                            )))
                        }
                    }
                }
                "dist" => spec.dispersion = parse_dispersion(value).map_err(fail)?,
                other => {
                    return Err(fail(format!(
                    "unknown term {other:?} (known: const, packet, key, byte, mtu, dist, dilation)"
                )))
                }
            }
        }
        Ok(spec)
    }

    /// Whether every request costs zero.
    pub fn is_zero(&self) -> bool {
        self.const_nanos == 0.0
            && self.per_packet_nanos == 0.0
            && self.per_key_nanos == 0.0
            && self.per_byte_nanos == 0.0
    }

    /// Packets `bytes` take (at least one).
    pub fn packets(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.mtu).max(1)
    }

    /// Mean time of a request of `units`, dilation included, in nanoseconds.
    pub fn mean_nanos(&self, units: Units) -> f64 {
        let mut nanos = self.const_nanos;
        if self.per_packet_nanos != 0.0 {
            nanos += self.per_packet_nanos * self.packets(units.bytes) as f64;
        }
        nanos += self.per_key_nanos * units.keys as f64;
        nanos += self.per_byte_nanos * units.bytes as f64;
        nanos * self.dilation
    }

    /// One draw: the mean times the dispersion factor at `u` (uniform in `[0, 1)`).
    pub fn sample_nanos(&self, units: Units, u: f64) -> f64 {
        let mean = self.mean_nanos(units);
        if mean == 0.0 {
            return 0.0;
        }
        mean * self.dispersion.factor(u)
    }

    /// The same spec with its dilation replaced.
    pub fn with_dilation(self, dilation: f64) -> CostSpec {
        CostSpec { dilation, ..self }
    }
}

impl Dispersion {
    /// The multiplier at quantile `u` (mean 1 over uniform `u`).
    pub fn factor(self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0 - f64::EPSILON);
        match self {
            Dispersion::Fixed => 1.0,
            Dispersion::Exponential => -(-u).ln_1p(),
            Dispersion::Lognormal { sigma } => {
                let z = normal_quantile(u.max(f64::MIN_POSITIVE));
                (sigma * z - sigma * sigma / 2.0).exp()
            }
        }
    }
}

fn parse_dispersion(value: &str) -> Result<Dispersion, String> {
    match value {
        "fixed" => Ok(Dispersion::Fixed),
        "exp" | "exponential" => Ok(Dispersion::Exponential),
        other => {
            let sigma = other
                .strip_prefix("lognormal:")
                .ok_or_else(|| format!("dist {other:?} (known: fixed, exp, lognormal:SIGMA)"))?;
            match sigma.parse::<f64>() {
                Ok(sigma) if sigma.is_finite() && (0.0..=10.0).contains(&sigma) => {
                    Ok(Dispersion::Lognormal { sigma })
                }
                _ => Err(format!("lognormal sigma {sigma:?} is not in [0, 10]")),
            }
        }
    }
}

/// Parses `12us`, `2.5ms`, `40ns`, `1s` into nanoseconds.
pub fn parse_duration(value: &str) -> Result<f64, String> {
    let split = value
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| format!("duration {value:?} needs a unit (ns, us, ms, s)"))?;
    let (number, unit) = value.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {value:?} (ns, us, ms, s)"
            ))
        }
    };
    match number.parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 && n * scale <= MAX_TERM_NANOS => Ok(n * scale),
        _ => Err(format!(
            "duration {value:?} is not a number between 0 and 60s"
        )),
    }
}

fn format_duration(formatter: &mut fmt::Formatter<'_>, nanos: f64) -> fmt::Result {
    if nanos >= 1e3 && (nanos / 1e3).fract() == 0.0 {
        write!(formatter, "{}us", nanos / 1e3)
    } else {
        write!(formatter, "{nanos}ns")
    }
}

impl fmt::Display for CostSpec {
    /// The canonical spec text; parses back to the same spec.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return write!(formatter, "off");
        }
        write!(formatter, "const=")?;
        format_duration(formatter, self.const_nanos)?;
        for (name, nanos) in [
            ("packet", self.per_packet_nanos),
            ("key", self.per_key_nanos),
            ("byte", self.per_byte_nanos),
        ] {
            if nanos != 0.0 {
                write!(formatter, ",{name}=")?;
                format_duration(formatter, nanos)?;
            }
        }
        if self.mtu != DEFAULT_MTU {
            write!(formatter, ",mtu={}", self.mtu)?;
        }
        match self.dispersion {
            Dispersion::Fixed => write!(formatter, ",dist=fixed")?,
            Dispersion::Exponential => write!(formatter, ",dist=exp")?,
            Dispersion::Lognormal { sigma } => write!(formatter, ",dist=lognormal:{sigma}")?,
        }
        if self.dilation != 1.0 {
            write!(formatter, ",dilation={}", self.dilation)?;
        }
        Ok(())
    }
}

/// Inverse of the standard normal CDF (Acklam's rational approximation, relative error
/// below 1.2e-9), for `p` in `(0, 1)`.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    if p < LOW {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_term_and_round_trips() {
        let spec = CostSpec::parse(
            "const=20us, packet=5us,key=2.5us,byte=1ns,mtu=1000,dist=exp,dilation=10",
        )
        .unwrap();
        assert_eq!(spec.const_nanos, 20_000.0);
        assert_eq!(spec.per_packet_nanos, 5_000.0);
        assert_eq!(spec.per_key_nanos, 2_500.0);
        assert_eq!(spec.per_byte_nanos, 1.0);
        assert_eq!(spec.mtu, 1000);
        assert_eq!(spec.dispersion, Dispersion::Exponential);
        assert_eq!(spec.dilation, 10.0);
        assert_eq!(CostSpec::parse(&spec.to_string()).unwrap(), spec);
        let lognormal = CostSpec::parse("const=1ms,dist=lognormal:0.5").unwrap();
        assert_eq!(lognormal.dispersion, Dispersion::Lognormal { sigma: 0.5 });
        assert_eq!(CostSpec::parse(&lognormal.to_string()).unwrap(), lognormal);
        assert!(CostSpec::parse("off").unwrap().is_zero());
        assert!(CostSpec::parse("").unwrap().is_zero());
        assert_eq!(CostSpec::ZERO.to_string(), "off");
    }

    #[test]
    fn rejects_bad_specs_with_a_reason() {
        for bad in [
            "const=20",
            "const=20xs",
            "const=-1us",
            "const=2m",
            "bogus=1us",
            "const=1us,const=2us",
            "dist=gamma",
            "dist=lognormal:x",
            "dilation=0",
            "dilation=nan",
            "mtu=0",
            "const",
            "const=100s",
        ] {
            let error = CostSpec::parse(bad).unwrap_err();
            assert_eq!(error.spec, bad);
            assert!(!error.reason.is_empty());
        }
    }

    #[test]
    fn mean_adds_the_terms_and_dilates() {
        let spec = CostSpec::parse("const=10us,packet=1us,key=2us,byte=1ns,dilation=2").unwrap();
        // 3001 bytes: 3 packets of 1500.
        let units = Units {
            keys: 4,
            bytes: 3001,
        };
        let expected = 2.0 * (10_000.0 + 3.0 * 1_000.0 + 4.0 * 2_000.0 + 3001.0);
        assert!((spec.mean_nanos(units) - expected).abs() < 1e-9);
        assert_eq!(spec.sample_nanos(units, 0.3), spec.mean_nanos(units));
        assert_eq!(spec.packets(0), 1);
    }

    #[test]
    fn dispersions_keep_the_mean_and_spread_as_specified() {
        let points = 200_000;
        let mean_of = |dispersion: Dispersion| {
            (0..points)
                .map(|i| dispersion.factor((i as f64 + 0.5) / points as f64))
                .sum::<f64>()
                / points as f64
        };
        assert!((mean_of(Dispersion::Exponential) - 1.0).abs() < 1e-3);
        assert!((mean_of(Dispersion::Lognormal { sigma: 0.5 }) - 1.0).abs() < 1e-3);
        // Exponential median ln 2; lognormal median exp(-sigma²/2).
        assert!((Dispersion::Exponential.factor(0.5) - 2f64.ln()).abs() < 1e-12);
        let median = Dispersion::Lognormal { sigma: 0.5 }.factor(0.5);
        assert!((median - (-0.125f64).exp()).abs() < 1e-9);
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((normal_quantile(0.01) + 2.326_348).abs() < 1e-5);
    }
}
