//! A host that goes down closes its connections in the order it opened them.
//!
//! turmoil takes a host down (a crash, or the stop half of a restart) by dropping its tokio
//! runtime, and tokio drops the runtime's tasks in an order keyed by their task ids — which
//! are process-global, so another simulation on another thread, or an earlier one on this
//! thread, shifts them. Each connection sends its FIN (or RST) as it is dropped, and the order
//! of those messages is the order in which they draw their latencies from the seed: a trace
//! depended on the process's history. While the harness takes a host down ([`tear_down`]), a
//! connection that is dropped is set aside instead; when the last connection and environment
//! of that boot of the host is gone — still inside the teardown, in the host's context — the
//! set-aside connections close in the order they were opened.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

thread_local! {
    /// Set while the harness takes a host down on this thread (each simulation runs on one).
    static TEARING_DOWN: Cell<bool> = const { Cell::new(false) };
    /// Connections set aside by a teardown on this thread and not closed yet.
    static SET_ASIDE: Cell<usize> = const { Cell::new(0) };
}

/// Runs `down` (turmoil's `crash` or `bounce` of one host) so that the host's connections
/// close in the order the host opened them.
///
/// # Panics
/// If a connection set aside was not closed when `down` returned: something outside the host
/// still held the host's environment or one of its connections (a harness bug; the run's
/// panic is reported as a harness error).
pub fn tear_down<T>(down: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            TEARING_DOWN.set(false);
        }
    }
    TEARING_DOWN.set(true);
    let reset = Reset;
    let out = down();
    drop(reset);
    let left = SET_ASIDE.replace(0);
    assert!(
        left == 0,
        "{left} connection(s) of a host taken down outlived it (held outside the host)"
    );
    out
}

/// The connections of one boot of one host: numbered as they are opened or accepted, and
/// those a teardown has set aside.
#[derive(Default)]
pub(crate) struct Connections {
    opened: AtomicU64,
    set_aside: Mutex<Vec<(u64, turmoil::net::TcpStream)>>,
}

impl Connections {
    /// `stream`, numbered as the next connection of this boot.
    pub(crate) fn track(self: &Arc<Self>, stream: turmoil::net::TcpStream) -> SimStream {
        SimStream {
            number: self.opened.fetch_add(1, Ordering::Relaxed),
            stream: Some(stream),
            connections: self.clone(),
        }
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        let mut set_aside =
            std::mem::take(self.set_aside.get_mut().unwrap_or_else(|e| e.into_inner()));
        if set_aside.is_empty() {
            return;
        }
        SET_ASIDE.set(SET_ASIDE.get().saturating_sub(set_aside.len()));
        set_aside.sort_by_key(|(number, _)| *number);
        for (_, stream) in set_aside {
            drop(stream);
        }
    }
}

/// A simulated connection that a teardown sets aside instead of closing at once.
pub(crate) struct SimStream {
    number: u64,
    stream: Option<turmoil::net::TcpStream>,
    connections: Arc<Connections>,
}

impl SimStream {
    fn stream(&mut self) -> &mut turmoil::net::TcpStream {
        self.stream
            .as_mut()
            .expect("a live stream holds its connection")
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        if TEARING_DOWN.get() {
            SET_ASIDE.set(SET_ASIDE.get() + 1);
            self.connections
                .set_aside
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((self.number, stream));
        }
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(self.stream()).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.stream()).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.stream()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.stream()).poll_shutdown(cx)
    }
}
