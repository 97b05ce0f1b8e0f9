//! Who may do what: each account's users (account admins and members, grouped in teams) and
//! the account's rules. A rule grants its actions to teams or users on what its attributes
//! match (runtimes, clusters, namespaces, labels); nothing is allowed that no rule grants
//! (deny by default), and nothing ever crosses an account. An account admin may do every
//! action in their own account.
//!
//! One decision function, [`Permissions::decide`], serves every enforcement point: the
//! GraphQL API filters and refuses with it, the gateway lets a user into a runtime only when
//! some rule of theirs covers that runtime ([`Permissions::reaches`]), and the app-proxy
//! checks each operation against the answer to `GET /api/permissions` (the actions the
//! user's rules grant on that runtime, with their attribute limits).
//!
//! Codefresh's ABAC (research §6: an `abac` service exists; its rules are not public) is
//! modelled, not reproduced: the rule shape (teams × actions × attributes) follows the
//! product's documented permission rules and is **inferred**.

pub mod policy;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{json, Value};

use crate::core::secret::TokenDigest;

/// Operations the app-proxy checks.
pub const OPERATIONS: [&str; 8] = [
    "repositories:list",
    "applications:commit",
    "applications:read",
    "workflows:terminate",
    "promotions:write",
    "promotions:read",
    "applications:sync",
    "applications:refresh",
];

/// Every action a rule may grant: the app-proxy's operations, and what only the platform
/// checks (the audit log).
pub const ACTIONS: [&str; 9] = [
    "repositories:list",
    "applications:commit",
    "applications:read",
    "workflows:terminate",
    "promotions:write",
    "promotions:read",
    "applications:sync",
    "applications:refresh",
    "audit:read",
];

/// A user's role in their account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May do every action in the account, create runtimes and read its whole audit log.
    Admin,
    /// May do what the account's rules grant them.
    #[default]
    Member,
}

impl Role {
    /// `admin` or `member`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

/// A user as the platform knows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user's name.
    pub name: String,
    /// The account the user belongs to: the gateway forwards their requests only into this
    /// account's runtimes. `None` (a user granted without one) reaches no runtime.
    pub account: Option<String>,
    /// Admin or member of that account.
    pub role: Role,
    /// The account's teams the user is in.
    pub teams: BTreeSet<String>,
}

/// A name pattern: `*` matches any run of characters (`team-a-*`, `*`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Pattern(pub String);

impl Pattern {
    /// Whether `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        glob(self.0.as_bytes(), text.as_bytes())
    }
}

/// `*`-only globbing, iterative (no backtracking blow-up).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// What a rule's attributes restrict; an empty list (or map) restricts nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Attributes {
    /// Runtime names within the account.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<Pattern>,
    /// The cluster: an app's destination (server URL or cluster name), or a runtime's own
    /// cluster for what is not an app's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<Pattern>,
    /// The namespace: an app's destination namespace, a workflow's namespace.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<Pattern>,
    /// Labels the object must carry, each with this value.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// One grant: `actions` to `teams` and `users` on what `attributes` match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Teams it applies to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<String>,
    /// Users it applies to, by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// What it allows (see [`ACTIONS`]); a rule with none only lets its users see and reach
    /// the runtimes it covers.
    pub actions: BTreeSet<String>,
    /// Where.
    #[serde(flatten)]
    pub attributes: Attributes,
}

impl Rule {
    fn applies_to(&self, user: &User) -> bool {
        self.users.contains(&user.name) || self.teams.iter().any(|t| user.teams.contains(t))
    }

    /// Whether the rule covers runtime `runtime` on cluster `cluster` at all (its namespace
    /// and label limits aside).
    fn covers_runtime(&self, runtime: &str, cluster: &str) -> bool {
        let a = &self.attributes;
        (a.runtimes.is_empty() || a.runtimes.iter().any(|p| p.matches(runtime)))
            && (a.clusters.is_empty() || a.clusters.iter().any(|p| p.matches(cluster)))
    }

    /// Whether every attribute the rule restricts is present on `target` and matches.
    fn covers(&self, target: &Target) -> bool {
        let a = &self.attributes;
        let one_of = |patterns: &[Pattern], value: Option<&str>| {
            patterns.is_empty() || value.is_some_and(|v| patterns.iter().any(|p| p.matches(v)))
        };
        one_of(&a.runtimes, Some(target.runtime))
            && one_of(&a.clusters, Some(target.cluster))
            && one_of(&a.namespaces, target.namespace)
            && a.labels.iter().all(|(k, v)| {
                target
                    .labels
                    .is_some_and(|labels| labels.get(k).is_some_and(|have| have == v))
            })
    }
}

