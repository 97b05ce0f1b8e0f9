//! The Redis subset the runtime uses, served over RESP2: what Argo CD's Redis is to the
//! reporter (research §1.4: "all state lives in Argo CD's Redis, shared by all shards").
//! Keys live in memory only, like Argo CD's Redis (no persistence): a crash loses them, and
//! so does a flush. Replies and error texts are the real server's (redis-server 7.0, checked
//! command by command by the conformance suite).
//!
//! Served: `PING`, `ECHO`, `GET`, `SET` (`NX`, `XX`, `GET`, `EX`, `PX`, `KEEPTTL`), `DEL`,
//! `EXISTS`, `EXPIRE`/`PEXPIRE` (`NX`, `XX`, `GT`, `LT`), `TTL`, `PTTL`, `DBSIZE`, `SELECT`
//! (16 databases), `FLUSHDB`, `FLUSHALL`, `AUTH` (no password configured), `CLIENT` (no
//! subcommand, as 7.0 answers `CLIENT SETINFO`), `QUIT`. Anything else is answered as an
//! unknown command, which a real server would not do for e.g. `INCR`; docs/fidelity-gaps.md lists this.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::resp::{self, Reply};
use crate::env::{BoxStream, Point, SharedEnv};

/// Databases per server (the real default, `databases 16`).
pub const DATABASES: usize = 16;

/// One key's value and when it expires (environment time).
#[derive(Debug, Clone)]
struct Entry {
    value: Bytes,
    expires: Option<Duration>,
}

/// The server's memory: every database's keys. Cloning shares it, so a world can flush the
/// cache its host is serving (the `flush` fault); a crashed host boots with a new one.
#[derive(Debug, Clone)]
pub struct Store(Arc<Mutex<Vec<BTreeMap<Bytes, Entry>>>>);

impl Default for Store {
    fn default() -> Self {
        Store(Arc::new(Mutex::new(vec![BTreeMap::new(); DATABASES])))
    }
}

impl Store {
    /// Drops every key of every database (`FLUSHALL`).
    pub fn flush(&self) {
        for db in self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter_mut()
        {
            db.clear();
        }
    }

    /// Live keys across all databases (for tests and reports).
    pub fn len(&self, now: Duration) -> usize {
        let dbs = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        dbs.iter()
            .flat_map(|db| db.values())
            .filter(|e| live(e, now))
            .count()
    }

    /// Whether no key is live.
    pub fn is_empty(&self, now: Duration) -> bool {
        self.len(now) == 0
    }
}

fn live(entry: &Entry, now: Duration) -> bool {
    entry.expires.is_none_or(|at| at > now)
}

/// A connection's state: the database `SELECT` chose.
#[derive(Debug, Default)]
pub struct Session {
    db: usize,
    /// Set by `QUIT`: answer, then close.
    pub closing: bool,
}

/// Serves the cache on `addr` with fresh, empty memory until the listener fails.
pub async fn run(env: SharedEnv, addr: &str) -> std::io::Result<()> {
    run_with(env, addr, Store::default()).await
}

/// Serves `store` on `addr` until the listener fails.
pub async fn run_with(env: SharedEnv, addr: &str, store: Store) -> std::io::Result<()> {
    let mut listener = env.listen(addr).await?;
    loop {
        let (stream, _peer) = listener.accept().await?;
        tokio::spawn(connection(env.clone(), store.clone(), stream));
    }
}

