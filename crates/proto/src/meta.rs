//! Meta-command flags (`mg`, `ms`, `md`, `ma`): single letters, some with a
//! token (`T30`, `Oabc`, `MS`). Order is kept because memcached echoes the
//! return flags in the order the client asked for them.
//!
//! One flag is tailtrim's own: `p<class>` on `mg` carries the request's priority class
//! ([`CLASS_FLAG`], `0..`[`PRIORITY_CLASSES`], 0 the highest). Stock memcached answers it with
//! `CLIENT_ERROR invalid flag`, so a client sends it only to a server that announced support
//! (`stats settings`: `priorities`); a class out of range gets
//! `CLIENT_ERROR bad token in command line format`, as any bad numeric token does. The class
//! may carry the ageing of the order it is served in, `p<class>a<overtakes>` ([`Priority`]):
//! a request of class `c` may be overtaken by a higher class only within `overtakes × c` later
//! arrivals (`cost-sbf`'s servers; without it the server's own order applies).

use bytes::Bytes;

use crate::error::ProtoError;
use crate::number::{parse_i32, parse_u32, parse_u64};

/// The meta flag that carries a priority class (tailtrim's extension, `mg` only).
pub const CLASS_FLAG: u8 = b'p';
/// Number of priority classes `p` accepts (`p0` highest .. `p4` lowest): Rein's five.
pub const PRIORITY_CLASSES: u8 = 5;

/// What a `p` flag carries: the class, and the ageing of its order if given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Priority {
    /// `0..`[`PRIORITY_CLASSES`], 0 the highest.
    pub class: u8,
    /// `a<overtakes>`: later arrivals that may overtake the request per class between them
    /// (`tailtrim_policy::serverq::Discipline::Aged`); `None`: the server's own order.
    pub overtakes: Option<u64>,
}

/// The letter inside a `p` token that introduces the ageing (`p3a2000`).
pub const AGEING_MARK: u8 = b'a';

/// One flag of a meta command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFlag {
    /// The flag letter (`b'v'`, `b'T'`, ...).
    pub letter: u8,
    /// Whatever followed the letter in the token (may be empty).
    pub token: Bytes,
}

/// The flags of one meta command, in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaFlags {
    /// Flags as given.
    pub list: Vec<MetaFlag>,
}

/// Which meta command a flag set belongs to (each accepts different letters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    /// `mg`
    Get,
    /// `ms`
    Set,
    /// `md`
    Delete,
    /// `ma`
    Arithmetic,
}

impl MetaKind {
    /// Flag letters memcached 1.6.18 accepts for this command.
    fn accepts(self, letter: u8) -> bool {
        let allowed: &[u8] = match self {
            MetaKind::Get => b"bcfhklOqstuvNRTPp",
            MetaKind::Set => b"bcCFIkOqsSTMNP",
            MetaKind::Delete => b"bCEIkOqTxP",
            MetaKind::Arithmetic => b"bCENJDTMOqtcvkP",
        };
        allowed.contains(&letter)
    }

    /// Flags whose token must be a number, and whether it is signed (a TTL).
    fn numeric(self, letter: u8) -> Option<bool> {
        match (self, letter) {
            (_, b'T' | b'N' | b'R') => Some(true),
            (_, b'C' | b'E' | b'F' | b'D' | b'J') => Some(false),
            _ => None,
        }
    }

    /// The error memcached reports for a bad flag of this command.
    pub fn flag_error(self, problem: FlagProblem) -> ProtoError {
        match (self, problem) {
            (MetaKind::Delete | MetaKind::Arithmetic, FlagProblem::OpaqueTooLong) => {
                ProtoError::OpaqueTooLong
            }
            (MetaKind::Delete | MetaKind::Arithmetic, _) => ProtoError::InvalidOrDuplicateMetaFlag,
            (_, FlagProblem::Unknown) => ProtoError::InvalidMetaFlag,
            (_, FlagProblem::Duplicate) => ProtoError::DuplicateMetaFlag,
            (_, FlagProblem::OpaqueTooLong) => ProtoError::OpaqueTooLong,
            (MetaKind::Set, FlagProblem::BadNumber(letter))
                if !matches!(letter, b'T' | b'N' | b'R') =>
            {
                ProtoError::BadCommandLine { noreply: false }
            }
            (_, FlagProblem::BadNumber(_)) => ProtoError::BadMetaToken,
        }
    }
}

/// What is wrong with a meta flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagProblem {
    /// Not a flag of this command.
    Unknown,
    /// Given twice.
    Duplicate,
    /// A numeric token (of this flag letter) that does not parse.
    BadNumber(u8),
    /// An opaque longer than 32 bytes.
    OpaqueTooLong,
}

/// Largest opaque token memcached accepts.
const MAX_OPAQUE_LEN: usize = 32;

