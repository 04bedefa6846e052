//! Multiget planners: turn a read of many keys and a view of the cluster into actions.
//!
//! ```text
//!   PlanRequest{keys, now} ─┐
//!                           ├─► Planner::plan ─► [Fetch{backend, key indices, not_before, priority},
//!   &dyn ClusterView ───────┘                     Unavailable{key indices}]
//!        ▲  replicas(key), load(backend)                  │ client sends, times the replies
//!        │                                                ▼
//!        └──────────── runtime state ◄──── Planner::observe(Observation{backend, keys, bytes, latency})
//! ```
//!
//! Planners never touch sockets or clocks: the runtime sends the fetches and reports what it saw
//! back through [`Planner::observe`], which is how learning planners (Chisel's latency model,
//! TailX's large-key filter) are fed; planners that learn from value sizes ask for
//! [`Planner::observe_value`] too. `batch`, the state of practice, sends one `get k1 … kn` per
//! backend; `chisel` ([`crate::chisel`]) splits elephants into chunks and lets the runtime merge
//! mice ([`Planner::merge_limit`]), with a [`QueryShape`] that an online analyzer sets
//! ([`Planner::set_shape`]); `rein-sbf`/`rein-sds` ([`crate::rein`]) tag each fetch with a
//! priority class (0 = highest, served by deficit round robin, [`crate::drr`]); `tailx`
//! ([`crate::tailx`]) gives the opsets that would finish early a start time (`not_before`) for
//! the runtime's delay queue. [`Planner::gauges`] exposes a planner's current decisions.
//!
//! ```text
//!   planner (this module: PlannerKind, the factory; re-exports the contract)
//!      │ builds
//!      ▼
//!   batch (base) · chisel · rein · tailx · cost-sbf · cost-rel · size-rel
//!                                                  ──►  planner::base (Planner, ClusterView, …)
//! ```

pub mod base;

pub use base::{
    group_by_backend, route_key, Action, BatchPlanner, ClusterView, Fetch, Observation,
    PlanRequest, Planner, QueryShape, RequestDone,
};

use crate::auto::{AutoPlanner, AutoSettings};
use crate::chisel::ChiselPlanner;
use crate::costrel::{CostRelPlanner, CostRelSettings};
use crate::costsbf::{CostSbfPlanner, CostSbfSettings};
use crate::error::PolicyError;
use crate::rein::{ReinPlanner, ReinPolicy};
use crate::serverq::Discipline;
use crate::sizerel::{SizeRelPlanner, DEFAULT_SIZE_REL_OVERTAKES};
use crate::spread::ReplicaChoice;
use crate::tailx::{TailxPlanner, TailxSettings};

/// Names accepted by [`PlannerKind::from_name`].
pub const PLANNER_NAMES: [&str; 10] = [
    "batch", "chisel", "rein-sbf", "rein-sds", "rein-drr", "tailx", "cost-sbf", "cost-rel",
    "size-rel", "auto",
];

/// Settings of the planners that have any.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannerSettings {
    /// `tailx`.
    pub tailx: TailxSettings,
    /// `cost-sbf`.
    pub cost_sbf: CostSbfSettings,
    /// `cost-rel` (and `size-rel`, which orders by its classes, and `auto`).
    pub cost_rel: CostRelSettings,
    /// `size-rel`'s ageing at the servers (its own; the rest of its settings are
    /// `cost_rel`'s): later arrivals that may overtake a demoted opset per class.
    pub size_rel_overtakes: u64,
    /// `size-rel`'s covering choice, for a request without a large value: the weight of a
    /// backend's demoted work not in service ([`crate::sizerel::DEMOTED_WORK_WEIGHT`]; 1 weighs
    /// it whole, as before that rule).
    pub size_rel_demoted_weight: f64,
    /// How batch, Rein, `cost-sbf`, `cost-rel` and `size-rel` pick each key's replica within a
    /// request's plan ([`crate::spread`]; TailX, Chisel and auto always use C3's rule).
    pub replica_choice: ReplicaChoice,
    /// The fixed cost of one fetch at a backend, in keys: the client and proxy estimate a
    /// backend's work in flight as its keys in flight plus this much per request, which the
    /// covering replica choice weighs backends by.
    pub fetch_cost_keys: f64,
}

/// Default of [`PlannerSettings::fetch_cost_keys`]: a fetch's fixed cost is a few keys' (2–4 in
/// the simulated and emulated cost models: `const=20us` against 5–7.5 µs per key).
pub const DEFAULT_FETCH_COST_KEYS: f64 = 3.0;

impl Default for PlannerSettings {
    fn default() -> Self {
        PlannerSettings {
            tailx: TailxSettings::default(),
            cost_sbf: CostSbfSettings::default(),
            cost_rel: CostRelSettings::default(),
            size_rel_overtakes: DEFAULT_SIZE_REL_OVERTAKES,
            size_rel_demoted_weight: crate::sizerel::DEMOTED_WORK_WEIGHT,
            replica_choice: ReplicaChoice::default(),
            fetch_cost_keys: DEFAULT_FETCH_COST_KEYS,
        }
    }
}

/// Selectable planners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannerKind {
    /// One multiget per backend.
    Batch,
    /// Split elephants into chunks, merge mice (see [`crate::chisel`]).
    Chisel,
    /// Rein, shortest bottleneck first.
    ReinSbf,
    /// Rein, shortest bottleneck first with slack-driven demotion.
    ReinSds,
    /// Rein's shortest-bottleneck-first classes served by deficit round robin.
    ReinDrr,
    /// Shortest estimated bottleneck cost first (see [`crate::costsbf`]).
    CostSbf,
    /// Priority by bottleneck cost relative to the typical one, aged (see [`crate::costrel`]).
    CostRel,
    /// `cost-rel`'s classes, an opset holding a large value one class lower (see
    /// [`crate::sizerel`]).
    SizeRel,
    /// TailX: size-aware opset costs and delay allowances.
    Tailx,
    /// Batch, Chisel or cost-rel, chosen per epoch from the measured workload (see [`crate::auto`]).
    Auto,
}

