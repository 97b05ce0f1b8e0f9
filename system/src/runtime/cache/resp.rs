//! RESP2, the Redis wire protocol, as far as a server needs it: requests are arrays of bulk
//! strings (or inline lines, as `redis-cli` and telnet send them), replies are the five RESP2
//! types. Protocol errors carry the real server's wording (checked against redis-server 7.0
//! by the conformance suite), because a client that sends garbage sees them.

use bytes::{BufMut, Bytes, BytesMut};

/// Largest multibulk count accepted by default (`cache.args`; the real server's default,
/// 1,048,576 arguments).
pub const MAX_ARGS: usize = crate::env::limits::Limits::DEFAULT.cache_args;
/// Largest bulk string accepted by default (`cache.bulk`; the real server's
/// `proto-max-bulk-len` is 512 MB, ours is smaller because values here are digests and
/// request records, and a larger one is a client bug).
pub const MAX_BULK: usize = crate::env::limits::Limits::DEFAULT.cache_bulk;
/// Longest inline request line by default (`cache.line`; the real server's
/// `PROTO_INLINE_MAX_SIZE`, 64 KB).
pub const MAX_INLINE: usize = crate::env::limits::Limits::DEFAULT.cache_line;

/// A request the client framed wrongly. The server answers it with `-ERR Protocol error: …`
/// and closes the connection, as the real one does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// `*<n>` with n not a number or too large.
    #[error("invalid multibulk length")]
    MultibulkLength,
    /// `$<n>` with n not a number or too large.
    #[error("invalid bulk length")]
    BulkLength,
    /// An array element that is not a bulk string.
    #[error("expected '$', got '{0}'")]
    ExpectedBulk(char),
    /// An inline line longer than `cache.line` without its end.
    #[error("too big inline request")]
    InlineTooBig,
    /// A `*<n>` line longer than `cache.line` without its end.
    #[error("too big mbulk count string")]
    MultibulkCountTooBig,
    /// A `$<n>` line longer than `cache.line` without its end.
    #[error("too big bulk count string")]
    BulkCountTooBig,
}

/// One parsed request: the command and its arguments, or nothing (an empty array or line,
/// which the real server skips without answering).
pub type Request = Vec<Bytes>;

/// Parses one request from the front of `buf`: `Ok(Some((request, used)))` when a whole one
/// is there, `Ok(None)` when more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, ProtocolError> {
    Parser::default().parse(buf)
}

/// A connection's request reader: what is parsed of a request that arrives in pieces is
/// kept, so each byte is read once (re-reading a million-argument request from its start
/// at every network read would cost the square of its size).
#[derive(Debug)]
pub struct Parser {
    partial: Option<Partial>,
    /// Longest line, most arguments, largest bulk string.
    max_line: usize,
    max_args: usize,
    max_bulk: usize,
}

impl Default for Parser {
    fn default() -> Self {
        Parser::new(&crate::env::limits::Limits::DEFAULT)
    }
}

/// A multibulk request read so far.
#[derive(Debug)]
struct Partial {
    count: usize,
    args: Vec<Bytes>,
    /// Where the next argument starts in the connection's buffer.
    at: usize,
}

impl Parser {
    /// A parser holding requests to `limits` (`cache.line`, `cache.args`, `cache.bulk`).
    pub fn new(limits: &crate::env::limits::Limits) -> Self {
        Parser {
            partial: None,
            max_line: limits.cache_line,
            max_args: limits.cache_args,
            max_bulk: limits.cache_bulk,
        }
    }

