//! memcached's ASCII authentication (`-Y FILE`), as pure data transformations: the auth
//! file's `user:password` lines ([`Credentials`]) and the exchange an unauthenticated
//! connection goes through ([`AuthState`]). The server and the proxy both read their
//! unauthenticated connections with it; reading the file from disk is theirs.
//!
//! A connection starts unauthenticated; until it authenticates, it is read with the rules of
//! memcached 1.6 (`try_read_command_asciiauth`), not with the command parser:
//!
//! ```text
//!   line "set <key> <flags> <exptime> <bytes>"   any other line ─► CLIENT_ERROR unauthenticated
//!        │ (key, flags, exptime ignored)         no newline in 2048 bytes ─► close
//!        ▼
//!   <bytes> + 2 bytes of data ── not ending in \r\n ─► CLIENT_ERROR bad command line termination
//!        │                       fewer than 2 words ─► CLIENT_ERROR bad authentication token format
//!        ▼                       more than the 16 KiB read buffer ─► close
//!   "user pass" in the file? ── yes ─► STORED (authenticated from now on)
//!                               no  ─► CLIENT_ERROR authentication failure
//! ```
//!
//! Nothing closes the connection but the two size bounds; a client may try again after a
//! failure. Passwords are compared in constant time.

use subtle::ConstantTimeEq;

/// An unauthenticated line without a newline after this many bytes closes
/// the connection (memcached's limit).
pub const MAX_UNAUTHENTICATED_LINE: usize = 2048;
/// Unauthenticated input waiting for the rest of an authentication block
/// closes the connection once it reaches this many bytes (memcached's read
/// buffer: a block of more than 16382 data bytes never fits).
pub const UNAUTHENTICATED_BUFFER: usize = 16 * 1024;

/// The users of an auth file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Credentials {
    /// Parses the file's contents: one `user:password` per line; the user
    /// ends at the first `:`, the password at the end of the line (a `\r`
    /// before the newline is not part of it). A line without `:` (an empty
    /// one included) makes the whole file malformed; the error names it.
    pub fn parse(text: &[u8]) -> Result<Credentials, String> {
        let mut users = Vec::new();
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        if body.is_empty() && text.is_empty() {
            return Ok(Credentials { users });
        }
        for (number, line) in body.split(|&byte| byte == b'\n').enumerate() {
            let line = until_nul(line);
            let Some(colon) = line.iter().position(|&byte| byte == b':') else {
                return Err(format!(
                    "line {} is malformed. Should be 'user:password'",
                    number + 1
                ));
            };
            let password = &line[colon + 1..];
            let end = password
                .iter()
                .position(|&byte| byte == b'\r')
                .unwrap_or(password.len());
            users.push((line[..colon].to_vec(), password[..end].to_vec()));
        }
        Ok(Credentials { users })
    }

    /// Users in the file.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// The file has no users (nobody can authenticate).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// `user` with `password` is in the file. Every entry is compared, each
    /// in constant time for equal lengths.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let mut found = false;
        for (known_user, known_password) in &self.users {
            let user_matches = known_user.as_slice().ct_eq(user);
            let password_matches = known_password.as_slice().ct_eq(password);
            found |= bool::from(user_matches & password_matches);
        }
        found
    }
}

/// What an unauthenticated exchange came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Anything but an authentication `set` line.
    Unauthenticated,
    /// The data block did not end in `\r\n`.
    BadTermination,
    /// The data block held fewer than two words.
    BadTokenFormat,
    /// No such user with that password.
    Failure,
    /// Authenticated.
    Success,
}

impl Outcome {
    /// memcached's reply line.
    pub fn reply(self) -> &'static [u8] {
        match self {
            Outcome::Unauthenticated => b"CLIENT_ERROR unauthenticated\r\n",
            Outcome::BadTermination => b"CLIENT_ERROR bad command line termination\r\n",
            Outcome::BadTokenFormat => b"CLIENT_ERROR bad authentication token format\r\n",
            Outcome::Failure => b"CLIENT_ERROR authentication failure\r\n",
            Outcome::Success => b"STORED\r\n",
        }
    }

    /// It counts in `auth_cmds` (a credential was checked).
    pub fn is_attempt(self) -> bool {
        matches!(self, Outcome::Success | Outcome::Failure)
    }
}

