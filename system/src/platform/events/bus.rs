//! The platform's message bus between the events API and the event handler: RabbitMQ in the
//! real platform, where `api-events` only publishes and `event-handler` consumes and
//! projects into the read models (codefresh-research.md §6; the 2xx meaning *queued* is the
//! research's own inference there).
//!
//! What a crash keeps is what the broker wrote to disk. A broker persists messages in
//! batches, so a message published just before a crash may never reach the disk ("the
//! message can still be lost if the broker goes down before it's had a chance to write the
//! message to disk", RabbitMQ's blog introducing publisher confirms). A publisher learns
//! that a message is safe only from a *publisher confirm*, sent once the message is on disk
//! or consumed, and confirms are off unless the publisher asks for them (RabbitMQ's
//! publisher-confirms tutorial).
//!
//! - **faithful** (inferred: whether `api-events` enables confirms is not public): the API
//!   answers 2xx once it has published, and the broker flushes every 200 ms (inferred from
//!   "a few hundred milliseconds" of confirm latency for persistent messages). A crash
//!   loses every acknowledged message that was neither flushed nor handled yet.
//! - **hardened**: the API answers 2xx only after the confirm, and the bus commits in
//!   groups within 10 ms of a publish (an fsync). No acknowledged message is lost.
//!
//! Deliveries are at least once: a flushed message the handler took but had not
//! acknowledged when the platform crashed is delivered again after the restart, and the read
//! model's projection ignores what it already holds. A crash is the world's doing: the
//! simulator calls [`Bus::crash`] when it crashes the platform's host, and the restarted
//! events path reports what the crash did ([`Bus::take_recovery`]). A process that merely
//! starts serving again keeps everything. Not modelled: the broker as its own host (it
//! crashes with the events API), queue mirroring, acks lost before they reach the disk, and
//! a confirm sent when a message is consumed before it is flushed (the confirm here waits
//! for the flush).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::core::Variant;

/// How the bus keeps what it is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durability {
    /// Time from a message's publish to the write that makes it (and every message published
    /// before that write) survive a crash.
    pub flush_after: Duration,
    /// Whether the events API waits for the confirm before answering 2xx.
    pub confirms: bool,
}

impl Durability {
    /// The variant's durability (see the module docs).
    pub fn of(variant: Variant) -> Self {
        match variant {
            Variant::Faithful => Durability {
                flush_after: Duration::from_millis(200),
                confirms: false,
            },
            Variant::Hardened => Durability {
                flush_after: Duration::from_millis(10),
                confirms: true,
            },
        }
    }
}

impl Default for Durability {
    /// The real platform's (faithful) durability.
    fn default() -> Self {
        Durability::of(Variant::Faithful)
    }
}

/// The bus holds as many messages as it may (waiting or being handled): publish later.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the bus holds {0} messages")]
pub struct Full(pub usize);

/// What a crash did to the bus's store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Messages lost: published, not yet on disk and not yet handled.
    pub lost: u64,
    /// Of those, messages the events API had already acknowledged (2xx).
    pub lost_acknowledged: u64,
    /// Messages on disk the handler had taken and not acknowledged: delivered again.
    pub redelivered: u64,
    /// Messages on disk the handler had not taken yet: still waiting.
    pub kept: u64,
}

#[derive(Debug)]
struct Message<M> {
    body: Arc<M>,
    /// The events API answered 2xx for it.
    acknowledged: bool,
}

#[derive(Debug)]
struct Inner<M> {
    /// The last sequence number given out (never reused, crashes included).
    last_seq: u64,
    /// Every message up to this sequence number is on disk.
    flushed_through: u64,
    /// Waiting for the handler, in order.
    ready: VecDeque<(u64, Message<M>)>,
    /// Taken by the handler, not acknowledged yet.
    taken: BTreeMap<u64, Message<M>>,
}

