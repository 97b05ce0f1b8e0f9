//! Every committed input — the seed corpora and the regressions of past findings — runs
//! through its target without a finding, and every target has a corpus.

use std::path::{Path, PathBuf};

use orrery_conformance::script::Step;
use orrery_fuzz::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The files of `dir`, sorted (none if it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every input of `target`'s corpus and regressions; the files that were findings.
fn replay(target: &orrery_fuzz::Target) -> (usize, Vec<String>) {
    let mut inputs = files(&fuzz_dir().join("corpus").join(target.name));
    inputs.extend(files(&fuzz_dir().join("regressions").join(target.name)));
    let mut failed = Vec::new();
    for path in &inputs {
        let data = std::fs::read(path).expect("a corpus file");
        if std::panic::catch_unwind(|| (target.run)(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    (inputs.len(), failed)
}

#[test]
fn every_committed_input_runs_through_its_target_without_a_finding() {
    let (mut failed, mut seedless) = (Vec::new(), Vec::new());
    for target in TARGETS {
        let (count, mut bad) = replay(target);
        if count == 0 {
            seedless.push(target.name);
        }
        failed.append(&mut bad);
    }
    assert!(
        seedless.is_empty(),
        "targets without seeds in fuzz/corpus/: {seedless:?}"
    );
    assert!(
        failed.is_empty(),
        "findings (replay one with `make fuzz-replay INPUT=FILE`): {failed:#?}"
    );
}

#[test]
fn every_corpus_folder_names_a_target() {
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(dir)) else {
            continue;
        };
        for entry in entries {
            let name = entry.expect("an entry").file_name();
            let name = name.to_string_lossy();
            assert!(
                orrery_fuzz::target(&name).is_some(),
                "fuzz/{dir}/{name} is no target's"
            );
        }
    }
}

/// The API server's seeds are the conformance scripts' requests (the ones real
/// kube-apiserver answered as the simulated one does), one file per step.
fn apiserver_seeds() -> Vec<(String, String)> {
    let mut seeds = Vec::new();
    for script in orrery_conformance::library::scripts() {
        for (i, step) in script.steps.iter().enumerate() {
            let text = match step {
                Step::Call {
                    method,
                    path,
                    content_type,
                    body,
                    user,
                } => {
                    let mut text = format!("{method} {}\n", fill(path));
                    if let Some(content_type) = content_type {
                        text.push_str(&format!("content-type: {content_type}\n"));
                    }
                    if let Some(user) = user {
                        text.push_str(&format!("impersonate-user: {user}\n"));
                    }
                    if let Some(body) = body {
                        text.push('\n');
                        text.push_str(&fill(body));
                    }
                    text
                }
                Step::Watch { path } => {
                    let sep = if path.contains('?') { '&' } else { '?' };
                    format!("GET {}{sep}watch=true&timeoutSeconds=1\n", fill(path))
                }
                Step::Pause { .. } => continue,
            };
            seeds.push((format!("{}-{i}", script.name), text));
        }
    }
    seeds
}

/// A script's placeholders with fixed values (`{ns}` → `fuzz`, `{rv:N}` → `1`,
/// `{continue:N}` → empty).
fn fill(text: &str) -> String {
    let mut out = text.replace("{ns}", "fuzz");
    for (open, value) in [("{rv:", "1"), ("{continue:", "")] {
        while let Some(at) = out.find(open) {
            let end = out[at..].find('}').map_or(out.len(), |e| at + e + 1);
            out.replace_range(at..end, value);
        }
    }
    out
}

#[test]
fn the_apiserver_corpus_is_the_conformance_scripts_requests() {
    let dir = fuzz_dir().join("corpus/apiserver");
    let seeds = apiserver_seeds();
    if std::env::var_os("ORRERY_UPDATE_CORPUS").is_some() {
        std::fs::create_dir_all(&dir).expect("the corpus folder");
        for (name, text) in &seeds {
            std::fs::write(dir.join(name), text).expect("a seed");
        }
    }
    assert!(seeds.len() > 100, "{} seeds", seeds.len());
    for (name, text) in &seeds {
        let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        assert_eq!(
            &committed, text,
            "fuzz/corpus/apiserver/{name} is not the conformance step's request; run ORRERY_UPDATE_CORPUS=1 make test"
        );
    }
}

/// `ORRERY_FUZZ_INPUT=FILE [ORRERY_FUZZ_TARGET=NAME]`: runs one input (a crash AFL++ saved)
/// with the panic's message; the target is the file's folder name unless named.
#[test]
#[ignore = "a tool: `make fuzz-replay INPUT=FILE`"]
fn replay_one_input_named_in_the_environment() {
    let file = std::env::var_os("ORRERY_FUZZ_INPUT").expect("ORRERY_FUZZ_INPUT=FILE");
    let file = PathBuf::from(file);
    let name = std::env::var("ORRERY_FUZZ_TARGET").ok().unwrap_or_else(|| {
        // AFL++ keeps crashes in <out>/<target>/default/crashes/.
        file.ancestors()
            .filter_map(|a| a.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .find(|n| orrery_fuzz::target(n).is_some())
            .expect("ORRERY_FUZZ_TARGET=NAME (the file's path names no target)")
    });
    let target = orrery_fuzz::target(&name).expect("a target name");
    (target.run)(&std::fs::read(&file).expect("ORRERY_FUZZ_INPUT is a readable file"));
}
