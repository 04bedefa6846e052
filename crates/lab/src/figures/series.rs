//! What a series is drawn as: a system's fixed colour (the one colour map, so a system keeps
//! its colour across every figure) and which latency class a figure shows.

/// Series colours by position (Tableau 10: dark enough to read on white).
pub const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// The fixed colour of a system or dispatch policy by name (grey for a name not listed).
pub fn system_color(name: &str) -> (u8, u8, u8) {
    match name {
        "size-aware" => PALETTE[3],
        "size-aware-help" => PALETTE[6],
        "early-binding" => PALETTE[0],
        "stealing" => PALETTE[2],
        "late-binding" => PALETTE[4],
        "memcached" => PALETTE[1],
        "pinned" => PALETTE[5],
        _ => PALETTE[7],
    }
}

/// Which requests' latency a figure shows: the small or the large ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyClass {
    /// Small requests.
    Small,
    /// Large requests.
    Large,
}

impl LatencyClass {
    /// Both classes, small first.
    pub const ALL: [LatencyClass; 2] = [LatencyClass::Small, LatencyClass::Large];

    /// `small` or `large`.
    pub const fn name(self) -> &'static str {
        match self {
            LatencyClass::Small => "small",
            LatencyClass::Large => "large",
        }
    }

    /// The file stem of its p99 figure: `small_p99` or `large_p99`.
    pub const fn p99_stem(self) -> &'static str {
        match self {
            LatencyClass::Small => "small_p99",
            LatencyClass::Large => "large_p99",
        }
    }

    /// The value of this class out of a `(small, large)` pair.
    pub fn pick<T>(self, small: T, large: T) -> T {
        match self {
            LatencyClass::Small => small,
            LatencyClass::Large => large,
        }
    }
}

/// A failed drawing as the message the experiments report (`plot: ...`).
pub fn drawing_failed(error: &dyn std::fmt::Display) -> String {
    format!("plot: {error}")
}
