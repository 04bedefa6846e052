//! One event sequence (arrivals with keys and sizes, backlogs seen by idle thieves, busy
//! workers when a job reaches a shared queue, epoch ticks) fed to the server's policy objects
//! (their decision methods, no sockets) and to the simulator's decision path
//! (`tailtrim_sim::decide`), asserting identical decisions for all five policies.

use tailtrim_policy::dispatch::key_hash;
use tailtrim_policy::sizeaware::{EpochDriver, PackedDecision, RoleBusy, SizeHistogram};
use tailtrim_sim::{decide, CostModel, Policy as SimPolicy, RunConfig};

use super::build;
use super::size_aware::SizeAware;
use super::strategy::Policy;
use crate::config::{DispatchPolicy, ServerConfig};

const WORKERS: usize = 4;

/// What happens, in order.
enum Event {
    /// A request with one key, read by `reader`, whose size the reader learns.
    Arrival {
        key: String,
        reader: usize,
        size: u64,
    },
    /// Worker `thief` is idle; `backlogs[w]` requests wait on worker `w`.
    Idle { thief: usize, backlogs: Vec<usize> },
    /// A job reaches the policy's shared queue while `busy[w]` workers are busy.
    Queued { busy: Vec<bool>, rotation: u64 },
    /// A request exactly `offset` bytes away from the threshold in force (16 KiB for
    /// policies without one).
    AtThreshold { offset: i64 },
    /// The controller's clock ticks.
    Epoch,
}

/// A deterministic sequence: three epochs of mostly small requests with a tail of large ones,
/// and pseudo-random backlogs and busy sets.
fn events() -> Vec<Event> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut draw = move |below: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % below
    };
    let mut events = Vec::new();
    for step in 0..600u64 {
        let size = if step % 10 == 0 {
            1_000 + (step * 7_919) % 60_000
        } else {
            50 + step % 200
        };
        events.push(Event::Arrival {
            key: format!("key:{}", draw(1000)),
            reader: draw(WORKERS as u64) as usize,
            size,
        });
        if step % 3 == 0 {
            let thief = draw(WORKERS as u64) as usize;
            let backlogs = (0..WORKERS)
                .map(|w| if w == thief { 0 } else { draw(3) as usize })
                .collect();
            events.push(Event::Idle { thief, backlogs });
        }
        if step % 3 == 1 {
            let busy = (0..WORKERS).map(|_| draw(3) != 0).collect();
            events.push(Event::Queued {
                busy,
                rotation: draw(64),
            });
        }
        if step % 200 == 199 {
            events.push(Event::Epoch);
            events.extend((-1..=1).map(|offset| Event::AtThreshold { offset }));
        }
    }
    events
}

/// The simulator's side: its policy, and for size-aware the epoch driver as `engine::run`
/// builds it and the cores' histograms.
struct Sim {
    policy: SimPolicy,
    driver: Option<EpochDriver>,
    decision: Option<PackedDecision>,
    histograms: Vec<SizeHistogram>,
}

impl Sim {
    fn new(policy: SimPolicy) -> Sim {
        let run = RunConfig::new(policy, WORKERS, 1000.0, CostModel::default());
        let driver = (policy == SimPolicy::SizeAware).then(|| {
            let config = tailtrim_policy::sizeaware::SizeAwareConfig {
                workers: WORKERS,
                ..run.sizeaware
            };
            EpochDriver::new(config).unwrap_or_else(|error| panic!("{error}"))
        });
        Sim {
            policy,
            decision: driver.as_ref().map(EpochDriver::published),
            driver,
            histograms: (0..WORKERS).map(|_| SizeHistogram::new()).collect(),
        }
    }
}

fn server_config(policy: DispatchPolicy) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.workers.threads = WORKERS;
    config.workers.dispatch = policy;
    config
}

