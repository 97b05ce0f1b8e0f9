//! The real environment: tokio's clock and OS sockets. Used by `orrery serve …`,
//! `orrery apiserver` and the conformance suites.

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use super::{BoxFuture, BoxStream, Env, Identity, Listener, Observation, Rng};

/// Where a real process's observations go (a log, a test's collector).
type ObservationSink = Box<dyn Fn(&Observation) + Send + Sync>;

/// The environment of a real process.
pub struct RealEnv {
    identity: Identity,
    started: tokio::time::Instant,
    epoch_at_start_ms: u64,
    rng: Mutex<Rng>,
    sink: Option<ObservationSink>,
    limits: super::limits::Limits,
}

impl RealEnv {
    /// A real environment for `host`; randomness comes from the OS (a generator seeded from
    /// the wall clock and pid only if the OS's source fails).
    pub fn new(host: impl Into<String>) -> Self {
        let epoch_at_start_ms = std::time::SystemTime::now() // determinism: real-env
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let seed = epoch_at_start_ms ^ (u64::from(std::process::id()) << 32);
        RealEnv {
            identity: Identity::from_host(host),
            started: tokio::time::Instant::now(), // determinism: real-env
            epoch_at_start_ms,
            rng: Mutex::new(Rng::new(seed)),
            sink: None,
            limits: super::limits::Limits::DEFAULT,
        }
    }

    /// Sends observations to `sink` (e.g. a test collecting them) instead of dropping them.
    #[must_use]
    pub fn with_observer(mut self, sink: impl Fn(&Observation) + Send + Sync + 'static) -> Self {
        self.sink = Some(Box::new(sink));
        self
    }

    /// Holds this process's servers to `limits` instead of the defaults (`--limit`).
    #[must_use]
    pub fn with_limits(mut self, limits: super::limits::Limits) -> Self {
        self.limits = limits;
        self
    }
}

struct RealListener(tokio::net::TcpListener);

impl Listener for RealListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            stream.set_nodelay(true)?;
            Ok((Box::new(stream) as BoxStream, peer.to_string()))
        })
    }

    fn local_addr(&self) -> io::Result<String> {
        self.0.local_addr().map(|a| a.to_string())
    }
}

impl Env for RealEnv {
    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn unix_millis(&self) -> u64 {
        self.epoch_at_start_ms + self.elapsed().as_millis() as u64
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }

    fn random_u64(&self) -> u64 {
        // Tokens (runtime tokens, the anti-entropy job's) are minted from this, so every
        // value comes from the OS's CSPRNG: a seeded generator's output reveals its state,
        // and one tenant's token would tell the next tenant's.
        getrandom::u64() // determinism: real-env
            .unwrap_or_else(|error| {
                tracing::warn!(%error, "the OS's random source failed; using the seeded generator");
                self.rng.lock().expect("rng lock poisoned").next_u64()
            })
    }

    fn connect(&self, addr: &str) -> BoxFuture<'static, io::Result<BoxStream>> {
        let addr = addr.to_string();
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(&addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxStream)
        })
    }

    fn listen(&self, addr: &str) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        let addr = addr.to_string();
        Box::pin(async move {
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            Ok(Box::new(RealListener(listener)) as Box<dyn Listener>)
        })
    }

    fn limits(&self) -> &super::limits::Limits {
        &self.limits
    }

    fn observe(&self, observation: Observation) {
        if let Some(sink) = &self.sink {
            sink(&observation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two processes' (or two environments') tokens never follow from the start time and
    /// pid: environments made in the same millisecond by the same process mint different
    /// runtime tokens (a generator seeded from both minted the same ones).
    #[test]
    fn environments_started_together_mint_different_tokens() {
        let (a, b) = (RealEnv::new("a"), RealEnv::new("b"));
        let token = |env: &RealEnv| format!("{:016x}{:016x}", env.random_u64(), env.random_u64());
        let (first, second) = (token(&a), token(&b));
        assert_ne!(first, second);
        assert_ne!(token(&a), first, "nor one value twice");
    }
}
