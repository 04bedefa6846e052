//! The priority gate: a bounded in-flight window per backend, with the queue of
//! `tailtrim_policy::serverq` behind it (the same code `tailtrim serve` orders its job queue
//! with).
//!
//! ```text
//!   Backend::call_in(class) ─► Gate::admit(class)
//!        in flight < window and nobody queued ─► go at once
//!        else ─► PriorityQueue (strict by default; aged or drr as configured)
//!                ─► granted when a request in flight ends
//! ```
//!
//! The gate is how Rein's priorities are honoured in front of stock memcached, which serves a
//! connection's requests in order: with at most `window` requests in flight per backend, the
//! queue forms in the client, where the discipline decides who goes next. A waiter that gives
//! up (its caller timed out or went away) leaves the queue; if it had already been granted,
//! its slot is passed on.

use parking_lot::Mutex;
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::serverq::{Discipline, PriorityQueue};
use tokio::sync::oneshot;

use crate::config::{PoolConfig, DEFAULT_PRIORITY_WINDOW};
use crate::error::ClientError;
use crate::routes::spec::RouteSpec;
use crate::stats::Counter;

/// The registry's configure: a gate of `backend_window` requests in flight per backend (the
/// route's key, else the pool's, else 2) served in `priority_order` (the route's, else the
/// pool's, else the planner's). Left out of a configuration that lists the pool's layers,
/// requests go to the backends unqueued, whatever the planner.
pub fn configure(spec: Option<&RouteSpec>, config: &mut PoolConfig) -> Result<(), ClientError> {
    let Some(spec) = spec else {
        if config.window.is_some_and(|window| window > 0) || config.priority_order.is_some() {
            return Err(ClientError::Config(
                "[pool] backend_window and priority_order need the gate route in [[routes]]"
                    .to_string(),
            ));
        }
        config.window = Some(0);
        return Ok(());
    };
    let window = spec
        .window
        .or(config.window)
        .unwrap_or(DEFAULT_PRIORITY_WINDOW);
    if window == 0 {
        return Err(ClientError::Config(
            "route gate: backend_window must be at least 1".to_string(),
        ));
    }
    config.window = Some(window);
    config.priority_order = spec.priority_order.or(config.priority_order);
    Ok(())
}

/// A bounded in-flight window per backend with a priority queue behind it.
#[derive(Debug)]
pub struct Gate {
    window: usize,
    discipline: Discipline,
    state: Mutex<GateState>,
    /// `backend_gate_admitted`: requests admitted, per class.
    pub admitted: [Counter; CLASSES],
    /// `backend_gate_queued`: requests that had to wait, per class.
    pub queued: [Counter; CLASSES],
}

#[derive(Debug)]
struct GateState {
    in_flight: usize,
    waiting: PriorityQueue<oneshot::Sender<()>>,
}

/// A slot in the window; dropping it frees the slot for the next waiter.
#[derive(Debug)]
pub struct Permit<'a> {
    gate: &'a Gate,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.gate.release();
    }
}

/// A queued request: on drop, if the slot was granted but not taken, passes it on.
struct Waiting<'a> {
    gate: &'a Gate,
    receiver: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut receiver) = self.receiver.take() {
            receiver.close();
            if receiver.try_recv().is_ok() {
                self.gate.release();
            }
        }
    }
}

impl Gate {
    /// A gate letting `window` (at least 1) requests through at a time; waiters are served
    /// in the order of `discipline`.
    pub fn new(window: usize, discipline: Discipline) -> Self {
        Gate {
            window: window.max(1),
            discipline,
            state: Mutex::new(GateState {
                in_flight: 0,
                waiting: PriorityQueue::new(discipline),
            }),
            admitted: Default::default(),
            queued: Default::default(),
        }
    }

    /// The window.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The order in which waiters are served.
    pub fn discipline(&self) -> Discipline {
        self.discipline
    }

    /// Requests waiting.
    pub fn waiting(&self) -> usize {
        self.state.lock().waiting.len()
    }

    /// Requests waiting in `class`.
    pub fn waiting_in(&self, class: usize) -> usize {
        self.state
            .lock()
            .waiting
            .class_lens()
            .get(class)
            .copied()
            .unwrap_or(0)
    }

    /// Requests holding a slot.
    pub fn in_flight(&self) -> usize {
        self.state.lock().in_flight
    }

