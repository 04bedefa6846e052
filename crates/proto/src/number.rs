//! Number parsing with the exact acceptance rules of memcached's
//! `safe_strtoul`/`safe_strtol`/`safe_strtoull` (C `strtol` family plus
//! memcached's checks): leading white space and a sign are allowed, the
//! number must be followed by white space or the end, a minus sign on an
//! unsigned number is rejected unless the value is zero, and overflow fails.

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// Parses like C `strtoull` then applies memcached's checks.
/// Returns `(negative, magnitude)`; `None` on no digits, overflow or trailing junk.
fn parse_c_integer(token: &[u8]) -> Option<(bool, u64)> {
    let mut i = 0;
    while i < token.len() && is_c_space(token[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < token.len() && (token[i] == b'+' || token[i] == b'-') {
        negative = token[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut value: u64 = 0;
    while i < token.len() && token[i].is_ascii_digit() {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(token[i] - b'0'))?;
        i += 1;
    }
    if i == digits_start {
        return None;
    }
    if i < token.len() && !is_c_space(token[i]) {
        return None;
    }
    Some((negative, value))
}

/// memcached `safe_strtoull`: unsigned 64-bit.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let (negative, value) = parse_c_integer(token)?;
    if negative {
        // strtoull negates; memcached rejects a '-' when the result looks negative.
        let wrapped = value.wrapping_neg();
        if (wrapped as i64) < 0 {
            return None;
        }
        return Some(wrapped);
    }
    Some(value)
}

/// memcached `safe_strtoul` into a 32-bit value (client flags): parsed as a
/// 64-bit `unsigned long`, then truncated to 32 bits exactly as memcached's
/// assignment does (`4294967296` is accepted and becomes 0).
pub fn parse_u32(token: &[u8]) -> Option<u32> {
    let value = parse_u64(token)?;
    Some(value as u32)
}

/// memcached `safe_strtol` into a 32-bit signed value (exptime, lengths):
/// parsed as a 64-bit `long` (overflow fails), then truncated to 32 bits as
/// memcached's assignment does (`4000000000` becomes negative).
pub fn parse_i32(token: &[u8]) -> Option<i32> {
    let (negative, magnitude) = parse_c_integer(token)?;
    let signed = if negative {
        if magnitude == 1u64 << 63 {
            i64::MIN
        } else {
            0i64.checked_sub(i64::try_from(magnitude).ok()?)?
        }
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(signed as i32)
}

/// Parses a plain decimal number stored as an item value for incr/decr
/// (`safe_strtoull` over the data, which is followed by `\r\n` in memcached).
pub fn parse_counter(data: &[u8]) -> Option<u64> {
    if data.is_empty() {
        return None;
    }
    parse_u64(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_accepts_what_strtoull_accepts() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"\t12"), Some(12));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b"12 "), Some(12));
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"abc"), None);
    }

    #[test]
    fn flags_are_32_bit() {
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), Some(0));
        assert_eq!(parse_u32(b"4294967297"), Some(1));
        assert_eq!(parse_u32(b"-1"), None);
        assert_eq!(parse_u32(b"18446744073709551616"), None);
    }

    #[test]
    fn signed_range() {
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(parse_i32(b"2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"4000000000"), Some(4_000_000_000i64 as i32));
        assert_eq!(parse_i32(b"4294967296"), Some(0));
        assert_eq!(parse_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"9223372036854775808"), None);
        assert_eq!(parse_i32(b"x"), None);
    }

    #[test]
    fn counters() {
        assert_eq!(parse_counter(b" 12"), Some(12));
        assert_eq!(parse_counter(b"12a"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"1 2"), Some(1));
    }
}