/// The bus: its store outlives the process that serves it (share it through an `Arc`), as
/// the broker's disk does; [`Bus::recover`] is what a restart does with it.
#[derive(Debug)]
pub struct Bus<M> {
    capacity: usize,
    durability: Durability,
    inner: Mutex<Inner<M>>,
    /// A message was published or made ready again.
    arrived: Notify,
    /// Something waits for the disk.
    unflushed: Notify,
    /// A flush confirmed every message published before it.
    confirmed: Notify,
    /// What the last crash did, until the restarted events path reports it.
    recovery: Mutex<Option<Recovery>>,
}

impl<M> Bus<M> {
    /// An empty bus holding at most `capacity` messages.
    pub fn new(capacity: usize, durability: Durability) -> Self {
        Bus {
            capacity: capacity.max(1),
            durability,
            inner: Mutex::new(Inner {
                last_seq: 0,
                flushed_through: 0,
                ready: VecDeque::new(),
                taken: BTreeMap::new(),
            }),
            arrived: Notify::new(),
            unflushed: Notify::new(),
            confirmed: Notify::new(),
            recovery: Mutex::new(None),
        }
    }

    /// How this bus keeps messages.
    pub fn durability(&self) -> &Durability {
        &self.durability
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<M>> {
        self.inner.lock().expect("bus lock poisoned")
    }

    /// Stores `body` in memory (the disk comes with the next flush); its sequence number.
    pub fn publish(&self, body: M) -> Result<u64, Full> {
        let seq = {
            let mut inner = self.lock();
            let held = inner.ready.len() + inner.taken.len();
            if held >= self.capacity {
                return Err(Full(held));
            }
            inner.last_seq += 1;
            let seq = inner.last_seq;
            inner.ready.push_back((
                seq,
                Message {
                    body: Arc::new(body),
                    acknowledged: false,
                },
            ));
            seq
        };
        self.arrived.notify_one();
        self.unflushed.notify_one();
        Ok(seq)
    }

    /// Records that the events API answered 2xx for `seq` (what a crash's count of lost
    /// acknowledged messages is made of).
    pub fn acknowledged(&self, seq: u64) {
        let mut inner = self.lock();
        // `ready` is in sequence order: publishes append, a crash keeps the order.
        if let Ok(at) = inner.ready.binary_search_by_key(&seq, |(s, _)| *s) {
            inner.ready[at].1.acknowledged = true;
        } else if let Some(message) = inner.taken.get_mut(&seq) {
            message.acknowledged = true;
        }
    }

    /// Waits for `seq`'s publisher confirm: the flush that put it on disk.
    pub async fn confirm(&self, seq: u64) {
        loop {
            let notified = self.confirmed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if seq <= self.lock().flushed_through {
                return;
            }
            notified.await;
        }
    }

    /// Waits until a message not yet on disk exists.
    pub async fn wait_unflushed(&self) {
        loop {
            let notified = self.unflushed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = self.lock();
                if inner.last_seq > inner.flushed_through {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Writes every message published so far to disk.
    pub fn flush(&self) {
        {
            let mut inner = self.lock();
            inner.flushed_through = inner.last_seq;
        }
        self.confirmed.notify_waiters();
    }

    /// The next message for the handler (waits for one): its sequence number and body. It
    /// stays in the bus until [`Bus::ack`].
    pub async fn take(&self) -> (u64, Arc<M>) {
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut inner = self.lock();
                if let Some((seq, message)) = inner.ready.pop_front() {
                    let body = message.body.clone();
                    inner.taken.insert(seq, message);
                    return (seq, body);
                }
            }
            notified.await;
        }
    }

    /// The handler is done with `seq`: it leaves the bus.
    pub fn ack(&self, seq: u64) {
        self.lock().taken.remove(&seq);
    }

    /// The platform's host crashed (the simulator's fault, while nothing of the process
    /// runs): messages not on disk are gone; messages on disk that were taken and not
    /// acknowledged are ready again, before the others. The restarted events path reports
    /// it ([`Bus::take_recovery`]).
    pub fn crash(&self) {
        let recovery = self.recover();
        let mut pending = self.recovery.lock().expect("bus lock poisoned");
        let total = pending.get_or_insert_with(Recovery::default);
        total.lost += recovery.lost;
        total.lost_acknowledged += recovery.lost_acknowledged;
        total.redelivered += recovery.redelivered;
        total.kept = recovery.kept;
    }

    /// What the crashes since the last call did (none without a crash).
    pub fn take_recovery(&self) -> Option<Recovery> {
        self.recovery.lock().expect("bus lock poisoned").take()
    }

    fn recover(&self) -> Recovery {
        let mut recovery = Recovery::default();
        {
            let mut inner = self.lock();
            let flushed = inner.flushed_through;
            let mut survivors: BTreeMap<u64, Message<M>> = BTreeMap::new();
            let taken = std::mem::take(&mut inner.taken);
            let ready = std::mem::take(&mut inner.ready);
            for (seq, message) in taken {
                if seq <= flushed {
                    recovery.redelivered += 1;
                    survivors.insert(seq, message);
                } else {
                    recovery.lost += 1;
                    recovery.lost_acknowledged += u64::from(message.acknowledged);
                }
            }
            for (seq, message) in ready {
                if seq <= flushed {
                    recovery.kept += 1;
                    survivors.insert(seq, message);
                } else {
                    recovery.lost += 1;
                    recovery.lost_acknowledged += u64::from(message.acknowledged);
                }
            }
            inner.ready = survivors.into_iter().collect();
            inner.flushed_through = inner.last_seq;
        }
        self.arrived.notify_one();
        recovery
    }

    /// Messages waiting or being handled.
    pub fn held(&self) -> usize {
        let inner = self.lock();
        inner.ready.len() + inner.taken.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bus() -> Bus<&'static str> {
        Bus::new(3, Durability::of(Variant::Faithful))
    }

    #[test]
    fn a_crash_keeps_what_was_flushed_or_handled_and_redelivers_what_was_taken() {
        let bus = bus();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let a = bus.publish("a").unwrap();
        let b = bus.publish("b").unwrap();
        bus.flush();
        let c = bus.publish("c").unwrap();
        bus.acknowledged(a);
        bus.acknowledged(c);
        assert_eq!(
            bus.publish("d"),
            Err(Full(3)),
            "capacity counts held messages"
        );
        let (taken, body) = rt.block_on(bus.take());
        assert_eq!((taken, *body), (a, "a"));
        let (second, _) = rt.block_on(bus.take());
        assert_eq!(second, b);
        bus.ack(b);
        assert_eq!(bus.take_recovery(), None, "no crash, nothing to report");
        bus.crash();
        assert_eq!(
            bus.take_recovery(),
            Some(Recovery {
                lost: 1,
                lost_acknowledged: 1,
                redelivered: 1,
                kept: 0,
            }),
            "c was acknowledged and never on disk; a was taken and comes back"
        );
        assert_eq!(bus.take_recovery(), None, "reported once");
        assert_eq!(rt.block_on(bus.take()).0, a);
        let d = bus.publish("d").unwrap();
        assert!(d > c, "sequence numbers are never reused");
        bus.flush();
        bus.crash();
        assert_eq!(
            bus.take_recovery(),
            Some(Recovery {
                kept: 1,
                redelivered: 1,
                ..Recovery::default()
            }),
            "d was on disk and waits; a was taken again and comes back again"
        );
    }

    #[test]
    fn a_confirm_comes_with_the_flush_that_put_the_message_on_disk() {
        let bus = Arc::new(bus());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let a = bus.publish("a").unwrap();
        let b = bus.publish("b").unwrap();
        rt.block_on(async {
            let waiting = tokio::spawn({
                let bus = bus.clone();
                async move { bus.confirm(a).await }
            });
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished(), "not on disk");
            let (seq, _) = bus.take().await;
            bus.ack(seq);
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished(), "handled, still not on disk");
            bus.flush();
            waiting.await.unwrap();
            let c = bus.publish("c").unwrap();
            assert!(b < c);
            bus.confirm(b).await;
        });
    }
}
