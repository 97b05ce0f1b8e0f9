//! Users and what they may do: the platform answers `GET /api/permissions` for the bearer
//! token of a user, and the app-proxy authorises each operation with that answer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::{json, Value};

/// Operations the app-proxy checks.
pub const OPERATIONS: [&str; 6] = [
    "repositories:list",
    "applications:commit",
    "applications:read",
    "workflows:terminate",
    "promotions:write",
    "promotions:read",
];

/// A user as the platform knows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user's name.
    pub name: String,
    /// The account the user belongs to: the gateway forwards their requests only into this
    /// account's runtimes. `None` (a user granted without one) reaches no runtime.
    pub account: Option<String>,
    /// Operations the app-proxy lets them do.
    pub allow: BTreeSet<String>,
}

/// User tokens → users.
#[derive(Default)]
pub struct Permissions {
    users: Mutex<BTreeMap<String, User>>,
}

impl Permissions {
    /// Grants `user` (authenticated by `token`) the listed operations, in no account: the
    /// user can be answered `GET /api/permissions` but reaches no runtime.
    pub fn grant(&self, token: &str, user: &str, operations: &[&str]) {
        self.insert(token, None, user, operations);
    }

    /// Grants `user` of `account` (authenticated by `token`) the listed operations.
    pub fn grant_in(&self, token: &str, account: &str, user: &str, operations: &[&str]) {
        self.insert(token, Some(account), user, operations);
    }

    fn insert(&self, token: &str, account: Option<&str>, user: &str, operations: &[&str]) {
        let user = User {
            name: user.into(),
            account: account.map(str::to_string),
            allow: operations.iter().map(|o| o.to_string()).collect(),
        };
        self.users
            .lock()
            .expect("permissions lock")
            .insert(token.into(), user);
    }

    /// The user `token` authenticates.
    pub fn user(&self, token: &str) -> Option<User> {
        self.users
            .lock()
            .expect("permissions lock")
            .get(token)
            .cloned()
    }

    /// The answer for a token: `{"user": …, "allow": [...]}` (with `"account"` for a user
    /// of one), or `None` for an unknown token.
    pub fn lookup(&self, token: &str) -> Option<Value> {
        let user = self.user(token)?;
        let mut answer = json!({"user": user.name, "allow": user.allow});
        if let Some(account) = user.account {
            answer["account"] = json!(account);
        }
        Some(answer)
    }
}
