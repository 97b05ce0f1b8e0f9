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

/// User tokens → (user, allowed operations).
#[derive(Default)]
pub struct Permissions {
    users: Mutex<BTreeMap<String, (String, BTreeSet<String>)>>,
}

impl Permissions {
    /// Grants `user` (authenticated by `token`) the listed operations.
    pub fn grant(&self, token: &str, user: &str, operations: &[&str]) {
        let allowed = operations.iter().map(|o| o.to_string()).collect();
        self.users
            .lock()
            .expect("permissions lock")
            .insert(token.into(), (user.into(), allowed));
    }

    /// The answer for a token: `{"user": …, "allow": [...]}`, or `None` for an unknown token.
    pub fn lookup(&self, token: &str) -> Option<Value> {
        let users = self.users.lock().expect("permissions lock");
        let (user, allowed) = users.get(token)?;
        Some(json!({"user": user, "allow": allowed}))
    }
}
