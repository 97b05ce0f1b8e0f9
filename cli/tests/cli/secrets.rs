//! Secrets hygiene (issue 53): whatever is sent with a token — right, forged, expired, the
//! admin's where a user's belongs — no token reaches the control plane's log (`RUST_LOG=debug`),
//! its audit log or an error message. The control plane keeps tokens only as their
//! digests and compares them in constant time (`orrery_system::core::secret`).

use std::time::Duration;

use crate::real_mode::{app_event, exchange, http_as, report_event, Process};
use crate::support::{eventually, free_port};

const ADMIN: &str = "admin-secret-7c1d2e9a";
const RUNTIME: &str = "runtime-secret-3b8f60aa";
const ALICE: &str = "alice-secret-91e2c4d0";
const BOB: &str = "bob-secret-5a7e13f2";
const OLGA: &str = "olga-secret-e08d44b1";
const FORGED: &str = "forged-secret-22c9aa0e";

#[test]
fn no_token_reaches_the_log_the_audit_log_or_an_error_message() {
    let (tunnel, gateway, events) = (free_port(), free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("orrery-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "\
accounts:
  - name: acme
    users:
      - {{name: alice, token: {ALICE}, role: admin}}
      - {{name: bob, token: {BOB}, teams: [dev]}}
      - {{name: olga, token: {OLGA}, role: admin, expires: 2020-01-01T00:00:00Z}}
    rules:
      - teams: [dev]
        actions: [applications:read]
"
        ),
    )
    .unwrap();
    let log = dir.join("control-plane.log");
    let platform = Process(
        std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
            .args(["serve", "control-plane", "--admin-token", ADMIN])
            .arg("--tunnel")
            .arg(format!("127.0.0.1:{tunnel}"))
            .arg("--api")
            .arg(format!("127.0.0.1:{gateway}"))
            .arg("--events")
            .arg(format!("127.0.0.1:{events}"))
            .args(["--runtimes", &format!("acme-prod={RUNTIME}")])
            .args(["--policy", policy.to_str().unwrap()])
            .env("RUST_LOG", "debug")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start orrery"),
    );
    eventually("the gateway answers", Duration::from_secs(20), || {
        http_as(gateway, "GET", "/healthz", "", "").is_some()
    });
    let graphql = |token: &str, query: &str| {
        let body = serde_json::json!({"query": query}).to_string();
        http_as(gateway, "POST", "/2.0/api/graphql", &body, token).expect("an answer")
    };
    // Every answer but the one registration that hands out a token, which shows it once.
    let mut answers: Vec<(u16, String)> = Vec::new();
    let (status, created) = graphql(
        ALICE,
        r#"mutation { createRuntime(name: "edge") { newAccessToken } }"#,
    );
    assert_eq!(status, 200, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    let issued = created["data"]["createRuntime"]["newAccessToken"]
        .as_str()
        .expect("a token")
        .to_string();
    for token in [
        ALICE,
        BOB,
        OLGA,
        FORGED,
        ADMIN,
        RUNTIME,
        issued.as_str(),
        "",
    ] {
        // (Another runtime below: registering edge again would replace the token issued above.)
        answers.push(graphql(token, "{ me { name } runtimes { name } }"));
        answers.push(graphql(
            token,
            r#"mutation { createRuntime(name: "other") { newAccessToken } }"#,
        ));
        answers.push(graphql(token, "{ auditLog { reason } }"));
        answers.extend(http_as(gateway, "GET", "/api/permissions", "", token));
        answers.extend(http_as(gateway, "GET", "/api/audit", "", token));
        answers.extend(http_as(
            gateway,
            "GET",
            "/api/runtimes/acme-prod/app-proxy/api/status",
            "",
            token,
        ));
        // The events API takes the raw token.
        answers.extend(exchange(
            events,
            "POST",
            "/2.0/api/events",
            &app_event("web", "team-a", "Synced", 1),
            &format!("authorization: {token}\r\n"),
        ));
    }
    assert_eq!(
        report_event(events, RUNTIME, &app_event("web", "team-a", "Synced", 2)),
        Some(200),
        "the preregistered runtime's token is accepted (by its digest)"
    );
    assert_eq!(
        report_event(events, &issued, &app_event("api", "team-a", "Synced", 1)),
        Some(200),
        "the issued token is accepted"
    );
    assert_eq!(report_event(events, FORGED, "{}"), Some(401));
    assert!(
        answers.iter().any(|(status, _)| *status == 401),
        "the forged, expired and missing tokens were refused"
    );
    let (status, audit) = http_as(gateway, "GET", "/api/audit?limit=1000", "", ADMIN).unwrap();
    assert_eq!(status, 200, "{audit}");
    assert!(
        audit.contains("denied"),
        "the refusals are audited: {audit}"
    );
    drop(platform);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("platform.rejected"),
        "the refusals are logged: {log}"
    );
    for token in [ADMIN, RUNTIME, ALICE, BOB, OLGA, FORGED, issued.as_str()] {
        assert!(!log.contains(token), "the log holds {token}:\n{log}");
        assert!(
            !audit.contains(token),
            "the audit log holds {token}: {audit}"
        );
        for (status, body) in &answers {
            assert!(
                !body.contains(token),
                "an answer ({status}) holds {token}: {body}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where `text` holds one of the simulated world's tokens: its fixed ones (the gateway's
/// admin token, the runtime's, Argo CD's) and the shapes it makes them in (`rt-token-…` for
/// runtimes, `tok-<account>-<role>` for the tenant world's users).
fn simulated_tokens_in(text: &str) -> Vec<String> {
    use orrery_sim::world::addresses::{
        ADMIN_TOKEN, ARGOCD_TOKEN, EXISTING_ARGOCD_TOKEN, RUNTIME_TOKEN,
    };
    let mut found = Vec::new();
    for fixed in [
        ADMIN_TOKEN,
        ARGOCD_TOKEN,
        EXISTING_ARGOCD_TOKEN,
        RUNTIME_TOKEN,
    ] {
        if text.contains(fixed) {
            found.push(fixed.to_string());
        }
    }
    for shape in ["rt-token-", "tok-"] {
        for (at, _) in text.match_indices(shape) {
            // A word of its own (`stok-` is not a token).
            let before = text[..at].chars().next_back();
            if before.is_none_or(|c| !c.is_ascii_alphanumeric()) {
                let end = text[at..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .map_or(text.len(), |n| at + n);
                found.push(text[at..end].to_string());
            }
        }
    }
    found
}

#[test]
fn no_token_of_the_simulated_world_is_in_the_committed_reports() {
    // The scan finds what it looks for.
    assert_eq!(
        simulated_tokens_in(r#"{"token": "tok-t01-admin", "x": "stok-1"}"#),
        ["tok-t01-admin"]
    );
    assert_eq!(
        simulated_tokens_in("Bearer rt-token-acme-rt-0."),
        ["rt-token-acme-rt-0"]
    );
    let reports = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports");
    let mut files = vec![reports];
    let mut scanned = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        scanned += 1;
        let found = simulated_tokens_in(&text);
        assert!(found.is_empty(), "{} holds {found:?}", path.display());
    }
    assert!(scanned > 100, "the reports were scanned ({scanned} files)");
}
