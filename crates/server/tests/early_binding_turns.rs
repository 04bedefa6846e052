//! Under early binding a worker serves two sources: jobs other readers hand
//! it (requests for keys it owns) and its own connections. Other readers
//! that keep its queue full must not keep it from its own connections: a
//! worker runs a turn of its queue (the jobs queued when the turn starts),
//! then waits once on its connections.
//!
//! ```text
//!   feeders (home worker 1) ──gets for worker 0's keys──► worker 1 reads ─► worker 0's queue
//!   probe   (home worker 0) ──one get for a worker-0 key──► worker 0 reads it between turns
//! ```
//!
//! The assertion counts replies, not time: the probe must be answered while
//! most of the feeders' requests are still unanswered. A worker that drains
//! its queue until it is empty answers the probe only once the feeders stop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailtrim_policy::dispatch::key_worker;
use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig};

const WORKERS: usize = 2;
/// Requests each feeder pipelines.
const PER_FEEDER: usize = 3000;
const FEEDERS: usize = 2;

/// Keys early binding gives to worker 0.
fn worker0_keys(prefix: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .filter(|key| key_worker(key.as_bytes(), WORKERS) == 0)
        .take(count)
        .collect()
}

/// Connects and waits for a reply, so connections are adopted (and given
/// their home worker, round robin) in the order of the calls.
fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    conn.write_all(b"version\r\n").expect("write");
    let mut line = String::new();
    BufReader::new(&mut conn)
        .read_line(&mut line)
        .expect("version reply");
    assert!(line.starts_with("VERSION "), "{line:?}");
    conn
}

/// Reads `count` replies of `END\r\n` (every key is absent), counting them.
fn count_replies(mut conn: TcpStream, count: usize, done: &AtomicUsize) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending = 0usize;
    let mut seen = 0;
    while seen < count {
        let n = conn.read(&mut buf).expect("feeder read");
        assert!(n > 0, "feeder connection closed after {seen} replies");
        pending += n;
        let replies = pending / 5;
        pending %= 5;
        seen += replies;
        done.fetch_add(replies, Ordering::Relaxed);
    }
}

#[test]
fn other_readers_jobs_do_not_starve_a_workers_own_connections() {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = WORKERS;
    config.workers.dispatch = DispatchPolicy::EarlyBinding;
    // Every request holds its worker 500 µs (a sleep): worker 0 is the
    // bottleneck, its queue stays long while the feeders send.
    config.emulation.service = "const=500us".into();
    let handle = start(config).expect("server starts");
    let addr = handle.local_addr();

    // Homes are given round robin from worker 0.
    let mut probe = connect(addr); // worker 0
    let mut feeders = Vec::new();
    let mut spares = Vec::new();
    for _ in 0..FEEDERS {
        feeders.push(connect(addr)); // worker 1
        spares.push(connect(addr)); // worker 0, idle
    }

    let keys = worker0_keys("feed", 64);
    let done = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for (f, conn) in feeders.into_iter().enumerate() {
        let mut stream = Vec::new();
        for i in 0..PER_FEEDER {
            stream.extend_from_slice(format!("get {}\r\n", keys[(i + f) % keys.len()]).as_bytes());
        }
        let reader = conn.try_clone().expect("clone");
        let done = Arc::clone(&done);
        readers.push(std::thread::spawn(move || {
            count_replies(reader, PER_FEEDER, &done)
        }));
        let mut writer = conn;
        std::thread::spawn(move || writer.write_all(&stream).expect("feeder write"));
    }

    // The feeders' requests are flowing through worker 0's queue.
    let guard = Instant::now() + Duration::from_secs(60);
    while done.load(Ordering::Relaxed) < 50 {
        assert!(Instant::now() < guard, "the feeders made no progress");
        std::thread::sleep(Duration::from_millis(2));
    }

    let probe_key = &worker0_keys("probe", 1)[0];
    probe
        .write_all(format!("get {probe_key}\r\n").as_bytes())
        .expect("probe write");
    let mut reply = [0u8; 5];
    probe.read_exact(&mut reply).expect("probe reply");
    assert_eq!(&reply, b"END\r\n");
    let answered_at = done.load(Ordering::Relaxed);

    for reader in readers {
        reader.join().expect("feeder reader");
    }
    drop(spares);
    handle.shutdown();

    let total = FEEDERS * PER_FEEDER;
    eprintln!("probe answered after {answered_at} of {total} feeder replies");
    // A turn is at most what is queued (≤ 256 per feeder connection), and the
    // probe waits for the turn running when it arrives (one turn per wait:
    // the test below): about 500 replies. A worker that empties its queue
    // first answers it after all of the feeders' requests.
    assert!(
        answered_at < total / 2,
        "the probe on worker 0's own connection waited for {answered_at} of {total} \
         requests other readers queued on worker 0"
    );
}

