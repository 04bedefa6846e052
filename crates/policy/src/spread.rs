//! Replica choice within one request's plan: C3's rule key by key, or C3's rule after spreading
//! the request's keys over its replicas.
//!
//! ```text
//!   key k of a request, its replicas R(k) (owner first), the plan so far (keys per backend)
//!     c3:     the available r ∈ R(k) with the lowest (outstanding + 1)³ × EWMA   (health)
//!     spread: the available r ∈ R(k) with the fewest of this request's keys planned on it,
//!             ties by C3's cost (then the earlier replica)
//! ```
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
}

impl ReplicaChoice {
    /// Every choice's name, as `[pool] replica_choice` and `--replica-choice` take it.
    pub const NAMES: [&'static str; 2] = ["c3", "spread"];

    /// `c3` or `spread`.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "c3" => Ok(ReplicaChoice::C3),
            "spread" => Ok(ReplicaChoice::Spread),
            other => Err(format!(
                "replica choice {other:?}: expected \"c3\" or \"spread\""
            )),
        }
    }

    /// The choice's name ([`ReplicaChoice::NAMES`]).
    pub fn name(self) -> &'static str {
        match self {
            ReplicaChoice::C3 => "c3",
            ReplicaChoice::Spread => "spread",
        }
    }

    /// The replica for one key among `candidates` (in preference order, owner first), given
    /// how many of the request's keys are already planned on each backend; `None` if no
    /// candidate is available. Ties go to the earlier candidate.
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
                ReplicaChoice::C3 => 0,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(outstanding: u32) -> BackendLoad {
        BackendLoad {
            outstanding,
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
