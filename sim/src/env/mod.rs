//! `SimEnv`: the turmoil implementation of the environment seam.
//!
//! Time is turmoil's simulated clock, randomness is a generator derived from the scenario
//! seed, the host name and how many times the host has booted, the network is turmoil's,
//! and observations go to the run's [`Trace`]. Nothing here reads the OS clock or OS
//! randomness.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orrery_system::env::{
    BoxFuture, BoxStream, Env, Identity, Listener, Observation, Point, Rng, SharedEnv,
};
use orrery_system::observe::FaultPointEvent;

use crate::scenario::model::Buggify;
use crate::trace::Trace;

mod teardown;

pub use teardown::tear_down;
use teardown::Connections;

/// Milliseconds since the Unix epoch at simulated time zero: 2026-01-01T00:00:00Z.
/// Fixed so that timestamps in traces and reports never depend on when a run happens.
pub const SIM_EPOCH_UNIX_MS: u64 = 1_767_225_600_000;

/// The environment of one simulated host.
pub struct SimEnv {
    identity: Identity,
    rng: Mutex<Rng>,
    trace: Trace,
    /// The fault points switched on, and their own generator (so switching points on never
    /// shifts the host's other random draws).
    buggify: Option<(FaultPoints, Mutex<Rng>)>,
    /// This boot's connections, closed in the order they were opened when the host goes down.
    connections: Arc<Connections>,
}

/// The fault points a run switches on, shared by its hosts. They fire only during the fault
/// phase: the calm phase silences them (as FoundationDB turns BUGGIFY off while it waits
/// for the cluster to quiesce), so liveness is judged on a healed system.
#[derive(Clone, Debug)]
pub struct FaultPoints {
    settings: Buggify,
    calm: Arc<AtomicBool>,
}

impl FaultPoints {
    /// `settings`, silenced once `calm` is set.
    pub fn new(settings: Buggify, calm: Arc<AtomicBool>) -> Self {
        FaultPoints { settings, calm }
    }
}

impl SimEnv {
    /// The environment of `host`'s first boot, its randomness derived from `seed` and the
    /// host name.
    pub fn shared(host: &str, seed: u64, trace: Trace) -> SharedEnv {
        SimEnv::booted(host, seed, 0, trace)
    }

    /// The environment of boot number `boot` of `host` (0 = the first). A restarted host
    /// draws fresh values, as a restarted process would, yet deterministically: the stream
    /// is derived from (seed, host, boot); the first boot's is the one [`SimEnv::shared`] gives.
    pub fn booted(host: &str, seed: u64, boot: u64, trace: Trace) -> SharedEnv {
        SimEnv::with_fault_points(host, seed, boot, trace, None)
    }

    /// As [`SimEnv::booted`], with the fault points `buggify` switches on (none: `None` or
    /// an empty list).
    pub fn with_fault_points(
        host: &str,
        seed: u64,
        boot: u64,
        trace: Trace,
        buggify: Option<&FaultPoints>,
    ) -> SharedEnv {
        let label = match boot {
            0 => host.to_string(),
            n => format!("{host}#boot{n}"),
        };
        let buggify = buggify
            .filter(|b| !b.settings.points.is_empty() && b.settings.probability > 0.0)
            .map(|b| {
                (
                    b.clone(),
                    Mutex::new(Rng::derive(seed, &format!("{label}#buggify"))),
                )
            });
        Arc::new(SimEnv {
            identity: Identity::from_host(host),
            rng: Mutex::new(Rng::derive(seed, &label)),
            trace,
            buggify,
            connections: Arc::default(),
        })
    }
}

/// Counts a host's boots, so that each (re)start gets the next [`SimEnv::booted`] stream.
/// Cloned into the host's start closure, which turmoil calls again on every restart.
#[derive(Clone, Debug, Default)]
pub struct Boots(Arc<AtomicU64>);

impl Boots {
    /// The number of this boot (0 for the first), counting it.
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

struct SimListener(turmoil::net::TcpListener, Arc<Connections>);

impl Listener for SimListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            Ok((
                Box::new(self.1.track(stream)) as BoxStream,
                peer.to_string(),
            ))
        })
    }

    fn local_addr(&self) -> io::Result<String> {
        self.0.local_addr().map(|a| a.to_string())
    }
}

impl Env for SimEnv {
    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn elapsed(&self) -> Duration {
        turmoil::sim_elapsed().unwrap_or_default()
    }

    fn unix_millis(&self) -> u64 {
        SIM_EPOCH_UNIX_MS + self.elapsed().as_millis() as u64
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }

    fn random_u64(&self) -> u64 {
        self.rng.lock().expect("rng lock poisoned").next_u64()
    }

    fn connect(&self, addr: &str) -> BoxFuture<'static, io::Result<BoxStream>> {
        let addr = addr.to_string();
        let connections = self.connections.clone();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(addr.as_str()).await?;
            Ok(Box::new(connections.track(stream)) as BoxStream)
        })
    }

    fn listen(&self, addr: &str) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        let addr = addr.to_string();
        let connections = self.connections.clone();
        Box::pin(async move {
            let listener = turmoil::net::TcpListener::bind(addr.as_str()).await?;
            Ok(Box::new(SimListener(listener, connections)) as Box<dyn Listener>)
        })
    }

    fn observe(&self, observation: Observation) {
        self.trace
            .record(self.elapsed(), &self.identity.host, observation);
    }

    fn buggify(&self, point: Point) -> bool {
        let Some((points, rng)) = &self.buggify else {
            return false;
        };
        if !points.settings.points.contains(&point) || points.calm.load(Ordering::SeqCst) {
            return false;
        }
        let fired = rng
            .lock()
            .expect("buggify rng lock poisoned")
            .chance(points.settings.probability * point.boost());
        if fired {
            self.observe(FaultPointEvent::Fired { point }.into());
        }
        fired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_host_draws_fresh_values_deterministically() {
        let draw = |boot| SimEnv::booted("reporter-0", 7, boot, Trace::default()).random_u64();
        let first = SimEnv::shared("reporter-0", 7, Trace::default()).random_u64();
        assert_eq!(first, draw(0), "the first boot keeps the original stream");
        assert_ne!(
            draw(0),
            draw(1),
            "a restart does not replay the first boot's stream"
        );
        assert_ne!(draw(1), draw(2));
        assert_eq!(
            draw(1),
            draw(1),
            "the same boot of the same seed draws the same"
        );
        let boots = Boots::default();
        assert_eq!((boots.next(), boots.clone().next()), (0, 1));
    }
}
