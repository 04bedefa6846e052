//! Byte-for-byte comparison of one exchange sent to memcached (the oracle) and to a subject
//! (`tailtrim serve`, or `tailtrim proxy`), step by step, each on its own fresh connection.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::drain;

/// What a step got back.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    /// The bytes received, as text.
    pub text: String,
    /// The peer closed the connection.
    pub closed: bool,
}

/// Reads the subject's reply to a step that memcached answered with `expected`: as many bytes
/// as memcached sent (or the close), then anything extra that arrives within `quiet`.
pub fn read_like(
    stream: &mut TcpStream,
    expected: &Reply,
    quiet: Duration,
    limit: Duration,
) -> Reply {
    let deadline = Instant::now() + limit;
    let mut bytes = Vec::new();
    let mut closed = false;
    let mut chunk = [0u8; 65536];
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    while bytes.len() < expected.text.len() && Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(err)
                if matches!(
                    err.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    if !closed {
        let wait = if expected.closed { limit } else { quiet };
        let rest = drain(stream, wait, limit);
        bytes.extend_from_slice(&rest.bytes);
        closed = rest.closed;
    }
    Reply {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        closed,
    }
}

/// Sends every step to `oracle` (memcached) and to `subject` (called `subject_name` in the
/// messages) and returns the mismatches; stops at the first close.
pub fn compare(
    mut oracle: TcpStream,
    mut subject: TcpStream,
    subject_name: &str,
    name: &str,
    steps: &[&[u8]],
    quiet: Duration,
    limit: Duration,
) -> Vec<String> {
    let mut mismatches = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let sent_to_oracle = oracle.write_all(step).is_ok();
        let sent_to_subject = subject.write_all(step).is_ok();
        let drained = drain(&mut oracle, quiet, limit);
        let expected = Reply {
            text: String::from_utf8_lossy(&drained.bytes).into_owned(),
            closed: drained.closed || !sent_to_oracle,
        };
        let mut got = read_like(&mut subject, &expected, quiet, limit);
        got.closed |= !sent_to_subject;
        if got != expected {
            let shown = String::from_utf8_lossy(&step[..step.len().min(60)]).into_owned();
            mismatches.push(format!(
                "{name} step {index} {shown:?}: memcached {expected:?}, {subject_name} {got:?}"
            ));
        }
        if expected.closed || got.closed {
            break;
        }
    }
    mismatches
}

/// memcached's ASCII authentication request: a `set` whose data is `user password`.
pub fn auth_block(user: &str, password: &str) -> Vec<u8> {
    let data = format!("{user} {password}");
    format!("set auth 0 0 {}\r\n{data}\r\n", data.len()).into_bytes()
}
