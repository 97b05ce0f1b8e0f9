//! The Codefresh Runner in real mode, as a user runs it: `orrery serve control-plane
//! --runner` serves the builds and agent API, `orrery serve runner --engine` polls it and
//! makes each build's claim and pods in `orrery apiserver` over loopback. (The same against
//! a real kube-apiserver is the conformance suite's `runner` module.)

use std::time::Duration;

use crate::real_mode::{apiserver, exchange, http_as, orrery, Process};
use crate::support::{eventually, free_port};

const AGENT: &str = "agent-1";
const AGENT_TOKEN: &str = "agent-token-1";
const ADMIN: &str = "adm";
/// A second agent the control plane knows, which runs none of the tests' builds.
const OTHER_AGENT: &str = "agent-2";
const OTHER_TOKEN: &str = "agent-token-2";

/// The API server, a control plane with the Runner's API and one agent of `variant`:
/// (apiserver port, runner API port, agent health port, the processes).
fn world(variant: &str) -> (u16, u16, u16, Vec<Process>) {
    world_with(variant, &[])
}

/// [`world`] with more flags for `serve control-plane`.
fn world_with(variant: &str, flags: &[&str]) -> (u16, u16, u16, Vec<Process>) {
    let (api, runner, health, tunnel, gateway) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let at = |port: u16| format!("127.0.0.1:{port}");
    let apiserver = apiserver(&at(api));
    let agents = format!("{AGENT}={AGENT_TOKEN},{OTHER_AGENT}={OTHER_TOKEN}");
    let (tunnel, gateway, runner_at) = (at(tunnel), at(gateway), at(runner));
    let mut args = vec![
        "serve",
        "control-plane",
        "--admin-token",
        ADMIN,
        "--tunnel",
        &tunnel,
        "--api",
        &gateway,
        "--runner",
        &runner_at,
        "--runner-agents",
        &agents,
        "--variant",
        variant,
    ];
    args.extend_from_slice(flags);
    let platform = orrery(&args);
    eventually("the API server answers", Duration::from_secs(20), || {
        http_as(api, "GET", "/healthz", "", "").is_some()
    });
    eventually("the runner API answers", Duration::from_secs(20), || {
        http_as(runner, "GET", "/api/builds/none", "", ADMIN).is_some_and(|(s, _)| s == 404)
    });
    (api, runner, health, vec![apiserver, platform])
}

fn agent(variant: &str, api: u16, runner: u16, health: u16) -> Process {
    agent_pod(variant, api, runner, health, &[])
}

/// [`agent`] with more flags for `serve runner` (`--pod-name` for a replica).
fn agent_pod(variant: &str, api: u16, runner: u16, health: u16, flags: &[&str]) -> Process {
    let (platform, apiserver, listen) = (
        format!("127.0.0.1:{runner}"),
        format!("127.0.0.1:{api}"),
        format!("127.0.0.1:{health}"),
    );
    let mut args = vec![
        "serve",
        "runner",
        "--agent-id",
        AGENT,
        "--token",
        AGENT_TOKEN,
        "--platform-api",
        &platform,
        "--apiserver",
        &apiserver,
        "--namespace",
        "codefresh",
        "--listen",
        &listen,
        "--engine",
        "--variant",
        variant,
    ];
    args.extend_from_slice(flags);
    orrery(&args)
}

