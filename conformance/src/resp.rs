//! Raw RESP over TCP for the Redis suite: requests go out as bytes and replies come back as
//! bytes, so the simulated cache server and a real redis-server are compared byte for byte
//! (no client library in between to smooth differences over).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long to wait for a reply (or for the server to close) before calling it silent.
pub const REPLY_WAIT: Duration = Duration::from_secs(2);

/// Encodes a command as a RESP array of bulk strings.
pub fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The length of the first whole RESP2 reply in `buf`, if it is all there.
pub fn reply_len(buf: &[u8]) -> Option<usize> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let head = std::str::from_utf8(&buf[1..end]).ok();
    let after = end + 2;
    match buf.first()? {
        b'+' | b'-' | b':' => Some(after),
        b'$' => {
            let n: i64 = head?.parse().ok()?;
            if n < 0 {
                return Some(after);
            }
            let total = after + n as usize + 2;
            (buf.len() >= total).then_some(total)
        }
        b'*' => {
            let n: i64 = head?.parse().ok()?;
            let mut at = after;
            for _ in 0..n.max(0) {
                at += reply_len(&buf[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

/// One connection to a Redis server.
pub struct Connection {
    stream: TcpStream,
    pending: Vec<u8>,
}

/// What a request got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// These reply bytes (one or more whole replies).
    Replies(Vec<u8>),
    /// These bytes, then the server closed the connection.
    Closed(Vec<u8>),
}

impl Connection {
    /// Connects to `addr`.
    pub async fn open(addr: &str) -> std::io::Result<Connection> {
        Ok(Connection {
            stream: TcpStream::connect(addr).await?,
            pending: Vec::new(),
        })
    }

    /// Sends `bytes` and reads `replies` whole replies, or until the server closes or stays
    /// silent for [`REPLY_WAIT`].
    pub async fn send(&mut self, bytes: &[u8], replies: usize) -> std::io::Result<Answer> {
        self.stream.write_all(bytes).await?;
        let mut got = Vec::new();
        let mut count = 0;
        loop {
            while count < replies {
                match reply_len(&self.pending) {
                    Some(n) => {
                        got.extend(self.pending.drain(..n));
                        count += 1;
                    }
                    None => break,
                }
            }
            if count == replies {
                return Ok(Answer::Replies(got));
            }
            let mut buf = [0u8; 4096];
            match tokio::time::timeout(REPLY_WAIT, self.stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    got.append(&mut self.pending);
                    return Ok(Answer::Closed(got));
                }
                Ok(Ok(n)) => self.pending.extend_from_slice(&buf[..n]),
                Err(_) => {
                    got.append(&mut self.pending);
                    return Ok(Answer::Replies(got));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_whole_replies_of_every_type() {
        assert_eq!(reply_len(b"+OK\r\n"), Some(5));
        assert_eq!(reply_len(b"$-1\r\n:1\r\n"), Some(5));
        assert_eq!(reply_len(b"$3\r\nabc\r\n"), Some(9));
        assert_eq!(reply_len(b"$3\r\nab"), None);
        assert_eq!(reply_len(b"*2\r\n:1\r\n$1\r\nx\r\n"), Some(15));
        assert_eq!(reply_len(b"*2\r\n:1\r\n"), None);
    }
}
