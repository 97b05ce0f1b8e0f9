//! The fuzz targets: one function per entry point, each taking the fuzzer's bytes.
//!
//! A target panics only on a finding: a server that panicked, hung, answered 500 or stopped
//! serving; a file parser that panicked; an edit whose result does not read back.

use std::time::Duration;

use orrery_system::core::yaml_edit::YamlDoc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::request::{self, ANSWER_WITHIN};
use crate::world::{self, World};

/// How long the harness listens after sending a raw stream (paused time: costs nothing).
const LISTEN: Duration = Duration::from_secs(1);

/// The simulated Kubernetes API server: JSON, YAML and protobuf bodies, query strings,
/// the three patch types, server-side apply, watches.
pub fn apiserver(data: &[u8]) {
    world::with(|w| request::send(w, world::APISERVER, data));
}

/// The platform's gateway: REST, webhook routes, path normalisation, forwarding.
pub fn gateway(data: &[u8]) {
    world::with(|w| request::send(w, world::GATEWAY, data));
}

/// The events API: gzip (decompression bombs included) and JSON events.
pub fn events(data: &[u8]) {
    world::with(|w| request::send(w, world::EVENTS, data));
}

/// The Runner's builds and agent task API.
pub fn runner(data: &[u8]) {
    world::with(|w| request::send(w, world::RUNNER, data));
}

/// The runtime's app-proxy REST API.
pub fn app_proxy(data: &[u8]) {
    world::with(|w| request::send(w, world::APP_PROXY, data));
}

/// The runtime's router (its ingress): path routing and webhook routes.
pub fn router(data: &[u8]) {
    world::with(|w| request::send(w, world::ROUTER, data));
}

/// The GitOps API's GraphQL: documents, variables and operation names. The input is the
/// document, then optionally `--- variables` and JSON, then `--- operation` and a name.
pub fn graphql(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (document, rest) = text
        .split_once("\n--- variables\n")
        .map_or((&*text, None), |(d, r)| (d, Some(r)));
    let (variables, operation) = match rest {
        Some(rest) => rest
            .split_once("\n--- operation\n")
            .map_or((Some(rest), None), |(v, o)| (Some(v), Some(o))),
        None => match document.split_once("\n--- operation\n") {
            Some((_, o)) => (None, Some(o)),
            None => (None, None),
        },
    };
    let document = document.split("\n--- operation\n").next().unwrap_or("");
    // Variables that are not JSON are sent as a JSON string: the server sees them anyway.
    let variables = match variables {
        None => "null".to_string(),
        Some(v) => match serde_json::from_str::<serde_json::Value>(v) {
            Ok(_) => v.to_string(),
            Err(_) => serde_json::Value::String(v.into()).to_string(),
        },
    };
    let operation = operation.map_or(serde_json::Value::Null, |o| o.trim().into());
    let body = format!(
        r#"{{"query":{},"variables":{variables},"operationName":{operation}}}"#,
        serde_json::Value::String(document.into())
    );
    let input = format!(
        "POST /2.0/api/graphql\ncontent-type: application/json\nauthorization: Bearer {}\n\n{body}",
        world::USER_TOKEN
    );
    world::with(|w| request::send(w, world::GATEWAY, input.as_bytes()));
}

/// The tunnel server: the WebSocket upgrade (registration), then what a runtime sends.
///
/// The input is the upgrade request's head as text (the harness adds the WebSocket
/// headers the input does not give), an empty line, then messages (each a 2-byte length
/// and its bytes), sent as masked binary frames; or `RAW\n` and bytes written as they are.
pub fn tunnel(data: &[u8]) {
    tunnel_upgrade(data);
}

