//! Replica choice within one request's plan: C3's rule key by key, C3's rule after spreading
//! the request's keys over its replicas, or the request's keys gathered on few backends.
//!
//! ```text
//!   key k of a request, its replicas R(k) (owner first), the plan so far (keys per backend)
//!     c3:     the available r ∈ R(k) with the lowest (outstanding + 1)³ × EWMA   (health)
//!     spread: the available r ∈ R(k) with the fewest of this request's keys planned on it,
//!             ties by C3's cost (then the earlier replica)
//!   all keys of a request at once
//!     cover:  greedy set cover: the backend b with the most unplanned keys per backlog(b)
//!             takes them all, until every key is planned; backlog(b) = estimated work in
//!             flight + one fetch's (simulator: mean service; client and proxy: keys in
//!             flight + fetch_cost_keys per fetch), or (outstanding + 1) × EWMA
//! ```
//!
//! Every fetch costs a server a fixed amount besides its keys (parsing, a system call, a
//! reply's framing): a 20-key multiget over 16 servers with 3 copies of each key is ~8 fetches
//! by C3's choice and ~6.5 by cover's, so cover does less work per request (Facebook's
//! "multiget hole" is the same fixed cost). Weighing each backend by its backlog keeps the keys
//! of a request off a server busy with a large value when another copy is idle.
//!
//! C3 ranks replicas from one load snapshot per plan, so two keys whose replica sets share the
//! cheapest backend both go there: with 3 copies of each key on 16 servers, 12 % of 2-key
//! requests end on one server (about 6 % with one copy). A priority planner that ranks a
//! request by its bottleneck opset's key count (Rein's SBF) then gives those requests a 2-key
//! bottleneck and serves them after every 1-key one. Spreading puts each key where the request
//! has the fewest keys so far, so the bottleneck opset holds as few keys as the replica sets
//! allow (a 2-key request is split whenever its two keys have a replica apart), and C3's
//! ranking decides among the equally spread choices.

use serde::{Deserialize, Serialize};

use smallvec::SmallVec;

use crate::health::{expected_cost, BackendLoad};

/// How a planner picks each key's replica within a request's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaChoice {
    /// Each key to its cheapest available replica by C3's cost ([`crate::health::choose_replica`]).
    #[default]
    C3,
    /// Each key to the available replica holding the fewest of the request's keys planned so
    /// far, ties by C3's cost.
    Spread,
    /// The request's keys gathered on few backends, weighed by their backlog (greedy set
    /// cover, [`cover`]): fewer fetches per multiget, none to a backend busy with a large
    /// value when another copy is idle.
    Cover,
}

impl ReplicaChoice {
    /// Every choice's name, as `[pool] replica_choice` and `--replica-choice` take it.
    pub const NAMES: [&'static str; 3] = ["c3", "spread", "cover"];

    /// `c3` or `spread`.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "c3" => Ok(ReplicaChoice::C3),
            "spread" => Ok(ReplicaChoice::Spread),
            "cover" => Ok(ReplicaChoice::Cover),
            other => Err(format!(
                "replica choice {other:?}: expected \"c3\", \"spread\" or \"cover\""
            )),
        }
    }

    /// The choice's name ([`ReplicaChoice::NAMES`]).
    pub fn name(self) -> &'static str {
        match self {
            ReplicaChoice::C3 => "c3",
            ReplicaChoice::Spread => "spread",
            ReplicaChoice::Cover => "cover",
        }
    }

    /// The replica for one key among `candidates` (in preference order, owner first), given
    /// how many of the request's keys are already planned on each backend; `None` if no
    /// candidate is available. Ties go to the earlier candidate. `Cover` plans a request's
    /// keys together ([`cover`]); asked for one key alone, it ranks as C3 does.
    pub fn choose(
        self,
        candidates: &[usize],
        mut planned_on: impl FnMut(usize) -> usize,
        mut load_of: impl FnMut(usize) -> BackendLoad,
    ) -> Option<usize> {
        let mut best: Option<(usize, usize, f64)> = None;
        for &candidate in candidates {
            let load = load_of(candidate);
            if !load.available {
                continue;
            }
            let planned = match self {
                ReplicaChoice::C3 | ReplicaChoice::Cover => 0,
                ReplicaChoice::Spread => planned_on(candidate),
            };
            let cost = expected_cost(&load);
            match best {
                Some((_, best_planned, best_cost))
                    if (best_planned, best_cost) <= (planned, cost) => {}
                _ => best = Some((candidate, planned, cost)),
            }
        }
        best.map(|(candidate, _, _)| candidate)
    }
}

/// What one more fetch to a backend is expected to cost, for [`cover`]'s weighing: where the
/// runtime estimates work, the work outstanding there plus one fetch's (`fetch_work`, in the
/// same unit); otherwise C3's queue term without its cube, (outstanding + 1) × the latency
/// estimate in nanoseconds (1 ns before the first reply). Only ratios between backends matter.
pub fn backlog(load: &BackendLoad, fetch_work: Option<f64>) -> f64 {
    match (load.outstanding_work, fetch_work) {
        (Some(outstanding), Some(fetch)) => outstanding + fetch.max(f64::MIN_POSITIVE),
        _ => (f64::from(load.outstanding) + 1.0) * load.ewma_nanos.unwrap_or(1.0).max(1.0),
    }
}

