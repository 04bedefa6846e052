//! Client-side request composition (text protocol), appending to a `Vec<u8>`.

use crate::request::StoreMode;

/// Appends `get k1 k2 …\r\n` (or `gets` when `with_cas`).
pub fn get<K: AsRef<[u8]>>(out: &mut Vec<u8>, keys: &[K], with_cas: bool) {
    out.extend_from_slice(if with_cas { b"gets" } else { b"get" });
    for key in keys {
        out.push(b' ');
        out.extend_from_slice(key.as_ref());
    }
    out.extend_from_slice(b"\r\n");
}

fn push_num(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    out.extend_from_slice(n.to_string().as_bytes());
}

/// The command word of a storage mode.
pub fn store_word(mode: StoreMode) -> &'static [u8] {
    match mode {
        StoreMode::Set => b"set",
        StoreMode::Add => b"add",
        StoreMode::Replace => b"replace",
        StoreMode::Append => b"append",
        StoreMode::Prepend => b"prepend",
        StoreMode::Cas => b"cas",
    }
}

/// A storage command with its data block. `cas_unique` is used by `cas` only.
#[allow(clippy::too_many_arguments)]
pub fn store(
    out: &mut Vec<u8>,
    mode: StoreMode,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    cas_unique: u64,
    noreply: bool,
) {
    out.extend_from_slice(store_word(mode));
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b' ');
    push_num(out, flags);
    out.push(b' ');
    push_num(out, exptime);
    out.push(b' ');
    push_num(out, data.len());
    if mode == StoreMode::Cas {
        out.push(b' ');
        push_num(out, cas_unique);
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `set key flags exptime len\r\ndata\r\n`.
pub fn set(out: &mut Vec<u8>, key: &[u8], flags: u32, exptime: i64, data: &[u8]) {
    store(out, StoreMode::Set, key, flags, exptime, data, 0, false);
}

/// `delete key[ noreply]\r\n`.
pub fn delete(out: &mut Vec<u8>, key: &[u8], noreply: bool) {
    simple_keyed(out, b"delete", key, None, noreply);
}

/// `incr`/`decr key delta[ noreply]\r\n`.
pub fn arithmetic(out: &mut Vec<u8>, incr: bool, key: &[u8], delta: u64, noreply: bool) {
    let word: &[u8] = if incr { b"incr" } else { b"decr" };
    simple_keyed(out, word, key, Some(delta.to_string()), noreply);
}

/// `touch key exptime[ noreply]\r\n`.
pub fn touch(out: &mut Vec<u8>, key: &[u8], exptime: i64, noreply: bool) {
    simple_keyed(out, b"touch", key, Some(exptime.to_string()), noreply);
}

/// Appends a multiget as quiet `mg` requests that carry `priority` (tailtrim's `p` flag,
/// [`crate::meta::CLASS_FLAG`]; only for servers that announce it), closed by `mn`:
/// `mg <key> v f k [c] [T<exptime>] q p<class>[a<overtakes>]\r\n` per key, then `mn\r\n`. Hits
/// come back as `VA <len> f<flags> k<key> [c<cas>]` items, misses say nothing, `MN` ends the
/// reply.
pub fn meta_multiget<K: AsRef<[u8]>>(
    out: &mut Vec<u8>,
    keys: &[K],
    with_cas: bool,
    touch: Option<i32>,
    priority: crate::meta::Priority,
) {
    for key in keys {
        out.extend_from_slice(b"mg ");
        out.extend_from_slice(key.as_ref());
        out.extend_from_slice(b" v f k");
        if with_cas {
            out.extend_from_slice(b" c");
        }
        if let Some(exptime) = touch {
            out.extend_from_slice(b" T");
            push_num(out, exptime);
        }
        out.extend_from_slice(b" q p");
        push_num(out, priority.class);
        if let Some(overtakes) = priority.overtakes {
            out.push(crate::meta::AGEING_MARK);
            push_num(out, overtakes);
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"mn\r\n");
}

fn simple_keyed(out: &mut Vec<u8>, word: &[u8], key: &[u8], arg: Option<String>, noreply: bool) {
    out.extend_from_slice(word);
    out.push(b' ');
    out.extend_from_slice(key);
    if let Some(arg) = arg {
        out.push(b' ');
        out.extend_from_slice(arg.as_bytes());
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::Priority;
    use crate::{parse_request, Limits, Parsed, Request};

    #[test]
    fn a_classed_meta_multiget_parses_back_as_quiet_mgs_and_a_noop() {
        let mut out = Vec::new();
        let class = |class| Priority {
            class,
            overtakes: None,
        };
        meta_multiget(&mut out, &[b"a".as_slice(), b"b"], true, Some(30), class(3));
        assert_eq!(
            out,
            b"mg a v f k c T30 q p3\r\nmg b v f k c T30 q p3\r\nmn\r\n".to_vec()
        );
        let mut aged = Vec::new();
        let priority = Priority {
            class: 2,
            overtakes: Some(2000),
        };
        meta_multiget(&mut aged, &[b"a".as_slice()], false, None, priority);
        assert_eq!(aged, b"mg a v f k q p2a2000\r\nmn\r\n".to_vec());
        assert!(matches!(
            parse_request(&aged, &Limits::default()),
            Parsed::Complete { value, .. } if value.priority() == Some(priority)
        ));
        let limits = Limits::default();
        let mut rest = &out[..];
        let mut got = Vec::new();
        while let Parsed::Complete { value, consumed } = parse_request(rest, &limits) {
            got.push(value);
            rest = &rest[consumed..];
        }
        assert_eq!(got.len(), 3);
        assert!(got[..2].iter().all(|r| r.priority_class() == Some(3)
            && matches!(r, Request::MetaGet { flags, .. } if flags.quiet())));
        assert_eq!(got[2], Request::MetaNoop);
    }

    #[test]
    fn composed_requests_parse_back() {
        let mut out = Vec::new();
        get(&mut out, &[b"a".as_slice(), b"b"], false);
        store(&mut out, StoreMode::Cas, b"k", 3, 60, b"hello", 99, true);
        arithmetic(&mut out, false, b"n", 5, false);
        let limits = Limits::default();
        let Parsed::Complete {
            value: first,
            consumed,
        } = parse_request(&out, &limits)
        else {
            panic!()
        };
        assert!(matches!(first, Request::Get { ref keys, with_cas: false } if keys.len() == 2));
        let rest = &out[consumed..];
        let Parsed::Complete {
            value: Request::Store(cmd),
            consumed: c2,
        } = parse_request(rest, &limits)
        else {
            panic!()
        };
        assert_eq!(
            (
                cmd.mode,
                cmd.flags,
                cmd.exptime,
                cmd.cas_unique,
                cmd.noreply
            ),
            (StoreMode::Cas, 3, 60, 99, true)
        );
        assert_eq!(&rest[cmd.data], b"hello");
        assert!(matches!(
            parse_request(&rest[c2..], &limits),
            Parsed::Complete {
                value: Request::Arithmetic {
                    delta: 5,
                    incr: false,
                    ..
                },
                ..
            }
        ));
    }
}
