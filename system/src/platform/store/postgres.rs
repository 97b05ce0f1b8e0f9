//! The store in PostgreSQL: schema migrations, loading what a restarted control plane needs,
//! and the transactions the writer ([`super::write`]) commits the journal's groups in.
//!
//! The connection comes from the environment ([`crate::env::Env::connect`]) and speaks the
//! protocol through `tokio-postgres` (`connect_raw`), in TLS when the URL gives
//! `sslrootcert` ([`super::tls`]). One control plane per database: [`Database::open`] takes a session advisory
//! lock and refuses to start while another process holds it.
//!
//! Tables (migration 1): `runtimes` (one row per tunnel name: account, runtime, the SHA-256 of
//! its current token, its info as JSON), `revoked_tokens` (SHA-256s), `audit_log` (seq → entry
//! as JSON), `events` (each accepted event as it arrived, until a newer event of the same
//! object has been projected: the read models are rebuilt from them at start).
//!
//! Tables (migration 2): `runner_objects` (the Runner's builds, tasks, pipelines, claims,
//! cron ledger, lease, counters and heartbeats: kind, key, the object as JSON),
//! `runner_log_lines` (build, line number, line).
//!
//! PostgreSQL's `text` and `jsonb` cannot hold a NUL: a NUL in a stored name, value or log
//! line is kept as U+FFFD.

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio_postgres::{Client, NoTls, Statement};

use super::records::{RunnerKind, RunnerLog, RunnerObject};
use super::{
    Backend, Change, Effect, Failure, Open, OpenError, Opened, Snapshot, StoredEvent, StoredRuntime,
};
use crate::env::SharedEnv;

/// The schema's migrations, in order: (version, name, SQL). Never edit one that shipped; add
/// the next.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "registry, audit log and events",
        include_str!("migrations/0001_initial.sql"),
    ),
    (
        2,
        "runner builds, task queue and logs",
        include_str!("migrations/0002_runner.sql"),
    ),
];

/// Key of the advisory lock a control plane holds on its database (`orrery` in ASCII).
const LOCK_KEY: i64 = 0x6f72_7265_7279;

