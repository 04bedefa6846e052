//! Key → server mapping: ketama (libmemcached/twemproxy compatible), modulo and jump hash.
//!
//! ```text
//!   key ─► hash tag (optional) ─► HashFunction::hash ─► u32 ─► Distribution ─► server index
//!                                                              │
//!        ketama: first continuum point >= hash (wraps to the first point)
//!        modula: hash % total_weight over weight-sized slots
//!        jump:   Lamping–Veach jump consistent hash over the servers (weights ignored)
//! ```
//!
//! Compatibility notes (checked against Debian's `nutcracker` in `tests/ketama_nutcracker.rs`):
//! - A server's ketama identity is its configured name, or `host:port`, or just `host` when the
//!   port is 11211 (libmemcached's rule, kept by twemproxy). See [`ketama_name`].
//! - Each server contributes `floor(weight/total · 40 · n) · 4` points (f32 arithmetic as in
//!   twemproxy); the points are the four little-endian 32-bit words of
//!   `MD5("<name>-<i>")` for `i = 0, 1, …`.
//! - The key is hashed with the pool's hash function (twemproxy's default is `fnv1a_64`, whose
//!   twemproxy flavour is a 32-bit FNV-1a seeded with the low 32 bits of the 64-bit basis). A
//!   pool of one server always maps to it; an empty key hashes to 0.
//! - Bytes are fed to the hash functions the way twemproxy's C does (`char` is signed on x86, so
//!   bytes >= 0x80 are sign-extended where twemproxy widens them).

use md5::{Digest, Md5};

use crate::error::PolicyError;

/// Points per server for equal weights (twemproxy's `KETAMA_POINTS_PER_SERVER`).
pub const KETAMA_POINTS_PER_SERVER: u32 = 160;
/// Points taken from one MD5 digest.
pub const KETAMA_POINTS_PER_HASH: u32 = 4;
/// The memcached port that libmemcached/twemproxy leave out of a server's ketama name.
pub const KETAMA_DEFAULT_PORT: u16 = 11211;

/// Key hash functions (names as in twemproxy's `hash:` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashFunction {
    /// twemproxy's `fnv1_64` (64-bit FNV-1, truncated to 32 bits).
    Fnv1_64,
    /// twemproxy's `fnv1a_64` (its default): 32-bit FNV-1a arithmetic with the 64-bit constants
    /// truncated to 32 bits.
    Fnv1a64,
    /// 32-bit FNV-1.
    Fnv1_32,
    /// 32-bit FNV-1a.
    Fnv1a32,
    /// First four digest bytes of MD5, little-endian.
    Md5,
    /// Jenkins one-at-a-time.
    OneAtATime,
    /// libmemcached's crc32: `(crc32(key) >> 16) & 0x7fff`.
    Crc32,
    /// Standard CRC-32 (IEEE).
    Crc32a,
}

impl HashFunction {
    /// Config names accepted by [`HashFunction::from_name`].
    pub const NAMES: [&'static str; 8] = [
        "fnv1_64",
        "fnv1a_64",
        "fnv1_32",
        "fnv1a_32",
        "md5",
        "one_at_a_time",
        "crc32",
        "crc32a",
    ];

    /// Parses a twemproxy-style name (`fnv1a_64`, `md5`, …).
    pub fn from_name(name: &str) -> Result<Self, PolicyError> {
        Ok(match name {
            "fnv1_64" => HashFunction::Fnv1_64,
            "fnv1a_64" => HashFunction::Fnv1a64,
            "fnv1_32" => HashFunction::Fnv1_32,
            "fnv1a_32" => HashFunction::Fnv1a32,
            "md5" => HashFunction::Md5,
            "one_at_a_time" => HashFunction::OneAtATime,
            "crc32" => HashFunction::Crc32,
            "crc32a" => HashFunction::Crc32a,
            other => {
                return Err(PolicyError::UnknownHash {
                    name: other.to_string(),
                    known: &HashFunction::NAMES,
                })
            }
        })
    }

