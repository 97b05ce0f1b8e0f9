//! The platform's durable store: what a control-plane process must not lose — the runtime
//! registry, the audit log, the events the events API accepted (the read models are
//! rebuilt from them), and the Runner's builds, task queue and logs — kept in PostgreSQL in
//! real mode ([`postgres`]).
//!
//! The services change their in-memory state as before and append each change to a
//! [`Journal`], synchronously and in order; a writer commits the journal to the database in
//! groups (one transaction per group: a group commit). A service that must not answer before
//! its change is safe — a registration handing out a token, a gateway request that was
//! audited, a hardened events API acknowledging an event — waits on [`Journal::sync`]. Reads
//! are served from memory; a restarted process loads what the database holds
//! ([`postgres::Database::load`]) before it serves.
//!
//! Where the journal goes is an [`Open`]: [`postgres::Postgres`] in real mode, the
//! simulator's database host in the world (whose crashes keep what it committed and lose
//! what it had not). One writer ([`write`]) serves both. Without a database
//! (`orrery serve control-plane` without `--database`, most simulated worlds) there is no
//! journal and nothing here runs.

pub mod postgres;
pub mod records;
pub mod tls;

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::env::SharedEnv;

use records::{Entry, Info, RunnerKind, RunnerLog, RunnerObject};

/// One change to what the store keeps.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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
        #[serde(with = "bytes_as_base64")]
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
    /// A Runner object (build, task, pipeline, …) as it is now, stored whole in place of
    /// what was stored under its kind and key.
    RunnerPut {
        /// What it is.
        kind: RunnerKind,
        /// Its key.
        key: String,
        /// Its state.
        value: serde_json::Value,
    },
    /// A Runner object is gone (a build's log goes with its build).
    RunnerDelete {
        /// What it was.
        kind: RunnerKind,
        /// Its key.
        key: String,
    },
    /// Lines appended to a build's log, the first of them line `from` (0-based).
    RunnerLog {
        /// The build.
        build: String,
        /// The first line's number.
        from: u64,
        /// The lines.
        lines: Vec<String>,
    },
}

/// What projecting an event did to the read model, as far as rebuilding it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// A runtime as stored.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredRuntime {
    /// Tunnel name.
    pub name: String,
    /// Owning account.
    pub account: String,
    /// Name within the account.
    pub runtime: String,
    /// Hex SHA-256 of its current token.
    pub token_sha256: String,
    /// What is known of it.
    pub info: Info,
}

/// An accepted event as stored.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredEvent {
    /// Its id.
    pub id: u64,
    /// The runtime whose token sent it.
    pub runtime: String,
    /// Whether the body is gzip-compressed.
    pub gzip: bool,
    /// The request body.
    #[serde(with = "bytes_as_base64")]
    pub body: Bytes,
    /// Whether it was projected before the process stopped.
    pub projected: bool,
}

/// Everything a control plane loads at start.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// Registered runtimes, by name.
    pub runtimes: Vec<StoredRuntime>,
    /// SHA-256s of revoked tokens.
    pub revoked: Vec<String>,
    /// The audit log, in order.
    pub audit: Vec<Entry>,
    /// Stored events, by id.
    pub events: Vec<StoredEvent>,
    /// The largest event id ever stored (ids continue after it).
    pub last_event_id: u64,
    /// The Runner's objects, by kind and key.
    #[serde(default)]
    pub runner: Vec<RunnerObject>,
    /// The Runner's build logs, by build.
    #[serde(default)]
    pub runner_logs: Vec<RunnerLog>,
}

/// Why a commit failed, as the writer acts on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The database refused the data itself: retrying the same change cannot succeed.
    Refused(String),
    /// A failure the connection survived: the same group may be retried.
    Transient(String),
    /// The connection (or this process's hold on the database) is gone.
    Lost(String),
}

/// A database the writer commits to, one transaction per call.
pub trait Backend: Send {
    /// Commits `changes` in one transaction, in order: all of them or none.
    fn commit<'a>(&'a mut self, changes: &'a [Change]) -> BoxFuture<'a, Result<(), Failure>>;
}

/// What opening a database gives: what it holds, and the connection to commit to.
pub struct Opened {
    /// Everything committed so far.
    pub snapshot: Snapshot,
    /// Schema migrations this open applied.
    pub migrations_applied: Vec<i32>,
    /// Where the writer commits.
    pub backend: Box<dyn Backend>,
}

/// Why a database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// PostgreSQL refused or could not be reached.
    #[error(transparent)]
    Postgres(#[from] postgres::Error),
    /// Another database could not be reached or read.
    #[error("the platform's database at {addr}: {reason}")]
    Unreachable {
        /// Where it was looked for.
        addr: String,
        /// What failed.
        reason: String,
    },
}

/// A database the control plane can keep its state in, opened at start.
pub trait Open: Send + Sync {
    /// Connects, takes this process's hold on the database, and loads what it holds.
    fn open<'a>(&'a self, env: &'a SharedEnv) -> BoxFuture<'a, Result<Opened, OpenError>>;

    /// Whether the events path's accepted events are kept here too (the simulator models
    /// their durability with its event bus instead, and keeps only the registry and the
    /// audit log in its database).
    fn keeps_events(&self) -> bool {
        true
    }

    /// Whether the Runner's builds, task queue and logs are kept here too (the simulator
    /// keeps them in the world across the platform's restarts instead, as a database that
    /// never loses a write would).
    fn keeps_builds(&self) -> bool {
        true
    }
}

