//! memcached's ASCII authentication exchange (`tailtrim_proto::auth`), as the server and the
//! proxy run it on a connection that has not logged in: arbitrary bytes, arriving in
//! arbitrary pieces (the first byte sets the piece size), as the first input of a connection.
//! Nothing panics, every step makes progress, what waits stays bounded, and the connection is
//! authenticated only after a `set` whose block carried a user and password of the file; with
//! an empty file it never is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailtrim_proto::auth::{AuthState, Credentials, Outcome, Step, UNAUTHENTICATED_BUFFER};

/// Feeds `input` in pieces of `piece` bytes through the state machine as a connection's
/// reader does; returns the state and whether the connection was closed.
fn run(input: &[u8], piece: usize, users: &Credentials) -> (AuthState, bool) {
    let mut state = AuthState::default();
    let mut buffered: Vec<u8> = Vec::new();
    for chunk in input.chunks(piece.max(1)) {
        buffered.extend_from_slice(chunk);
        while !state.authenticated {
            let mut accepted = None;
            let step = state.step(&buffered, |user, password| {
                let known = users.check(user, password);
                if known {
                    accepted = Some((user.to_vec(), password.to_vec()));
                }
                known
            });
            match step {
                Step::Incomplete => {
                    // What waits is bounded: a line by 2048 bytes, a block by the read buffer.
                    assert!(buffered.len() <= UNAUTHENTICATED_BUFFER + piece.max(1));
                    break;
                }
                Step::Close => return (state, true),
                Step::Consumed(taken) => {
                    assert!(taken > 0 && taken <= buffered.len());
                    buffered.drain(..taken);
                }
                Step::Answered { consumed, outcome } => {
                    assert!(consumed > 0 && consumed <= buffered.len());
                    buffered.drain(..consumed);
                    assert_eq!(outcome == Outcome::Success, state.authenticated);
                    if state.authenticated {
                        let (user, password) = accepted.take().expect("a checked credential");
                        assert_eq!((user.as_slice(), password.as_slice()), (&b"alice"[..], &b"secret"[..]));
                    } else {
                        assert!(accepted.is_none());
                    }
                }
            }
        }
        if state.authenticated {
            break;
        }
    }
    (state, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&piece, input)) = data.split_first() else {
        return;
    };
    let users = Credentials::parse(b"alice:secret\n").expect("a valid file");
    let (state, closed) = run(input, usize::from(piece), &users);
    // How the input was cut into reads changes nothing, unless a size bound closed one run
    // (a line or block that fits in one read may outgrow the bound across several).
    let (whole, closed_whole) = run(input, input.len().max(1), &users);
    if !closed && !closed_whole {
        assert_eq!(state.authenticated, whole.authenticated);
    }
    // Nobody logs in to an empty file.
    let (nobody, _) = run(input, usize::from(piece), &Credentials::default());
    assert!(!nobody.authenticated);
});