/// One client connection: requests in, replies out, in order, until the client leaves,
/// sends `QUIT` or breaks the protocol.
async fn connection(env: SharedEnv, store: Store, mut stream: BoxStream) {
    let mut input = BytesMut::with_capacity(4096);
    let mut session = Session::default();
    let mut parser = resp::Parser::new(env.limits());
    loop {
        match stream.read_buf(&mut input).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut output = BytesMut::new();
        let mut close = false;
        loop {
            match parser.parse(&input) {
                Ok(Some((request, used))) => {
                    let _ = input.split_to(used);
                    if request.is_empty() {
                        continue;
                    }
                    execute(&env, &store, &mut session, &request).encode(&mut output);
                    if session.closing {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    Reply::err(format!("Protocol error: {error}")).encode(&mut output);
                    close = true;
                    break;
                }
            }
        }
        if stream.write_all(&output).await.is_err() || close {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// The arity rule of a command as the real command table has it: `n` exactly, `-n` at least.
fn arity(name: &str) -> Option<i32> {
    Some(match name {
        "get" | "ttl" | "pttl" | "select" | "echo" => 2,
        "set" | "expire" | "pexpire" => -3,
        "del" | "exists" | "auth" | "client" => -2,
        "ping" | "flushall" | "flushdb" | "quit" => -1,
        "dbsize" => 1,
        _ => return None,
    })
}

fn wrong_arity(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

fn not_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

fn syntax() -> Reply {
    Reply::err("syntax error")
}

fn integer(arg: &[u8]) -> Option<i64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

/// Now in Unix milliseconds: the base the real server checks an expiry's range against.
fn unix_now(env: &SharedEnv) -> i64 {
    i64::try_from(env.unix_millis()).unwrap_or(i64::MAX)
}

fn invalid_expire_time(command: &str) -> Reply {
    Reply::err(format!("invalid expire time in '{command}' command"))
}

fn upper(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_uppercase()
}

/// Answers one request. `request` is not empty.
pub fn execute(env: &SharedEnv, store: &Store, session: &mut Session, request: &[Bytes]) -> Reply {
    let typed = String::from_utf8_lossy(&request[0]).into_owned();
    let name = typed.to_ascii_lowercase();
    let Some(rule) = arity(&name) else {
        // "unknown command 'X', with args beginning with: 'a' 'b' " (up to 128 characters).
        let mut args = String::new();
        for arg in &request[1..] {
            if args.len() >= 128 {
                break;
            }
            let room = 128 - args.len();
            let text = String::from_utf8_lossy(arg);
            let text: String = text.chars().take(room).collect();
            args.push_str(&format!("'{text}' "));
        }
        return Reply::err(format!(
            "unknown command '{typed}', with args beginning with: {args}"
        ));
    };
    let argc = request.len() as i32;
    if (rule > 0 && argc != rule) || (rule < 0 && argc < -rule) {
        return wrong_arity(&name);
    }
    let now = env.elapsed();
    let args = &request[1..];
    let mut dbs = store
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let db = &mut dbs[session.db];
    // Lazy expiry, as the real server does on access.
    let mut get = |db: &mut BTreeMap<Bytes, Entry>, key: &Bytes| -> Option<Entry> {
        match db.get(key) {
            Some(entry) if live(entry, now) => Some(entry.clone()),
            Some(_) => {
                db.remove(key);
                None
            }
            None => None,
        }
    };
    match name.as_str() {
        "ping" => match args {
            [] => Reply::Simple("PONG"),
            [message] => Reply::Bulk(Some(message.clone())),
            _ => wrong_arity("ping"),
        },
        "echo" => Reply::Bulk(Some(args[0].clone())),
        "quit" => {
            session.closing = true;
            Reply::OK
        }
        "auth" => Reply::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ),
        "client" => Reply::err(format!(
            "unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&args[0])
        )),
        "select" => match integer(&args[0]) {
            None => not_integer(),
            Some(n) if !(0..DATABASES as i64).contains(&n) => {
                Reply::err("DB index is out of range")
            }
            Some(n) => {
                session.db = n as usize;
                Reply::OK
            }
        },
        "get" => Reply::Bulk(get(db, &args[0]).map(|e| e.value)),
        "set" => set(env, db, &mut get, args, now),
        "del" | "exists" => {
            let mut count = 0;
            for key in args {
                if get(db, key).is_some() {
                    count += 1;
                    if name == "del" {
                        db.remove(key);
                    }
                }
            }
            Reply::Integer(count)
        }
        "expire" | "pexpire" => {
            let Some(amount) = integer(&args[1]) else {
                return not_integer();
            };
            let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
            for option in &args[2..] {
                match upper(option).as_str() {
                    "NX" => nx = true,
                    "XX" => xx = true,
                    "GT" => gt = true,
                    "LT" => lt = true,
                    other => return Reply::err(format!("Unsupported option {other}")),
                }
            }
            if nx && (xx || gt || lt) {
                return Reply::err(
                    "NX and XX, GT or LT options at the same time are not compatible",
                );
            }
            if gt && lt {
                return Reply::err("GT and LT options at the same time are not compatible");
            }
            let Some(entry) = get(db, &args[0]) else {
                return Reply::Integer(0);
            };
            // Real Redis refuses an expiry past `i64::MAX` ms of Unix time (seconds that
            // overflow as milliseconds, or milliseconds past the end of time from now).
            let millis = if name == "expire" {
                amount.checked_mul(1000)
            } else {
                Some(amount)
            };
            let Some(millis) = millis.filter(|m| *m <= i64::MAX - unix_now(env)) else {
                return invalid_expire_time(&name);
            };
            let at = now.as_millis() as i64 + millis;
            let current = entry.expires.map(|d| d.as_millis() as i64);
            // A key without a TTL counts as an infinite one for GT and LT.
            let refused = (nx && current.is_some())
                || (xx && current.is_none())
                || (gt && current.is_none_or(|c| at <= c))
                || (lt && current.is_some_and(|c| at >= c));
            if refused {
                return Reply::Integer(0);
            }
            if millis <= 0 {
                db.remove(&args[0]);
            } else {
                db.insert(
                    args[0].clone(),
                    Entry {
                        expires: Some(Duration::from_millis(at as u64)),
                        ..entry
                    },
                );
            }
            Reply::Integer(1)
        }
        "ttl" | "pttl" => match get(db, &args[0]) {
            None => Reply::Integer(-2),
            Some(Entry { expires: None, .. }) => Reply::Integer(-1),
            Some(Entry {
                expires: Some(at), ..
            }) => {
                let left = (at - now).as_millis() as i64;
                Reply::Integer(if name == "ttl" {
                    left.saturating_add(500) / 1000
                } else {
                    left
                })
            }
        },
        "dbsize" => Reply::Integer(db.values().filter(|e| live(e, now)).count() as i64),
        "flushdb" | "flushall" => {
            match args {
                [] => {}
                [mode] if matches!(upper(mode).as_str(), "SYNC" | "ASYNC") => {}
                _ => return syntax(),
            }
            if name == "flushdb" {
                db.clear();
            } else {
                dbs.iter_mut().for_each(BTreeMap::clear);
            }
            Reply::OK
        }
        _ => unreachable!("every command with an arity rule is handled"),
    }
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|KEEPTTL]`: options are checked for syntax first,
/// then the expiry's value, in the real server's order.
fn set(
    env: &SharedEnv,
    db: &mut BTreeMap<Bytes, Entry>,
    get: &mut impl FnMut(&mut BTreeMap<Bytes, Entry>, &Bytes) -> Option<Entry>,
    args: &[Bytes],
    now: Duration,
) -> Reply {
    let (key, value) = (&args[0], &args[1]);
    let (mut nx, mut xx, mut give, mut keep) = (false, false, false, false);
    let mut expiry: Option<(bool, &Bytes)> = None; // (in seconds, amount)
    let mut i = 2;
    while i < args.len() {
        let option = upper(&args[i]);
        let next = args.get(i + 1);
        match option.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => give = true,
            "KEEPTTL" if expiry.is_none() => keep = true,
            "EX" | "PX" if !keep && expiry.is_none() && next.is_some() => {
                expiry = next.map(|n| (option == "EX", n));
                i += 1;
            }
            _ => return syntax(),
        }
        i += 1;
    }
    let expires = match expiry {
        None => None,
        Some((seconds, amount)) => match integer(amount) {
            None => return not_integer(),
            Some(n) => {
                // As the real server: not positive, seconds that overflow as milliseconds,
                // or an expiry past `i64::MAX` ms of Unix time.
                let millis = if seconds {
                    n.checked_mul(1000)
                } else {
                    Some(n)
                };
                match millis.filter(|m| *m > 0 && *m <= i64::MAX - unix_now(env)) {
                    Some(millis) => Some(now + Duration::from_millis(millis as u64)),
                    None => return invalid_expire_time("set"),
                }
            }
        },
    };
    let old = get(db, key);
    let answer = |written: bool| {
        if give {
            Reply::Bulk(old.as_ref().map(|e| e.value.clone()))
        } else if written {
            Reply::OK
        } else {
            Reply::Bulk(None)
        }
    };
    if (nx && old.is_some()) || (xx && old.is_none()) {
        return answer(false);
    }
    let expires = if keep {
        old.as_ref().and_then(|e| e.expires)
    } else {
        expires
    };
    // Fault point: acknowledged, then lost (as an eviction under memory pressure).
    if !env.buggify(Point::CacheWriteDropped) {
        db.insert(
            key.clone(),
            Entry {
                value: value.clone(),
                expires,
            },
        );
    }
    answer(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(store: &Store, session: &mut Session, args: &[&str]) -> Reply {
        let env: SharedEnv = std::sync::Arc::new(crate::env::RealEnv::new("cache"));
        let request: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
        execute(&env, store, session, &request)
    }

    fn encoded(reply: &Reply) -> String {
        let mut out = bytes::BytesMut::new();
        reply.encode(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn an_expiry_past_the_end_of_time_is_refused_as_the_real_server_does() {
        // Found by fuzzing (fuzz/regressions/resp/): these overflowed, and the panic
        // poisoned the store for every other connection.
        let (store, mut session) = (Store::default(), Session::default());
        assert_eq!(
            encoded(&run(&store, &mut session, &["SET", "k", "v"])),
            "+OK\r\n"
        );
        for (args, command) in [
            (&["EXPIRE", "k", "9223372036854775807"][..], "expire"),
            (&["PEXPIRE", "k", "9223372036854775807"], "pexpire"),
            (&["EXPIRE", "k", "9223372036854775"], "expire"),
            (&["SET", "k", "v", "EX", "9223372036854775807"], "set"),
            (&["SET", "k", "v", "PX", "9223372036854775807"], "set"),
        ] {
            assert_eq!(
                encoded(&run(&store, &mut session, args)),
                format!("-ERR invalid expire time in '{command}' command\r\n"),
                "{args:?}"
            );
        }
        assert_eq!(
            encoded(&run(&store, &mut session, &["TTL", "k"])),
            ":-1\r\n"
        );
        let far = (i64::MAX - 4_000_000_000_000).to_string();
        assert_eq!(
            encoded(&run(&store, &mut session, &["PEXPIRE", "k", &far])),
            ":1\r\n"
        );
        assert!(encoded(&run(&store, &mut session, &["TTL", "k"])).starts_with(":9"));
    }
}
