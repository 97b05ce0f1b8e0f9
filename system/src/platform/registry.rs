//! Runtime registration: issues each runtime its token and answers who a token belongs to,
//! and holds what the platform knows of each runtime (hybrid or hosted, tunnel or ingress
//! access, version, cluster). The tunnel server, the events API and the gateway all check
//! tokens against it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use super::store::records::{AccessMode, Info, Kind};
use super::store::{token_digest, Change, Journal};
use crate::env::SharedEnv;

/// A registered runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    /// Owning account.
    pub account: String,
    /// Runtime name within the account.
    pub runtime: String,
}

impl Runtime {
    /// The tunnel name, `<account>-<runtime>`.
    pub fn tunnel_name(&self) -> String {
        format!("{}-{}", self.account, self.runtime)
    }
}

/// Whether `text` is an ingress host the gateway may send to: `host:port`, the host made of
/// letters, digits, `.` and `-`, the port 1–65535 (nothing that could turn the URL built from
/// it into another one: no `/`, `@`, `?`).
pub fn valid_ingress_host(text: &str) -> bool {
    let Some((host, port)) = text.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// The cluster a runtime is in when its registration names none.
pub const DEFAULT_CLUSTER: &str = "in-cluster";

/// A registration's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The runtime's new token.
    pub token: String,
    /// Whether it replaced a token (which no longer works).
    pub rotated: bool,
}

/// A registration refused: its tunnel name is another runtime's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the runtime name {name} is taken by runtime {} of account {}", holder.runtime, holder.account)]
pub struct NameTaken {
    /// The tunnel name both would have.
    pub name: String,
    /// The runtime that has it.
    pub holder: Runtime,
}

/// Token → runtime. Tokens are held as their SHA-256 ([`token_digest`]), as the store keeps
/// them: a token is shown once, in its registration's answer.
#[derive(Default)]
pub struct Registry {
    /// Token digest → runtime.
    by_token: Mutex<BTreeMap<String, Runtime>>,
    /// By tunnel name.
    info: Mutex<BTreeMap<String, Info>>,
    /// Digests of tokens a registration replaced: refused everywhere, preregistered ones
    /// included.
    revoked: Mutex<std::collections::BTreeSet<String>>,
    /// Where registrations are kept for good (real mode with a database).
    journal: OnceLock<Arc<Journal>>,
}

impl Registry {
    /// Registers `account/runtime` and returns its new token (random, from `env`) and
    /// whether it replaced one: registering again issues a new token and revokes the old
    /// one. Refused when another account's runtime already has the same tunnel name
    /// (`acme` + `a-prod` and `acme-a` + `prod` would both be `acme-a-prod`).
    pub fn register(
        &self,
        env: &SharedEnv,
        account: &str,
        runtime: &str,
    ) -> Result<Registration, NameTaken> {
        self.register_inner(env, account, runtime, None)
    }

    /// As [`Registry::register`], recording `info` for the runtime (a registration again
    /// replaces it).
    pub fn register_with(
        &self,
        env: &SharedEnv,
        account: &str,
        runtime: &str,
        info: Info,
    ) -> Result<Registration, NameTaken> {
        self.register_inner(env, account, runtime, Some(info))
    }

    fn register_inner(
        &self,
        env: &SharedEnv,
        account: &str,
        runtime: &str,
        info: Option<Info>,
    ) -> Result<Registration, NameTaken> {
        let entry = Runtime {
            account: account.into(),
            runtime: runtime.into(),
        };
        let mut tokens = self.by_token.lock().expect("registry lock");
        let name = entry.tunnel_name();
        if let Some(holder) = tokens
            .values()
            .find(|r| **r != entry && r.tunnel_name() == name)
        {
            return Err(NameTaken {
                name,
                holder: holder.clone(),
            });
        }
        let token = format!("rt-{:016x}{:016x}", env.random_u64(), env.random_u64());
        let digest = token_digest(&token);
        let replaced: Vec<String> = tokens
            .iter()
            .filter(|(_, r)| **r == entry)
            .map(|(t, _)| t.clone())
            .collect();
        tokens.retain(|_, r| *r != entry);
        tokens.insert(digest.clone(), entry);
        drop(tokens);
        let rotated = !replaced.is_empty();
        let mut infos = self.info.lock().expect("registry lock");
        let info = match info {
            Some(info) => {
                infos.insert(name.clone(), info.clone());
                info
            }
            None => infos
                .entry(name.clone())
                .or_insert_with(|| Info {
                    cluster: DEFAULT_CLUSTER.into(),
                    ..Info::default()
                })
                .clone(),
        };
        drop(infos);
        if let Some(journal) = self.journal.get() {
            journal.append(Change::Runtime {
                name,
                account: account.into(),
                runtime: runtime.into(),
                token_sha256: digest,
                info,
            });
            for token_sha256 in &replaced {
                journal.append(Change::Revoked {
                    token_sha256: token_sha256.clone(),
                });
            }
        }
        self.revoked.lock().expect("registry lock").extend(replaced);
        Ok(Registration { token, rotated })
    }