/// Greedy weighted set cover of one request's keys: `replicas[i]` holds key `i`'s available
/// replicas; the answer gives each key its backend (`None`: no replica). Each round takes the
/// backend with the most keys not yet assigned per unit of `cost_of` (its backlog,
/// [`backlog`]; ties to the lower backend id) and gives it all of them. Fewer fetches
/// per request means less fixed work per request at the servers, and weighing by the backlog
/// keeps the keys off a server busy with a large value when another copy is idle.
pub fn cover(
    replicas: &[SmallVec<[usize; 4]>],
    backend_count: usize,
    mut cost_of: impl FnMut(usize) -> f64,
) -> Vec<Option<usize>> {
    let mut assigned: Vec<Option<usize>> = vec![None; replicas.len()];
    let mut left = replicas.iter().filter(|set| !set.is_empty()).count();
    let mut holding = vec![0u32; backend_count];
    let mut costs: Vec<Option<f64>> = vec![None; backend_count];
    while left > 0 {
        holding.iter_mut().for_each(|count| *count = 0);
        for (set, done) in replicas.iter().zip(&assigned) {
            if done.is_none() {
                for &backend in set {
                    if let Some(count) = holding.get_mut(backend) {
                        *count += 1;
                    }
                }
            }
        }
        let mut best: Option<(usize, f64)> = None;
        for (backend, &count) in holding.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let cost = *costs[backend].get_or_insert_with(|| cost_of(backend));
            let score = f64::from(count) / cost.max(f64::MIN_POSITIVE);
            if best.is_none_or(|(_, best_score)| score > best_score) {
                best = Some((backend, score));
            }
        }
        let Some((chosen, _)) = best else { break };
        for (set, done) in replicas.iter().zip(assigned.iter_mut()) {
            if done.is_none() && set.contains(&chosen) {
                *done = Some(chosen);
                left -= 1;
            }
        }
    }
    assigned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(outstanding: u32) -> BackendLoad {
        BackendLoad {
            outstanding,
            outstanding_work: None,
            demoted_work: None,
            ewma_nanos: Some(100.0),
            available: true,
        }
    }

    #[test]
    fn c3_ignores_the_plan_and_spread_avoids_backends_the_request_already_uses() {
        let loads = [load(0), load(1), load(2)];
        let planned = [1, 0, 0];
        let c3 = ReplicaChoice::C3.choose(&[0, 1, 2], |b| planned[b], |b| loads[b]);
        assert_eq!(c3, Some(0));
        let spread = ReplicaChoice::Spread.choose(&[0, 1, 2], |b| planned[b], |b| loads[b]);
        assert_eq!(
            spread,
            Some(1),
            "the cheapest backend the request does not use"
        );
    }

    fn sets(lists: &[&[usize]]) -> Vec<SmallVec<[usize; 4]>> {
        lists
            .iter()
            .map(|list| list.iter().copied().collect())
            .collect()
    }

    #[test]
    fn cover_gathers_keys_on_the_backend_holding_most_of_them() {
        // Every key has a copy on backend 1; key by key, each would take its first replica.
        let replicas = sets(&[&[0, 1], &[2, 1], &[3, 1], &[1, 0]]);
        let assigned = cover(&replicas, 4, |_| 100.0);
        assert_eq!(assigned, vec![Some(1); 4]);
    }

    #[test]
    fn cover_weighs_keys_by_backlog_and_leaves_a_busy_backend_alone() {
        // Backend 0 holds all three keys but has a large value in flight: ten times the work.
        let replicas = sets(&[&[0, 1], &[0, 1], &[0, 2]]);
        let backlog = [1_000.0, 100.0, 100.0];
        let assigned = cover(&replicas, 3, |backend| backlog[backend]);
        assert_eq!(assigned, vec![Some(1), Some(1), Some(2)]);
        // Idle, it takes them all: one fetch instead of two.
        let assigned = cover(&replicas, 3, |_| 100.0);
        assert_eq!(assigned, vec![Some(0); 3]);
    }

    #[test]
    fn cover_leaves_keys_without_a_replica_unassigned() {
        let replicas = sets(&[&[], &[2], &[]]);
        assert_eq!(cover(&replicas, 3, |_| 1.0), vec![None, Some(2), None]);
        assert!(cover(&[], 3, |_| 1.0).is_empty());
    }

    #[test]
    fn backlog_is_estimated_work_where_known_and_c3s_linear_term_otherwise() {
        let mut busy = load(3);
        assert_eq!(backlog(&busy, Some(25.0)), 400.0, "(3 + 1) × 100 ns");
        busy.outstanding_work = Some(5_000.0);
        assert_eq!(backlog(&busy, Some(25.0)), 5_025.0);
        assert_eq!(backlog(&busy, None), 400.0, "no fetch estimate");
        let fresh = BackendLoad {
            ewma_nanos: None,
            ..load(0)
        };
        assert_eq!(backlog(&fresh, None), 1.0);
    }

    #[test]
    fn every_name_parses_to_itself() {
        for name in ReplicaChoice::NAMES {
            assert_eq!(ReplicaChoice::parse(name).map(|c| c.name()), Ok(name));
        }
        assert!(ReplicaChoice::parse("random").is_err());
    }

    #[test]
    fn spread_skips_unavailable_backends_and_falls_back_to_the_least_used() {
        let mut loads = [load(0), load(0), load(0)];
        loads[1].available = false;
        let planned = [3, 0, 2];
        let chosen = ReplicaChoice::Spread.choose(&[0, 1, 2], |b| planned[b], |b| loads[b]);
        assert_eq!(chosen, Some(2));
        let none = ReplicaChoice::Spread.choose(&[1], |b| planned[b], |b| loads[b]);
        assert_eq!(none, None);
    }
}
