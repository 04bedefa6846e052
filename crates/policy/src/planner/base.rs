//! The planner contract every multiget planner implements: [`Planner`], what it sees of the
//! cluster ([`ClusterView`]), what it is asked ([`PlanRequest`]) and answers ([`Action`],
//! [`Fetch`]), what it is told back ([`Observation`]); and the state of practice,
//! [`BatchPlanner`], with the grouping ([`group_by_backend`]) other planners start from.
//! Planners depend on this module; the factory ([`crate::planner::PlannerKind`]) sits above them.

use crate::health::{choose_replica, BackendLoad, Timestamp};
use crate::serverq::Discipline;
use crate::spread::ReplicaChoice;

/// A read of one or more keys.
#[derive(Debug, Clone, Copy)]
pub struct PlanRequest<'a> {
    /// Keys in the client's order (duplicates allowed).
    pub keys: &'a [&'a [u8]],
    /// Time at which the plan is made.
    pub now: Timestamp,
}

/// What a planner may know about the cluster.
pub trait ClusterView {
    /// Number of backends; backend ids are `0..backend_count()`.
    fn backend_count(&self) -> usize;
    /// Fills `out` with the backends holding `key`, in preference order (owner first).
    fn replicas(&self, key: &[u8], out: &mut Vec<usize>);
    /// Load and availability of `backend`.
    fn load(&self, backend: usize) -> BackendLoad;
    /// The estimated work of a one-key fetch, in the unit of [`BackendLoad::outstanding_work`],
    /// where the runtime estimates work; `None` by default.
    fn fetch_work(&self) -> Option<f64> {
        None
    }
}

/// One request to send to one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// Target backend id.
    pub backend: usize,
    /// Indices into [`PlanRequest::keys`], ascending.
    pub keys: Vec<u32>,
    /// Do not send before this time (`None`: at once).
    pub not_before: Option<Timestamp>,
    /// Priority class for backends that understand it, 0 (highest) to
    /// [`crate::drr::CLASSES`]` - 1` (`None`: default, served as class 0); the planner's
    /// [`Planner::discipline`] says how servers order the classes.
    pub priority: Option<u8>,
}

/// A planner decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send a multiget for some keys to one backend.
    Fetch(Fetch),
    /// No backend can serve these keys now (all replicas down): fail them fast.
    Unavailable {
        /// Indices into [`PlanRequest::keys`], ascending.
        keys: Vec<u32>,
    },
}

/// What the runtime saw for one completed fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Backend that answered.
    pub backend: usize,
    /// Keys asked for.
    pub keys: u32,
    /// Keys found.
    pub hits: u32,
    /// Value bytes returned.
    pub value_bytes: u64,
    /// Time from send to the last byte of the reply.
    pub latency_nanos: u64,
    /// When the reply completed.
    pub at: Timestamp,
}

/// What the runtime saw for one completed request (all its fetches in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestDone {
    /// Keys the request asked for.
    pub keys: u32,
    /// Time from the request's arrival to its last reply.
    pub latency_nanos: u64,
    /// When the request completed.
    pub at: Timestamp,
}

/// How a query-reshaping planner (Chisel) sizes backend queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryShape {
    /// `B`: mice requests that may share one backend query (1 = no merging).
    pub merge_level: u32,
    /// `L`: most keys in one elephant chunk (`u32::MAX` or ≥ the request = no splitting).
    pub chunk_size: u32,
    /// Requests with more keys than this are elephants; the others are mice.
    pub elephant_threshold: u32,
}

