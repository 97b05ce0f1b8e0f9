//! The per-replica work queues of the two variants.
//!
//! - [`FaithfulQueue`]: one bounded FIFO of events (app snapshots); when full the **newest
//!   event is dropped** and counted, and nothing ever re-queues it.
//! - [`CoalescingQueue`]: at most one entry per app (the latest state is read when the
//!   entry is processed), bounded at `capacity` entries; apps that do not fit go to a
//!   resync set (names only, bounded by the apps the replica owns) and are moved into the
//!   queue as room frees up. Per-app ordering: an app is handed to one worker at a time; if
//!   it changes while in flight it is processed again afterwards.

use std::collections::{BTreeSet, VecDeque};

/// The real reporter's queue size.
pub const QUEUE_CAPACITY: usize = 1_000;

/// What a bounded push did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    /// Queued.
    Queued,
    /// Already queued: merged into the pending entry (hardened only).
    Coalesced,
    /// The queue was full: the event was dropped (faithful) or parked for resync (hardened).
    Overflowed,
}

/// A bounded FIFO that drops the newest item when full.
#[derive(Debug)]
pub struct FaithfulQueue<T> {
    items: VecDeque<T>,
    capacity: usize,
    /// Events dropped because the queue was full.
    pub dropped: u64,
}

impl<T> FaithfulQueue<T> {
    /// An empty queue holding at most `capacity` items.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a queue needs room for one item");
        FaithfulQueue {
            items: VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    /// Non-blocking send: queues `item`, or drops it (the newest) when full.
    pub fn push(&mut self, item: T) -> Push {
        self.push_within(item, self.capacity)
    }

    /// As [`Self::push`] with the queue's room limited to `room` items (`0`: the queue is
    /// full as far as this push goes — the `reporter.queue_full` fault point).
    pub fn push_within(&mut self, item: T, room: usize) -> Push {
        if self.items.len() >= room.min(self.capacity) {
            self.dropped += 1;
            return Push::Overflowed;
        }
        self.items.push_back(item);
        Push::Queued
    }

    /// The oldest item.
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A per-app coalescing queue with an overflow resync set.
#[derive(Debug)]
pub struct CoalescingQueue {
    order: VecDeque<String>,
    queued: BTreeSet<String>,
    in_flight: BTreeSet<String>,
    /// Changed while in flight: re-queued when the worker finishes.
    dirty: BTreeSet<String>,
    /// Did not fit: moved into the queue as room frees up (the targeted resync).
    resync: BTreeSet<String>,
    capacity: usize,
    /// Pushes that found the queue full (each one parked, none lost).
    pub overflowed: u64,
    /// Pushes merged into a pending entry.
    pub coalesced: u64,
}

impl CoalescingQueue {
    /// An empty queue of at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a queue needs room for one entry");
        CoalescingQueue {
            order: VecDeque::new(),
            queued: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            dirty: BTreeSet::new(),
            resync: BTreeSet::new(),
            capacity,
            overflowed: 0,
            coalesced: 0,
        }
    }

    /// Marks `app` as needing processing.
    pub fn push(&mut self, app: &str) -> Push {
        self.push_within(app, self.capacity)
    }

    /// As [`Self::push`] with the queue's room limited to `room` entries (`0`: full as far
    /// as this push goes — the `reporter.queue_full` fault point).
    pub fn push_within(&mut self, app: &str, room: usize) -> Push {
        if self.queued.contains(app) || self.resync.contains(app) {
            self.coalesced += 1;
            return Push::Coalesced;
        }
        if self.in_flight.contains(app) {
            self.dirty.insert(app.to_string());
            return Push::Coalesced;
        }
        if self.order.len() >= room.min(self.capacity) {
            self.overflowed += 1;
            self.resync.insert(app.to_string());
            return Push::Overflowed;
        }
        self.order.push_back(app.to_string());
        self.queued.insert(app.to_string());
        Push::Queued
    }

    /// Hands the next app to a worker (it stays "in flight" until [`Self::done`]).
    pub fn pop(&mut self) -> Option<String> {
        self.refill();
        let app = self.order.pop_front()?;
        self.queued.remove(&app);
        self.in_flight.insert(app.clone());
        Some(app)
    }

    /// A worker finished `app`; if it changed meanwhile it is queued again.
    pub fn done(&mut self, app: &str) {
        self.in_flight.remove(app);
        if self.dirty.remove(app) {
            self.push(app);
        }
        self.refill();
    }

    /// Forgets `app` wherever it waits (it is no longer ours to report).
    pub fn forget(&mut self, app: &str) {
        if self.queued.remove(app) {
            self.order.retain(|a| a != app);
        }
        self.resync.remove(app);
        self.dirty.remove(app);
    }

    fn refill(&mut self) {
        while self.order.len() < self.capacity {
            let Some(app) = self.resync.pop_first() else {
                break;
            };
            self.order.push_back(app.clone());
            self.queued.insert(app);
        }
    }

    /// Entries in the bounded queue (≤ capacity).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when nothing waits anywhere.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty() && self.resync.is_empty() && self.dirty.is_empty()
    }

    /// Apps parked for resync.
    pub fn resync_len(&self) -> usize {
        self.resync.len()
    }

    /// Apps being processed.
    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_full_faithful_queue_drops_the_newest_event() {
        let mut q = FaithfulQueue::new(2);
        assert_eq!(q.push("a"), Push::Queued);
        assert_eq!(q.push("b"), Push::Queued);
        assert_eq!(q.push("c"), Push::Overflowed);
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.dropped),
            (Some("a"), Some("b"), None, 1)
        );
    }

    #[test]
    fn an_app_changed_while_in_flight_is_processed_again_and_never_by_two_workers() {
        let mut q = CoalescingQueue::new(10);
        q.push("a");
        assert_eq!(q.pop().as_deref(), Some("a"));
        q.push("a");
        assert_eq!(q.pop(), None, "a is in flight: no second worker gets it");
        q.done("a");
        assert_eq!(
            q.pop().as_deref(),
            Some("a"),
            "the change made while in flight is not lost"
        );
    }

    proptest! {
        /// No app that was pushed is ever lost, the bounded part never exceeds capacity, and
        /// an app is never handed out twice at once.
        #[test]
        fn the_coalescing_queue_loses_nothing_and_stays_bounded(ops in proptest::collection::vec((0u8..3, 0u16..40), 1..400), capacity in 1usize..8) {
            let mut q = CoalescingQueue::new(capacity);
            let mut owed: BTreeSet<String> = BTreeSet::new();
            let mut flying: Vec<String> = Vec::new();
            for (op, app) in ops {
                let app = format!("app-{app}");
                match op {
                    0 => { q.push(&app); owed.insert(app); }
                    1 => if let Some(next) = q.pop() {
                        prop_assert!(!flying.contains(&next), "{} handed out twice", next);
                        owed.remove(&next);
                        flying.push(next);
                    },
                    _ => if !flying.is_empty() { let done = flying.remove(0); q.done(&done); },
                }
                prop_assert!(q.len() <= capacity);
            }
            for app in flying.drain(..) { q.done(&app); }
            while let Some(app) = q.pop() { owed.remove(&app); q.done(&app); }
            prop_assert!(owed.is_empty(), "lost: {:?}", owed);
        }
    }
}