/// Why the store could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--database` URL is not one this store can use.
    #[error("database URL {url}: {reason}")]
    Url {
        /// The URL, password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No connection to the server.
    #[error("cannot reach PostgreSQL at {addr}: {source}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// TLS to the server failed: not offered, or its certificate not trusted.
    #[error("TLS to PostgreSQL at {addr}: {source}")]
    Tls {
        /// `host:port`.
        addr: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The server refused or failed a request.
    #[error("PostgreSQL at {addr}: {}", described(source))]
    Postgres {
        /// `host:port`.
        addr: String,
        /// What it said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Another control plane holds the database.
    #[error("another orrery control plane is using the database at {addr} (one per database)")]
    Busy {
        /// `host:port`.
        addr: String,
    },
    /// The schema is newer than this build knows.
    #[error("the database's schema is at version {found}, newer than this orrery's {known}: upgrade orrery or use another database")]
    NewerSchema {
        /// The database's version.
        found: i32,
        /// The newest this build has.
        known: i32,
    },
    /// A stored row this build cannot read.
    #[error("the database holds a {table} row this orrery cannot read ({key}): {reason}")]
    Unreadable {
        /// Which table.
        table: &'static str,
        /// Which row.
        key: String,
        /// Why.
        reason: String,
    },
}

struct Statements {
    runtime: Statement,
    revoked: Statement,
    audit: Statement,
    event: Statement,
    projected: Statement,
    compact: Statement,
    drop_event: Statement,
    last_event: Statement,
    runner_put: Statement,
    runner_delete: Statement,
    runner_drop_log: Statement,
    runner_log: Statement,
}

/// An open, migrated database that this process holds.
pub struct Database {
    addr: String,
    client: Client,
    statements: Statements,
    /// Migrations this open applied (empty when the schema was current).
    pub applied: Vec<i32>,
}

/// A PostgreSQL error with what the server said (`tokio-postgres` shows a server's refusal
/// as just "db error"): its message, detail and hint, and its SQLSTATE.
pub fn described(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(&format!("; {detail}"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => error.to_string(),
    }
}

/// The URL with its password replaced (for messages).
fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url
            .split(' ')
            .map(|part| match part.strip_prefix("password=") {
                Some(_) => "password=***",
                None => part,
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

impl Database {
    /// Connects to `url` (`postgres://user:password@host:port/dbname`, or the key=value
    /// form), takes the database's lock, applies the migrations it lacks, and prepares the
    /// writer's statements.
    pub async fn open(env: &SharedEnv, url: &str) -> Result<Database, Error> {
        let wanted = super::tls::wanted(url).map_err(|reason| Error::Url {
            url: shown(url),
            reason,
        })?;
        let config: tokio_postgres::Config = wanted.url.parse().map_err(|e| Error::Url {
            url: shown(url),
            reason: format!("{e}"),
        })?;
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            None => "127.0.0.1".to_string(),
            #[allow(unreachable_patterns)]
            Some(_) => {
                return Err(Error::Url {
                    url: shown(url),
                    reason: "a Unix socket host is not supported: give host=127.0.0.1 (or the server's address)".into(),
                })
            }
        };
        let tls = match &wanted.root_cert {
            None => None,
            Some(file) => {
                let shown_url = shown(url);
                let pem = std::fs::read(file).map_err(|e| Error::Url {
                    url: shown_url.clone(),
                    reason: format!("sslrootcert {file}: {e}"),
                })?;
                Some(
                    super::tls::Rustls::new(&pem, &host).map_err(|reason| Error::Url {
                        url: shown_url,
                        reason: format!("sslrootcert {file}: {reason}"),
                    })?,
                )
            }
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let addr = format!("{host}:{port}");
        let stream = env.connect(&addr).await.map_err(|source| Error::Connect {
            addr: addr.clone(),
            source,
        })?;
        let pg = |addr: &str| {
            let addr = addr.to_string();
            move |source| Error::Postgres { addr, source }
        };
        let stream = match tls {
            None => stream,
            Some(tls) => tls
                .negotiate(stream, wanted.required)
                .await
                .map_err(|source| Error::Tls {
                    addr: addr.clone(),
                    source,
                })?,
        };
        let (mut client, connection) =
            config.connect_raw(stream, NoTls).await.map_err(pg(&addr))?;
        let peer = addr.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("PostgreSQL connection to {peer} ended: {e}");
            }
        });
        let locked: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&LOCK_KEY])
            .await
            .map_err(pg(&addr))?
            .get(0);
        if !locked {
            return Err(Error::Busy { addr });
        }
        let applied = migrate(&mut client).await.map_err(|e| match e {
            Migrate::Postgres(source) => Error::Postgres {
                addr: addr.clone(),
                source,
            },
            Migrate::Newer(found) => Error::NewerSchema {
                found,
                known: MIGRATIONS.last().map_or(0, |m| m.0),
            },
        })?;
        let prepare = |sql: &'static str| {
            let client = &client;
            async move { client.prepare(sql).await }
        };
        let statements = Statements {
            runtime: prepare(
                "INSERT INTO runtimes (name, account, runtime, token_sha256, info) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET \
                 account = EXCLUDED.account, runtime = EXCLUDED.runtime, \
                 token_sha256 = EXCLUDED.token_sha256, info = EXCLUDED.info",
            )
            .await
            .map_err(pg(&addr))?,
            revoked: prepare(
                "INSERT INTO revoked_tokens (token_sha256) VALUES ($1) ON CONFLICT DO NOTHING",
            )
            .await
            .map_err(pg(&addr))?,
            audit: prepare(
                "INSERT INTO audit_log (seq, entry) VALUES ($1, $2) ON CONFLICT (seq) DO NOTHING",
            )
            .await
            .map_err(pg(&addr))?,
            event: prepare(
                "INSERT INTO events (id, runtime, gzip, body) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .await
            .map_err(pg(&addr))?,
            projected: prepare(
                "UPDATE events SET projected = true, object_sha256 = $2 WHERE id = $1",
            )
            .await
            .map_err(pg(&addr))?,
            compact: prepare(
                "DELETE FROM events WHERE runtime = $1 AND object_sha256 = $2 AND id < $3",
            )
                .await
                .map_err(pg(&addr))?,
            drop_event: prepare("DELETE FROM events WHERE id = $1")
                .await
                .map_err(pg(&addr))?,
            last_event: prepare(
                "UPDATE orrery_counters SET value = GREATEST(value, $1) WHERE name = 'last_event_id'",
            )
            .await
            .map_err(pg(&addr))?,
            runner_put: prepare(
                "INSERT INTO runner_objects (kind, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (kind, key) DO UPDATE SET value = EXCLUDED.value",
            )
            .await
            .map_err(pg(&addr))?,
            runner_delete: prepare("DELETE FROM runner_objects WHERE kind = $1 AND key = $2")
                .await
                .map_err(pg(&addr))?,
            runner_drop_log: prepare("DELETE FROM runner_log_lines WHERE build = $1")
                .await
                .map_err(pg(&addr))?,
            // A line sent again (its first answer lost) keeps the row it has.
            runner_log: prepare(
                "INSERT INTO runner_log_lines (build, line_no, line) \
                 SELECT $1, $2 + n - 1, line FROM unnest($3::text[]) WITH ORDINALITY AS t(line, n) \
                 ON CONFLICT (build, line_no) DO NOTHING",
            )
            .await
            .map_err(pg(&addr))?,
        };
        Ok(Database {
            addr,
            client,
            statements,
            applied,
        })
    }

    /// Whether the connection is gone (the writer reopens).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    fn error(&self, source: tokio_postgres::Error) -> Error {
        Error::Postgres {
            addr: self.addr.clone(),
            source,
        }
    }

    /// Everything the store holds.
    pub async fn load(&self) -> Result<Snapshot, Error> {
        let mut snapshot = Snapshot::default();
        for row in self
            .client
            .query(
                "SELECT name, account, runtime, token_sha256, info FROM runtimes ORDER BY name",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?
        {
            let name: String = row.get(0);
            let info: serde_json::Value = row.get(4);
            let info = serde_json::from_value(info).map_err(|e| Error::Unreadable {
                table: "runtimes",
                key: name.clone(),
                reason: e.to_string(),
            })?;
            snapshot.runtimes.push(StoredRuntime {
                name,
                account: row.get(1),
                runtime: row.get(2),
                token_sha256: row.get(3),
                info,
            });
        }
        for row in self
            .client
            .query(
                "SELECT token_sha256 FROM revoked_tokens ORDER BY token_sha256",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?
        {
            snapshot.revoked.push(row.get(0));
        }
        for row in self
            .client
            .query("SELECT seq, entry FROM audit_log ORDER BY seq", &[])
            .await
            .map_err(|e| self.error(e))?
        {
            let seq: i64 = row.get(0);
            let entry: serde_json::Value = row.get(1);
            snapshot.audit.push(
                serde_json::from_value(entry).map_err(|e| Error::Unreadable {
                    table: "audit_log",
                    key: seq.to_string(),
                    reason: e.to_string(),
                })?,
            );
        }
        for row in self
            .client
            .query(
                "SELECT id, runtime, gzip, body, projected FROM events ORDER BY id",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?
        {
            let id: i64 = row.get(0);
            let body: Vec<u8> = row.get(3);
            snapshot.events.push(StoredEvent {
                id: id as u64,
                runtime: row.get(1),
                gzip: row.get(2),
                body: Bytes::from(body),
                projected: row.get(4),
            });
        }
        let last: i64 = self
            .client
            .query_one(
                "SELECT value FROM orrery_counters WHERE name = 'last_event_id'",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?
            .get(0);
        snapshot.last_event_id = last as u64;
        for row in self
            .client
            .query(
                "SELECT kind, key, value FROM runner_objects ORDER BY kind, key",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?
        {
            let (kind, key): (String, String) = (row.get(0), row.get(1));
            let Some(kind) = RunnerKind::parse(&kind) else {
                return Err(Error::Unreadable {
                    table: "runner_objects",
                    key: format!("{kind}/{key}"),
                    reason: format!("unknown kind {kind:?}"),
                });
            };
            snapshot.runner.push(RunnerObject {
                kind,
                key,
                value: row.get(2),
            });
        }
        for row in self
            .client
            .query(
                "SELECT build, line FROM runner_log_lines ORDER BY build, line_no",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?
        {
            let (build, line): (String, String) = (row.get(0), row.get(1));
            match snapshot.runner_logs.last_mut() {
                Some(log) if log.build == build => log.lines.push(line),
                _ => snapshot.runner_logs.push(RunnerLog {
                    build,
                    lines: vec![line],
                }),
            }
        }
        Ok(snapshot)
    }

    /// Commits `changes` in one transaction, in order.
    pub async fn commit(&mut self, changes: &[Change]) -> Result<(), tokio_postgres::Error> {
        let s = &self.statements;
        let tx = self.client.transaction().await?;
        let mut last_event = 0i64;
        for change in changes {
            match change {
                Change::Runtime {
                    name,
                    account,
                    runtime,
                    token_sha256,
                    info,
                } => {
                    // jsonb cannot hold a NUL: a registration's text with one is kept with
                    // U+FFFD in its place.
                    let info = without_nul_json(&serde_json::to_value(info).unwrap_or_default());
                    tx.execute(&s.runtime, &[name, account, runtime, token_sha256, &info])
                        .await?;
                }
                Change::Revoked { token_sha256 } => {
                    tx.execute(&s.revoked, &[token_sha256]).await?;
                }
                Change::Audit(entry) => {
                    let value = serde_json::to_value(entry).unwrap_or_default();
                    tx.execute(&s.audit, &[&(entry.seq as i64), &value]).await?;
                }
                Change::Event {
                    id,
                    runtime,
                    gzip,
                    body,
                } => {
                    let id = *id as i64;
                    last_event = last_event.max(id);
                    tx.execute(&s.event, &[&id, runtime, gzip, &body.as_ref()])
                        .await?;
                }
                Change::Projected {
                    id,
                    runtime,
                    object,
                    effect,
                } => {
                    let id = *id as i64;
                    let object = super::sha256_hex(object);
                    match effect {
                        Effect::Supersedes => {
                            tx.execute(&s.projected, &[&id, &object]).await?;
                            tx.execute(&s.compact, &[runtime, &object, &id]).await?;
                        }
                        Effect::InPlace => {
                            tx.execute(&s.projected, &[&id, &object]).await?;
                        }
                        Effect::NoOp => {
                            tx.execute(&s.drop_event, &[&id]).await?;
                        }
                    }
                }
                Change::RunnerPut { kind, key, value } => {
                    let value = without_nul_json(value);
                    tx.execute(
                        &s.runner_put,
                        &[&kind.as_str(), &without_nul(key).as_ref(), &value],
                    )
                    .await?;
                }
                Change::RunnerDelete { kind, key } => {
                    let key = without_nul(key);
                    let key = key.as_ref();
                    tx.execute(&s.runner_delete, &[&kind.as_str(), &key])
                        .await?;
                    if *kind == RunnerKind::Build {
                        tx.execute(&s.runner_drop_log, &[&key]).await?;
                    }
                }
                Change::RunnerLog { build, from, lines } => {
                    let lines: Vec<String> =
                        lines.iter().map(|l| without_nul(l).into_owned()).collect();
                    tx.execute(
                        &s.runner_log,
                        &[&without_nul(build).as_ref(), &(*from as i64), &lines],
                    )
                    .await?;
                }
            }
        }
        if last_event > 0 {
            tx.execute(&s.last_event, &[&last_event]).await?;
        }
        tx.commit().await
    }
}

/// `text` with each NUL (which PostgreSQL's `text` cannot hold) replaced by U+FFFD.
fn without_nul(text: &str) -> std::borrow::Cow<'_, str> {
    match text.contains('\0') {
        true => std::borrow::Cow::Owned(text.replace('\0', "\u{fffd}")),
        false => std::borrow::Cow::Borrowed(text),
    }
}

/// `value` with each NUL in its strings and keys replaced by U+FFFD (`jsonb` cannot hold one).
fn without_nul_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(text) => Value::String(without_nul(text).into_owned()),
        Value::Array(items) => Value::Array(items.iter().map(without_nul_json).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (without_nul(k).into_owned(), without_nul_json(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

enum Migrate {
    Postgres(tokio_postgres::Error),
    Newer(i32),
}

impl From<tokio_postgres::Error> for Migrate {
    fn from(e: tokio_postgres::Error) -> Self {
        Migrate::Postgres(e)
    }
}

/// Applies the migrations the database lacks, each in the one transaction that records it,
/// under a transaction lock (two processes starting at once apply each migration once).
async fn migrate(client: &mut Client) -> Result<Vec<i32>, Migrate> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&(LOCK_KEY + 1)])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS orrery_schema_migrations (\
           version integer PRIMARY KEY, name text NOT NULL, \
           applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let found: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM orrery_schema_migrations",
            &[],
        )
        .await?
        .get(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if found > known {
        return Err(Migrate::Newer(found));
    }
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > found) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO orrery_schema_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await?;
        applied.push(*version);
    }
    tx.commit().await?;
    Ok(applied)
}

/// A refusal of the data itself (SQLSTATE classes 22, data exception, and 23, integrity
/// constraint violation): retrying the same change cannot succeed.
fn refused_data(error: &tokio_postgres::Error) -> bool {
    error
        .code()
        .is_some_and(|code| code.code().starts_with("22") || code.code().starts_with("23"))
}

/// The store in PostgreSQL, at a `--database` URL: what `orrery serve control-plane` opens.
#[derive(Clone, Debug)]
pub struct Postgres {
    url: String,
}

impl Postgres {
    /// The database at `url` (`postgres://user:password@host:port/dbname`, or key=value).
    pub fn new(url: &str) -> Self {
        Postgres {
            url: url.to_string(),
        }
    }
}

impl Open for Postgres {
    fn open<'a>(&'a self, env: &'a SharedEnv) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            let database = Database::open(env, &self.url).await?;
            let snapshot = database.load().await?;
            Ok(Opened {
                snapshot,
                migrations_applied: database.applied.clone(),
                backend: Box::new(database),
            })
        })
    }
}

