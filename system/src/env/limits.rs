//! Bounds on what one client can make a server hold — bodies, connections, requests in
//! flight, time — named, defaulted and settable per process (`orrery serve … --limit
//! NAME=VALUE`; `orrery limits` lists them), so an operator can tighten or loosen one without a
//! rebuild. A component reads them from its environment ([`Env::limits`](super::Env::limits)):
//! the simulator and the tests keep the defaults.

use std::time::Duration;

/// Every limit's value. [`Limits::DEFAULT`] is what a server uses unless told otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Open connections from one peer address (IP) to one of orrery's HTTP servers.
    pub connections_per_peer: usize,
    /// Largest GraphQL request body.
    pub graphql_body: usize,
    /// Deepest GraphQL query.
    pub graphql_depth: usize,
    /// Most complex GraphQL query.
    pub graphql_complexity: usize,
    /// Largest runtime registration body.
    pub registration_body: usize,
    /// Gateway requests one bearer token may have in flight at once: a quarter of
    /// `tunnel_requests_per_runtime`, so one user cannot take a runtime's every slot; above
    /// what tunnel-drop's clients hold while a silent drop goes unnoticed (more than 64).
    pub requests_per_token: usize,
    /// Largest events API body, as sent.
    pub events_body: usize,
    /// Largest events API body after gzip.
    pub events_decompressed: u64,
    /// Most a gzip body may grow when inflated (decompressed / compressed), past 1 MiB.
    pub gzip_ratio: u64,
    /// Largest Runner API body.
    pub runner_body: usize,
    /// Largest log the platform keeps for one Runner build (the lines' bytes).
    pub runner_log_bytes: u64,
    /// Longest cronus lease.
    pub lease_max: Duration,
    /// Largest app-proxy body.
    pub app_proxy_body: usize,
    /// Longest a tunnel client may take over TLS and its upgrade request: one that connects
    /// and never finishes would otherwise hold one of the tunnel server's pending
    /// registrations for ever, and enough of them shut every runtime out.
    pub tunnel_handshake_timeout: Duration,
    /// Largest WebSocket message or frame on a tunnel.
    pub tunnel_message: usize,
    /// Open tunnel connections from one peer address (IP).
    pub tunnel_connections_per_peer: usize,
    /// Requests forwarded to one runtime at once (in flight or waiting for a stream).
    pub tunnel_requests_per_runtime: usize,
    /// Longest RESP line (an inline command, a count or length line).
    pub cache_line: usize,
    /// Most arguments in one RESP command.
    pub cache_args: usize,
    /// Largest RESP bulk string.
    pub cache_bulk: usize,
}

/// Below this size a gzip body is never refused for its ratio (small JSON compresses well).
pub const GZIP_RATIO_FLOOR: u64 = 1 << 20;

/// The smallest `tunnel.message`: runtimes send messages of up to 1 MiB.
pub const TUNNEL_MESSAGE_MIN: usize = 1 << 20;

impl Limits {
    /// The defaults (docs/real-mode.md, "Limits on hostile input").
    pub const DEFAULT: Limits = Limits {
        header_read_timeout: Duration::from_secs(30),
        connections_per_peer: 256,
        graphql_body: 64 * 1024,
        graphql_depth: 15,
        graphql_complexity: 5_000,
        registration_body: 16 * 1024,
        requests_per_token: 256,
        events_body: 5 * 1024 * 1024,
        events_decompressed: 50 * 1024 * 1024,
        gzip_ratio: 100,
        runner_body: 1 << 20,
        runner_log_bytes: 64 * 1024 * 1024,
        lease_max: Duration::from_secs(600),
        app_proxy_body: 1 << 20,
        tunnel_handshake_timeout: Duration::from_secs(10),
        tunnel_message: 1 << 20,
        tunnel_connections_per_peer: 256,
        tunnel_requests_per_runtime: 1024,
        cache_line: 64 * 1024,
        cache_args: 1024 * 1024,
        cache_bulk: 16 * 1024 * 1024,
    };

