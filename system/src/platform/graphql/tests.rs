//! The GitOps API against an in-memory control plane: the schema file, tenant isolation,
//! rules, pagination, runtime creation and the audit of every denial.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::*;
use crate::core::Variant;
use crate::platform::events::read_model::{AppState, ResourceState};
use crate::platform::permissions::{Attributes, Pattern, Permissions, Role, Rule};
use crate::platform::registry::Registry;
use crate::platform::tunnel;

use crate::platform::promotions::{EnvPhase, EnvStatus, Release, ReleasePhase};

/// Product shop: dev on acme's staging runtime, prod on acme's prod runtime.
fn shop_targets() -> std::collections::BTreeMap<String, crate::platform::promotions::Target> {
    [("dev", "acme-staging"), ("prod", "acme-prod")]
        .into_iter()
        .map(|(environment, runtime)| {
            (
                environment.to_string(),
                crate::platform::promotions::Target {
                    runtime: runtime.into(),
                    app: format!("shop-{environment}"),
                    path: format!("envs/{environment}"),
                    labels: Default::default(),
                },
            )
        })
        .collect()
}

/// Release `n` of shop: dev verified, prod as the phase says.
fn shop_release(n: u64, phase: ReleasePhase) -> Release {
    let env = |phase: EnvPhase, task: &str, started_ms: u64, ended_ms: u64| EnvStatus {
        phase,
        task: task.into(),
        started_ms,
        ended_ms,
        stop_sent: false,
    };
    let t0 = 1_767_225_600_000 + n * 60_000;
    let prod = match phase {
        ReleasePhase::Queued => env(EnvPhase::Waiting, "", 0, 0),
        ReleasePhase::Running => env(
            EnvPhase::Promoting,
            &format!("shop-{n}-prod"),
            t0 + 10_000,
            0,
        ),
        _ => env(
            EnvPhase::Succeeded,
            &format!("shop-{n}-prod"),
            t0 + 10_000,
            t0 + 20_000,
        ),
    };
    let dev = match phase {
        ReleasePhase::Queued => env(EnvPhase::Waiting, "", 0, 0),
        _ => env(
            EnvPhase::Succeeded,
            &format!("shop-{n}-dev"),
            t0,
            t0 + 10_000,
        ),
    };
    Release {
        id: format!("shop-{n}"),
        flow: "main".into(),
        commit: format!("c{n}"),
        created_ms: t0,
        started_ms: if phase == ReleasePhase::Queued { 0 } else { t0 },
        phase,
        why: String::new(),
        values: None,
        version: (phase != ReleasePhase::Queued).then(|| json!(format!("1.{n}"))),
        environments: [("dev".to_string(), dev), ("prod".to_string(), prod)].into(),
        ended_ms: if phase == ReleasePhase::Succeeded {
            t0 + 20_000
        } else {
            0
        },
        hooks: Vec::new(),
    }
}

struct World {
    env: SharedEnv,
    schema: ApiSchema,
    sources: Arc<Sources>,
}

fn app(sync: &str, namespace: &str, labels: &[(&str, &str)]) -> AppState {
    AppState {
        resource_version: 1,
        sync_status: sync.into(),
        health_status: "Healthy".into(),
        revision: "abc".into(),
        destination_cluster: "https://kubernetes.default.svc".into(),
        destination_namespace: namespace.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..AppState::default()
    }
}

