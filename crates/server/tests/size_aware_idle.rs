//! An idle size-aware server sleeps: its workers block until there is work, as pinned's do,
//! instead of polling. Counted as the workers' voluntary context switches (each wake-up from
//! a blocking wait is one) over an idle second, not as time.
//!
//! ```text
//!   start (4 workers: 3 small on the shared epoll, 1 large that helps) ─► no traffic
//!   /proc/self/task/*/{comm,status}: sum voluntary_ctxt_switches of the "worker-*" threads
//!   at the start and after 1 s ─► the difference is the wake-ups at rest
//! ```
//!
//! At rest a small worker wakes once per 100 ms wait and the helping large worker, parked on
//! its bell, once a second: about 3 × 10 + 1 ≈ 31 wake-ups in a second; the controller
//! thread once per 100 ms. A busy host only makes
//! timers fire later (fewer wake-ups). A large worker polling every millisecond, or small
//! workers every 5 ms, make over 3 000; a large worker that polls every 16 ms at rest makes
//! about 125 on its own.
//!
//! Under a trickle of requests on one connection (one small worker busy at a time, so none
//! calls for help) the helping large worker stays parked: counted over a fixed number of
//! sequential requests, not as time.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig};

/// Idle time observed.
const IDLE: Duration = Duration::from_secs(1);
/// Most wake-ups of the four workers over [`IDLE`]: several times the ≈ 31 expected.
const MOST_WAKEUPS: u64 = 400;

/// Most wake-ups of the helping large worker over [`IDLE`]: about 1 expected (once a second;
/// parked 100 ms at a time, 10); polling every 16 ms made about 62.
const MOST_LARGE_WAKEUPS: u64 = 5;

/// Sequential requests of the trickle, and the pause after each.
const TRICKLE_REQUESTS: u32 = 200;
const TRICKLE_PAUSE: Duration = Duration::from_millis(4);

/// Most wake-ups of the helping large worker over the trickle (≥ 0.8 s: about 1 expected
/// from its park; polling the connections every 1–16 ms made one per request or more).
const MOST_TRICKLE_LARGE_WAKEUPS: u64 = 40;

/// Most wake-ups of the controller over [`IDLE`]: it looks for the end of an epoch every
/// 100 ms (≈ 10 in a second); every 20 ms made 50.
const MOST_CONTROLLER_WAKEUPS: u64 = 20;

/// The tests of this file one at a time: they count the threads of the whole process by
/// name, and another test's server would be counted (or, shut down, uncounted) with them.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Voluntary context switches of this process's threads named `worker-*` so far.
fn worker_wakeups() -> u64 {
    wakeups_of("worker-")
}

/// Voluntary context switches of this process's threads whose name starts with `prefix`.
fn wakeups_of(prefix: &str) -> u64 {
    common::wakeups_of(|name| name.starts_with(prefix))
}

/// A size-aware server of 4 workers, 3 small and 1 large that helps (the large one is
/// `worker-3`), nothing large.
fn size_aware_server() -> tailtrim_server::ServerHandle {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 4;
    config.workers.dispatch = DispatchPolicy::SizeAware;
    config.sizeaware.fixed_small_workers = 3;
    config.sizeaware.fixed_threshold = 1 << 30;
    assert!(config.sizeaware.large_workers_help);
    start(config).expect("server starts")
}

#[test]
fn an_idle_size_aware_server_wakes_its_workers_seldom() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let handle = size_aware_server();
    // Let the workers reach their first wait.
    std::thread::sleep(Duration::from_millis(200));
    let before = worker_wakeups();
    let controller_before = wakeups_of("controller");
    let large_before = wakeups_of("worker-3");
    std::thread::sleep(IDLE);
    let wakeups = worker_wakeups() - before;
    let controller = wakeups_of("controller") - controller_before;
    let large = wakeups_of("worker-3") - large_before;
    handle.shutdown();
    assert!(
        large <= MOST_LARGE_WAKEUPS,
        "the idle helping large worker woke {large} times in {IDLE:?} (at most {MOST_LARGE_WAKEUPS})"
    );
    assert!(
        wakeups <= MOST_WAKEUPS,
        "4 idle size-aware workers woke {wakeups} times in {IDLE:?} (at most {MOST_WAKEUPS})"
    );
    assert!(
        controller <= MOST_CONTROLLER_WAKEUPS,
        "the controller woke {controller} times in {IDLE:?} (at most {MOST_CONTROLLER_WAKEUPS})"
    );
}

#[test]
fn a_helping_large_worker_sleeps_while_the_small_workers_keep_up() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let handle = size_aware_server();
    let mut conn = TcpStream::connect(handle.local_addr()).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let exchange = |conn: &mut TcpStream, request: &[u8], reply: &[u8]| {
        conn.write_all(request).expect("write");
        let mut got = vec![0u8; reply.len()];
        conn.read_exact(&mut got).expect("read");
        assert_eq!(got, reply);
    };
    exchange(&mut conn, b"set trickle 0 0 5\r\nhello\r\n", b"STORED\r\n");
    // Let the large worker's polling after start-up wind down to its park.
    std::thread::sleep(Duration::from_millis(200));
    let before = wakeups_of("worker-3");
    for _ in 0..TRICKLE_REQUESTS {
        exchange(
            &mut conn,
            b"get trickle\r\n",
            b"VALUE trickle 0 5\r\nhello\r\nEND\r\n",
        );
        std::thread::sleep(TRICKLE_PAUSE);
    }
    let large = wakeups_of("worker-3") - before;
    handle.shutdown();
    assert!(
        large <= MOST_TRICKLE_LARGE_WAKEUPS,
        "the helping large worker woke {large} times over {TRICKLE_REQUESTS} sequential \
         requests (at most {MOST_TRICKLE_LARGE_WAKEUPS})"
    );
}
