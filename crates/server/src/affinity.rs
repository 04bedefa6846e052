//! CPU affinity: parse CPU lists (`0-3`, `0,2`) and pin threads; the calling thread's CPU
//! time ([`thread_cpu_ns`]).
//!
//! `[workers] pin_cpus` / `--pin-cpus` pins worker `i` to `cpus[i % len]`;
//! the experiments reuse the same helpers to pin the bench and whole servers.

/// Parses a CPU list such as `1`, `0,1` or `0-3`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("bad CPU list {text:?} (expected e.g. 1, 0,1 or 0-3)");
    let mut cpus = Vec::new();
    for part in text
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        match part.split_once('-') {
            Some((first, last)) => {
                let first: usize = first.trim().parse().map_err(|_| bad())?;
                let last: usize = last.trim().parse().map_err(|_| bad())?;
                if last < first {
                    return Err(bad());
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() || cpus.iter().any(|cpu| *cpu >= libc::CPU_SETSIZE as usize) {
        return Err(bad());
    }
    Ok(cpus)
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus {
        // SAFETY: parse_cpu_list keeps every cpu below CPU_SETSIZE.
        unsafe { libc::CPU_SET(*cpu, &mut set) };
    }
    set
}

/// CPU time the calling thread has used (user + system), in nanoseconds
/// (`CLOCK_THREAD_CPUTIME_ID`); `None` if the clock cannot be read.
pub fn thread_cpu_ns() -> Option<u64> {
    let mut spec = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `spec` is a valid, writable timespec; the clock id is a constant.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut spec) };
    if status != 0 {
        return None;
    }
    let seconds = u64::try_from(spec.tv_sec).ok()?;
    let nanos = u64::try_from(spec.tv_nsec).ok()?;
    Some(seconds.saturating_mul(1_000_000_000).saturating_add(nanos))
}

pub fn set_affinity(task: libc::pid_t, cpus: &[usize]) -> Result<(), String> {
    let set = cpu_set(cpus);
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let result =
        unsafe { libc::sched_setaffinity(task, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if result == 0 {
        Ok(())
    } else {
        Err(format!(
            "sched_setaffinity({task}, {cpus:?}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Pins the calling thread to `cpus`; threads it spawns afterwards inherit
/// the mask.
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), String> {
    set_affinity(0, cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("0-2, 5,1").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("99999").is_err());
    }

    #[test]
    fn pinning_a_thread_changes_the_cpu_it_runs_on() {
        let cpu = std::thread::spawn(|| {
            pin_current_thread(&[0]).unwrap();
            // SAFETY: sched_getcpu has no preconditions.
            unsafe { libc::sched_getcpu() }
        })
        .join()
        .unwrap();
        assert_eq!(cpu, 0);
    }
}