/// acme (runtimes prod and staging) and globex (runtime prod), each with an app
/// `argocd/web` on prod: the same names in two accounts.
fn world() -> World {
    let env: SharedEnv = Arc::new(crate::env::RealEnv::new("graphql-test"));
    let registry = Arc::new(Registry::default());
    registry.insert("acme-prod-token", "acme", "prod");
    registry.insert("acme-staging-token", "acme", "staging");
    registry.insert("globex-prod-token", "globex", "prod");
    let permissions = Arc::new(Permissions::default());
    permissions.add_user("alice", "acme", "alice", Role::Admin, &[]);
    permissions.add_user("bob", "acme", "bob", Role::Member, &["team-a"]);
    permissions.add_user("carol", "acme", "carol", Role::Member, &[]);
    permissions.add_user("mallory", "globex", "mallory", Role::Admin, &[]);
    permissions.add_rule(
        "acme",
        Rule {
            teams: vec!["team-a".into()],
            actions: [
                "applications:read".to_string(),
                "applications:refresh".to_string(),
            ]
            .into(),
            attributes: Attributes {
                runtimes: vec![Pattern("prod".into())],
                namespaces: vec![Pattern("team-a-*".into())],
                ..Attributes::default()
            },
            ..Rule::default()
        },
    );
    let events = crate::platform::events::Platform::new(crate::platform::events::Config {
        tokens: Default::default(),
        bus_capacity: 10,
        durability: Default::default(),
        idempotency_keys: false,
    });
    events.put_app(
        "acme-prod",
        "argocd/web",
        app("Synced", "team-a-web", &[("tier", "web")]),
    );
    events.put_app("acme-prod", "argocd/db", app("OutOfSync", "team-b-db", &[]));
    for i in 0..5 {
        events.put_app(
            "acme-staging",
            &format!("argocd/app-{i}"),
            app("Synced", "team-a-x", &[]),
        );
    }
    events.put_app(
        "globex-prod",
        "argocd/web",
        app("OutOfSync", "secret-ns", &[]),
    );
    events.put_resource(
        "acme-prod",
        "argocd/web/apps/Deployment/team-a-web/web",
        ResourceState {
            sync_status: "Synced".into(),
            health_status: "Healthy".into(),
            deleted: false,
            revision: "abc".into(),
        },
    );
    for (kind, name) in [("Rollout", "web"), ("Workflow", "build-1")] {
        events.put_resource(
            "acme-prod",
            &format!("argocd/web/argoproj.io/{kind}/team-a-web/{name}"),
            ResourceState {
                sync_status: "Synced".into(),
                health_status: "Healthy".into(),
                deleted: false,
                revision: "abc".into(),
            },
        );
    }
    events
        .put_cluster(
            "acme-prod",
            &json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                    "metadata": {"name": "web", "namespace": "team-a-web", "resourceVersion": "4"},
                    "status": {"phase": "Paused", "currentStepIndex": 1, "currentPodHash": "bbb", "stableRS": "aaa"}}),
        )
        .unwrap();
    events
        .put_cluster(
            "acme-prod",
            &json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "build-1", "namespace": "team-a-web", "resourceVersion": "5"},
                    "status": {"phase": "Running", "progress": "1/2"}}),
        )
        .unwrap();
    // globex's Rollout of the same name is globex's.
    events
        .put_cluster(
            "globex-prod",
            &json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                    "metadata": {"name": "web", "namespace": "team-a-web", "resourceVersion": "9"},
                    "status": {"phase": "Degraded"}}),
        )
        .unwrap();
    // dave may read promotions on staging only; bob has no promotions rule.
    permissions.add_user("dave", "acme", "dave", Role::Member, &[]);
    permissions.add_rule(
        "acme",
        Rule {
            users: vec!["dave".into()],
            actions: ["promotions:read".to_string()].into(),
            attributes: Attributes {
                runtimes: vec![Pattern("staging".into())],
                ..Attributes::default()
            },
            ..Rule::default()
        },
    );
    let releases = crate::platform::promotions::Releases::default();
    releases.place("shop", &shop_targets());
    // shop's own template for its apps; the account's PromotionTemplate for web-tier apps.
    let templates: std::collections::BTreeMap<String, Value> = [(
        "charts".to_string(),
        json!({"applicationSourceSelector": {"matchLabels": {"tier": "web"}}, "priority": 10,
               "versionSource": {"file": "values.yaml", "jsonPath": "$.image.tag"}}),
    )]
    .into();
    releases.keep_templates(crate::platform::promotions::TemplateSource {
        product_template: Some(
            json!({"versionSource": {"file": "VERSION.json", "jsonPath": "$.v"}}),
        ),
        templates: crate::platform::promotions::plan::Templates::of(&templates).unwrap(),
    });
    releases.lock().extend([
        shop_release(1, ReleasePhase::Succeeded),
        shop_release(2, ReleasePhase::Running),
        shop_release(3, ReleasePhase::Queued),
    ]);
    let sources = Arc::new(Sources {
        registry: registry.clone(),
        permissions,
        audit: Arc::default(),
        health: Arc::default(),
        tunnels: crate::platform::tunnel::TunnelServer::new(
            tunnel::Config::new(Variant::Hardened),
            registry,
        ),
        events: Some(events),
        ingress: crate::env::http::client(env.clone(), Duration::from_secs(5)),
        releases,
        job_tokens: Arc::default(),
    });
    World {
        env,
        schema: schema(),
        sources,
    }
}

impl World {
    /// Runs `query` as the user of `token`: (HTTP status, answer).
    async fn ask(&self, token: &str, query: &str) -> (u16, Value) {
        let body = json!({"query": query}).to_string();
        self.raw(self.viewer(token), body.as_bytes()).await
    }

    /// The authenticated caller of `token`.
    fn viewer(&self, token: &str) -> Viewer {
        let user = self.sources.permissions.user(token).expect("a known user");
        Viewer {
            account: user.account.clone().expect("an account"),
            user,
            token: token.into(),
            runtime: None,
        }
    }

