//! One shard: a hash index over a slab of nodes threaded on an intrusive,
//! doubly linked LRU list. Everything here runs under the shard's mutex.

use std::collections::HashMap;

use bytes::Bytes;

use crate::class::{size_class, SIZE_CLASS_LIMIT};
use crate::item::{Item, STATE_FETCHED};
use crate::ops::ClassStats;
use crate::time::UnixSecs;

const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Node {
    item: Item,
    /// Towards the most recently used end (head).
    newer: u32,
    /// Towards the least recently used end (tail).
    older: u32,
}

/// Counters kept per shard under its lock and summed by `Store::stats`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardCounters {
    pub total_items: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub expired_unfetched: u64,
    pub reclaimed: u64,
    pub crawler_reclaimed: u64,
    pub crawler_items_checked: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
}

/// The flush_all watermark, copied out of the store's atomics once per
/// operation (memcached's `settings.oldest_live` / `settings.oldest_cas`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FlushMark {
    /// `None` = no flush yet; else items last accessed at or before this
    /// second are invalid once `now >= oldest_live`.
    pub oldest_live: Option<u64>,
    /// 0 = none; else items with a CAS below it are invalid (same condition).
    pub oldest_cas: u64,
}

impl FlushMark {
    pub fn flushes(&self, item: &Item, now: UnixSecs) -> bool {
        let Some(oldest_live) = self.oldest_live else {
            return false;
        };
        if oldest_live > now.0 {
            return false;
        }
        item.last_access.0 <= oldest_live
            || (self.oldest_cas != 0 && item.cas != 0 && item.cas < self.oldest_cas)
    }
}

/// True if `item` is neither expired nor flushed at `now`.
pub(crate) fn is_live(item: &Item, now: UnixSecs, flush: &FlushMark) -> bool {
    !item.expiry.is_expired(now) && !flush.flushes(item, now)
}

#[derive(Debug)]
pub(crate) struct ShardState {
    index: HashMap<Bytes, u32, ahash::RandomState>,
    nodes: Vec<Option<Node>>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    /// Sum of `item_size` over the items in this shard.
    pub bytes: u64,
    pub counters: ShardCounters,
    /// Per size class ([`size_class`]) figures, indexed by class id.
    pub classes: [ClassStats; SIZE_CLASS_LIMIT],
    /// Next slot the expiry crawler looks at.
    pub crawl_cursor: usize,
}