    /// The config name of this function.
    pub fn name(self) -> &'static str {
        match self {
            HashFunction::Fnv1_64 => "fnv1_64",
            HashFunction::Fnv1a64 => "fnv1a_64",
            HashFunction::Fnv1_32 => "fnv1_32",
            HashFunction::Fnv1a32 => "fnv1a_32",
            HashFunction::Md5 => "md5",
            HashFunction::OneAtATime => "one_at_a_time",
            HashFunction::Crc32 => "crc32",
            HashFunction::Crc32a => "crc32a",
        }
    }

    /// Hashes `key` to 32 bits exactly as twemproxy does.
    pub fn hash(self, key: &[u8]) -> u32 {
        match self {
            HashFunction::Fnv1_64 => fnv1_64(key),
            HashFunction::Fnv1a64 => fnv1a_64_twemproxy(key),
            HashFunction::Fnv1_32 => fnv1_32(key),
            HashFunction::Fnv1a32 => fnv1a_32(key),
            HashFunction::Md5 => md5_word(key, 0),
            HashFunction::OneAtATime => one_at_a_time(key),
            HashFunction::Crc32 => (crc32_ieee_signed_input(key) >> 16) & 0x7fff,
            HashFunction::Crc32a => crc32_ieee(key),
        }
    }
}

const FNV_64_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 0x0000_0100_0000_01b3;
const FNV_32_BASIS: u32 = 0x811c_9dc5;
const FNV_32_PRIME: u32 = 0x0100_0193;

/// A byte as twemproxy's C widens a (signed) `char`.
fn sign_extended(byte: u8) -> u32 {
    byte as i8 as i32 as u32
}

fn fnv1_64(key: &[u8]) -> u32 {
    let mut hash = FNV_64_BASIS;
    for &byte in key {
        hash = hash.wrapping_mul(FNV_64_PRIME);
        hash ^= byte as i8 as i64 as u64;
    }
    hash as u32
}

fn fnv1a_64_twemproxy(key: &[u8]) -> u32 {
    let mut hash = FNV_64_BASIS as u32;
    for &byte in key {
        hash ^= sign_extended(byte);
        hash = hash.wrapping_mul(FNV_64_PRIME as u32);
    }
    hash
}

fn fnv1_32(key: &[u8]) -> u32 {
    let mut hash = FNV_32_BASIS;
    for &byte in key {
        hash = hash.wrapping_mul(FNV_32_PRIME);
        hash ^= sign_extended(byte);
    }
    hash
}

fn fnv1a_32(key: &[u8]) -> u32 {
    let mut hash = FNV_32_BASIS;
    for &byte in key {
        hash ^= sign_extended(byte);
        hash = hash.wrapping_mul(FNV_32_PRIME);
    }
    hash
}

fn one_at_a_time(key: &[u8]) -> u32 {
    let mut value: u32 = 0;
    for &byte in key {
        value = value.wrapping_add(sign_extended(byte));
        value = value.wrapping_add(value << 10);
        value ^= value >> 6;
    }
    value = value.wrapping_add(value << 3);
    value ^= value >> 11;
    value.wrapping_add(value << 15)
}

/// The reflected CRC-32 table for polynomial 0xEDB88320, built at compile time.
const CRC32_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut index = 0;
    while index < 256 {
        let mut crc = index as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[index] = crc;
        index += 1;
    }
    table
};