    /// (the status the answer's errors carry, answer): HTTP itself is checked here against
    /// GraphQL over HTTP — 400 without `data` for a request error, else 200 with `data`.
    async fn raw(&self, viewer: Viewer, body: &[u8]) -> (u16, Value) {
        let (http, answer) = self.exchange(viewer, body, Media::Json).await;
        if answer.get("data").is_some() {
            assert_eq!(http, 200, "an executed request is answered 200: {answer}");
        } else {
            assert_eq!(http, 400, "a request error is answered 400: {answer}");
        }
        (error_status(&answer).as_u16(), answer)
    }

    /// (HTTP status, answer) as `media`; the content type is checked to be `media`'s.
    async fn exchange(&self, viewer: Viewer, body: &[u8], media: Media) -> (u16, Value) {
        let response = answer(
            &self.env,
            &self.schema,
            self.sources.clone(),
            viewer,
            body,
            media,
        )
        .await;
        let status = response.status().as_u16();
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        let expected = match media {
            Media::Json => "application/json",
            Media::GraphqlResponse => "application/graphql-response+json",
        };
        assert_eq!(content_type, expected);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    /// The audit log's denials: (action, status, reason).
    fn denials(&self) -> Vec<(String, u16, String)> {
        self.sources
            .audit
            .query(None, 0, 1000)
            .into_iter()
            .filter(|e| e.outcome == Outcome::Denied)
            .map(|e| (e.action, e.status, e.reason))
            .collect()
    }
}

#[test]
fn the_committed_schema_is_the_schema_served() {
    let sdl = schema().sdl();
    if std::env::var_os("ORRERY_UPDATE_SCHEMA").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/platform/graphql/schema.graphql"
        );
        std::fs::write(path, &sdl).expect("write the schema");
        return;
    }
    assert!(
        sdl == SCHEMA_SDL,
        "system/src/platform/graphql/schema.graphql is out of date: run \
         ORRERY_UPDATE_SCHEMA=1 cargo test -p orrery-system the_committed_schema and commit it"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn each_account_sees_only_its_own_runtimes_and_apps_with_the_same_names() {
    let world = world();
    let query = "{ runtimes { name } applications { totalCount items { runtime namespace name syncStatus destinationNamespace } } }";
    let (status, acme) = world.ask("alice", query).await;
    assert_eq!(status, 200, "{acme}");
    assert_eq!(
        acme["data"]["runtimes"],
        json!([{"name": "prod"}, {"name": "staging"}])
    );
    assert_eq!(acme["data"]["applications"]["totalCount"], 7);
    assert_eq!(
        acme["data"]["applications"]["items"][1],
        json!({"runtime": "prod", "namespace": "argocd", "name": "web", "syncStatus": "Synced", "destinationNamespace": "team-a-web"})
    );
    let (_, globex) = world.ask("mallory", query).await;
    assert_eq!(globex["data"]["runtimes"], json!([{"name": "prod"}]));
    assert_eq!(
        globex["data"]["applications"]["items"],
        json!([{"runtime": "prod", "namespace": "argocd", "name": "web", "syncStatus": "OutOfSync", "destinationNamespace": "secret-ns"}]),
        "globex's own web, never acme's"
    );
    // acme's runtime staging cannot be named from globex: names are the account's own.
    let (status, answer) = world
        .ask("mallory", r#"{ runtime(name: "staging") { name } }"#)
        .await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["errors"][0]["extensions"]["code"], "NOT_FOUND");
    let (status, _) = world
        .ask(
            "mallory",
            r#"{ application(runtime: "staging", namespace: "argocd", name: "app-1") { name } }"#,
        )
        .await;
    assert_eq!(status, 404);
    let denials = world.denials();
    assert_eq!(denials.len(), 2, "{denials:?}");
    assert!(denials.iter().all(|(_, status, _)| *status == 404));
}

#[tokio::test(flavor = "current_thread")]
async fn a_member_sees_and_does_only_what_a_rule_grants() {
    let world = world();
    let (status, answer) = world
        .ask(
            "bob",
            "{ me { role teams } runtimes { name } applications { items { name namespace } } }",
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"]["me"],
        json!({"role": "member", "teams": ["team-a"]})
    );
    assert_eq!(
        answer["data"]["runtimes"],
        json!([{"name": "prod"}]),
        "no rule covers staging"
    );
    assert_eq!(
        answer["data"]["applications"]["items"],
        json!([{"name": "web", "namespace": "argocd"}]),
        "db deploys to team-b-db, outside bob's rule"
    );
    let (status, answer) = world
        .ask("bob", r#"{ application(runtime: "prod", namespace: "argocd", name: "web") { name resources { kind name syncStatus } } }"#)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"]["application"]["resources"],
        json!([
            {"kind": "Deployment", "name": "web", "syncStatus": "Synced"},
            {"kind": "Rollout", "name": "web", "syncStatus": "Synced"},
            {"kind": "Workflow", "name": "build-1", "syncStatus": "Synced"},
        ])
    );
    let (_, answer) = world
        .ask("bob", r#"{ application(runtime: "prod", namespace: "argocd", name: "web") { rollouts { name phase step stable currentHash aborted } workflows { name phase progress } } }"#)
        .await;
    assert_eq!(
        answer["data"]["application"],
        json!({"rollouts": [{"name": "web", "phase": "Paused", "step": 1, "stable": "aaa", "currentHash": "bbb", "aborted": false}],
               "workflows": [{"name": "build-1", "phase": "Running", "progress": "1/2"}]}),
        "acme's own Rollout and Workflow, not globex's Rollout of the same name"
    );
    // An app bob may not read is missing to him; one he reads but may not sync is forbidden.
    let (status, answer) = world
        .ask(
            "bob",
            r#"{ application(runtime: "prod", namespace: "argocd", name: "db") { name } }"#,
        )
        .await;
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = world
        .ask("bob", r#"mutation { syncApplication(runtime: "prod", namespace: "argocd", name: "web") { status } }"#)
        .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("may not applications:sync application argocd/web"),
        "{answer}"
    );
    // Carol has no rule at all: she sees nothing, reaches nothing.
    let (_, answer) = world
        .ask("carol", "{ runtimes { name } applications { totalCount } }")
        .await;
    assert_eq!(
        answer["data"],
        json!({"runtimes": [], "applications": {"totalCount": 0}})
    );
    let (status, _) = world
        .ask("carol", r#"mutation { terminateWorkflow(runtime: "prod", namespace: "ci", name: "w") { status } }"#)
        .await;
    assert_eq!(status, 404, "carol does not reach prod");
    // Refresh is granted: it goes to the runtime, which has no tunnel here.
    let (status, answer) = world
        .ask("bob", r#"mutation { refreshApplication(runtime: "prod", namespace: "argocd", name: "web") { status } }"#)
        .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["errors"][0]["extensions"]["code"], "RUNTIME_ERROR");
    let statuses: Vec<u16> = world.denials().iter().map(|d| d.1).collect();
    assert_eq!(statuses, [404, 403, 404], "every denial audited, in order");
    let last = world.sources.audit.query(None, 0, 1000).pop().unwrap();
    assert_eq!(
        (last.action.as_str(), last.status, last.outcome),
        ("graphql refreshApplication", 503, Outcome::Allowed),
        "the mutation sent is audited with the runtime's answer"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn applications_come_a_page_at_a_time() {
    let world = world();
    let page = |after: &str| {
        format!(
            r#"{{ applications(filter: {{runtime: "staging"}}, first: 2{after}) {{ totalCount hasNextPage endCursor items {{ name }} }} }}"#
        )
    };
    let mut names = Vec::new();
    let mut after = String::new();
    loop {
        let (status, answer) = world.ask("alice", &page(&after)).await;
        assert_eq!(status, 200, "{answer}");
        let page = &answer["data"]["applications"];
        assert_eq!(page["totalCount"], 5);
        for item in page["items"].as_array().unwrap() {
            names.push(item["name"].as_str().unwrap().to_string());
        }
        if !page["hasNextPage"].as_bool().unwrap() {
            break;
        }
        after = format!(r#", after: "{}""#, page["endCursor"].as_str().unwrap());
    }
    assert_eq!(names, ["app-0", "app-1", "app-2", "app-3", "app-4"]);
    for bad in [r#"after: "not-a-cursor""#, "first: 0", "first: 501"] {
        let query = format!("{{ applications({bad}) {{ totalCount }} }}");
        let (status, answer) = world.ask("alice", &query).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{bad}: {answer}"
        );
    }
    let (_, answer) = world
        .ask(
            "alice",
            r#"{ applications(filter: {syncStatus: "OutOfSync"}) { items { name } } }"#,
        )
        .await;
    assert_eq!(
        answer["data"]["applications"]["items"],
        json!([{"name": "db"}])
    );
    let (_, answer) = world
        .ask("alice", r#"{ applications(filter: {labels: ["tier=web"]}) { items { name labels { key value } } } }"#)
        .await;
    assert_eq!(
        answer["data"]["applications"]["items"],
        json!([{"name": "web", "labels": [{"key": "tier", "value": "web"}]}])
    );
}

#[tokio::test(flavor = "current_thread")]
async fn only_an_account_admin_creates_runtimes_and_creating_again_rotates_the_token() {
    let world = world();
    let create = r#"mutation { createRuntime(name: "edge", kind: HOSTED, runtimeVersion: "0.1.72") { name newAccessToken rotated } }"#;
    let (status, answer) = world.ask("bob", create).await;
    assert_eq!(status, 403, "{answer}");
    let (status, first) = world.ask("alice", create).await;
    assert_eq!(status, 200, "{first}");
    let token = first["data"]["createRuntime"]["newAccessToken"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(first["data"]["createRuntime"]["rotated"], false);
    let registry = &world.sources.registry;
    assert_eq!(registry.lookup(&token).unwrap().tunnel_name(), "acme-edge");
    let (_, again) = world.ask("alice", create).await;
    assert_eq!(again["data"]["createRuntime"]["rotated"], true);
    assert!(
        registry.is_revoked(&token),
        "the old token stops working at once"
    );
    let (_, shown) = world
        .ask("alice", r#"{ runtime(name: "edge") { kind accessMode runtimeVersion cluster healthStatus syncStatus isRemoteClusterConnected } }"#)
        .await;
    assert_eq!(
        shown["data"]["runtime"],
        json!({"kind": "HOSTED", "accessMode": "TUNNEL", "runtimeVersion": "0.1.72", "cluster": "in-cluster",
               "healthStatus": "Unknown", "syncStatus": "Unknown", "isRemoteClusterConnected": false})
    );
    // globex cannot take acme's tunnel name: acme + "edge" is acme-edge; globex + "x" is not.
    let (status, answer) = world
        .ask(
            "alice",
            r#"mutation { createRuntime(name: "edge", accessMode: INGRESS) { name } }"#,
        )
        .await;
    assert_eq!(status, 400, "ingress without a host: {answer}");
    let audit = world.sources.audit.query(Some("acme"), 0, 100);
    let created: Vec<&str> = audit
        .iter()
        .filter(|e| e.action == "graphql createRuntime" && e.outcome == Outcome::Allowed)
        .map(|e| e.reason.as_str())
        .collect();
    assert_eq!(created, ["", "token rotated"]);
}

#[tokio::test(flavor = "current_thread")]
async fn the_audit_log_is_the_accounts_own_and_needs_a_grant() {
    let world = world();
    let _ = world
        .ask("mallory", r#"{ runtime(name: "nope") { name } }"#)
        .await;
    let (status, answer) = world.ask("bob", "{ auditLog { seq } }").await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = world
        .ask("alice", "{ auditLog { action status reason actor } }")
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"]["auditLog"],
        json!([{"action": "graphql auditLog", "status": 403, "actor": "user:bob",
                "reason": "user bob may not read the audit log of account acme"}]),
        "acme's admin sees acme's entries only, not globex's"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn malformed_deep_and_unknown_queries_are_refused_and_audited() {
    let world = world();
    let alice = || world.viewer("alice");
    let (status, answer) = world.raw(alice(), b"{not json").await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = world.ask("alice", "{ runtimes { nope } }").await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("nope"));
    // A query of depth `4 + levels + 1`: `ofType` nested `levels` deep under
    // `__schema { types { fields { type … } } } }`.
    let nested = |levels: usize| {
        format!(
            "{{ __schema {{ types {{ fields {{ type {{ {}name{} }} }} }} }} }}",
            "ofType { ".repeat(levels),
            " }".repeat(levels)
        )
    };
    // Depth 60 (the abuse the issue tried): refused before it runs, without `data`.
    let (status, answer) = world.ask("alice", &nested(56)).await;
    assert_eq!(status, 400);
    assert!(answer.get("data").is_none(), "{answer}");
    // async-graphql's parser refuses it (recursion over 32) before the depth limit would.
    let message = answer["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("recursion depth"), "{answer}");
    // Depth 16, which parses: the depth limit refuses it.
    let (status, answer) = world.ask("alice", &nested(11)).await;
    assert_eq!(status, 400);
    assert!(answer.get("data").is_none(), "{answer}");
    let message = answer["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("nested too deep"), "{answer}");
    assert_eq!(world.denials().len(), 4, "{:?}", world.denials());
}

/// The shape of graphql-js 16's `getIntrospectionQuery()`: the type references nest nine
/// `ofType` levels under `__schema { types { fields { args { type … } } } }`, depth 15.
/// (`make conformance` sends graphql-js's own query; this keeps the limit honest in
/// `make test`.)
fn standard_introspection_query() -> String {
    let type_ref = format!(
        "kind name {}name kind{}",
        "ofType { name kind ".repeat(8) + "ofType { ",
        " }".repeat(9)
    );
    format!(
        "query IntrospectionQuery {{ __schema {{ queryType {{ name }} mutationType {{ name }} \
         subscriptionType {{ name }} types {{ ...FullType }} directives {{ name description \
         locations args {{ ...InputValue }} }} }} }} \
         fragment FullType on __Type {{ kind name description \
         fields(includeDeprecated: true) {{ name description args {{ ...InputValue }} \
         type {{ ...TypeRef }} isDeprecated deprecationReason }} \
         inputFields {{ ...InputValue }} interfaces {{ ...TypeRef }} \
         enumValues(includeDeprecated: true) {{ name description isDeprecated deprecationReason }} \
         possibleTypes {{ ...TypeRef }} }} \
         fragment InputValue on __InputValue {{ name description type {{ ...TypeRef }} defaultValue }} \
         fragment TypeRef on __Type {{ {type_ref} }}"
    )
}

#[tokio::test(flavor = "current_thread")]
async fn the_standard_introspection_query_is_answered() {
    let world = world();
    let (status, answer) = world.ask("alice", &standard_introspection_query()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("errors").is_none(), "{answer}");
    let schema = &answer["data"]["__schema"];
    assert_eq!(schema["queryType"]["name"], "QueryRoot");
    let types = schema["types"].as_array().unwrap();
    assert!(types.iter().any(|t| t["name"] == "Application"), "{schema}");
    // One more level than the standard query is still refused.
    let too_deep =
        standard_introspection_query().replace("name kind }", "name kind ofType { name kind } }");
    let (status, answer) = world.ask("alice", &too_deep).await;
    assert_eq!(status, 400, "{answer}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_field_error_is_a_200_with_its_code_and_a_request_error_a_400_without_data() {
    let world = world();
    let alice = || world.viewer("alice");
    let missing = json!({"query": r#"{ runtime(name: "nope") { name } }"#}).to_string();
    let invalid = json!({"query": "{ runtimes { nope } }"}).to_string();
    for media in [Media::Json, Media::GraphqlResponse] {
        let (status, answer) = world.exchange(alice(), missing.as_bytes(), media).await;
        assert_eq!(status, 200, "{media:?}: {answer}");
        assert_eq!(answer["data"], Value::Null, "{answer}");
        assert_eq!(answer["errors"][0]["extensions"]["code"], "NOT_FOUND");
        assert_eq!(answer["errors"][0]["path"], json!(["runtime"]));
        let (status, answer) = world.exchange(alice(), invalid.as_bytes(), media).await;
        assert_eq!(status, 400, "{media:?}: {answer}");
        assert!(answer.get("data").is_none(), "{answer}");
        let (status, answer) = world.exchange(alice(), b"[1, 2]", media).await;
        assert_eq!(status, 400, "{media:?}: {answer}");
        assert_eq!(answer["errors"][0]["extensions"]["code"], "BAD_REQUEST");
    }
}

#[test]
fn the_answer_is_the_media_type_accept_prefers() {
    let of = |accept: Option<&str>| Media::from_accept(accept);
    assert_eq!(of(None), Media::Json);
    assert_eq!(of(Some("*/*")), Media::Json);
    assert_eq!(of(Some("application/json")), Media::Json);
    assert_eq!(
        of(Some("application/graphql-response+json")),
        Media::GraphqlResponse
    );
    // Apollo Client's and graphql-http's header.
    assert_eq!(
        of(Some(
            "application/graphql-response+json, application/json;q=0.9"
        )),
        Media::GraphqlResponse
    );
    assert_eq!(
        of(Some("application/json, application/graphql-response+json")),
        Media::Json,
        "equal q: the first listed"
    );
    assert_eq!(
        of(Some(
            "application/json;q=0.5, Application/GraphQL-Response+JSON"
        )),
        Media::GraphqlResponse
    );
    assert_eq!(
        of(Some("application/graphql-response+json;q=0")),
        Media::Json
    );
}

#[tokio::test(flavor = "current_thread")]
async fn pages_follow_runtime_order_even_when_one_runtime_name_extends_another() {
    let world = world();
    // "prod-eu" sorts after "prod" as a name, but "prod-eu/…" before "prod/…" as text.
    world
        .sources
        .registry
        .insert("acme-prod-eu-token", "acme", "prod-eu");
    let events = world.sources.events.as_ref().unwrap();
    events.put_app(
        "acme-prod-eu",
        "argocd/web",
        app("Synced", "team-a-eu", &[]),
    );
    let mut seen = Vec::new();
    let mut after = String::new();
    for _ in 0..20 {
        let query = format!(
            "{{ applications(first: 1{after}) {{ hasNextPage endCursor items {{ runtime name }} }} }}"
        );
        let (status, answer) = world.ask("alice", &query).await;
        assert_eq!(status, 200, "{answer}");
        let page = &answer["data"]["applications"];
        for item in page["items"].as_array().unwrap() {
            seen.push(format!(
                "{}/{}",
                item["runtime"].as_str().unwrap(),
                item["name"].as_str().unwrap()
            ));
        }
        if !page["hasNextPage"].as_bool().unwrap() {
            break;
        }
        after = format!(r#", after: "{}""#, page["endCursor"].as_str().unwrap());
    }
    assert_eq!(
        seen,
        [
            "prod/db",
            "prod/web",
            "prod-eu/web",
            "staging/app-0",
            "staging/app-1",
            "staging/app-2",
            "staging/app-3",
            "staging/app-4"
        ],
        "one page each, none skipped or repeated"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn releases_and_their_promotions_are_shown_to_whom_a_rule_lets_read_them() {
    let world = world();
    let all = r#"{ releases { totalCount items { id product flow commit phase version createdAt startedAt endedAt promotions { environment runtime application phase task startedAt endedAt } } } }"#;
    // The account's admin: every release, newest first, every environment.
    let (status, answer) = world.ask("alice", all).await;
    assert_eq!(status, 200, "{answer}");
    let page = &answer["data"]["releases"];
    assert_eq!(page["totalCount"], 3, "{answer}");
    let ids: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["shop-3", "shop-2", "shop-1"]);
    assert_eq!(
        page["items"][1],
        json!({
            "id": "shop-2", "product": "shop", "flow": "main", "commit": "c2",
            "phase": "Running", "version": "\"1.2\"",
            "createdAt": "2026-01-01T00:02:00Z", "startedAt": "2026-01-01T00:02:00Z", "endedAt": null,
            "promotions": [
                {"environment": "dev", "runtime": "staging", "application": "shop-dev", "phase": "Succeeded",
                 "task": "shop-2-dev", "startedAt": "2026-01-01T00:02:00Z", "endedAt": "2026-01-01T00:02:10Z"},
                {"environment": "prod", "runtime": "prod", "application": "shop-prod", "phase": "Promoting",
                 "task": "shop-2-prod", "startedAt": "2026-01-01T00:02:10Z", "endedAt": null}
            ]
        })
    );
    // A queued release has no task and no times yet.
    assert_eq!(page["items"][0]["promotions"][0]["task"], Value::Null);
    assert_eq!(page["items"][0]["startedAt"], Value::Null);
    // dave reads promotions on staging only: every release, only its dev environment.
    let (_, answer) = world.ask("dave", all).await;
    let items = answer["data"]["releases"]["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(items.len(), 3, "{answer}");
    for release in &items {
        assert_eq!(
            release["promotions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["environment"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["dev"],
            "{release}"
        );
    }
    // dave reads only dev: why a release ended and its version (which may speak of prod)
    // are not his to see.
    assert_eq!(items[1]["version"], Value::Null, "{answer}");
    // bob has no promotions:read rule, globex's admin is another account: nothing.
    for who in ["bob", "mallory"] {
        let (status, answer) = world.ask(who, all).await;
        assert_eq!(status, 200, "{who}: {answer}");
        assert_eq!(
            answer["data"]["releases"]["totalCount"], 0,
            "{who}: {answer}"
        );
        let (status, answer) = world.ask(who, r#"{ release(id: "shop-1") { id } }"#).await;
        assert_eq!(status, 404, "{who}: {answer}");
        assert_eq!(answer["errors"][0]["extensions"]["code"], "NOT_FOUND");
    }
    assert!(
        world
            .denials()
            .iter()
            .any(|(action, status, reason)| action == "graphql release"
                && *status == 404
                && reason.contains("no release shop-1")),
        "{:?}",
        world.denials()
    );
    // One release by id; filters; pages.
    let (_, answer) = world
        .ask("alice", r#"{ release(id: "shop-1") { phase endedAt } }"#)
        .await;
    assert_eq!(
        answer["data"]["release"],
        json!({"phase": "Succeeded", "endedAt": "2026-01-01T00:01:20Z"})
    );
    let (_, answer) = world
        .ask("alice", r#"{ releases(phase: "Queued") { items { id } } }"#)
        .await;
    assert_eq!(
        answer["data"]["releases"]["items"],
        json!([{"id": "shop-3"}])
    );
    let (_, answer) = world
        .ask("alice", r#"{ releases(product: "other") { totalCount } }"#)
        .await;
    assert_eq!(answer["data"]["releases"]["totalCount"], 0);
    let mut ids = Vec::new();
    let mut after = String::new();
    loop {
        let query =
            format!("{{ releases(first: 2{after}) {{ hasNextPage endCursor items {{ id }} }} }}");
        let (status, answer) = world.ask("alice", &query).await;
        assert_eq!(status, 200, "{answer}");
        let page = &answer["data"]["releases"];
        for item in page["items"].as_array().unwrap() {
            ids.push(item["id"].as_str().unwrap().to_string());
        }
        if !page["hasNextPage"].as_bool().unwrap() {
            break;
        }
        after = format!(r#", after: "{}""#, page["endCursor"].as_str().unwrap());
    }
    assert_eq!(ids, ["shop-3", "shop-2", "shop-1"]);
    // A cursor stays good when its release no longer matches the filter: the next page is
    // what is older than it.
    let (_, answer) = world
        .ask("alice", "{ releases(first: 1) { endCursor items { id } } }")
        .await;
    let newest = answer["data"]["releases"]["endCursor"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, answer) = world
        .ask(
            "alice",
            &format!(r#"{{ releases(phase: "Succeeded", after: "{newest}") {{ items {{ id }} hasNextPage }} }}"#),
        )
        .await;
    assert_eq!(
        answer["data"]["releases"],
        json!({"items": [{"id": "shop-1"}], "hasNextPage": false})
    );
    for bad in [
        r#"after: "bm90LWEtY3Vyc29y""#,
        "first: 0",
        "first: 501",
        "first: 100000",
    ] {
        let query = format!("{{ releases({bad}) {{ totalCount }} }}");
        let (status, answer) = world.ask("alice", &query).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{bad}: {answer}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_big_page_of_a_deep_selection_is_refused_as_too_complex_and_a_smaller_one_runs() {
    let world = world();
    let selection = "items { name namespace syncStatus healthStatus resources { group kind namespace name syncStatus healthStatus } rollouts { name phase step stable currentHash aborted } workflows { name phase progress message } }";
    let (status, answer) = world
        .ask(
            "alice",
            &format!("{{ applications(first: 500) {{ {selection} }} }}"),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("too complex"),
        "{answer}"
    );
    assert!(
        world
            .denials()
            .iter()
            .any(|(action, status, reason)| action == "graphql"
                && *status == 400
                && reason.contains("too complex")),
        "{:?}",
        world.denials()
    );
    let (status, answer) = world
        .ask(
            "alice",
            &format!("{{ applications(first: 100) {{ {selection} }} }}"),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    // The scenario's list of 500 with a few fields is not refused.
    let (status, answer) = world
        .ask(
            "alice",
            "{ applications(first: 500) { totalCount items { runtime name destinationNamespace } } }",
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    // Releases are priced the same way.
    let (status, answer) = world
        .ask(
            "alice",
            "{ releases(first: 500) { items { id product flow commit phase reason version createdAt startedAt endedAt promotions { environment runtime application phase task startedAt endedAt } } } }",
        )
        .await;
    assert_eq!(status, 400, "{answer}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_runtime_asks_which_template_versions_its_app_and_nothing_else() {
    let world = world();
    let runtime = |account: &str, name: &str| {
        Viewer::runtime(
            &crate::platform::registry::Runtime {
                account: account.into(),
                runtime: name.into(),
            },
            &format!("{account}-{name}-token"),
        )
    };
    let ask = |viewer: Viewer, metadata: Value| {
        let body = json!({
            "query": "query ($m: Object!) { promotionTemplateByRuntime(applicationMetadata: $m) { versionSource { file jsonPath } } }",
            "variables": {"m": metadata},
        })
        .to_string();
        let world = &world;
        async move { world.raw(viewer, body.as_bytes()).await }
    };
    // A web-tier app: the account's PromotionTemplate that selects it by label.
    let (status, answer) = ask(
        runtime("acme", "prod"),
        json!({"name": "web", "namespace": "argocd", "labels": {"tier": "web"}}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"]["promotionTemplateByRuntime"]["versionSource"],
        json!({"file": "values.yaml", "jsonPath": "$.image.tag"})
    );
    // shop's prod app on acme-prod: the Product's own template, whatever its labels.
    let (_, answer) = ask(
        runtime("acme", "prod"),
        json!({"name": "shop-prod", "namespace": "argocd", "labels": {"tier": "web"}}),
    )
    .await;
    assert_eq!(
        answer["data"]["promotionTemplateByRuntime"]["versionSource"]["file"],
        "VERSION.json"
    );
    // The same app name on a runtime shop does not place it on: by label only; none applies.
    let (_, answer) = ask(runtime("acme", "staging"), json!({"name": "shop-prod"})).await;
    assert_eq!(
        answer["data"]["promotionTemplateByRuntime"],
        Value::Null,
        "{answer}"
    );
    // Bad metadata is named.
    let (status, answer) = ask(
        runtime("acme", "prod"),
        json!({"name": "web", "labels": {"tier": 3}}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("applicationMetadata.labels.tier: not a string"));
    // A user may not ask; a runtime may read nothing else.
    let (status, answer) = ask(world.viewer("alice"), json!({"name": "web"})).await;
    assert_eq!(status, 403, "{answer}");
    let body = json!({"query": "{ runtimes { name } applications { totalCount } }"}).to_string();
    let (status, answer) = world.raw(runtime("acme", "prod"), body.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["runtimes"], json!([]));
    assert_eq!(answer["data"]["applications"]["totalCount"], 0);
    // Nor may it act: a sync it asks for is refused before anything reaches a runtime.
    let body = json!({"query": r#"mutation { syncApplication(runtime: "prod", namespace: "argocd", name: "web") { status } }"#}).to_string();
    let (status, answer) = world.raw(runtime("acme", "prod"), body.as_bytes()).await;
    assert!(
        status == 403 || status == 404,
        "a runtime's token may not sync: {status} {answer}"
    );
    assert!(answer["data"].is_null(), "{answer}");
}
