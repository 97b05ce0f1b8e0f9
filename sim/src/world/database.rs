//! The platform's database as a host of the world (`role: database`, port 5432): where a
//! control plane with a store (`platform::store`) keeps the runtime registry and the audit
//! log, so that a crash of the control plane loses what it had not committed and keeps what
//! it had — the same journal and writer as `orrery serve control-plane --database`, over the
//! simulated network instead of PostgreSQL's protocol.
//!
//! What it models of PostgreSQL, and nothing more:
//! - **A transaction is all or nothing.** A group is applied when the commit has arrived
//!   and its `commit_latency` (the fsync) has passed; a crash before that applies none of
//!   it, a crash after it keeps all of it — even if the answer never leaves (the writer then
//!   sees a lost connection for a commit that happened).
//! - **Committed data outlives a crash** of the database host: [`Database`] is held by the
//!   world, not by the host's boot.
//! - **One control plane at a time** (PostgreSQL: the session advisory lock): each open
//!   takes the database over, and a commit from an earlier holder — a crashed process whose
//!   request was still on the wire — is refused, never applied.
//! - The same upsert rules as the SQL: a runtime row per tunnel name, revoked digests as a
//!   set, audit entries by sequence number (a repeat is ignored).
//!
//! Accepted events are not kept here: the simulator models their durability with the event
//! bus ([`orrery_system::platform::store::Open::keeps_events`]). Nor are the Runner's builds:
//! the world keeps them across the platform's restarts, as a database that never loses a
//! write would ([`orrery_system::platform::store::Open::keeps_builds`]).
//!
//! Wire (HTTP/1.1, JSON): `POST /open` → `{"holder": n, "snapshot": …}`;
//! `POST /commit?holder=n` with the changes → 200, or 409 when another process holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::json;

use orrery_system::env::http::{self as envhttp, json as answer};
use orrery_system::env::SharedEnv;
use orrery_system::platform::audit::Entry;
use orrery_system::platform::store::{
    Backend, Change, Failure, Open, OpenError, Opened, Snapshot, StoredRuntime,
};

/// The database's port.
pub const PORT: u16 = 5432;

/// How long a commit takes to be durable (the fsync) before it is applied.
pub const COMMIT_LATENCY: Duration = Duration::from_millis(5);

/// How long a client waits for an answer before it takes the connection for lost.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the database has committed, and who holds it.
#[derive(Debug, Default)]
struct Committed {
    runtimes: BTreeMap<String, StoredRuntime>,
    revoked: BTreeSet<String>,
    audit: BTreeMap<u64, Entry>,
    /// The epoch of the process that opened it last.
    holder: u64,
    /// Transactions committed.
    commits: u64,
    /// Commits refused because an earlier holder sent them.
    fenced: u64,
}

/// The database's durable contents: held by the world, so they outlive its host's crashes.
#[derive(Clone, Debug, Default)]
pub struct Database {
    committed: Arc<Mutex<Committed>>,
}

/// What the report says of the database at the end of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Transactions committed.
    pub commits: u64,
    /// Opens (control-plane starts that loaded it).
    pub opens: u64,
    /// Commits refused from an earlier holder.
    pub fenced: u64,
}

