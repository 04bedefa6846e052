//! Chisel's query reshaping as a planner (Birke et al., "Chisel: Reshaping Queries to Trim
//! Latency in Key-Value Stores", ICAC 2019): split elephant requests into chunks sent in
//! parallel, merge mice requests into shared backend queries.
//!
//! ```text
//!   PlanRequest{keys} ─► route every key (ring + C3 replica choice), one group per backend
//!       │                  (exactly what `batch` does)
//!       ├─ mouse (keys ≤ elephant_threshold): the groups as they are; the runtime may merge
//!       │     each with up to B − 1 other mice fetches to the same backend   (merge_limit)
//!       └─ elephant: a group of n > L keys ─► m = ⌈n / L⌉ chunks of ⌊n/m⌋ or ⌈n/m⌉ keys,
//!             chunk 0 on the group's backend, the others each on the replica (holding all its
//!             keys) that this request uses least, then the cheapest (C3)
//!   B and L come from QueryShape, set by an online analyzer (`set_shape`); the defaults
//!   (B = 1, L = ∞) plan exactly like `batch`.
//! ```
//!
//! The planner only decides; it never waits. Merging is the runtime's part: a mouse fetch may
//! join a query to the same backend that is still being set up, up to `B` requests per query.

use crate::health::{expected_cost, BackendLoad};
use crate::planner::base::{
    Action, BatchPlanner, ClusterView, Fetch, PlanRequest, Planner, QueryShape,
};

/// Requests with more keys than this are elephants (the paper's mice have 1–10 keys, its
/// elephants 100).
pub const DEFAULT_ELEPHANT_THRESHOLD: u32 = 20;

/// The shape a fresh planner starts with: no merging, no splitting (plans like `batch`).
pub const DEFAULT_SHAPE: QueryShape = QueryShape {
    merge_level: 1,
    chunk_size: u32::MAX,
    elephant_threshold: DEFAULT_ELEPHANT_THRESHOLD,
};

/// Largest merge level accepted by [`ChiselPlanner::set_shape`] (larger values are clamped).
pub const MAX_MERGE_LEVEL: u32 = 64;

/// The Chisel planner.
#[derive(Debug, Clone)]
pub struct ChiselPlanner {
    shape: QueryShape,
    batch: BatchPlanner,
    replicas: Vec<usize>,
    common: Vec<usize>,
    used: Vec<u32>,
    pending: Vec<Fetch>,
}

impl Default for ChiselPlanner {
    fn default() -> Self {
        ChiselPlanner::new(DEFAULT_SHAPE)
    }
}

impl ChiselPlanner {
    /// A planner with the given shape (see [`ChiselPlanner::set_shape`] for the bounds).
    pub fn new(shape: QueryShape) -> Self {
        let mut planner = ChiselPlanner {
            shape: DEFAULT_SHAPE,
            batch: BatchPlanner::default(),
            replicas: Vec::new(),
            common: Vec::new(),
            used: Vec::new(),
            pending: Vec::new(),
        };
        planner.set_shape(shape);
        planner
    }

    /// True when a request of `keys` keys is an elephant.
    pub fn is_elephant(&self, keys: usize) -> bool {
        keys > self.shape.elephant_threshold as usize
    }

    /// Splits one backend group into chunks of at most `L` keys, placing each.
    fn split(&mut self, fetch: Fetch, request: &PlanRequest<'_>, view: &dyn ClusterView) {
        let chunk_size = self.shape.chunk_size.max(1) as usize;
        let total = fetch.keys.len();
        let chunks = total.div_ceil(chunk_size);
        let (base, extra) = (total / chunks, total % chunks);
        let mut start = 0;
        for chunk in 0..chunks {
            let len = base + usize::from(chunk < extra);
            let keys = fetch.keys[start..start + len].to_vec();
            start += len;
            let backend = if chunk == 0 {
                fetch.backend
            } else {
                self.place(&keys, request, view).unwrap_or(fetch.backend)
            };
            self.used[backend] += 1;
            self.pending.push(Fetch {
                backend,
                keys,
                not_before: None,
                priority: None,
            });
        }
    }

