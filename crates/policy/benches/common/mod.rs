//! What the benchmarks share: one fixed pseudo-random stream, so every run measures the same
//! inputs.

/// `count` successive states of a xorshift64 generator from a fixed seed.
pub fn xorshift_stream(count: usize) -> impl Iterator<Item = u64> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..count).map(move |_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    })
}
