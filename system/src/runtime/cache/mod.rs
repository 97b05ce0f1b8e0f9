//! The dedup store shared by all reporter replicas and the tunnel client's request records:
//! Redis in the real runtime (Argo CD's, research §1.4: keys with a 20-minute TTL, written
//! only after a successful send). The runtime talks RESP through the `redis` crate over a
//! connection the environment opens, so the same client meets the simulated server
//! ([`server`], on the world's `role: cache` host) and a real `redis-server` (real mode, the
//! conformance suite).

pub mod resp;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use redis::aio::MultiplexedConnection;

pub use server::{run, run_with, Store};

use crate::env::SharedEnv;

/// Why a cache call failed. Callers treat every kind alike (as a miss, or a retry later),
/// but logs and tests tell them apart.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No connection could be opened.
    #[error("cannot connect to the cache at {addr}: {source}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The cache did not answer within the client's timeout.
    #[error("the cache at {0} did not answer in time")]
    Timeout(String),
    /// The cache answered with an error, or the connection broke.
    #[error("the cache at {addr} failed: {source}")]
    Redis {
        /// Where.
        addr: String,
        /// What the client saw.
        source: redis::RedisError,
    },
}

/// Retries after a broken connection (go-redis's default `MaxRetries`).
pub const MAX_RETRIES: u32 = 3;
/// Longest wait between two tries (go-redis's `MaxRetryBackoff`).
pub const MAX_BACKOFF: Duration = Duration::from_millis(512);

/// Whether `error` is a broken or refused connection (reconnect and try again). Not the
/// server's answer, and not a timeout: that already spent the call's budget (a partitioned
/// cache would otherwise stall every caller four times over).
fn retryable(error: &Error) -> bool {
    match error {
        Error::Redis { source, .. } => {
            (source.is_io_error() || source.is_connection_dropped()) && !source.is_timeout()
        }
        Error::Connect { .. } => true,
        Error::Timeout(_) => false,
    }
}

/// Whether `error` leaves the connection unusable: broken, refused, or silent past the
/// timeout (a partition or a crashed peer looks like that; without dropping it every later
/// call would wait out the timeout on the same dead connection).
fn broken(error: &Error) -> bool {
    match error {
        Error::Redis { source, .. } => {
            source.is_io_error() || source.is_connection_dropped() || source.is_timeout()
        }
        Error::Connect { .. } | Error::Timeout(_) => true,
    }
}

/// A client of the cache: one multiplexed RESP connection, opened on first use and again
/// after it breaks.
#[derive(Clone)]
pub struct Client {
    env: SharedEnv,
    addr: String,
    timeout: Duration,
    connection: Arc<tokio::sync::Mutex<Option<MultiplexedConnection>>>,
}

impl Client {
    /// A client of the cache at `addr` (`host:port`); each call gives up after `timeout`.
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        Client {
            env,
            addr: addr.to_string(),
            timeout,
            connection: Arc::default(),
        }
    }

    /// The open connection, or a new one (its driver runs as a task until the stream ends).
    /// The lock is not held while connecting: callers that find no connection each dial, in
    /// parallel, like an HTTP client's pool, so a cache that does not answer costs each
    /// caller one timeout rather than queueing every caller behind one dial after another.
    async fn connection(&self) -> Result<MultiplexedConnection, Error> {
        if let Some(connection) = self.connection.lock().await.as_ref() {
            return Ok(connection.clone());
        }
        let stream = tokio::time::timeout(self.timeout, self.env.connect(&self.addr))
            .await
            .map_err(|_| Error::Timeout(self.addr.clone()))?
            .map_err(|source| Error::Connect {
                addr: self.addr.clone(),
                source,
            })?;
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(self.timeout));
        let info = redis::RedisConnectionInfo::default();
        let setup = redis::aio::MultiplexedConnection::new_with_config(&info, stream, config);
        let (connection, driver) = tokio::time::timeout(self.timeout, setup)
            .await
            .map_err(|_| Error::Timeout(self.addr.clone()))?
            .map_err(|source| self.failed(source))?;
        tokio::spawn(driver);
        let mut slot = self.connection.lock().await;
        // Another caller may have connected meanwhile: keep one connection.
        Ok(slot.get_or_insert(connection).clone())
    }

    fn failed(&self, source: redis::RedisError) -> Error {
        Error::Redis {
            addr: self.addr.clone(),
            source,
        }
    }

    /// Runs `command`, retrying on a broken connection up to [`MAX_RETRIES`] times with
    /// go-redis's backoff (8 ms doubling, at most 512 ms): Argo CD's Redis client is go-redis
    /// with its default `MaxRetries` 3, so a restarted Redis costs a caller one slow call, not
    /// a failed one. An error the server answered is not retried.
    async fn query<T: redis::FromRedisValue>(&self, command: redis::Cmd) -> Result<T, Error> {
        let mut attempt = 0;
        loop {
            match self.query_once(&command).await {
                Err(error) if attempt < MAX_RETRIES && retryable(&error) => {
                    let backoff = Duration::from_millis(8 << attempt).min(MAX_BACKOFF);
                    self.env.sleep(backoff).await;
                    attempt += 1;
                }
                answer => return answer,
            }
        }
    }

    /// One try; a broken connection is dropped so the next try opens a new one.
    async fn query_once<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, Error> {
        let mut connection = self.connection().await?;
        // The connection's own response timeout (`self.timeout`) answers first; this one is
        // a backstop.
        let answer = tokio::time::timeout(self.timeout * 2, command.query_async(&mut connection))
            .await
            .map_err(|_| Error::Timeout(self.addr.clone()));
        let answer = match answer {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(source)) => Err(self.failed(source)),
            Err(timeout) => Err(timeout),
        };
        if answer.as_ref().is_err_and(broken) {
            self.connection.lock().await.take();
        }
        answer
    }

    /// The value under `key`, `None` if absent (`GET`).
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, Error> {
        let mut command = redis::cmd("GET");
        command.arg(key);
        self.query(command).await
    }

    /// Stores `value` under `key` for `ttl`: `SET key value EX s`, or `PX ms` when the TTL is
    /// not whole seconds (go-redis's rule, which Argo CD's cache client follows).
    pub async fn put(&self, key: &str, value: Bytes, ttl: Duration) -> Result<(), Error> {
        let mut command = redis::cmd("SET");
        command.arg(key).arg(value.as_ref());
        if ttl.subsec_nanos() == 0 && ttl >= Duration::from_secs(1) {
            command.arg("EX").arg(ttl.as_secs());
        } else {
            command.arg("PX").arg(ttl.as_millis().max(1) as u64);
        }
        self.query::<()>(command).await
    }

    /// Removes `key` (`DEL`).
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        let mut command = redis::cmd("DEL");
        command.arg(key);
        self.query::<i64>(command).await.map(|_| ())
    }
}
