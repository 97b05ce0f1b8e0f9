//! The simulated Git provider against real `git`: the same history (a root commit, a
//! feature branch merged with a merge commit, commits on both sides) is built in both, and
//! `rev-list --ancestry-path` and `diff-tree --no-commit-id --name-only -r` must answer
//! alike for every pair and commit the repo-server asks about. Commits are matched by
//! message; committer dates increase so real git's newest-first order is defined.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use orrery_sim::world::git::Git;

const REPO: &str = "https://git.example/org/mono.git";

fn git(dir: &Path, args: &[&str], step: u64) -> String {
    let date = format!("{} +0000", 1_700_000_000 + step * 60);
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_DATE", &date)
        .env("GIT_AUTHOR_NAME", "Dev")
        .env("GIT_AUTHOR_EMAIL", "dev@example.com")
        .env("GIT_COMMITTER_NAME", "Dev")
        .env("GIT_COMMITTER_EMAIL", "dev@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One step of the shared history.
enum Step {
    Commit(&'static str, &'static str, &'static [&'static str]),
    Merge(&'static str, &'static str),
}

const HISTORY: &[Step] = &[
    Step::Commit("main", "root", &["README.md"]),
    Step::Commit("main", "c1", &["apps/x/d.yaml", "apps/y/d.yaml"]),
    Step::Commit("feature", "f1", &["apps/x/d.yaml"]),
    Step::Commit("main", "c2", &["apps/y/d.yaml"]),
    Step::Commit("feature", "f2", &["apps/z/new.yaml"]),
    Step::Merge("feature", "m1"),
    Step::Commit("main", "c3", &["apps/x/d.yaml"]),
    Step::Commit("main", "c4", &["apps/y/d.yaml", "apps/y/sub/e.yaml"]),
];

/// The shared history built in a real repository at `dir` and in a simulated provider:
/// message → (real SHA, simulated SHA).
fn build(dir: &Path) -> (Git, BTreeMap<&'static str, (String, String)>) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"], 0);
    let mut sim = Git::default();
    let mut shas: BTreeMap<&str, (String, String)> = BTreeMap::new();
    let mut branch = "main".to_string();
    for (step, entry) in HISTORY.iter().enumerate() {
        let step = step as u64 + 1;
        match entry {
            Step::Commit(on, message, files) => {
                if *on != branch {
                    let exists = git(dir, &["branch", "--list", on], step);
                    if exists.is_empty() {
                        git(dir, &["checkout", "-q", "-b", on], step);
                    } else {
                        git(dir, &["checkout", "-q", on], step);
                    }
                    branch = on.to_string();
                }
                let mut changes = BTreeMap::new();
                for file in *files {
                    let path = dir.join(file);
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    let content = format!("{message} wrote {file}\n");
                    std::fs::write(&path, &content).unwrap();
                    git(dir, &["add", file], step);
                    changes.insert(file.to_string(), content);
                }
                git(dir, &["commit", "-q", "-m", message], step);
                let real = git(dir, &["rev-parse", "HEAD"], step);
                let simulated = sim.commit_on(REPO, on, "Dev", message, step, changes);
                shas.insert(message, (real, simulated));
            }
            Step::Merge(from, message) => {
                git(dir, &["checkout", "-q", "main"], step);
                branch = "main".into();
                git(dir, &["merge", "-q", "--no-ff", "-m", message, from], step);
                let real = git(dir, &["rev-parse", "HEAD"], step);
                let simulated = sim.merge(REPO, from, "Dev", message, step).unwrap();
                shas.insert(message, (real, simulated));
            }
        }
    }
    (sim, shas)
}

#[test]
fn rev_list_and_diff_tree_answer_as_real_git() {
    let dir = std::env::temp_dir().join(format!("orrery-git-{}", std::process::id()));
    let (sim, shas) = build(&dir);
    let by_real: BTreeMap<&str, &str> = shas.iter().map(|(m, (r, _))| (r.as_str(), *m)).collect();
    let by_sim: BTreeMap<&str, &str> = shas.iter().map(|(m, (_, s))| (s.as_str(), *m)).collect();
    let names = |list: Vec<&str>, map: &BTreeMap<&str, &str>| -> Vec<String> {
        list.iter()
            .map(|sha| map.get(sha).copied().unwrap_or(sha).to_string())
            .collect()
    };
    let messages: Vec<&str> = shas.keys().copied().collect();
    let mut compared = 0;
    for from in &messages {
        for to in &messages {
            let (real_from, sim_from) = &shas[from];
            let (real_to, sim_to) = &shas[to];
            let range = format!("{real_from}..{real_to}");
            let real = git(&dir, &["rev-list", "--ancestry-path", &range], 99);
            let real = names(real.lines().collect(), &by_real);
            let simulated = sim.rev_list_ancestry_path(REPO, sim_from, sim_to).unwrap();
            let simulated = names(simulated.iter().map(String::as_str).collect(), &by_sim);
            assert_eq!(simulated, real, "rev-list --ancestry-path {from}..{to}");
            let ancestor = |a: &str, b: &str| {
                Command::new("git")
                    .args(["merge-base", "--is-ancestor", a, b])
                    .current_dir(&dir)
                    .status()
                    .expect("git runs")
                    .success()
            };
            let real_status = if real_from == real_to {
                "identical"
            } else if ancestor(real_from, real_to) {
                "ahead"
            } else if ancestor(real_to, real_from) {
                "behind"
            } else {
                "diverged"
            };
            assert_eq!(
                sim.compare(REPO, sim_from, sim_to),
                Some(real_status),
                "compare {from}...{to}"
            );
            compared += 1;
        }
        let (real, simulated) = &shas[from];
        let real_files = git(
            &dir,
            &["diff-tree", "--no-commit-id", "--name-only", "-r", real],
            99,
        );
        let real_files: Vec<&str> = real_files.lines().collect();
        // Every file's content at this commit (a branch commit reads through its fork
        // point; a merge carries what its branch wrote), as `git show <sha>:<path>`.
        for path in [
            "README.md",
            "apps/x/d.yaml",
            "apps/y/d.yaml",
            "apps/z/new.yaml",
        ] {
            let shown = Command::new("git")
                .args(["show", &format!("{real}:{path}")])
                .current_dir(&dir)
                .output()
                .expect("git runs");
            let real_content = shown
                .status
                .success()
                .then(|| String::from_utf8_lossy(&shown.stdout).into_owned());
            assert_eq!(
                sim.file_at(REPO, simulated, path),
                Some(real_content),
                "{path} at {from}"
            );
        }
        assert_eq!(
            sim.diff_tree(REPO, simulated).unwrap(),
            real_files,
            "diff-tree {from}"
        );
    }
    assert_eq!(compared, messages.len() * messages.len());
    // The merge and the root list nothing, as real git answers.
    assert!(sim.diff_tree(REPO, &shas["m1"].1).unwrap().is_empty());
    assert!(sim.diff_tree(REPO, &shas["root"].1).unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A turmoil world of `duration` whose host `git` serves `shared`'s provider API on port 80,
/// with the trace its clients write to.
fn provider_world(
    shared: &orrery_sim::world::git::SharedGit,
    duration: std::time::Duration,
) -> (turmoil::Sim<'static>, orrery_sim::trace::Trace) {
    use orrery_sim::env::SimEnv;

    let mut w = crate::support::sim(duration);
    let trace = orrery_sim::trace::Trace::default();
    let (host_git, host_trace) = (shared.clone(), trace.clone());
    w.host("git", move || {
        let env = SimEnv::shared("git", crate::support::SEED, host_trace.clone());
        let git = host_git.clone();
        async move {
            orrery_sim::world::git::serve(env, git, "0.0.0.0:80").await?;
            Ok(())
        }
    });
    (w, trace)
}

/// The provider's HTTP API over turmoil: the newest commit touching a path from a revision,
/// then its rate limits (a secondary 429 with `retry-after` and `x-ratelimit-reset`, the
/// window's end; GitHub's primary 403 with the `x-ratelimit-*` headers, read by the
/// runtime's client as its wait) and an outage (503), as the `git` fault sets them.
#[test]
fn the_provider_api_finds_touching_commits_and_answers_rate_limits_and_outages() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use orrery_sim::env::SimEnv;
    use orrery_sim::world::git::SharedGit;
    use orrery_system::env::SharedEnv;
    use std::time::Duration;

    use crate::support::SEED;

    let shared = SharedGit::default();
    let (base, x) = {
        let mut git = shared.lock();
        let base = git.commit(
            REPO,
            "a",
            "base",
            0,
            files(&["apps/x/d.yaml", "apps/y/d.yaml"]),
        );
        let x = git.commit(REPO, "a", "x", 1, files(&["apps/x/d.yaml"]));
        git.commit(REPO, "a", "y", 2, files(&["apps/y/d.yaml"]));
        (base, x)
    };
    let head = shared.lock().head(REPO).unwrap().sha.clone();
    let (mut w, trace) = provider_world(&shared, Duration::from_secs(120));
    let knobs = shared.clone();
    w.client("runtime", async move {
        let env: SharedEnv = SimEnv::shared("runtime", SEED, trace.clone());
        let client =
            orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(20));
        let get = |sha: &str, paths: &str| {
            let uri = format!(
                "http://git:80/api/commits?repo={}&sha={sha}&paths={paths}",
                REPO.replace(':', "%3A").replace('/', "%2F")
            );
            client.request(
                http::Request::get(uri)
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
        };
        let body = |r: http::Response<hyper::body::Incoming>| async move {
            let bytes = r.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
        };
        // From the head, x's directory was last touched by x; nothing touched apps/z.
        let found = get(&head, "apps%2Fx").await?;
        assert_eq!(found.status(), 200);
        assert_eq!(
            body(found).await,
            serde_json::json!([{"sha": x, "message": "x"}])
        );
        let none = get(&head, "apps%2Fz").await?;
        assert_eq!(body(none).await, serde_json::json!([]));
        assert_eq!(get(&"0".repeat(40), "apps%2Fx").await?.status(), 404);
        // Two calls a minute: the third is refused until the window ends.
        knobs.lock().serving.rate_limit = 2;
        assert_eq!(get(&base, "apps%2Fx").await?.status(), 200);
        assert_eq!(get(&base, "apps%2Fx").await?.status(), 200);
        let limited = get(&base, "apps%2Fx").await?;
        assert_eq!(limited.status(), 429);
        let header = |name: &str| {
            limited.headers()[name]
                .to_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let (retry, reset) = (header("retry-after"), header("x-ratelimit-reset"));
        assert!(retry > 0 && retry <= 60, "retry-after {retry}");
        assert_eq!(limited.headers()["x-ratelimit-remaining"], "0");
        env.sleep(Duration::from_secs(retry)).await;
        assert!(env.unix_millis() / 1000 >= reset);
        assert_eq!(get(&base, "apps%2Fx").await?.status(), 200);
        // GitHub's primary limit: three calls an hour, each answer counting them down, then
        // 403 until the hour is over — which the runtime's client reads as its wait.
        knobs.lock().serving = Default::default();
        knobs.lock().serving.hourly_limit = 3;
        let mut remaining = Vec::new();
        for _ in 0..3 {
            let answer = get(&base, "apps%2Fx").await?;
            assert_eq!(answer.status(), 200);
            assert_eq!(answer.headers()["x-ratelimit-limit"], "3");
            assert_eq!(answer.headers()["x-ratelimit-resource"], "core");
            remaining.push(answer.headers()["x-ratelimit-remaining"].clone());
        }
        assert_eq!(remaining, ["2", "1", "0"]);
        let exhausted = get(&base, "apps%2Fx").await?;
        assert_eq!(exhausted.status(), 403);
        assert_eq!(exhausted.headers()["x-ratelimit-remaining"], "0");
        assert_eq!(exhausted.headers()["x-ratelimit-used"], "3");
        assert!(exhausted.headers().get("retry-after").is_none());
        let reset: u64 = exhausted.headers()["x-ratelimit-reset"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let message = body(exhausted).await["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.starts_with("API rate limit exceeded"), "{message}");
        let api = orrery_system::runtime::upstream::Client::new(
            env.clone(),
            "git:80",
            Duration::from_secs(5),
        );
        let refused = api
            .get(
                format!(
                    "/api/commits?repo={}&sha={base}&paths=apps%2Fx",
                    REPO.replace(':', "%3A").replace('/', "%2F")
                ),
                None,
            )
            .await
            .unwrap_err();
        let wait = refused.retry_after().expect("the reset is the wait");
        assert_eq!(
            Duration::from_millis(env.unix_millis()) + wait,
            Duration::from_secs(reset)
        );
        assert!(wait > Duration::from_secs(3000), "{wait:?}");
        // An outage answers 503 whatever the limit.
        knobs.lock().serving = Default::default();
        knobs.lock().serving.outage = true;
        assert_eq!(get(&base, "apps%2Fx").await?.status(), 503);
        Ok(())
    });
    w.run().unwrap();
}

fn files(entries: &[&str]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|f| (f.to_string(), format!("{f} content")))
        .collect()
}

/// The provider API's one history question — the newest commit from a revision along first
/// parents touching an app's refresh paths — asked of the simulated provider and of real
/// `git` behind `orrery serve git` (`real_git`), for every commit of the shared history and
/// paths of every kind the annotation allows (directories, a file, a glob, several, the
/// root): the answers must name the same commits. Then `orrery serve git`'s HTTP API on
/// loopback: the answer, a commit through `POST /api/commits`, and its refusals.
#[test]
fn the_provider_api_answers_as_real_git_behind_orrery_serve_git() {
    let dir = std::env::temp_dir().join(format!("orrery-real-git-{}", std::process::id()));
    let (sim, shas) = build(&dir);
    let by_real: BTreeMap<&str, &str> = shas.iter().map(|(m, (r, _))| (r.as_str(), *m)).collect();
    let by_sim: BTreeMap<&str, &str> = shas.iter().map(|(m, (_, s))| (s.as_str(), *m)).collect();
    let path_sets: &[&[&str]] = &[
        &["/apps/x"],
        &["/apps/y"],
        &["/apps/y/sub"],
        &["/apps/z"],
        &["/apps/x/d.yaml"],
        &["/apps/*/d.yaml"],
        &["/apps/x", "/apps/z"],
        &["/README.md"],
        &["/"],
        &["/nothing"],
    ];
    let mut compared = 0;
    for (message, (real, simulated)) in &shas {
        for paths in path_sets {
            let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
            let from_real = orrery_cli::commands::serve::git::newest_touching(&dir, real, &paths)
                .unwrap()
                .map(|sha| by_real[sha.as_str()].to_string());
            let from_sim = sim
                .newest_touching(REPO, simulated, &paths)
                .map(|c| by_sim[c.sha.as_str()].to_string());
            assert_eq!(
                from_sim, from_real,
                "newest touching {paths:?} from {message}"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, shas.len() * path_sets.len());

    // The HTTP API on loopback, with a commit made through it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let env: orrery_system::env::SharedEnv =
            std::sync::Arc::new(orrery_system::env::RealEnv::new("git"));
        let repos = BTreeMap::from([(REPO.to_string(), dir.clone())]);
        let addr = format!("127.0.0.1:{port}");
        let server = tokio::spawn({
            let (env, addr) = (env.clone(), addr.clone());
            async move { orrery_cli::commands::serve::git::serve(env, repos, &addr).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let client = orrery_system::env::http::client::<http_body_util::Full<bytes::Bytes>>(
            env,
            std::time::Duration::from_secs(10),
        );
        let call = |method: &str, path: String, body: serde_json::Value| {
            let request = http::Request::builder()
                .method(method)
                .uri(format!("http://{addr}{path}"))
                .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
                .unwrap();
            let client = &client;
            async move {
                let response = client.request(request).await.expect("answered");
                let status = response.status().as_u16();
                let body = http_body_util::BodyExt::collect(response.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                (status, serde_json::from_slice::<serde_json::Value>(&body).unwrap_or_default())
            }
        };
        let q = orrery_system::env::http::query_escape;
        let c4 = &shas["c4"].0;
        let (status, body) = call("GET", format!("/api/commits?repo={}&sha={c4}&paths={}", q(REPO), q("/apps/x")), serde_json::Value::Null).await;
        assert_eq!((status, body[0]["sha"].as_str()), (200, Some(shas["c3"].0.as_str())), "{body}");
        let (status, body) = call("GET", format!("/api/commits?repo={}&sha={}&paths=%2Fnothing", q(REPO), "0".repeat(40)), serde_json::Value::Null).await;
        assert_eq!(status, 404, "an unknown commit: {body}");
        let (status, body) = call("GET", "/api/repos".into(), serde_json::Value::Null).await;
        assert_eq!((status, body["repositories"][0].as_str()), (200, Some(REPO)));
        git(&dir, &["checkout", "-q", "main"], 100);
        let (status, body) = call(
            "POST",
            "/api/commits".into(),
            serde_json::json!({"repo": REPO, "path": "apps/w/new.yaml", "content": "kind: Deployment\n", "message": "add w", "author": "alice"}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let head = git(&dir, &["log", "-1", "--format=%H %an %s"], 100);
        assert_eq!(head, format!("{} alice add w", body["sha"].as_str().unwrap()));
        let (status, body) = call(
            "POST",
            "/api/commits".into(),
            serde_json::json!({"repo": REPO, "path": "../outside.yaml", "content": "x"}),
        )
        .await;
        assert_eq!(status, 400, "a path outside the repository is refused: {body}");
        assert!(body["error"].as_str().unwrap().contains("not inside the repository"));
        // Nor may a request write git's own files or follow a link out of the worktree.
        std::os::unix::fs::symlink(std::env::temp_dir(), dir.join("link")).unwrap();
        for path in [".git/config", "link/escaped.yaml"] {
            let (status, body) = call(
                "POST",
                "/api/commits".into(),
                serde_json::json!({"repo": REPO, "path": path, "content": "[core]\n\tfsmonitor = touch /tmp/pwned\n"}),
            )
            .await;
            assert_eq!(status, 400, "{path}: {body}");
        }
        assert!(!std::env::temp_dir().join("escaped.yaml").exists());
        // A file's content and blob SHA; a write that names a stale blob is refused with
        // 409 and commits nothing; the current blob commits, even with the same content.
        let (status, body) = call("GET", format!("/api/contents?repo={}&path=apps/w/new.yaml", q(REPO)), serde_json::Value::Null).await;
        assert_eq!((status, body["content"].as_str()), (200, Some("kind: Deployment\n")), "{body}");
        let blob = body["sha"].as_str().unwrap().to_string();
        assert_eq!(blob, git(&dir, &["rev-parse", "HEAD:apps/w/new.yaml"], 100));
        let (status, body) = call("GET", format!("/api/contents?repo={}&path=apps/w/new.yaml&ref={}", q(REPO), shas["c4"].0), serde_json::Value::Null).await;
        assert_eq!(status, 404, "not there at c4: {body}");
        let before = git(&dir, &["rev-parse", "HEAD"], 100);
        let (status, body) = call(
            "POST",
            "/api/commits".into(),
            serde_json::json!({"repo": REPO, "path": "apps/w/new.yaml", "content": "x", "sha": "0".repeat(40)}),
        )
        .await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(git(&dir, &["rev-parse", "HEAD"], 100), before, "nothing committed");
        let (status, body) = call(
            "POST",
            "/api/commits".into(),
            serde_json::json!({"repo": REPO, "path": "apps/w/new.yaml", "content": "kind: Deployment\n", "sha": blob, "message": "same again"}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let after = body["sha"].as_str().unwrap().to_string();
        let (status, body) = call("GET", format!("/api/compare?repo={}&base={before}&head={after}", q(REPO)), serde_json::Value::Null).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("ahead")), "{body}");
        let (_, body) = call("GET", format!("/api/compare?repo={}&base={after}&head={}", q(REPO), shas["f2"].0), serde_json::Value::Null).await;
        assert_eq!(body["status"], "behind", "f2 was merged before: {body}");
        server.abort();
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Pull requests over the provider's API (turmoil): a commit on a branch, a pull request
/// opened for it, the refusals GitHub gives (nothing to merge, one already open, a closed
/// one merged), its merge commit on `main` carrying the branch's files, and the push
/// webhook that merge delivers.
#[test]
fn pull_requests_open_merge_and_refuse_as_the_provider_does() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use orrery_sim::env::SimEnv;
    use orrery_sim::world::git::{Hook, SharedGit};
    use orrery_system::env::SharedEnv;
    use serde_json::{json, Value};
    use std::time::Duration;

    use crate::support::SEED;

    let shared = SharedGit::default();
    shared
        .lock()
        .commit(REPO, "a", "base", 0, files(&["envs/dev/app.yaml"]));
    shared.lock().add_hook(
        REPO,
        Hook {
            url: "http://runtime:80/webhooks/argo-events/push".into(),
            secret: None,
        },
    );
    let (mut w, trace) = provider_world(&shared, Duration::from_secs(60));
    let check = shared.clone();
    w.client("operator", async move {
        let env: SharedEnv = SimEnv::shared("operator", SEED, trace.clone());
        let client =
            orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(20));
        let repo = REPO.replace(':', "%3A").replace('/', "%2F");
        let call = |method: &str, path: String, body: Value| {
            let request = http::Request::builder()
                .method(method)
                .uri(format!("http://git:80{path}"))
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap();
            let response = client.request(request);
            async move {
                let response = response.await.expect("answered");
                let status = response.status().as_u16();
                let bytes = response.into_body().collect().await.unwrap().to_bytes();
                (status, serde_json::from_slice::<Value>(&bytes).unwrap_or_default())
            }
        };
        // Nothing on the branch yet: an unknown head is invalid (422), as GitHub answers.
        let open = json!({"repo": REPO, "head": "promote/staging", "title": "promote to staging", "author": "operator"});
        assert_eq!(call("POST", "/api/pulls".into(), open.clone()).await.0, 422);
        assert_eq!(call("GET", format!("/api/pulls?repo={repo}&state=merged"), Value::Null).await.0, 422);
        let commit = json!({"repo": REPO, "branch": "promote/staging", "path": "envs/staging/app.yaml", "content": "version: 2\n", "message": "promote", "author": "operator"});
        assert_eq!(call("POST", "/api/commits".into(), commit).await.0, 201);
        let (status, body) = call("POST", "/api/pulls".into(), open.clone()).await;
        assert_eq!((status, body["number"].as_u64()), (201, Some(1)), "{body}");
        let (status, body) = call("POST", "/api/pulls".into(), open.clone()).await;
        assert_eq!(status, 422, "one is open for the branch already: {body}");
        let (status, body) = call("POST", "/api/pulls".into(), json!({"repo": REPO, "head": "promote/staging", "base": "release"})).await;
        assert_eq!(status, 422, "{body}");
        let (status, listed) = call("GET", format!("/api/pulls?repo={repo}"), Value::Null).await;
        assert_eq!((status, listed[0]["state"].as_str(), listed[0]["merged"].as_bool()), (200, Some("open"), Some(false)), "{listed}");
        // Merge it: a merge commit on main with the branch's file.
        let (status, merged) = call("PUT", format!("/api/pulls/1/merge?repo={repo}"), Value::Null).await;
        assert_eq!(status, 200, "{merged}");
        let sha = merged["sha"].as_str().unwrap().to_string();
        {
            let git = check.lock();
            let head = git.head(REPO).unwrap();
            assert_eq!(head.sha, sha);
            assert_eq!(head.parents.len(), 2, "a merge commit");
            assert!(head.message.starts_with("Merge pull request #1 from promote/staging"));
            let files = git.files_at(REPO, &sha, "envs/staging").unwrap();
            assert_eq!(files["envs/staging/app.yaml"], "version: 2\n");
        }
        let (status, _) = call("PUT", format!("/api/pulls/1/merge?repo={repo}"), Value::Null).await;
        assert_eq!(status, 405, "a closed pull request is not mergeable");
        assert_eq!(call("PUT", format!("/api/pulls/9/merge?repo={repo}"), Value::Null).await.0, 404);
        assert_eq!(call("PUT", format!("/api/pulls/x/merge?repo={repo}"), Value::Null).await.0, 400);
        let (_, closed) = call("GET", format!("/api/pulls?repo={repo}&state=closed"), Value::Null).await;
        assert_eq!(closed[0]["merge_commit_sha"].as_str(), Some(sha.as_str()));
        // Everything is on main now: nothing to merge.
        let (status, _) = call("POST", "/api/pulls".into(), open).await;
        assert_eq!(status, 422, "no commits between main and the merged branch");
        // The merge's push webhook is queued for delivery.
        let pushes: Vec<String> = check
            .lock()
            .take_deliveries()
            .into_iter()
            .map(|d| d.payload["after"].as_str().unwrap_or("").to_string())
            .collect();
        assert!(pushes.contains(&sha), "{pushes:?}");
        Ok(())
    });
    w.run().unwrap();
}
