//! Key listings a server sends for warm-up: memcached's `lru_crawler metadump all` and
//! `stats cachedump <class> <limit>` (what `tailtrim serve` answers).
//!
//! ```text
//!   lru_crawler metadump all ─► key=<url-encoded> exp=<-1|unix> la=<unix> cas=.. fetch=.. cls=.. size=..
//!   stats cachedump 1 0      ─► ITEM <key> [<bytes> b; <0|unix expiry> s]
//!   both end with END; parse_dump_line turns one line (without CRLF) into a DumpLine
//! ```

/// One line of a key listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpLine {
    /// An item.
    Item(DumpedKey),
    /// `END`: the listing is complete.
    End,
    /// `BUSY …` or `ERROR locked …`: memcached's crawler is busy, ask again later.
    Busy,
    /// `ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`: the server does not list keys this way.
    Refused,
    /// Anything else (skipped).
    Other,
}

/// One listed item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedKey {
    /// The key, decoded.
    pub key: Vec<u8>,
    /// Last access, Unix seconds, when the listing says (metadump's `la`).
    pub last_access: Option<u64>,
}

/// Parses one line of either listing, without its CRLF.
pub fn parse_dump_line(line: &[u8]) -> DumpLine {
    if line == b"END" {
        return DumpLine::End;
    }
    if line.starts_with(b"BUSY") || line.starts_with(b"ERROR locked") {
        return DumpLine::Busy;
    }
    if line == b"ERROR"
        || line.starts_with(b"ERROR ")
        || line.starts_with(b"CLIENT_ERROR")
        || line.starts_with(b"SERVER_ERROR")
    {
        return DumpLine::Refused;
    }
    if let Some(rest) = line.strip_prefix(b"key=") {
        return metadump_item(rest);
    }
    if let Some(rest) = line.strip_prefix(b"ITEM ") {
        let key = rest.split(|&b| b == b' ').next().unwrap_or_default();
        if key.is_empty() {
            return DumpLine::Other;
        }
        return DumpLine::Item(DumpedKey {
            key: key.to_vec(),
            last_access: None,
        });
    }
    DumpLine::Other
}

fn metadump_item(rest: &[u8]) -> DumpLine {
    let mut fields = rest.split(|&b| b == b' ');
    let Some(key) = fields.next().and_then(url_decode) else {
        return DumpLine::Other;
    };
    if key.is_empty() {
        return DumpLine::Other;
    }
    let last_access = fields
        .find_map(|field| field.strip_prefix(b"la="))
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse().ok());
    DumpLine::Item(DumpedKey { key, last_access })
}

/// Decodes memcached's URI encoding of keys (`%XX`); None when malformed.
fn url_decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadump_lines_decode_keys_and_last_access() {
        // As memcached 1.6 prints them.
        let line = b"key=a%C3%A9b exp=-1 la=1795460843 cas=2 fetch=no cls=1 size=64";
        assert_eq!(
            parse_dump_line(line),
            DumpLine::Item(DumpedKey {
                key: "aéb".as_bytes().to_vec(),
                last_access: Some(1_795_460_843),
            })
        );
        assert_eq!(parse_dump_line(b"key=%4 exp=-1"), DumpLine::Other);
        assert_eq!(parse_dump_line(b"END"), DumpLine::End);
        assert_eq!(
            parse_dump_line(b"BUSY currently processing crawler request"),
            DumpLine::Busy
        );
        assert_eq!(
            parse_dump_line(b"ERROR locked try again later"),
            DumpLine::Busy
        );
    }

    #[test]
    fn cachedump_lines_and_refusals() {
        assert_eq!(
            parse_dump_line(b"ITEM foo [3 b; 0 s]"),
            DumpLine::Item(DumpedKey {
                key: b"foo".to_vec(),
                last_access: None,
            })
        );
        assert_eq!(parse_dump_line(b"ERROR"), DumpLine::Refused);
        assert_eq!(
            parse_dump_line(b"CLIENT_ERROR bad command line format"),
            DumpLine::Refused
        );
        assert_eq!(parse_dump_line(b"STAT pid 1"), DumpLine::Other);
    }
}
