//! The route tree over real memcached servers: a tree of no configured routes is the cluster's
//! leaf; `logging` logs each request's route decision at debug level and changes nothing;
//! `timeout` bounds a whole request (a stopped backend with a long per-request timeout fails
//! at the route's bound); the pool's layers named in the routes (`failover`, `planner`,
//! `gate`) build the pool the `[pool]` keys build, and serve and fail over alike; `shadow`
//! mirrors a sampled share of requests to a second pool without waiting for it; an unknown
//! route type or an order that makes no sense is refused, saying what is expected.
//!
//! ```text
//!   build_tree([logging, timeout 300 ms]) ─► logging ─► timeout ─► warmup (Cluster) ─► memcached
//!   configure_pool([warmup, failover, planner, gate]) ≡ [pool] replicas, planner, window, order
//!   build_tree([shadow]) ─► shadow ─┬─► warmup ─► memcached (the reply)
//!                                   └─► (spawned) shadow pool ─► memcached (reply dropped)
//! ```

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tailtrim_client::routes::pool_layers;
use tailtrim_client::testkit::{require_binary, start_memcached, ChildGuard};
use tailtrim_client::{
    build_tree, configure_pool, ClientError, Cluster, MultigetKind, Pool, PoolConfig, ReplyShape,
    RouteSpec, ServerSpec,
};
use tailtrim_policy::hotkeys::TrackerConfig;
use tailtrim_policy::planner::PlannerKind;
use tailtrim_policy::serverq::Discipline;

/// A log sink the test reads back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")).into_owned()
    }
}

fn servers(backends: &[&ChildGuard]) -> Vec<ServerSpec> {
    backends
        .iter()
        .map(|backend| ServerSpec::parse(&format!("127.0.0.1:{}:1", backend.port)).expect("spec"))
        .collect()
}

fn config_over(ports: &[u16], timeout: Duration) -> PoolConfig {
    let servers = ports
        .iter()
        .map(|port| ServerSpec::parse(&format!("127.0.0.1:{port}:1")).expect("spec"))
        .collect();
    let mut config = PoolConfig::new("routes", servers);
    config.timeout = timeout;
    config
}

fn cluster_over(port: u16, timeout: Duration) -> Arc<Cluster> {
    Cluster::new(config_over(&[port], timeout), TrackerConfig::default()).expect("cluster")
}