    /// Keeps every registration from now on in `journal` (once; a second call is ignored).
    pub fn keep_in(&self, journal: Arc<Journal>) {
        let _ = self.journal.set(journal);
    }

    /// Every runtime with its current token's digest, as the store keeps them (by tunnel
    /// name): what a database would hold of registrations made before it was used.
    pub fn stored(&self) -> Vec<super::store::StoredRuntime> {
        let tokens = self.by_token.lock().expect("registry lock").clone();
        let mut stored: Vec<_> = tokens
            .into_iter()
            .map(|(token_sha256, r)| {
                let name = r.tunnel_name();
                super::store::StoredRuntime {
                    info: self.info(&name),
                    name,
                    account: r.account,
                    runtime: r.runtime,
                    token_sha256,
                }
            })
            .collect();
        stored.sort_by(|a, b| a.name.cmp(&b.name));
        stored
    }

    /// Takes back what the store held: runtimes with their token digests, and the revoked
    /// digests.
    pub fn restore(&self, runtimes: &[super::store::StoredRuntime], revoked: &[String]) {
        let mut tokens = self.by_token.lock().expect("registry lock");
        let mut infos = self.info.lock().expect("registry lock");
        for stored in runtimes {
            let entry = Runtime {
                account: stored.account.clone(),
                runtime: stored.runtime.clone(),
            };
            tokens.retain(|_, r| *r != entry);
            tokens.insert(stored.token_sha256.clone(), entry);
            infos.insert(stored.name.clone(), stored.info.clone());
        }
        self.revoked
            .lock()
            .expect("registry lock")
            .extend(revoked.iter().cloned());
    }

    /// What the platform knows of the runtime whose tunnel name is `name` (the defaults for
    /// a runtime registered without any: hybrid, tunnel, [`DEFAULT_CLUSTER`]).
    pub fn info(&self, name: &str) -> Info {
        self.info
            .lock()
            .expect("registry lock")
            .get(name)
            .cloned()
            .unwrap_or_else(|| Info {
                cluster: DEFAULT_CLUSTER.into(),
                ..Info::default()
            })
    }

    /// `account`'s runtimes, sorted by name.
    pub fn runtimes_of(&self, account: &str) -> Vec<Runtime> {
        let runtimes: std::collections::BTreeSet<(String, String)> = self
            .by_token
            .lock()
            .expect("registry lock")
            .values()
            .filter(|r| r.account == account)
            .map(|r| (r.runtime.clone(), r.account.clone()))
            .collect();
        runtimes
            .into_iter()
            .map(|(runtime, account)| Runtime { account, runtime })
            .collect()
    }

    /// Every registered runtime's tunnel name, sorted.
    pub fn names(&self) -> Vec<String> {
        let names: std::collections::BTreeSet<String> = self
            .by_token
            .lock()
            .expect("registry lock")
            .values()
            .map(Runtime::tunnel_name)
            .collect();
        names.into_iter().collect()
    }

    /// The runtime whose tunnel name is `name`.
    pub fn find(&self, name: &str) -> Option<Runtime> {
        self.by_token
            .lock()
            .expect("registry lock")
            .values()
            .find(|r| r.tunnel_name() == name)
            .cloned()
    }

    /// As [`Registry::insert`], with what is known of the runtime (an ingress-mode runtime
    /// registered before the process started).
    pub fn insert_with(&self, token: &str, account: &str, runtime: &str, info: Info) {
        self.insert(token, account, runtime);
        self.info
            .lock()
            .expect("registry lock")
            .insert(format!("{account}-{runtime}"), info);
    }

    /// Registers with a token chosen by the caller (fixtures and tests).
    pub fn insert(&self, token: &str, account: &str, runtime: &str) {
        self.by_token.lock().expect("registry lock").insert(
            token_digest(token),
            Runtime {
                account: account.into(),
                runtime: runtime.into(),
            },
        );
    }

    /// Whether a registration replaced `token`.
    pub fn is_revoked(&self, token: &str) -> bool {
        self.revoked
            .lock()
            .expect("registry lock")
            .contains(&token_digest(token))
    }

    /// The runtime a token was issued to.
    pub fn lookup(&self, token: &str) -> Option<Runtime> {
        self.by_token
            .lock()
            .expect("registry lock")
            .get(&token_digest(token))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::valid_ingress_host;

    #[test]
    fn an_ingress_host_is_host_and_port_and_nothing_else() {
        for good in ["127.0.0.1:8080", "edge.acme.example:443", "router:80"] {
            assert!(valid_ingress_host(good), "{good}");
        }
        for bad in [
            "",
            "router",
            ":80",
            "router:0",
            "router:99999",
            "evil/?:80",
            "u@h:80",
            "h:80/x",
            "a b:80",
            "[::1]:80",
        ] {
            assert!(!valid_ingress_host(bad), "{bad}");
        }
    }
}
