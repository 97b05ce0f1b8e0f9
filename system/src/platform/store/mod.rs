//! The platform's durable store: what a control-plane process must not lose — the runtime
//! registry, the audit log, and the events the events API accepted (the read models are
//! rebuilt from them) — kept in PostgreSQL in real mode ([`postgres`]).
//!
//! The services change their in-memory state as before and append each change to a
//! [`Journal`], synchronously and in order; a writer commits the journal to the database in
//! groups (one transaction per group: a group commit). A service that must not answer before
//! its change is safe — a registration handing out a token, a gateway request that was
//! audited, a hardened events API acknowledging an event — waits on [`Journal::sync`]. Reads
//! are served from memory; a restarted process loads what the database holds
//! ([`postgres::Database::load`]) before it serves.
//!
//! Without a database (the simulator, or `orrery serve control-plane` without `--database`)
//! there is no journal and nothing here runs: the simulator models durability where a verdict
//! rests on it (the event bus, [`crate::platform::events::bus`]).

pub mod postgres;

use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::Notify;

use super::audit::Entry;
use super::registry::Info;

/// One change to what the store keeps.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A runtime was registered (again): its current token's SHA-256 and what is known of it.
    Runtime {
        /// Tunnel name, `<account>-<runtime>`.
        name: String,
        /// Owning account.
        account: String,
        /// Name within the account.
        runtime: String,
        /// Hex SHA-256 of its token (the token itself is never stored).
        token_sha256: String,
        /// Kind, access mode, version, cluster, ingress host.
        info: Info,
    },
    /// A token a registration replaced: refused from now on.
    Revoked {
        /// Hex SHA-256 of the token.
        token_sha256: String,
    },
    /// An audit entry.
    Audit(Entry),
    /// An event the events API accepted, as it arrived (the read models are its projection).
    Event {
        /// The store's id for it, increasing.
        id: u64,
        /// The runtime whose token sent it.
        runtime: String,
        /// Whether `body` is gzip-compressed.
        gzip: bool,
        /// The request body.
        body: Bytes,
    },
    /// An event was projected into the read models; what it did decides which stored
    /// events are still needed to rebuild them.
    Projected {
        /// The event's id.
        id: u64,
        /// The runtime whose token sent it.
        runtime: String,
        /// What the event is about, as the projection names it (`app:ns/name`, …).
        object: String,
        /// What the projection did.
        effect: Effect,
    },
}

/// What projecting an event did to the read model, as far as rebuilding it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// It replaced the object's state wholesale: the object's older events are not needed.
    Supersedes,
    /// It changed the object's state in place (a repeat that refreshes its errors, a
    /// deletion that keeps the held version): the older events are still needed, and so is
    /// this one.
    InPlace,
    /// It changed nothing (older than what is held, a retried copy): not needed.
    NoOp,
}

/// The store could not keep a change: the database is unreachable or refused the write.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the platform's store is unavailable: {0}")]
pub struct Unavailable(pub String);

#[derive(Debug, Default)]
struct State {
    /// Sequence number of the last change appended.
    appended: u64,
    /// Every change up to this sequence number is committed.
    committed: u64,
    /// Appended, not yet handed to the writer: (sequence number, change).
    queue: VecDeque<(u64, Change)>,
    /// Why the writer's last attempt failed (cleared by its next commit).
    failure: Option<String>,
    /// The next id [`Journal::next_event_id`] gives out.
    next_event_id: u64,
}

/// Changes on their way to the database, in the order they were made.
#[derive(Debug, Default)]
pub struct Journal {
    state: Mutex<State>,
    /// Something was appended.
    appended: Notify,
    /// A commit (or a failure) happened.
    committed: Notify,
}

/// Most changes the writer commits in one transaction.
pub const MAX_GROUP: usize = 1000;

