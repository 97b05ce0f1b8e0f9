//! The environment seam: everything a component needs from the outside world.
//!
//! Components never call `tokio::net`, `Instant::now` or an OS random source directly;
//! they ask their [`Env`]. The real environment ([`RealEnv`]) answers with tokio and the
//! OS; the simulated one (in `orrery-sim`) answers with turmoil and the scenario seed, so
//! a run is a pure function of its seed.

mod deadline;
pub mod http;
pub mod kube;
pub mod limits;
mod real;
mod rng;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

pub use crate::core::buggify::{self, Point};
pub use crate::observe::Observation;
pub use deadline::DeadlineStream;
pub use real::RealEnv;
pub use rng::{fnv1a_64, Fnv1a64, FnvBuild, Rng};

/// A boxed future, so the environment trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A byte stream (TCP in both worlds) as components see it.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A boxed connection returned by [`Env::connect`] and [`Listener::accept`].
pub type BoxStream = Box<dyn Stream>;

/// An accepting socket, real or simulated.
pub trait Listener: Send + 'static {
    /// Waits for the next inbound connection; returns it with the peer's address.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>>;
    /// The bound address (`ip:port`), e.g. to learn the port after binding port 0.
    fn local_addr(&self) -> io::Result<String>;
}

/// Who a component is: the host it runs on and, for replicated components, its ordinal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Host name (a turmoil host name, or the OS host name in real mode).
    pub host: String,
    /// Replica ordinal parsed from a StatefulSet-style host name suffix, if any.
    pub ordinal: Option<u32>,
}

impl Identity {
    /// Builds an identity, deriving the ordinal from a trailing `-<n>` like a StatefulSet pod.
    pub fn from_host(host: impl Into<String>) -> Self {
        let host = host.into();
        let ordinal = host.rsplit_once('-').and_then(|(_, n)| n.parse().ok());
        Identity { host, ordinal }
    }
}

/// The injected environment. One per host; cheap to clone behind an `Arc`.
pub trait Env: Send + Sync + 'static {
    /// Who this process is.
    fn identity(&self) -> &Identity;
    /// Monotonic time since the environment started (simulated time under turmoil).
    fn elapsed(&self) -> Duration;
    /// Wall-clock milliseconds since the Unix epoch (a fixed epoch plus simulated time in the sim).
    fn unix_millis(&self) -> u64;
    /// Sleeps for `duration` of this environment's time.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
    /// Draws 64 random bits from this environment's generator (seeded in the simulator).
    fn random_u64(&self) -> u64;
    /// Dials `addr` (`host:port`).
    fn connect(&self, addr: &str) -> BoxFuture<'static, io::Result<BoxStream>>;
    /// Binds a listener on `addr` (`host:port`, `0.0.0.0:port` for all interfaces).
    fn listen(&self, addr: &str) -> BoxFuture<'static, io::Result<Box<dyn Listener>>>;
    /// Records a typed observation for checkers and the trace; a no-op sink is fine in real mode.
    fn observe(&self, observation: Observation);

    /// The bounds this process's servers hold clients to (the defaults unless the operator
    /// set some: [`limits`]).
    fn limits(&self) -> &limits::Limits {
        &limits::DEFAULT
    }

    /// Whether the fault point `point` fires now (see [`buggify`]). Never in real mode; in
    /// the simulator only for points the scenario switches on, with a seed-drawn probability.
    fn buggify(&self, point: Point) -> bool {
        let _ = point;
        false
    }

    /// A random duration in `[low, high]`, for jittered backoff.
    fn random_between(&self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        let span = (high - low).as_millis() as u64;
        low + Duration::from_millis(self.random_u64() % (span + 1))
    }
}

/// The shared handle components receive.
pub type SharedEnv = std::sync::Arc<dyn Env>;