/// A multiget scheduler.
pub trait Planner: Send {
    /// Config name (`batch`, …).
    fn name(&self) -> &'static str;
    /// Decides how to fetch `request.keys`. Every key index appears in exactly one action.
    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action>;
    /// Feedback after a fetch completes. Default: ignored.
    fn observe(&mut self, _observation: &Observation) {}
    /// Feedback after a whole request completes. Default: ignored.
    fn observe_request(&mut self, _done: &RequestDone) {}
    /// How many requests of `keys` keys may share one backend query while it is being set up
    /// (the runtime merges fetches of such requests to the same backend). Default: 1, never.
    fn merge_limit(&self, _keys: usize) -> u32 {
        1
    }
    /// The current query shape, for planners that reshape queries. Default: `None`.
    fn shape(&self) -> Option<QueryShape> {
        None
    }
    /// Sets the query shape (an online analyzer's decision). Default: ignored.
    fn set_shape(&mut self, _shape: QueryShape) {}
    /// True if the planner wants [`Planner::observe_value`] calls. Default: false.
    fn wants_values(&self) -> bool {
        false
    }
    /// The size of one value a completed fetch returned; the runtime calls it for each value
    /// of a fetch just before [`Planner::observe`] for that fetch. Default: ignored.
    fn observe_value(&mut self, _key: &[u8], _value_bytes: u64) {}
    /// The work `fetch` (one this planner planned for `request`) brings its backend, counted in
    /// small keys: what the runtime adds to that backend's work in flight, which the covering
    /// replica choice weighs backends by ([`crate::spread::backlog`]). Default: its keys.
    /// Planners that know which keys are large count a large one as T_L / T_S small ones.
    fn fetch_work_keys(&self, _request: &PlanRequest<'_>, fetch: &Fetch) -> f64 {
        fetch.keys.len() as f64
    }
    /// How servers (or the proxy's gate) should order this planner's prioritized fetches.
    /// Default: strict priority (planners without priorities set none, so it orders nothing).
    fn discipline(&self) -> Discipline {
        Discipline::Strict
    }
    /// The planner that plans now, for planners that choose between others. Default: `None`.
    fn choice(&self) -> Option<&'static str> {
        None
    }
    /// How many of Chisel's online analyzer epochs one analysis spans for this planner (the
    /// runtime — the proxy, the simulator — asks once an epoch has passed, and analyzes the
    /// load of the whole span). Default: 1, every epoch.
    fn analyzer_epochs(&self) -> u32 {
        1
    }
    /// The planner's current decisions and estimates as named numbers, for stats and
    /// Prometheus (names `<planner>_<what>`). Default: none.
    fn gauges(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

/// Picks the backend for one key: the cheapest available replica (C3 rule), or `None`.
pub fn route_key(key: &[u8], view: &dyn ClusterView, scratch: &mut Vec<usize>) -> Option<usize> {
    view.replicas(key, scratch);
    choose_replica(scratch, |backend| view.load(backend))
}

/// Batch's opsets: every key to its chosen replica (C3), one fetch per backend (ordered by the
/// first key that needs it, keys ascending, no start time or priority), plus the keys no
/// replica can serve.
pub fn group_by_backend(
    request: &PlanRequest<'_>,
    view: &dyn ClusterView,
    scratch: &mut Vec<usize>,
) -> (Vec<Fetch>, Vec<u32>) {
    group_with(request, view, ReplicaChoice::C3, scratch)
}

/// [`group_by_backend`] with each key's replica picked by `choice` (which may look at the keys
/// of the request already planned on each backend).
pub fn group_with(
    request: &PlanRequest<'_>,
    view: &dyn ClusterView,
    choice: ReplicaChoice,
    scratch: &mut Vec<usize>,
) -> (Vec<Fetch>, Vec<u32>) {
    let mut fetches: Vec<Fetch> = Vec::new();
    // Inline for pools of up to 16 backends: no allocation per request for the index.
    let mut slot_of: smallvec::SmallVec<[u32; 16]> =
        smallvec::smallvec![u32::MAX; view.backend_count()];
    let mut unavailable: Vec<u32> = Vec::new();
    let covered = (choice == ReplicaChoice::Cover).then(|| {
        let replicas: Vec<smallvec::SmallVec<[usize; 4]>> = request
            .keys
            .iter()
            .map(|key| {
                view.replicas(key, scratch);
                scratch
                    .iter()
                    .copied()
                    .filter(|&backend| view.load(backend).available)
                    .collect()
            })
            .collect();
        let fetch_work = view.fetch_work();
        crate::spread::cover(&replicas, view.backend_count(), |backend| {
            crate::spread::backlog(&view.load(backend), fetch_work)
        })
    });
    for (index, key) in request.keys.iter().enumerate() {
        let chosen_by_cover = covered.as_ref().map(|assigned| assigned[index]);
        let index = index as u32;
        if chosen_by_cover.is_none() {
            view.replicas(key, scratch);
        }
        let planned_on = |backend: usize| match slot_of.get(backend) {
            Some(&slot) if slot != u32::MAX => fetches[slot as usize].keys.len(),
            Some(_) => 0,
            None => fetches
                .iter()
                .find(|f| f.backend == backend)
                .map_or(0, |f| f.keys.len()),
        };
        let chosen = match chosen_by_cover {
            Some(chosen) => chosen,
            None => choice.choose(scratch, planned_on, |backend| view.load(backend)),
        };
        match chosen {
            Some(backend) => {
                let known = match slot_of.get(backend) {
                    Some(&slot) if slot != u32::MAX => Some(slot as usize),
                    Some(_) => None,
                    None => fetches.iter().position(|f| f.backend == backend),
                };
                let slot = known.unwrap_or_else(|| {
                    if let Some(entry) = slot_of.get_mut(backend) {
                        *entry = fetches.len() as u32;
                    }
                    fetches.push(Fetch {
                        backend,
                        // One allocation per fetch, not one per doubling.
                        keys: Vec::with_capacity(request.keys.len() - index as usize),
                        not_before: None,
                        priority: None,
                    });
                    fetches.len() - 1
                });
                fetches[slot].keys.push(index);
            }
            None => unavailable.push(index),
        }
    }
    (fetches, unavailable)
}

/// The state of practice: every key goes to its chosen replica, one fetch per backend, fetches
/// ordered by the first key that needs them.
#[derive(Debug, Default, Clone)]
pub struct BatchPlanner {
    choice: ReplicaChoice,
    scratch: Vec<usize>,
}

impl BatchPlanner {
    /// Batch with each key's replica picked by `choice` (the default is C3's).
    pub fn with_replica_choice(choice: ReplicaChoice) -> Self {
        BatchPlanner {
            choice,
            scratch: Vec::new(),
        }
    }
}

impl Planner for BatchPlanner {
    fn name(&self) -> &'static str {
        "batch"
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let (fetches, unavailable) = group_with(request, view, self.choice, &mut self.scratch);
        into_actions(fetches, unavailable)
    }
}

