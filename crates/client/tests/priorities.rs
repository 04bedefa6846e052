//! Rein's priorities and TailX's delays in front of stock memcached: the pool queues requests
//! by class behind a bounded window per backend, so a high-priority request overtakes a
//! queued low-priority backlog; multigets through rein-sbf, rein-sds, tailx, cost-rel and
//! size-rel (which sends a backend's second large value as a fetch of its own) return the same
//! values as batch.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tailtrim_client::testkit::{require_binary, start_memcached, ChildGuard};
use tailtrim_client::{Pool, PoolConfig, ReplyShape, ServerSpec};
use tailtrim_policy::planner::PlannerKind;

fn pool_over(backends: &[ChildGuard], planner: PlannerKind, window: Option<usize>) -> Pool {
    let servers = backends
        .iter()
        .map(|backend| ServerSpec::parse(&format!("127.0.0.1:{}:1", backend.port)).expect("spec"))
        .collect();
    let mut config = PoolConfig::new("test", servers);
    config.planner = planner;
    config.window = window;
    config.timeout = Duration::from_secs(5);
    config.planner_settings.tailx.min_delay_nanos = 0;
    Pool::new(config).expect("pool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_request_overtakes_a_queued_low_priority_backlog() {
    if !require_binary("memcached") {
        return;
    }
    let backend = start_memcached();
    let pool = Arc::new(pool_over(
        std::slice::from_ref(&backend),
        PlannerKind::ReinSbf,
        Some(1),
    ));
    assert!(pool.set(b"k", 0, 0, b"v").await.expect("set"));
    backend.signal("STOP");
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    let get = || Bytes::from_static(b"get k\r\n");
    // One request takes the window's only slot, 20 of class 4 queue behind it, then one of
    // class 0 arrives last.
    let order: Vec<(usize, &str)> = std::iter::once((4, "first"))
        .chain((0..20).map(|_| (4, "low")))
        .chain(std::iter::once((0, "high")))
        .collect();
    for (class, name) in order {
        let task_pool = pool.clone();
        let done = done_tx.clone();
        tasks.push(tokio::spawn(async move {
            let reply = task_pool.backends()[0]
                .call_in(get(), ReplyShape::UntilEnd, class)
                .await
                .expect("get");
            assert_eq!(reply.values.len(), 1);
            let _ = done.send(name);
        }));
        // Let each request reach the gate before the next one is created.
        while pool.backends()[0]
            .gate()
            .map_or(0, |g| g.waiting() + g.in_flight())
            < tasks.len()
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let gate = pool.backends()[0].gate().expect("a window makes a gate");
    assert_eq!(gate.waiting(), 21);
    backend.signal("CONT");
    drop(done_tx);
    let mut finished = Vec::new();
    while let Some(name) = done_rx.recv().await {
        finished.push(name);
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(finished.len(), 22);
    assert_eq!(&finished[..2], &["first", "high"], "order: {finished:?}");
    assert_eq!(gate.queued[0].get(), 1);
    assert_eq!(gate.queued[4].get(), 20);
}

/// A multiget whose planner sets no priority (batch) is not held by the window: there is no
/// order for the queue to apply. It still counts in the window, so that a classed request
/// behind it waits. (Before: held like a class-0 request, one per slot.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multiget_without_a_priority_is_counted_in_the_window_but_not_held() {
    if !require_binary("memcached") {
        return;
    }
    let backend = start_memcached();
    let pool = Arc::new(pool_over(
        std::slice::from_ref(&backend),
        PlannerKind::Batch,
        Some(1),
    ));
    assert!(pool.set(b"k", 0, 0, b"v").await.expect("set"));
    backend.signal("STOP");
    let gate = || pool.backends()[0].gate().expect("a window makes a gate");
    let first_pool = pool.clone();
    let first = tokio::spawn(async move {
        first_pool.backends()[0]
            .call_in(Bytes::from_static(b"get k\r\n"), ReplyShape::UntilEnd, 0)
            .await
            .expect("get")
    });
    while gate().in_flight() < 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let multiget_pool = pool.clone();
    let multiget = tokio::spawn(async move {
        let keys = [Bytes::from_static(b"k"), Bytes::from_static(b"absent")];
        multiget_pool.get_many(&keys).await.expect("multiget")
    });
    while gate().in_flight() + gate().waiting() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!((gate().in_flight(), gate().waiting()), (2, 0));
    // A classed request finds the window full and waits.
    let classed_pool = pool.clone();
    let classed = tokio::spawn(async move {
        classed_pool.backends()[0]
            .call_in(Bytes::from_static(b"get k\r\n"), ReplyShape::UntilEnd, 0)
            .await
            .expect("get")
    });
    while gate().waiting() < 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    backend.signal("CONT");
    assert_eq!(first.await.expect("task").values.len(), 1);
    let values = multiget.await.expect("task");
    assert!(values[0].is_some() && values[1].is_none());
    assert_eq!(classed.await.expect("task").values.len(), 1);
    assert_eq!((gate().in_flight(), gate().waiting()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multigets_through_every_planner_return_the_stored_values() {
    if !require_binary("memcached") {
        return;
    }
    let backends: Vec<ChildGuard> = (0..3).map(|_| start_memcached()).collect();
    let keys: Vec<Bytes> = (0..120).map(|i| Bytes::from(format!("mk:{i}"))).collect();
    let loader = pool_over(&backends, PlannerKind::Batch, None);
    for (i, key) in keys.iter().enumerate() {
        // Every 10th value is large (64 KB), the others 100 B.
        let size = if i % 10 == 0 { 65_536 } else { 100 };
        let mut value = key.to_vec();
        value.resize(size, b'.');
        assert!(loader.set(key, 0, 0, &value).await.expect("set"));
    }
    let mut batch_fetches: Option<u64> = None;
    for planner in [
        PlannerKind::Batch,
        PlannerKind::ReinSbf,
        PlannerKind::ReinSds,
        PlannerKind::Tailx,
        PlannerKind::CostRel,
        PlannerKind::SizeRel,
    ] {
        let pool = pool_over(&backends, planner, None);
        for round in 0..40 {
            let asked: Vec<Bytes> = keys
                .iter()
                .cycle()
                .skip(round * 7)
                .take(5 + (round % 3) * 40)
                .cloned()
                .collect();
            let values = pool.get_many(&asked).await.expect("multiget");
            for (key, value) in asked.iter().zip(values) {
                let value = value.expect("hit");
                assert!(value.data.starts_with(key), "{planner:?}: wrong value");
            }
        }
        let gauges = pool.planner_gauges();
        let gauge = |name: &str| {
            gauges
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| *v)
                .expect(name)
        };
        if planner == PlannerKind::Tailx {
            // 4800 values seen: THR_L learned (8 × the 100 B median's bucket), the 64 KB keys
            // in the filter, and opsets holding none of them delayed.
            assert_eq!(gauge("tailx_large_threshold_bytes"), 8.0 * 127.0);
            assert!(gauge("tailx_filter_keys") >= 12.0);
            // T_S and T_L are learned from reply times. Which is larger on loopback is a
            // timing property (64 KB values against scheduling noise), not asserted here: a
            // loaded CI machine measured T_L at or below T_S once, and T_L is then T_S.
            assert!(gauge("tailx_t_small_nanos") > 0.0);
            assert!(gauge("tailx_t_large_nanos") >= gauge("tailx_t_small_nanos"));
            assert!(pool.delay_queue().delayed.get() > 0);
        }
        // One copy of each key: every planner sends a request one fetch per backend it
        // needs, as batch does; size-rel adds one per large value it sends apart.
        let fetches = pool.stats().fetches.get();
        let batch_fetches = *batch_fetches.get_or_insert(fetches);
        if planner == PlannerKind::SizeRel {
            // Its filter learned the 64 KB keys: the opsets holding one were demoted, and a
            // backend's second one in a request went as a fetch of its own.
            assert!(gauge("size_rel_large_opset_share") > 0.0);
            let apart = gauge("size_rel_large_values_apart");
            assert!(apart > 0.0);
            assert_eq!(fetches, batch_fetches + apart as u64, "{planner:?}");
        } else {
            assert_eq!(fetches, batch_fetches, "{planner:?}");
        }
        if planner.uses_priorities() {
            assert!(pool.backends().iter().all(|b| b.gate().is_some()));
        }
    }
}
