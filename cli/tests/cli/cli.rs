//! The `orrery` command line as a user meets it: `--help`, `--version`, `--flag=value`, and
//! one exit code per result class (documented in `orrery --help` and the README).

use std::path::PathBuf;
use std::process::{Command, Output};

use std::time::Duration;

use crate::support::{eventually, free_port};

fn orrery(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(args)
        .output()
        .expect("the orrery binary runs")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A small Kubernetes world: the probe is cut off from the API server at 5 s while apps churn. With
/// `calm` long enough the probe converges (pass); with `calm: 0s` it cannot (liveness).
fn probe_world(dir: &std::path::Path, name: &str, calm: &str, expect: &str) -> String {
    let path: PathBuf = dir.join(format!("{name}.yaml"));
    let text = format!(
        "name: {name}
description: a small world for exit-code tests
seeds: [1, 2]
topology:
  hosts:
    - {{name: apiserver, role: apiserver}}
    - {{name: argocd, role: argocd}}
    - {{name: workload, role: workload}}
    - {{name: probe, role: probe}}
workload: {{applications: 20, repositories: 2, commit_every: 500ms, churn_every: 2s}}
probe: {{read_idle: 30s, watch_timeout_seconds: 60}}
faults:
  - {{at: 5s, partition: [probe, apiserver]}}
duration: 20s
calm: {calm}
invariants:
  - name: probe_matches_apiserver
expect: {{hardened: {expect}}}
"
    );
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("orrery-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn version_and_help_work_for_every_subcommand() {
    let version = orrery(&["--version"]);
    assert_eq!(code(&version), 0);
    assert!(text(&version).starts_with("orrery "), "{}", text(&version));
    let top = orrery(&["--help"]);
    assert_eq!(code(&top), 0);
    for documented in [
        "Exit codes",
        "3  unexpected safety violation",
        "check-determinism",
    ] {
        assert!(
            text(&top).contains(documented),
            "{documented}: {}",
            text(&top)
        );
    }
    for (sub, flag) in [
        (vec!["run"], "--seed"),
        (vec!["sweep"], "--seeds"),
        (vec!["check-determinism"], "--variant"),
        (vec!["reports"], "--scenarios"),
        (vec!["bench"], "--events"),
        (vec!["apiserver"], "--listen"),
        (vec!["serve", "control-plane"], "--admin-token"),
        (vec!["serve", "runtime"], "--durable-requests"),
        (vec!["serve", "cache"], "--listen"),
        (vec!["shrink"], "--invariant"),
        (vec!["buggify-points"], "Usage"),
    ] {
        let mut args = sub.clone();
        args.push("--help");
        let help = orrery(&args);
        assert_eq!(code(&help), 0, "{sub:?}: {}", text(&help));
        assert!(text(&help).contains(flag), "{sub:?} lacks {flag}");
    }
}

#[test]
fn usage_errors_exit_2_and_say_what_is_wrong() {
    let unknown = orrery(&["run", "x.yaml", "--bogus", "1"]);
    assert_eq!(code(&unknown), 2);
    assert!(text(&unknown).contains("--bogus"), "{}", text(&unknown));
    let missing = orrery(&["run", "/nonexistent/scenario.yaml"]);
    assert_eq!(code(&missing), 2);
    assert!(text(&missing).contains("/nonexistent/scenario.yaml"));
    let seeds = orrery(&["sweep", "x.yaml", "--seeds=9..3"]);
    assert_eq!(code(&seeds), 2);
    assert!(text(&seeds).contains("holds no seed"), "{}", text(&seeds));
    let inclusive = orrery(&["sweep", "x.yaml", "--seeds=5..=3"]);
    assert!(
        text(&inclusive).contains("holds no seed"),
        "{}",
        text(&inclusive)
    );
    let overflow = orrery(&["sweep", "x.yaml", "--seeds=1..=18446744073709551615"]);
    assert!(
        text(&overflow).contains("expected A..B"),
        "{}",
        text(&overflow)
    );
    let shard = orrery(&["sweep", "x.yaml", "--shard=2/2"]);
    assert_eq!(code(&shard), 2);
    assert!(text(&shard).contains("below N"), "{}", text(&shard));
    let variant = orrery(&["run", "x.yaml", "--variant", "sturdy"]);
    assert_eq!(code(&variant), 2);
    assert!(text(&variant).contains("faithful"), "{}", text(&variant));
}

#[test]
fn each_result_class_exits_with_its_own_code() {
    let dir = tempdir("codes");
    // 0: the expected pass, with --flag=value syntax.
    let pass = probe_world(&dir, "expected-pass", "20s", "pass");
    let out = orrery(&["run", &pass, "--seed=1", "--variant=hardened"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(line["result"], "pass");
    assert_eq!(line["expected"], true);
    // 1: an unexpected pass.
    let surprise = probe_world(&dir, "unexpected-pass", "20s", "safety_violation");
    assert_eq!(code(&orrery(&["run", &surprise])), 1);
    // 4: an unexpected liveness timeout (no calm phase to converge in).
    let stuck = probe_world(&dir, "unexpected-liveness", "0s", "pass");
    let out = orrery(&["run", &stuck]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    // ... and the same result where it is declared is 0.
    let declared = probe_world(&dir, "expected-liveness", "0s", "liveness_timeout");
    assert_eq!(code(&orrery(&["run", &declared])), 0);
    // A sweep exits with the highest class it saw among unexpected results.
    let sweep = orrery(&["sweep", &stuck, "--seeds", "1..=2", "--jobs", "2"]);
    assert_eq!(code(&sweep), 4, "{}", text(&sweep));
    assert!(text(&sweep).contains("first unexpected: seed 1"));
    // 5: two runs of one seed that differ (a test hook perturbs each process's trace).
    let nondeterministic = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["check-determinism", &pass])
        .env("ORRERY_TEST_NONDETERMINISM", "1")
        .output()
        .unwrap();
    assert_eq!(code(&nondeterministic), 5, "{}", text(&nondeterministic));
    assert_eq!(code(&orrery(&["check-determinism", &pass])), 0);
    // --slow: the second process sleeps real time before each step (run --real-delay-us);
    // the probe world reads no wall clock, so the hashes agree, and the line says so.
    let slowed = orrery(&["check-determinism", &pass, "--slow", "50"]);
    assert_eq!(code(&slowed), 0, "{}", text(&slowed));
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&slowed.stdout).trim()).unwrap();
    assert_eq!(line["slowed_us"], 50, "{line}");
    assert_eq!(line["trace_hashes"][0], line["trace_hashes"][1], "{line}");
}

#[test]
fn a_sweep_that_never_reaches_a_declared_condition_exits_6_and_says_which() {
    let dir = tempdir("reach");
    let path = probe_world(&dir, "reach", "20s", "pass");
    let reached = std::fs::read_to_string(&path).unwrap().replace(
        "invariants:",
        "reach: [watch_expired, {condition: queue_overflowed, variants: [faithful]}]\ninvariants:",
    );
    std::fs::write(&path, &reached).unwrap();
    // The probe world has no reporter: its queue never overflows, and with the default
    // compaction window no watch expires.
    let sweep = orrery(&["sweep", &path, "--seeds", "1..=2", "--jobs", "2"]);
    assert_eq!(code(&sweep), 6, "{}", text(&sweep));
    assert!(
        text(&sweep).contains("watch_expired                    0/2   NEVER REACHED"),
        "{}",
        text(&sweep)
    );
    assert!(
        !text(&sweep).contains("queue_overflowed"),
        "a condition declared for faithful only is not checked in a hardened sweep"
    );
    // Declared only where it is reached (every run's final line lists what it reached).
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&orrery(&["run", &path]).stdout).trim())
            .unwrap();
    assert!(
        line["reached"].is_array() && line["fault_points"].is_object(),
        "{line}"
    );
    // An unknown condition is refused where it is written.
    std::fs::write(&path, reached.replace("watch_expired", "watch_expird")).unwrap();
    let refused = orrery(&["run", &path]);
    assert_eq!(code(&refused), 2);
    assert!(
        text(&refused).contains("unknown reach condition \"watch_expird\""),
        "{}",
        text(&refused)
    );
}

