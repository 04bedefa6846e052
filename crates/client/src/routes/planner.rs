//! The multiget planner's run-time side: a plan per read (`tailtrim_policy::planner`: batch,
//! Chisel, Rein, TailX, cost-sbf, auto), its fetches run concurrently, failed fetches planned
//! again without their backend; each finished read's latency goes back to the planner.
//!
//! ```text
//!   multiget(keys) ─► plan_at: planner.plan(&request, &view), each fetch reserved on its
//!                        backend at once ─► Fetch per backend, concurrently
//!                        failed fetches: their keys are planned again without that backend
//!                        Unavailable: fail fast (NoBackend)
//!                        not_before: wait in the delay queue; priority: the backend gate's class,
//!                        or, to a backend that serves classes itself, `mg … p<class>` requests;
//!                        no priority: counted in the gate's window, never held back
//!   fetch ─► shaping (query slots, injected setup, Chisel's merging of mice) ─► query
//! ```

use std::time::Instant;

use bytes::Bytes;
use futures_util::future::join_all;
use smallvec::SmallVec;
use tailtrim_policy::chisel_merge::member_values;
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::planner::{Action, Fetch, Observation, PlannerKind, RequestDone};
use tailtrim_policy::rein::class_of;

use crate::backend::{Priorities, Reservation};
use crate::config::PoolConfig;
use crate::connection::{ReplyShape, ValueItem};
use crate::error::ClientError;
use crate::pool::{Inline, KeyResult, MultigetKind, Plan, Pool};
use crate::routes::failover::no_backend;
use crate::routes::spec::RouteSpec;
use crate::shaping::{join_or_lead, seal, setup_wait, Merge};

/// The registry's configure: the route's `planner`, else the pool's. Left out of a
/// configuration that lists the pool's layers, a multiget is one fetch per owning backend
/// (the batch planner).
pub fn configure(spec: Option<&RouteSpec>, config: &mut PoolConfig) -> Result<(), ClientError> {
    match spec {
        Some(spec) => {
            config.planner = spec.planner.unwrap_or(config.planner);
            Ok(())
        }
        None if config.planner == PlannerKind::Batch => Ok(()),
        None => Err(ClientError::Config(format!(
            "[pool] planner = {:?} needs the planner route in [[routes]]",
            config.planner.name()
        ))),
    }
}

impl Pool {
    /// `keys` order (`None` for a miss). Keys whose backends failed are planned again on other
    /// replicas; if some key can be served by no replica the whole read fails.
    pub async fn multiget(
        &self,
        keys: &[Bytes],
        kind: MultigetKind,
    ) -> Result<Vec<Option<ValueItem>>, ClientError> {
        self.multiget_each(keys, kind).await.into_iter().collect()
    }