/// A build of two one-second steps: its id.
fn make_build(runner: u16) -> String {
    let body = r#"{"pipeline":"demo/build","agent":"agent-1","steps":[{"millis":1000,"exit_code":0},{"millis":1000,"exit_code":0}]}"#;
    let (status, answer) = http_as(runner, "POST", "/api/builds", body, ADMIN).expect("POST");
    assert_eq!(status, 201, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    answer["id"].as_str().unwrap().to_string()
}

fn build_status(runner: u16, id: &str) -> (String, String) {
    let (_, body) =
        http_as(runner, "GET", &format!("/api/builds/{id}"), "", ADMIN).unwrap_or_default();
    let build: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    (
        build["status"].as_str().unwrap_or_default().to_string(),
        build["reason"].as_str().unwrap_or_default().to_string(),
    )
}

/// The names of the pods and claims in namespace `codefresh`.
fn objects(api: u16) -> Vec<String> {
    let mut names = Vec::new();
    for plural in ["pods", "persistentvolumeclaims"] {
        let path = format!("/api/v1/namespaces/codefresh/{plural}");
        let (_, body) = http_as(api, "GET", &path, "", "").expect("list");
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        for item in list["items"].as_array().unwrap() {
            names.push(item["metadata"]["name"].as_str().unwrap().to_string());
        }
    }
    names.sort();
    names
}

#[test]
fn serve_runner_runs_a_build_on_the_api_server_and_removes_its_pods_and_claim() {
    let (api, runner, health, _world) = world("hardened");
    let _agent = agent("hardened", api, runner, health);
    // One build at a time: the second waits until the first ended.
    let (status, body) = http_as(
        runner,
        "PUT",
        "/api/pipelines/demo/build",
        r#"{"concurrency":1}"#,
        ADMIN,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_as(
        runner,
        "PUT",
        "/api/pipelines/demo/build",
        r#"{"concurrency":"one"}"#,
        ADMIN,
    )
    .unwrap();
    assert_eq!(
        status, 400,
        "a malformed pipeline is refused by name: {body}"
    );
    assert!(body.contains("not a pipeline"), "{body}");
    let id = make_build(runner);
    assert_eq!(id, "b00001");
    let next = make_build(runner);
    assert_eq!(build_status(runner, &next).0, "pending");
    eventually(
        "the engine and dind pods and the claim are made",
        Duration::from_secs(30),
        || objects(api) == ["dind-b00001", "engine-b00001", "pvc-dind-b00001"],
    );
    eventually("the build succeeds", Duration::from_secs(40), || {
        build_status(runner, &id).0 == "success"
    });
    eventually(
        "the waiting build is admitted and succeeds",
        Duration::from_secs(40),
        || build_status(runner, &next).0 == "success",
    );
    eventually(
        "the finished builds' pods and claims are deleted",
        Duration::from_secs(30),
        || objects(api).is_empty(),
    );
    // A webhook delivery starts a build; its redelivery (same id) is answered with it.
    let hook = r#"{"pipeline":"demo/build","agent":"agent-1","steps":[]}"#;
    let (status, body) = http_as(runner, "POST", "/api/webhooks", hook, ADMIN).unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("x-github-delivery"), "{body}");
    let deliver = || {
        crate::real_mode::exchange(
            runner,
            "POST",
            "/api/webhooks",
            hook,
            &format!("authorization: Bearer {ADMIN}\r\nx-github-delivery: 72d3162e\r\n"),
        )
        .unwrap()
    };
    let (status, first) = deliver();
    assert_eq!(status, 201, "{first}");
    let (status, again) = deliver();
    assert_eq!(status, 200, "{again}");
    let id = |body: &str| serde_json::from_str::<serde_json::Value>(body).unwrap()["id"].clone();
    assert_eq!(
        id(&first),
        id(&again),
        "the redelivery names the first delivery's build"
    );
    let (status, _) = http_as(health, "GET", "/health", "", "").expect("/health");
    assert_eq!(status, 200, "an agent that polls is healthy");
    // An unknown agent token is refused, by name.
    let (status, body) =
        http_as(runner, "GET", "/api/agent/agent-1/tasks", "", "not-a-token").unwrap();
    assert_eq!(status, 401, "{body}");
}

/// A claim of the build's name already there (left by an earlier agent): faithful reports
/// the API server's `AlreadyExists` as a non-retriable error and the build fails (venona's
/// `NewK8sError`, runner-research.md §1.6); hardened takes it as done.
/// A user follows a build's log over the broadcaster's WebSocket, as the UI does, with
/// orrery's own client: every line the engine wrote comes once, in order, then the end.
#[test]
fn a_builds_log_is_followed_over_websocket_to_its_end() {
    let (api, runner, health, _world) = world("hardened");
    let _agent = agent("hardened", api, runner, health);
    let body = r#"{"pipeline":"demo/build","agent":"agent-1","steps":[{"millis":2000,"exit_code":0,"lines":40,"line_bytes":100},{"millis":1000,"exit_code":3,"lines":5}]}"#;
    let (status, answer) = http_as(runner, "POST", "/api/builds", body, ADMIN).expect("POST");
    assert_eq!(status, 201, "{answer}");
    let id = serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let env: orrery_system::env::SharedEnv =
        std::sync::Arc::new(orrery_system::env::RealEnv::new("test"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut lines = Vec::new();
    let broadcaster = format!("127.0.0.1:{runner}");
    let followed = rt.block_on(async {
        let follow = orrery_system::platform::runner::logs::follow_build(
            env,
            &broadcaster,
            ADMIN,
            &id,
            |line| lines.push(line.to_string()),
        );
        tokio::time::timeout(Duration::from_secs(60), follow)
            .await
            .expect("the build's log ends within 60 s")
    });
    assert_eq!(followed.status, "failure", "the second step exits 3");
    assert_eq!((followed.received, followed.lines), (45, 45));
    assert!(followed.in_order);
    assert_eq!(lines[0].len(), 100, "{:?}", lines[0]);
    assert!(lines[0].starts_with(&format!("{id} step 0 line 0 ")));
    assert!(lines[44].starts_with(&format!("{id} step 1 line 4 ")));
    assert_eq!(lines[44].len(), 80, "the default line length");
    // The same lines as JSON, from any line on; an ended build's log takes no more.
    let (status, page) = http_as(
        runner,
        "GET",
        &format!("/api/builds/{id}/logs?from=43"),
        "",
        ADMIN,
    )
    .unwrap();
    assert_eq!(status, 200, "{page}");
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(page["lines"].as_array().unwrap().len(), 2);
    assert_eq!(
        (page["next"].as_u64(), page["ended"].as_bool()),
        (Some(45), Some(true))
    );
    // The engine sends its lines with the agent's token, as venona sends it (no scheme).
    let as_engine = format!("authorization: {AGENT_TOKEN}\r\n");
    let late = r#"{"from":45,"lines":["late"]}"#;
    let logs = format!("/api/builds/{id}/logs");
    let (status, body) = exchange(runner, "POST", &logs, late, &as_engine).unwrap();
    assert_eq!(status, 410, "{body}");
    // Another agent's token may neither write the build's log nor report on its engine.
    let as_other = format!("authorization: {OTHER_TOKEN}\r\n");
    for (path, body) in [
        (logs.clone(), late.to_string()),
        (
            format!("/api/builds/{id}/engine"),
            r#"{"exitCode":0}"#.to_string(),
        ),
    ] {
        let (status, answer) = exchange(runner, "POST", &path, &body, &as_other).unwrap();
        assert_eq!(status, 403, "{path}: {answer}");
        assert!(
            answer.contains("runs on agent agent-1's runtime"),
            "{answer}"
        );
    }
    // Bad requests are refused by name.
    for (path, body, token, want, says) in [
        (
            format!("/api/builds/{id}/logs?from=x"),
            "",
            ADMIN,
            400,
            "`from`",
        ),
        (
            format!("/api/builds/{id}/logs"),
            "",
            "nobody",
            401,
            "unknown token",
        ),
        (
            "/api/builds/b99999/logs".to_string(),
            "",
            ADMIN,
            404,
            "no build",
        ),
    ] {
        let (status, answer) = http_as(runner, "GET", &path, body, token).unwrap();
        assert_eq!(status, want, "{path}: {answer}");
        assert!(answer.contains(says), "{path}: {answer}");
    }
    for (body, says) in [
        (r#"{"lines":["x"]}"#, "`from`"),
        (r#"{"from":0,"lines":[1]}"#, "`lines`"),
    ] {
        let (status, answer) = exchange(runner, "POST", &logs, body, &as_engine).unwrap();
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.contains(says), "{body}: {answer}");
    }
    let huge = r#"{"pipeline":"demo/build","agent":"agent-1","steps":[{"millis":1,"exit_code":0,"lines":5,"line_bytes":100000}]}"#;
    let (status, answer) = http_as(runner, "POST", "/api/builds", huge, ADMIN).unwrap();
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("steps[0]"), "{answer}");
}

#[test]
fn a_claim_already_there_fails_the_faithful_build_and_not_the_hardened_one() {
    for (variant, ends) in [("faithful", "error"), ("hardened", "success")] {
        let (api, runner, health, _world) = world(variant);
        let claim = r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"pvc-dind-b00001","namespace":"codefresh"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}"#;
        let (status, body) = http_as(
            api,
            "POST",
            "/api/v1/namespaces/codefresh/persistentvolumeclaims",
            claim,
            "",
        )
        .unwrap();
        assert_eq!(status, 201, "{body}");
        let _agent = agent(variant, api, runner, health);
        let id = make_build(runner);
        eventually(
            &format!("{variant}: the build ends {ends}"),
            Duration::from_secs(40),
            || build_status(runner, &id).0 == ends,
        );
        if ends == "error" {
            let reason = build_status(runner, &id).1;
            assert!(reason.contains("pvc-dind-b00001"), "{reason}");
        }
    }
}

#[test]
fn serve_control_plane_refuses_a_malformed_runner_agent_list() {
    for (list, says) in [
        ("agent-1", "is not <agent-id>=<token>"),
        ("a=t,b=t", "token is another agent's too"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
            .args([
                "serve",
                "control-plane",
                "--admin-token",
                "adm",
                "--runner",
                "127.0.0.1:0",
                "--runner-agents",
                list,
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{list}: {stderr}");
        assert!(stderr.contains(says), "{list}: {stderr}");
    }
}

/// A cronus replica of `variant` ticking every second.
fn cronus(variant: &str, replica: &str, runner: u16) -> Process {
    orrery(&[
        "serve",
        "cronus",
        "--replica",
        replica,
        "--platform-api",
        &format!("127.0.0.1:{runner}"),
        "--token",
        ADMIN,
        "--trigger",
        "every-second=1s:demo/build@agent-1",
        "--min-every",
        "1s",
        "--lease-ttl",
        "1500ms",
        "--variant",
        variant,
    ])
}

/// The scheduled time (Unix ms) of each build a cron tick started, in build order.
fn tick_builds(runner: u16) -> Vec<u64> {
    let mut ticks = Vec::new();
    for n in 1.. {
        let (status, body) =
            http_as(runner, "GET", &format!("/api/builds/b{n:05}"), "", ADMIN).unwrap();
        if status == 404 {
            break;
        }
        let build: serde_json::Value = serde_json::from_str(&body).unwrap();
        ticks.push(build["tick"]["scheduledMs"].as_u64().expect("a cron build"));
    }
    ticks
}

/// Two cronus replicas (cronus' HA, which its README forbids): faithful ones each fire
/// every tick, so a tick starts two builds (runner-research.md §4 row 10); hardened ones
/// share a lease and hermes keys each tick, so every tick starts one build — and when the
/// first replica is stopped the other goes on without a gap.
#[test]
fn serve_cronus_replicas_start_one_build_a_tick_only_when_hardened() {
    let (_, runner, _, _world) = world("faithful");
    let replicas = [
        cronus("faithful", "cronus-0", runner),
        cronus("faithful", "cronus-1", runner),
    ];
    eventually(
        "faithful: a tick starts two builds",
        Duration::from_secs(30),
        || {
            let ticks = tick_builds(runner);
            ticks
                .iter()
                .any(|t| ticks.iter().filter(|u| *u == t).count() == 2)
        },
    );
    drop(replicas);

    let (_, runner, _, _world) = world("hardened");
    let first = cronus("hardened", "cronus-0", runner);
    let _second = cronus("hardened", "cronus-1", runner);
    eventually("hardened: three ticks ran", Duration::from_secs(30), || {
        tick_builds(runner).len() >= 3
    });
    drop(first);
    let before = tick_builds(runner).len();
    eventually(
        "hardened: the ticks go on after a replica stopped",
        Duration::from_secs(30),
        || tick_builds(runner).len() >= before + 4,
    );
    let ticks = tick_builds(runner);
    let mut sorted = ticks.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        ticks.len(),
        "a tick started two builds: {ticks:?}"
    );
    assert!(
        sorted.windows(2).all(|w| w[1] - w[0] == 1_000),
        "a tick was skipped: {sorted:?}"
    );
}

#[test]
fn serve_cronus_refuses_a_malformed_trigger_and_a_period_under_the_minimum() {
    for (args, says) in [
        (
            &["--trigger", "nightly"][..],
            "expected NAME=EVERY:PIPELINE@AGENT",
        ),
        (&["--trigger", "n/x=1h:p@a"][..], "must be letters, digits"),
        (&["--trigger", "n=soon:p@a"][..], "--trigger \"soon\""),
        (&["--trigger", "n=30s:p@a"][..], "under the minimum"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
            .args([
                "serve",
                "cronus",
                "--replica",
                "c",
                "--platform-api",
                "127.0.0.1:9",
                "--token",
                "t",
            ])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// As `deploy/cronus` runs it: the triggers from `CRON_TRIGGERS` (comma-separated), the pod's
/// probes on `--listen`'s `/health`.
#[test]
fn serve_cronus_takes_its_triggers_from_the_environment_and_answers_health() {
    let (_, runner, _, _world) = world("hardened");
    let health = free_port();
    let _cronus = Process(
        std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
            .args([
                "serve",
                "cronus",
                "--replica",
                "cronus-0",
                "--platform-api",
                &format!("127.0.0.1:{runner}"),
                "--token",
                ADMIN,
                "--min-every",
                "1s",
                "--listen",
                &format!("127.0.0.1:{health}"),
            ])
            .env(
                "CRON_TRIGGERS",
                "fast=1s:demo/build@agent-1,slow=2s:demo/build@agent-1",
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start orrery"),
    );
    eventually("/health answers", Duration::from_secs(20), || {
        http_as(health, "GET", "/health", "", "")
            .is_some_and(|(s, body)| s == 200 && body.contains("cronus-0"))
    });
    let triggers = || {
        let mut names = std::collections::BTreeSet::new();
        for n in 1.. {
            let (status, body) =
                http_as(runner, "GET", &format!("/api/builds/b{n:05}"), "", ADMIN).unwrap();
            if status == 404 {
                break;
            }
            let build: serde_json::Value = serde_json::from_str(&body).unwrap();
            names.insert(build["tick"]["trigger"].as_str().unwrap_or("").to_string());
        }
        names
    };
    eventually(
        "both triggers of CRON_TRIGGERS start builds",
        Duration::from_secs(30),
        || triggers() == ["fast".to_string(), "slow".to_string()].into(),
    );
}

/// Asks for a proxy task creating ConfigMap `name` in `namespace` on the API server on
/// `api`: its id.
fn proxy_configmap(runner: u16, api: u16, namespace: &str, name: &str) -> String {
    let body = serde_json::json!({
        "agent": AGENT,
        "url": format!("http://127.0.0.1:{api}/api/v1/namespaces/{namespace}/configmaps"),
        "token": "ui-token",
        "params": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"from": "proxy"}},
    });
    let (status, answer) =
        http_as(runner, "POST", "/api/proxy-tasks", &body.to_string(), ADMIN).expect("POST");
    assert_eq!(status, 201, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    answer["id"].as_str().unwrap().to_string()
}

/// A proxy task's status once the agent reported it (`{state, outcome, reason}`).
fn proxy_done(runner: u16, id: &str) -> serde_json::Value {
    let mut done = serde_json::Value::Null;
    eventually(
        "the proxy task is reported",
        Duration::from_secs(30),
        || {
            let (_, body) = http_as(runner, "GET", &format!("/api/proxy-tasks/{id}"), "", ADMIN)
                .unwrap_or_default();
            let task: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            done = task["status"].clone();
            done["state"] == "done"
        },
    );
    done
}

/// `proxy` agent tasks in real mode: the agent sends each to the API server over loopback.
/// A ConfigMap the server creates is `Success` in both variants; one it refuses (422, an
/// invalid name) is `Success` for faithful — venona takes any answer as success
/// (runner-research.md §4 row 16) — and a non-retriable `Error` naming the 422 for
/// hardened. Malformed requests for a proxy task are refused by name.
#[test]
fn proxy_tasks_report_the_targets_refusal_only_when_hardened() {
    for variant in ["faithful", "hardened"] {
        let (api, runner, health, _world) = world(variant);
        let _agent = agent(variant, api, runner, health);
        let made = proxy_configmap(runner, api, "codefresh", "proxied");
        let done = proxy_done(runner, &made);
        assert_eq!(done["outcome"], "Success", "{variant}: {done}");
        let (status, body) = http_as(
            api,
            "GET",
            "/api/v1/namespaces/codefresh/configmaps/proxied",
            "",
            "",
        )
        .unwrap();
        assert_eq!(status, 200, "{variant}: the ConfigMap was made: {body}");
        let refused = proxy_configmap(runner, api, "codefresh", "Not_A_Name");
        let done = proxy_done(runner, &refused);
        match variant {
            "faithful" => assert_eq!(done["outcome"], "Success", "{done}"),
            _ => {
                assert_eq!(done["outcome"], "Error", "{done}");
                let reason = done["reason"].as_str().unwrap_or_default();
                assert!(reason.contains("422"), "{reason}");
            }
        }
        if variant == "hardened" {
            for (body, status, says) in [
                (
                    r#"{"agent":"nobody","url":"http://x/","token":"t"}"#,
                    404,
                    "no agent",
                ),
                (
                    r#"{"agent":"agent-1","url":"ftp://x/","token":"t"}"#,
                    400,
                    "not an http(s) URL",
                ),
                (
                    r#"{"agent":"agent-1","url":"http://x/"}"#,
                    400,
                    "needs `token`",
                ),
                (
                    r#"{"agent":"agent-1","url":"http://x/","token":"t","params":[1]}"#,
                    400,
                    "`params` is not an object",
                ),
                (
                    r#"{"agent":"agent-1","url":"http://x/","token":"t","method":"GE T"}"#,
                    400,
                    "not an HTTP method",
                ),
                ("not json", 400, "not JSON"),
            ] {
                let (got, answer) =
                    http_as(runner, "POST", "/api/proxy-tasks", body, ADMIN).unwrap();
                assert_eq!(got, status, "{body}: {answer}");
                assert!(answer.contains(says), "{body}: {answer}");
            }
            let (got, _) = http_as(runner, "POST", "/api/proxy-tasks", "{}", "nope").unwrap();
            assert_eq!(got, 401);
            let (got, _) = http_as(runner, "GET", "/api/proxy-tasks/t999999", "", ADMIN).unwrap();
            assert_eq!(got, 404);
        }
    }
}

/// A build of `pipeline` on `branch` with `extra` fields: (status, its id or the error).
fn build_on(runner: u16, pipeline: &str, branch: &str, extra: &str) -> (u16, String) {
    let body = format!(
        r#"{{"pipeline":"{pipeline}","agent":"agent-1","branch":"{branch}","steps":[]{extra}}}"#
    );
    let (status, answer) = http_as(runner, "POST", "/api/builds", &body, ADMIN).expect("POST");
    let id = serde_json::from_str::<serde_json::Value>(&answer).unwrap_or_default()["id"]
        .as_str()
        .map(str::to_string);
    (status, id.unwrap_or(answer))
}

/// Admission in real mode (no agent runs, so an admitted build stays `elected`): a
/// pipeline's branch concurrency holds only its branch; the account's concurrency
/// (`--runner-account-concurrency`) holds every pipeline; the policy "terminate all other
/// running builds" ends the others; settings out of range are refused by name.
#[test]
fn branch_and_account_limits_and_the_terminate_all_policy_in_real_mode() {
    let (_, runner, _, _world) = world_with("hardened", &["--runner-account-concurrency", "3"]);
    let put = |pipeline: &str, body: &str| {
        http_as(
            runner,
            "PUT",
            &format!("/api/pipelines/{pipeline}"),
            body,
            ADMIN,
        )
        .unwrap()
    };
    let (status, body) = put("demo/a", r#"{"branchConcurrency":1}"#);
    assert_eq!(status, 200, "{body}");
    let (_, main1) = build_on(runner, "demo/a", "main", "");
    let (_, main2) = build_on(runner, "demo/a", "main", "");
    let (_, dev) = build_on(runner, "demo/a", "dev", "");
    assert_eq!(build_status(runner, &main1).0, "elected");
    assert_eq!(
        build_status(runner, &main2).0,
        "pending",
        "its branch is full"
    );
    assert_eq!(build_status(runner, &dev).0, "elected");
    // Two admitted; the account admits one more, of any pipeline.
    let (_, other1) = build_on(runner, "demo/b", "main", "");
    let (_, other2) = build_on(runner, "demo/b", "main", "");
    assert_eq!(build_status(runner, &other1).0, "elected");
    assert_eq!(
        build_status(runner, &other2).0,
        "pending",
        "the account is full"
    );
    // A new build of demo/b terminates all its others; the room goes to the waiting builds.
    let (status, body) = put("demo/b", r#"{"terminateAll":true}"#);
    assert_eq!(status, 200, "{body}");
    let (_, last) = build_on(runner, "demo/b", "dev", r#","priority":10"#);
    assert_eq!(build_status(runner, &other1).0, "terminated");
    assert_eq!(build_status(runner, &other2).0, "terminated");
    assert_eq!(build_status(runner, &last).0, "elected");
    for (body, says) in [
        (r#"{"branchConcurrency":0}"#, "branchConcurrency"),
        (r#"{"priority":500}"#, "priority"),
        (
            r#"{"terminateBranchPattern":"("}"#,
            "terminateBranchPattern",
        ),
        (r#"{"terminateEverything":true}"#, "unknown field"),
    ] {
        let (status, answer) = put("demo/a", body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.contains(says), "{body}: {answer}");
    }
    let (status, answer) = build_on(runner, "demo/a", "main", r#","priority":"high""#);
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("priority"), "{answer}");
}

/// A pipeline's trigger concurrency and "terminate child builds" in real mode (no agent
/// runs, so an admitted build stays `elected`): a trigger's second build waits while a
/// build another trigger or no trigger started is admitted; a build terminated by the
/// pipeline's policy ends the build it started; bad values are refused by name.
#[test]
fn trigger_limits_and_child_builds_in_real_mode() {
    let (_, runner, _, _world) = world("hardened");
    let body =
        r#"{"triggerConcurrency":1,"terminatePreviousOnBranch":true,"terminateChildren":true}"#;
    let (status, answer) = http_as(runner, "PUT", "/api/pipelines/demo/t", body, ADMIN).unwrap();
    assert_eq!(status, 200, "{answer}");
    let (_, settings) = http_as(runner, "GET", "/api/pipelines/demo/t", "", ADMIN).unwrap();
    let settings: serde_json::Value = serde_json::from_str(&settings).unwrap();
    assert_eq!(
        (
            &settings["triggerConcurrency"],
            &settings["terminateChildren"]
        ),
        (&serde_json::json!(1), &serde_json::json!(true))
    );
    let (_, push1) = build_on(runner, "demo/t", "main", r#","trigger":"push""#);
    let (_, push2) = build_on(runner, "demo/t", "dev", r#","trigger":"push""#);
    let (_, nightly) = build_on(runner, "demo/t", "nightly", r#","trigger":"nightly""#);
    let (_, manual) = build_on(runner, "demo/t", "manual", "");
    let status = |id: &str| build_status(runner, id);
    assert_eq!(
        [&push1, &push2, &nightly, &manual].map(|b| status(b).0),
        ["elected", "pending", "elected", "elected"]
    );
    // push1's step starts a build of another pipeline: its child.
    let (status_code, child) = build_on(
        runner,
        "demo/child",
        "main",
        &format!(r#","parent":"{push1}""#),
    );
    assert_eq!(status_code, 201, "{child}");
    assert_eq!(status(&child).0, "elected");
    // A new build of main terminates push1 (same branch), and push1 its child; push2 is
    // admitted in push1's place.
    let (_, next) = build_on(runner, "demo/t", "main", "");
    assert_eq!(status(&push1).0, "terminated");
    assert_eq!(
        status(&child),
        (
            "terminated".to_string(),
            format!("terminated with its parent build {push1}")
        )
    );
    assert_eq!(status(&push2).0, "elected");
    assert_eq!(status(&next).0, "elected");
    // Refused by name.
    let (code, answer) = http_as(
        runner,
        "PUT",
        "/api/pipelines/demo/t",
        r#"{"triggerConcurrency":0}"#,
        ADMIN,
    )
    .unwrap();
    assert_eq!(code, 400, "{answer}");
    assert!(answer.contains("triggerConcurrency"), "{answer}");
    for (extra, code, says) in [
        (r#","parent":"b99999""#, 404, "no build b99999"),
        (r#","trigger":"""#, 400, "`trigger`"),
        (r#","parent":7"#, 400, "`parent`"),
    ] {
        let (got, answer) = build_on(runner, "demo/t", "main", extra);
        assert_eq!(got, code, "{extra}: {answer}");
        assert!(answer.contains(says), "{extra}: {answer}");
    }
}

/// `serve runner --engine-memory-mib` takes 1 to 1048576 MiB and only with `--engine`.
#[test]
fn serve_runner_refuses_a_bad_engine_memory_or_volume_retention() {
    for (flags, says) in [
        (
            &["--engine", "--engine-memory-mib", "0"][..],
            "--engine-memory-mib",
        ),
        (&["--engine-memory-mib", "64"][..], "--engine"),
        // The external volumes cleaner's retention: a number and a unit, at least 60 s.
        (
            &[
                "--apiserver",
                "127.0.0.1:9",
                "--volumes-node-gib",
                "80",
                "--volumes-retention",
                "7w",
            ][..],
            "--volumes-retention \"7w\": expected a number and d, h, m or s",
        ),
        (
            &[
                "--apiserver",
                "127.0.0.1:9",
                "--volumes-node-gib",
                "80",
                "--volumes-retention",
                "30s",
            ][..],
            "at least 60s",
        ),
        (&["--volumes-retention", "4d"][..], "--volumes-node-gib"),
    ] {
        let mut args = vec![
            "serve",
            "runner",
            "--agent-id",
            AGENT,
            "--token",
            AGENT_TOKEN,
            "--platform-api",
            "127.0.0.1:9",
        ];
        args.extend_from_slice(flags);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}

/// Two replicas of one agent (`runner.replicasCount`) as the platform sees them: a pod
/// is slow with a build's tasks, their lease (`--runner-redeliver-after 4s`) runs out. The
/// faithful platform hands them to the other pod polling, which runs them too (venona's
/// per-workflow lock is per process only, runner-research.md §1.5, §4 row 2); the hardened
/// one keeps them with the pod that holds them while its heartbeats name them, and hands
/// them on once its heartbeats stop.
#[test]
fn a_slow_pods_tasks_go_to_the_other_replica_unless_hardened_and_its_heartbeats_hold_them() {
    for variant in ["faithful", "hardened"] {
        let (_, runner, _, _world) = world_with(variant, &["--runner-redeliver-after", "4s"]);
        let id = make_build(runner);
        // The agent's token goes raw in `Authorization`, as venona sends it.
        let as_agent = |method: &str, path: &str, body: &str| {
            let (status, body) = exchange(
                runner,
                method,
                path,
                body,
                &format!("authorization: {AGENT_TOKEN}\r\n"),
            )
            .expect("the agent API answers");
            assert_eq!(status, 200, "{variant}: {method} {path}: {body}");
            body
        };
        let poll = |pod: &str| {
            let path = format!("/api/agent/{AGENT}/tasks?waitForStatusReport=true&replica={pod}");
            serde_json::from_str::<Vec<serde_json::Value>>(&as_agent("GET", &path, "")).unwrap()
        };
        let status_path = format!("/api/agent/{AGENT}/status");
        let start = std::time::Instant::now();
        let until = |secs: f64| {
            let at = Duration::from_secs_f64(secs);
            if let Some(wait) = at.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        };
        let held = poll("pod-a");
        assert_eq!(
            held.len(),
            3,
            "{variant}: the build's claim and pods: {held:?}"
        );
        assert!(held
            .iter()
            .all(|t| t["metadata"]["workflowId"] == id.as_str()));
        let holding: Vec<&str> = held.iter().map(|t| t["_id"].as_str().unwrap()).collect();
        until(2.0);
        // A heartbeat that is not JSON is still a heartbeat: answered, nothing renewed.
        as_agent("PUT", &status_path, "{not json");
        let heartbeat =
            serde_json::json!({"message": "All good", "replica": "pod-a", "holding": holding});
        as_agent("PUT", &status_path, &heartbeat.to_string());
        until(4.8);
        let other = poll("pod-b");
        if variant == "faithful" {
            assert_eq!(other.len(), 3, "the lease ran out: pod-b runs them too");
            continue;
        }
        assert!(
            other.is_empty(),
            "pod-a's heartbeat holds the build: {other:?}"
        );
        // pod-a falls silent: once the renewed lease runs out, pod-b takes the build.
        until(6.8);
        assert_eq!(poll("pod-b").len(), 3, "pod-a stopped heartbeating");
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args([
            "serve",
            "control-plane",
            "--admin-token",
            "adm",
            "--runner",
            "127.0.0.1:0",
            "--runner-redeliver-after",
            "0s",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--runner-redeliver-after \"0s\": must be 1s to 1h"),
        "{stderr}"
    );
}

/// Two hardened replicas of one agent (`--pod-name`, POD_NAME in `deploy/runner`) run
/// builds to their end on the API server, each build's objects removed.
#[test]
fn two_hardened_replicas_of_one_agent_run_builds_to_their_end() {
    let (api, runner, _, _world) = world("hardened");
    let (health_a, health_b) = (free_port(), free_port());
    let _a = agent_pod(
        "hardened",
        api,
        runner,
        health_a,
        &["--pod-name", "runner-a"],
    );
    let _b = agent_pod(
        "hardened",
        api,
        runner,
        health_b,
        &["--pod-name", "runner-b"],
    );
    let builds: Vec<String> = (0..4).map(|_| make_build(runner)).collect();
    for build in &builds {
        eventually("each build succeeds", Duration::from_secs(60), || {
            build_status(runner, build).0 == "success"
        });
    }
    eventually(
        "the ended builds' pods and claims are deleted",
        Duration::from_secs(60),
        || objects(api).is_empty(),
    );
}