/// What [`AuthState::step`] made of the buffered input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Wait for more input.
    Incomplete,
    /// Close the connection (input past the size bounds).
    Close,
    /// An authentication `set` line was taken (`usize` bytes); its data
    /// block follows.
    Consumed(usize),
    /// `consumed` bytes answered with `outcome`'s reply.
    Answered {
        /// Input bytes the exchange took.
        consumed: usize,
        /// What to answer.
        outcome: Outcome,
    },
}

/// A connection's authentication state.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AuthState {
    /// The connection authenticated: it is served like any other.
    pub authenticated: bool,
    /// Bytes of the data block (with its `\r\n`) the last `set` line announced.
    awaiting: Option<u64>,
}

impl AuthState {
    /// Reads the next unauthenticated exchange at the front of `input`;
    /// `check` says whether a user and password are known. The caller
    /// drops the bytes a step consumed and calls again.
    pub fn step(&mut self, input: &[u8], check: impl FnOnce(&[u8], &[u8]) -> bool) -> Step {
        match self.awaiting {
            None => self.command_line(input),
            Some(needed) => {
                // A block larger than the read buffer never fits in it.
                if needed > UNAUTHENTICATED_BUFFER as u64 {
                    return if input.len() >= UNAUTHENTICATED_BUFFER {
                        Step::Close
                    } else {
                        Step::Incomplete
                    };
                }
                if (input.len() as u64) < needed {
                    return Step::Incomplete;
                }
                self.awaiting = None;
                let consumed = needed as usize;
                let outcome = self.data_block(&input[..consumed], check);
                Step::Answered { consumed, outcome }
            }
        }
    }

    fn command_line(&mut self, input: &[u8]) -> Step {
        // No authentication line is this short.
        if input.len() < 2 {
            return Step::Incomplete;
        }
        let window = &input[..input.len().min(UNAUTHENTICATED_BUFFER)];
        let Some(newline) = window.iter().position(|&byte| byte == b'\n') else {
            return if input.len() > MAX_UNAUTHENTICATED_LINE {
                Step::Close
            } else {
                Step::Incomplete
            };
        };
        let consumed = newline + 1;
        let mut words = words(until_nul(&input[..newline]));
        let is_set = words.next() == Some(b"set".as_slice());
        // Key, flags and exptime are ignored; the byte count must parse.
        let size = words.nth(3).and_then(parse_unsigned);
        match (is_set, size) {
            (true, Some(size)) => {
                self.awaiting = Some(u64::from(size) + 2);
                Step::Consumed(consumed)
            }
            _ => Step::Answered {
                consumed,
                outcome: Outcome::Unauthenticated,
            },
        }
    }

    fn data_block(&mut self, block: &[u8], check: impl FnOnce(&[u8], &[u8]) -> bool) -> Outcome {
        let Some(payload) = block.strip_suffix(b"\r\n") else {
            return Outcome::BadTermination;
        };
        let mut words = words(until_nul(payload));
        let (Some(user), Some(password)) = (words.next(), words.next()) else {
            return Outcome::BadTokenFormat;
        };
        if check(user, password) {
            self.authenticated = true;
            Outcome::Success
        } else {
            Outcome::Failure
        }
    }
}

/// The request a client sends to authenticate as `user` with `password`: a `set` whose data
/// is `user password` (memcached ignores the key, flags and expiry). The server answers
/// `STORED` when the pair is in its file. Neither may hold a space, a `\r`, a `\n` or a NUL
/// byte: the server would split or cut them ([`login_pair_is_valid`]).
pub fn login_request(user: &[u8], password: &[u8]) -> Vec<u8> {
    let length = user.len() + 1 + password.len();
    let mut request = format!("set auth 0 0 {length}\r\n").into_bytes();
    request.extend_from_slice(user);
    request.push(b' ');
    request.extend_from_slice(password);
    request.extend_from_slice(b"\r\n");
    request
}