    /// The planner that plans now, for a planner that chooses between others (`auto`).
    pub fn planner_choice(&self) -> Option<&'static str> {
        self.planner.lock().choice()
    }

    /// Like [`Pool::multiget`], but a failure only fails the keys it concerns: each key gets
    /// its value, a miss, or the error of the backend(s) that should have served it.
    pub async fn multiget_each(&self, keys: &[Bytes], kind: MultigetKind) -> Vec<KeyResult> {
        self.stats.multigets.incr();
        self.stats.multiget_keys.add(keys.len() as u64);
        let started = Instant::now();
        self.shaper.request(keys.len());
        self.shaper
            .maybe_run_epoch_stretched(|| self.planner.lock().analyzer_epochs());
        if let Some(shape) = self.shaper.take_pending(self.config.elephant_threshold) {
            self.planner.lock().set_shape(shape);
        }
        let result = self.multiget_inner(keys, kind, started).await;
        let elapsed = started.elapsed();
        self.planner.lock().observe_request(&RequestDone {
            keys: u32::try_from(keys.len()).unwrap_or(u32::MAX),
            latency_nanos: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            at: self.clock.at(started + elapsed),
        });
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.stats.multiget_latency.record_micros(micros);
        self.stats.multiget_class_latency[usize::from(class_of(keys.len() as u64))]
            .record_micros(micros);
        self.stats.latency.record_micros(micros);
        if self.shaper.is_elephant(keys.len()) {
            self.stats.elephant_latency.record_micros(micros);
        } else {
            self.stats.mice_latency.record_micros(micros);
        }
        self.shaper.finished(keys.len(), micros);
        result
    }

    /// Runs one planned fetch, of the keys at `positions` in `keys`: merged into a query being
    /// set up (mice, `merge_limit > 1`), or as its own query.
    async fn run_fetch(
        &self,
        fetch: &Fetch,
        reservation: Reservation<'_>,
        keys: &[Bytes],
        positions: &[usize],
        kind: MultigetKind,
        merge_limit: u32,
    ) -> Result<Fetched, ClientError> {
        let backend = fetch.backend;
        let class = usize::from(fetch.priority.unwrap_or(0)).min(CLASSES - 1);
        // A fetch without a priority has no order for the gate to apply: not held back.
        let held = fetch.priority.is_some();
        if let Some(start_at) = fetch.not_before {
            let wait = start_at.nanos_since(self.clock.now());
            self.delay.hold(std::time::Duration::from_nanos(wait)).await;
        }
        let shaper = &self.shaper;
        if merge_limit <= 1 {
            let _slot = shaper.query_slots.acquire().await;
            if !shaper.inject_overhead.is_zero() {
                let setup = Instant::now();
                setup_wait(shaper.inject_overhead, shaper.overhead_sleeps).await;
                shaper.setup_done(setup.elapsed());
            }
            let refs: Inline<&[u8]> = positions.iter().map(|&i| keys[i].as_ref()).collect();
            return self
                .query(backend, reservation, &refs, kind, class, held)
                .await
                .map(Fetched::Items);
        }
        let keys: Vec<Bytes> = positions.iter().map(|&i| keys[i].clone()).collect();
        let query = match join_or_lead(&shaper.slots[backend], &keys, merge_limit) {
            Merge::Joined(reply) => {
                // The leader's query is the one outstanding request.
                drop(reservation);
                shaper.merged_requests.incr();
                return reply.await.map_or_else(
                    |_| {
                        Err(ClientError::ConnectionLost {
                            backend: self.backends[backend].address().to_string(),
                            reason: "the merged query was abandoned".to_string(),
                        })
                    },
                    |reply| reply.map(Fetched::PerKey),
                );
            }
            Merge::Leader(query) => query,
        };
        // Mice keep joining while the query waits for a slot and is set up.
        let _slot = shaper.query_slots.acquire().await;
        let setup = Instant::now();
        setup_wait(shaper.inject_overhead, shaper.overhead_sleeps).await;
        shaper.setup_done(setup.elapsed());
        let sealed = seal(&shaper.slots[backend], &query);
        if !sealed.members.is_empty() {
            shaper.merged_queries.incr();
        }
        let own = keys.len();
        let refs: Vec<&[u8]> = sealed.keys.iter().map(Bytes::as_ref).collect();
        match self
            .query(backend, reservation, &refs, kind, class, held)
            .await
        {
            Ok(items) => {
                let mut values = vec![None; refs.len()];
                match_values(refs.iter().copied(), items, |at, item| values[at] = item);
                for (range, member) in sealed.members {
                    let _ = member.send(Ok(member_values(&values, range)));
                }
                values.truncate(own);
                Ok(Fetched::PerKey(values))
            }
            Err(error) => {
                for (_, member) in sealed.members {
                    let _ = member.send(Err(error.clone()));
                }
                Err(error)
            }
        }
    }

    /// Sends one multi-key query to `backend`; the items it returned, in its order.
    async fn query(
        &self,
        backend: usize,
        reservation: Reservation<'_>,
        keys: &[&[u8]],
        kind: MultigetKind,
        class: usize,
        held: bool,
    ) -> Result<Vec<ValueItem>, ClientError> {
        let classed = self.backends[backend].detect_priorities().await == Priorities::Backend;
        self.stats.queries.incr();
        self.stats.query_keys.add(keys.len() as u64);
        let sent = Instant::now();
        let (reply, elapsed) = if classed {
            let ageing = self.backends[backend].ageing();
            let write = |out: &mut Vec<u8>| kind.compose_classed(out, keys, class, ageing);
            let call = self.backends[backend].call_reserved(
                reservation,
                ReplyShape::UntilMetaNoop,
                class,
                held,
                sent,
                write,
            );
            call.await
        } else {
            let write = |out: &mut Vec<u8>| kind.compose(out, keys);
            let call = self.backends[backend].call_reserved(
                reservation,
                ReplyShape::UntilEnd,
                class,
                held,
                sent,
                write,
            );
            call.await
        };
        self.stats.fetch_class_latency[class]
            .record_micros(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
        let mut reply = reply?;
        if classed && !reply.error_line {
            match meta_multiget_values(&reply.bytes) {
                Ok(values) => reply.values = values,
                Err(line) => {
                    return Err(ClientError::BackendReplied {
                        backend: self.backends[backend].address().to_string(),
                        line,
                    })
                }
            }
        }
        if reply.error_line {
            return Err(ClientError::BackendReplied {
                backend: self.backends[backend].address().to_string(),
                line: String::from_utf8_lossy(reply.bytes.trim_ascii_end()).into_owned(),
            });
        }
        let hits = reply.values.len() as u32;
        let value_bytes = reply.values.iter().map(|v| v.data.len() as u64).sum();
        self.shaper.query_done(keys.len() as u32, elapsed);
        let mut planner = self.planner.lock();
        if planner.wants_values() {
            for value in &reply.values {
                planner.observe_value(value.key(), value.data.len() as u64);
            }
        }
        planner.observe(&Observation {
            backend,
            keys: keys.len() as u32,
            hits,
            value_bytes,
            latency_nanos: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            at: self.clock.at(sent + elapsed),
        });
        drop(planner);
        Ok(reply.values)
    }

    async fn multiget_inner(
        &self,
        keys: &[Bytes],
        kind: MultigetKind,
        started: Instant,
    ) -> Vec<KeyResult> {
        let mut results: Vec<KeyResult> = vec![Ok(None); keys.len()];
        let mut remaining: Inline<usize> = (0..keys.len()).collect();
        let mut excluded: Vec<usize> = Vec::new();
        let mut failed: Vec<(usize, ClientError)> = Vec::new();
        for round in 0..self.config.replicas.max(1) {
            if remaining.is_empty() {
                break;
            }
            let now = if round > 0 {
                self.stats.failovers.incr();
                self.clock.now()
            } else {
                self.clock.at(started)
            };
            let last_error = failed.last().map(|(_, error)| error.clone());
            failed.clear();
            // The round's keys live only while planning: not kept in the future's state.
            let Plan {
                actions,
                reservations,
                merge_limit: planned_merge,
            } = {
                let round_keys: Inline<&[u8]> =
                    remaining.iter().map(|&i| keys[i].as_ref()).collect();
                self.plan_at(&round_keys, &excluded, now)
            };
            // Only plain `get`s merge: their replies carry nothing request-specific.
            let merge_limit = if kind == MultigetKind::Get {
                planned_merge
            } else {
                1
            };
            let mut fetches: SmallVec<[_; 4]> = SmallVec::with_capacity(actions.len());
            for action in actions {
                match action {
                    Action::Fetch(fetch) => fetches.push(fetch),
                    Action::Unavailable { keys: unavailable } => {
                        self.stats.unavailable.incr();
                        for index in unavailable {
                            results[remaining[index as usize]] =
                                Err(no_backend(last_error.clone()));
                        }
                    }
                }
            }
            self.stats.fetches.add(fetches.len() as u64);
            // Each fetch's keys as positions in `keys`, worked out once for sending and matching.
            let planned: Vec<Inline<usize>> = fetches
                .iter()
                .map(|fetch| fetch.keys.iter().map(|&i| remaining[i as usize]).collect())
                .collect();
            let calls = fetches.iter().zip(&planned).zip(reservations).map(
                |((fetch, positions), reservation)| {
                    self.run_fetch(fetch, reservation, keys, positions, kind, merge_limit)
                },
            );
            let replies = join_few(calls, fetches.len()).await;
            for ((fetch, original), reply) in fetches.iter().zip(planned).zip(replies) {
                match reply {
                    Ok(Fetched::Items(items)) => {
                        let asked = original.iter().map(|&index| keys[index].as_ref());
                        match_values(asked, items, |at, item| results[original[at]] = Ok(item));
                    }
                    Ok(Fetched::PerKey(values)) => {
                        for (&index, value) in original.iter().zip(values) {
                            results[index] = Ok(value);
                        }
                    }
                    Err(error @ ClientError::BackendReplied { .. }) => {
                        for &index in &original {
                            results[index] = Err(error.clone());
                        }
                    }
                    Err(error) => {
                        excluded.push(fetch.backend);
                        failed.extend(original.into_iter().map(|index| (index, error.clone())));
                    }
                }
            }
            failed.sort_unstable_by_key(|(index, _)| *index);
            remaining = failed.iter().map(|(index, _)| *index).collect();
        }
        let replicated = self.config.replicas > 1;
        for (index, error) in failed {
            results[index] = Err(if replicated {
                no_backend(Some(error))
            } else {
                error
            });
        }
        results
    }
}