impl Backend for Database {
    fn commit<'a>(&'a mut self, changes: &'a [Change]) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            match Database::commit(self, changes).await {
                Ok(()) => Ok(()),
                Err(e) if refused_data(&e) => Err(Failure::Refused(self.error(e).to_string())),
                Err(e) if !self.is_closed() => Err(Failure::Transient(self.error(e).to_string())),
                Err(e) => Err(Failure::Lost(self.error(e).to_string())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{shown, without_nul_json};

    #[test]
    fn a_nul_is_kept_as_u_fffd_in_strings_and_keys_and_nothing_else_changes() {
        let value = serde_json::json!({"a\u{0}b": ["x\u{0}", "\\u0000", 1, null], "n": 2});
        assert_eq!(
            without_nul_json(&value),
            serde_json::json!({"a\u{fffd}b": ["x\u{fffd}", "\\u0000", 1, null], "n": 2}),
            "a backslash followed by u0000 is text, not a NUL"
        );
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            shown("postgres://orrery:s3cret@127.0.0.1:5432/orrery"),
            "postgres://orrery:***@127.0.0.1:5432/orrery"
        );
        assert_eq!(
            shown("postgres://orrery@db:5432/x"),
            "postgres://orrery@db:5432/x"
        );
        assert_eq!(
            shown("host=db user=orrery password=x"),
            "host=db user=orrery password=***"
        );
    }
}
