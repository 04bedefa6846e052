//! Differential tests: the same byte scripts sent to Debian's memcached and to
//! `tailtrim serve`, replies compared byte for byte after normalising what must differ.
//!
//! ```text
//!   tests/differential/cases/*.txt ──parse──> cases ──┬─thread─> memcached    ─┐
//!                                                     └─thread─> tailtrim serve ┴─> compare
//!   replies ──normalise (VERSION, cas → ordinals, ttl buckets, stats values)──> transcripts
//!   memcached transcripts ──(TAILTRIM_DIFF_RECORD=1)──> tests/differential/golden/*.txt
//!   mismatches ──> stderr + $CARGO_TARGET_TMPDIR/differential-report.txt
//! ```
//!
//! Case format (see tests/differential/README.md): `=== name [nopipe]` starts a case; a line
//! `> bytes` sends bytes and reads the reply, `+ bytes` sends without reading, `@sleep MS`
//! pauses. Bytes use C escapes (`\r \n \t \0 \\ \xHH \{ \s`), `{text*N}` repeats `text` N
//! times and `{casN}` stands for the N-th distinct cas value the server has shown on this
//! connection. Each read appends a sentinel `mn\r\n` and reads until as many `MN\r\n` lines
//! as `mn` commands were sent, so replies are complete without waiting; when the sentinel never comes back (the server is waiting
//! for more data), reading stops after the connection goes quiet.
//!
//! Every case runs on a fresh connection after a `flush_all` on a control connection;
//! cases without `{casN}` or `@sleep` also run "pipelined": all their bytes in one write;
//! every case also runs with "split" writes (each small step cut into pieces, one cut
//! between `\r` and `\n`) to exercise incremental parsing.
//!
//! Environment: `TAILTRIM_DIFF_TARGET=memcached` compares memcached with a second memcached
//! (validates the harness); `TAILTRIM_DIFF_RECORD=1` rewrites the golden files;
//! `TAILTRIM_DIFF_FILTER=text` runs only cases whose name contains `text`.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{require_memcached, Program, Server};

const SENTINEL: &[u8] = b"mn\r\n";
const SENTINEL_REPLY: &[u8] = b"MN\r\n";
/// How long a connection must stay silent before a read without sentinel reply ends
/// (plus [`quiet_for`]'s allowance for large writes).
const QUIET: Duration = Duration::from_millis(300);

/// Quiet period before giving up on a read that has received nothing at all: generous,
/// because few cases legitimately get no reply and a loaded machine can be slow.
const QUIET_WHEN_EMPTY: Duration = Duration::from_millis(2000);

/// Quiet period for a read after sending `sent` bytes: 300 ms plus 2 ms per KiB, so a
/// slow build processing a megabyte is not mistaken for a server that waits for more.
fn quiet_for(sent: usize) -> Duration {
    QUIET + Duration::from_millis(2 * (sent as u64 / 1024))
}
/// Upper bound on one read.
const READ_LIMIT: Duration = Duration::from_secs(10);
/// Stats whose presence is compared (values are normalised away); other STAT lines are
/// dropped before comparison.
const COMPARED_STATS: &[&str] = &[
    "pid",
    "uptime",
    "version",
    "curr_connections",
    "total_connections",
    "cmd_get",
    "cmd_set",
    "get_hits",
    "get_misses",
    "curr_items",
    "bytes",
    "limit_maxbytes",
    "evictions",
    "threads",
];

fn differential_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/differential")
}

/// One part of a payload: literal bytes or a cas value learnt at run time.
#[derive(Debug, Clone)]
enum Piece {
    Bytes(Vec<u8>),
    Cas(usize),
}

#[derive(Debug, Clone)]
enum Step {
    Send { pieces: Vec<Piece>, read: bool },
    Sleep(Duration),
}

#[derive(Debug, Clone)]
struct Case {
    file: String,
    line: usize,
    name: String,
    steps: Vec<Step>,
    pipeline: bool,
}

