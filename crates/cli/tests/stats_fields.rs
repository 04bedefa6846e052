//! `stats`, `stats settings`, `stats items`, `stats slabs` and `stats conns` against
//! Debian's memcached 1.6.18: the same traffic goes to both, then every field name memcached
//! reports must be in tailtrim's reply too (per-class and per-connection prefixes aside), and
//! the counters whose values the traffic decides must be equal, before and after
//! `stats reset`.
//!
//! Both run with `-o no_lru_crawler,no_lru_maintainer` so that no background thread removes
//! an expired item before the lookup the test counts. The traffic never stores into a size
//! class that holds a dead item (memcached reuses one found at the class's tail when it
//! allocates, tailtrim only when memory is short), so `reclaimed` stays 0 on both.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{read_until, require_memcached, Program, Server};

/// Flags of both servers.
const FLAGS: &[&str] = &[
    "-m",
    "64",
    "-t",
    "2",
    "-o",
    "no_lru_crawler,no_lru_maintainer",
];
/// The `stats` groups compared.
const GROUPS: &[&str] = &["", "settings", "items", "slabs", "conns"];
/// Value sizes stored, three keys each: five of memcached's size classes.
const VALUE_SIZES: &[usize] = &[10, 100, 1000, 10_000, 100_000];

/// General counters the traffic decides (on both servers).
const EQUAL_GENERAL: &[&str] = &[
    "curr_connections",
    "total_connections",
    "rejected_connections",
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "cmd_meta",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "store_too_large",
    "store_no_memory",
    "auth_cmds",
    "auth_errors",
    "bytes_read",
    "limit_maxbytes",
    "accepting_conns",
    "listen_disabled_num",
    "threads",
    "conn_yields",
    "bytes",
    "curr_items",
    "total_items",
    "expired_unfetched",
    "evicted_unfetched",
    "evictions",
    "reclaimed",
];

/// Per-class fields the traffic decides, by group.
const EQUAL_ITEMS: &[&str] = &[
    "number",
    "mem_requested",
    "evicted",
    "reclaimed",
    "outofmemory",
];
const EQUAL_SLABS: &[&str] = &[
    "chunk_size",
    "used_chunks",
    "get_hits",
    "cmd_set",
    "delete_hits",
    "incr_hits",
    "decr_hits",
    "cas_hits",
    "cas_badval",
    "touch_hits",
];

/// One connection that sends a request followed by `mn` and reads up to `MN`, so every
/// reply is read whole whatever its shape.
struct Client {
    stream: TcpStream,
}

impl Client {
    fn new(server: &Server) -> Client {
        Client {
            stream: server.connect(),
        }
    }

    fn send(&mut self, request: &[u8]) -> String {
        let mut bytes = request.to_vec();
        bytes.extend_from_slice(b"mn\r\n");
        self.stream.write_all(&bytes).expect("send request");
        let reply = read_until(&mut self.stream, b"MN\r\n", Duration::from_secs(20));
        assert!(
            reply.ends_with(b"MN\r\n"),
            "no complete reply to {:?}: {:?}",
            String::from_utf8_lossy(&request[..request.len().min(80)]),
            String::from_utf8_lossy(&reply)
        );
        String::from_utf8_lossy(&reply[..reply.len() - 4]).into_owned()
    }

    fn set(&mut self, key: &str, exptime: i64, value_len: usize) -> String {
        let mut request = format!("set {key} 0 {exptime} {value_len}\r\n").into_bytes();
        request.extend(std::iter::repeat_n(b'v', value_len));
        request.extend_from_slice(b"\r\n");
        self.send(&request)
    }

    /// `stats <group>` as (name, value) pairs in reply order.
    fn stats(&mut self, group: &str) -> Vec<(String, String)> {
        let command = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        self.stream
            .write_all(command.as_bytes())
            .expect("send stats");
        let reply = read_until(&mut self.stream, b"END\r\n", Duration::from_secs(20));
        let text = String::from_utf8_lossy(&reply);
        assert!(text.ends_with("END\r\n"), "stats {group}: {text:?}");
        text.lines()
            .filter_map(|line| line.strip_prefix("STAT "))
            .filter_map(|rest| {
                let (name, value) = rest.split_once(' ')?;
                Some((name.to_string(), value.to_string()))
            })
            .collect()
    }
}

