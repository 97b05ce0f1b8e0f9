//! Runtime registration: issues each runtime its token and answers who a token belongs to.
//! The tunnel server checks registrations against it.

use std::collections::BTreeMap;
use std::sync::Mutex;

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

/// Token → runtime.
#[derive(Default)]
pub struct Registry {
    by_token: Mutex<BTreeMap<String, Runtime>>,
    /// Tokens a registration replaced: refused everywhere, preregistered ones included.
    revoked: Mutex<std::collections::BTreeSet<String>>,
}

impl Registry {
    /// Registers `account/runtime` and returns its new token (random, from `env`).
    /// Registering again issues a new token and revokes the old one.
    pub fn register(&self, env: &SharedEnv, account: &str, runtime: &str) -> String {
        let token = format!("rt-{:016x}{:016x}", env.random_u64(), env.random_u64());
        let entry = Runtime {
            account: account.into(),
            runtime: runtime.into(),
        };
        let mut tokens = self.by_token.lock().expect("registry lock");
        let replaced: Vec<String> = tokens
            .iter()
            .filter(|(_, r)| **r == entry)
            .map(|(t, _)| t.clone())
            .collect();
        tokens.retain(|_, r| *r != entry);
        tokens.insert(token.clone(), entry);
        self.revoked.lock().expect("registry lock").extend(replaced);
        token
    }

    /// Registers with a token chosen by the caller (fixtures and tests).
    pub fn insert(&self, token: &str, account: &str, runtime: &str) {
        self.by_token.lock().expect("registry lock").insert(
            token.into(),
            Runtime {
                account: account.into(),
                runtime: runtime.into(),
            },
        );
    }

    /// Whether a registration replaced `token`.
    pub fn is_revoked(&self, token: &str) -> bool {
        self.revoked.lock().expect("registry lock").contains(token)
    }

    /// The runtime a token was issued to.
    pub fn lookup(&self, token: &str) -> Option<Runtime> {
        self.by_token
            .lock()
            .expect("registry lock")
            .get(token)
            .cloned()
    }
}
