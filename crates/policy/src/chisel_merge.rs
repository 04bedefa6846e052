//! Chisel's merging of mice: which fetches share one backend query, and which part of its
//! reply each gets. The split of elephants into chunks is [`crate::chisel::ChiselPlanner`]'s;
//! the client runs the queries (`tailtrim_client::shaping`: the per-backend slot, the wait
//! for the reply, the channels back to the members).
//!
//! ```text
//!   first mouse ─► MergedQuery::lead(keys, B)           the leader, keys 0..n
//!   next mice   ─► has_room()? ─► join(keys, member)    keys n..m, … ; full at B members
//!   leader set up ─► seal() ─► (all keys, [(range, member)])
//!   reply values, in key order ─► member_values(values, range) per member
//! ```

use std::ops::Range;

/// A query being set up that mice may still join: its keys (the leader's first) and each
/// member's range of them. `K` is a key, `M` whatever the runner keeps per member.
#[derive(Debug)]
pub struct MergedQuery<K, M> {
    keys: Vec<K>,
    members: Vec<(Range<usize>, M)>,
    limit: u32,
    sealed: bool,
}

/// What [`MergedQuery::seal`] hands the runner: every key to ask for, the leader's first
/// (`0..n`), and each member with its range of them.
#[derive(Debug)]
pub struct SealedQuery<K, M> {
    /// All keys, the leader's first.
    pub keys: Vec<K>,
    /// Each member's key range and its runner's handle.
    pub members: Vec<(Range<usize>, M)>,
}

impl<K, M> MergedQuery<K, M> {
    /// A query led by a fetch of `keys`, for at most `limit` requests (the leader included).
    pub fn lead(keys: Vec<K>, limit: u32) -> Self {
        MergedQuery {
            keys,
            members: Vec::new(),
            limit,
            sealed: false,
        }
    }

    /// True while one more request may join.
    pub fn has_room(&self) -> bool {
        !self.sealed && self.requests() < self.limit
    }

    fn requests(&self) -> u32 {
        u32::try_from(self.members.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1)
    }

    /// Adds a member's `keys`; true when the query is now full (later mice start a new one).
    /// Call only when [`MergedQuery::has_room`].
    pub fn join(&mut self, keys: impl IntoIterator<Item = K>, member: M) -> bool {
        let start = self.keys.len();
        self.keys.extend(keys);
        self.members.push((start..self.keys.len(), member));
        if self.requests() >= self.limit {
            self.sealed = true;
        }
        self.sealed
    }

    /// Closes the query to new members and hands over its keys and members.
    pub fn seal(&mut self) -> SealedQuery<K, M> {
        self.sealed = true;
        SealedQuery {
            keys: std::mem::take(&mut self.keys),
            members: std::mem::take(&mut self.members),
        }
    }
}

/// A member's share of a merged query's per-key values (in key order): the values of its
/// range, none if the reply was shorter.
pub fn member_values<V: Clone>(values: &[V], range: Range<usize>) -> Vec<V> {
    values.get(range).map(<[V]>::to_vec).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mice_join_until_the_limit_and_get_their_own_ranges() {
        let mut query: MergedQuery<&str, char> = MergedQuery::lead(vec!["a", "b"], 3);
        assert!(query.has_room());
        assert!(!query.join(["c"], 'x'));
        assert!(query.join(["d", "e"], 'y'), "full at three requests");
        assert!(!query.has_room());
        let sealed = query.seal();
        assert_eq!(sealed.keys, ["a", "b", "c", "d", "e"]);
        assert_eq!(sealed.members, [(2..3, 'x'), (3..5, 'y')]);
        let values = [1, 2, 3, 4, 5];
        assert_eq!(member_values(&values, 3..5), [4, 5]);
        assert_eq!(member_values(&values, 4..9), Vec::<i32>::new());
    }

    #[test]
    fn a_sealed_query_takes_no_one() {
        let mut query: MergedQuery<u8, ()> = MergedQuery::lead(vec![1], 8);
        let sealed = query.seal();
        assert_eq!((sealed.keys, sealed.members.len()), (vec![1], 0));
        assert!(!query.has_room());
        let single: MergedQuery<u8, ()> = MergedQuery::lead(vec![1], 1);
        assert!(!single.has_room(), "a limit of one is the leader alone");
    }
}