impl PlannerKind {
    /// Parses a planner name.
    pub fn from_name(name: &str) -> Result<Self, PolicyError> {
        match name {
            "batch" => Ok(PlannerKind::Batch),
            "chisel" => Ok(PlannerKind::Chisel),
            "rein-sbf" => Ok(PlannerKind::ReinSbf),
            "rein-sds" => Ok(PlannerKind::ReinSds),
            "rein-drr" => Ok(PlannerKind::ReinDrr),
            "cost-sbf" => Ok(PlannerKind::CostSbf),
            "cost-rel" => Ok(PlannerKind::CostRel),
            "size-rel" => Ok(PlannerKind::SizeRel),
            "tailx" => Ok(PlannerKind::Tailx),
            "auto" => Ok(PlannerKind::Auto),
            other => Err(PolicyError::UnknownPlanner {
                name: other.to_string(),
                known: &PLANNER_NAMES,
            }),
        }
    }

    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            PlannerKind::Batch => "batch",
            PlannerKind::Chisel => "chisel",
            PlannerKind::ReinSbf => "rein-sbf",
            PlannerKind::ReinSds => "rein-sds",
            PlannerKind::ReinDrr => "rein-drr",
            PlannerKind::CostSbf => "cost-sbf",
            PlannerKind::CostRel => "cost-rel",
            PlannerKind::SizeRel => "size-rel",
            PlannerKind::Tailx => "tailx",
            PlannerKind::Auto => "auto",
        }
    }

    /// True for planners whose fetches carry priorities (the runtime serves them by class).
    pub fn uses_priorities(self) -> bool {
        matches!(
            self,
            PlannerKind::ReinSbf
                | PlannerKind::ReinSds
                | PlannerKind::ReinDrr
                | PlannerKind::CostSbf
                | PlannerKind::CostRel
                | PlannerKind::SizeRel
                | PlannerKind::Auto
        )
    }

    /// How the runtime orders this planner's prioritized fetches (see
    /// [`Planner::discipline`]).
    pub fn discipline(self, settings: &PlannerSettings) -> Discipline {
        self.build_with(settings).discipline()
    }

    /// A fresh planner of this kind with default settings.
    pub fn build(self) -> Box<dyn Planner> {
        self.build_with(&PlannerSettings::default())
    }

    /// A fresh planner of this kind.
    pub fn build_with(self, settings: &PlannerSettings) -> Box<dyn Planner> {
        let choice = settings.replica_choice;
        let rein = |policy| Box::new(ReinPlanner::new(policy).with_replica_choice(choice));
        match self {
            PlannerKind::Batch => Box::new(BatchPlanner::with_replica_choice(choice)),
            PlannerKind::Chisel => Box::new(ChiselPlanner::default()),
            PlannerKind::ReinSbf => rein(ReinPolicy::Sbf),
            PlannerKind::ReinSds => rein(ReinPolicy::Sds),
            PlannerKind::ReinDrr => rein(ReinPolicy::SbfDrr),
            PlannerKind::CostSbf => {
                Box::new(CostSbfPlanner::new(settings.cost_sbf).with_replica_choice(choice))
            }
            PlannerKind::CostRel => {
                Box::new(CostRelPlanner::new(settings.cost_rel).with_replica_choice(choice))
            }
            PlannerKind::SizeRel => {
                let own = CostRelSettings {
                    overtakes: settings.size_rel_overtakes,
                    ..settings.cost_rel
                };
                Box::new(
                    SizeRelPlanner::new(own)
                        .with_replica_choice(choice)
                        .with_demoted_weight(settings.size_rel_demoted_weight),
                )
            }
            PlannerKind::Tailx => Box::new(TailxPlanner::new(settings.tailx)),
            PlannerKind::Auto => Box::new(AutoPlanner::new(AutoSettings {
                scheduler: settings.cost_rel,
                ..AutoSettings::default()
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PlannerKind, PLANNER_NAMES};

    #[test]
    fn planner_names_parse() {
        for name in PLANNER_NAMES {
            assert_eq!(PlannerKind::from_name(name).unwrap().build().name(), name);
        }
        assert!(PlannerKind::from_name("nope").is_err());
    }

    #[test]
    fn size_rel_and_cost_rel_each_age_by_their_own_setting() {
        use super::{PlannerSettings, DEFAULT_SIZE_REL_OVERTAKES};
        use crate::costrel::DEFAULT_REL_OVERTAKES;
        use crate::serverq::Discipline;
        let defaults = PlannerSettings::default();
        let aged = |overtakes| Discipline::Aged { overtakes };
        assert_eq!(
            PlannerKind::SizeRel.discipline(&defaults),
            aged(DEFAULT_SIZE_REL_OVERTAKES)
        );
        assert_eq!(
            PlannerKind::CostRel.discipline(&defaults),
            aged(DEFAULT_REL_OVERTAKES)
        );
        let settings = PlannerSettings {
            size_rel_overtakes: 7,
            ..defaults
        };
        assert_eq!(PlannerKind::SizeRel.discipline(&settings), aged(7));
        assert_eq!(
            PlannerKind::CostRel.discipline(&settings),
            aged(DEFAULT_REL_OVERTAKES)
        );
    }
}
