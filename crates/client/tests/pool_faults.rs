//! Pool behaviour against real memcached backends: routing, multigets, replication, and the
//! faults of issue 5 (killed backend, SIGSTOPped backend). Every value written embeds its key,
//! and every read checks that, so a reply carrying another key's value fails the test.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tailtrim_client::testkit::{require_binary, start_memcached, start_memcached_on, ChildGuard};
use tailtrim_client::{ClientError, Pool, PoolConfig, ServerSpec};
use tailtrim_policy::health::HealthSettings;

const TIMEOUT: Duration = Duration::from_millis(300);
const RETRY_AFTER: Duration = Duration::from_millis(400);

fn value_for(key: &str) -> Vec<u8> {
    format!("value-of:{key}:{}", "x".repeat(key.len() % 17)).into_bytes()
}

fn check_value(key: &[u8], data: &[u8]) {
    let key = std::str::from_utf8(key).expect("utf8 key");
    assert_eq!(
        data,
        value_for(key).as_slice(),
        "key {key} got another value"
    );
}

fn pool_over(backends: &[ChildGuard], replicas: usize) -> Pool {
    let servers = backends
        .iter()
        .map(|backend| ServerSpec::parse(&format!("127.0.0.1:{}:1", backend.port)).expect("spec"))
        .collect();
    let mut config = PoolConfig::new("test", servers);
    config.replicas = replicas;
    config.timeout = TIMEOUT;
    config.connect_timeout = Duration::from_millis(200);
    config.health = HealthSettings {
        failure_limit: 2,
        retry_after_nanos: RETRY_AFTER.as_nanos() as u64,
    };
    Pool::new(config).expect("pool")
}

fn keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("item:{i}")).collect()
}

async fn store_all(pool: &Pool, keys: &[String]) {
    for key in keys {
        let stored = pool
            .set(key.as_bytes(), 7, 0, &value_for(key))
            .await
            .expect("set");
        assert!(stored, "set {key}");
    }
}