/// A plan's actions: every fetch, then the keys no replica can serve (if any).
pub fn into_actions(fetches: Vec<Fetch>, unavailable: Vec<u32>) -> Vec<Action> {
    let mut actions: Vec<Action> = fetches.into_iter().map(Action::Fetch).collect();
    if !unavailable.is_empty() {
        actions.push(Action::Unavailable { keys: unavailable });
    }
    actions
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ring::{Ring, RingOptions, RingServer};

    /// A ring-backed view with settable loads, shared by the planners' tests.
    pub(crate) struct TestView {
        pub(crate) ring: Ring,
        pub(crate) copies: usize,
        pub(crate) loads: Vec<BackendLoad>,
        /// [`ClusterView::fetch_work`] (`None` in [`view`]).
        pub(crate) fetch_work: Option<f64>,
    }

    impl ClusterView for TestView {
        fn backend_count(&self) -> usize {
            self.ring.server_count()
        }
        fn replicas(&self, key: &[u8], out: &mut Vec<usize>) {
            self.ring.replicas_for(key, self.copies, out);
        }
        fn load(&self, backend: usize) -> BackendLoad {
            self.loads[backend]
        }
        fn fetch_work(&self) -> Option<f64> {
            self.fetch_work
        }
    }

    pub(crate) fn view(servers: usize, copies: usize) -> TestView {
        let list: Vec<RingServer> = (0..servers)
            .map(|index| RingServer {
                name: format!("10.0.0.{index}:11311"),
                weight: 1,
            })
            .collect();
        TestView {
            ring: Ring::new(
                &list,
                RingOptions {
                    hash: crate::ring::HashFunction::Md5,
                    ..RingOptions::default()
                },
            )
            .unwrap(),
            copies,
            loads: vec![
                BackendLoad {
                    outstanding: 0,
                    outstanding_work: None,
                    demoted_work: None,
                    ewma_nanos: Some(100.0),
                    available: true
                };
                servers
            ],
            fetch_work: None,
        }
    }

    pub(crate) fn keys(count: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| format!("key-{i}").into_bytes())
            .collect()
    }

    /// Plans `owned` keys at time 0 with `planner`.
    pub(crate) fn plan_with(
        planner: &mut dyn Planner,
        view: &TestView,
        owned: &[Vec<u8>],
    ) -> Vec<Action> {
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let request = PlanRequest {
            keys: &borrowed,
            now: Timestamp(0),
        };
        planner.plan(&request, view)
    }

    fn plan(view: &TestView, owned: &[Vec<u8>]) -> Vec<Action> {
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let request = PlanRequest {
            keys: &borrowed,
            now: Timestamp(0),
        };
        BatchPlanner::default().plan(&request, view)
    }

    fn fetch_count(actions: &[Action]) -> usize {
        actions
            .iter()
            .filter(|action| matches!(action, Action::Fetch(_)))
            .count()
    }

    #[test]
    fn cover_plans_fewer_fetches_than_c3_and_still_every_key_once() {
        let view = view(16, 3);
        let owned = keys(20);
        let c3 = fetch_count(&plan(&view, &owned));
        let mut covering = BatchPlanner::with_replica_choice(ReplicaChoice::Cover);
        let actions = plan_with(&mut covering, &view, &owned);
        assert!(
            fetch_count(&actions) < c3,
            "cover {} fetches, C3 {c3}",
            fetch_count(&actions)
        );
        let mut seen = vec![0u32; owned.len()];
        for action in &actions {
            let Action::Fetch(fetch) = action else {
                panic!("unexpected {action:?}");
            };
            let mut replicas = Vec::new();
            for &key in &fetch.keys {
                seen[key as usize] += 1;
                view.replicas(&owned[key as usize], &mut replicas);
                assert!(
                    replicas.contains(&fetch.backend),
                    "key {key} off its replicas"
                );
            }
        }
        assert!(seen.iter().all(|&count| count == 1), "{seen:?}");
    }

    #[test]
    fn cover_skips_unavailable_backends() {
        let mut view = view(8, 2);
        view.loads[3].available = false;
        let owned = keys(40);
        let mut covering = BatchPlanner::with_replica_choice(ReplicaChoice::Cover);
        for action in plan_with(&mut covering, &view, &owned) {
            if let Action::Fetch(fetch) = action {
                assert_ne!(fetch.backend, 3);
            }
        }
    }

    #[test]
    fn batch_sends_one_fetch_per_backend_covering_every_key_once() {
        let view = view(4, 1);
        let owned = keys(100);
        let actions = plan(&view, &owned);
        let mut seen = vec![0u32; owned.len()];
        let mut backends = Vec::new();
        for action in &actions {
            let Action::Fetch(fetch) = action else {
                panic!("unexpected {action:?}");
            };
            assert!(
                !backends.contains(&fetch.backend),
                "two fetches to one backend"
            );
            backends.push(fetch.backend);
            assert!(fetch.keys.windows(2).all(|pair| pair[0] < pair[1]));
            for &index in &fetch.keys {
                seen[index as usize] += 1;
                assert_eq!(view.ring.server_for(&owned[index as usize]), fetch.backend);
            }
        }
        assert!(seen.iter().all(|&count| count == 1));
        assert_eq!(backends.len(), 4);
    }

    #[test]
    fn keys_whose_replicas_are_all_down_are_unavailable() {
        let mut view = view(3, 1);
        view.loads[1].available = false;
        let owned = keys(60);
        let actions = plan(&view, &owned);
        let mut unavailable = Vec::new();
        for action in &actions {
            match action {
                Action::Fetch(fetch) => assert_ne!(fetch.backend, 1),
                Action::Unavailable { keys } => unavailable.extend(keys.iter().copied()),
            }
        }
        let expected: Vec<u32> = (0..60u32)
            .filter(|&i| view.ring.server_for(&owned[i as usize]) == 1)
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(unavailable, expected);
    }

    #[test]
    fn replicated_reads_fail_over_and_prefer_the_cheaper_replica() {
        let mut view = view(3, 2);
        view.loads[0].available = false;
        let owned = keys(60);
        let actions = plan(&view, &owned);
        assert!(actions
            .iter()
            .all(|a| matches!(a, Action::Fetch(f) if f.backend != 0)));
        // Make backend 2 expensive: keys replicated on {1,2} go to 1.
        view.loads[0].available = true;
        view.loads[2].outstanding = 50;
        let mut scratch = Vec::new();
        for key in &owned {
            view.ring.replicas_for(key, 2, &mut scratch);
            let chosen = route_key(key, &view, &mut Vec::new()).unwrap();
            if scratch.contains(&1) && scratch.contains(&2) {
                assert_eq!(chosen, 1);
            }
            assert!(scratch.contains(&chosen));
        }
    }
}