fn parse_payload(text: &str) -> Result<Vec<Piece>, String> {
    let bytes = text.as_bytes();
    let mut pieces = Vec::new();
    let mut literal = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => {
                let escaped = *bytes.get(index + 1).ok_or("dangling backslash")?;
                index += 2;
                match escaped {
                    b'r' => literal.push(b'\r'),
                    b'n' => literal.push(b'\n'),
                    b't' => literal.push(b'\t'),
                    b'0' => literal.push(0),
                    b's' => literal.push(b' '),
                    b'\\' | b'{' | b'}' => literal.push(escaped),
                    b'x' => {
                        let hex = text
                            .get(index..index + 2)
                            .ok_or("\\x needs two hex digits")?;
                        let value = u8::from_str_radix(hex, 16)
                            .map_err(|_| format!("bad hex escape \\x{hex}"))?;
                        literal.push(value);
                        index += 2;
                    }
                    other => return Err(format!("unknown escape \\{}", other as char)),
                }
            }
            b'{' => {
                let close = text[index..]
                    .find('}')
                    .ok_or("unclosed '{' (write \\{ for a literal brace)")?;
                let inner = &text[index + 1..index + close];
                index += close + 1;
                if let Some(ordinal) = inner.strip_prefix("cas") {
                    let ordinal: usize = ordinal
                        .parse()
                        .map_err(|_| format!("bad placeholder {{{inner}}}"))?;
                    if ordinal == 0 {
                        return Err("cas placeholders count from 1".to_string());
                    }
                    pieces.push(Piece::Bytes(std::mem::take(&mut literal)));
                    pieces.push(Piece::Cas(ordinal));
                } else if let Some((unit, count)) = inner.rsplit_once('*') {
                    let count: usize = count
                        .parse()
                        .map_err(|_| format!("bad repeat count in {{{inner}}}"))?;
                    let unit = match parse_payload(unit)?.as_slice() {
                        [Piece::Bytes(unit)] => unit.clone(),
                        _ => return Err(format!("bad repeat unit in {{{inner}}}")),
                    };
                    for _ in 0..count {
                        literal.extend_from_slice(&unit);
                    }
                } else {
                    return Err(format!("unknown placeholder {{{inner}}}"));
                }
            }
            byte => {
                literal.push(byte);
                index += 1;
            }
        }
    }
    pieces.push(Piece::Bytes(literal));
    pieces.retain(|piece| !matches!(piece, Piece::Bytes(bytes) if bytes.is_empty()));
    Ok(pieces)
}

fn parse_cases(file: &str, text: &str) -> Result<Vec<Case>, String> {
    let mut cases: Vec<Case> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line_no = number + 1;
        let located = |message: String| format!("{file}:{line_no}: {message}");
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix("=== ") {
            let mut words = header.split_whitespace();
            let name = words
                .next()
                .ok_or_else(|| located("case without a name".to_string()))?;
            let mut pipeline = true;
            for option in words {
                match option {
                    "nopipe" => pipeline = false,
                    other => return Err(located(format!("unknown case option {other}"))),
                }
            }
            if cases.iter().any(|case| case.name == name) {
                return Err(located(format!("duplicate case name {name}")));
            }
            cases.push(Case {
                file: file.to_string(),
                line: line_no,
                name: name.to_string(),
                steps: Vec::new(),
                pipeline,
            });
            continue;
        }
        let case = cases
            .last_mut()
            .ok_or_else(|| located("step before the first '=== name'".to_string()))?;
        let step = if let Some(payload) = line.strip_prefix("> ") {
            Step::Send {
                pieces: parse_payload(payload).map_err(located)?,
                read: true,
            }
        } else if let Some(payload) = line.strip_prefix("+ ") {
            Step::Send {
                pieces: parse_payload(payload).map_err(located)?,
                read: false,
            }
        } else if let Some(millis) = line.strip_prefix("@sleep ") {
            let millis: u64 = millis
                .trim()
                .parse()
                .map_err(|_| located(format!("bad sleep {millis}")))?;
            Step::Sleep(Duration::from_millis(millis))
        } else {
            return Err(located(format!("cannot parse line {line:?}")));
        };
        if matches!(step, Step::Sleep(_))
            || matches!(&step, Step::Send { pieces, .. } if pieces.iter().any(|p| matches!(p, Piece::Cas(_))))
        {
            case.pipeline = false;
        }
        case.steps.push(step);
    }
    for case in &cases {
        if !case
            .steps
            .iter()
            .any(|step| matches!(step, Step::Send { read: true, .. }))
        {
            return Err(format!(
                "{}:{}: case {} never reads a reply",
                case.file, case.line, case.name
            ));
        }
    }
    Ok(cases)
}