impl Database {
    fn lock(&self) -> std::sync::MutexGuard<'_, Committed> {
        self.committed.lock().expect("database lock poisoned")
    }

    /// Seeds it with runtimes registered before the run (as an earlier life of the platform
    /// would have committed them).
    pub fn seed(&self, runtimes: Vec<StoredRuntime>) {
        let mut committed = self.lock();
        for runtime in runtimes {
            committed.runtimes.insert(runtime.name.clone(), runtime);
        }
    }

    /// Everything committed, as a control plane would load it.
    pub fn snapshot(&self) -> Snapshot {
        let committed = self.lock();
        Snapshot {
            runtimes: committed.runtimes.values().cloned().collect(),
            revoked: committed.revoked.iter().cloned().collect(),
            audit: committed.audit.values().cloned().collect(),
            events: Vec::new(),
            last_event_id: 0,
            runner: Vec::new(),
            runner_logs: Vec::new(),
        }
    }

    /// Commits, opens and fenced commits so far.
    pub fn figures(&self) -> Figures {
        let committed = self.lock();
        Figures {
            commits: committed.commits,
            opens: committed.holder,
            fenced: committed.fenced,
        }
    }

    fn open(&self) -> (u64, Snapshot) {
        let holder = {
            let mut committed = self.lock();
            committed.holder += 1;
            committed.holder
        };
        (holder, self.snapshot())
    }

    /// Applies `changes` in one transaction for `holder`; false when another holds it.
    fn commit(&self, holder: u64, changes: Vec<Change>) -> bool {
        let mut committed = self.lock();
        if holder != committed.holder {
            committed.fenced += 1;
            return false;
        }
        for change in changes {
            match change {
                Change::Runtime {
                    name,
                    account,
                    runtime,
                    token_sha256,
                    info,
                } => {
                    committed.runtimes.insert(
                        name.clone(),
                        StoredRuntime {
                            name,
                            account,
                            runtime,
                            token_sha256,
                            info,
                        },
                    );
                }
                Change::Revoked { token_sha256 } => {
                    committed.revoked.insert(token_sha256);
                }
                Change::Audit(entry) => {
                    committed.audit.entry(entry.seq).or_insert(entry);
                }
                // Not sent: `keeps_events` and `keeps_builds` are false.
                Change::Event { .. }
                | Change::Projected { .. }
                | Change::RunnerPut { .. }
                | Change::RunnerDelete { .. }
                | Change::RunnerLog { .. } => {}
            }
        }
        committed.commits += 1;
        true
    }
}

/// Serves `database` on `addr`; each commit takes `commit_latency` before it is applied.
pub async fn run(
    env: SharedEnv,
    database: Database,
    addr: &str,
    commit_latency: Duration,
) -> std::io::Result<()> {
    let listener = env.listen(addr).await?;
    envhttp::serve(
        listener,
        move |request: Request<hyper::body::Incoming>, _peer| {
            let (env, database) = (env.clone(), database.clone());
            async move {
                let path = request.uri().path().to_string();
                let holder: u64 = envhttp::query(request.uri())
                    .get("holder")
                    .and_then(|h| h.parse().ok())
                    .unwrap_or(0);
                let body = match request.into_body().collect().await {
                    Ok(body) => body.to_bytes(),
                    Err(e) => {
                        return answer(StatusCode::BAD_REQUEST, &json!({"error": e.to_string()}))
                    }
                };
                match path.as_str() {
                    "/open" => {
                        let (holder, snapshot) = database.open();
                        answer(
                            StatusCode::OK,
                            &json!({"holder": holder, "snapshot": snapshot}),
                        )
                    }
                    "/commit" => {
                        let changes: Vec<Change> = match serde_json::from_slice(&body) {
                            Ok(changes) => changes,
                            Err(e) => {
                                return answer(
                                    StatusCode::BAD_REQUEST,
                                    &json!({"error": format!("the changes: {e}")}),
                                )
                            }
                        };
                        env.sleep(commit_latency).await;
                        if database.commit(holder, changes) {
                            answer(StatusCode::OK, &json!({}))
                        } else {
                            answer(
                                StatusCode::CONFLICT,
                                &json!({"error": "another control plane holds the database"}),
                            )
                        }
                    }
                    _ => answer(StatusCode::NOT_FOUND, &json!({"error": "no such path"})),
                }
            }
        },
    )
    .await
}

/// A control plane's connection to the database host at `addr`.
#[derive(Clone, Debug)]
pub struct Connector {
    addr: String,
}

impl Connector {
    /// The database host at `addr` (`host:port`).
    pub fn new(addr: &str) -> Self {
        Connector {
            addr: addr.to_string(),
        }
    }
}

type Client = envhttp::Client<Full<Bytes>>;

/// One request: the status and body, or why none came.
async fn exchange(
    env: &SharedEnv,
    client: &Client,
    uri: String,
    body: Vec<u8>,
) -> Result<(StatusCode, Bytes), String> {
    let request = Request::post(uri)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let sent = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok((status, body.to_bytes()))
    };
    tokio::select! {
        biased;
        answered = sent => answered,
        () = env.sleep(REQUEST_TIMEOUT) => Err(format!("no answer within {REQUEST_TIMEOUT:?}")),
    }
}