fn crc32_ieee(key: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &byte in key {
        crc = CRC32_TABLE[((crc ^ byte as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// twemproxy's `crc32` widens the byte through a signed char before masking with 0xff, which
/// masks the sign extension away again; kept separate to document that it equals the IEEE CRC.
fn crc32_ieee_signed_input(key: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &byte in key {
        let widened = byte as i8 as i64 as u64;
        crc = (crc >> 8) ^ CRC32_TABLE[((crc as u64 ^ widened) & 0xff) as usize];
    }
    !crc
}

/// The `word`-th little-endian 32-bit word (0..4) of `MD5(data)`.
fn md5_word(data: &[u8], word: usize) -> u32 {
    let digest = Md5::digest(data);
    md5_digest_word(digest.as_slice(), word)
}

fn md5_digest_word(digest: &[u8], word: usize) -> u32 {
    let base = word * 4;
    u32::from_le_bytes([
        digest[base],
        digest[base + 1],
        digest[base + 2],
        digest[base + 3],
    ])
}

/// How keys are spread over the servers of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Ketama consistent hashing (libmemcached/twemproxy compatible).
    Ketama,
    /// `hash % total_weight` over weight-sized slots (twemproxy's `modula`).
    Modula,
    /// Jump consistent hash (Lamping & Veach); weights are ignored.
    Jump,
}

impl Distribution {
    /// Parses `ketama`, `modula` (or `modulo`) or `jump`.
    pub fn from_name(name: &str) -> Result<Self, PolicyError> {
        match name {
            "ketama" => Ok(Distribution::Ketama),
            "modula" | "modulo" => Ok(Distribution::Modula),
            "jump" => Ok(Distribution::Jump),
            other => Err(PolicyError::UnknownDistribution(other.to_string())),
        }
    }

    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Ketama => "ketama",
            Distribution::Modula => "modula",
            Distribution::Jump => "jump",
        }
    }
}

/// The ketama identity of a server, as libmemcached and twemproxy derive it: the explicit
/// `name` when one is configured, else `host` alone for port 11211, else `host:port`.
pub fn ketama_name(host: &str, port: u16, name: Option<&str>) -> String {
    match name {
        Some(name) => name.to_string(),
        None if port == KETAMA_DEFAULT_PORT => host.to_string(),
        None => format!("{host}:{port}"),
    }
}

/// One server as the ring sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingServer {
    /// Ketama identity (see [`ketama_name`]).
    pub name: String,
    /// Relative weight, at least 1.
    pub weight: u32,
}

/// How a ring hashes keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingOptions {
    /// The key hash.
    pub hash: HashFunction,
    /// The distribution.
    pub distribution: Distribution,
    /// twemproxy's `hash_tag`: when set (e.g. `{}`), only the part of the key between the first
    /// opening byte and the next closing byte is hashed, if that part is non-empty.
    pub hash_tag: Option<[u8; 2]>,
}

impl Default for RingOptions {
    /// twemproxy's defaults: `fnv1a_64`, `ketama`, no hash tag.
    fn default() -> Self {
        RingOptions {
            hash: HashFunction::Fnv1a64,
            distribution: Distribution::Ketama,
            hash_tag: None,
        }
    }
}

/// Parses a two-character hash tag such as `{}`.
pub fn parse_hash_tag(text: &str) -> Result<[u8; 2], PolicyError> {
    match text.as_bytes() {
        [open, close] => Ok([*open, *close]),
        _ => Err(PolicyError::BadHashTag(text.to_string())),
    }
}

/// One point of the ketama continuum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContinuumPoint {
    /// Position on the 32-bit circle.
    pub value: u32,
    /// Index of the server owning it.
    pub server: u32,
}

/// An immutable key → server map over a fixed server list.
#[derive(Debug, Clone)]
pub struct Ring {
    options: RingOptions,
    server_count: usize,
    /// Ketama: sorted points. Modula: one slot per unit of weight (value unused).
    continuum: Vec<ContinuumPoint>,
    /// Ketama: where the search for a hash starts and ends, by its top [`Ring::bucket_bits`]
    /// bits: entry `b` is the first point at or above `b << (32 - bucket_bits)` (one entry
    /// more than there are buckets, the last `continuum.len()`). Empty for other
    /// distributions.
    buckets: Vec<u32>,
    /// Bits of the hash that pick a bucket (0 without buckets).
    bucket_bits: u32,
}

impl Ring {
    /// Builds the ring for `servers` (in config order; the index into this slice is the server
    /// index every lookup returns).
    pub fn new(servers: &[RingServer], options: RingOptions) -> Result<Ring, PolicyError> {
        if servers.is_empty() {
            return Err(PolicyError::NoServers);
        }
        if let Some(server) = servers.iter().find(|server| server.weight == 0) {
            return Err(PolicyError::ZeroWeight {
                name: server.name.clone(),
            });
        }
        let continuum = match options.distribution {
            Distribution::Ketama => build_ketama(servers),
            Distribution::Modula => build_modula(servers),
            Distribution::Jump => Vec::new(),
        };
        let (buckets, bucket_bits) = match options.distribution {
            Distribution::Ketama => ketama_buckets(&continuum),
            Distribution::Modula | Distribution::Jump => (Vec::new(), 0),
        };
        Ok(Ring {
            options,
            server_count: servers.len(),
            continuum,
            buckets,
            bucket_bits,
        })
    }

    /// The options this ring was built with.
    pub fn options(&self) -> RingOptions {
        self.options
    }

