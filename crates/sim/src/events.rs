//! The event queue: a min-heap ordered by `(time, seq)`. `seq` is a counter assigned at
//! insertion, so events at the same instant pop in the order they were scheduled and a run
//! never depends on the heap's internal tie-breaking.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::time::Nanos;

struct Entry<E> {
    at: Nanos,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Pending events of one simulation.
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `event` at `at`.
    pub fn push(&mut self, at: Nanos, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Entry { at, seq, event }));
    }

    /// The earliest event (ties: the one scheduled first).
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        self.heap
            .pop()
            .map(|Reverse(entry)| (entry.at, entry.event))
    }

    /// Events still pending.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::EventQueue;
    use crate::time::Nanos;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut queue = EventQueue::new();
        queue.push(Nanos(20), "c");
        queue.push(Nanos(10), "a");
        queue.push(Nanos(20), "d");
        queue.push(Nanos(10), "b");
        let order: Vec<&str> = std::iter::from_fn(|| queue.pop().map(|(_, event)| event)).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        assert!(queue.is_empty());
    }
}
