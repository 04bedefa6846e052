//! The order in which a server (or the proxy's gate in front of one) serves prioritized
//! requests: one queue, three disciplines, the same code in the simulator, `tailtrim serve`
//! and the proxy.
//!
//! ```text
//!   push(priority, item) ─► Strict: (priority, arrival seq)           lowest first
//!                           Aged{k}: arrival seq + k × priority       lowest first
//!                           Drr: class = priority (≤ 4), weights 5..1 (see `drr`)
//!   push_aged(priority, k, item) ─► Aged{k} for this item (the ageing a request carries,
//!                                   `mg … p<class>a<k>`), whatever the queue's own order
//!                                   unless it is Drr
//!   pop() ─► the next item (work-conserving: never idle while anything waits)
//! ```
//!
//! `Strict` is Rein as published (Reda et al., EuroSys 2017): non-preemptive strict priority,
//! first come first served inside a priority. `Aged` is strict priority with ageing counted in
//! arrivals, so it needs no clock and no time scale: an item of priority `p` is overtaken by
//! an item of priority `q < p` only if that one arrived fewer than `k × (p − q)` arrivals after
//! it, so no item waits for more than `k × p` later arrivals (no priority starves), and with a
//! `k` far above the arrivals of a busy period it orders as `Strict` does. `Drr` is deficit
//! round robin over Rein's five classes, the option kept as `rein-drr`.
//!
//! Strict priority is ageing with an overtaking window no queue reaches
//! ([`STRICT_OVERTAKES`]), so one heap holds both: an item that carries its own ageing
//! ([`PriorityQueue::push_aged`], how `cost-sbf`'s servers learn their order from the wire) is
//! keyed `seq + k × priority` beside the strict items' `seq + STRICT_OVERTAKES × priority`. A
//! queue whose items share one order serves them exactly as that discipline does.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::drr::{Drr, CLASSES};

/// The ageing of strict priority: later arrivals that may overtake an item per step of
/// priority, beyond any queue's arrivals (2^40), so that `Strict` is `Aged` with this window.
pub const STRICT_OVERTAKES: u64 = 1 << 40;

/// How prioritized items are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Discipline {
    /// Strict non-preemptive priority (lower value first), FIFO inside a priority.
    #[default]
    Strict,
    /// Strict priority with ageing: key = arrival number + `overtakes` × priority.
    Aged {
        /// Later arrivals that may overtake an item per step of priority between them.
        overtakes: u64,
    },
    /// Deficit round robin over the [`CLASSES`] classes (weights 5..1), one unit per item.
    Drr,
}

impl Discipline {
    /// The name in configs and reports: `strict`, `aged`, `drr`.
    pub fn name(self) -> &'static str {
        match self {
            Discipline::Strict => "strict",
            Discipline::Aged { .. } => "aged",
            Discipline::Drr => "drr",
        }
    }
}

struct Entry<T> {
    key: u64,
    seq: u64,
    priority: u8,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.key, self.seq) == (other.key, other.seq)
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.key, self.seq).cmp(&(other.key, other.seq))
    }
}

/// A queue of items served by a [`Discipline`]. Pure: time comes in with each push.
pub struct PriorityQueue<T> {
    discipline: Discipline,
    heap: BinaryHeap<Reverse<Entry<T>>>,
    drr: Drr<T>,
    seq: u64,
}

impl<T> std::fmt::Debug for PriorityQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PriorityQueue")
            .field("discipline", &self.discipline)
            .field("len", &self.len())
            .finish()
    }
}

impl<T> Default for PriorityQueue<T> {
    fn default() -> Self {
        PriorityQueue::new(Discipline::default())
    }
}

impl<T> PriorityQueue<T> {
    /// An empty queue.
    pub fn new(discipline: Discipline) -> Self {
        PriorityQueue {
            discipline,
            heap: BinaryHeap::new(),
            drr: Drr::default(),
            seq: 0,
        }
    }