/// The traffic: stores of several sizes, hits and misses of every lookup command, an
/// expired item read and deleted, stores over `-I`, incr/decr/cas/touch hits and misses, meta
/// commands, then `flush_all` and reads of flushed items (no store after it).
fn drive(client: &mut Client) {
    for &size in VALUE_SIZES {
        for i in 0..3 {
            assert_eq!(client.set(&format!("k{size}_{i}"), 0, size), "STORED\r\n");
        }
    }
    client.send(b"get k10_0 k100_1 nope\r\n");
    // Dead at once: read and deleted before any other store reaches their class.
    assert_eq!(client.set("gone", -1, 3), "STORED\r\n");
    assert_eq!(client.send(b"get gone\r\n"), "END\r\n");
    assert_eq!(client.set("gone2", -1, 3), "STORED\r\n");
    assert_eq!(client.send(b"delete gone2\r\n"), "NOT_FOUND\r\n");
    let too_large = 2 * 1024 * 1024;
    assert!(client.set("big", 0, too_large).starts_with("SERVER_ERROR"));
    let mut ms = format!("ms bigm {too_large} T0\r\n").into_bytes();
    ms.extend(std::iter::repeat_n(b'v', too_large));
    ms.extend_from_slice(b"\r\n");
    assert!(client.send(&ms).starts_with("SERVER_ERROR"));
    client.send(b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr nope 1\r\ndecr nope 1\r\n");
    client.send(b"incr n 123456789\r\n");
    let gets = client.send(b"gets k10_1\r\n");
    let cas = gets
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(4))
        .expect("gets reply carries a cas unique")
        .to_string();
    assert_eq!(
        client.send(format!("cas k10_1 0 0 1 {cas}\r\nz\r\n").as_bytes()),
        "STORED\r\n"
    );
    assert_eq!(client.send(b"cas k10_1 0 0 1 1\r\nz\r\n"), "EXISTS\r\n");
    assert_eq!(client.send(b"cas nope 0 0 1 1\r\nz\r\n"), "NOT_FOUND\r\n");
    client.send(b"touch k10_2 100\r\ntouch nope 100\r\ngat 100 k100_2 nope\r\n");
    client.send(b"mg k1000_1 v\r\nmg nope v\r\nmg k1000_2 v T30\r\nmg nope2 v T30\r\n");
    client.send(b"ms m 1\r\na\r\nmd m\r\nmd nope\r\nma n\r\nma nope\r\nme k10_0\r\nme nope\r\n");
    client.send(b"delete k100_0\r\ndelete nope\r\n");
    client.send(b"flush_all\r\n");
    client.send(b"get k10_0 k1000_0\r\nmg k10000_0 v\r\n");
}

/// A field name without its class or connection prefix (`items:3:number` → `items:number`,
/// `12:chunk_size` → `chunk_size`).
fn generic(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("items:") {
        if let Some((_, field)) = rest.split_once(':') {
            return format!("items:{field}");
        }
    }
    match name.split_once(':') {
        Some((prefix, field)) if prefix.bytes().all(|b| b.is_ascii_digit()) => field.to_string(),
        _ => name.to_string(),
    }
}

/// Every group of both servers after the same traffic, then after `stats reset`.
struct Observed {
    groups: BTreeMap<&'static str, Vec<(String, String)>>,
    after_reset: BTreeMap<String, String>,
}

fn observe(program: Program) -> Observed {
    let server = Server::start(program, FLAGS);
    let mut client = Client::new(&server);
    drive(&mut client);
    let groups = GROUPS
        .iter()
        .map(|group| (*group, client.stats(group)))
        .collect();
    assert_eq!(client.send(b"stats reset\r\n"), "RESET\r\n");
    let after_reset = client.stats("").into_iter().collect();
    Observed {
        groups,
        after_reset,
    }
}

fn value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(field, _)| field == name)
        .map(|(_, value)| value.as_str())
}