fn load_cases() -> Vec<Case> {
    let dir = differential_dir().join("cases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("read {}: {err}", dir.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "txt"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for path in files {
        let file = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path).expect("read case file");
        cases.extend(parse_cases(&file, &text).unwrap_or_else(|err| panic!("{err}")));
    }
    let mut names = HashMap::new();
    for case in &cases {
        if let Some(previous) = names.insert(case.name.clone(), case.file.clone()) {
            panic!(
                "case {} is defined in {} and {}",
                case.name, previous, case.file
            );
        }
    }
    if let Ok(filter) = std::env::var("TAILTRIM_DIFF_FILTER") {
        cases.retain(|case| case.name.contains(&filter));
    }
    cases
}

/// Longest escaped text kept whole in a transcript; longer text keeps its ends and a
/// 64-bit FNV-1a hash of the raw bytes, so comparison stays exact.
const TRANSCRIPT_LIMIT: usize = 1200;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Escapes bytes for a readable one-line transcript (see [`escape_all`]), shortened past
/// [`TRANSCRIPT_LIMIT`].
fn escape(bytes: &[u8]) -> String {
    let full = escape_all(bytes);
    if full.len() <= TRANSCRIPT_LIMIT {
        return full;
    }
    let head: String = full.chars().take(400).collect();
    let tail: String = {
        let chars: Vec<char> = full.chars().collect();
        chars[chars.len().saturating_sub(400)..].iter().collect()
    };
    format!(
        "{head}...[{} bytes, fnv1a {:016x}]...{tail}",
        bytes.len(),
        fnv1a(bytes)
    )
}

/// Escapes bytes for a readable one-line transcript; long runs of one byte become
/// `{b*N}`.
fn escape_all(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        let run = bytes[index..]
            .iter()
            .take_while(|&&other| other == byte)
            .count();
        let rendered = match byte {
            b'\r' => "\\r".to_string(),
            b'\n' => "\\n".to_string(),
            b'\t' => "\\t".to_string(),
            b'\\' => "\\\\".to_string(),
            b'{' => "\\{".to_string(),
            b'}' => "\\}".to_string(),
            0x20..=0x7e => (byte as char).to_string(),
            other => format!("\\x{other:02x}"),
        };
        if run > 16 {
            let _ = write!(out, "{{{rendered}*{run}}}");
            index += run;
        } else {
            out.push_str(&rendered);
            index += 1;
        }
    }
    out
}

/// Per-connection state of the normaliser: cas values in order of first appearance.
#[derive(Default)]
struct CasOrdinals {
    seen: Vec<String>,
}

impl CasOrdinals {
    fn ordinal(&mut self, raw: &str) -> String {
        let position = match self.seen.iter().position(|seen| seen == raw) {
            Some(position) => position,
            None => {
                self.seen.push(raw.to_string());
                self.seen.len() - 1
            }
        };
        format!("<cas#{}>", position + 1)
    }
}

/// Rounds a positive TTL up to a multiple of 10 s so that a second boundary between
/// store and read does not count as a difference.
fn ttl_bucket(raw: &str) -> String {
    match raw.parse::<i64>() {
        Ok(seconds) if seconds > 0 => format!("~{}", (seconds + 9) / 10 * 10),
        _ => raw.to_string(),
    }
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit())
}