/// The items of a reply to [`compose::meta_multiget`]: each `VA` item (return flags `f`, `k`
/// and maybe `c`) becomes the `VALUE` item a text multiget would have returned. Any other
/// reply item is the backend's error, returned as its line.
fn meta_multiget_values(bytes: &Bytes) -> Result<Vec<ValueItem>, String> {
    use tailtrim_proto::number::{parse_u32, parse_u64};
    use tailtrim_proto::{parse_response, tokens, Parsed, Response};
    let mut values = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let (flags, data, consumed) = match parse_response(rest) {
            Parsed::Complete {
                value: Response::MetaValue { flags, data },
                consumed,
            } => (flags, data, consumed),
            Parsed::Complete { consumed, .. } | Parsed::Invalid { consumed, .. } => {
                let line = &rest[..consumed.min(rest.len())];
                return Err(String::from_utf8_lossy(line.trim_ascii_end()).into_owned());
            }
            Parsed::Incomplete => return Err("truncated meta reply".to_string()),
        };
        let (mut key, mut client_flags, mut cas) = (None, 0, None);
        for token in tokens(&flags) {
            match token.split_first() {
                Some((b'k', k)) => key = Some(k),
                Some((b'f', f)) => client_flags = parse_u32(f).unwrap_or(0),
                Some((b'c', c)) => cas = parse_u64(c),
                _ => {}
            }
        }
        let key = key.ok_or_else(|| "VA item without its key".to_string())?;
        let value = &rest[data];
        let mut item = Vec::with_capacity(key.len() + value.len() + 48);
        item.extend_from_slice(b"VALUE ");
        item.extend_from_slice(key);
        item.extend_from_slice(format!(" {client_flags} {}", value.len()).as_bytes());
        if let Some(cas) = cas {
            item.extend_from_slice(format!(" {cas}").as_bytes());
        }
        item.extend_from_slice(b"\r\n");
        let start = item.len();
        item.extend_from_slice(value);
        item.extend_from_slice(b"\r\n");
        values.push(ValueItem {
            key_at: 6..6 + key.len(),
            item: Bytes::from(item),
            flags: client_flags,
            cas,
            data: start..start + value.len(),
        });
        rest = &rest[consumed..];
    }
    Ok(values)
}

