//! Small, fast, seedable random number generator (xoshiro256++ seeded by
//! SplitMix64) and a stateless key hash, so every sample is reproducible from
//! the run's seed without depending on a particular `rand` release.

/// One step of SplitMix64: a good 64-bit mixer, used for seeding and hashing.
#[must_use]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut mixed = *state;
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    mixed ^ (mixed >> 31)
}

/// Stateless hash of `(seed, a, b, c)` to a uniform value in `[0, 1)`.
///
/// Used to give every key a fixed size that depends only on the seed and the
/// key's identity, so the preload phase and the run agree without a table.
#[must_use]
pub fn hash_unit(seed: u64, a: u64, b: u64, c: u64) -> f64 {
    let mut state = seed ^ a.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    let _ = splitmix64(&mut state);
    state ^= b.wrapping_mul(0xA076_1D64_78BD_642F);
    let _ = splitmix64(&mut state);
    state ^= c.wrapping_mul(0xE703_7ED1_A0B4_28DB);
    unit_from_bits(splitmix64(&mut state))
}

/// Maps 64 random bits to a uniform `f64` in `[0, 1)` (53 bits of precision).
#[must_use]
pub fn unit_from_bits(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// xoshiro256++ pseudo random generator.
#[derive(Clone, Debug)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// Creates a generator whose whole stream is determined by `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        let mut seeder = seed;
        let state = [
            splitmix64(&mut seeder),
            splitmix64(&mut seeder),
            splitmix64(&mut seeder),
            splitmix64(&mut seeder),
        ];
        Self { state }
    }

    /// Derives an independent generator for stream number `stream`.
    #[must_use]
    pub fn fork(&self, stream: u64) -> Self {
        let mut seeder = self.state[0] ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Self::new(splitmix64(&mut seeder))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.state[0]
            .wrapping_add(self.state[3])
            .rotate_left(23)
            .wrapping_add(self.state[0]);
        let shifted = self.state[1] << 17;
        self.state[2] ^= self.state[0];
        self.state[3] ^= self.state[1];
        self.state[1] ^= self.state[2];
        self.state[0] ^= self.state[3];
        self.state[2] ^= shifted;
        self.state[3] = self.state[3].rotate_left(45);
        result
    }

    /// Uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        unit_from_bits(self.next_u64())
    }

    /// Uniform integer in `[0, bound)`; `bound` must be positive.
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::{hash_unit, Rng};

    #[test]
    fn unit_values_are_uniform_in_range() {
        let mut rng = Rng::new(7);
        let samples = 200_000;
        let mut sum = 0.0;
        let mut below_quarter = 0u32;
        for _ in 0..samples {
            let value = rng.unit();
            assert!((0.0..1.0).contains(&value));
            sum += value;
            if value < 0.25 {
                below_quarter += 1;
            }
        }
        let mean = sum / f64::from(samples);
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        let share = f64::from(below_quarter) / f64::from(samples);
        assert!((share - 0.25).abs() < 0.005, "share {share}");
    }

    #[test]
    fn hash_unit_is_deterministic_and_spread() {
        assert_eq!(hash_unit(1, 2, 3, 4), hash_unit(1, 2, 3, 4));
        assert_ne!(hash_unit(1, 2, 3, 4), hash_unit(1, 2, 3, 5));
        let mean: f64 = (0..50_000u64).map(|k| hash_unit(9, 0, k, 1)).sum::<f64>() / 50_000.0;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }
}
