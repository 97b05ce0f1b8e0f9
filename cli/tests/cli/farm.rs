//! `orrery farm`: a failure the farm finds is shrunk and written as a regression scenario
//! automatically, and found again it is known, not new; a sharded farm run merges into the
//! same runs as the unsharded one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scenario_path(name: &str) -> String {
    format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("orrery-farm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn orrery(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orrery"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn farm_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("farm.json")).unwrap()).unwrap()
}

/// A planted failure: tunnel-drop with faithful declared to pass. Faithful's tunnel client
/// runs a write twice when the tunnel drops mid-write (its declared flaw), so at the farm's
/// new seed the run is not as declared; the farm shrinks it into regressions/ and the file
/// replays as it declares. A second farm run finds the same failure at the next seed: known,
/// no second file.
#[test]
fn a_planted_failure_is_shrunk_into_a_regression_scenario_and_known_the_second_time() {
    let dir = scratch("planted");
    let original = std::fs::read_to_string(scenario_path("tunnel-drop.yaml")).unwrap();
    let planted = original.replace("faithful: safety_violation", "faithful: pass");
    assert_ne!(planted, original, "the plant took");
    std::fs::write(dir.join("planted.yaml"), planted).unwrap();
    let farm = |run_id: &str| {
        orrery(
            &dir,
            &[
                "farm",
                "planted.yaml",
                "--policy",
                "uniform",
                "--seeds-per-arm",
                "1",
                "--db",
                "farm/db.jsonl",
                "--report",
                "report",
                "--regressions",
                "regressions",
                "--run-id",
                run_id,
            ],
        )
    };
    let first = farm("first");
    // An unexpected safety violation: the farm's exit says so.
    assert_eq!(first.status.code(), Some(3), "{}", text(&first));
    let written: Vec<PathBuf> = std::fs::read_dir(dir.join("regressions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}\n{}", text(&first));
    let regression = &written[0];
    assert_eq!(
        regression.file_name().unwrap().to_str().unwrap(),
        "tunnel-drop-2-faithful.yaml"
    );
    let yaml = std::fs::read_to_string(regression).unwrap();
    assert!(
        yaml.starts_with("# Found by orrery farm (run first)"),
        "{yaml}"
    );
    assert!(yaml.contains("faithful: safety_violation"), "{yaml}");
    let replay = orrery(
        &dir,
        &["run", regression.to_str().unwrap(), "--variant", "faithful"],
    );
    let line: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&replay.stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line["failure"], "executed_at_most_once", "{line}");
    assert_eq!(
        line["expected"], true,
        "the file holds its own expect: {line}"
    );
    let report = farm_json(&dir.join("report"));
    assert_eq!(report["failures"][0]["status"], "new: shrunk", "{report}");
    assert_eq!(report["unexpected"], 1, "{report}");
    let md = std::fs::read_to_string(dir.join("report/README.md")).unwrap();
    assert!(md.contains("tunnel-drop-2-faithful.yaml"), "{md}");

    let second = farm("second");
    assert_eq!(second.status.code(), Some(3), "{}", text(&second));
    let report = farm_json(&dir.join("report"));
    assert_eq!(report["failures"][0]["seed"], 3, "the next seed: {report}");
    assert_eq!(
        report["failures"][0]["status"], "known (same shape as an earlier failure)",
        "{report}"
    );
    assert_eq!(
        std::fs::read_dir(dir.join("regressions")).unwrap().count(),
        1,
        "no second file for a known failure"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two shards of one farm run (`--shard 0/2`, `--shard 1/2`, separate databases) merged with
/// `orrery farm-merge` hold the same runs, with the same results and trace hashes, as the
/// unsharded run.
#[test]
fn two_shards_merged_are_the_unsharded_run() {
    let dir = scratch("shards");
    std::fs::copy(scenario_path("swarm-tunnel.yaml"), dir.join("st.yaml")).unwrap();
    let farm = |db: &str, shard: Option<&str>| {
        let mut args = vec![
            "farm",
            "st.yaml",
            "--policy",
            "uniform",
            "--seeds-per-arm",
            "4",
            "--db",
            db,
            "--report",
            "unused",
            "--run-id",
            "nightly-7",
        ];
        if let Some(s) = shard {
            args.extend(["--shard", s]);
        }
        let out = orrery(&dir, &args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    };
    farm("whole.jsonl", None);
    let whole = farm_json(&dir.join("unused"));
    farm("a.jsonl", Some("0/2"));
    farm("b.jsonl", Some("1/2"));
    let merged = orrery(
        &dir,
        &[
            "farm-merge",
            "a.jsonl",
            "b.jsonl",
            "--db",
            "merged.jsonl",
            "--report",
            "merged",
            "--scenarios",
            ".",
        ],
    );
    assert!(merged.status.success(), "{}", text(&merged));
    let shards = farm_json(&dir.join("merged"));
    assert_eq!(whole["runs"], 8, "4 seeds × 2 variants: {whole}");
    assert_eq!(shards["runs"], whole["runs"]);
    assert_eq!(
        shards["runs_fnv"], whole["runs_fnv"],
        "same runs, results and traces"
    );
    assert_eq!(shards["shards"], serde_json::json!(["0/2", "1/2"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A farm with no budget is refused with the flags that give one.
#[test]
fn a_farm_without_a_budget_says_how_to_give_one() {
    let dir = scratch("nobudget");
    let out = orrery(&dir, &["farm", &scenario_path("tunnel-drop.yaml")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("--budget 90m"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run that reaches a condition rarer than 1 % of its file's seeds becomes a parent: its
/// mutants run at its seed, in hardened (the variant swarm-tunnel declares to pass), and are
/// recorded as mutants. The database is primed with 100 earlier seeds that reached nothing,
/// so whatever the farm's one new seed reaches is rare.
#[test]
fn a_rare_run_is_mutated_and_its_children_are_recorded() {
    let dir = scratch("mutants");
    let family = std::fs::read_to_string(scenario_path("swarm-tunnel.yaml")).unwrap();
    std::fs::write(dir.join("st.yaml"), &family).unwrap();
    let fnv = orrery_sim::report::scenario_fnv(&family);
    let mut primed = String::new();
    for seed in 1000..1100 {
        primed.push_str(&serde_json::json!({"kind": "run", "session": "earlier", "scenario": "swarm-tunnel", "file": "st.yaml", "scenario_fnv": fnv, "binary": "b", "seed": seed, "variant": "hardened", "origin": "seed", "result": "pass", "expected": true, "violations": [], "failure": null, "reached": [], "fault_points": {}, "cpu_seconds": 0.3, "trace_hash": "h"}).to_string());
        primed.push('\n');
    }
    std::fs::write(dir.join("db.jsonl"), primed).unwrap();
    let out = orrery(
        &dir,
        &[
            "farm",
            "st.yaml",
            "--policy",
            "uniform",
            "--seeds-per-arm",
            "1",
            "--db",
            "db.jsonl",
            "--report",
            "report",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let db = std::fs::read_to_string(dir.join("db.jsonl")).unwrap();
    let mutants: Vec<serde_json::Value> = db
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["origin"] == "mutant")
        .collect();
    assert_eq!(mutants.len(), 4, "four children of the rare run: {db}");
    for m in &mutants {
        assert_eq!(m["variant"], "hardened");
        assert_eq!(
            m["seed"], 1100,
            "at the parent's seed (the first after the primed ones)"
        );
        assert_eq!(m["parent_seed"], 1100);
        assert!(dir.join(m["file"].as_str().unwrap()).exists(), "{m}");
        assert_eq!(
            m["expected"], true,
            "hardened holds in the mutated worlds: {m}"
        );
    }
    let report = farm_json(&dir.join("report"));
    assert_eq!(report["mutation"]["mutant_runs"], 4, "{report}");
    assert_eq!(report["seed_runs"], 2, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
