//! A read deadline for long-lived connections.
//!
//! A partitioned link (turmoil's, or a real one whose peer vanished) never errors: reads
//! just hang. Watches, keep-alive HTTP and tunnels need a deadline to notice, so every
//! client connection is wrapped in a [`DeadlineStream`].

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Fails a read that waits longer than `idle` for its next byte.
pub struct DeadlineStream<S> {
    inner: S,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
}

impl<S> DeadlineStream<S> {
    /// Wraps `inner`; a read pending for more than `idle` returns `TimedOut`.
    pub fn new(inner: S, idle: Duration) -> Self {
        DeadlineStream {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn rearm(&mut self) {
        // tokio's clock is turmoil's simulated clock inside the simulator.
        let deadline = tokio::time::Instant::now() + self.idle; // determinism: real-env or turmoil-driven tokio clock
        self.timer.as_mut().reset(deadline);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for DeadlineStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.rearm();
                Poll::Ready(result)
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no data received for {:?} (read deadline)", this.idle),
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for DeadlineStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

use std::future::Future as _;