/// `user` and `password` can be sent by [`login_request`] and read back whole by a server:
/// neither is empty (a server would see one word) nor holds a space, a `\r`, a `\n` or a NUL byte.
pub fn login_pair_is_valid(user: &[u8], password: &[u8]) -> bool {
    let clean = |word: &[u8]| {
        !word
            .iter()
            .any(|byte| matches!(byte, b' ' | b'\r' | b'\n' | 0))
    };
    !user.is_empty() && !password.is_empty() && clean(user) && clean(password)
}

/// The words of a line as memcached splits them: on spaces only (a tab or a
/// `\r` is part of a word).
fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&byte| byte == b' ')
        .filter(|word| !word.is_empty())
}

/// memcached reads its lines as C strings: a NUL byte ends them.
fn until_nul(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(bytes.len());
    &bytes[..end]
}

/// C's `isspace` in the C locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A byte count as memcached's `safe_strtoul` reads it: leading white
/// space and a sign allowed, white space or nothing after the digits, no
/// negative number, a value past 64 bits refused and one past 32 bits cut
/// to its low 32 bits.
fn parse_unsigned(word: &[u8]) -> Option<u32> {
    let mut rest = word;
    while let Some((&first, tail)) = rest.split_first() {
        if !is_c_space(first) {
            break;
        }
        rest = tail;
    }
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut value: u64 = 0;
    for &digit in &rest[..digits] {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    if rest.get(digits).is_some_and(|&byte| !is_c_space(byte)) {
        return None;
    }
    let value = if negative {
        value.wrapping_neg()
    } else {
        value
    };
    if negative && (value as i64) < 0 {
        return None;
    }
    Some(value as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(text: &str) -> Credentials {
        Credentials::parse(text.as_bytes()).expect("well-formed")
    }

    /// Runs steps over `input` as the runtime does; returns the replies and
    /// whether the connection was closed.
    fn exchange(state: &mut AuthState, users: &Credentials, input: &[u8]) -> (Vec<u8>, bool) {
        let mut input = input.to_vec();
        let mut replies = Vec::new();
        while !state.authenticated {
            match state.step(&input, |user, password| users.check(user, password)) {
                Step::Incomplete => break,
                Step::Close => return (replies, true),
                Step::Consumed(n) => {
                    input.drain(..n);
                }
                Step::Answered { consumed, outcome } => {
                    input.drain(..consumed);
                    replies.extend_from_slice(outcome.reply());
                }
            }
        }
        (replies, false)
    }

    #[test]
    fn the_file_is_user_colon_password_lines() {
        let users = credentials("alice:secret\r\nbob:a:b\ncarol:\n");
        assert_eq!(users.len(), 3);
        assert!(users.check(b"alice", b"secret"));
        assert!(users.check(b"bob", b"a:b"));
        assert!(users.check(b"carol", b""));
        assert!(!users.check(b"alice", b"secret\r"));
        assert!(!users.check(b"alice", b"secre"));
        assert!(!users.check(b"bob", b"secret"));
        assert!(credentials("").is_empty());
        assert!(credentials("alice:secret").check(b"alice", b"secret"));
    }

    #[test]
    fn a_line_without_a_colon_makes_the_file_malformed() {
        for text in ["alice:secret\nbroken\n", "\n", "alice:x\n\nbob:y\n"] {
            assert!(Credentials::parse(text.as_bytes()).is_err(), "{text:?}");
        }
    }

    #[test]
    fn byte_counts_read_like_safe_strtoul() {
        assert_eq!(parse_unsigned(b"12"), Some(12));
        assert_eq!(parse_unsigned(b"12\r"), Some(12));
        assert_eq!(parse_unsigned(b"+12"), Some(12));
        assert_eq!(parse_unsigned(b"\t12"), Some(12));
        assert_eq!(parse_unsigned(b"-0"), Some(0));
        assert_eq!(parse_unsigned(b"4294967308"), Some(12));
        assert_eq!(parse_unsigned(b"-1"), None);
        assert_eq!(parse_unsigned(b"12x"), None);
        assert_eq!(parse_unsigned(b"\r"), None);
        assert_eq!(parse_unsigned(b"99999999999999999999"), None);
    }

    #[test]
    fn every_other_line_is_unauthenticated_and_a_good_set_authenticates() {
        let users = credentials("alice:secret\n");
        let mut state = AuthState::default();
        let (replies, closed) = exchange(
            &mut state,
            &users,
            b"get foo\r\nset foo 0 0\r\nadd a 0 0 12\r\nalice secret\r\n",
        );
        assert!(!closed);
        assert_eq!(replies, b"CLIENT_ERROR unauthenticated\r\n".repeat(4));
        assert!(!state.authenticated);
        let (replies, _) = exchange(
            &mut state,
            &users,
            b"set k 0 0 11\r\nalice wrong\r\nset k 0 0 12 noreply\r\nalice secret\r\n",
        );
        assert_eq!(
            replies,
            b"CLIENT_ERROR authentication failure\r\nSTORED\r\n".as_slice()
        );
        assert!(state.authenticated);
    }

    #[test]
    fn malformed_blocks_get_their_own_errors() {
        let users = credentials("alice:secret\n");
        let cases: [(&[u8], &[u8]); 4] = [
            (
                b"set k 0 0 2\r\nhi\r\n",
                b"CLIENT_ERROR bad authentication token format\r\n",
            ),
            (
                b"set k 0 0 0\r\nxy",
                b"CLIENT_ERROR bad command line termination\r\n",
            ),
            (
                b"set k 0 0 12\nalice secret\n\r\n",
                b"CLIENT_ERROR bad command line termination\r\n",
            ),
            (
                b"set k 0 0 12\r\nalice\tsecret\r\n",
                b"CLIENT_ERROR bad authentication token format\r\n",
            ),
        ];
        for (input, expected) in cases {
            let mut state = AuthState::default();
            let (replies, closed) = exchange(&mut state, &users, input);
            assert!(!closed);
            assert!(replies.starts_with(expected), "{input:?}: {replies:?}");
            assert!(!state.authenticated);
        }
    }

    #[test]
    fn a_login_request_authenticates_exactly_its_pair() {
        let users = credentials("alice:secret\n");
        let mut state = AuthState::default();
        let (replies, _) = exchange(&mut state, &users, &login_request(b"alice", b"secret"));
        assert_eq!(replies, b"STORED\r\n");
        assert!(state.authenticated);
        let mut state = AuthState::default();
        let (replies, _) = exchange(&mut state, &users, &login_request(b"alice", b"secrets"));
        assert_eq!(replies, b"CLIENT_ERROR authentication failure\r\n");
        assert!(login_pair_is_valid(b"alice", b"a:b"));
        for (user, password) in [
            ("", "x"),
            ("a b", "x"),
            ("a", "x y"),
            ("a", "x\r"),
            ("a", ""),
        ] {
            assert!(
                !login_pair_is_valid(user.as_bytes(), password.as_bytes()),
                "{user:?} {password:?}"
            );
        }
    }

    #[test]
    fn oversized_input_closes() {
        let users = credentials("alice:secret\n");
        let mut state = AuthState::default();
        let (_, closed) = exchange(&mut state, &users, &[b'x'; MAX_UNAUTHENTICATED_LINE]);
        assert!(!closed, "2048 bytes without a newline still wait");
        let (_, closed) = exchange(&mut state, &users, &[b'x'; MAX_UNAUTHENTICATED_LINE + 1]);
        assert!(closed);
        let mut block = b"set k 0 0 16383\r\nalice secret".to_vec();
        block.resize(17 + UNAUTHENTICATED_BUFFER, b' ');
        let (_, closed) = exchange(&mut AuthState::default(), &users, &block);
        assert!(closed);
        let mut block = b"set k 0 0 16382\r\nalice secret".to_vec();
        block.resize(17 + 16382, b' ');
        block.extend_from_slice(b"\r\n");
        let mut state = AuthState::default();
        let (replies, closed) = exchange(&mut state, &users, &block);
        assert!(!closed);
        assert_eq!(replies, b"STORED\r\n");
    }
}