impl Open for Connector {
    fn open<'a>(&'a self, env: &'a SharedEnv) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            let unreachable = |reason: String| OpenError::Unreachable {
                addr: self.addr.clone(),
                reason,
            };
            let client: Client = envhttp::client(env.clone(), REQUEST_TIMEOUT);
            let (status, body) = exchange(
                env,
                &client,
                format!("http://{}/open", self.addr),
                Vec::new(),
            )
            .await
            .map_err(unreachable)?;
            if status != StatusCode::OK {
                return Err(unreachable(format!("open answered {status}")));
            }
            #[derive(serde::Deserialize)]
            struct Answer {
                holder: u64,
                snapshot: Snapshot,
            }
            let opened: Answer =
                serde_json::from_slice(&body).map_err(|e| unreachable(e.to_string()))?;
            Ok(Opened {
                snapshot: opened.snapshot,
                migrations_applied: Vec::new(),
                backend: Box::new(Session {
                    env: env.clone(),
                    client,
                    uri: format!("http://{}/commit?holder={}", self.addr, opened.holder),
                }),
            })
        })
    }

    fn keeps_events(&self) -> bool {
        false
    }

    fn keeps_builds(&self) -> bool {
        false
    }
}

/// An open connection: commits as the holder the open made this process.
struct Session {
    env: SharedEnv,
    client: Client,
    uri: String,
}

impl Backend for Session {
    fn commit<'a>(&'a mut self, changes: &'a [Change]) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let body = serde_json::to_vec(changes).map_err(|e| Failure::Refused(e.to_string()))?;
            match exchange(&self.env, &self.client, self.uri.clone(), body).await {
                Ok((StatusCode::OK, _)) => Ok(()),
                Ok((StatusCode::BAD_REQUEST, body)) => Err(Failure::Refused(
                    String::from_utf8_lossy(&body).into_owned(),
                )),
                Ok((status, body)) if status.is_server_error() => Err(Failure::Transient(format!(
                    "{status}: {}",
                    String::from_utf8_lossy(&body)
                ))),
                Ok((status, body)) => Err(Failure::Lost(format!(
                    "{status}: {}",
                    String::from_utf8_lossy(&body)
                ))),
                Err(why) => Err(Failure::Lost(why)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_system::platform::audit::{Actor, Outcome};

    fn audit(seq: u64, reason: &str) -> Change {
        Change::Audit(Entry {
            seq,
            at: "2026-01-01T00:00:00Z".into(),
            actor: Actor::Admin,
            account: "acme".into(),
            action: "POST /api/runtimes".into(),
            runtime: String::new(),
            outcome: Outcome::Allowed,
            status: 201,
            reason: reason.into(),
        })
    }

    #[test]
    fn a_commit_from_a_process_that_no_longer_holds_the_database_is_refused() {
        let database = Database::default();
        let (first, _) = database.open();
        assert!(database.commit(first, vec![audit(1, "")]));
        let (second, snapshot) = database.open();
        assert_eq!(
            snapshot.audit.len(),
            1,
            "the second holder loads the first's commit"
        );
        assert!(!database.commit(first, vec![audit(2, "late")]), "fenced");
        assert!(database.commit(second, vec![audit(2, "")]));
        let snapshot = database.snapshot();
        assert_eq!(snapshot.audit.len(), 2);
        assert_eq!(
            snapshot.audit[1].reason, "",
            "the fenced entry never landed"
        );
        assert_eq!(
            database.figures(),
            Figures {
                commits: 2,
                opens: 2,
                fenced: 1
            }
        );
    }

    #[test]
    fn registrations_upsert_by_name_revocations_are_a_set_and_a_repeated_audit_entry_is_ignored() {
        let database = Database::default();
        let (holder, _) = database.open();
        let runtime = |token: &str| Change::Runtime {
            name: "acme-prod".into(),
            account: "acme".into(),
            runtime: "prod".into(),
            token_sha256: token.into(),
            info: Default::default(),
        };
        let revoked = |token: &str| Change::Revoked {
            token_sha256: token.into(),
        };
        assert!(database.commit(
            holder,
            vec![
                runtime("a"),
                runtime("b"),
                revoked("a"),
                revoked("a"),
                audit(1, "first")
            ]
        ));
        assert!(database.commit(holder, vec![audit(1, "again")]));
        let snapshot = database.snapshot();
        assert_eq!(snapshot.runtimes.len(), 1);
        assert_eq!(snapshot.runtimes[0].token_sha256, "b");
        assert_eq!(snapshot.revoked, vec!["a".to_string()]);
        assert_eq!(snapshot.audit.len(), 1);
        assert_eq!(snapshot.audit[0].reason, "first");
    }
}