fn check(policy: DispatchPolicy) {
    let config = server_config(policy);
    // Size-aware needs its epoch and sample hooks; the others go through `build`.
    let size_aware = (policy == DispatchPolicy::SizeAware).then(|| SizeAware::new(&config));
    let built;
    let server: &dyn Policy = match &size_aware {
        Some(size_aware) => size_aware,
        None => {
            built = build(&config).unwrap_or_else(|error| panic!("{error}"));
            built.as_ref()
        }
    };
    assert_eq!(server.kind(), policy);
    let mut sim = Sim::new(policy);
    let mut counts = [0usize; 4];
    for (index, event) in events().into_iter().enumerate() {
        let at = format!("{policy}, event {index}");
        match event {
            Event::Arrival { key, reader, size } => {
                let placed = server.place(Some(key.as_bytes()), reader);
                let hash = key_hash(key.as_bytes());
                assert_eq!(
                    placed,
                    decide::place(sim.policy, reader, WORKERS, hash),
                    "{at}"
                );
                let handed = server.hands_off(size);
                assert_eq!(
                    handed,
                    decide::hands_off(sim.decision, size, WORKERS),
                    "{at}"
                );
                counts[0] += usize::from(handed);
                if let Some(size_aware) = &size_aware {
                    size_aware.record_size(reader, size);
                    sim.histograms[reader].record(size, size);
                }
            }
            Event::AtThreshold { offset } => {
                let threshold = sim.decision.map_or(16 * 1024, |d| d.threshold());
                let size = threshold.saturating_add_signed(offset);
                let handed = server.hands_off(size);
                assert_eq!(
                    handed,
                    decide::hands_off(sim.decision, size, WORKERS),
                    "{at}"
                );
            }
            Event::Idle { thief, backlogs } => {
                let mut ready = |victim: usize| backlogs[victim] > 0;
                let victim = server.steal_victim(thief, &mut ready);
                assert_eq!(
                    victim,
                    decide::steal_victim(sim.policy, thief, &backlogs),
                    "{at}"
                );
                counts[1] += usize::from(victim.is_some());
            }
            Event::Queued { busy, rotation } => {
                let takers: Vec<bool> =
                    (0..WORKERS).map(|w| server.takes_shared_queue(w)).collect();
                let sim_takers: Vec<bool> = (0..WORKERS)
                    .map(|w| decide::takes_shared_queue(sim.policy, sim.decision, w, WORKERS))
                    .collect();
                assert_eq!(takers, sim_takers, "{at}");
                // The server lets whichever idle taker wakes first have the job; the simulator
                // names one, which must be such a worker, and none when there is none.
                let picked = decide::shared_queue_taker(sim.policy, sim.decision, &busy, rotation);
                let idle_takers: Vec<usize> =
                    (0..WORKERS).filter(|&w| takers[w] && !busy[w]).collect();
                match picked {
                    Some(worker) => assert!(idle_takers.contains(&worker), "{at}"),
                    None => assert!(idle_takers.is_empty(), "{at}"),
                }
                counts[2] += usize::from(picked.is_some());
            }
            Event::Epoch => {
                if let (Some(size_aware), Some(driver)) = (&size_aware, sim.driver.as_mut()) {
                    size_aware.end_epoch();
                    let mut merged = SizeHistogram::new();
                    for histogram in &mut sim.histograms {
                        merged.merge(&histogram.take());
                    }
                    sim.decision = Some(decide::end_epoch(driver, &merged, RoleBusy::default()));
                    counts[3] += 1;
                }
            }
        }
        if let (Some(size_aware), Some(decision)) = (&size_aware, sim.decision) {
            assert_eq!(size_aware.decision(), decision, "{at}: published decision");
        }
    }
    // The sequence exercises each policy's decisions (so an always-`None` side cannot pass).
    match policy {
        DispatchPolicy::SizeAware => {
            assert!(
                counts[0] > 0 && counts[2] > 0 && counts[3] == 3,
                "{counts:?}"
            )
        }
        DispatchPolicy::Stealing => assert!(counts[1] > 0, "{counts:?}"),
        DispatchPolicy::LateBinding => assert!(counts[2] > 0, "{counts:?}"),
        DispatchPolicy::EarlyBinding | DispatchPolicy::Pinned => {
            assert_eq!(counts[..3], [0, 0, 0], "{counts:?}")
        }
    }
}

#[test]
fn server_and_simulator_decide_alike_under_every_policy() {
    for policy in DispatchPolicy::ALL {
        check(policy);
    }
}

#[test]
fn size_aware_decisions_move_over_the_epochs() {
    // The sequence is only a test if the size-aware decision changes on the way.
    let config = server_config(DispatchPolicy::SizeAware);
    let server = SizeAware::new(&config);
    let initial = server.decision();
    for event in events() {
        match event {
            Event::Arrival { reader, size, .. } => server.record_size(reader, size),
            Event::Epoch => server.end_epoch(),
            _ => {}
        }
    }
    assert_ne!(server.decision(), initial);
}