    /// Sets one limit from `NAME=VALUE` (`events.body=10MiB`, `http.header-read-timeout=5s`).
    pub fn set(&mut self, assignment: &str) -> Result<(), LimitError> {
        let (name, value) = assignment
            .split_once('=')
            .ok_or_else(|| LimitError::Syntax(assignment.to_string()))?;
        let spec = SPECS
            .iter()
            .find(|s| s.name == name.trim())
            .ok_or_else(|| LimitError::Unknown(name.trim().to_string()))?;
        let parsed = spec
            .unit
            .parse(value.trim())
            .map_err(|why| LimitError::Value {
                name: spec.name,
                value: value.trim().to_string(),
                why,
            })?;
        if parsed < spec.min {
            return Err(LimitError::Value {
                name: spec.name,
                value: value.trim().to_string(),
                why: format!("at least {} ({})", spec.unit.show(spec.min), spec.why_min),
            });
        }
        (spec.set)(self, parsed);
        Ok(())
    }

    /// The value of the limit called `name`, as `orrery limits` shows it.
    pub fn show(&self, name: &str) -> Option<String> {
        SPECS
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.unit.show((s.get)(self)))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// The defaults, for an environment that was given no limits.
pub static DEFAULT: Limits = Limits::DEFAULT;

/// `env` with `limits` instead of its own: how a test or an embedding sets limits on any
/// environment (the simulator's, an in-memory one) without that environment knowing them.
pub fn with_limits(env: super::SharedEnv, limits: Limits) -> super::SharedEnv {
    std::sync::Arc::new(Limited { env, limits })
}

/// An environment with other limits ([`with_limits`]); everything else is the inner one's.
struct Limited {
    env: super::SharedEnv,
    limits: Limits,
}

impl super::Env for Limited {
    fn identity(&self) -> &super::Identity {
        self.env.identity()
    }
    fn elapsed(&self) -> Duration {
        self.env.elapsed()
    }
    fn unix_millis(&self) -> u64 {
        self.env.unix_millis()
    }
    fn sleep(&self, duration: Duration) -> super::BoxFuture<'static, ()> {
        self.env.sleep(duration)
    }
    fn random_u64(&self) -> u64 {
        self.env.random_u64()
    }
    fn connect(&self, addr: &str) -> super::BoxFuture<'static, std::io::Result<super::BoxStream>> {
        self.env.connect(addr)
    }
    fn listen(
        &self,
        addr: &str,
    ) -> super::BoxFuture<'static, std::io::Result<Box<dyn super::Listener>>> {
        self.env.listen(addr)
    }
    fn observe(&self, observation: super::Observation) {
        self.env.observe(observation)
    }
    fn limits(&self) -> &Limits {
        &self.limits
    }
    fn buggify(&self, point: super::Point) -> bool {
        self.env.buggify(point)
    }
    fn random_between(&self, low: Duration, high: Duration) -> Duration {
        self.env.random_between(low, high)
    }
}

/// What a limit counts by key (connections by peer IP, requests by token or runtime): a
/// [`Slot`] per holder, given back when dropped.
#[derive(Clone)]
pub struct Slots {
    held: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>,
    /// The most one key may hold.
    pub max: usize,
}

impl Slots {
    /// Counts against `max` per key.
    pub fn new(max: usize) -> Self {
        Slots {
            held: std::sync::Arc::default(),
            max,
        }
    }

    /// A slot for `key`, held until it is dropped; `None` when `key` already holds `max`.
    pub fn take(&self, key: &str) -> Option<Slot> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.get(key).copied().unwrap_or(0);
        if n >= self.max {
            return None;
        }
        held.insert(key.to_string(), n + 1);
        Some(Slot {
            held: self.held.clone(),
            key: key.to_string(),
        })
    }

    /// How many slots `key` holds now.
    pub fn held(&self, key: &str) -> usize {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(key).copied().unwrap_or(0)
    }
}