/// Awaits `count` futures concurrently, outputs in order. The futures live in an allocation of
/// their own (one box, or `join_all`'s slice), not in the caller's future: held in place (up to
/// four inline slots, as before) they made the multiget's future ~7.7 KB, which the frontend's
/// box copied whole for every multiget — more memory traffic than the allocation saves
/// (`experiments/proxy/future-size/`).
async fn join_few<F: std::future::Future>(
    mut futures: impl Iterator<Item = F>,
    count: usize,
) -> SmallVec<[F::Output; 4]> {
    if count <= 1 {
        return match futures.next() {
            Some(one) => smallvec::smallvec![Box::pin(one).await],
            None => SmallVec::new(),
        };
    }
    SmallVec::from_vec(join_all(futures).await)
}

/// What one fetch returns.
enum Fetched {
    /// The backend's items, in its order, to be matched to the fetch's keys.
    Items(Vec<ValueItem>),
    /// One entry per key of the fetch (a merged query's share).
    PerKey(Vec<Option<ValueItem>>),
}

/// Matches the `VALUE` items of one query to the keys it asked for: `put(position, item)` for
/// every key position, in order (`None` for a miss). Backends answer in request order,
/// skipping misses; an item is only ever given to a key equal to the item's key, so a confused
/// backend can cause a miss but never a wrong value.
fn match_values<'k>(
    keys: impl IntoIterator<Item = &'k [u8]>,
    values: Vec<ValueItem>,
    mut put: impl FnMut(usize, Option<ValueItem>),
) {
    let mut values = values.into_iter().peekable();
    for (position, key) in keys.into_iter().enumerate() {
        let matched = match values.peek() {
            Some(next) if next.key() == key => values.next(),
            _ => None,
        };
        put(position, matched);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classed_meta_replies_become_the_text_items_a_get_returns() {
        let reply = Bytes::from_static(b"VA 2 f7 kab c99\r\nhi\r\nVA 0 f0 kc\r\n\r\n");
        let values = meta_multiget_values(&reply).expect("parses");
        assert_eq!(values.len(), 2);
        assert_eq!(values[0].item.as_ref(), b"VALUE ab 7 2 99\r\nhi\r\n");
        assert_eq!(
            (values[0].key(), values[0].flags, values[0].cas),
            (&b"ab"[..], 7, Some(99))
        );
        assert_eq!(values[0].value().as_ref(), b"hi");
        assert_eq!(values[1].item.as_ref(), b"VALUE c 0 0\r\n\r\n");
        assert_eq!(values[1].value().as_ref(), b"");
        assert_eq!(
            meta_multiget_values(&Bytes::from_static(b"CLIENT_ERROR invalid flag\r\n")),
            Err("CLIENT_ERROR invalid flag".to_string())
        );
        assert!(meta_multiget_values(&Bytes::from_static(b"VA 1 f0\r\nx\r\n")).is_err());
        assert_eq!(meta_multiget_values(&Bytes::new()), Ok(Vec::new()));
    }

    fn item(key: &str) -> ValueItem {
        let text = format!("VALUE {key} 0 1\r\nx\r\n");
        let len = text.len();
        ValueItem {
            key_at: 6..6 + key.len(),
            item: Bytes::from(text),
            flags: 0,
            cas: None,
            data: (len - 3)..(len - 2),
        }
    }

    #[test]
    fn values_go_only_to_indices_with_the_same_key() {
        let keys: Vec<Bytes> = ["a", "b", "c", "a"]
            .iter()
            .map(|k| Bytes::from(*k))
            .collect();
        let matched = |keys: &[Bytes], items: Vec<ValueItem>| {
            let mut results = vec![None; keys.len()];
            match_values(keys.iter().map(Bytes::as_ref), items, |at, item| {
                results[at] = item
            });
            results
        };
        // b missed; a asked twice and returned twice.
        let results = matched(&keys, vec![item("a"), item("c"), item("a")]);
        let got: Vec<Option<&[u8]>> = results
            .iter()
            .map(|r| r.as_ref().map(ValueItem::key))
            .collect();
        assert_eq!(
            got,
            vec![Some(&b"a"[..]), None, Some(&b"c"[..]), Some(&b"a"[..])]
        );
        // A backend returning an unexpected key gives no value to anyone.
        let results = matched(&keys[..2], vec![item("zz")]);
        assert!(results.iter().all(Option::is_none));
    }

    #[tokio::test]
    async fn a_few_futures_join_in_order() {
        // The first finishes last: a join that polled a finished `async` block again would
        // panic ("resumed after completion"), one that lost an output would come up short.
        for count in 0..7 {
            let futures = (0..count).map(|i| async move {
                for _ in 0..(count - i) * 2 {
                    tokio::task::yield_now().await;
                }
                i * 10
            });
            let outputs = join_few(futures, count).await;
            assert_eq!(
                outputs.to_vec(),
                (0..count).map(|i| i * 10).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn multiget_commands_compose() {
        let keys: [&[u8]; 2] = [b"a", b"bb"];
        let composed = |kind: MultigetKind| {
            let mut out = Vec::new();
            kind.compose(&mut out, &keys);
            out
        };
        assert_eq!(composed(MultigetKind::Get), b"get a bb\r\n");
        assert_eq!(composed(MultigetKind::Gats(30)), b"gats 30 a bb\r\n");
    }
}
