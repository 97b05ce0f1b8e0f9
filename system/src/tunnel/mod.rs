//! What the tunnel client (runtime) and the tunnel server (platform) share: the
//! registration handshake, the WebSocket byte-stream adapter and the limits.
//!
//! One WebSocket connection per runtime carries an HTTP/2 connection (the multiplexer:
//! many concurrent request/response streams, flow control, PING keepalives). The platform
//! is the HTTP/2 client, the runtime the HTTP/2 server, whichever side dialled.

pub mod tls;
pub mod ws;

/// Path of the WebSocket upgrade.
pub const PATH: &str = "/tunnel";
/// Header naming the runtime, `<account>-<runtime>`.
pub const RUNTIME_HEADER: &str = "x-orrery-runtime";
/// Header carrying the client process's run id (faithful): frp's `run_id`, which a
/// reconnecting frpc sends again so that frps replaces its old session; a restarted
/// process has a new one.
pub const RUN_ID_HEADER: &str = "x-orrery-run-id";
/// Header carrying the platform's id of a forwarded request (dedup on the runtime side).
pub const REQUEST_ID_HEADER: &str = "x-orrery-request-id";
/// Header of a busy server's 503: when to retry, in milliseconds (finer than `Retry-After`).
pub const RETRY_AFTER_MS_HEADER: &str = "x-orrery-retry-after-ms";
/// Largest WebSocket message or frame sent, and accepted by default (`tunnel.message`); a
/// bigger one closes that connection.
pub const MAX_MESSAGE_BYTES: usize = crate::env::limits::TUNNEL_MESSAGE_MIN;

/// Why the tunnel server refused a registration; the reason is sent to the client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// No `Authorization: Bearer …` header.
    #[error("missing runtime token (Authorization: Bearer <token>)")]
    MissingToken,
    /// The token is not a registered runtime's.
    #[error("unknown runtime token")]
    UnknownToken,
    /// No or malformed runtime name header.
    #[error("missing or malformed {RUNTIME_HEADER} header (want <account>-<runtime>)")]
    BadName,
    /// The upgrade asked for another path than [`PATH`].
    #[error("the tunnel lives at {PATH}, not {0:?}")]
    WrongPath(String),
    /// The token belongs to another runtime.
    #[error("runtime {claimed:?} does not belong to this token (it registers {owner:?})")]
    ForeignName {
        /// The name the client claimed.
        claimed: String,
        /// The name the token was issued for.
        owner: String,
    },
    /// Faithful: another session of another process still holds this name (frps's
    /// "router config conflict" for a subdomain in use) until the server notices it is dead.
    #[error("router config conflict: {0:?} is held by another session")]
    NameInUse(String),
}

impl Rejection {
    /// HTTP status of the refused upgrade: 401 for credentials, 403 for a foreign name, 409
    /// for a name another session holds.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::ForeignName { .. } => 403,
            Rejection::NameInUse(_) => 409,
            Rejection::BadName | Rejection::WrongPath(_) => 400,
            _ => 401,
        }
    }
}

/// The WebSocket limits both sides use by default.
pub fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    ws_config_with(MAX_MESSAGE_BYTES)
}

/// WebSocket limits of `max` bytes per message and frame (`tunnel.message`, never below
/// what a runtime sends: [`MAX_MESSAGE_BYTES`]).
pub fn ws_config_with(max: usize) -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    let max = max.max(MAX_MESSAGE_BYTES);
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
}
