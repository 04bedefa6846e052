//! An idle size-aware server sleeps: its workers block until there is work, as pinned's do,
//! instead of polling. Counted as the workers' voluntary context switches (each wake-up from
//! a blocking wait is one) over two idle seconds, not as time.
//!
//! ```text
//!   start (4 workers: 3 small on the shared epoll, 1 large that helps) ─► no traffic
//!   /proc/self/task/*/{comm,status}: sum voluntary_ctxt_switches of the "worker-*" threads
//!   at the start and after 2 s ─► the difference is the wake-ups at rest
//! ```
//!
//! At rest a small worker wakes once per 100 ms wait and the helping large worker about once
//! per 16 ms: about 2 × (3 × 10 + 62) ≈ 180 wake-ups in two seconds; the controller thread
//! once per 100 ms. A busy host only makes
//! timers fire later (fewer wake-ups). A large worker polling every millisecond, or small
//! workers every 5 ms, make over 3 000.

use std::time::Duration;

use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig};

/// Idle time observed.
const IDLE: Duration = Duration::from_secs(2);
/// Most wake-ups of the four workers over [`IDLE`]: several times the ≈ 180 expected.
const MOST_WAKEUPS: u64 = 800;

/// Most wake-ups of the controller over [`IDLE`]: it looks for the end of an epoch every
/// 100 ms (≈ 20 in two seconds); every 20 ms made 100.
const MOST_CONTROLLER_WAKEUPS: u64 = 40;

/// Voluntary context switches of this process's threads named `worker-*` so far.
fn worker_wakeups() -> u64 {
    wakeups_of("worker-")
}

/// Voluntary context switches of this process's threads whose name starts with `prefix`.
fn wakeups_of(prefix: &str) -> u64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with(prefix))
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|value| value.trim().parse::<u64>().ok())
        })
        .sum()
}

#[test]
fn an_idle_size_aware_server_wakes_its_workers_seldom() {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 4;
    config.workers.dispatch = DispatchPolicy::SizeAware;
    assert!(config.sizeaware.large_workers_help);
    let handle = start(config).expect("server starts");
    // Let the workers reach their first wait.
    std::thread::sleep(Duration::from_millis(200));
    let before = worker_wakeups();
    let controller_before = wakeups_of("controller");
    std::thread::sleep(IDLE);
    let wakeups = worker_wakeups() - before;
    let controller = wakeups_of("controller") - controller_before;
    handle.shutdown();
    assert!(
        wakeups <= MOST_WAKEUPS,
        "4 idle size-aware workers woke {wakeups} times in {IDLE:?} (at most {MOST_WAKEUPS})"
    );
    assert!(
        controller <= MOST_CONTROLLER_WAKEUPS,
        "the controller woke {controller} times in {IDLE:?} (at most {MOST_CONTROLLER_WAKEUPS})"
    );
}