/// Normalises one reply line; returns None to drop it and the length of a data block
/// that follows it, if any.
fn normalise_line(line: &[u8], cas: &mut CasOrdinals) -> (Option<Vec<u8>>, Option<usize>) {
    let Ok(text) = std::str::from_utf8(line) else {
        return (Some(line.to_vec()), None);
    };
    let mut tokens: Vec<String> = text.split(' ').map(str::to_string).collect();
    let mut data = None;
    match tokens[0].as_str() {
        "VALUE" if tokens.len() >= 4 => {
            data = tokens[3].parse().ok();
            if tokens.len() == 5 {
                tokens[4] = cas.ordinal(&tokens[4]);
            }
        }
        "VERSION" if tokens.len() >= 2 => {
            tokens.truncate(1);
            tokens.push("<version>".to_string());
        }
        "STAT" if tokens.len() >= 3 => {
            if !COMPARED_STATS.contains(&tokens[1].as_str()) {
                return (None, None);
            }
            tokens.truncate(2);
            tokens.push("<value>".to_string());
        }
        "ME" => {
            for token in tokens.iter_mut().skip(2) {
                if let Some((name, value)) = token.split_once('=') {
                    let value = match name {
                        // memcached 1.6.18 prints the remaining TTL negated.
                        "exp" if value != "-1" => "<n>".to_string(),
                        "cas" => cas.ordinal(value),
                        "la" | "cls" | "size" | "fetch" => "<n>".to_string(),
                        _ => value.to_string(),
                    };
                    *token = format!("{name}={value}");
                }
            }
        }
        "VA" | "HD" | "EN" | "NF" | "NS" | "EX" | "MN" => {
            let first_flag = if tokens[0] == "VA" {
                data = tokens.get(1).and_then(|size| size.parse().ok());
                2
            } else {
                1
            };
            for token in tokens.iter_mut().skip(first_flag) {
                let (flag, value) = token.split_at(token.len().min(1));
                let value = value.to_string();
                match flag {
                    "c" if is_digits(&value) => *token = format!("c{}", cas.ordinal(&value)),
                    "t" => *token = format!("t{}", ttl_bucket(&value)),
                    "l" if is_digits(&value) => *token = "l<n>".to_string(),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    (Some(tokens.join(" ").into_bytes()), data)
}

fn normalise(reply: &[u8], cas: &mut CasOrdinals) -> Vec<u8> {
    let mut out = Vec::new();
    let mut position = 0;
    while position < reply.len() {
        let rest = &reply[position..];
        let Some(end) = rest.windows(2).position(|pair| pair == b"\r\n") else {
            out.extend_from_slice(rest);
            break;
        };
        position += end + 2;
        let (line, data) = normalise_line(&rest[..end], cas);
        if let Some(line) = line {
            out.extend_from_slice(&line);
            out.extend_from_slice(b"\r\n");
        }
        if let Some(length) = data {
            let take = (length + 2).min(reply.len() - position);
            out.extend_from_slice(&reply[position..position + take]);
            position += take;
        }
    }
    out
}

/// What one read produced.
struct Reply {
    bytes: Vec<u8>,
    closed: bool,
    sentinel_seen: bool,
}

/// Number of `mn` commands in `sent` (the sentinel included): the reply is complete when
/// it holds as many `MN` lines and ends with one.
fn count_mn_commands(sent: &[u8]) -> usize {
    sent.split(|&byte| byte == b'\n')
        .filter(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            line == b"mn" || line.starts_with(b"mn ")
        })
        .count()
}

fn count_mn_replies(reply: &[u8]) -> usize {
    reply
        .split(|&byte| byte == b'\n')
        .filter(|line| *line == b"MN\r")
        .count()
}

fn read_reply(stream: &mut TcpStream, expected_mn: usize, quiet: Duration) -> Reply {
    let started = Instant::now();
    let mut last_data = Instant::now();
    let mut reply = Reply {
        bytes: Vec::new(),
        closed: false,
        sentinel_seen: false,
    };
    let mut chunk = vec![0u8; 1 << 16];
    let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
    loop {
        if reply.bytes.ends_with(SENTINEL_REPLY) && count_mn_replies(&reply.bytes) >= expected_mn {
            reply
                .bytes
                .truncate(reply.bytes.len() - SENTINEL_REPLY.len());
            reply.sentinel_seen = true;
            return reply;
        }
        let patience = if reply.bytes.is_empty() {
            quiet.max(QUIET_WHEN_EMPTY)
        } else {
            quiet
        };
        if last_data.elapsed() > patience || started.elapsed() > READ_LIMIT {
            return reply;
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                reply.closed = true;
                return reply;
            }
            Ok(n) => {
                reply.bytes.extend_from_slice(&chunk[..n]);
                last_data = Instant::now();
            }
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => {
                reply.closed = true;
                return reply;
            }
        }
    }
}

/// Writes everything it can; a peer that closes mid-write is reported by the next read.
fn send(stream: &mut TcpStream, bytes: &[u8]) {
    let _ = stream.write_all(bytes);
}

fn flush_all(addr: SocketAddr) -> Result<(), String> {
    let mut control = TcpStream::connect(addr).map_err(|err| format!("connect: {err}"))?;
    send(&mut control, b"flush_all\r\n");
    let reply = common::read_until(&mut control, b"\r\n", Duration::from_secs(5));
    if reply == b"OK\r\n" {
        Ok(())
    } else {
        Err(format!("flush_all replied {:?}", escape(&reply)))
    }
}

fn record_reply(transcript: &mut String, reply: &Reply, cas: &mut CasOrdinals) -> bool {
    let normalised = normalise(&reply.bytes, cas);
    let _ = write!(transcript, "< {}", escape(&normalised));
    if !reply.sentinel_seen {
        transcript.push_str("  [no reply to sentinel]");
    }
    if reply.closed {
        transcript.push_str("  [closed]");
    }
    transcript.push('\n');
    reply.closed
}

/// How a case's bytes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One write per step, reply read after each `>` step.
    Stepwise,
    /// All bytes of the case in one write, one read.
    Pipelined,
    /// Like [`Mode::Stepwise`], but each step of at most [`SPLIT_MAX`] bytes is written in
    /// pieces (cut between `\r` and `\n` and at a pseudo-random point) with pauses, to
    /// exercise incremental parsing.
    Split,
}

impl Mode {
    fn suffix(self) -> &'static str {
        match self {
            Mode::Stepwise => "",
            Mode::Pipelined => " [pipelined]",
            Mode::Split => " [split]",
        }
    }
}