/// One holder's place in its [`Slots`].
pub struct Slot {
    held: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// A `--limit` that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Not `NAME=VALUE`.
    #[error(
        "{0:?}: expected NAME=VALUE (e.g. events.body=10MiB; `orrery limits` lists the names)"
    )]
    Syntax(String),
    /// No limit has that name.
    #[error("no limit is called {0:?} (`orrery limits` lists them)")]
    Unknown(String),
    /// The value does not parse or is out of range.
    #[error("{name}={value:?}: {why}")]
    Value {
        /// The limit.
        name: &'static str,
        /// What was given.
        value: String,
        /// What is wrong with it.
        why: String,
    },
}

/// What a limit counts, which decides how its value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Bytes: `65536`, `64KiB`, `5MiB`, `1GiB`.
    Bytes,
    /// A plain number.
    Count,
    /// Time: `500ms`, `30s`, `10m`, `1h`.
    Duration,
}

impl Unit {
    fn parse(self, text: &str) -> Result<u64, String> {
        let number = |digits: &str| {
            digits
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{text:?} is not a {}", self.what()))
        };
        let scaled = |digits: &str, by: u64| {
            number(digits)?
                .checked_mul(by)
                .ok_or_else(|| format!("{text:?} is too large"))
        };
        match self {
            Unit::Count => number(text),
            Unit::Bytes => match text {
                t if t.ends_with("GiB") => scaled(&t[..t.len() - 3], 1 << 30),
                t if t.ends_with("MiB") => scaled(&t[..t.len() - 3], 1 << 20),
                t if t.ends_with("KiB") => scaled(&t[..t.len() - 3], 1 << 10),
                t => number(t),
            },
            Unit::Duration => match text {
                t if t.ends_with("ms") => number(&t[..t.len() - 2]),
                t if t.ends_with('s') => scaled(&t[..t.len() - 1], 1_000),
                t if t.ends_with('m') => scaled(&t[..t.len() - 1], 60_000),
                t if t.ends_with('h') => scaled(&t[..t.len() - 1], 3_600_000),
                _ => Err(format!("{text:?} has no unit (ms, s, m or h)")),
            },
        }
    }

    fn what(self) -> &'static str {
        match self {
            Unit::Bytes => "size in bytes (e.g. 65536, 64KiB, 5MiB)",
            Unit::Count => "whole number",
            Unit::Duration => "duration (e.g. 500ms, 30s, 10m)",
        }
    }

    /// `value` (bytes, a count or milliseconds) as it is written.
    fn show(self, value: u64) -> String {
        match self {
            Unit::Count => value.to_string(),
            Unit::Bytes => match value {
                v if v >= 1 << 30 && v % (1 << 30) == 0 => format!("{}GiB", v >> 30),
                v if v >= 1 << 20 && v % (1 << 20) == 0 => format!("{}MiB", v >> 20),
                v if v >= 1 << 10 && v % (1 << 10) == 0 => format!("{}KiB", v >> 10),
                v => v.to_string(),
            },
            Unit::Duration => match value {
                v if v >= 3_600_000 && v % 3_600_000 == 0 => format!("{}h", v / 3_600_000),
                v if v >= 60_000 && v % 60_000 == 0 => format!("{}m", v / 60_000),
                v if v >= 1_000 && v % 1_000 == 0 => format!("{}s", v / 1_000),
                v => format!("{v}ms"),
            },
        }
    }
}

/// One limit: its name, what it bounds, what a client past it gets.
pub struct Spec {
    /// `server.what`, as `--limit` takes it.
    pub name: &'static str,
    /// How its value is written.
    pub unit: Unit,
    /// What it bounds.
    pub about: &'static str,
    /// What a client past it gets.
    pub past: &'static str,
    min: u64,
    why_min: &'static str,
    get: fn(&Limits) -> u64,
    set: fn(&mut Limits, u64),
}

impl Spec {
    /// The default, as written.
    pub fn default_value(&self) -> String {
        self.unit.show((self.get)(&Limits::DEFAULT))
    }
}

/// A limit's field as the number its unit counts (bytes, a count, milliseconds).
trait Value: Sized {
    fn to_u64(&self) -> u64;
    fn from_u64(value: u64) -> Self;
}

