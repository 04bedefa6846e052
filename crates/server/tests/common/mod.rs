//! Helpers shared by the server's integration tests.

/// Voluntary context switches (wake-ups from a wait) of this process's threads whose name
/// (`/proc/self/task/*/comm`) `matches`, summed.
pub fn wakeups_of(matches: impl Fn(&str) -> bool) -> u64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|name| matches(name.trim()))
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
