//! The `chisel` planner executed against real memcached backends: mice merged into shared
//! backend queries get their own values back, elephant chunks fan out and join, and a failed
//! chunk or merged query fails its requests instead of hanging them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use tailtrim_client::testkit::{require_binary, start_memcached, ChildGuard};
use tailtrim_client::{Pool, PoolConfig, ServerSpec};
use tailtrim_policy::health::HealthSettings;
use tailtrim_policy::planner::PlannerKind;

const TIMEOUT: Duration = Duration::from_millis(300);

fn value_for(key: &str) -> Vec<u8> {
    format!("value-of:{key}").into_bytes()
}

fn chisel_pool(backends: &[ChildGuard], merge: u32, chunk: u32, overhead: Duration) -> Pool {
    let servers = backends
        .iter()
        .map(|backend| ServerSpec::parse(&format!("127.0.0.1:{}:1", backend.port)).expect("spec"))
        .collect();
    let mut config = PoolConfig::new("chisel", servers);
    config.planner = PlannerKind::Chisel;
    config.chisel_fixed = Some((merge, chunk));
    config.inject_overhead = overhead;
    config.timeout = TIMEOUT;
    config.health = HealthSettings {
        failure_limit: 100,
        retry_after_nanos: 1_000_000_000,
    };
    Pool::new(config).expect("pool")
}

async fn store(pool: &Pool, keys: &[String]) {
    for key in keys {
        assert!(pool
            .set(key.as_bytes(), 0, 0, &value_for(key))
            .await
            .expect("set"));
    }
}

fn as_bytes(keys: &[String]) -> Vec<Bytes> {
    keys.iter().map(|k| Bytes::from(k.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_mice_each_get_their_own_values_in_their_own_order() {
    if !require_binary("memcached") {
        return;
    }
    let backends = vec![start_memcached()];
    // A 3 ms setup: every mouse arriving meanwhile joins the query (up to 8 per query).
    let pool = Arc::new(chisel_pool(
        &backends,
        8,
        u32::MAX,
        Duration::from_millis(3),
    ));
    let stored: Vec<String> = (0..120).map(|i| format!("m:{i}")).collect();
    store(&pool, &stored).await;
    let before = pool.stats().queries.get();
    // 40 mice of 4 keys: 3 stored keys in a request-specific order plus a miss, and some
    // keys shared between requests.
    let requests: Vec<Vec<String>> = (0..40)
        .map(|r| {
            vec![
                format!("m:{}", (r * 3 + 2) % 120),
                format!("absent:{r}"),
                format!("m:{}", r * 3 % 120),
                format!("m:{}", (r + 1) % 120),
            ]
        })
        .collect();
    let replies = join_all(requests.iter().map(|keys| {
        let pool = pool.clone();
        let keys = as_bytes(keys);
        async move { pool.get_many(&keys).await }
    }))
    .await;
    for (keys, reply) in requests.iter().zip(replies) {
        let values = reply.expect("merged read");
        assert_eq!(values.len(), keys.len());
        for (key, value) in keys.iter().zip(values) {
            match value {
                Some(value) => assert_eq!(value.data.as_ref(), value_for(key).as_slice()),
                None => assert!(key.starts_with("absent:"), "{key} missed"),
            }
        }
    }
    let queries = pool.stats().queries.get() - before;
    let merged = pool.shaper().merged_requests.get();
    assert!(merged > 0, "no request was merged");
    assert!(
        (40 / 8..40).contains(&queries),
        "{queries} queries for 40 mice"
    );
    assert!(pool.shaper().merged_queries.get() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elephant_split_into_chunks_joins_every_value() {
    if !require_binary("memcached") {
        return;
    }
    let backends: Vec<ChildGuard> = (0..2).map(|_| start_memcached()).collect();
    let pool = chisel_pool(&backends, 1, 7, Duration::ZERO);
    let stored: Vec<String> = (0..100).map(|i| format!("e:{i}")).collect();
    store(&pool, &stored).await;
    let mut asked = stored.clone();
    asked.reverse();
    asked.push("absent".to_string());
    let before = pool.stats().queries.get();
    let values = pool.get_many(&as_bytes(&asked)).await.expect("elephant");
    for (key, value) in asked.iter().zip(&values) {
        match value {
            Some(value) => assert_eq!(value.data.as_ref(), value_for(key).as_slice()),
            None => assert_eq!(key, "absent"),
        }
    }
    // 101 keys over 2 backends in chunks of at most 7: at least 15 queries.
    assert!(pool.stats().queries.get() - before >= 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_backend_fails_chunks_and_merged_mice_within_the_timeout() {
    if !require_binary("memcached") {
        return;
    }
    let backends: Vec<ChildGuard> = (0..2).map(|_| start_memcached()).collect();
    let pool = Arc::new(chisel_pool(&backends, 4, 10, Duration::from_millis(2)));
    let stored: Vec<String> = (0..100).map(|i| format!("f:{i}")).collect();
    store(&pool, &stored).await;
    let victim = 1;
    backends[victim].signal("STOP");
    let on_victim: Vec<String> = stored
        .iter()
        .filter(|key| pool.ring().server_for(key.as_bytes()) == victim)
        .cloned()
        .collect();
    let on_other: Vec<String> = stored
        .iter()
        .filter(|key| pool.ring().server_for(key.as_bytes()) != victim)
        .cloned()
        .collect();
    assert!(on_victim.len() > 10 && on_other.len() > 10);
    let started = Instant::now();
    // An elephant with chunks on both backends, mice merged on the stopped one, and mice
    // on the live one.
    let all = as_bytes(&stored);
    let elephant = pool.get_many(&all);
    let dead_mice = join_all((0..4).map(|i| {
        let pool = pool.clone();
        let keys = as_bytes(&on_victim[i * 2..i * 2 + 2]);
        async move { pool.get_many(&keys).await }
    }));
    let live_mice = join_all((0..4).map(|i| {
        let pool = pool.clone();
        let keys = as_bytes(&on_other[i * 2..i * 2 + 2]);
        async move { pool.get_many(&keys).await }
    }));
    let (elephant, dead, live) = tokio::time::timeout(
        TIMEOUT * 10,
        futures_util::future::join3(elephant, dead_mice, live_mice),
    )
    .await
    .expect("a request hung on a stopped backend");
    assert!(started.elapsed() < TIMEOUT * 5);
    assert!(
        elephant.is_err(),
        "an elephant with a failed chunk must fail"
    );
    assert!(dead.iter().all(Result::is_err), "merged mice must fail");
    for reply in live {
        assert!(reply.expect("live backend").iter().all(Option::is_some));
    }
    backends[victim].signal("CONT");
}
