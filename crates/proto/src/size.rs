//! memcached's size syntax, as its `-I` takes it: a number of bytes, optionally followed by
//! `k` or `m` (`1m`, `512k`, `2097152`). The server's and the proxy's `-I` both read it here.

/// Parses memcached's size syntax for `-I`: a number of bytes, optionally
/// followed by `k` or `m` (`1m`, `512k`, `2097152`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, multiplier) = match text.chars().last() {
        Some('k' | 'K') => (&text[..text.len() - 1], 1024),
        Some('m' | 'M') => (&text[..text.len() - 1], 1024 * 1024),
        _ => (text, 1),
    };
    let invalid = || format!("invalid size '{text}' (use bytes, or a k/m suffix)");
    let value: u64 = digits.parse().map_err(|_| invalid())?;
    value.checked_mul(multiplier).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1m"), Ok(1024 * 1024));
        assert_eq!(parse_size("512k"), Ok(512 * 1024));
        assert_eq!(parse_size("2000"), Ok(2000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999999m").is_err());
    }
}