impl Value for usize {
    fn to_u64(&self) -> u64 {
        *self as u64
    }
    fn from_u64(value: u64) -> Self {
        usize::try_from(value).unwrap_or(usize::MAX)
    }
}

impl Value for u64 {
    fn to_u64(&self) -> u64 {
        *self
    }
    fn from_u64(value: u64) -> Self {
        value
    }
}

impl Value for Duration {
    fn to_u64(&self) -> u64 {
        self.as_millis().min(u128::from(u64::MAX)) as u64
    }
    fn from_u64(value: u64) -> Self {
        Duration::from_millis(value)
    }
}

macro_rules! spec {
    ($name:literal, $unit:ident, $field:ident, $min:expr, $why_min:literal, $about:literal, $past:literal) => {
        Spec {
            name: $name,
            unit: Unit::$unit,
            about: $about,
            past: $past,
            min: $min,
            why_min: $why_min,
            get: |l| Value::to_u64(&l.$field),
            set: |l, v| l.$field = Value::from_u64(v),
        }
    };
}

/// Every limit, in the order `orrery limits` lists them.
pub static SPECS: &[Spec] = &[
    spec!("http.header-read-timeout", Duration, header_read_timeout, 1, "a zero timeout closes every connection",
        "time a client may take to send a request's headers (every HTTP server)", "connection closed"),
    spec!("http.connections-per-peer", Count, connections_per_peer, 1, "zero would refuse everyone",
        "open connections from one IP to the gateway, events API, Runner API, app-proxy or router (a build log's WebSocket follower holds its connection while it streams)", "429, connection closed"),
    spec!("gateway.graphql-body", Bytes, graphql_body, 1024, "the standard introspection query is ~2 KiB",
        "GraphQL request body", "413"),
    spec!("gateway.graphql-depth", Count, graphql_depth, 10, "the standard introspection query nests 10 deep",
        "GraphQL query depth", "400"),
    spec!("gateway.graphql-complexity", Count, graphql_complexity, 100, "the standard introspection query costs ~90",
        "GraphQL query complexity (a field 1, a page its selection times `first`)", "400"),
    spec!("gateway.registration-body", Bytes, registration_body, 256, "a registration is ~100 bytes",
        "runtime registration body (POST /api/runtimes)", "413"),
    spec!("gateway.requests-per-token", Count, requests_per_token, 1, "zero would refuse everyone",
        "gateway requests (GraphQL, REST, forwarded) one bearer token has in flight", "429"),
    spec!("events.body", Bytes, events_body, 1024, "an event is ~1 KiB",
        "events API body as sent", "413"),
    spec!("events.body-decompressed", Bytes, events_decompressed, 1024, "an event is ~1 KiB",
        "events API body after gzip", "413"),
    spec!("events.gzip-ratio", Count, gzip_ratio, 2, "every gzip body may at least double",
        "how many times its size a gzip body may inflate to, once past 1 MiB (decompression bombs)", "413"),
    spec!("runner.body", Bytes, runner_body, 1024, "a build report is ~1 KiB",
        "Runner API body", "413"),
    spec!("runner.log-bytes", Bytes, runner_log_bytes, 64 * 1024, "a step's longest line is 64 KiB",
        "log the platform keeps for one Runner build (its lines' bytes)", "413, the engine stops sending"),
    spec!("runner.lease-max", Duration, lease_max, 1_000, "a lease under 1 s is renewed faster than cronus ticks",
        "longest cronus lease (`ttlMs`)", "400"),
    spec!("app-proxy.body", Bytes, app_proxy_body, 1024, "a workflow action is ~1 KiB",
        "app-proxy request body", "413"),
    spec!("tunnel.handshake-timeout", Duration, tunnel_handshake_timeout, 1, "a zero timeout closes every tunnel",
        "time a tunnel client may take over TLS and its upgrade request (also --tunnel-handshake-timeout)", "connection closed"),
    spec!("tunnel.message", Bytes, tunnel_message, TUNNEL_MESSAGE_MIN as u64, "runtimes send messages of up to 1 MiB",
        "WebSocket message or frame on a tunnel", "tunnel closed"),
    spec!("tunnel.connections-per-peer", Count, tunnel_connections_per_peer, 1, "zero would refuse every runtime",
        "open tunnel connections from one IP", "429, connection closed"),
    spec!("tunnel.requests-per-runtime", Count, tunnel_requests_per_runtime, 1, "zero would refuse every request",
        "requests forwarded into one runtime's tunnel at once, in flight or waiting for a stream", "429"),
    spec!("cache.line", Bytes, cache_line, 1024, "a count or length line is a few bytes, an inline command more",
        "RESP inline command, count or length line", "-ERR Protocol error, connection closed"),
    spec!("cache.args", Count, cache_args, 16, "MSET of a few keys",
        "arguments in one RESP command", "-ERR Protocol error, connection closed"),
    spec!("cache.bulk", Bytes, cache_bulk, 1 << 20, "the reporters cache values of up to ~1 MiB",
        "RESP bulk string", "-ERR Protocol error, connection closed"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_is_set_by_name_and_shown_as_written() {
        let mut limits = Limits::DEFAULT;
        for (assignment, shown) in [
            ("events.body=10MiB", "10MiB"),
            ("http.header-read-timeout=5s", "5s"),
            ("runner.lease-max=90m", "90m"),
            ("gateway.requests-per-token=3", "3"),
            ("cache.line = 2048", "2KiB"),
            ("tunnel.handshake-timeout=1500ms", "1500ms"),
        ] {
            limits.set(assignment).unwrap();
            let name = assignment.split('=').next().unwrap().trim();
            assert_eq!(limits.show(name).unwrap(), shown, "{assignment}");
        }
        assert_eq!(limits.events_body, 10 << 20);
        assert_eq!(limits.header_read_timeout, Duration::from_secs(5));
        assert_eq!(limits.requests_per_token, 3);
        assert_eq!(limits.cache_line, 2048);
    }

    #[test]
    fn every_spec_reads_and_writes_its_own_field() {
        for spec in SPECS {
            let mut limits = Limits::DEFAULT;
            let value = spec.unit.show(spec.min.max(1) + 7_000);
            limits.set(&format!("{}={value}", spec.name)).unwrap();
            assert_eq!(limits.show(spec.name).unwrap(), value, "{}", spec.name);
            let changed = SPECS
                .iter()
                .filter(|s| (s.get)(&limits) != (s.get)(&Limits::DEFAULT))
                .map(|s| s.name)
                .collect::<Vec<_>>();
            assert_eq!(changed, [spec.name], "setting {} changed others", spec.name);
        }
    }

    #[test]
    fn a_bad_assignment_says_what_and_why() {
        let mut limits = Limits::DEFAULT;
        let error = |a: &str| Limits::DEFAULT.clone().set(a).unwrap_err().to_string();
        assert!(error("events.body").contains("expected NAME=VALUE"));
        assert!(error("events.bdy=1").contains("no limit is called \"events.bdy\""));
        assert!(error("events.body=lots").contains("not a size in bytes"));
        assert!(error("http.header-read-timeout=30").contains("no unit"));
        assert!(error("events.body=99999999999999999GiB").contains("too large"));
        assert!(error("tunnel.message=64KiB").contains("at least 1MiB"));
        assert!(error("gateway.graphql-depth=3").contains("introspection"));
        assert!(error("http.connections-per-peer=0").contains("at least 1"));
        limits.set("http.connections-per-peer=1").unwrap();
        assert_eq!(limits.connections_per_peer, 1);
    }

    #[test]
    fn slots_are_counted_per_key_and_given_back() {
        let slots = Slots::new(2);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        assert!(slots.take("a").is_none(), "a third slot for a");
        let _b = slots.take("b").expect("another key is counted apart");
        drop(a1);
        assert_eq!(slots.held("a"), 1);
        assert!(slots.take("a").is_some(), "a slot given back is free again");
    }
}