    /// Number of servers.
    pub fn server_count(&self) -> usize {
        self.server_count
    }

    /// The ketama continuum (sorted); empty for other distributions.
    pub fn continuum(&self) -> &[ContinuumPoint] {
        match self.options.distribution {
            Distribution::Ketama => &self.continuum,
            Distribution::Modula | Distribution::Jump => &[],
        }
    }

    /// The part of `key` that is hashed (after applying the hash tag).
    pub fn hashed_part<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        let Some([open, close]) = self.options.hash_tag else {
            return key;
        };
        let Some(start) = key.iter().position(|&byte| byte == open) else {
            return key;
        };
        let rest = &key[start + 1..];
        match rest.iter().position(|&byte| byte == close) {
            Some(end) if end > 0 => &rest[..end],
            _ => key,
        }
    }

    /// The 32-bit hash the distribution sees for `key`.
    pub fn key_hash(&self, key: &[u8]) -> u32 {
        let part = self.hashed_part(key);
        if self.server_count == 1 || part.is_empty() {
            return 0;
        }
        self.options.hash.hash(part)
    }

    /// The server that owns `key`.
    pub fn server_for(&self, key: &[u8]) -> usize {
        if self.server_count == 1 {
            return 0;
        }
        let hash = self.key_hash(key);
        match self.options.distribution {
            Distribution::Ketama => {
                let position = self.ketama_position(hash);
                self.continuum[position].server as usize
            }
            Distribution::Modula => {
                let slot = hash as usize % self.continuum.len();
                self.continuum[slot].server as usize
            }
            Distribution::Jump => jump_consistent_hash(u64::from(hash), self.server_count),
        }
    }

    /// Fills `out` with up to `copies` distinct servers for `key`, the owner first. Ketama walks
    /// the continuum clockwise from the key's point; modula and jump take the following indices.
    pub fn replicas_for(&self, key: &[u8], copies: usize, out: &mut Vec<usize>) {
        out.clear();
        let wanted = copies.min(self.server_count);
        if wanted == 0 {
            return;
        }
        let owner = self.server_for(key);
        out.push(owner);
        if wanted == 1 {
            return;
        }
        match self.options.distribution {
            Distribution::Ketama => {
                let start = self.ketama_position(self.key_hash(key));
                let points = self.continuum.len();
                for step in 1..points {
                    let server = self.continuum[(start + step) % points].server as usize;
                    if !out.contains(&server) {
                        out.push(server);
                        if out.len() == wanted {
                            return;
                        }
                    }
                }
                // Servers with no points at all (possible with extreme weights) come last.
                for server in 0..self.server_count {
                    if out.len() == wanted {
                        return;
                    }
                    if !out.contains(&server) {
                        out.push(server);
                    }
                }
            }
            Distribution::Modula | Distribution::Jump => {
                for step in 1..wanted {
                    out.push((owner + step) % self.server_count);
                }
            }
        }
    }

    /// Index of the first continuum point at or after `hash`, wrapping to 0.
    fn ketama_position(&self, hash: u32) -> usize {
        // Only the points of the hash's bucket are searched: every point before the bucket's
        // first is below the hash, every point from the next bucket's first on is above it.
        let position = match self.bucket_bits {
            0 => self.continuum.partition_point(|point| point.value < hash),
            bits => {
                let bucket = (hash >> (32 - bits)) as usize;
                let (first, end) = (
                    self.buckets[bucket] as usize,
                    self.buckets[bucket + 1] as usize,
                );
                first + self.continuum[first..end].partition_point(|point| point.value < hash)
            }
        };
        if position == self.continuum.len() {
            0
        } else {
            position
        }
    }
}

/// Most bits of a hash that pick a ketama bucket (a table of 2^16 + 1 entries).
const MAX_BUCKET_BITS: u32 = 16;

/// The bucket table of a sorted continuum ([`Ring`]'s `buckets`): about two buckets per
/// point, so that most searches look at one or two points.
fn ketama_buckets(continuum: &[ContinuumPoint]) -> (Vec<u32>, u32) {
    if continuum.is_empty() {
        return (Vec::new(), 0);
    }
    let bits = (continuum.len() * 2)
        .next_power_of_two()
        .trailing_zeros()
        .clamp(1, MAX_BUCKET_BITS);
    let buckets = (0..=1usize << bits)
        .map(|bucket| {
            let floor = (bucket as u64) << (32 - bits);
            continuum.partition_point(|point| u64::from(point.value) < floor) as u32
        })
        .collect();
    (buckets, bits)
}