impl MetaFlags {
    /// Parses the flag tokens of a meta command of kind `kind`, reporting
    /// problems with the error text memcached uses for that command.
    pub fn parse<'a>(
        kind: MetaKind,
        tokens: impl Iterator<Item = &'a [u8]>,
    ) -> Result<MetaFlags, ProtoError> {
        Self::check(kind, tokens).map_err(|problem| kind.flag_error(problem))
    }

    fn check<'a>(
        kind: MetaKind,
        tokens: impl Iterator<Item = &'a [u8]>,
    ) -> Result<MetaFlags, FlagProblem> {
        let mut seen = [false; 128];
        let mut list = Vec::new();
        for token in tokens {
            let letter = token[0];
            if !letter.is_ascii_alphabetic() || !kind.accepts(letter) {
                return Err(FlagProblem::Unknown);
            }
            let slot = usize::from(letter);
            if seen[slot] {
                return Err(FlagProblem::Duplicate);
            }
            seen[slot] = true;
            let rest = &token[1..];
            if letter == b'O' && rest.len() > MAX_OPAQUE_LEN {
                return Err(FlagProblem::OpaqueTooLong);
            }
            let number_ok = match kind.numeric(letter) {
                Some(true) => parse_i32(rest).is_some(),
                Some(false) => parse_u64(rest).is_some(),
                None if letter == CLASS_FLAG => parse_priority(rest).is_some(),
                None => true,
            };
            if !number_ok {
                return Err(FlagProblem::BadNumber(letter));
            }
            list.push(MetaFlag {
                letter,
                token: Bytes::copy_from_slice(rest),
            });
        }
        Ok(MetaFlags { list })
    }

    /// True when the flag is present.
    pub fn has(&self, letter: u8) -> bool {
        self.list.iter().any(|f| f.letter == letter)
    }

    /// The token of a flag, if present.
    pub fn token(&self, letter: u8) -> Option<&Bytes> {
        self.list
            .iter()
            .find(|f| f.letter == letter)
            .map(|f| &f.token)
    }

    /// A signed 32-bit numeric token (TTLs), validated.
    pub fn ttl(&self, letter: u8) -> Result<Option<i32>, ProtoError> {
        match self.token(letter) {
            None => Ok(None),
            Some(t) => parse_i32(t).map(Some).ok_or(ProtoError::BadMetaToken),
        }
    }

    /// An unsigned 64-bit numeric token (CAS, deltas), validated.
    pub fn u64(&self, letter: u8) -> Result<Option<u64>, ProtoError> {
        match self.token(letter) {
            None => Ok(None),
            Some(t) => parse_u64(t).map(Some).ok_or(ProtoError::BadMetaToken),
        }
    }

    /// An unsigned 32-bit numeric token (client flags), validated.
    pub fn u32(&self, letter: u8) -> Result<Option<u32>, ProtoError> {
        match self.token(letter) {
            None => Ok(None),
            Some(t) => parse_u32(t).map(Some).ok_or(ProtoError::BadMetaToken),
        }
    }

    /// The mode letter of the `M` flag, if given.
    pub fn mode(&self) -> Option<u8> {
        self.token(b'M').and_then(|t| t.first().copied())
    }

    /// The priority class of the `p` flag, if given (validated when parsed).
    pub fn class(&self) -> Option<u8> {
        self.priority().map(|priority| priority.class)
    }

    /// The class and ageing of the `p` flag, if given (validated when parsed).
    pub fn priority(&self) -> Option<Priority> {
        self.token(CLASS_FLAG).and_then(|t| parse_priority(t))
    }

    /// `q`: quiet mode.
    pub fn quiet(&self) -> bool {
        self.has(b'q')
    }
}

/// A class token: one decimal digit below [`PRIORITY_CLASSES`], then optionally
/// [`AGEING_MARK`] and a decimal count of overtakes.
fn parse_priority(token: &[u8]) -> Option<Priority> {
    match token {
        [digit @ b'0'..=b'9'] if digit - b'0' < PRIORITY_CLASSES => Some(Priority {
            class: digit - b'0',
            overtakes: None,
        }),
        [digit @ b'0'..=b'9', AGEING_MARK, overtakes @ ..]
            if digit - b'0' < PRIORITY_CLASSES
                && !overtakes.is_empty()
                && overtakes.iter().all(u8::is_ascii_digit) =>
        {
            Some(Priority {
                class: digit - b'0',
                overtakes: Some(parse_u64(overtakes)?),
            })
        }
        _ => None,
    }
}