/// What an action is asked on.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The account that owns it.
    pub account: &'a str,
    /// The runtime (its name within the account).
    pub runtime: &'a str,
    /// Its cluster (see [`Attributes::clusters`]).
    pub cluster: &'a str,
    /// Its namespace, when it has one.
    pub namespace: Option<&'a str>,
    /// Its labels, when it has them.
    pub labels: Option<&'a BTreeMap<String, String>>,
}

/// A decision and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed: the user is the account's admin, or this rule (its index in the account's
    /// list) grants it.
    Allowed(Grant),
    /// Denied.
    Denied(Denial),
}

/// What allowed a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// The user is the account's admin.
    Admin,
    /// The account's rule at this index.
    Rule(usize),
}

/// Why a decision was a denial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// The target is another account's (answered as missing, never as forbidden).
    OtherAccount,
    /// The user belongs to no account.
    NoAccount,
    /// No rule grants it.
    NoRule,
}

impl Decision {
    /// Whether it was allowed.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allowed(_))
    }
}

/// Users by token, and each account's rules.
#[derive(Default)]
pub struct Permissions {
    directory: Mutex<Directory>,
}

/// Users by their token's digest (never the token: [`TokenDigest`]).
#[derive(Default)]
struct Directory {
    users: BTreeMap<TokenDigest, User>,
    rules: BTreeMap<String, Vec<Rule>>,
    /// Token's digest → when it expires (Unix ms); a token not here does not expire.
    expiries: BTreeMap<TokenDigest, u64>,
}

/// A user whose token expired, removed by the cron executor's cleanup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredUser {
    /// The user's name.
    pub name: String,
    /// Their account (empty when none).
    pub account: String,
    /// When their token expired (Unix ms).
    pub expired_ms: u64,
}

impl Permissions {
    /// Grants `user` (authenticated by `token`) the listed operations, in no account: the
    /// user can be answered `GET /api/permissions` but reaches no runtime.
    pub fn grant(&self, token: &str, user: &str, operations: &[&str]) {
        let mut directory = self.directory.lock().expect("permissions lock");
        directory.users.insert(
            TokenDigest::of(token),
            User {
                name: user.into(),
                account: None,
                role: Role::Member,
                teams: BTreeSet::new(),
            },
        );
        // Kept as a rule of no account: `lookup` still lists the operations.
        directory
            .rules
            .entry(String::new())
            .or_default()
            .push(Rule {
                users: vec![user.into()],
                actions: operations.iter().map(|o| o.to_string()).collect(),
                ..Rule::default()
            });
    }

    /// Makes `user` a member of `account` (authenticated by `token`) with one rule of their
    /// own: the listed operations on every runtime of the account (what `--users` grants).
    pub fn grant_in(&self, token: &str, account: &str, user: &str, operations: &[&str]) {
        self.add_user(token, account, user, Role::Member, &[]);
        self.add_rule(
            account,
            Rule {
                users: vec![user.into()],
                actions: operations.iter().map(|o| o.to_string()).collect(),
                ..Rule::default()
            },
        );
    }

    /// Adds (or replaces) the user `token` authenticates.
    pub fn add_user(&self, token: &str, account: &str, user: &str, role: Role, teams: &[&str]) {
        self.directory
            .lock()
            .expect("permissions lock")
            .users
            .insert(
                TokenDigest::of(token),
                User {
                    name: user.into(),
                    account: Some(account.into()),
                    role,
                    teams: teams.iter().map(|t| t.to_string()).collect(),
                },
            );
    }

    /// Appends a rule to `account`'s.
    pub fn add_rule(&self, account: &str, rule: Rule) {
        self.directory
            .lock()
            .expect("permissions lock")
            .rules
            .entry(account.into())
            .or_default()
            .push(rule);
    }

    /// Makes `token` expire at `unix_ms`: from then on [`Permissions::user_at`] refuses it.
    pub fn expire_at(&self, token: &str, unix_ms: u64) {
        self.directory
            .lock()
            .expect("permissions lock")
            .expiries
            .insert(TokenDigest::of(token), unix_ms);
    }

    /// The user `token` authenticates at `now_ms`: `Err` with when it expired (Unix ms) for
    /// an expired token, `Ok(None)` for a token nobody has.
    pub fn user_at(&self, token: &str, now_ms: u64) -> Result<Option<User>, u64> {
        let directory = self.directory.lock().expect("permissions lock");
        let token = TokenDigest::of(token);
        let Some(user) = directory.users.get(&token) else {
            return Ok(None);
        };
        match directory.expiries.get(&token) {
            Some(&expires) if expires <= now_ms => Err(expires),
            _ => Ok(Some(user.clone())),
        }
    }

