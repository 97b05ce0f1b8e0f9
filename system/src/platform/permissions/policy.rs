//! The permissions file `orrery serve control-plane --policy FILE` reads: accounts, their
//! users (token, role, teams) and their rules.
//!
//! ```yaml
//! accounts:
//!   - name: acme
//!     users:
//!       - {name: alice, token: alice-token, role: admin}
//!       - {name: bob, token: bob-token, teams: [dev]}
//!     rules:
//!       - teams: [dev]
//!         actions: [applications:read, applications:sync]
//!         runtimes: [prod]          # names within the account; * matches any run
//!         clusters: ["*"]           # an app's destination, or the runtime's cluster
//!         namespaces: [team-a-*]    # an app's destination namespace, a workflow's
//!         labels: {team: a}         # every one must be carried with this value
//! ```
//!
//! A mistake is refused with its line, column and field, never half applied.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{Attributes, Pattern, Permissions, Role, Rule, ACTIONS};

/// Why a permissions file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Not YAML of the expected shape.
    #[error("{path}:{line}:{column}: {field}{message}")]
    Syntax {
        /// The file.
        path: String,
        /// Line, from 1 (0: unknown).
        line: usize,
        /// Column, from 1.
        column: usize,
        /// The field (`accounts[0].users[1].role: `), or empty.
        field: String,
        /// The parser's message.
        message: String,
    },
    /// Well-formed, but wrong.
    #[error("{path}: {at}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Where (`accounts[0].rules[2].actions`).
        at: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    accounts: Vec<Account>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Account {
    name: String,
    #[serde(default)]
    users: Vec<UserEntry>,
    #[serde(default)]
    rules: Vec<RuleEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    token: String,
    #[serde(default)]
    role: RoleEntry,
    #[serde(default)]
    teams: Vec<String>,
    /// When the token stops working (RFC 3339); never when absent.
    #[serde(default)]
    expires: Option<String>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RoleEntry {
    Admin,
    #[default]
    Member,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    #[serde(default)]
    teams: Vec<String>,
    #[serde(default)]
    users: Vec<String>,
    actions: Vec<String>,
    #[serde(default)]
    runtimes: Vec<String>,
    #[serde(default)]
    clusters: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// A parsed and checked permissions file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// (token, account, user, role, teams).
    pub users: Vec<(String, String, String, Role, Vec<String>)>,
    /// (token, when it expires, Unix ms).
    pub expiries: Vec<(String, u64)>,
    /// (account, rule).
    pub rules: Vec<(String, Rule)>,
}

impl Policy {
    /// Parses `text` (from `path`, named in errors) and checks it: account and user names
    /// are `[A-Za-z0-9-]`, tokens are unique, every action is known, every rule names whom
    /// it applies to, and every team or user a rule names exists in its account.
    pub fn parse(path: &str, text: &str) -> Result<Policy, PolicyError> {
        let file: File = from_str_with_path(path, text)?;
        let invalid = |at: String, message: String| PolicyError::Invalid {
            path: path.to_string(),
            at,
            message,
        };
        let named =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        let mut policy = Policy::default();
        let mut tokens = BTreeSet::new();
        let mut accounts = BTreeSet::new();
        for (a, account) in file.accounts.iter().enumerate() {
            let at = format!("accounts[{a}]");
            if !named(&account.name) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("{:?} is not an account name ([A-Za-z0-9-])", account.name),
                ));
            }
            if !accounts.insert(account.name.clone()) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("account {} is listed twice", account.name),
                ));
            }
            let mut users = BTreeSet::new();
            let mut teams = BTreeSet::new();
            for (u, user) in account.users.iter().enumerate() {
                let at = format!("{at}.users[{u}]");
                if !named(&user.name) {
                    return Err(invalid(
                        format!("{at}.name"),
                        format!("{:?} is not a user name ([A-Za-z0-9-])", user.name),
                    ));
                }
                if user.token.is_empty() || user.token.chars().any(|c| !c.is_ascii_graphic()) {
                    return Err(invalid(
                        format!("{at}.token"),
                        "a token is visible ASCII, not empty".into(),
                    ));
                }
                if !tokens.insert(user.token.clone()) {
                    return Err(invalid(
                        format!("{at}.token"),
                        "this token is another user's too".into(),
                    ));
                }
                if !users.insert(user.name.clone()) {
                    return Err(invalid(
                        format!("{at}.name"),
                        format!(
                            "user {} is listed twice in account {}",
                            user.name, account.name
                        ),
                    ));
                }
                if let Some(expires) = &user.expires {
                    let at = expires
                        .parse::<jiff::Timestamp>()
                        .ok()
                        .and_then(|t| u64::try_from(t.as_millisecond()).ok())
                        .ok_or_else(|| {
                            invalid(
                                format!("{at}.expires"),
                                format!(
                                    "{expires:?} is not an RFC 3339 time (2026-12-01T00:00:00Z)"
                                ),
                            )
                        })?;
                    policy.expiries.push((user.token.clone(), at));
                }
                teams.extend(user.teams.iter().cloned());
                let role = match user.role {
                    RoleEntry::Admin => Role::Admin,
                    RoleEntry::Member => Role::Member,
                };
                policy.users.push((
                    user.token.clone(),
                    account.name.clone(),
                    user.name.clone(),
                    role,
                    user.teams.clone(),
                ));
            }
            for (r, rule) in account.rules.iter().enumerate() {
                let at = format!("{at}.rules[{r}]");
                if let Some(bad) = rule.actions.iter().find(|a| !ACTIONS.contains(&a.as_str())) {
                    return Err(invalid(
                        format!("{at}.actions"),
                        format!("unknown action {bad:?} (known: {})", ACTIONS.join(", ")),
                    ));
                }
                if rule.teams.is_empty() && rule.users.is_empty() {
                    return Err(invalid(
                        at,
                        "a rule names the teams or users it applies to".into(),
                    ));
                }
                if let Some(team) = rule.teams.iter().find(|t| !teams.contains(*t)) {
                    return Err(invalid(
                        format!("{at}.teams"),
                        format!("no user of account {} is in team {team}", account.name),
                    ));
                }
                if let Some(user) = rule.users.iter().find(|u| !users.contains(*u)) {
                    return Err(invalid(
                        format!("{at}.users"),
                        format!("account {} has no user {user}", account.name),
                    ));
                }
                let patterns =
                    |list: &[String]| list.iter().map(|p| Pattern(p.clone())).collect::<Vec<_>>();
                policy.rules.push((
                    account.name.clone(),
                    Rule {
                        teams: rule.teams.clone(),
                        users: rule.users.clone(),
                        actions: rule.actions.iter().cloned().collect(),
                        attributes: Attributes {
                            runtimes: patterns(&rule.runtimes),
                            clusters: patterns(&rule.clusters),
                            namespaces: patterns(&rule.namespaces),
                            labels: rule.labels.clone(),
                        },
                    },
                ));
            }
        }
        Ok(policy)
    }

    /// Adds every user and rule to `permissions`.
    pub fn apply(&self, permissions: &Permissions) {
        for (token, account, user, role, teams) in &self.users {
            let teams: Vec<&str> = teams.iter().map(String::as_str).collect();
            permissions.add_user(token, account, user, *role, &teams);
        }
        for (account, rule) in &self.rules {
            permissions.add_rule(account, rule.clone());
        }
        for (token, at) in &self.expiries {
            permissions.expire_at(token, *at);
        }
    }
}

