//! A WebSocket connection as a byte stream: each write is one binary message, reads
//! concatenate binary messages. HTTP/2 runs on top of it.
//!
//! Built [`WsIo::with_env`], it carries two fault points: `tunnel.frame_split` (a write
//! goes out as two messages) and `tunnel.frame_delay` (a write waits a moment).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::env::{BoxFuture, Point, SharedEnv};

/// Byte-stream view of a WebSocket.
pub struct WsIo<S> {
    ws: WebSocketStream<S>,
    pending: Bytes,
    /// Where fault points are asked (none: never).
    env: Option<SharedEnv>,
    /// A write held back by `tunnel.frame_delay`, until this ends.
    delay: Option<BoxFuture<'static, ()>>,
}

impl<S> WsIo<S> {
    /// Wraps an established WebSocket.
    pub fn new(ws: WebSocketStream<S>) -> Self {
        WsIo {
            ws,
            pending: Bytes::new(),
            env: None,
            delay: None,
        }
    }

    /// Wraps an established WebSocket whose writes pass the tunnel's fault points.
    pub fn with_env(ws: WebSocketStream<S>, env: SharedEnv) -> Self {
        WsIo {
            env: Some(env),
            ..WsIo::new(ws)
        }
    }
}

fn to_io(error: WsError) -> io::Error {
    match error {
        WsError::Io(e) => e,
        WsError::ConnectionClosed | WsError::AlreadyClosed => {
            io::Error::new(io::ErrorKind::BrokenPipe, "websocket closed")
        }
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(bytes))) => self.pending = bytes,
                // Control frames are answered by tungstenite; text is not part of the protocol.
                Some(Ok(
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) | Message::Text(_),
                )) => {}
                Some(Ok(Message::Close(_))) | None => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(to_io(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.delay.is_none() {
            if let Some(env) = self
                .env
                .as_ref()
                .filter(|e| e.buggify(Point::TunnelFrameDelay))
            {
                let pause = env.random_between(
                    std::time::Duration::from_millis(1),
                    std::time::Duration::from_millis(200),
                );
                self.delay = Some(env.sleep(pause));
            }
        }
        if let Some(delay) = self.delay.as_mut() {
            ready!(delay.as_mut().poll(cx));
            self.delay = None;
        }
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(to_io)?;
        let mut n = buf.len().min(super::MAX_MESSAGE_BYTES);
        if n > 1
            && self
                .env
                .as_ref()
                .is_some_and(|e| e.buggify(Point::TunnelFrameSplit))
        {
            n /= 2; // the rest goes out as the next message
        }
        Pin::new(&mut self.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(&buf[..n])))
            .map_err(to_io)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(to_io)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_close(cx).map_err(to_io)
    }
}