/// Points for one server: `floor(weight/total · 40 · n + 1e-10) · 4`, computed with twemproxy's
/// mix of f32 and f64 arithmetic so that rounding agrees.
pub fn ketama_points_for(weight: u32, total_weight: u32, server_count: u32) -> u32 {
    let share = weight as f32 / total_weight as f32;
    let scaled = share * KETAMA_POINTS_PER_SERVER as f32 / KETAMA_POINTS_PER_HASH as f32
        * server_count as f32;
    let nudged = (f64::from(scaled) + 0.000_000_000_1) as f32;
    (nudged.floor() * KETAMA_POINTS_PER_HASH as f32) as u32
}

fn build_ketama(servers: &[RingServer]) -> Vec<ContinuumPoint> {
    let total_weight: u32 = servers.iter().map(|server| server.weight).sum();
    let server_count = servers.len() as u32;
    let mut continuum = Vec::with_capacity(servers.len() * KETAMA_POINTS_PER_SERVER as usize);
    for (index, server) in servers.iter().enumerate() {
        let points = ketama_points_for(server.weight, total_weight, server_count);
        for digest_index in 0..points / KETAMA_POINTS_PER_HASH {
            let label = format!("{}-{}", server.name, digest_index);
            let digest = Md5::digest(label.as_bytes());
            for word in 0..KETAMA_POINTS_PER_HASH as usize {
                continuum.push(ContinuumPoint {
                    value: md5_digest_word(digest.as_slice(), word),
                    server: index as u32,
                });
            }
        }
    }
    // Ties (equal point values) are practically absent; ordering by server index makes them
    // deterministic (twemproxy's qsort leaves them unspecified).
    continuum.sort_unstable();
    continuum
}

fn build_modula(servers: &[RingServer]) -> Vec<ContinuumPoint> {
    let mut slots = Vec::new();
    for (index, server) in servers.iter().enumerate() {
        for _ in 0..server.weight {
            slots.push(ContinuumPoint {
                value: 0,
                server: index as u32,
            });
        }
    }
    slots
}