impl ShardState {
    pub fn new(hasher: ahash::RandomState) -> ShardState {
        ShardState {
            index: HashMap::with_hasher(hasher),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            counters: ShardCounters::default(),
            classes: [ClassStats::default(); SIZE_CLASS_LIMIT],
            crawl_cursor: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Buckets the key index has room for.
    pub fn index_capacity(&self) -> usize {
        self.index.capacity()
    }

    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        self.index.get(key).copied()
    }

    fn node(&self, slot: u32) -> &Node {
        match self.nodes.get(slot as usize) {
            Some(Some(node)) => node,
            // Slots come only from the index or the list, which point at
            // occupied nodes; anything else is a bug in this module.
            _ => unreachable!("shard slot {slot} is not occupied"),
        }
    }

    fn node_mut(&mut self, slot: u32) -> &mut Node {
        match self.nodes.get_mut(slot as usize) {
            Some(Some(node)) => node,
            _ => unreachable!("shard slot {slot} is not occupied"),
        }
    }

    pub fn item(&self, slot: u32) -> &Item {
        &self.node(slot).item
    }

    pub fn item_mut(&mut self, slot: u32) -> &mut Item {
        &mut self.node_mut(slot).item
    }

    /// Most recently used slot, if any.
    pub fn head(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// The slot just less recently used than `slot`.
    pub fn older_than(&self, slot: u32) -> Option<u32> {
        let older = self.node(slot).older;
        (older != NIL).then_some(older)
    }

    /// Least recently used slot, if any.
    pub fn tail(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// The slot just more recently used than `slot`.
    pub fn newer_than(&self, slot: u32) -> Option<u32> {
        let newer = self.node(slot).newer;
        (newer != NIL).then_some(newer)
    }

    /// Last access second of the LRU tail, `u64::MAX` when empty. Published
    /// to other threads so eviction can pick the shard with the oldest tail.
    pub fn oldest_access(&self) -> u64 {
        match self.tail() {
            Some(slot) => self.item(slot).last_access.0,
            None => u64::MAX,
        }
    }

    fn detach(&mut self, slot: u32) {
        let (newer, older) = {
            let node = self.node(slot);
            (node.newer, node.older)
        };
        if newer != NIL {
            self.node_mut(newer).older = older;
        } else {
            self.head = older;
        }
        if older != NIL {
            self.node_mut(older).newer = newer;
        } else {
            self.tail = newer;
        }
        let node = self.node_mut(slot);
        node.newer = NIL;
        node.older = NIL;
    }

    fn attach_head(&mut self, slot: u32) {
        let old_head = self.head;
        {
            let node = self.node_mut(slot);
            node.newer = NIL;
            node.older = old_head;
        }
        if old_head != NIL {
            self.node_mut(old_head).newer = slot;
        } else {
            self.tail = slot;
        }
        self.head = slot;
    }

    /// Marks the item read at `now` and moves it to the LRU head.
    pub fn bump(&mut self, slot: u32, now: UnixSecs) {
        {
            let item = self.item_mut(slot);
            item.state |= STATE_FETCHED;
            item.last_access = now;
        }
        self.relink_head(slot);
    }

    /// Moves the item to the LRU head and updates its last access without
    /// marking it fetched (memcached's `do_item_update`, e.g. a failed add).
    pub fn refresh(&mut self, slot: u32, now: UnixSecs) {
        self.item_mut(slot).last_access = now;
        self.relink_head(slot);
    }

    fn relink_head(&mut self, slot: u32) {
        if self.head != slot {
            self.detach(slot);
            self.attach_head(slot);
        }
    }

    /// Inserts a new item at the LRU head. The key must not be present.
    pub fn insert(&mut self, item: Item) -> u32 {
        self.bytes += item.size();
        self.class_added(&item);
        self.counters.total_items += 1;
        let key = item.key.clone();
        let node = Node {
            item,
            newer: NIL,
            older: NIL,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.nodes[slot as usize] = Some(node);
                slot
            }
            None => {
                self.nodes.push(Some(node));
                (self.nodes.len() - 1) as u32
            }
        };
        self.index.insert(key, slot);
        self.attach_head(slot);
        slot
    }

    /// Replaces the item in `slot` (same key) and moves it to the LRU head.
    /// Returns the old item.
    pub fn replace(&mut self, slot: u32, item: Item) -> Item {
        self.bytes += item.size();
        self.class_added(&item);
        self.counters.total_items += 1;
        let old = std::mem::replace(&mut self.node_mut(slot).item, item);
        self.bytes -= old.size();
        self.class_removed(&old);
        self.relink_head(slot);
        old
    }

    /// Unlinks and returns the item in `slot`.
    pub fn remove(&mut self, slot: u32) -> Item {
        self.detach(slot);
        let node = match self.nodes.get_mut(slot as usize).and_then(Option::take) {
            Some(node) => node,
            None => unreachable!("removing unoccupied shard slot {slot}"),
        };
        self.free.push(slot);
        self.index.remove(&node.item.key[..]);
        self.bytes -= node.item.size();
        self.class_removed(&node.item);
        node.item
    }

    /// The figures of `item`'s size class.
    pub fn class_of(&mut self, item: &Item) -> &mut ClassStats {
        &mut self.classes[size_class(item.size())]
    }

    fn class_added(&mut self, item: &Item) {
        let class = self.class_of(item);
        class.number += 1;
        class.mem_requested += item.size();
    }

    fn class_removed(&mut self, item: &Item) {
        let class = self.class_of(item);
        class.number -= 1;
        class.mem_requested -= item.size();
    }

    /// Zeroes the counters (`stats reset`); what the shard holds stays counted.
    pub fn reset_counters(&mut self) {
        self.counters = ShardCounters::default();
        for class in &mut self.classes {
            *class = ClassStats {
                number: class.number,
                mem_requested: class.mem_requested,
                ..ClassStats::default()
            };
        }
    }

    /// Number of slots (occupied or free), the crawler's range.
    pub fn slot_count(&self) -> usize {
        self.nodes.len()
    }

    /// The item in `slot` if the slot is occupied.
    pub fn slot_item(&self, slot: usize) -> Option<&Item> {
        self.nodes
            .get(slot)
            .and_then(Option::as_ref)
            .map(|n| &n.item)
    }

    /// Checks the list and index agree (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self) {
        let mut count = 0usize;
        let mut bytes = 0u64;
        let mut slot = self.head;
        let mut newer = NIL;
        while slot != NIL {
            let node = self.node(slot);
            assert_eq!(node.newer, newer, "broken back link");
            assert_eq!(self.index.get(&node.item.key[..]), Some(&slot));
            count += 1;
            bytes += node.item.size();
            newer = slot;
            slot = node.older;
        }
        assert_eq!(self.tail, newer);
        assert_eq!(count, self.index.len());
        assert_eq!(bytes, self.bytes);
    }
}