impl Journal {
    /// An empty journal whose event ids continue after `last_event_id` (the largest the
    /// database holds).
    pub fn new(last_event_id: u64) -> Self {
        Journal {
            state: Mutex::new(State {
                next_event_id: last_event_id + 1,
                ..State::default()
            }),
            ..Journal::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("journal lock poisoned")
    }

    /// Appends `change`; returns its sequence number.
    pub fn append(&self, change: Change) -> u64 {
        let mut state = self.lock();
        state.appended += 1;
        let seq = state.appended;
        state.queue.push_back((seq, change));
        drop(state);
        self.appended.notify_one();
        seq
    }

    /// A fresh id for an accepted event.
    pub fn next_event_id(&self) -> u64 {
        let mut state = self.lock();
        let id = state.next_event_id;
        state.next_event_id += 1;
        id
    }

    /// Waits until every change appended before this call is committed. Fails at once while
    /// the writer cannot reach the database and something is still uncommitted (the caller
    /// answers 503; what it appended is committed once the database is back).
    pub async fn sync(&self) -> Result<(), Unavailable> {
        let target = self.lock().appended;
        loop {
            let notified = self.committed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.lock();
                if state.committed >= target {
                    return Ok(());
                }
                if let Some(failure) = &state.failure {
                    return Err(Unavailable(failure.clone()));
                }
            }
            notified.await;
        }
    }

    /// The writer's side: waits for appended changes and takes up to [`MAX_GROUP`] of them,
    /// in order, with the sequence number of the last.
    pub async fn next_group(&self) -> (u64, Vec<Change>) {
        loop {
            let notified = self.appended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if !state.queue.is_empty() {
                    let take = state.queue.len().min(MAX_GROUP);
                    let group: Vec<(u64, Change)> = state.queue.drain(..take).collect();
                    let last = group.last().map_or(0, |(seq, _)| *seq);
                    return (last, group.into_iter().map(|(_, c)| c).collect());
                }
            }
            notified.await;
        }
    }

    /// The writer committed everything through `seq`.
    pub fn committed(&self, seq: u64) {
        let mut state = self.lock();
        state.committed = state.committed.max(seq);
        state.failure = None;
        drop(state);
        self.committed.notify_waiters();
    }

    /// The writer could not commit (it retries the same group): waiters fail until it does.
    pub fn failed(&self, why: String) {
        self.lock().failure = Some(why);
        self.committed.notify_waiters();
    }

    /// Changes appended and not yet committed.
    pub fn uncommitted(&self) -> u64 {
        let state = self.lock();
        state.appended - state.committed
    }
}

/// Hex SHA-256 of a token: what the store keeps instead of the token.
pub fn token_digest(token: &str) -> String {
    sha256_hex(token)
}

/// Hex SHA-256 of `text` (an object's name as the store indexes it: any length, any bytes).
pub fn sha256_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest.as_ref() {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revoked(n: u32) -> Change {
        Change::Revoked {
            token_sha256: n.to_string(),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn sync_waits_for_the_commit_of_everything_appended_before_it() {
        let journal = std::sync::Arc::new(Journal::new(0));
        journal.append(revoked(1));
        journal.append(revoked(2));
        let waiter = tokio::spawn({
            let journal = journal.clone();
            async move { journal.sync().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "nothing is committed yet");
        let (last, group) = journal.next_group().await;
        assert_eq!((last, group.len()), (2, 2));
        journal.append(revoked(3));
        journal.committed(last);
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_eq!(journal.uncommitted(), 1, "the change after the group waits");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn sync_fails_while_the_database_is_unreachable_and_recovers_after() {
        let journal = Journal::new(0);
        journal.append(revoked(1));
        let (last, _) = journal.next_group().await;
        journal.failed("connection refused".into());
        assert_eq!(
            journal.sync().await,
            Err(Unavailable("connection refused".into()))
        );
        journal.committed(last);
        assert_eq!(journal.sync().await, Ok(()));
    }

    #[test]
    fn event_ids_continue_after_what_the_database_holds() {
        let journal = Journal::new(41);
        assert_eq!((journal.next_event_id(), journal.next_event_id()), (42, 43));
    }

    #[test]
    fn a_token_is_kept_as_its_sha256() {
        assert_eq!(
            token_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
