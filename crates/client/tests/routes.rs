//! The route tree over a real memcached: a tree of no configured routes is the cluster's
//! leaf; `logging` logs each request's route decision at debug level and changes nothing;
//! `timeout` bounds a whole request (a stopped backend with a long per-request timeout fails
//! at the route's bound); an unknown route type is refused with the names that exist.
//!
//! ```text
//!   build_tree([logging, timeout 300 ms]) ─► logging ─► timeout ─► warmup (Cluster) ─► memcached
//! ```

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tailtrim_client::testkit::{require_binary, start_memcached};
use tailtrim_client::{build_tree, ClientError, Cluster, PoolConfig, ReplyShape, RouteSpec};
use tailtrim_policy::hotkeys::TrackerConfig;

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

fn cluster_over(port: u16, timeout: Duration) -> Arc<Cluster> {
    let server = tailtrim_client::ServerSpec::parse(&format!("127.0.0.1:{port}:1")).expect("spec");
    let mut config = PoolConfig::new("routes", vec![server]);
    config.timeout = timeout;
    Cluster::new(config, TrackerConfig::default()).expect("cluster")
}

fn route(kind: &str, timeout_ms: Option<u64>) -> RouteSpec {
    RouteSpec {
        kind: kind.to_string(),
        timeout: timeout_ms.map(Duration::from_millis),
    }
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
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
            .contains("expected one of logging, timeout"),
        "{unknown}"
    );
    assert!(build_tree(&cluster, &[route("timeout", None)]).is_err());
    assert!(build_tree(&cluster, &[route("timeout", Some(0))]).is_err());
}