    /// Removes every user whose token expired at or before `before_ms`: who they were.
    pub fn remove_expired(&self, before_ms: u64) -> Vec<ExpiredUser> {
        let mut directory = self.directory.lock().expect("permissions lock");
        let expired: Vec<(TokenDigest, u64)> = directory
            .expiries
            .iter()
            .filter(|(_, &at)| at <= before_ms)
            .map(|(token, &at)| (token.clone(), at))
            .collect();
        let mut removed = Vec::new();
        for (token, expired_ms) in expired {
            directory.expiries.remove(&token);
            if let Some(user) = directory.users.remove(&token) {
                // Rules naming the user no longer do (a later user of that name inherits
                // nothing); a rule left naming nobody goes.
                let account = user.account.clone().unwrap_or_default();
                if let Some(rules) = directory.rules.get_mut(&account) {
                    for rule in rules.iter_mut() {
                        rule.users.retain(|name| *name != user.name);
                    }
                    rules.retain(|rule| !rule.users.is_empty() || !rule.teams.is_empty());
                }
                removed.push(ExpiredUser {
                    name: user.name,
                    account: user.account.unwrap_or_default(),
                    expired_ms,
                });
            }
        }
        // In the order they expired (the map's is the digests', which means nothing).
        removed.sort_by(|a, b| {
            (a.expired_ms, &a.account, &a.name).cmp(&(b.expired_ms, &b.account, &b.name))
        });
        removed
    }

    /// The user `token` authenticates, whether or not the token expired (see
    /// [`Permissions::user_at`] for the check the gateway makes).
    pub fn user(&self, token: &str) -> Option<User> {
        self.directory
            .lock()
            .expect("permissions lock")
            .users
            .get(&TokenDigest::of(token))
            .cloned()
    }

    /// The rules of `user`'s account that apply to them.
    pub fn rules_of(&self, user: &User) -> Vec<Rule> {
        let directory = self.directory.lock().expect("permissions lock");
        directory
            .rules
            .get(user.account.as_deref().unwrap_or(""))
            .into_iter()
            .flatten()
            .filter(|r| r.applies_to(user))
            .cloned()
            .collect()
    }

    /// May `user` do `action` on `target`?
    pub fn decide(&self, user: &User, action: &str, target: &Target) -> Decision {
        let Some(account) = user.account.as_deref() else {
            return Decision::Denied(Denial::NoAccount);
        };
        if account != target.account {
            return Decision::Denied(Denial::OtherAccount);
        }
        if user.role == Role::Admin {
            return Decision::Allowed(Grant::Admin);
        }
        let directory = self.directory.lock().expect("permissions lock");
        directory
            .rules
            .get(account)
            .into_iter()
            .flatten()
            .position(|r| r.applies_to(user) && r.actions.contains(action) && r.covers(target))
            .map_or(Decision::Denied(Denial::NoRule), |i| {
                Decision::Allowed(Grant::Rule(i))
            })
    }

    /// May `user` see and reach runtime `runtime` (on `cluster`) of `account`: its admin, or
    /// a member with a rule that covers it (whatever its actions).
    pub fn reaches(&self, user: &User, account: &str, runtime: &str, cluster: &str) -> bool {
        if user.account.as_deref() != Some(account) {
            return false;
        }
        user.role == Role::Admin
            || self
                .rules_of(user)
                .iter()
                .any(|r| r.covers_runtime(runtime, cluster))
    }

    /// May `user` read their account's audit log: its admin, or a member with an
    /// `audit:read` rule that limits nothing (the log is the whole account's).
    pub fn may_read_audit(&self, user: &User) -> bool {
        user.account.is_some()
            && (user.role == Role::Admin
                || self.rules_of(user).iter().any(|r| {
                    r.actions.contains("audit:read") && r.attributes == Attributes::default()
                }))
    }