#[test]
fn an_unexpected_safety_violation_exits_3() {
    // The faithful tunnel runs a retried write twice (see scenarios/tunnel-drop.yaml);
    // declared as a pass here, that is an unexpected safety violation.
    let dir = tempdir("safety");
    let original = format!(
        "{}/../scenarios/tunnel-drop.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text_in = std::fs::read_to_string(original).unwrap();
    let declared_pass = text_in.replace("faithful: safety_violation", "faithful: pass");
    assert_ne!(
        text_in, declared_pass,
        "tunnel-drop declares its faithful verdict"
    );
    let path = dir.join("tunnel-drop-pass.yaml");
    std::fs::write(&path, declared_pass).unwrap();
    let out = orrery(&["run", path.to_str().unwrap(), "--variant", "faithful"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    assert!(text(&out).contains("\"safety_violation\""));
}

#[test]
fn serve_logs_json_lines_and_stops_cleanly_on_sigterm() {
    let (tunnel, api) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args([
            "serve",
            "control-plane",
            &format!("--tunnel=127.0.0.1:{tunnel}"),
            &format!("--api=127.0.0.1:{api}"),
            "--log-format=json",
        ])
        .env("ORRERY_ADMIN_TOKEN", "adm") // the token from the environment
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Up once the client API accepts connections.
    eventually("the control plane listens", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", api)).is_ok()
    });
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "a clean stop exits 0");
    let logs = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["fields"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("SIGTERM")),
        "{logs}"
    );
}