/// Longest a commit may take before the writer gives the database up.
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// `commit`, or `None` after [`COMMIT_TIMEOUT`].
async fn commit_within(
    env: &SharedEnv,
    db: &mut dyn Backend,
    changes: &[Change],
) -> Option<Result<(), Failure>> {
    tokio::select! {
        committed = db.commit(changes) => Some(committed),
        () = env.sleep(COMMIT_TIMEOUT) => None,
    }
}

/// The writer: commits the journal's groups in order, for as long as the process runs.
///
/// - A group the database refuses as data (a change it cannot store) is committed one
///   change at a time, and the refused change is logged and skipped: one bad change must not
///   stop every later one.
/// - A transient failure is retried every second (waiters get 503 meanwhile), up to 3 times.
/// - A lost connection, a commit slower than [`COMMIT_TIMEOUT`] or a failure that persists
///   stops the writer with the reason, and the control plane stops with it (fail-stop): this
///   process no longer holds the database, another may have taken it, and a restart loads
///   what was committed. Nothing it answered as safe was uncommitted.
pub async fn write(
    env: SharedEnv,
    mut db: Box<dyn Backend>,
    journal: std::sync::Arc<Journal>,
) -> std::io::Error {
    let stop = |journal: &Journal, why: String| {
        journal.failed(why.clone());
        std::io::Error::other(why)
    };
    let slow = || format!("a commit took over {COMMIT_TIMEOUT:?}");
    loop {
        let (last, group) = journal.next_group().await;
        let mut retries = 0;
        loop {
            match commit_within(&env, db.as_mut(), &group).await {
                Some(Ok(())) => break,
                Some(Err(Failure::Refused(_))) => {
                    for change in &group {
                        match commit_within(&env, db.as_mut(), std::slice::from_ref(change)).await {
                            Some(Ok(())) => {}
                            Some(Err(Failure::Refused(why))) => tracing::error!(
                                "the platform's store refused a change and skipped it: {why}"
                            ),
                            Some(Err(Failure::Transient(why) | Failure::Lost(why))) => {
                                return stop(&journal, why)
                            }
                            None => return stop(&journal, slow()),
                        }
                    }
                    break;
                }
                Some(Err(Failure::Transient(why))) if retries < 3 => {
                    tracing::warn!("the platform's store: {why}; retrying in 1 s");
                    journal.failed(why);
                    retries += 1;
                    env.sleep(Duration::from_secs(1)).await;
                }
                Some(Err(Failure::Transient(why) | Failure::Lost(why))) => {
                    return stop(&journal, why)
                }
                None => return stop(&journal, slow()),
            }
        }
        journal.committed(last);
    }
}

/// Serde for an event's body: base64 text (a database's wire format, readable in a dump).
mod bytes_as_base64 {
    use base64::Engine;
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(body: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(body))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Bytes::from)
            .map_err(serde::de::Error::custom)
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

    /// A backend that answers each commit from a script and records the group sizes.
    struct Scripted {
        answers: VecDeque<Result<(), Failure>>,
        groups: std::sync::Arc<Mutex<Vec<usize>>>,
    }

    impl Backend for Scripted {
        fn commit<'a>(&'a mut self, changes: &'a [Change]) -> BoxFuture<'a, Result<(), Failure>> {
            self.groups.lock().unwrap().push(changes.len());
            let answer = self.answers.pop_front().unwrap_or(Ok(()));
            Box::pin(async move { answer })
        }
    }

    fn writer(
        answers: Vec<Result<(), Failure>>,
    ) -> (
        std::sync::Arc<Journal>,
        std::sync::Arc<Mutex<Vec<usize>>>,
        tokio::task::JoinHandle<std::io::Error>,
    ) {
        let journal = std::sync::Arc::new(Journal::new(0));
        let groups = std::sync::Arc::default();
        let backend = Scripted {
            answers: answers.into(),
            groups: std::sync::Arc::clone(&groups),
        };
        let env: SharedEnv = std::sync::Arc::new(crate::env::RealEnv::new("test"));
        let task = tokio::spawn(write(env, Box::new(backend), journal.clone()));
        (journal, groups, task)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_writer_retries_a_transient_failure_and_waiters_hear_of_it_meanwhile() {
        let (journal, groups, task) = writer(vec![Err(Failure::Transient("deadlock".into()))]);
        journal.append(revoked(1));
        assert_eq!(
            journal.sync().await,
            Err(Unavailable("deadlock".into())),
            "a waiter is told at once"
        );
        journal.append(revoked(2));
        // The writer retries the same group a second later, then takes the next.
        for _ in 0..50 {
            if journal.uncommitted() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(journal.sync().await, Ok(()), "the retry committed both");
        assert!(!task.is_finished());
        assert_eq!(
            *groups.lock().unwrap(),
            vec![1, 1, 1],
            "failed, retried, the next"
        );
        task.abort();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_writer_stops_when_it_loses_the_database() {
        let (journal, _, task) = writer(vec![Err(Failure::Lost("connection reset".into()))]);
        journal.append(revoked(1));
        assert_eq!(
            journal.sync().await,
            Err(Unavailable("connection reset".into()))
        );
        assert_eq!(task.await.unwrap().to_string(), "connection reset");
        assert_eq!(
            journal.uncommitted(),
            1,
            "what it had not committed stays so"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_writer_skips_the_one_change_the_database_refuses_as_data() {
        let (journal, groups, task) = writer(vec![
            Err(Failure::Refused("invalid byte sequence".into())),
            Ok(()),
            Err(Failure::Refused("invalid byte sequence".into())),
            Ok(()),
        ]);
        journal.append(revoked(1));
        journal.append(revoked(2));
        journal.append(revoked(3));
        assert_eq!(journal.sync().await, Ok(()));
        assert_eq!(
            *groups.lock().unwrap(),
            vec![3, 1, 1, 1],
            "the group, then one by one"
        );
        task.abort();
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
