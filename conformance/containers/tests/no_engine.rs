//! Without a Docker engine the tool fails at once, says so and how to go on, and never runs
//! the command (this machine's case: the Docker client is here, no engine is).

use std::path::PathBuf;
use std::process::Command;

/// The tool cargo built for this test. (`env!` of its variable fails under clippy-driver, as
/// make conformance builds it, for a name with a hyphen: found beside the test instead.)
fn tool() -> PathBuf {
    option_env!("CARGO_BIN_EXE_orrery-containers")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let test = std::env::current_exe().unwrap();
            test.parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("orrery-containers")
        })
}

#[test]
fn no_engine_is_a_clear_error_and_the_command_does_not_run() {
    let scratch = std::env::temp_dir().join(format!("orrery-containers-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let marker = scratch.join("ran");
    let output = Command::new(tool())
        .args(["--redis", "--", "touch"])
        .arg(&marker)
        .env(
            "DOCKER_HOST",
            format!("unix://{}/no-docker.sock", scratch.display()),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no Docker engine answered"), "{stderr}");
    assert!(stderr.contains("no-docker.sock"), "{stderr}");
    assert!(stderr.contains("ORRERY_CONTAINERS=off"), "{stderr}");
    assert!(!marker.exists(), "the command ran without its services");
    std::fs::remove_dir_all(&scratch).unwrap();
}

#[test]
fn a_bad_command_line_is_refused_before_docker_is_asked() {
    let output = Command::new(tool())
        .args(["--postgres", "--k3s"])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--k3s needs a directory"), "{stderr}");
    assert!(!stderr.contains("Docker engine"), "{stderr}");
}