fn have_binaries() -> bool {
    require_binary("memcached")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiget_returns_every_value_in_order_from_three_backends() {
    if !have_binaries() {
        return;
    }
    let backends: Vec<ChildGuard> = (0..3).map(|_| start_memcached()).collect();
    let pool = pool_over(&backends, 1);
    let names = keys(300);
    store_all(&pool, &names).await;
    // Ask for stored keys, misses and a duplicate, in a scrambled order.
    let mut asked: Vec<Bytes> = names.iter().rev().map(|k| Bytes::from(k.clone())).collect();
    asked.insert(5, Bytes::from_static(b"missing:1"));
    asked.push(Bytes::from(names[3].clone()));
    let values = pool.get_many(&asked).await.expect("multiget");
    assert_eq!(values.len(), asked.len());
    for (key, value) in asked.iter().zip(&values) {
        match value {
            Some(value) => {
                check_value(key, &value.data);
                assert_eq!(value.flags, 7);
            }
            None => assert!(key.starts_with(b"missing")),
        }
    }
    // Keys really are spread: every backend served some.
    for backend in pool.backends() {
        assert!(
            backend.stats().requests.get() > 0,
            "{} unused",
            backend.address()
        );
    }
    assert!(pool.delete(names[0].as_bytes()).await.expect("delete"));
    assert_eq!(pool.get(names[0].as_bytes()).await.expect("get"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_backend_fails_fast_others_unaffected_and_it_comes_back() {
    if !have_binaries() {
        return;
    }
    let mut backends: Vec<ChildGuard> = (0..3).map(|_| start_memcached()).collect();
    let pool = pool_over(&backends, 1);
    let names = keys(120);
    store_all(&pool, &names).await;
    let victim = 1;
    let victim_port = backends[victim].port;
    backends[victim].kill();
    let mut failed = 0;
    for key in &names {
        let owner = pool.ring().server_for(key.as_bytes());
        let started = Instant::now();
        let result = pool.get(key.as_bytes()).await;
        assert!(
            started.elapsed() < TIMEOUT * 10,
            "request hung for {:?}",
            started.elapsed()
        );
        if owner == victim {
            failed += 1;
            let error = result.expect_err("dead backend served a read");
            // A pooled connection that has not seen the kill's FIN yet fails on use
            // (`ConnectionLost`); later requests fail to connect or find the backend down.
            assert!(
                matches!(
                    error,
                    ClientError::Connect { .. }
                        | ClientError::BackendDown { .. }
                        | ClientError::ConnectionLost { .. }
                ),
                "unexpected {error}"
            );
        } else {
            let value = result.expect("healthy backend").expect("stored");
            check_value(key.as_bytes(), &value.data);
        }
    }
    assert!(failed > 0);
    assert!(
        pool.backends()[victim].stats().fail_fast.get() > 0,
        "never failed fast"
    );
    assert!(!pool.backends()[victim].is_up());

    // Restart it on the same port: after the retry delay a probe revives it.
    let _revived = start_memcached_on(victim_port);
    tokio::time::sleep(RETRY_AFTER + Duration::from_millis(50)).await;
    let victim_key = names
        .iter()
        .find(|key| pool.ring().server_for(key.as_bytes()) == victim)
        .expect("victim owns a key");
    assert!(pool
        .set(victim_key.as_bytes(), 7, 0, &value_for(victim_key))
        .await
        .expect("probe"));
    let value = pool
        .get(victim_key.as_bytes())
        .await
        .expect("revived")
        .expect("stored");
    check_value(victim_key.as_bytes(), &value.data);
    assert!(pool.backends()[victim].is_up());
    assert_eq!(pool.backends()[victim].stats().revived.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_pool_reads_fail_over_when_a_backend_dies() {
    if !have_binaries() {
        return;
    }
    let mut backends: Vec<ChildGuard> = (0..3).map(|_| start_memcached()).collect();
    let pool = pool_over(&backends, 2);
    let names = keys(150);
    store_all(&pool, &names).await;
    // Each key is on exactly its two replicas (asked directly, bypassing the pool).
    let direct: Vec<Pool> = backends
        .iter()
        .map(|b| pool_over(std::slice::from_ref(b), 1))
        .collect();
    for key in names.iter().take(40) {
        let mut replicas = Vec::new();
        pool.ring().replicas_for(key.as_bytes(), 2, &mut replicas);
        for (index, single) in direct.iter().enumerate() {
            let held = single
                .get(key.as_bytes())
                .await
                .expect("direct get")
                .is_some();
            assert_eq!(held, replicas.contains(&index), "{key} on backend {index}");
        }
    }
    backends[0].kill();
    // Single-key reads.
    for key in &names {
        let value = pool
            .get(key.as_bytes())
            .await
            .expect("replica serves")
            .expect("stored");
        check_value(key.as_bytes(), &value.data);
    }
    // Multigets too (the dead backend may still be chosen before it is marked down).
    let asked: Vec<Bytes> = names.iter().map(|k| Bytes::from(k.clone())).collect();
    for _ in 0..3 {
        let values = pool
            .get_many(&asked)
            .await
            .expect("multiget with a dead replica");
        for (key, value) in asked.iter().zip(values) {
            check_value(key, &value.expect("every key has a live replica").data);
        }
    }
    // Writes still succeed through the surviving replica.
    assert!(pool
        .set(b"after-death", 7, 0, &value_for("after-death"))
        .await
        .expect("write"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_backend_times_out_then_fails_fast_and_nothing_hangs() {
    if !have_binaries() {
        return;
    }
    let backends: Vec<ChildGuard> = (0..2).map(|_| start_memcached()).collect();
    let pool = pool_over(&backends, 1);
    let names = keys(80);
    store_all(&pool, &names).await;
    let victim = 0;
    backends[victim].signal("STOP");
    let victim_keys: Vec<&String> = names
        .iter()
        .filter(|key| pool.ring().server_for(key.as_bytes()) == victim)
        .collect();
    assert!(victim_keys.len() >= 3);
    let mut timeouts = 0;
    let mut fail_fast = 0;
    for key in victim_keys.iter().take(4) {
        let started = Instant::now();
        let result = tokio::time::timeout(TIMEOUT * 10, pool.get(key.as_bytes()))
            .await
            .expect("a request to a stopped backend hung");
        match result {
            Err(ClientError::Timeout { .. }) => {
                timeouts += 1;
                assert!(started.elapsed() >= TIMEOUT);
            }
            Err(ClientError::BackendDown { .. }) => fail_fast += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(timeouts, 2, "failure_limit = 2 timeouts, then down");
    assert_eq!(fail_fast, 2);
    // A multiget that touches the stopped backend fails (fast) instead of hanging, and keys of
    // the other backend still read fine on their own.
    let asked: Vec<Bytes> = names.iter().map(|k| Bytes::from(k.clone())).collect();
    let started = Instant::now();
    assert!(pool.get_many(&asked).await.is_err());
    assert!(started.elapsed() < TIMEOUT * 10, "multiget hung");
    for key in names
        .iter()
        .filter(|key| pool.ring().server_for(key.as_bytes()) != victim)
    {
        let value = pool
            .get(key.as_bytes())
            .await
            .expect("other backend")
            .expect("stored");
        check_value(key.as_bytes(), &value.data);
    }
    // Resume it: after the retry delay it serves again.
    backends[victim].signal("CONT");
    tokio::time::sleep(RETRY_AFTER + Duration::from_millis(50)).await;
    let key = victim_keys[0];
    let value = pool
        .get(key.as_bytes())
        .await
        .expect("resumed")
        .expect("stored");
    check_value(key.as_bytes(), &value.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_abandoned_by_its_caller_does_not_keep_the_backend_down() {
    if !have_binaries() {
        return;
    }
    let backends: Vec<ChildGuard> = vec![start_memcached()];
    let mut config = PoolConfig::new(
        "probe",
        vec![ServerSpec::parse(&format!("127.0.0.1:{}:1", backends[0].port)).expect("spec")],
    );
    config.timeout = TIMEOUT;
    config.health = HealthSettings {
        failure_limit: 1,
        retry_after_nanos: 100_000_000,
    };
    let pool = Pool::new(config).expect("pool");
    assert!(pool.set(b"p", 0, 0, &value_for("p")).await.expect("set"));
    backends[0].signal("STOP");
    assert!(matches!(
        pool.get(b"p").await,
        Err(ClientError::Timeout { .. })
    ));
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The probe is let through, then its caller gives up long before the timeout.
    let abandoned = tokio::time::timeout(Duration::from_millis(30), pool.get(b"p")).await;
    assert!(abandoned.is_err(), "the stopped backend answered");
    backends[0].signal("CONT");
    let value = pool
        .get(b"p")
        .await
        .expect("backend usable again")
        .expect("stored");
    check_value(b"p", &value.data);
    assert_eq!(pool.backends()[0].outstanding(), 0, "outstanding leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_requests_free_their_queue_slots() {
    if !have_binaries() {
        return;
    }
    let backends: Vec<ChildGuard> = vec![start_memcached()];
    let mut config = PoolConfig::new(
        "queue",
        vec![ServerSpec::parse(&format!("127.0.0.1:{}:1", backends[0].port)).expect("spec")],
    );
    config.queue_limit = 3;
    config.connections_per_backend = 1;
    let pool = Pool::new(config).expect("pool");
    // Far more requests than the queue holds, one after another: none may be refused.
    for index in 0..40 {
        let key = format!("q{index}");
        assert!(pool
            .set(key.as_bytes(), 0, 0, &value_for(&key))
            .await
            .expect("set"));
        let value = pool
            .get(key.as_bytes())
            .await
            .expect("get")
            .expect("stored");
        check_value(key.as_bytes(), &value.data);
    }
    // And more concurrent requests than the queue holds are refused, not queued forever.
    let keys: Vec<Vec<u8>> = (0..64)
        .map(|i| format!("q{}", i % 40).into_bytes())
        .collect();
    let results = futures_util::future::join_all(keys.iter().map(|key| pool.get(key))).await;
    assert!(results.iter().any(|result| result.is_ok()));
    for result in results {
        match result {
            Ok(Some(value)) => assert!(value.data.starts_with(b"value-of:q")),
            Ok(None) => panic!("stored key missing"),
            Err(error) => assert!(matches!(error, ClientError::Overloaded { .. }), "{error}"),
        }
    }
}

/// A connection the pool gives up on (here: a reply that never comes) is reset, not closed in
/// order: an orderly close would keep delivering whatever requests were still queued in its
/// send buffer, so behind a partition a `set` reported as failed could land after a later
/// `set` of the same key and bring the old value back (scripts/chaos.sh, `partition`).
/// The backend is a socket that reads nothing until the pool has given up on a large `set`
/// (part of it still queued on the pool's side) and dropped the connection; then it reads:
/// an orderly close delivers the queued bytes and ends with `Ok(0)`, a reset ends with
/// `ConnectionReset`.
#[tokio::test]
async fn a_given_up_connection_is_reset_so_nothing_queued_is_delivered_later() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let (given_up, wait_for_it) = std::sync::mpsc::channel::<()>();
    let backend = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().expect("accept");
        let _ = wait_for_it.recv_timeout(Duration::from_secs(10));
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let mut buffer = vec![0u8; 1 << 16];
        let mut received = 0usize;
        loop {
            match socket.read(&mut buffer) {
                Ok(0) => return format!("orderly close after {received} bytes"),
                Ok(n) => received += n,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return format!("{:?}", error.kind()),
            }
        }
    });
    let servers = vec![ServerSpec::parse(&format!("127.0.0.1:{port}:1")).expect("spec")];
    let mut config = PoolConfig::new("test", servers);
    config.timeout = Duration::from_millis(200);
    let pool = Pool::new(config).expect("pool");
    // Far more than the socket buffers on both sides hold: the write stalls, the set times out.
    let value = vec![b'v'; 32 << 20];
    let result = pool.set(b"k", 0, 0, &value).await;
    assert!(result.is_err(), "the backend reads nothing: {result:?}");
    drop(pool);
    given_up.send(()).expect("signal");
    let ended = tokio::task::spawn_blocking(move || backend.join().expect("backend thread"))
        .await
        .expect("join");
    assert_eq!(
        ended, "ConnectionReset",
        "the given-up connection ended with"
    );
}

/// The connection itself bounds every request (one watchdog timer per connection, not one
/// per request): a request nobody times out still fails with `Timeout` after the
/// connection's timeout, the requests queued behind it fail too, and nothing hangs.
#[tokio::test]
async fn a_connection_times_out_its_oldest_request_without_a_caller_timer() {
    use tailtrim_client::connection::Connection;
    use tailtrim_client::ReplyShape;
    // A backend that accepts and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let silent = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.expect("accept");
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(socket);
    });
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let timeout = Duration::from_millis(150);
    let connection = Connection::start(stream, address.to_string(), 16, timeout);
    let started = Instant::now();
    let first = connection
        .submit(b"get a\r\n", ReplyShape::UntilEnd)
        .expect("queued");
    tokio::time::sleep(Duration::from_millis(60)).await;
    let second = connection
        .submit(b"get b\r\n", ReplyShape::UntilEnd)
        .expect("queued");
    let outcome = tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .expect("the connection must end the wait by itself");
    let waited = started.elapsed();
    assert!(
        matches!(outcome, Err(ClientError::Timeout { after_ms: 150, .. })),
        "{outcome:?}"
    );
    assert!(waited >= timeout, "timed out early: {waited:?}");
    // Queued behind it and not yet due: lost with the connection, not left waiting.
    let behind = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("no hang");
    assert!(
        matches!(behind, Err(ClientError::ConnectionLost { .. })),
        "{behind:?}"
    );
    assert!(!connection.is_alive());
    silent.abort();
}

/// A request does not queue behind a slow one on the same connection while another of the
/// backend's connections is idle: the memcached protocol answers a connection's requests in
/// order, so round robin would put every second request behind the slow reply. The fake
/// backend never answers `get slow`; round robin (the default) sends the third request to the
/// slow one's connection (it waits for the timeout), the least-loaded choice to the idle one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_takes_an_idle_connection_rather_than_queue_behind_a_slow_one() {
    requests_pass_a_never_answered_get(tailtrim_policy::lanes::ConnectionChoice::LeastLoaded).await;
}

/// As above with `avoid-slow`, which keeps round robin's pick until the slow request is older
/// than its threshold (the 1 ms floor here: the backend answers the others at once): once it
/// is, the third request, which round robin sends behind it, takes the other connection.
/// Fails with `round-robin` (the third request waits for the 20 s timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avoid_slow_skips_a_connection_whose_oldest_request_is_late() {
    requests_pass_a_never_answered_get(tailtrim_policy::lanes::ConnectionChoice::AvoidSlow).await;
}

/// Two connections to a fake backend that never answers `get slow`: the slow request goes
/// out first, and once it is well past `avoid-slow`'s floor three more must be answered.
async fn requests_pass_a_never_answered_get(choice: tailtrim_policy::lanes::ConnectionChoice) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let backend = tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line == "get slow" {
                        // Never answered: everything behind it on this connection waits.
                        std::future::pending::<()>().await;
                    }
                    if write.write_all(b"END\r\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut config = PoolConfig::new(
        "lanes",
        vec![ServerSpec::parse(&format!("{address}:1")).expect("spec")],
    );
    config.timeout = Duration::from_secs(20);
    config.connections_per_backend = 2;
    config.connection_choice = choice;
    let pool = std::sync::Arc::new(Pool::new(config).expect("pool"));
    let slow = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.get(b"slow").await })
    };
    // The slow request is queued on its connection before the others start, and older than
    // avoid-slow's 1 ms floor (its submission follows its reservation by microseconds).
    let queued = Instant::now();
    while pool.backends()[0].outstanding() == 0 && queued.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    for key in [&b"a"[..], b"b", b"c"] {
        let reply = tokio::time::timeout(Duration::from_secs(10), pool.get(key))
            .await
            .unwrap_or_else(|_| panic!("{key:?} waited behind the slow request ({choice:?})"));
        assert!(matches!(reply, Ok(None)), "{reply:?}");
    }
    // Only avoid-slow counts the requests it sent off round robin's connection.
    let skips = pool.backends()[0].stats().stuck_skips.get();
    match choice {
        tailtrim_policy::lanes::ConnectionChoice::AvoidSlow => assert!(skips >= 1, "{skips}"),
        _ => assert_eq!(skips, 0),
    }
    slow.abort();
    backend.abort();
}