#[test]
fn stats_groups_carry_memcached_fields_and_counts() {
    if !require_memcached("stats_groups_carry_memcached_fields_and_counts") {
        return;
    }
    let memcached = observe(Program::Memcached);
    let tailtrim = observe(Program::Tailtrim);
    let mut problems = Vec::new();
    for group in GROUPS {
        let theirs = &memcached.groups[group];
        let ours = &tailtrim.groups[group];
        let our_names: BTreeSet<String> = ours.iter().map(|(name, _)| generic(name)).collect();
        let missing: BTreeSet<String> = theirs
            .iter()
            .map(|(name, _)| generic(name))
            .filter(|name| !our_names.contains(name))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("stats {group}: missing {missing:?}"));
        }
    }
    let general = (&memcached.groups[""], &tailtrim.groups[""]);
    for name in EQUAL_GENERAL {
        let (theirs, ours) = (value(general.0, name), value(general.1, name));
        if theirs != ours {
            problems.push(format!(
                "stats {name}: memcached {theirs:?}, tailtrim {ours:?}"
            ));
        }
    }
    for (group, fields) in [("items", EQUAL_ITEMS), ("slabs", EQUAL_SLABS)] {
        let theirs = &memcached.groups[group];
        let ours = &tailtrim.groups[group];
        for (name, their_value) in theirs {
            let field = generic(name);
            let field = field.strip_prefix("items:").unwrap_or(&field);
            if !fields.contains(&field) {
                continue;
            }
            let our_value = value(ours, name);
            if our_value != Some(their_value.as_str()) {
                problems.push(format!(
                    "stats {group} {name}: memcached {their_value}, tailtrim {our_value:?}"
                ));
            }
        }
    }
    // `stats reset` clears the same counters: every compared counter agrees again.
    for name in EQUAL_GENERAL {
        let theirs = memcached.after_reset.get(*name);
        let ours = tailtrim.after_reset.get(*name);
        if theirs != ours {
            problems.push(format!(
                "after stats reset, {name}: memcached {theirs:?}, tailtrim {ours:?}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "tailtrim's stats differ from memcached 1.6.18's:\n{}",
        problems.join("\n")
    );
}

/// `stats` of a fresh connection as a map, and one counter of it as a number.
fn counter(server: &Server, name: &str) -> u64 {
    let stats = server.stats();
    stats
        .get(name)
        .unwrap_or_else(|| panic!("stats has no {name}"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number: {:?}", stats.get(name)))
}

/// Runs `request` on `client` and returns by how much each of `names` moved.
fn deltas(server: &Server, client: &mut Client, request: &[u8], names: &[&str]) -> Vec<u64> {
    let before: Vec<u64> = names.iter().map(|name| counter(server, name)).collect();
    client.send(request);
    names
        .iter()
        .zip(before)
        .map(|(name, before)| counter(server, name) - before)
        .collect()
}

#[test]
fn each_new_counter_moves() {
    let server = Server::start(
        Program::Tailtrim,
        &["-m", "2", "-M", "-o", "no_lru_crawler"],
    );
    let mut client = Client::new(&server);
    client.set("gone", -1, 1);
    assert_eq!(
        deltas(
            &server,
            &mut client,
            b"get gone\r\n",
            &["get_expired", "get_misses"]
        ),
        [1, 1]
    );
    client.set("kept", 0, 1);
    client.send(b"flush_all\r\n");
    assert_eq!(
        deltas(
            &server,
            &mut client,
            b"mg kept v\r\n",
            &["get_flushed", "get_misses"]
        ),
        [1, 1]
    );
    let mut big = b"set big 0 0 2000000\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'v', 2_000_000));
    big.extend_from_slice(b"\r\n");
    assert_eq!(
        deltas(&server, &mut client, &big, &["store_too_large", "cmd_set"]),
        [1, 0]
    );
    assert_eq!(
        deltas(
            &server,
            &mut client,
            b"me kept\r\n",
            &["cmd_meta", "cmd_get"]
        ),
        [1, 0]
    );
    assert_eq!(
        deltas(
            &server,
            &mut client,
            b"gat 10 kept\r\n",
            &["cmd_touch", "cmd_get"]
        ),
        [1, 0]
    );
    // `-m 2 -M`: stores fail once memory is full, without evicting.
    let mut failed = 0;
    for i in 0..40 {
        if client
            .set(&format!("fill{i}"), 0, 100_000)
            .starts_with("SERVER_ERROR")
        {
            failed += 1;
        }
    }
    assert!(failed > 0, "-m 2 -M never ran out of memory");
    assert_eq!(counter(&server, "store_no_memory"), failed);
    let items = client.stats("items");
    let outofmemory: u64 = items
        .iter()
        .filter(|(name, _)| name.ends_with(":outofmemory"))
        .map(|(_, value)| value.parse::<u64>().expect("number"))
        .sum();
    assert_eq!(outofmemory, failed);
    let stats = server.stats();
    assert_eq!(stats["accepting_conns"], "1");
    // The listener, this client and the connection `stats` just used.
    assert!(counter(&server, "connection_structures") >= 3);
    let user = &stats["rusage_user"];
    let (_, micros) = user.split_once('.').expect("seconds.micros");
    assert_eq!(micros.len(), 6, "rusage_user {user}");
}