/// Jump consistent hash (Lamping & Veach 2014): maps `key` to a bucket in `0..buckets`; growing
/// `buckets` by one moves only the keys that land in the new bucket.
pub fn jump_consistent_hash(mut key: u64, buckets: usize) -> usize {
    let mut bucket: i64 = -1;
    let mut next: i64 = 0;
    let buckets = buckets as i64;
    while next < buckets {
        bucket = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        next = ((bucket + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    bucket.max(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(names: &[&str]) -> Vec<RingServer> {
        names
            .iter()
            .map(|name| RingServer {
                name: (*name).to_string(),
                weight: 1,
            })
            .collect()
    }

    #[test]
    fn hash_functions_match_reference_vectors() {
        // Standard published values.
        assert_eq!(HashFunction::Fnv1a32.hash(b"a"), 0xe40c_292c);
        assert_eq!(HashFunction::Fnv1_32.hash(b"a"), 0x050c_5d7e);
        assert_eq!(HashFunction::Crc32a.hash(b"123456789"), 0xcbf4_3926);
        assert_eq!(
            HashFunction::Crc32.hash(b"123456789"),
            (0xcbf4_3926 >> 16) & 0x7fff
        );
        assert_eq!(HashFunction::OneAtATime.hash(b"a"), 0xca2e_9442);
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e, first word little-endian.
        assert_eq!(HashFunction::Md5.hash(b""), 0xd98c_1dd4);
        // FNV-1 64 of "a" is 0xaf63bd4c8601b7be; twemproxy truncates to the low 32 bits.
        assert_eq!(HashFunction::Fnv1_64.hash(b"a"), 0x8601_b7be);
    }

    #[test]
    fn twemproxy_fnv1a_64_is_32_bit_arithmetic_with_truncated_constants() {
        // Computed independently: h = 0x84222325; h ^= 'a'; h *= 0x1b3 (mod 2^32).
        let expected = (0x8422_2325u32 ^ 0x61).wrapping_mul(0x1b3);
        assert_eq!(HashFunction::Fnv1a64.hash(b"a"), expected);
        assert_ne!(
            HashFunction::Fnv1a64.hash(b"a"),
            HashFunction::Fnv1a32.hash(b"a")
        );
    }

    #[test]
    fn high_bytes_are_sign_extended_like_c_char() {
        let expected = (0x8422_2325u32 ^ 0xffff_ff80).wrapping_mul(0x1b3);
        assert_eq!(HashFunction::Fnv1a64.hash(&[0x80]), expected);
    }

    #[test]
    fn every_name_round_trips() {
        for name in HashFunction::NAMES {
            assert_eq!(
                HashFunction::from_name(name).map(HashFunction::name),
                Ok(name)
            );
        }
        assert!(HashFunction::from_name("sha1").is_err());
    }

    #[test]
    fn ketama_names_follow_libmemcached_port_rule() {
        assert_eq!(ketama_name("10.0.0.1", 11211, None), "10.0.0.1");
        assert_eq!(ketama_name("10.0.0.1", 11212, None), "10.0.0.1:11212");
        assert_eq!(ketama_name("10.0.0.1", 11212, Some("alpha")), "alpha");
    }

    #[test]
    fn equal_weights_give_160_points_each_sorted() {
        let ring = Ring::new(&servers(&["a:1", "b:2", "c:3"]), RingOptions::default()).unwrap();
        assert_eq!(ring.continuum().len(), 480);
        assert!(ring
            .continuum()
            .windows(2)
            .all(|pair| pair[0].value <= pair[1].value));
        for server in 0..3u32 {
            let count = ring
                .continuum()
                .iter()
                .filter(|p| p.server == server)
                .count();
            assert_eq!(count, 160);
        }
    }

    #[test]
    fn ketama_points_are_md5_words_of_name_dash_index() {
        let ring = Ring::new(&servers(&["127.0.0.1:11212", "x"]), RingOptions::default()).unwrap();
        let digest = Md5::digest(b"127.0.0.1:11212-0");
        for word in 0..4 {
            let value = md5_digest_word(digest.as_slice(), word);
            assert!(ring
                .continuum()
                .iter()
                .any(|point| point.value == value && point.server == 0));
        }
    }

    #[test]
    fn weights_scale_points_like_twemproxy() {
        // weights 1,2,1 over 3 servers: shares .25 .5 .25 → floor(.25·40·3)=30 → 120, 240, 120.
        assert_eq!(ketama_points_for(1, 4, 3), 120);
        assert_eq!(ketama_points_for(2, 4, 3), 240);
        // 1 of 3 equal over 3: 40 exactly (the epsilon keeps f32 rounding from giving 39).
        assert_eq!(ketama_points_for(1, 3, 3), 160);
        assert_eq!(ketama_points_for(1, 7, 7), 160);
    }

    #[test]
    fn lookup_takes_first_point_at_or_after_hash_and_wraps() {
        let ring = Ring::new(&servers(&["a", "b", "c"]), RingOptions::default()).unwrap();
        let points = ring.continuum();
        let first = points[0];
        let last = points[points.len() - 1];
        assert_eq!(ring.ketama_position(first.value), 0);
        assert_eq!(ring.ketama_position(last.value.wrapping_add(1)), 0);
        for probe in [0u32, 1, 0x4000_0000, 0x8000_0000, 0xdead_beef, u32::MAX] {
            let linear = points.iter().position(|p| p.value >= probe).unwrap_or(0);
            assert_eq!(ring.ketama_position(probe), linear);
        }
    }

    #[test]
    fn adding_a_server_moves_only_keys_to_it() {
        let options = RingOptions::default();
        let before = Ring::new(&servers(&["a", "b", "c"]), options).unwrap();
        let after = Ring::new(&servers(&["a", "b", "c", "d"]), options).unwrap();
        let mut moved = 0;
        for index in 0..5000 {
            let key = format!("key:{index}");
            let (old, new) = (
                before.server_for(key.as_bytes()),
                after.server_for(key.as_bytes()),
            );
            if old != new {
                assert_eq!(new, 3, "a key moved between old servers");
                moved += 1;
            }
        }
        assert!(moved > 500 && moved < 2000, "moved {moved} of 5000");
    }

    #[test]
    fn modula_spreads_by_weight_slots() {
        let mut list = servers(&["a", "b"]);
        list[1].weight = 3;
        let options = RingOptions {
            distribution: Distribution::Modula,
            ..RingOptions::default()
        };
        let ring = Ring::new(&list, options).unwrap();
        for index in 0..200 {
            let key = format!("k{index}");
            let hash = ring.key_hash(key.as_bytes());
            let expected = match hash % 4 {
                0 => 0,
                _ => 1,
            };
            assert_eq!(ring.server_for(key.as_bytes()), expected);
        }
    }

    #[test]
    fn jump_moves_only_to_new_bucket_and_is_balanced() {
        let mut counts = [0usize; 5];
        for key in 0..10_000u64 {
            let hashed = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let small = jump_consistent_hash(hashed, 4);
            let large = jump_consistent_hash(hashed, 5);
            assert!(large == small || large == 4);
            counts[large] += 1;
        }
        assert!(
            counts.iter().all(|&count| (1500..2500).contains(&count)),
            "{counts:?}"
        );
        assert_eq!(jump_consistent_hash(12345, 1), 0);
    }

    #[test]
    fn hash_tag_hashes_only_the_tagged_part() {
        let options = RingOptions {
            hash_tag: Some(*b"{}"),
            ..RingOptions::default()
        };
        let ring = Ring::new(&servers(&["a", "b", "c"]), options).unwrap();
        assert_eq!(ring.hashed_part(b"user:{42}:name"), b"42");
        assert_eq!(ring.hashed_part(b"user:{}:name"), b"user:{}:name");
        assert_eq!(ring.hashed_part(b"plain"), b"plain");
        assert_eq!(ring.server_for(b"a{42}"), ring.server_for(b"zzz{42}yyy"));
    }

    #[test]
    fn replicas_are_distinct_and_start_with_owner() {
        let ring = Ring::new(&servers(&["a", "b", "c", "d"]), RingOptions::default()).unwrap();
        let mut out = Vec::new();
        for index in 0..300 {
            let key = format!("r{index}");
            ring.replicas_for(key.as_bytes(), 3, &mut out);
            assert_eq!(out.len(), 3);
            assert_eq!(out[0], ring.server_for(key.as_bytes()));
            let mut sorted = out.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 3);
        }
        ring.replicas_for(b"x", 9, &mut out);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn single_server_and_bad_input() {
        let ring = Ring::new(&servers(&["only"]), RingOptions::default()).unwrap();
        assert_eq!(ring.server_for(b"anything"), 0);
        assert_eq!(
            Ring::new(&[], RingOptions::default()).unwrap_err(),
            PolicyError::NoServers
        );
        let mut zero = servers(&["z"]);
        zero[0].weight = 0;
        assert!(matches!(
            Ring::new(&zero, RingOptions::default()),
            Err(PolicyError::ZeroWeight { .. })
        ));
        assert!(parse_hash_tag("{").is_err());
        assert_eq!(parse_hash_tag("{}").unwrap(), *b"{}");
    }

    #[test]
    fn bucketed_search_finds_the_point_a_search_of_the_whole_continuum_finds() {
        for (count, weights) in [(1, 1), (3, 1), (5, 3), (40, 7)] {
            let mut list = servers(
                &(0..count)
                    .map(|i| format!("10.0.{i}.1:11211"))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            for (index, server) in list.iter_mut().enumerate() {
                server.weight = 1 + (index as u32 % weights);
            }
            let ring = Ring::new(&list, RingOptions::default()).unwrap();
            assert!(ring.bucket_bits > 0);
            let whole = |hash: u32| {
                let position = ring.continuum.partition_point(|point| point.value < hash);
                if position == ring.continuum.len() {
                    0
                } else {
                    position
                }
            };
            let mut hashes = vec![0, 1, u32::MAX, u32::MAX - 1, 1 << 31, (1 << 31) - 1];
            for point in &ring.continuum {
                hashes.extend([
                    point.value.wrapping_sub(1),
                    point.value,
                    point.value.wrapping_add(1),
                ]);
            }
            let mut state = 0x9e37_79b9_u32;
            for _ in 0..10_000 {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                hashes.push(state);
            }
            for hash in hashes {
                assert_eq!(ring.ketama_position(hash), whole(hash), "hash {hash:#x}");
            }
        }
    }
}