    /// The available backend holding every key of a chunk that this request uses least,
    /// ties broken by the C3 expected cost, then by replica order.
    fn place(
        &mut self,
        keys: &[u32],
        request: &PlanRequest<'_>,
        view: &dyn ClusterView,
    ) -> Option<usize> {
        let (first, rest) = keys.split_first()?;
        view.replicas(request.keys[*first as usize], &mut self.common);
        for &index in rest {
            if self.common.len() <= 1 {
                break;
            }
            view.replicas(request.keys[index as usize], &mut self.replicas);
            let holders = &self.replicas;
            self.common.retain(|backend| holders.contains(backend));
        }
        let mut best: Option<(usize, u32, f64)> = None;
        for &backend in &self.common {
            let load: BackendLoad = view.load(backend);
            if !load.available {
                continue;
            }
            let used = self.used.get(backend).copied().unwrap_or(0);
            let cost = expected_cost(&load);
            let better = match best {
                None => true,
                Some((_, best_used, best_cost)) => {
                    used < best_used || (used == best_used && cost < best_cost)
                }
            };
            if better {
                best = Some((backend, used, cost));
            }
        }
        best.map(|(backend, _, _)| backend)
    }
}

impl Planner for ChiselPlanner {
    fn name(&self) -> &'static str {
        "chisel"
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let actions = self.batch.plan(request, view);
        let elephant = self.is_elephant(request.keys.len());
        if !elephant
            || actions.iter().all(
                |a| !matches!(a, Action::Fetch(f) if f.keys.len() > self.shape.chunk_size as usize),
            )
        {
            return actions;
        }
        self.used.clear();
        self.used.resize(view.backend_count(), 0);
        for action in &actions {
            if let Action::Fetch(fetch) = action {
                if let Some(count) = self.used.get_mut(fetch.backend) {
                    *count += 1;
                }
            }
        }
        let mut out = Vec::with_capacity(actions.len() * 2);
        for action in actions {
            match action {
                Action::Fetch(fetch) if fetch.keys.len() > self.shape.chunk_size as usize => {
                    // The group's own fetch is replaced by its chunks.
                    self.used[fetch.backend] -= 1;
                    self.split(fetch, request, view);
                    out.extend(self.pending.drain(..).map(Action::Fetch));
                }
                other => out.push(other),
            }
        }
        out
    }

    fn merge_limit(&self, keys: usize) -> u32 {
        if self.is_elephant(keys) {
            1
        } else {
            self.shape.merge_level
        }
    }

    fn shape(&self) -> Option<QueryShape> {
        Some(self.shape)
    }

    fn set_shape(&mut self, shape: QueryShape) {
        self.shape = QueryShape {
            merge_level: shape.merge_level.clamp(1, MAX_MERGE_LEVEL),
            chunk_size: shape.chunk_size.max(1),
            elephant_threshold: shape.elephant_threshold,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Timestamp;
    use crate::planner::base::tests::{view, TestView as View};

    fn keys(count: usize, prefix: &str) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| format!("{prefix}-{i}").into_bytes())
            .collect()
    }

    fn plan(planner: &mut ChiselPlanner, view: &View, owned: &[Vec<u8>]) -> Vec<Fetch> {
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let request = PlanRequest {
            keys: &borrowed,
            now: Timestamp(0),
        };
        planner
            .plan(&request, view)
            .into_iter()
            .map(|action| match action {
                Action::Fetch(fetch) => fetch,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    fn shape(merge_level: u32, chunk_size: u32) -> QueryShape {
        QueryShape {
            merge_level,
            chunk_size,
            elephant_threshold: DEFAULT_ELEPHANT_THRESHOLD,
        }
    }

    fn covered_once(fetches: &[Fetch], count: usize) -> bool {
        let mut seen = vec![0; count];
        for fetch in fetches {
            for &index in &fetch.keys {
                seen[index as usize] += 1;
            }
        }
        seen.iter().all(|&n| n == 1)
    }

    #[test]
    fn default_shape_plans_like_batch() {
        let view = view(4, 1);
        let owned = keys(100, "e");
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let request = PlanRequest {
            keys: &borrowed,
            now: Timestamp(0),
        };
        let batch = BatchPlanner::default().plan(&request, &view);
        assert_eq!(ChiselPlanner::default().plan(&request, &view), batch);
        assert_eq!(ChiselPlanner::default().merge_limit(5), 1);
    }

    #[test]
    fn elephants_split_into_balanced_chunks_of_at_most_l_keys_on_their_backend() {
        let view = view(2, 1);
        let owned = keys(100, "e");
        let mut planner = ChiselPlanner::new(shape(1, 10));
        let fetches = plan(&mut planner, &view, &owned);
        assert!(covered_once(&fetches, owned.len()));
        for backend in 0..2 {
            let mine: Vec<&Fetch> = fetches.iter().filter(|f| f.backend == backend).collect();
            let total: usize = mine.iter().map(|f| f.keys.len()).sum();
            assert_eq!(mine.len(), total.div_ceil(10), "backend {backend}");
            let (min, max) = mine.iter().fold((usize::MAX, 0), |(lo, hi), f| {
                (lo.min(f.keys.len()), hi.max(f.keys.len()))
            });
            assert!(max <= 10 && max - min <= 1, "unbalanced {min}..{max}");
            for fetch in mine {
                assert!(fetch.keys.windows(2).all(|pair| pair[0] < pair[1]));
                for &index in &fetch.keys {
                    assert_eq!(view.ring.server_for(&owned[index as usize]), backend);
                }
            }
        }
    }

    #[test]
    fn mice_are_not_split_and_may_merge_up_to_b() {
        let view = view(1, 1);
        let mut planner = ChiselPlanner::new(shape(4, 2));
        let mouse = keys(10, "m");
        let fetches = plan(&mut planner, &view, &mouse);
        assert_eq!(fetches.len(), 1, "a mouse is one query per backend");
        assert_eq!(planner.merge_limit(10), 4);
        assert_eq!(planner.merge_limit(21), 1, "elephants never merge");
        let elephant = keys(21, "x");
        assert_eq!(plan(&mut planner, &view, &elephant).len(), 11);
    }

    #[test]
    fn chunks_spread_over_the_replicas_that_hold_every_key() {
        // A replica pool: every backend holds every key (the paper's setup). Backend 0 is the
        // cheapest, so batch would send it the whole request.
        let mut view = view(4, 4);
        for (backend, load) in view.loads.iter_mut().enumerate() {
            load.ewma_nanos = Some(100.0);
            load.outstanding = u32::from(backend != 0);
        }
        let owned = keys(100, "e");
        let mut planner = ChiselPlanner::new(shape(1, 25));
        let fetches = plan(&mut planner, &view, &owned);
        assert_eq!(fetches.len(), 4);
        assert!(covered_once(&fetches, owned.len()));
        let mut backends: Vec<usize> = fetches.iter().map(|f| f.backend).collect();
        backends.sort_unstable();
        assert_eq!(backends, vec![0, 1, 2, 3], "one chunk per replica");
        // A down replica gets no chunk; with more chunks than replicas they double up evenly.
        view.loads[2].available = false;
        planner.set_shape(shape(1, 10));
        let fetches = plan(&mut planner, &view, &owned);
        assert_eq!(fetches.len(), 10);
        let mut per = [0; 4];
        for fetch in &fetches {
            per[fetch.backend] += 1;
        }
        assert_eq!(per[2], 0);
        assert!(per
            .iter()
            .enumerate()
            .all(|(b, &n)| b == 2 || (3..=4).contains(&n)));
    }

    #[test]
    fn shape_is_bounded() {
        let mut planner = ChiselPlanner::default();
        planner.set_shape(shape(0, 0));
        assert_eq!(planner.shape(), Some(shape(1, 1)));
        planner.set_shape(shape(1000, 7));
        assert_eq!(
            planner.shape().map(|s| s.merge_level),
            Some(MAX_MERGE_LEVEL)
        );
    }
}