    /// A slot at once if one is free and nobody waits (what [`Gate::admit`] does first), so
    /// that a caller bounding the wait arms no timer when there is none.
    pub fn try_admit(&self, class: usize) -> Option<Permit<'_>> {
        let mut state = self.state.lock();
        self.grant_if_free(&mut state, class.min(CLASSES - 1))
            .then(|| Permit { gate: self })
    }

    /// Takes a slot for `class` if one is free and nobody waits.
    fn grant_if_free(&self, state: &mut GateState, class: usize) -> bool {
        if state.in_flight < self.window && state.waiting.is_empty() {
            state.in_flight += 1;
            self.admitted[class].incr();
            return true;
        }
        false
    }

    /// Counts a request that carries no priority class (its planner set none) in the window
    /// without holding it: with no class there is no order for the queue to apply, and the
    /// backend serves a connection's requests in arrival order anyway. Counted, so that
    /// classed requests that come later (a planner switching to priorities) still find the
    /// window's true occupancy; the slot it takes is passed on when it ends.
    pub fn enter(&self) -> Permit<'_> {
        self.state.lock().in_flight += 1;
        self.admitted[0].incr();
        Permit { gate: self }
    }

    /// Waits for a slot; `class` 0 is the highest priority (larger values are the lowest).
    pub async fn admit(&self, class: usize) -> Permit<'_> {
        let class = class.min(CLASSES - 1);
        let receiver = {
            let mut state = self.state.lock();
            if self.grant_if_free(&mut state, class) {
                return Permit { gate: self };
            }
            let (sender, receiver) = oneshot::channel();
            state.waiting.push(class as u8, sender);
            receiver
        };
        self.queued[class].incr();
        let mut waiting = Waiting {
            gate: self,
            receiver: Some(receiver),
        };
        if let Some(receiver) = waiting.receiver.as_mut() {
            // The sender is only dropped unsent by `release` skipping a waiter that went away,
            // which is not us; either way we hold a slot only if we got the grant.
            if receiver.await.is_ok() {
                waiting.receiver = None;
                self.admitted[class].incr();
                return Permit { gate: self };
            }
        }
        // Unreachable in practice (the gate never drops a live waiter's sender); take a slot
        // the ordinary way rather than fail.
        waiting.receiver = None;
        drop(waiting);
        self.state.lock().in_flight += 1;
        Permit { gate: self }
    }

    fn release(&self) {
        let mut state = self.state.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        while state.in_flight < self.window {
            let Some(next) = state.waiting.pop() else {
                break;
            };
            if next.send(()).is_ok() {
                state.in_flight += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_drr_gate_serves_classes_by_weight_and_a_high_priority_request_overtakes_the_backlog()
    {
        let gate = Arc::new(Gate::new(1, Discipline::Drr));
        let blocker = gate.admit(0).await;
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // A backlog: 30 requests in each class, queued low classes first.
        for class in (0..CLASSES).rev() {
            for i in 0..30 {
                let gate = gate.clone();
                let done = done_tx.clone();
                tasks.push(tokio::spawn(async move {
                    let _permit = gate.admit(class).await;
                    let _ = done.send((class, i));
                    tokio::time::sleep(Duration::from_micros(10)).await;
                }));
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(gate.waiting(), 150);
        drop(blocker);
        drop(done_tx);
        let mut order = Vec::new();
        while let Some(item) = done_rx.recv().await {
            order.push(item);
        }
        // The first 15 served follow the weights 5:4:3:2:1 although class 0 queued last.
        let mut first = [0usize; CLASSES];
        for (class, _) in &order[..15] {
            first[*class] += 1;
        }
        assert_eq!(first, [5, 4, 3, 2, 1]);
        // Within a class, FIFO.
        for class in 0..CLASSES {
            let seq: Vec<usize> = order
                .iter()
                .filter(|(c, _)| *c == class)
                .map(|x| x.1)
                .collect();
            assert_eq!(seq, (0..30).collect::<Vec<_>>());
        }
        assert_eq!(gate.in_flight(), 0);
    }

    /// The order in which a backlog queued low classes first (10 per class) leaves a gate of
    /// one slot.
    async fn served_order(discipline: Discipline) -> Vec<usize> {
        let gate = Arc::new(Gate::new(1, discipline));
        let blocker = gate.admit(0).await;
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for class in (0..CLASSES).rev() {
            for _ in 0..10 {
                let gate = gate.clone();
                let done = done_tx.clone();
                tokio::spawn(async move {
                    let _permit = gate.admit(class).await;
                    let _ = done.send(class);
                    tokio::time::sleep(Duration::from_micros(10)).await;
                });
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(gate.waiting(), 10 * CLASSES);
        assert_eq!(gate.waiting_in(4), 10);
        drop(blocker);
        drop(done_tx);
        let mut order = Vec::new();
        while let Some(class) = done_rx.recv().await {
            order.push(class);
        }
        order
    }

    #[tokio::test(start_paused = true)]
    async fn a_strict_gate_serves_every_higher_class_first() {
        let order = served_order(Discipline::Strict).await;
        let expected: Vec<usize> = (0..CLASSES).flat_map(|class| [class; 10]).collect();
        assert_eq!(order, expected);
        // Deficit round robin interleaves the classes instead.
        assert_ne!(served_order(Discipline::Drr).await, expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_leaves_no_slot_behind() {
        let gate = Gate::new(1, Discipline::Strict);
        let permit = gate.admit(4).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(1), gate.admit(4)).await;
        assert!(gave_up.is_err());
        drop(permit);
        assert_eq!(gate.in_flight(), 0);
        let _again = gate.admit(0).await;
        assert_eq!(gate.in_flight(), 1);
    }
}