/// Largest step that [`Mode::Split`] cuts into pieces (memcached's behaviour on lines
/// over 2 KB depends on read boundaries).
const SPLIT_MAX: usize = 1500;

/// Cut points for [`Mode::Split`]: after the first `\r` of a `\r\n`, and one point
/// derived from the case name and step.
fn split_points(bytes: &[u8], seed: u64) -> Vec<usize> {
    if bytes.len() < 2 || bytes.len() > SPLIT_MAX {
        return Vec::new();
    }
    let mut points = Vec::new();
    if let Some(cr) = bytes.windows(2).position(|pair| pair == b"\r\n") {
        points.push(cr + 1);
    }
    points.push(1 + (seed % (bytes.len() as u64 - 1)) as usize);
    points.sort_unstable();
    points.dedup();
    points
}

fn write_step(stream: &mut TcpStream, bytes: &[u8], mode: Mode, seed: u64) {
    if mode != Mode::Split {
        send(stream, bytes);
        return;
    }
    let mut start = 0;
    for point in split_points(bytes, seed) {
        send(stream, &bytes[start..point]);
        start = point;
        std::thread::sleep(Duration::from_millis(5));
    }
    send(stream, &bytes[start..]);
}

/// Runs one case on a fresh connection and returns its normalised transcript.
fn run_case(addr: SocketAddr, case: &Case, mode: Mode) -> String {
    let mut transcript = String::new();
    if let Err(err) = flush_all(addr) {
        let _ = writeln!(transcript, "[control connection failed: {err}]");
    }
    let mut stream = match TcpStream::connect(addr) {
        Ok(stream) => stream,
        Err(err) => return format!("{transcript}[connect failed: {err}]\n"),
    };
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(READ_LIMIT));
    let mut cas = CasOrdinals::default();
    if mode == Mode::Pipelined {
        let mut all = Vec::new();
        for step in &case.steps {
            if let Step::Send { pieces, .. } = step {
                for piece in pieces {
                    if let Piece::Bytes(bytes) = piece {
                        all.extend_from_slice(bytes);
                    }
                }
            }
        }
        let _ = writeln!(transcript, "> [pipelined] {}", escape(&all));
        all.extend_from_slice(SENTINEL);
        send(&mut stream, &all);
        let reply = read_reply(&mut stream, count_mn_commands(&all), quiet_for(all.len()));
        record_reply(&mut transcript, &reply, &mut cas);
        return transcript;
    }
    let mut closed = false;
    let case_seed = fnv1a(case.name.as_bytes());
    for (step_index, step) in case.steps.iter().enumerate() {
        let (pieces, read) = match step {
            Step::Sleep(duration) => {
                std::thread::sleep(*duration);
                continue;
            }
            Step::Send { pieces, read } => (pieces, *read),
        };
        let mut bytes = Vec::new();
        // The transcript shows placeholders, not the server-specific cas values.
        let mut shown = String::new();
        for piece in pieces {
            match piece {
                Piece::Bytes(literal) => {
                    bytes.extend_from_slice(literal);
                    shown.push_str(&escape(literal));
                }
                Piece::Cas(ordinal) => {
                    match cas.seen.get(ordinal - 1) {
                        Some(raw) => bytes.extend_from_slice(raw.as_bytes()),
                        None => bytes.extend_from_slice(b"<no such cas>"),
                    }
                    let _ = write!(shown, "{{cas{ordinal}}}");
                }
            }
        }
        let _ = writeln!(transcript, "{} {shown}", if read { ">" } else { "+" });
        if closed {
            transcript.push_str("  [not sent: connection closed]\n");
            continue;
        }
        write_step(&mut stream, &bytes, mode, case_seed ^ step_index as u64);
        if read {
            send(&mut stream, SENTINEL);
            let reply = read_reply(
                &mut stream,
                count_mn_commands(&bytes) + 1,
                quiet_for(bytes.len()),
            );
            closed = record_reply(&mut transcript, &reply, &mut cas);
        } else {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    transcript
}

/// Transcripts of every case in every mode, keyed by name plus [`Mode::suffix`].
fn run_all(addr: SocketAddr, cases: &[Case]) -> Vec<(String, String)> {
    let mut results = Vec::new();
    for case in cases {
        for mode in [Mode::Stepwise, Mode::Pipelined, Mode::Split] {
            if mode == Mode::Pipelined && !case.pipeline {
                continue;
            }
            results.push((
                format!("{}{}", case.name, mode.suffix()),
                run_case(addr, case, mode),
            ));
        }
    }
    results
}

fn golden_path(file: &str) -> PathBuf {
    differential_dir().join("golden").join(file)
}

fn golden_text(cases: &[Case], file: &str, transcripts: &HashMap<String, String>) -> String {
    let mut text = String::from(
        "# memcached's normalised replies to the cases of the file of the same name in ../cases\n\
         # (written by `TAILTRIM_DIFF_RECORD=1 cargo test -p tailtrim-cli --test differential`).\n",
    );
    for case in cases.iter().filter(|case| case.file == file) {
        for key in [case.name.clone(), format!("{} [pipelined]", case.name)] {
            if let Some(transcript) = transcripts.get(&key) {
                let _ = write!(text, "=== {key}\n{transcript}");
            }
        }
    }
    text
}

#[test]
fn differential_against_memcached() {
    if !require_memcached("differential_against_memcached") {
        return;
    }
    let cases = load_cases();
    assert!(!cases.is_empty(), "no differential cases found");
    let flags = ["-m", "64", "-I", "1m", "-t", "2"];
    let second = match std::env::var("TAILTRIM_DIFF_TARGET").as_deref() {
        Ok("memcached") => Program::Memcached,
        _ => Program::Tailtrim,
    };
    let reference = Server::start(Program::Memcached, &flags);
    let candidate = Server::start(second, &flags);
    let (reference_addr, candidate_addr) = (reference.addr(), candidate.addr());
    let reference_cases = cases.clone();
    let reference_thread = std::thread::spawn(move || run_all(reference_addr, &reference_cases));
    let candidate_results = run_all(candidate_addr, &cases);
    let reference_results = reference_thread.join().expect("reference thread");

    let reference_map: HashMap<String, String> = reference_results.iter().cloned().collect();
    let mut files: Vec<String> = cases.iter().map(|case| case.file.clone()).collect();
    files.dedup();
    let recording = std::env::var("TAILTRIM_DIFF_RECORD").is_ok_and(|value| value == "1");
    let mut golden_drift = Vec::new();
    for file in &files {
        let text = golden_text(&cases, file, &reference_map);
        let path = golden_path(file);
        if recording {
            std::fs::create_dir_all(differential_dir().join("golden")).expect("golden dir");
            std::fs::write(&path, text).expect("write golden file");
        } else if std::env::var("TAILTRIM_DIFF_FILTER").is_err() {
            match std::fs::read_to_string(&path) {
                Ok(stored) if stored == text => {}
                _ => golden_drift.push(file.clone()),
            }
        }
    }
    if !golden_drift.is_empty() {
        eprintln!(
            "note: live memcached replies differ from the golden files for {golden_drift:?} \
             (another memcached version? re-record with TAILTRIM_DIFF_RECORD=1)"
        );
    }

    let case_of: HashMap<&str, &Case> = cases
        .iter()
        .map(|case| (case.name.as_str(), case))
        .collect();
    let mut report = String::new();
    let mut differing = Vec::new();
    for ((name, reference), (_, candidate)) in reference_results.iter().zip(&candidate_results) {
        if reference == candidate {
            continue;
        }
        let base = name
            .trim_end_matches(Mode::Pipelined.suffix())
            .trim_end_matches(Mode::Split.suffix());
        let location = case_of
            .get(base)
            .map(|case| format!("{}:{}", case.file, case.line))
            .unwrap_or_default();
        let _ = write!(
            report,
            "--- {name} ({location})\n[memcached]\n{reference}[{second:?}]\n{candidate}\n"
        );
        differing.push(name.clone());
    }
    let total = reference_results.len();
    let report_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential-report.txt");
    let _ = std::fs::write(&report_path, &report);
    eprintln!(
        "differential: {} cases ({} runs: step-wise, pipelined, split writes), {} runs differ; report: {}",
        cases.len(),
        total,
        differing.len(),
        report_path.display()
    );
    if !differing.is_empty() {
        let shown: String = report
            .split("\n--- ")
            .take(40)
            .collect::<Vec<_>>()
            .join("\n--- ");
        eprintln!("{shown}");
        panic!(
            "{} of {} differential runs differ from memcached: {:?}",
            differing.len(),
            total,
            differing
        );
    }
}

#[test]
fn case_files_parse_and_cover_every_command() {
    let cases = load_cases();
    if std::env::var("TAILTRIM_DIFF_FILTER").is_ok() {
        return;
    }
    let mut sent = Vec::new();
    for case in &cases {
        for step in &case.steps {
            if let Step::Send { pieces, .. } = step {
                for piece in pieces {
                    if let Piece::Bytes(bytes) = piece {
                        sent.extend_from_slice(bytes);
                    }
                }
            }
        }
        sent.extend_from_slice(b"\r\n");
    }
    let text = String::from_utf8_lossy(&sent);
    let commands = [
        "get",
        "gets",
        "gat",
        "gats",
        "set",
        "add",
        "replace",
        "append",
        "prepend",
        "cas",
        "incr",
        "decr",
        "delete",
        "touch",
        "flush_all",
        "version",
        "verbosity",
        "quit",
        "stats",
        "mg",
        "ms",
        "md",
        "ma",
        "mn",
        "me",
    ];
    for command in commands {
        let at_line_start = text
            .split("\r\n")
            .filter(|line| line.split(' ').next() == Some(command))
            .count();
        assert!(
            at_line_start >= 2,
            "command {command} appears in only {at_line_start} case lines"
        );
    }
    assert!(
        cases.len() >= 300,
        "only {} differential cases; the suite promises hundreds",
        cases.len()
    );
}

#[test]
fn payload_escapes_and_placeholders() {
    let pieces = parse_payload(r"a\r\n\x00\s{ab*3}\{{cas2}z").expect("parses");
    match pieces.as_slice() {
        [Piece::Bytes(head), Piece::Cas(2), Piece::Bytes(tail)] => {
            assert_eq!(head, b"a\r\n\0 ababab{");
            assert_eq!(tail, b"z");
        }
        other => panic!("unexpected pieces {other:?}"),
    }
    assert!(parse_payload(r"\q").is_err());
    assert!(parse_payload("{oops").is_err());
    assert_eq!(escape(b"x\r\n\x01"), r"x\r\n\x01");
    assert_eq!(escape(&[b'a'; 20]), "{a*20}");
}

#[test]
fn normaliser_maps_cas_and_versions() {
    let mut cas = CasOrdinals::default();
    let reply = b"VALUE k 0 5 77\r\nHD c7\r\nEND\r\nVA 2 c77 t95\r\nc9\r\nVERSION 1.6.18\r\nSTAT pid 5\r\nSTAT rusage_user 0.1\r\n";
    let normalised = normalise(reply, &mut cas);
    assert_eq!(
        String::from_utf8_lossy(&normalised),
        "VALUE k 0 5 <cas#1>\r\nHD c7\r\nEND\r\nVA 2 c<cas#1> t~100\r\nc9\r\nVERSION <version>\r\nSTAT pid <value>\r\n"
    );
    assert_eq!(cas.seen, vec!["77".to_string()]);
}