/// [`tunnel`], returning the upgrade's status (101 when the runtime registered).
pub fn tunnel_upgrade(data: &[u8]) -> u16 {
    let head_end = data
        .windows(2)
        .position(|w| w == b"\n\n")
        .map_or(data.len(), |at| at + 2);
    let parts = request::parts(&data[..head_end]);
    let after = &data[head_end..];
    let mut head = format!(
        "{} {} HTTP/1.1\r\nhost: {}\r\n",
        parts.method,
        parts.target,
        world::TUNNEL
    );
    for (name, value) in &parts.headers {
        head.push_str(&format!(
            "{name}: {}\r\n",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    for (name, value) in [
        ("upgrade", "websocket"),
        ("connection", "Upgrade"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("sec-websocket-version", "13"),
    ] {
        if !parts.headers.iter().any(|(n, _)| n == name) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("\r\n");
    let sent = match after.strip_prefix(b"RAW\n") {
        Some(raw) => raw.to_vec(),
        None => frames(after),
    };
    world::with(|w| tunnel_exchange(w, head.as_bytes(), &sent))
}

/// Masked binary frames of the length-prefixed messages in `data`.
fn frames(mut data: &[u8]) -> Vec<u8> {
    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([data[0], data[1]])).min(data.len() - 2);
        let payload = &data[2..2 + len];
        data = &data[2 + len..];
        out.push(0x82);
        match len {
            0..=125 => out.push(0x80 | len as u8),
            _ => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
        }
        out.extend_from_slice(&MASK);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    }
    out
}

fn tunnel_exchange(world: &World, head: &[u8], sent: &[u8]) -> u16 {
    world.block_on(async {
        let mut stream = world
            .network()
            .connect(world::TUNNEL, "fuzzer")
            .unwrap_or_else(|e| panic!("the tunnel server does not serve any more: {e}"));
        stream.write_all(head).await.expect("a pipe takes the head");
        let mut answer = Vec::new();
        let head_read = tokio::time::timeout(ANSWER_WITHIN, async {
            let mut buf = [0u8; 4096];
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                }
            }
            true
        })
        .await;
        match head_read {
            Err(_) => {
                panic!("hang: the tunnel server did not answer an upgrade within {ANSWER_WITHIN:?}")
            }
            Ok(false) => panic!(
                "the tunnel server closed the connection without answering the upgrade (read {:?})",
                String::from_utf8_lossy(&answer)
            ),
            Ok(true) => {}
        }
        let text = String::from_utf8_lossy(&answer);
        let status: u16 = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        if status == 500 || status == 0 {
            panic!("the tunnel server answered an upgrade with {text:?}");
        }
        if status != 101 {
            return status;
        }
        let _ = stream.write_all(sent).await;
        let _ = tokio::time::timeout(LISTEN, async {
            let mut buf = [0u8; 4096];
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        })
        .await;
        status
    })
}

/// The runtime's cache (RESP): raw bytes, then the end of the stream.
pub fn resp(data: &[u8]) {
    world::with(|w| {
        w.block_on(async {
            let mut stream = w
                .network()
                .connect(world::CACHE, "fuzzer")
                .unwrap_or_else(|e| panic!("the cache does not serve any more: {e}"));
            let _ = stream.write_all(data).await;
            let _ = stream.shutdown().await;
            let _ = tokio::time::timeout(LISTEN, async {
                let mut buf = [0u8; 4096];
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            })
            .await;
        })
    });
}

/// A scenario file (`orrery run FILE`).
pub fn scenario(data: &[u8]) {
    let _ = orrery_sim::scenario::parse::parse("fuzz.yaml", &String::from_utf8_lossy(data));
}

/// A permissions policy file (`serve control-plane --policy FILE`).
pub fn policy(data: &[u8]) {
    let _ = orrery_system::platform::permissions::policy::Policy::parse(
        "fuzz.yaml",
        &String::from_utf8_lossy(data),
    );
}

/// A promotion orchestrator file (`serve control-plane --promotions FILE`).
pub fn promotions(data: &[u8]) {
    let _ = orrery_system::platform::promotions::file::OrchestratorFile::parse(
        "fuzz.yaml",
        &String::from_utf8_lossy(data),
    );
}

/// A recorded workload trace (`workload: {replay: FILE}`).
pub fn trace(data: &[u8]) {
    let _ = orrery_sim::scenario::trace::Trace::parse(&String::from_utf8_lossy(data));
}

/// A Helm values file edited by a promotion: the first line is `key.path=JSON`, the rest
/// the YAML. An edit that succeeds must read back with the value at its path.
pub fn values(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (edit, yaml) = text.split_once('\n').unwrap_or((&text, ""));
    let Some((path, value)) = edit.split_once('=') else {
        return;
    };
    let keys: Vec<String> = path.split('.').map(str::to_string).collect();
    let value =
        serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.into()));
    let Ok(mut doc) = YamlDoc::parse(yaml) else {
        return;
    };
    if doc.set(&keys, &value) == Ok(true) {
        let reread = YamlDoc::parse(doc.text()).unwrap_or_else(|e| {
            panic!(
                "an edit of {path} wrote YAML that does not parse: {e}\n{}",
                doc.text()
            )
        });
        let mut at = reread.value();
        for key in &keys {
            at = at
                .get(key)
                .unwrap_or_else(|| panic!("an edit of {path} lost the key {key}\n{}", doc.text()));
        }
        assert_eq!(
            at,
            &value,
            "an edit of {path} wrote another value\n{}",
            doc.text()
        );
    }
}
