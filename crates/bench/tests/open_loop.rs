//! End-to-end checks of the open-loop engine against tiny in-test servers
//! that speak enough of the memcached text protocol (GET/multiget/SET).

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tailtrim_bench::{
    preload, run, run_detailed, Class, RunConfig, Transport, WorkloadOverrides, WorkloadSpec,
};

/// One-off stall: the first request after `trigger` holds every reply until
/// `trigger + stall` (recorded as the actual window).
struct Stall {
    trigger: Instant,
    length: Duration,
    window: Mutex<Option<(Instant, Instant)>>,
}

struct TestServer {
    address: String,
    stall: Option<Arc<Stall>>,
}

fn start_tcp_server(stall: Option<(Duration, Duration)>) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|error| panic!("bind: {error}"));
    let address = listener
        .local_addr()
        .unwrap_or_else(|error| panic!("addr: {error}"))
        .to_string();
    let stall = stall.map(|(after, length)| {
        Arc::new(Stall {
            trigger: Instant::now() + after,
            length,
            window: Mutex::new(None),
        })
    });
    let keys: Arc<Mutex<HashSet<Vec<u8>>>> = Arc::default();
    let thread_stall = stall.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let keys = Arc::clone(&keys);
            let stall = thread_stall.clone();
            std::thread::spawn(move || serve_connection(stream, &keys, stall.as_deref()));
        }
    });
    TestServer { address, stall }
}

fn wait_for_stall(stall: Option<&Stall>) {
    let Some(stall) = stall else { return };
    let now = Instant::now();
    let end = {
        let mut window = stall
            .window
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if window.is_none() && now >= stall.trigger {
            *window = Some((now, now + stall.length));
        }
        window.map(|(_, end)| end)
    };
    if let Some(end) = end {
        if now < end {
            std::thread::sleep(end - now);
        }
    }
}

fn serve_connection(stream: TcpStream, keys: &Mutex<HashSet<Vec<u8>>>, stall: Option<&Stall>) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut writer = std::io::BufWriter::new(write_half);
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        let mut words = text.split(' ');
        let mut reply = Vec::new();
        match words.next() {
            Some("get") => {
                let known = keys.lock().unwrap_or_else(|poison| poison.into_inner());
                for key in words {
                    if known.contains(key.as_bytes()) {
                        reply.extend_from_slice(format!("VALUE {key} 0 3\r\nabc\r\n").as_bytes());
                    }
                }
                reply.extend_from_slice(b"END\r\n");
            }
            Some("set") => {
                let key = words.next().unwrap_or_default().as_bytes().to_vec();
                let length: usize = words.nth(2).and_then(|n| n.parse().ok()).unwrap_or(0);
                let mut data = vec![0u8; length + 2];
                if reader.read_exact(&mut data).is_err() {
                    return;
                }
                keys.lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .insert(key);
                reply.extend_from_slice(b"STORED\r\n");
            }
            _ => reply.extend_from_slice(b"ERROR\r\n"),
        }
        wait_for_stall(stall);
        if writer.write_all(&reply).is_err() {
            return;
        }
        // Flush when no further request is already buffered (pipelining).
        if reader.buffer().is_empty() && writer.flush().is_err() {
            return;
        }
    }
}

fn small_workload(name: &str, keys: u64) -> Arc<WorkloadSpec> {
    let mut spec = WorkloadSpec::preset(name).unwrap_or_else(|error| panic!("{error}"));
    spec.apply(&WorkloadOverrides {
        keys: Some(keys),
        ..WorkloadOverrides::default()
    })
    .unwrap_or_else(|error| panic!("{error}"));
    Arc::new(spec)
}

#[test]
fn stalled_server_shows_up_as_queueing_from_the_scheduled_time() {
    let server = start_tcp_server(Some((
        Duration::from_millis(900),
        Duration::from_millis(300),
    )));
    let workload = small_workload("uniform", 1_000);
    let rate = 2_000.0;
    let mut config = RunConfig::new(&server.address, rate, Duration::from_secs(2));
    config.connections = 8;
    config.max_in_flight = 16;
    config.seed = 42;
    let output = run_detailed(&workload, &config, &mut |_| {})
        .unwrap_or_else(|error| panic!("run: {error}"));
    let report = &output.report;
    let Some((stall_start, stall_end)) = server.stall.as_ref().and_then(|stall| {
        *stall
            .window
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }) else {
        panic!("the server never stalled");
    };
    let stall_seconds = (stall_end - stall_start).as_secs_f64();
    let all = report.class(Class::All);
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(
        all.max_us >= 300_000.0,
        "max {} µs must cover the 300 ms stall",
        all.max_us
    );
    let above_100ms = output
        .histograms
        .get(Class::All)
        .count_between(100_000_000, u64::MAX);
    // Every request scheduled in [stall start, stall end - 100 ms] waits > 100 ms
    // (Poisson count, sd ≈ 5%). A few more can: requests caught just before
    // the stall, and the backlog drained through the in-flight cap after it,
    // which a loaded machine slows; hence the looser upper bound.
    let expected = rate * (stall_seconds - 0.1);
    assert!(
        above_100ms as f64 >= 0.8 * expected && above_100ms as f64 <= 1.6 * expected,
        "{above_100ms} requests above 100 ms, expected about {expected:.0}"
    );
    // A closed-loop or send-time generator could have at most connections * cap.
    assert!(above_100ms > (config.connections * config.max_in_flight * 2) as u64);
    eprintln!("{above_100ms} requests above 100 ms, expected about {expected:.0}");
    // Queueing behind the in-flight cap is visible in the send lag.
    assert!(
        report.send_lag.max_us > 100_000.0,
        "send lag {:?}",
        report.send_lag
    );
}