/// Decodes standard base64 (with padding) as the `b` flag requires.
pub fn decode_base64(input: &[u8]) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    if input.is_empty() || !input.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    for chunk in input.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let v = if i >= 4 - pad { 0 } else { value(c)? };
            acc = (acc << 6) | v;
        }
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Encodes standard base64 with padding (for returning `b` keys).
pub fn encode_base64(input: &[u8]) -> Vec<u8> {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let acc = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[((acc >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_keep_order_and_tokens() {
        let toks: Vec<&[u8]> = vec![b"s", b"v", b"T30", b"Oab"];
        let flags = MetaFlags::parse(MetaKind::Get, toks.into_iter()).unwrap();
        assert_eq!(flags.list.len(), 4);
        assert_eq!(flags.ttl(b'T').unwrap(), Some(30));
        assert_eq!(flags.token(b'O').unwrap().as_ref(), b"ab");
        assert!(flags.has(b'v') && !flags.has(b'k'));
    }

    #[test]
    fn rejects_unknown_and_duplicate() {
        let bad: Vec<&[u8]> = vec![b"zz"];
        assert_eq!(
            MetaFlags::parse(MetaKind::Get, bad.into_iter()),
            Err(ProtoError::InvalidMetaFlag)
        );
        let dup: Vec<&[u8]> = vec![b"v", b"v"];
        assert_eq!(
            MetaFlags::parse(MetaKind::Get, dup.into_iter()),
            Err(ProtoError::DuplicateMetaFlag)
        );
        let not_for_delete: Vec<&[u8]> = vec![b"v"];
        assert_eq!(
            MetaFlags::parse(MetaKind::Delete, not_for_delete.into_iter()),
            Err(ProtoError::InvalidOrDuplicateMetaFlag)
        );
        let bad_ttl: Vec<&[u8]> = vec![b"Tabc"];
        assert_eq!(
            MetaFlags::parse(MetaKind::Get, bad_ttl.clone().into_iter()),
            Err(ProtoError::BadMetaToken)
        );
        assert_eq!(
            MetaFlags::parse(MetaKind::Set, bad_ttl.into_iter()),
            Err(ProtoError::BadMetaToken)
        );
        let bad_flags: Vec<&[u8]> = vec![b"Fxyz"];
        assert_eq!(
            MetaFlags::parse(MetaKind::Set, bad_flags.into_iter()),
            Err(ProtoError::BadCommandLine { noreply: false })
        );
        let long_opaque = [b'O'; 40];
        assert_eq!(
            MetaFlags::parse(MetaKind::Get, std::iter::once(&long_opaque[..])),
            Err(ProtoError::OpaqueTooLong)
        );
    }

    #[test]
    fn the_class_flag_takes_one_digit_below_five_on_mg_only() {
        let parse = |kind, toks: &[&[u8]]| MetaFlags::parse(kind, toks.iter().copied());
        for class in 0..PRIORITY_CLASSES {
            let token = [b'p', b'0' + class];
            let flags = parse(MetaKind::Get, &[b"v", &token]).unwrap();
            assert_eq!(flags.class(), Some(class));
        }
        assert_eq!(parse(MetaKind::Get, &[b"v"]).unwrap().class(), None);
        let aged = parse(MetaKind::Get, &[b"p3a2000"]).unwrap();
        assert_eq!(
            aged.priority(),
            Some(Priority {
                class: 3,
                overtakes: Some(2000)
            })
        );
        assert_eq!(aged.class(), Some(3));
        assert_eq!(
            parse(MetaKind::Get, &[b"p0"]).unwrap().priority(),
            Some(Priority::default())
        );
        for bad in [
            &b"p3a"[..],
            b"p3a-1",
            b"p3a+1",
            b"p3a 1",
            b"p3ax",
            b"p3b5",
            b"p5a10",
            b"pa10",
            b"p3a99999999999999999999",
            b"p",
            b"p5",
            b"p9",
            b"p-1",
            b"p00",
            b"p01",
            b"px",
            b"p 1",
        ] {
            assert_eq!(
                parse(MetaKind::Get, &[bad]),
                Err(ProtoError::BadMetaToken),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse(MetaKind::Get, &[b"p1", b"p2"]),
            Err(ProtoError::DuplicateMetaFlag)
        );
        // Not an extension of the other meta commands: their usual unknown-flag errors.
        assert_eq!(
            parse(MetaKind::Set, &[b"p1"]),
            Err(ProtoError::InvalidMetaFlag)
        );
        assert_eq!(
            parse(MetaKind::Delete, &[b"p1"]),
            Err(ProtoError::InvalidOrDuplicateMetaFlag)
        );
    }

    #[test]
    fn base64_round_trip() {
        for input in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"] {
            let enc = encode_base64(input);
            if input.is_empty() {
                assert!(decode_base64(&enc).is_none());
            } else {
                assert_eq!(decode_base64(&enc).unwrap(), input);
            }
        }
        assert_eq!(encode_base64(b"foobar"), b"Zm9vYmFy");
        assert_eq!(decode_base64(b"Zm8="), Some(b"fo".to_vec()));
        assert_eq!(decode_base64(b"Zm8"), None);
    }
}