/// Replies of `END\r\n` read so far on `conn` (every key is absent), counted
/// into `done` until `count` have arrived.
fn count_ends(
    conn: TcpStream,
    count: usize,
    done: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || count_replies(conn, count, &done))
}

/// One turn, then one wait: the wake-up that a busy worker's queue leaves
/// pending must not run a second turn ahead of the connections the same wait
/// returned.
///
/// ```text
///   blocker (home 0): one get, run in place by worker 0 ........ hold
///   feeder  (home 1): batch A (queued on 0 during the hold) ...... turn A
///   probe   (home 0): one get, sent during turn A ─────────────┐
///   feeder  (home 1): batch B, sent after the probe, during A   │
///   worker 0 after turn A: one wait ─► [wake-up, probe] ─► probe read here, turn B next
/// ```
///
/// A worker whose wake-up runs a turn answers the probe only after batch B
/// as well; the loop the simulator models answers it right after batch A.
#[test]
fn a_wait_that_returns_the_wake_up_does_not_run_a_second_turn_first() {
    const HOLD_MS: u64 = 50;
    const BATCH_A: usize = 2;
    const BATCH_B: usize = 16;
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = WORKERS;
    config.workers.dispatch = DispatchPolicy::EarlyBinding;
    config.emulation.service = format!("const={HOLD_MS}ms");
    let handle = start(config).expect("server starts");
    let addr = handle.local_addr();

    // Homes are given round robin from worker 0.
    let mut probe = connect(addr); // worker 0
    let feeder = connect(addr); // worker 1
    let mut blocker = connect(addr); // worker 0

    let keys = worker0_keys("turn", 1 + BATCH_A + BATCH_B + 1);
    let batch = |keys: &[String]| {
        keys.iter()
            .map(|key| format!("get {key}\r\n"))
            .collect::<String>()
    };
    let done = Arc::new(AtomicUsize::new(0));
    let counter = count_ends(
        feeder.try_clone().expect("clone"),
        BATCH_A + BATCH_B,
        Arc::clone(&done),
    );
    let mut feeder = feeder;

    // Worker 0 runs the blocker in place; batch A queues behind it.
    blocker
        .write_all(batch(&keys[..1]).as_bytes())
        .expect("blocker write");
    std::thread::sleep(Duration::from_millis(HOLD_MS / 5));
    feeder
        .write_all(batch(&keys[1..1 + BATCH_A]).as_bytes())
        .expect("batch A");
    // Into turn A (the blocker's hold, then BATCH_A holds): the probe, then batch B.
    std::thread::sleep(Duration::from_millis(HOLD_MS + HOLD_MS / 2));
    let probe_key = &keys[1 + BATCH_A + BATCH_B];
    probe
        .write_all(format!("get {probe_key}\r\n").as_bytes())
        .expect("probe write");
    feeder
        .write_all(batch(&keys[1 + BATCH_A..1 + BATCH_A + BATCH_B]).as_bytes())
        .expect("batch B");

    let mut reply = [0u8; 5];
    probe.read_exact(&mut reply).expect("probe reply");
    assert_eq!(&reply, b"END\r\n");
    let answered_at = done.load(Ordering::Relaxed);
    blocker.read_exact(&mut reply).expect("blocker reply");
    counter.join().expect("feeder reader");
    handle.shutdown();

    eprintln!("probe answered after {answered_at} feeder replies (batch A {BATCH_A}, B {BATCH_B})");
    // The probe was sent before batch B, so one turn per wait answers it
    // before any of B's replies (each holds worker 0 for HOLD_MS after it);
    // a second turn per wait answers it after all of them.
    assert!(
        answered_at < BATCH_A + BATCH_B / 2,
        "the probe waited for {answered_at} feeder replies: batch B ({BATCH_B}) ran in a \
         second turn before the wait's connections were read"
    );
}