/// Deserialises `text`; a failure names the field, its line and column.
fn from_str_with_path<T: serde::de::DeserializeOwned>(
    path: &str,
    text: &str,
) -> Result<T, PolicyError> {
    crate::core::yaml::from_str(text).map_err(|e| PolicyError::Syntax {
        path: path.to_string(),
        line: e.line,
        column: e.column,
        field: e.field,
        message: e.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
accounts:
  - name: acme
    users:
      - {name: alice, token: alice-token, role: admin}
      - {name: bob, token: bob-token, teams: [dev]}
    rules:
      - teams: [dev]
        actions: [applications:read, applications:sync]
        runtimes: [prod]
        namespaces: [team-a-*]
        labels: {team: a}
  - name: globex
    users:
      - {name: mallory, token: mallory-token}
";

    #[test]
    fn a_token_may_expire_and_a_bad_expiry_is_refused_with_where_it_is() {
        let text = GOOD.replace(
            "{name: bob, token: bob-token, teams: [dev]}",
            "{name: bob, token: bob-token, teams: [dev], expires: 2026-12-01T00:00:00Z}",
        );
        let permissions = Permissions::default();
        Policy::parse("policy.yaml", &text)
            .unwrap()
            .apply(&permissions);
        let december = 1_796_083_200_000; // 2026-12-01T00:00:00Z
        assert!(permissions
            .user_at("bob-token", december - 1)
            .unwrap()
            .is_some());
        assert_eq!(
            permissions
                .user_at("bob-token", december)
                .map(|u| u.is_some()),
            Err(december)
        );
        assert!(permissions
            .user_at("alice-token", u64::MAX)
            .unwrap()
            .is_some());
        let bad = GOOD.replace(
            "{name: bob, token: bob-token, teams: [dev]}",
            "{name: bob, token: bob-token, expires: next week}",
        );
        let error = Policy::parse("policy.yaml", &bad).unwrap_err().to_string();
        assert_eq!(
            error,
            "policy.yaml: accounts[0].users[1].expires: \"next week\" is not an RFC 3339 time (2026-12-01T00:00:00Z)"
        );
    }

    #[test]
    fn a_permissions_file_becomes_users_and_rules() {
        let policy = Policy::parse("policy.yaml", GOOD).unwrap();
        let permissions = Permissions::default();
        policy.apply(&permissions);
        let alice = permissions.user("alice-token").unwrap();
        assert_eq!(
            (alice.role, alice.account.as_deref()),
            (Role::Admin, Some("acme"))
        );
        let bob = permissions.user("bob-token").unwrap();
        assert!(bob.teams.contains("dev"));
        let labels = [("team".to_string(), "a".to_string())].into();
        let target = super::super::Target {
            account: "acme",
            runtime: "prod",
            cluster: "in-cluster",
            namespace: Some("team-a-web"),
            labels: Some(&labels),
        };
        assert!(permissions
            .decide(&bob, "applications:sync", &target)
            .allowed());
        assert!(!permissions
            .decide(&bob, "workflows:terminate", &target)
            .allowed());
        let mallory = permissions.user("mallory-token").unwrap();
        assert!(!permissions
            .decide(&mallory, "applications:read", &target)
            .allowed());
    }

    #[test]
    fn mistakes_are_refused_with_where_they_are() {
        for (text, want) in [
            (GOOD.replace("role: admin", "role: owner"), "policy.yaml:4:"),
            (GOOD.replace("labels:", "lables:"), "lables"),
            (
                GOOD.replace("applications:sync]", "applications:delete]"),
                "accounts[0].rules[0].actions: unknown action \"applications:delete\"",
            ),
            (
                GOOD.replace(
                    "teams: [dev]\n        actions",
                    "teams: [ops]\n        actions",
                ),
                "accounts[0].rules[0].teams: no user of account acme is in team ops",
            ),
            (
                GOOD.replace("mallory-token", "bob-token"),
                "accounts[1].users[0].token: this token is another user's too",
            ),
            (
                GOOD.replace("name: globex", "name: acme"),
                "accounts[1].name: account acme is listed twice",
            ),
            (
                GOOD.replace("      - teams: [dev]\n", "      - users: []\n"),
                "accounts[0].rules[0]: a rule names the teams or users it applies to",
            ),
            (GOOD.replace("name: bob", "name: b/ob"), "not a user name"),
            ("accounts: 5".to_string(), "policy.yaml:1:"),
        ] {
            let error = Policy::parse("policy.yaml", &text).unwrap_err().to_string();
            assert!(error.contains(want), "{want:?} not in {error:?}");
        }
    }
}
