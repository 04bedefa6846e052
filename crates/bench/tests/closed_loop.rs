//! End-to-end checks of the closed-loop engine (YCSB's model: each client has one request
//! outstanding and sends the next one a think time after the reply) against a tiny in-test
//! server that answers GETs with a miss and can stall once.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tailtrim_bench::{
    run, run_detailed, Class, ClosedLoop, RunConfig, Transport, WorkloadOverrides, WorkloadSpec,
};

/// A server that answers every GET with `END` (and anything else with `ERROR`), counts the
/// requests it found already waiting behind the one it read (pipelining), and, if asked,
/// holds every reply from the first request after `stall_after` for `stall_length`.
struct StubServer {
    address: String,
    pipelined: Arc<AtomicUsize>,
}

fn start_stub(stall: Option<(Duration, Duration)>) -> StubServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|error| panic!("bind: {error}"));
    let address = listener
        .local_addr()
        .unwrap_or_else(|error| panic!("addr: {error}"))
        .to_string();
    let pipelined = Arc::new(AtomicUsize::new(0));
    let stall_window: Arc<Mutex<Option<(Instant, Instant)>>> = Arc::default();
    let trigger = stall.map(|(after, length)| (Instant::now() + after, length));
    let counter = Arc::clone(&pipelined);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counter = Arc::clone(&counter);
            let window = Arc::clone(&stall_window);
            std::thread::spawn(move || serve(stream, &counter, trigger, &window));
        }
    });
    StubServer { address, pipelined }
}

fn serve(
    stream: TcpStream,
    pipelined: &AtomicUsize,
    trigger: Option<(Instant, Duration)>,
    window: &Mutex<Option<(Instant, Instant)>>,
) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut writer = write_half;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !reader.buffer().is_empty() {
            pipelined.fetch_add(1, Ordering::Relaxed);
        }
        if let Some((at, length)) = trigger {
            let now = Instant::now();
            let end = {
                let mut window = window.lock().unwrap_or_else(|poison| poison.into_inner());
                if window.is_none() && now >= at {
                    *window = Some((now, now + length));
                }
                window.map(|(_, end)| end)
            };
            if let Some(end) = end.filter(|end| *end > now) {
                std::thread::sleep(end - now);
            }
        }
        let reply: &[u8] = if line.starts_with(b"get ") {
            b"END\r\n"
        } else {
            b"ERROR\r\n"
        };
        if writer.write_all(reply).is_err() {
            return;
        }
    }
}

/// GETs only (the stub stores nothing), a few keys.
fn gets_only() -> Arc<WorkloadSpec> {
    let mut spec = WorkloadSpec::preset("uniform").unwrap_or_else(|error| panic!("{error}"));
    spec.apply(&WorkloadOverrides {
        keys: Some(100),
        set_share: Some(0.0),
        ..WorkloadOverrides::default()
    })
    .unwrap_or_else(|error| panic!("{error}"));
    Arc::new(spec)
}

fn closed(server: &str, clients: usize, think_time: Duration, seconds: f64) -> RunConfig {
    // The rate is not used by a closed loop: a value an open loop could never reach here
    // shows it is ignored.
    let mut config = RunConfig::new(server, 1e9, Duration::from_secs_f64(seconds));
    config.connections = clients;
    config.closed_loop = Some(ClosedLoop { think_time });
    config.seed = 7;
    config
}

#[test]
fn a_closed_loop_client_never_has_two_requests_outstanding() {
    let server = start_stub(None);
    let report = run(
        &gets_only(),
        &closed(&server.address, 4, Duration::ZERO, 0.5),
        &mut |_| {},
    )
    .unwrap_or_else(|error| panic!("run: {error}"));
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.completed > 0);
    assert_eq!(report.completed, report.scheduled);
    assert_eq!(
        server.pipelined.load(Ordering::Relaxed),
        0,
        "a request arrived while the client's previous one was unanswered"
    );
    let closed = report
        .closed_loop
        .as_ref()
        .expect("the report says closed loop");
    assert_eq!((closed.clients, closed.think_time_us), (4, 0.0));
    assert_eq!(report.target_rps, 0.0);
    assert!(report.to_table().contains("closed loop, 4 clients"));
}

#[test]
fn think_time_bounds_what_each_client_sends() {
    let server = start_stub(None);
    let clients = 3;
    let think = Duration::from_millis(20);
    let seconds = 0.6;
    let report = run(
        &gets_only(),
        &closed(&server.address, clients, think, seconds),
        &mut |_| {},
    )
    .unwrap_or_else(|error| panic!("run: {error}"));
    // A client sends at most once per think time, however fast the server answers.
    let most = clients as f64 * (seconds / think.as_secs_f64() + 1.0);
    assert!(report.scheduled > 0);
    assert!(
        report.scheduled as f64 <= most,
        "{} requests from {clients} clients thinking 20 ms for {seconds} s (at most {most})",
        report.scheduled
    );
    let json = serde_json::to_value(&report).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(json["closed_loop"]["clients"], 3);
    assert_eq!(json["closed_loop"]["think_time_us"], 20_000.0);
}

#[test]
fn a_stall_delays_at_most_one_request_per_client() {
    let server = start_stub(Some((
        Duration::from_millis(300),
        Duration::from_millis(300),
    )));
    let clients = 4;
    let output = run_detailed(
        &gets_only(),
        &closed(&server.address, clients, Duration::ZERO, 1.0),
        &mut |_| {},
    )
    .unwrap_or_else(|error| panic!("run: {error}"));
    let slow = output
        .histograms
        .get(Class::All)
        .count_between(100_000_000, u64::MAX);
    // Open loop, the same stall delays every request scheduled during it
    // (tests/open_loop.rs); closed loop, the clients wait instead of sending.
    assert!(slow >= 1, "the stall delayed no request");
    assert!(
        slow <= clients as u64,
        "{slow} requests above 100 ms from {clients} clients"
    );
}

#[test]
fn open_loop_reports_say_so_and_closed_loop_needs_tcp() {
    let server = start_stub(None);
    let mut config = RunConfig::new(&server.address, 500.0, Duration::from_millis(300));
    config.connections = 2;
    let report =
        run(&gets_only(), &config, &mut |_| {}).unwrap_or_else(|error| panic!("run: {error}"));
    assert!(report.closed_loop.is_none());
    assert!(report
        .to_table()
        .contains("open loop, 2 conns x 16 in flight"));
    let json = serde_json::to_value(&report).unwrap_or_else(|error| panic!("{error}"));
    assert!(json.get("closed_loop").is_none());
    let mut udp = closed(&server.address, 2, Duration::ZERO, 0.1);
    udp.transport = Transport::Udp;
    let error = run(&gets_only(), &udp, &mut |_| {}).expect_err("closed loop over UDP");
    assert!(
        error.to_string().contains("closed loop runs over TCP only"),
        "{error}"
    );
}