#[test]
fn a_sweep_sharded_over_two_machines_merges_into_the_unsharded_sweeps_report() {
    let dir = tempdir("shards");
    let file = format!(
        "{}/../scenarios/swarm-tunnel.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let whole = dir.join("whole");
    let unsharded = orrery(&[
        "sweep",
        &file,
        "--seeds",
        "1..4",
        "--jobs",
        "2",
        "--report",
        whole.to_str().unwrap(),
    ]);
    // Three seeds never crash the runtime mid-write, a condition the family declares: exit 6,
    // as the merged shards must say too.
    assert_eq!(code(&unsharded), 6, "{}", text(&unsharded));
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let first = orrery(&[
        "sweep",
        &file,
        "--seeds",
        "1..4",
        "--shard",
        "0/2",
        "--results",
        a.to_str().unwrap(),
    ]);
    // A shard that ran its seeds succeeded: its findings are judged when merged.
    assert_eq!(code(&first), 0, "{}", text(&first));
    // The second as a pod of an Indexed Job: its index from the environment.
    let second = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args([
            "sweep",
            &file,
            "--seeds",
            "1..4",
            "--shard",
            "env/2",
            "--results",
        ])
        .arg(&b)
        .env("JOB_COMPLETION_INDEX", "1")
        .output()
        .unwrap();
    assert_eq!(code(&second), 0, "{}", text(&second));
    let lines = |p: &PathBuf| std::fs::read_to_string(p).unwrap().lines().count();
    // A header, then one line per run: seeds 1..3 are split 2 + 1 over both variants.
    assert_eq!((lines(&a), lines(&b)), (1 + 4, 1 + 2));
    // Only one shard: the merge names what is missing.
    let merged = dir.join("merged");
    let partial = orrery(&[
        "merge",
        a.to_str().unwrap(),
        "--report",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(code(&partial), 2);
    assert!(text(&partial).contains("faithful 3"), "{}", text(&partial));
    // The same shard twice: refused, not counted twice.
    let twice = orrery(&[
        "merge",
        a.to_str().unwrap(),
        a.to_str().unwrap(),
        "--report",
        merged.to_str().unwrap(),
    ]);
    assert!(text(&twice).contains("ran twice"), "{}", text(&twice));
    let both = orrery(&[
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--report",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(code(&both), 6, "{}", text(&both));
    assert!(text(&both).contains("runtime_crashed_mid_write        0/3   NEVER REACHED"));
    let mut files: Vec<String> = std::fs::read_dir(&whole)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(files.contains(&"sweep.json".to_string()) && files.iter().any(|f| f.ends_with(".svg")));
    for name in files {
        assert_eq!(
            std::fs::read(whole.join(&name)).unwrap(),
            std::fs::read(merged.join(&name)).unwrap(),
            "{name}: merged shards give the unsharded report"
        );
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(whole.join("sweep.json")).unwrap()).unwrap();
    assert!(
        !report.to_string().contains("wall"),
        "no wall-clock figure in a sweep report"
    );
    let not_results = orrery(&["merge", file.as_str(), "--report", merged.to_str().unwrap()]);
    assert!(
        text(&not_results).contains("not a results file"),
        "{}",
        text(&not_results)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 53: every limit is named, listed with its default, settable, and documented.
#[test]
fn limits_are_listed_documented_and_a_bad_one_is_a_usage_error() {
    let listed = orrery(&["limits"]);
    assert_eq!(code(&listed), 0, "{}", text(&listed));
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listing.contains("events.gzip-ratio\t100\t"), "{listing}");
    assert!(
        listing.contains("http.connections-per-peer\t256\t"),
        "{listing}"
    );
    let docs = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/real-mode.md"),
    )
    .expect("docs/real-mode.md");
    for line in listing.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 4, "{line}");
        let (name, default) = (fields[0], fields[1]);
        assert!(
            docs.lines()
                .any(|row| row.contains(&format!("`{name}`"))
                    && row.contains(&format!("| {default} |"))),
            "docs/real-mode.md has no row for the limit {name} with its default {default}"
        );
    }
    for (args, says) in [
        (
            vec!["serve", "cache", "--limit", "cache.line=lots"],
            "--limit cache.line=\"lots\": \"lots\" is not a size in bytes",
        ),
        (
            vec!["serve", "cache", "--limit", "cache.lines=1"],
            "no limit is called \"cache.lines\"",
        ),
        (
            vec![
                "serve",
                "cache",
                "--limit",
                "cache.line=2KiB",
                "--limit",
                "cache.line=4KiB",
            ],
            "--limit cache.line is given twice",
        ),
        (
            vec!["serve", "cache", "--limit", "tunnel.message=64KiB"],
            "at least 1MiB (runtimes send messages of up to 1 MiB)",
        ),
        (
            vec![
                "serve",
                "control-plane",
                "--admin-token",
                "t",
                "--tunnel-handshake-timeout",
                "5s",
                "--limit",
                "tunnel.handshake-timeout=5s",
            ],
            "both given",
        ),
    ] {
        let refused = orrery(&args);
        assert_eq!(code(&refused), 2, "{args:?}: {}", text(&refused));
        assert!(
            text(&refused).contains(says),
            "{args:?}: {}",
            text(&refused)
        );
    }
}