    /// The answer to `GET /api/permissions` for a token, or `None` for an unknown one:
    /// `{"user", "account"?, "allow": [...]}` (every action the user's rules grant
    /// anywhere; every action for an admin), plus `"role"` and, for a member whose rules
    /// limit where, `"rules"` (each `{"actions", "runtimes"?, "clusters"?, "namespaces"?,
    /// "labels"?}`), so the app-proxy can check an operation where it happens.
    pub fn lookup(&self, token: &str) -> Option<Value> {
        let user = self.user(token)?;
        let rules = self.rules_of(&user);
        let allow: BTreeSet<&str> = match user.role {
            Role::Admin => ACTIONS.into_iter().collect(),
            Role::Member => rules
                .iter()
                .flat_map(|r| r.actions.iter().map(String::as_str))
                .collect(),
        };
        let mut answer = json!({"user": user.name, "allow": allow});
        if let Some(account) = &user.account {
            answer["account"] = json!(account);
        }
        let expires = self
            .directory
            .lock()
            .expect("permissions lock")
            .expiries
            .get(&TokenDigest::of(token))
            .copied();
        if let Some(expires) = expires {
            // The app-proxy keeps the answer no longer than the token lives.
            answer["expiresAt"] = json!(expires);
        }
        if user.role == Role::Admin {
            answer["role"] = json!("admin");
        }
        if user.role == Role::Member && rules.iter().any(|r| r.attributes != Attributes::default())
        {
            let limits: Vec<Value> = rules
                .iter()
                .filter(|r| !r.actions.is_empty())
                .map(|r| {
                    let mut limit = serde_json::to_value(&r.attributes).unwrap_or_default();
                    limit["actions"] = json!(r.actions);
                    limit
                })
                .collect();
            answer["rules"] = json!(limits);
        }
        Some(answer)
    }
}