    /// As [`parse`], continuing the request an earlier call left unfinished; `buf` is the
    /// same buffer, with more bytes at its end.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<(Request, usize)>, ProtocolError> {
        let mut partial = match self.partial.take() {
            Some(partial) => partial,
            None => {
                if buf.is_empty() {
                    return Ok(None);
                }
                if buf[0] != b'*' {
                    return parse_inline(buf, self.max_line);
                }
                let Some((count, at)) = line(buf, 1) else {
                    return if buf.len() > self.max_line {
                        Err(ProtocolError::MultibulkCountTooBig)
                    } else {
                        Ok(None)
                    };
                };
                let count: i64 = number(count).ok_or(ProtocolError::MultibulkLength)?;
                if count > self.max_args as i64 {
                    return Err(ProtocolError::MultibulkLength);
                }
                if count <= 0 {
                    return Ok(Some((Vec::new(), at)));
                }
                let count = count as usize;
                // Room for what is there, not for what the count claims.
                let args = Vec::with_capacity(count.min(64));
                Partial { count, args, at }
            }
        };
        while partial.args.len() < partial.count {
            let at = partial.at;
            let Some(&first) = buf.get(at) else {
                self.partial = Some(partial);
                return Ok(None);
            };
            if first != b'$' {
                return Err(ProtocolError::ExpectedBulk(first as char));
            }
            let Some((len, next)) = line(buf, at + 1) else {
                if buf.len() - at > self.max_line {
                    return Err(ProtocolError::BulkCountTooBig);
                }
                self.partial = Some(partial);
                return Ok(None);
            };
            let len: i64 = number(len).ok_or(ProtocolError::BulkLength)?;
            if !(0..=self.max_bulk as i64).contains(&len) {
                return Err(ProtocolError::BulkLength);
            }
            let end = next + len as usize;
            if buf.len() < end + 2 {
                self.partial = Some(partial);
                return Ok(None);
            }
            // The real server skips the two bytes after a bulk string without looking at them.
            partial.args.push(Bytes::copy_from_slice(&buf[next..end]));
            partial.at = end + 2;
        }
        Ok(Some((partial.args, partial.at)))
    }
}

/// An inline request: one line, arguments separated by spaces (quotes are not interpreted;
/// the real server's quoting rules are outside the subset served here).
fn parse_inline(buf: &[u8], max_line: usize) -> Result<Option<(Request, usize)>, ProtocolError> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > max_line {
            Err(ProtocolError::InlineTooBig)
        } else {
            Ok(None)
        };
    };
    let text = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    let args = text
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|a| !a.is_empty())
        .map(Bytes::copy_from_slice)
        .collect();
    Ok(Some((args, end + 1)))
}

/// The text of the CRLF-terminated line starting at `from`, and where the next one starts.
fn line(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(from..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], from + end + 2))
}

fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`, `+PONG`.
    Simple(&'static str),
    /// `-ERR …` (the text includes the error code).
    Error(String),
    /// `:n`.
    Integer(i64),
    /// `$n` and the bytes, or `$-1` for nil.
    Bulk(Option<Bytes>),
    /// `*n` and the elements.
    Array(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Simple("OK");

    /// An `-ERR <text>` reply.
    pub fn err(text: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {text}"))
    }

    /// Appends the reply's wire form to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Reply::Simple(text) => {
                out.put_u8(b'+');
                out.put_slice(text.as_bytes());
            }
            Reply::Error(text) => {
                out.put_u8(b'-');
                // A newline inside an error would end the frame early.
                out.put_slice(text.replace(['\r', '\n'], " ").as_bytes());
            }
            Reply::Integer(n) => out.put_slice(format!(":{n}").as_bytes()),
            Reply::Bulk(None) => out.put_slice(b"$-1"),
            Reply::Bulk(Some(bytes)) => {
                out.put_slice(format!("${}\r\n", bytes.len()).as_bytes());
                out.put_slice(bytes);
            }
            Reply::Array(items) => {
                out.put_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.encode(out);
                }
                return;
            }
        }
        out.put_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 53: `cache.line`, `cache.args`, `cache.bulk` are the parser's, not constants.
    #[test]
    fn the_limits_a_parser_is_given_are_the_ones_it_holds_requests_to() {
        let mut limits = crate::env::limits::Limits::DEFAULT;
        limits.set("cache.line=1KiB").unwrap();
        limits.set("cache.args=16").unwrap();
        limits.set("cache.bulk=1MiB").unwrap();
        let line = vec![b'a'; 2048];
        assert_eq!(
            Parser::default().parse(&line),
            Ok(None),
            "64 KiB by default"
        );
        assert_eq!(
            Parser::new(&limits).parse(&line),
            Err(ProtocolError::InlineTooBig)
        );
        assert_eq!(
            Parser::new(&limits).parse(b"*17\r\n"),
            Err(ProtocolError::MultibulkLength)
        );
        assert_eq!(
            Parser::new(&limits).parse(b"*1\r\n$1048577\r\n"),
            Err(ProtocolError::BulkLength)
        );
        let ping = Parser::new(&limits).parse(b"*1\r\n$4\r\nPING\r\n").unwrap();
        assert_eq!(
            ping.map(|(r, _)| r),
            Some(vec![Bytes::from_static(b"PING")])
        );
    }

    fn args(request: &[&str]) -> Request {
        request
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    #[test]
    fn parses_arrays_of_bulk_strings_and_waits_for_the_rest() {
        let frame = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        assert_eq!(parse(frame).unwrap(), Some((args(&["GET", "k"]), 20)));
        assert_eq!(parse(&frame[20..]).unwrap(), Some((args(&["PING"]), 14)));
        for cut in 1..20 {
            assert_eq!(parse(&frame[..cut]).unwrap(), None, "cut at {cut}");
        }
        let binary = b"*1\r\n$4\r\na\r\nb\r\n";
        assert_eq!(
            parse(binary).unwrap().unwrap().0[0].as_ref(),
            b"a\r\nb",
            "bulk strings are binary-safe"
        );
    }

    #[test]
    fn parses_inline_requests_and_empty_ones() {
        assert_eq!(
            parse(b"GET  k\r\n").unwrap(),
            Some((args(&["GET", "k"]), 8))
        );
        assert_eq!(parse(b"\r\n").unwrap(), Some((Vec::new(), 2)));
        assert_eq!(parse(b"*0\r\n").unwrap(), Some((Vec::new(), 4)));
        assert_eq!(parse(b"*-1\r\n").unwrap(), Some((Vec::new(), 5)));
        assert_eq!(parse(b"PIN").unwrap(), None);
    }

    #[test]
    fn refuses_malformed_frames_with_the_real_servers_words() {
        let cases: [(&[u8], &str); 3] = [
            (b"*x\r\n", "invalid multibulk length"),
            (b"*2\r\nx\r\n", "expected '$', got 'x'"),
            (b"*1\r\n$x\r\n", "invalid bulk length"),
        ];
        for (frame, words) in cases {
            assert_eq!(parse(frame).unwrap_err().to_string(), words);
        }
        let endless = vec![b'a'; MAX_INLINE + 1];
        assert_eq!(parse(&endless).unwrap_err(), ProtocolError::InlineTooBig);
        // Found by fuzzing: a count line without its end was buffered for ever.
        let mut count = b"*".to_vec();
        count.resize(MAX_INLINE + 2, b'1');
        assert_eq!(
            parse(&count).unwrap_err().to_string(),
            "too big mbulk count string"
        );
        let mut length = b"*1\r\n$".to_vec();
        length.resize(MAX_INLINE + 8, b'1');
        assert_eq!(
            parse(&length).unwrap_err().to_string(),
            "too big bulk count string"
        );
    }

    #[test]
    fn a_request_arriving_in_pieces_is_read_once_and_its_count_reserves_nothing() {
        let whole = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n".to_vec();
        let mut parser = Parser::default();
        for end in 0..whole.len() {
            assert_eq!(parser.parse(&whole[..end]), Ok(None), "after {end} bytes");
        }
        assert_eq!(
            parser.parse(&whole),
            Ok(Some((args(&["SET", "k", "value"]), whole.len())))
        );
        // The next request starts afresh.
        assert_eq!(
            parser.parse(b"*1\r\n$4\r\nPING\r\n"),
            Ok(Some((args(&["PING"]), 14)))
        );
        // A million-argument claim with one argument sent holds one argument's room.
        let mut claim = Parser::default();
        assert_eq!(claim.parse(b"*1048576\r\n$1\r\na\r\n"), Ok(None));
        assert!(claim
            .partial
            .as_ref()
            .is_some_and(|p| p.args.capacity() <= 64));
    }

    #[test]
    fn encodes_every_reply_type() {
        let mut out = BytesMut::new();
        for reply in [
            Reply::OK,
            Reply::err("syntax error"),
            Reply::Integer(-2),
            Reply::Bulk(None),
            Reply::Bulk(Some(Bytes::from_static(b"v"))),
            Reply::Array(vec![Reply::Integer(1), Reply::Bulk(None)]),
        ] {
            reply.encode(&mut out);
        }
        assert_eq!(
            &out[..],
            b"+OK\r\n-ERR syntax error\r\n:-2\r\n$-1\r\n$1\r\nv\r\n*2\r\n:1\r\n$-1\r\n"
        );
    }
}