    /// The discipline.
    pub fn discipline(&self) -> Discipline {
        self.discipline
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.heap.len() + self.drr.len()
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `item` of `priority` (0 highest) in the queue's own order.
    pub fn push(&mut self, priority: u8, item: T) {
        match self.discipline {
            Discipline::Strict => self.push_keyed(priority, STRICT_OVERTAKES, item),
            Discipline::Aged { overtakes } => self.push_keyed(priority, overtakes, item),
            Discipline::Drr => self.push_drr(priority, item),
        }
    }

    /// Queues `item` of `priority` aged by `overtakes` later arrivals per step of priority
    /// ([`Discipline::Aged`] for this item), whether the queue is strict or aged; a `Drr`
    /// queue serves it by its class as [`PriorityQueue::push`] does.
    pub fn push_aged(&mut self, priority: u8, overtakes: u64, item: T) {
        match self.discipline {
            Discipline::Strict | Discipline::Aged { .. } => {
                self.push_keyed(priority, overtakes.min(STRICT_OVERTAKES), item)
            }
            Discipline::Drr => self.push_drr(priority, item),
        }
    }

    fn push_keyed(&mut self, priority: u8, overtakes: u64, item: T) {
        self.seq += 1;
        let key = self
            .seq
            .saturating_add(u64::from(priority).saturating_mul(overtakes));
        self.heap.push(Reverse(Entry {
            key,
            seq: self.seq,
            priority,
            item,
        }));
    }

    fn push_drr(&mut self, priority: u8, item: T) {
        self.seq += 1;
        self.drr
            .push(usize::from(priority).min(CLASSES - 1), 1, item);
    }

    /// The next item to serve, or `None`.
    pub fn pop(&mut self) -> Option<T> {
        match self.discipline {
            Discipline::Drr => self.drr.pop().map(|(_, item)| item),
            Discipline::Strict | Discipline::Aged { .. } => {
                self.heap.pop().map(|Reverse(entry)| entry.item)
            }
        }
    }

    /// Items waiting per Rein class (priorities above the last class count in the last).
    pub fn class_lens(&self) -> [usize; CLASSES] {
        match self.discipline {
            Discipline::Drr => std::array::from_fn(|class| self.drr.class_len(class)),
            Discipline::Strict | Discipline::Aged { .. } => {
                let mut lens = [0; CLASSES];
                for Reverse(entry) in self.heap.iter() {
                    lens[usize::from(entry.priority).min(CLASSES - 1)] += 1;
                }
                lens
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_serves_every_higher_priority_first_and_fifo_inside_one() {
        let mut queue = PriorityQueue::new(Discipline::Strict);
        for i in 0..5 {
            queue.push(3, (3, i));
        }
        for i in 0..3 {
            queue.push(0, (0, i));
        }
        queue.push(1, (1, 0));
        let order: Vec<(u8, u64)> = std::iter::from_fn(|| queue.pop()).collect();
        // Priority 0's three, priority 1's one, priority 3's five, each in arrival order.
        let expected: Vec<(u8, u64)> = [(0, 3), (1, 1), (3, 5)]
            .into_iter()
            .flat_map(|(priority, count)| (0..count).map(move |i| (priority, i)))
            .collect();
        assert_eq!(order, expected);
        assert!(queue.is_empty());
    }

    #[test]
    fn drr_is_the_round_robin_of_the_drr_module() {
        let mut queue = PriorityQueue::new(Discipline::Drr);
        for i in 0..10 {
            queue.push(4, i);
        }
        queue.push(0, 100);
        assert_eq!(queue.class_lens(), [1, 0, 0, 0, 10]);
        // Class 0 is visited first; the backlog follows in order.
        let order: Vec<i32> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(order[0], 100);
        assert_eq!(&order[1..], &(0..10).collect::<Vec<_>>()[..]);
    }

    /// A steady stream of high-priority work that alone keeps the server busy (one arrival
    /// per service, a backlog of ten): the number of pops until a low-priority item queued
    /// behind the backlog is served, if it is within `limit`.
    fn pops_until_a_low_item_is_served(discipline: Discipline, limit: u64) -> Option<u64> {
        let mut queue = PriorityQueue::new(discipline);
        for i in 0..10 {
            queue.push(0, ("high", i));
        }
        queue.push(4, ("low", 0));
        for pops in 1..=limit {
            queue.push(0, ("high", 10 + pops));
            let (kind, _) = queue.pop()?;
            if kind == "low" {
                return Some(pops);
            }
        }
        None
    }

    #[test]
    fn ageing_bounds_the_wait_of_the_lowest_priority_under_a_steady_high_stream() {
        let overtakes = 100;
        let served = pops_until_a_low_item_is_served(Discipline::Aged { overtakes }, 100_000);
        // Overtaken by at most 4 × 100 later arrivals, plus the backlog of 10 before it.
        assert!(
            served.is_some_and(|pops| pops <= 4 * overtakes + 11),
            "served after {served:?} pops"
        );
        // Strict priority alone starves it: what ageing buys.
        assert_eq!(
            pops_until_a_low_item_is_served(Discipline::Strict, 100_000),
            None
        );
    }

    /// The order in which `queue` serves a fixed interleaving of pushes and pops of mixed
    /// priorities, each pushed by `push`.
    fn served_order(
        mut queue: PriorityQueue<u32>,
        push: impl Fn(&mut PriorityQueue<u32>, u8, u32),
    ) -> Vec<u32> {
        let mut order = Vec::new();
        for i in 0..600u32 {
            // Priorities 0..=4 in a scrambled pattern, two pushes per pop: a backlog grows.
            push(&mut queue, ((i * 7 + i / 5) % 5) as u8, i);
            if i % 2 == 1 {
                order.extend(queue.pop());
            }
        }
        order.extend(std::iter::from_fn(|| queue.pop()));
        order
    }

    #[test]
    fn items_carrying_their_ageing_are_served_as_the_aged_discipline_serves_them() {
        let own_order = |discipline| {
            served_order(PriorityQueue::new(discipline), |queue, priority, item| {
                queue.push(priority, item)
            })
        };
        let carrying = |discipline, overtakes| {
            served_order(PriorityQueue::new(discipline), |queue, priority, item| {
                queue.push_aged(priority, overtakes, item)
            })
        };
        let overtakes = 20;
        // A server whose own order is strict, every request carrying cost-sbf's ageing.
        let carried = carrying(Discipline::Strict, overtakes);
        assert_eq!(carried, own_order(Discipline::Aged { overtakes }));
        // And it is not the strict order (the ageing changed something).
        let strict = own_order(Discipline::Strict);
        assert_ne!(carried, strict);
        // Strict is ageing with the window no queue reaches.
        assert_eq!(carrying(Discipline::Strict, STRICT_OVERTAKES), strict);
        // Deficit round robin ignores a carried ageing: it orders by class.
        assert_eq!(
            carrying(Discipline::Drr, overtakes),
            own_order(Discipline::Drr)
        );
    }

    #[test]
    fn class_lens_count_every_discipline_by_priority() {
        for discipline in [
            Discipline::Strict,
            Discipline::Aged { overtakes: 7 },
            Discipline::Drr,
        ] {
            let mut queue = PriorityQueue::new(discipline);
            queue.push(0, ());
            queue.push(3, ());
            queue.push_aged(3, 5, ());
            queue.push(9, ());
            assert_eq!(queue.class_lens(), [1, 0, 0, 2, 1], "{discipline:?}");
        }
    }

    #[test]
    fn ageing_orders_as_strict_priority_within_its_window() {
        let mut queue = PriorityQueue::new(Discipline::Aged { overtakes: 3 });
        queue.push(2, "low, first"); // key 1 + 6 = 7
        queue.push(0, "high, 2nd"); // 2
        queue.push(1, "mid, 3rd"); // 3 + 3 = 6
        queue.push(0, "high, 4th"); // 4
        queue.push(0, "high, 5th"); // 5
        queue.push(0, "high, 8th arrival"); // 6 (arrival 6): ties go by arrival
        queue.push(0, "high, 7th"); // 7, after the low one (arrived first)
        queue.push(0, "high, 8th"); // 8
        let order: Vec<&str> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(
            order,
            vec![
                "high, 2nd",
                "high, 4th",
                "high, 5th",
                "mid, 3rd",
                "high, 8th arrival",
                "low, first",
                "high, 7th",
                "high, 8th"
            ]
        );
    }
}
