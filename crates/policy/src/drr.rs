//! Deficit round robin over priority classes (Shreedhar and Varghese), as Rein serves opsets.
//!
//! ```text
//!   push(class, cost, item) ─► [class 0 FIFO] weight 5   ┐
//!                              [class 1 FIFO] weight 4   │  round robin over non-empty classes:
//!                              [class 2 FIFO] weight 3   ├─ a class visited gains weight × quantum
//!                              [class 3 FIFO] weight 2   │  of deficit and serves its head while
//!                              [class 4 FIFO] weight 1   ┘  the head's cost fits ─► pop()
//! ```
//!
//! With every class backlogged, class `c` gets a share `weight(c) / Σ weights` of the service
//! (in cost units); an idle class keeps no credit (its deficit resets when it empties), so a
//! class that wakes up cannot burst past its share. Each class is FIFO. Pure: the caller owns
//! the items and decides what a unit of cost is (the proxy and the server count requests).

use std::collections::VecDeque;

/// Number of Rein priority classes.
pub const CLASSES: usize = 5;
/// Weights of the classes, highest priority (class 0) first.
pub const WEIGHTS: [u32; CLASSES] = [5, 4, 3, 2, 1];
/// Default deficit added per visit, per unit of weight.
pub const DEFAULT_QUANTUM: u64 = 1;

/// A deficit-round-robin scheduler of items of type `T` over [`CLASSES`] classes.
#[derive(Debug, Clone)]
pub struct Drr<T> {
    queues: [VecDeque<(u64, T)>; CLASSES],
    deficits: [u64; CLASSES],
    weights: [u32; CLASSES],
    quantum: u64,
    /// The class being served; it keeps the turn while its deficit covers its head.
    current: usize,
    /// Whether `current` has been credited for this visit.
    credited: bool,
    len: usize,
}

impl<T> Default for Drr<T> {
    fn default() -> Self {
        Drr::new(WEIGHTS, DEFAULT_QUANTUM)
    }
}

impl<T> Drr<T> {
    /// A scheduler with the given weights (each at least 1) and quantum (at least 1).
    pub fn new(weights: [u32; CLASSES], quantum: u64) -> Self {
        Drr {
            queues: Default::default(),
            deficits: [0; CLASSES],
            weights: weights.map(|w| w.max(1)),
            quantum: quantum.max(1),
            current: 0,
            credited: false,
            len: 0,
        }
    }

    /// Items queued over all classes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Items queued in `class`.
    pub fn class_len(&self, class: usize) -> usize {
        self.queues.get(class).map_or(0, VecDeque::len)
    }

    /// Queues `item` at the tail of `class` (clamped to the lowest class) with a cost of at
    /// least 1.
    pub fn push(&mut self, class: usize, cost: u64, item: T) {
        let class = class.min(CLASSES - 1);
        self.queues[class].push_back((cost.max(1), item));
        self.len += 1;
    }

    /// The next item to serve and its class, or `None` when empty.
    pub fn pop(&mut self) -> Option<(usize, T)> {
        if self.len == 0 {
            return None;
        }
        loop {
            let class = self.current;
            let Some(&(cost, _)) = self.queues[class].front() else {
                self.deficits[class] = 0;
                self.advance();
                continue;
            };
            if !self.credited {
                self.deficits[class] = self.deficits[class]
                    .saturating_add(u64::from(self.weights[class]) * self.quantum);
                self.credited = true;
            }
            if self.deficits[class] >= cost {
                self.deficits[class] -= cost;
                let (_, item) = self.queues[class].pop_front()?;
                self.len -= 1;
                if self.queues[class].is_empty() {
                    self.deficits[class] = 0;
                    self.advance();
                }
                return Some((class, item));
            }
            self.advance();
        }
    }

    /// Removes every queued item (in no particular order).
    pub fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len);
        for queue in &mut self.queues {
            out.extend(queue.drain(..).map(|(_, item)| item));
        }
        self.deficits = [0; CLASSES];
        self.len = 0;
        out
    }

    fn advance(&mut self) {
        self.current = (self.current + 1) % CLASSES;
        self.credited = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlogged_classes_are_served_in_proportion_to_their_weights() {
        let mut drr = Drr::default();
        for class in 0..CLASSES {
            for i in 0..1000 {
                drr.push(class, 1, (class, i));
            }
        }
        let mut served = [0usize; CLASSES];
        // 15 rounds of the full weight sum.
        for _ in 0..(15 * 15) {
            let (class, (item_class, _)) = drr.pop().unwrap();
            assert_eq!(class, item_class);
            served[class] += 1;
        }
        assert_eq!(served, [75, 60, 45, 30, 15]);
    }

    #[test]
    fn each_class_is_fifo_and_costs_count() {
        let mut drr = Drr::new([1, 1, 1, 1, 1], 4);
        // Class 0 items cost 4 (one per visit), class 1 items cost 1 (four per visit).
        for i in 0..4 {
            drr.push(0, 4, (0, i));
        }
        for i in 0..8 {
            drr.push(1, 1, (1, i));
        }
        let order: Vec<(usize, usize)> = std::iter::from_fn(|| drr.pop().map(|(_, x)| x)).collect();
        let class0: Vec<usize> = order.iter().filter(|x| x.0 == 0).map(|x| x.1).collect();
        let class1: Vec<usize> = order.iter().filter(|x| x.0 == 1).map(|x| x.1).collect();
        assert_eq!(class0, vec![0, 1, 2, 3]);
        assert_eq!(class1, (0..8).collect::<Vec<_>>());
        assert_eq!(&order[..5], &[(0, 0), (1, 0), (1, 1), (1, 2), (1, 3)]);
    }

    #[test]
    fn an_idle_class_keeps_no_credit_and_a_lone_class_is_work_conserving() {
        let mut drr = Drr::default();
        for i in 0..10 {
            drr.push(4, 1, i);
        }
        let got: Vec<i32> = std::iter::from_fn(|| drr.pop().map(|(_, x)| x)).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(drr.is_empty());
        // A high class arriving behind a backlog of low ones is served within one round.
        for i in 0..100 {
            drr.push(4, 1, i);
        }
        drr.pop();
        drr.push(0, 1, 1000);
        let position = std::iter::from_fn(|| drr.pop().map(|(_, x)| x))
            .position(|x| x == 1000)
            .unwrap();
        assert!(
            position <= 1,
            "high-priority item served after {position} low ones"
        );
    }
}