/// What the app-proxy makes of a `GET /api/permissions` answer: may the user do
/// `operation` on runtime `runtime` in `namespace`? An answer without `"rules"` grants its
/// `"allow"` list everywhere (an admin, or a member whose rules limit nothing).
pub fn answer_allows(
    answer: &Value,
    operation: &str,
    runtime: &str,
    namespace: Option<&str>,
) -> bool {
    let listed = |v: &Value, field: &str| -> Vec<Pattern> {
        v[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(|p| Pattern(p.to_string())))
            .collect()
    };
    let allows_anywhere = answer["allow"]
        .as_array()
        .is_some_and(|a| a.iter().any(|o| o == operation));
    let Some(rules) = answer["rules"].as_array() else {
        return allows_anywhere;
    };
    rules.iter().any(|rule| {
        let one_of = |field: &str, value: Option<&str>| {
            let patterns = listed(rule, field);
            patterns.is_empty() || value.is_some_and(|v| patterns.iter().any(|p| p.matches(v)))
        };
        rule["actions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|o| o == operation))
            // The app-proxy knows no cluster or labels of what it touches: a rule limited
            // by them is not one it can apply, so it does not grant here.
            && listed(rule, "clusters").is_empty()
            && rule["labels"].as_object().is_none_or(|l| l.is_empty())
            && one_of("runtimes", Some(runtime))
            && one_of("namespaces", namespace)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(account: &'a str, runtime: &'a str, namespace: Option<&'a str>) -> Target<'a> {
        Target {
            account,
            runtime,
            cluster: "in-cluster",
            namespace,
            labels: None,
        }
    }

    #[test]
    fn patterns_match_with_stars_only() {
        let p = |s: &str| Pattern(s.into());
        assert!(p("*").matches(""));
        assert!(p("team-a-*").matches("team-a-dev"));
        assert!(!p("team-a-*").matches("team-b-dev"));
        assert!(p("*-prod").matches("eu-prod"));
        assert!(p("a*b*c").matches("axxbyyc"));
        assert!(!p("a*b*c").matches("axxbyy"));
        assert!(p("prod").matches("prod"));
        assert!(!p("prod").matches("prod2"));
    }

    #[test]
    fn nothing_is_allowed_that_no_rule_grants_and_nothing_crosses_an_account() {
        let permissions = Permissions::default();
        permissions.add_user("a", "acme", "alice", Role::Admin, &[]);
        permissions.add_user("b", "acme", "bob", Role::Member, &["dev"]);
        permissions.add_user("c", "acme", "carol", Role::Member, &[]);
        permissions.add_user("m", "globex", "mallory", Role::Admin, &[]);
        permissions.add_rule(
            "acme",
            Rule {
                teams: vec!["dev".into()],
                actions: ["applications:sync".to_string()].into(),
                attributes: Attributes {
                    runtimes: vec![Pattern("prod".into())],
                    namespaces: vec![Pattern("team-a-*".into())],
                    ..Attributes::default()
                },
                ..Rule::default()
            },
        );
        let user = |t: &str| permissions.user(t).unwrap();
        let in_team_a = target("acme", "prod", Some("team-a-web"));
        assert_eq!(
            permissions.decide(&user("a"), "applications:sync", &in_team_a),
            Decision::Allowed(Grant::Admin)
        );
        assert_eq!(
            permissions.decide(&user("b"), "applications:sync", &in_team_a),
            Decision::Allowed(Grant::Rule(0))
        );
        for (who, action, target, why) in [
            ("b", "applications:refresh", in_team_a, Denial::NoRule),
            (
                "b",
                "applications:sync",
                target("acme", "prod", Some("team-b")),
                Denial::NoRule,
            ),
            (
                "b",
                "applications:sync",
                target("acme", "staging", Some("team-a-x")),
                Denial::NoRule,
            ),
            // A namespace-limited rule does not grant on what has no namespace.
            (
                "b",
                "applications:sync",
                target("acme", "prod", None),
                Denial::NoRule,
            ),
            ("c", "applications:sync", in_team_a, Denial::NoRule),
            ("m", "applications:sync", in_team_a, Denial::OtherAccount),
        ] {
            assert_eq!(
                permissions.decide(&user(who), action, &target),
                Decision::Denied(why),
                "{who} {action} {target:?}"
            );
        }
        assert!(permissions.reaches(&user("b"), "acme", "prod", "in-cluster"));
        assert!(!permissions.reaches(&user("b"), "acme", "staging", "in-cluster"));
        assert!(!permissions.reaches(&user("c"), "acme", "prod", "in-cluster"));
        assert!(permissions.reaches(&user("a"), "acme", "staging", "in-cluster"));
        assert!(!permissions.reaches(&user("m"), "acme", "prod", "in-cluster"));
    }

    #[test]
    fn labels_must_all_be_carried_with_their_values() {
        let permissions = Permissions::default();
        permissions.add_user("b", "acme", "bob", Role::Member, &[]);
        permissions.add_rule(
            "acme",
            Rule {
                users: vec!["bob".into()],
                actions: ["applications:read".to_string()].into(),
                attributes: Attributes {
                    labels: [("team".to_string(), "a".to_string())].into(),
                    ..Attributes::default()
                },
                ..Rule::default()
            },
        );
        let bob = permissions.user("b").unwrap();
        let read = |labels: &[(&str, &str)]| {
            let labels: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            permissions
                .decide(
                    &bob,
                    "applications:read",
                    &Target {
                        labels: Some(&labels),
                        ..target("acme", "prod", Some("x"))
                    },
                )
                .allowed()
        };
        assert!(read(&[("team", "a"), ("tier", "web")]));
        assert!(!read(&[("team", "b")]));
        assert!(!read(&[]));
    }

    #[test]
    fn the_permissions_answer_lets_the_app_proxy_apply_runtime_and_namespace_limits() {
        let permissions = Permissions::default();
        permissions.grant_in("v", "acme", "viewer", &["applications:read"]);
        let plain = permissions.lookup("v").unwrap();
        assert_eq!(
            plain,
            json!({"user": "viewer", "allow": ["applications:read"], "account": "acme"}),
            "a member whose rules limit nothing gets the answer it always got"
        );
        assert!(answer_allows(&plain, "applications:read", "prod", None));
        assert!(!answer_allows(&plain, "workflows:terminate", "prod", None));

        permissions.add_user("o", "acme", "ops", Role::Member, &["ops"]);
        permissions.add_rule(
            "acme",
            Rule {
                teams: vec!["ops".into()],
                actions: ["workflows:terminate".to_string()].into(),
                attributes: Attributes {
                    runtimes: vec![Pattern("prod".into())],
                    namespaces: vec![Pattern("ci".into())],
                    ..Attributes::default()
                },
                ..Rule::default()
            },
        );
        let limited = permissions.lookup("o").unwrap();
        assert!(answer_allows(
            &limited,
            "workflows:terminate",
            "prod",
            Some("ci")
        ));
        assert!(!answer_allows(
            &limited,
            "workflows:terminate",
            "prod",
            Some("default")
        ));
        assert!(!answer_allows(
            &limited,
            "workflows:terminate",
            "staging",
            Some("ci")
        ));
        assert!(!answer_allows(
            &limited,
            "workflows:terminate",
            "prod",
            None
        ));

        permissions.add_user("a", "acme", "alice", Role::Admin, &[]);
        let admin = permissions.lookup("a").unwrap();
        assert_eq!(admin["role"], "admin");
        assert!(answer_allows(
            &admin,
            "workflows:terminate",
            "anything",
            None
        ));
        assert!(permissions.lookup("nobody").is_none());
    }
}
