//! An environment whose sockets are in-memory pipes: the production servers listen and
//! dial through it unchanged, and a fuzz input costs no system call.
//!
//! Time is tokio's clock, paused by the runtime [`crate::world`] builds: a server that
//! waits on a timer moves time forward at once, so an input that makes it wait 30 s costs
//! nothing, and "answered within 1 s" is measured in the servers' own time.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orrery_system::env::{BoxFuture, BoxStream, Env, Identity, Listener, Observation, Rng};
use tokio::sync::mpsc;

/// Bytes one direction of a connection buffers before the writer waits.
const PIPE_BYTES: usize = 256 * 1024;

/// The in-memory network: which addresses listen.
#[derive(Default)]
pub struct Network {
    listeners: Mutex<BTreeMap<String, mpsc::UnboundedSender<(BoxStream, String)>>>,
    dialled: Mutex<u64>,
}

impl Network {
    /// Opens a connection to `addr`, as a client on `from` would.
    pub fn connect(&self, addr: &str, from: &str) -> io::Result<BoxStream> {
        let listeners = self.listeners.lock().expect("network");
        let Some(listener) = listeners.get(addr) else {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("nothing listens on {addr}"),
            ));
        };
        let port = {
            let mut dialled = self.dialled.lock().expect("network");
            *dialled += 1;
            40_000 + *dialled % 20_000
        };
        let (client, server) = tokio::io::duplex(PIPE_BYTES);
        listener
            .send((Box::new(server), format!("{from}:{port}")))
            .map_err(|_| io::Error::new(io::ErrorKind::ConnectionRefused, "listener closed"))?;
        Ok(Box::new(client))
    }
}

/// One host's view of the [`Network`].
pub struct MemoryEnv {
    identity: Identity,
    network: Arc<Network>,
    started: tokio::time::Instant,
    rng: Mutex<Rng>,
}

impl MemoryEnv {
    /// The environment of `host` on `network`; its random numbers are seeded by its name.
    pub fn new(host: &str, network: Arc<Network>) -> Self {
        MemoryEnv {
            identity: Identity::from_host(host),
            network,
            started: tokio::time::Instant::now(),
            rng: Mutex::new(Rng::derive(1, host)),
        }
    }
}

struct MemoryListener {
    addr: String,
    accepted: mpsc::UnboundedReceiver<(BoxStream, String)>,
}

impl Listener for MemoryListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(async move {
            self.accepted
                .recv()
                .await
                .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "network gone"))
        })
    }

    fn local_addr(&self) -> io::Result<String> {
        Ok(self.addr.clone())
    }
}

/// Fixed wall-clock epoch of the fuzz world (2026-01-01T00:00:00Z), so tokens and
/// timestamps do not depend on the day.
const EPOCH_MS: u64 = 1_767_225_600_000;

impl Env for MemoryEnv {
    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn unix_millis(&self) -> u64 {
        EPOCH_MS + self.elapsed().as_millis() as u64
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }

    fn random_u64(&self) -> u64 {
        self.rng.lock().expect("rng").next_u64()
    }

    fn connect(&self, addr: &str) -> BoxFuture<'static, io::Result<BoxStream>> {
        let connected = self.network.connect(addr, &self.identity.host);
        Box::pin(async move { connected })
    }

    fn listen(&self, addr: &str) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        let (sender, accepted) = mpsc::unbounded_channel();
        let mut listeners = self.network.listeners.lock().expect("network");
        let bound = if listeners.get(addr).is_some_and(|l| !l.is_closed()) {
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{addr} is in use"),
            ))
        } else {
            listeners.insert(addr.to_string(), sender);
            Ok(Box::new(MemoryListener {
                addr: addr.to_string(),
                accepted,
            }) as Box<dyn Listener>)
        };
        Box::pin(async move { bound })
    }

    fn observe(&self, _observation: Observation) {}
}
