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

/// Token → runtime.
#[derive(Default)]
pub struct Registry {
    by_token: Mutex<BTreeMap<String, Runtime>>,
    /// Tokens a registration replaced: refused everywhere, preregistered ones included.
    revoked: Mutex<std::collections::BTreeSet<String>>,
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
        let replaced: Vec<String> = tokens
            .iter()
            .filter(|(_, r)| **r == entry)
            .map(|(t, _)| t.clone())
            .collect();
        tokens.retain(|_, r| *r != entry);
        tokens.insert(token.clone(), entry);
        let rotated = !replaced.is_empty();
        self.revoked.lock().expect("registry lock").extend(replaced);
        Ok(Registration { token, rotated })
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