#[test]
fn achieved_rate_matches_target_and_preloaded_keys_hit() {
    let server = start_tcp_server(None);
    let workload = small_workload("etc", 3_000);
    let loaded = preload(&workload, &server.address, 3, &mut |_| {})
        .unwrap_or_else(|error| panic!("preload: {error}"));
    assert_eq!(loaded.keys, 3_000);
    assert_eq!(loaded.errors, 0);
    let rate = 4_000.0;
    let mut config = RunConfig::new(&server.address, rate, Duration::from_secs(2));
    config.connections = 6;
    config.threads = 2;
    config.warmup = Duration::from_millis(200);
    let report = run(&workload, &config, &mut |_| {}).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(
        (report.achieved_rps - rate).abs() / rate < 0.1,
        "achieved {} for target {rate}",
        report.achieved_rps
    );
    assert_eq!(report.misses, 0, "every key was preloaded");
    assert!(report.hits > 0);
    let all = report.class(Class::All);
    let gets = report.class(Class::Get).count;
    let sets = report.class(Class::Set).count;
    assert_eq!(gets + sets, all.count);
    assert_eq!(
        report.class(Class::Small).count + report.class(Class::Large).count,
        all.count
    );
    let set_share = sets as f64 / all.count as f64;
    assert!(
        (set_share - 1.0 / 31.0).abs() < 0.015,
        "set share {set_share}"
    );
    assert_eq!(report.timeseries.len(), 2);
    let series_total: u64 = report
        .timeseries
        .iter()
        .map(|sample| sample.completed)
        .sum();
    assert!(series_total <= report.completed && series_total + 50 >= report.completed);
    let json = serde_json::to_value(&report).unwrap_or_default();
    for key in [
        "target_rps",
        "achieved_rps",
        "duration_s",
        "errors",
        "misses",
    ] {
        assert!(json.get(key).is_some(), "{key} missing");
    }
    for class in ["all", "small", "large", "mice", "elephant"] {
        for field in [
            "count", "mean_us", "p50_us", "p90_us", "p95_us", "p99_us", "p999_us", "max_us",
        ] {
            assert!(
                json["classes"][class].get(field).is_some(),
                "{class}.{field} missing"
            );
        }
    }
}

#[test]
fn multigets_count_hits_and_misses_per_key() {
    let server = start_tcp_server(None);
    let workload = small_workload("chisel", 2_000);
    // Preload only half of the keys by preloading a smaller copy of the workload.
    let half = small_workload("chisel", 1_000);
    preload(&half, &server.address, 2, &mut |_| {}).unwrap_or_else(|error| panic!("{error}"));
    let mut config = RunConfig::new(&server.address, 500.0, Duration::from_secs(1));
    config.connections = 4;
    let report = run(&workload, &config, &mut |_| {}).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.errors, 0);
    assert!(
        (report.hit_ratio - 0.5).abs() < 0.05,
        "hit ratio {}",
        report.hit_ratio
    );
    assert!(report.class(Class::Elephant).count > 0 && report.class(Class::Mice).count > 0);
}

/// UDP server answering each GET with END split across two datagrams.
fn start_udp_server() -> String {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|error| panic!("bind: {error}"));
    let address = socket
        .local_addr()
        .unwrap_or_else(|error| panic!("addr: {error}"))
        .to_string();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 2048];
        while let Ok((count, peer)) = socket.recv_from(&mut buffer) {
            if count < 8 {
                continue;
            }
            let request_id = [buffer[0], buffer[1]];
            for (sequence, part) in [b"EN".as_slice(), b"D\r\n".as_slice()].iter().enumerate() {
                let mut datagram = Vec::new();
                datagram.extend_from_slice(&request_id);
                datagram.extend_from_slice(&(sequence as u16).to_be_bytes());
                datagram.extend_from_slice(&2u16.to_be_bytes());
                datagram.extend_from_slice(&[0, 0]);
                datagram.extend_from_slice(part);
                let _ = socket.send_to(&datagram, peer);
            }
        }
    });
    address
}

#[test]
fn udp_replies_are_reassembled_and_matched_by_request_id() {
    let address = start_udp_server();
    let mut spec = WorkloadSpec::preset("uniform").unwrap_or_else(|error| panic!("{error}"));
    spec.apply(&WorkloadOverrides {
        set_share: Some(0.0),
        ..WorkloadOverrides::default()
    })
    .unwrap_or_else(|error| panic!("{error}"));
    let mut config = RunConfig::new(&address, 1_000.0, Duration::from_secs(1));
    config.transport = Transport::Udp;
    config.connections = 4;
    let report =
        run(&Arc::new(spec), &config, &mut |_| {}).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.completed > 800, "completed {}", report.completed);
    assert_eq!(report.hits, 0);
    assert_eq!(report.misses, report.completed);
}

#[test]
fn null_server_answers_every_request() {
    let server = tailtrim_bench::NullServer::start().unwrap_or_else(|error| panic!("{error}"));
    let workload = small_workload("etc", 1_000);
    let mut config = RunConfig::new(&server.address(), 2_000.0, Duration::from_millis(500));
    config.connections = 4;
    let report = run(&workload, &config, &mut |_| {}).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.errors, 0);
    assert!(report.completed > 700, "completed {}", report.completed);
    assert_eq!(report.hits, 0, "the null server stores nothing");
    assert!(report.class(Class::Set).count > 0);
}
