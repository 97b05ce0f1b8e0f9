//! A fuzz input read as an HTTP request, sent to a server of the world, and the answer
//! judged.
//!
//! The input is the request as text — `METHOD /path?query`, header lines, an empty line,
//! the body — so corpus files are readable and the fuzzer mutates what a client can send.
//! Whatever the bytes, a well-formed HTTP/1.1 request goes out (hyper's parser is not
//! ours to fuzz): bytes a URI may not hold are percent-encoded, invalid header lines are
//! dropped, and the harness sets `Host` and `Content-Length` itself.

use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::world::World;

/// Longest a server may take to start answering, in its own (paused) time: longer is a hang.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// How long the harness reads an answer's body (a watch never ends; that is not a finding).
const BODY_WITHIN: Duration = Duration::from_secs(1);

/// The parts of an input, before they become a request.
pub struct Parts {
    /// The method (`GET` when the input's is not a method).
    pub method: Method,
    /// Path and query, percent-encoded where the input's bytes could not be sent.
    pub target: String,
    /// The valid header lines, in order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Everything after the empty line.
    pub body: Vec<u8>,
}

/// Headers the harness owns: the connection's framing.
const FRAMING: [&str; 5] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
];

/// Splits `data` into a request's parts.
pub fn parts(data: &[u8]) -> Parts {
    let (head, body) = split_head(data);
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let first = lines.next().unwrap_or("");
    let (method, target) = first.trim().split_once(' ').unwrap_or((first.trim(), "/"));
    let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
    let headers = lines
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            let name = HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
            let value = HeaderValue::from_str(value.trim()).ok()?;
            (!FRAMING.contains(&name.as_str())).then_some((name, value))
        })
        .collect();
    Parts {
        method,
        target: uri_target(target.trim()),
        headers,
        body: body.to_vec(),
    }
}

/// The head (up to the first empty line) and the body.
fn split_head(data: &[u8]) -> (&[u8], &[u8]) {
    let lf = find(data, b"\n\n").map(|at| (at, 2));
    let crlf = find(data, b"\r\n\r\n").map(|at| (at, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => {
            let (at, len) = if a.0 <= b.0 { a } else { b };
            (&data[..at], &data[at + len..])
        }
        (Some((at, len)), None) | (None, Some((at, len))) => (&data[..at], &data[at + len..]),
        (None, None) => (data, &[]),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `target` as a request target: starting with `/`, every byte a URI may not carry
/// percent-encoded (an existing `%` stays, so `%2F` and broken escapes reach the server).
fn uri_target(target: &str) -> String {
    let mut out = String::with_capacity(target.len() + 1);
    if !target.starts_with('/') {
        out.push('/');
    }
    for &byte in target.as_bytes() {
        let allowed = byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&byte);
        if allowed {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if out.parse::<http::Uri>().is_err() {
        return "/".into();
    }
    out
}

/// The request `parts` make; a body marked `content-encoding: gzip` that is not gzip yet
/// is compressed, so a seed can be readable JSON and still reach the decompressor.
pub fn request(parts: Parts, host: &str) -> Request<Full<Bytes>> {
    let gzip = parts.headers.iter().any(|(name, value)| {
        name == "content-encoding" && value.as_bytes().eq_ignore_ascii_case(b"gzip")
    });
    let body = if gzip && !parts.body.starts_with(&[0x1f, 0x8b]) {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&parts.body).expect("gzip into memory");
        encoder.finish().expect("gzip into memory")
    } else {
        parts.body
    };
    let mut request = Request::builder()
        .method(parts.method)
        .uri(parts.target)
        .header("host", host)
        .body(Full::new(Bytes::from(body)))
        .expect("a request of valid parts");
    for (name, value) in parts.headers {
        request.headers_mut().append(name, value);
    }
    request
}

/// What a server answered.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body, as much of it as came within [`BODY_WITHIN`].
    pub body: Bytes,
}

/// Sends `request` to `addr` on a new connection and returns the answer.
///
/// # Panics
/// On a finding: no answer at all (the connection closed: a handler panicked), no answer
/// within [`ANSWER_WITHIN`] (a hang), or a 500 (a bad input is the client's error: 4xx).
pub fn exchange(world: &World, addr: &str, request: Request<Full<Bytes>>) -> Answer {
    let what = format!("{} {}", request.method(), request.uri());
    world.block_on(async {
        let stream = world
            .network()
            .connect(addr, "fuzzer")
            .unwrap_or_else(|e| panic!("{addr} does not serve any more: {e}"));
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("an HTTP/1.1 handshake over a pipe");
        let driver = tokio::spawn(connection);
        let answered = tokio::time::timeout(ANSWER_WITHIN, sender.send_request(request)).await;
        let response = match answered {
            Err(_) => panic!("hang: {addr} did not answer {what} within {ANSWER_WITHIN:?}"),
            Ok(Err(e)) => panic!("{addr} closed the connection without answering {what}: {e}"),
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        let mut body = Vec::new();
        let mut incoming = response.into_body();
        let _ = tokio::time::timeout(BODY_WITHIN, async {
            while let Some(Ok(frame)) = incoming.frame().await {
                if let Ok(data) = frame.into_data() {
                    body.extend_from_slice(&data);
                }
            }
        })
        .await;
        driver.abort();
        if status == 500 {
            panic!(
                "{addr} answered {what} with 500: {}",
                String::from_utf8_lossy(&body[..body.len().min(2000)])
            );
        }
        Answer {
            status,
            body: body.into(),
        }
    })
}

/// Sends `data` as a request to `addr` (see the module's doc).
pub fn send(world: &World, addr: &str, data: &[u8]) -> Answer {
    exchange(world, addr, request(parts(data), addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_text_becomes_its_parts_and_framing_headers_are_the_harness_s() {
        let parts = parts(b"PATCH /api/v1/x?a=b c\nContent-Type: application/json\ncontent-length: 9\nbroken line\n\n{\"a\":1}\n\nmore");
        assert_eq!(parts.method, Method::PATCH);
        assert_eq!(parts.target, "/api/v1/x?a=b%20c");
        assert_eq!(parts.headers.len(), 1);
        assert_eq!(parts.headers[0].0, "content-type");
        assert_eq!(parts.body, b"{\"a\":1}\n\nmore");
    }

    #[test]
    fn any_bytes_make_a_valid_request() {
        for data in [
            &b""[..],
            b"\xff\xfe /\x00x",
            b"GET",
            b"GET \r\n\r\n",
            b"get /a#b\n\n",
        ] {
            let parts = parts(data);
            assert!(parts.target.starts_with('/'), "{:?}", parts.target);
            let _ = request(parts, "h:1");
        }
    }
}