fn route(kind: &str, timeout_ms: Option<u64>) -> RouteSpec {
    RouteSpec {
        kind: kind.to_string(),
        timeout: timeout_ms.map(Duration::from_millis),
        ..RouteSpec::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn logging_logs_each_decision_and_timeout_bounds_a_whole_request() {
    if !require_binary("memcached") {
        return;
    }
    let backend = start_memcached();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    runtime().block_on(async {
        let cluster = cluster_over(backend.port, Duration::from_secs(10));
        let bare = build_tree(&cluster, &[]).expect("leaf");
        assert_eq!(bare.name(), "warmup");
        let tree = build_tree(
            &cluster,
            &[route("logging", None), route("timeout", Some(300))],
        )
        .expect("tree");
        assert_eq!(tree.name(), "logging");
        let set = Bytes::from_static(b"set rk 0 0 2\r\nhi\r\n");
        let stored = tree.write(b"rk", set, ReplyShape::Single).await;
        assert_eq!(stored.expect("set").bytes.as_ref(), b"STORED\r\n");
        let read = tree
            .read(
                b"rk",
                Bytes::from_static(b"get rk\r\n"),
                ReplyShape::UntilEnd,
            )
            .await
            .expect("get");
        assert_eq!(read.bytes.as_ref(), b"VALUE rk 0 2\r\nhi\r\nEND\r\n");
        let keys = [Bytes::from_static(b"rk"), Bytes::from_static(b"missing")];
        let outcomes = tree
            .multiget(&keys, tailtrim_client::MultigetKind::Get)
            .await;
        assert!(matches!(&outcomes[0], Ok(Some(item)) if item.value().as_ref() == b"hi"));
        assert!(matches!(&outcomes[1], Ok(None)));
        // The same bytes as the leaf alone.
        let direct = bare
            .read(
                b"rk",
                Bytes::from_static(b"get rk\r\n"),
                ReplyShape::UntilEnd,
            )
            .await
            .expect("get");
        assert_eq!(direct.bytes, read.bytes);

        let owner = format!("127.0.0.1:{}", backend.port);
        let log = captured.text();
        let decisions: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("route decision"))
            .collect();
        assert_eq!(decisions.len(), 3, "{log}");
        assert!(decisions[0].contains("op=\"write\"") || decisions[0].contains("op=write"));
        for decision in &decisions[..2] {
            assert!(decision.contains("key=rk"), "{decision}");
            assert!(decision.contains(&format!("owner={owner}")), "{decision}");
            assert!(decision.contains("outcome=ok"), "{decision}");
            assert!(decision.contains("next=\"timeout\"") || decision.contains("next=timeout"));
        }
        assert!(decisions[2].contains("keys=2"), "{}", decisions[2]);
        assert!(decisions[2].contains("hits=1"), "{}", decisions[2]);

        // A stopped backend: the backend request would wait its 10 s timeout, the route
        // gives up at 300 ms.
        backend.signal("STOP");
        let stalled = tokio::time::timeout(
            Duration::from_secs(8),
            tree.read(
                b"rk",
                Bytes::from_static(b"get rk\r\n"),
                ReplyShape::UntilEnd,
            ),
        )
        .await
        .expect("the route's bound came first");
        backend.signal("CONT");
        assert!(
            matches!(stalled, Err(ClientError::RouteTimeout { after_ms: 300 })),
            "{stalled:?}"
        );
        assert!(captured
            .text()
            .contains("failed: request timed out after 300 ms"));
    });
}

#[test]
fn unknown_routes_and_a_timeout_without_its_bound_are_refused() {
    let cluster = cluster_over(1, Duration::from_millis(100));
    let Err(unknown) = build_tree(&cluster, &[route("shadow-everything", None)]) else {
        panic!("an unknown route was accepted");
    };
    assert!(
        unknown
            .to_string()
            .contains("expected one of logging, timeout, shadow, warmup, failover, planner, gate"),
        "{unknown}"
    );
    assert!(build_tree(&cluster, &[route("timeout", None)]).is_err());
    assert!(build_tree(&cluster, &[route("timeout", Some(0))]).is_err());
}

/// The `[pool]`-keys way and the `[[routes]]` way to the same pool: three replicas-of-two
/// servers, Rein's planner, a gate of one request per backend served by deficit round robin.
/// Above the pool a `timeout`, not `logging`: tracing caches whether a log line is wanted
/// once per process, and the logging test reads its lines from a subscriber of its own.
fn both_ways(ports: &[u16]) -> (PoolConfig, PoolConfig) {
    // Long enough that a loaded host fails no request by time (it only bounds a hang).
    let timeout = Duration::from_secs(10);
    let mut by_keys = config_over(ports, timeout);
    by_keys.replicas = 2;
    by_keys.planner = PlannerKind::ReinSbf;
    by_keys.window = Some(1);
    by_keys.priority_order = Some(Discipline::Drr);
    configure_pool(&mut by_keys, &[route("timeout", Some(60_000))]).expect("no pool layer named");
    let mut by_routes = config_over(ports, timeout);
    let specs = [
        route("timeout", Some(60_000)),
        route("warmup", None),
        RouteSpec {
            replicas: Some(2),
            ..route("failover", None)
        },
        RouteSpec {
            planner: Some(PlannerKind::ReinSbf),
            ..route("planner", None)
        },
        RouteSpec {
            window: Some(1),
            priority_order: Some(Discipline::Drr),
            ..route("gate", None)
        },
    ];
    configure_pool(&mut by_routes, &specs).expect("the routes configure the pool");
    (by_keys, by_routes)
}

#[test]
fn a_tree_composed_from_routes_serves_and_fails_over_as_the_one_the_pool_keys_build() {
    if !require_binary("memcached") {
        return;
    }
    let mut backends = [start_memcached(), start_memcached(), start_memcached()];
    let ports: Vec<u16> = backends.iter().map(|backend| backend.port).collect();
    let (by_keys, by_routes) = both_ways(&ports);
    let settings = |config: &PoolConfig| {
        (
            pool_layers(config),
            config.replicas,
            config.planner,
            config.effective_window(),
            config.gate_order(),
        )
    };
    assert_eq!(settings(&by_routes), settings(&by_keys));
    assert_eq!(pool_layers(&by_keys), ["failover", "planner", "gate"]);
    runtime().block_on(async {
        let keyed = Cluster::new(by_keys, TrackerConfig::default()).expect("cluster");
        let routed = Cluster::new(by_routes, TrackerConfig::default()).expect("cluster");
        let gates = |cluster: &Cluster| -> Vec<Option<(usize, Discipline)>> {
            let pool = cluster.current();
            let backends = pool.backends();
            let gate = |backend: &Arc<tailtrim_client::backend::Backend>| {
                backend
                    .gate()
                    .map(|gate| (gate.window(), gate.discipline()))
            };
            backends.iter().map(gate).collect()
        };
        assert_eq!(gates(&routed), gates(&keyed));
        assert_eq!(gates(&keyed)[0], Some((1, Discipline::Drr)));
        let keyed_tree = build_tree(&keyed, &[route("timeout", Some(60_000))]).expect("tree");
        let routed_tree = build_tree(
            &routed,
            &[route("timeout", Some(60_000)), route("warmup", None)],
        )
        .expect("tree");
        let keys: Vec<Bytes> = (0..24).map(|i| Bytes::from(format!("ck{i}"))).collect();
        // Writes through one tree are read back alike through both: the same replicas.
        for (i, key) in keys.iter().enumerate() {
            let tree = if i % 2 == 0 {
                &keyed_tree
            } else {
                &routed_tree
            };
            let set = format!(
                "set {} 0 0 1\r\n{}\r\n",
                String::from_utf8_lossy(key),
                i % 10
            );
            let stored = tree.write(key, Bytes::from(set), ReplyShape::Single).await;
            assert_eq!(stored.expect("set").bytes.as_ref(), b"STORED\r\n");
        }
        let values = |outcomes: Vec<tailtrim_client::KeyResult>| -> Vec<Option<Bytes>> {
            outcomes
                .into_iter()
                .map(|outcome| outcome.expect("key served").map(|item| item.value()))
                .collect()
        };
        let mut asked = keys.clone();
        asked.push(Bytes::from_static(b"ck-missing"));
        let through_keys = values(keyed_tree.multiget(&asked, MultigetKind::Get).await);
        assert_eq!(
            through_keys.iter().filter(|value| value.is_some()).count(),
            24
        );
        assert_eq!(
            values(routed_tree.multiget(&asked, MultigetKind::Get).await),
            through_keys
        );
        // One server gone: both fail over to the other replica, key for key alike.
        backends[1].kill();
        for key in &keys {
            let get = Bytes::from(format!("get {}\r\n", String::from_utf8_lossy(key)));
            let a = keyed_tree
                .read(key, get.clone(), ReplyShape::UntilEnd)
                .await;
            let b = routed_tree.read(key, get, ReplyShape::UntilEnd).await;
            assert_eq!(
                b.expect("routed read fails over").bytes,
                a.expect("keyed read fails over").bytes
            );
        }
        assert_eq!(
            values(routed_tree.multiget(&asked, MultigetKind::Get).await),
            through_keys
        );
        // Without the failover layer a key has one copy: the dead server's keys fail.
        let mut single = config_over(&ports, Duration::from_secs(10));
        let specs = [route("planner", None), route("gate", None)];
        configure_pool(&mut single, &specs).expect("no failover");
        assert_eq!(pool_layers(&single), ["gate"]);
        let single = Cluster::new(single, TrackerConfig::default()).expect("cluster");
        let outcomes = build_tree(&single, &specs)
            .expect("tree")
            .multiget(&asked, MultigetKind::Get)
            .await;
        assert!(outcomes.iter().any(Result::is_err));
    });
}

#[test]
fn an_order_that_makes_no_sense_and_a_pool_key_without_its_layer_are_refused() {
    let refused = |specs: &[RouteSpec]| -> String {
        let mut config = config_over(&[1, 2, 3], Duration::from_millis(100));
        config.replicas = 2;
        let configured = configure_pool(&mut config, specs);
        let cluster = Cluster::new(
            config_over(&[1], Duration::from_millis(100)),
            TrackerConfig::default(),
        )
        .expect("cluster");
        let built = build_tree(&cluster, specs);
        match (configured, built) {
            (Err(error), Err(_)) => error.to_string(),
            (configured, built) => panic!(
                "{specs:?} accepted: {:?} / {:?}",
                configured.err(),
                built.err().map(|error| error.to_string())
            ),
        }
    };
    let gate_above_planner = refused(&[route("gate", None), route("planner", None)]);
    assert!(
        gate_above_planner.contains("\"planner\" cannot follow \"gate\"")
            && gate_above_planner.contains("warmup, failover, planner, gate in this order"),
        "{gate_above_planner}"
    );
    let logging_below = refused(&[route("warmup", None), route("logging", None)]);
    assert!(
        logging_below.contains("\"logging\" cannot follow \"warmup\"")
            && logging_below.contains("(logging, timeout, shadow) come before warmup"),
        "{logging_below}"
    );
    for specs in [
        vec![route("failover", None), route("failover", None)],
        vec![route("failover", None), route("warmup", None)],
        vec![route("planner", None), route("timeout", Some(5))],
        vec![route("warmup", None), route("warmup", None)],
    ] {
        assert!(
            refused(&specs).starts_with("config: route order: "),
            "{specs:?}"
        );
    }
    // A [pool] key whose layer the routes leave out.
    let mut replicated = config_over(&[1, 2, 3], Duration::from_millis(100));
    replicated.replicas = 2;
    let Err(without_failover) = configure_pool(&mut replicated, &[route("planner", None)]) else {
        panic!("replicas without the failover route were accepted");
    };
    assert!(
        without_failover
            .to_string()
            .contains("[pool] replicas = 2 needs the failover route"),
        "{without_failover}"
    );
    // Naming only the routes above the pool leaves the [pool] keys in charge.
    let before = format!("{replicated:?}");
    configure_pool(
        &mut replicated,
        &[route("logging", None), route("warmup", None)],
    )
    .expect("no pool layer named");
    assert_eq!(format!("{replicated:?}"), before);
    let cluster = cluster_over(1, Duration::from_millis(100));
    assert!(build_tree(&cluster, &[route("shadow", None)]).is_err());
}

#[test]
fn shadow_mirrors_a_sampled_share_of_requests_and_never_waits_for_its_pool() {
    if !require_binary("memcached") {
        return;
    }
    let primary = start_memcached();
    let mirror = start_memcached();
    runtime().block_on(async {
        // A backend request may wait 10 s; the shadow pool inherits that.
        let cluster = cluster_over(primary.port, Duration::from_secs(10));
        let shadow = RouteSpec {
            servers: servers(&[&mirror]),
            sample_every: Some(2),
            ..route("shadow", None)
        };
        let tree = build_tree(&cluster, &[shadow]).expect("tree");
        assert_eq!(tree.name(), "shadow");
        let keys: Vec<Bytes> = (0..10).map(|i| Bytes::from(format!("sk{i}"))).collect();
        for key in &keys {
            let set = format!("set {} 0 0 2\r\nhi\r\n", String::from_utf8_lossy(key));
            let stored = tree.write(key, Bytes::from(set), ReplyShape::Single).await;
            assert_eq!(stored.expect("set").bytes.as_ref(), b"STORED\r\n");
        }
        let held = |port: u16| {
            let keys = keys.clone();
            async move {
                let pool = Pool::new(config_over(&[port], Duration::from_secs(10))).expect("pool");
                let found = pool.get_many(&keys).await.expect("read back");
                found.iter().map(Option::is_some).collect::<Vec<bool>>()
            }
        };
        assert!(held(primary.port).await.iter().all(|held| *held));
        // The mirrors run on their own tasks: wait for them (a bound on a hang only).
        let every_second: Vec<bool> = (0..10).map(|i| i % 2 == 1).collect();
        let mirrored = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let found = held(mirror.port).await;
                if found.iter().filter(|held| **held).count() >= 5 {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the sampled writes reached the shadow pool");
        assert_eq!(mirrored, every_second);

        // A stopped shadow server: the requests still get the primary's reply, not waiting
        // the shadow pool's 10 s backend timeout (the bound below only catches a hang).
        mirror.signal("STOP");
        for key in &keys {
            let get = Bytes::from(format!("get {}\r\n", String::from_utf8_lossy(key)));
            let read = tokio::time::timeout(
                Duration::from_secs(8),
                tree.read(key, get, ReplyShape::UntilEnd),
            )
            .await
            .expect("the reply did not wait for the shadow");
            assert!(read.expect("get").bytes.starts_with(b"VALUE "));
        }
        mirror.signal("CONT");
    });
}
