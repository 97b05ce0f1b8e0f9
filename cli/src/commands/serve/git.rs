//! Real mode: local Git repositories behind the simulated Git provider's HTTP API
//! (`orrery serve git --repo URL=DIR`), so the runtime's Git clients (the hardened ACR
//! controller's first-sync lookup, the app-proxy's repositories and commits) run against
//! real `git` history instead of [`super::git`]'s. Every answer comes from the `git` binary
//! on the machine; `cli/tests/cli/git.rs` asks both providers the same questions about the
//! same history.
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/repos` | `{"repositories": [...]}` (the URLs given) |
//! | `GET /api/commits?repo=&sha=&paths=` | `[{"sha", "message"}]`: the newest commit from `sha` along first parents whose changes against its first parent touch one of the `;`-separated paths (Argo CD's refresh-path rules, as the simulated provider); `[]` when none; 404 for an unknown repository or commit |
//! | `POST /api/commits` `{"repo","path","content","message","author","branch","sha"}` | `201 {"sha"}`: the file written and committed on the checked-out branch (a worktree, not a bare repository; `branch`, default `main`, must be the checked-out one), a commit even when the content is unchanged; 400 for a path outside the repository, another branch or a malformed body; 409 when `sha` is given and is not the file's blob SHA at `HEAD` (`""`: it must not exist) |
//! | `GET /api/contents?repo=&path=&ref=` | `{"path","content","sha"}` (git's blob SHA) at `ref` (default `HEAD`); 404 for an unknown revision or file |
//! | `GET /api/compare?repo=&base=&head=` | `{"status"}`: `identical`, `ahead` (`base` is an ancestor of `head`), `behind` or `diverged`; 404 for an unknown revision |
//!
//! Pull requests are not served here (the simulated provider's `/api/pulls`).
//!
//! This is real mode only (never part of a simulated world): it runs `git` processes, and
//! `git` reads the clock. Each `git` call runs inline in its request (a long history makes
//! `GET /api/commits` slow for everyone). The machine's and user's git configuration is
//! ignored. Known differences from the simulated provider: blob SHAs are git's SHA-1 (the
//! simulated provider derives its own), and unknown repositories are not created.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use http::StatusCode;
use orrery_sim::world::git::CommitRequest;
use orrery_system::env::http::json;
use serde_json::{json as j, Value};

/// Why a `git` command failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` could not be started.
    #[error("running git: {0}")]
    Spawn(#[from] std::io::Error),
    /// `git` exited unsuccessfully.
    #[error("git {args}: {stderr}")]
    Failed {
        /// The arguments.
        args: String,
        /// Its standard error.
        stderr: String,
    },
}

/// Runs `git -C dir args…` and returns its standard output. The machine's and the user's
/// git configuration are ignored (answers must not depend on `log.showRoot`, rename
/// detection or signing settings), and paths are literal, never patterns.
fn git(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<String, GitError> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .envs(env.iter().copied())
        .output()?;
    if !output.status.success() {
        return Err(GitError::Failed {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether `sha` names a commit in `dir`.
fn is_commit(dir: &Path, sha: &str) -> bool {
    !sha.is_empty()
        && !sha.starts_with('-')
        && git(dir, &["cat-file", "-e", &format!("{sha}^{{commit}}")], &[]).is_ok()
}

/// The newest commit from `sha` along first parents whose changes (against its first
/// parent; a root commit's files) touch one of `paths` by Argo CD's rules.
pub fn newest_touching(
    dir: &Path,
    sha: &str,
    paths: &[String],
) -> Result<Option<String>, GitError> {
    // Each merge diffed against its first parent, the root commit's files listed, renames
    // as a deletion and an addition; NUL-separated, so no name is quoted or split.
    let log = git(
        dir,
        &[
            "-c",
            "log.showRoot=true",
            "log",
            "--first-parent",
            "--diff-merges=first-parent",
            "--no-renames",
            "-z",
            "--format=%x01%H",
            "--name-only",
            sha,
            "--",
        ],
        &[],
    )?;
    Ok(first_touching(&log, paths))
}

/// The first commit of `git log -z --format=%x01%H --name-only` output (newest first)
/// whose files touch `paths`.
fn first_touching(log: &str, paths: &[String]) -> Option<String> {
    let mut commits: Vec<(String, Vec<String>)> = Vec::new();
    let mut after_commit = false;
    for token in log.split('\0') {
        // The first name after a commit line follows the line's newline.
        let token = match after_commit {
            true => token.strip_prefix('\n').unwrap_or(token),
            false => token,
        };
        if let Some(sha) = token.strip_prefix('\u{1}') {
            commits.push((sha.to_string(), Vec::new()));
            after_commit = true;
            continue;
        }
        after_commit = false;
        if let (false, Some((_, files))) = (token.is_empty(), commits.last_mut()) {
            files.push(token.to_string());
        }
    }
    commits.into_iter().find_map(|(sha, files)| {
        (!files.is_empty() && orrery_system::runtime::acr::paths::files_have_changed(paths, &files))
            .then_some(sha)
    })
}

/// A repository-relative path that stays inside the repository's worktree: plain
/// components only, none of them `.git` (any case: writing there would let a request
/// configure git, e.g. a `core.fsmonitor` command).
fn inside(path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    let plain = path.components().all(|c| match c {
        Component::Normal(name) => !name.to_string_lossy().eq_ignore_ascii_case(".git"),
        _ => false,
    });
    (!path.as_os_str().is_empty() && plain).then(|| path.to_path_buf())
}

/// Refuses a path whose existing parts include a symbolic link (it could lead out of the
/// repository) or whose file exists as anything but a regular file.
fn no_links(dir: &Path, relative: &Path) -> Result<(), String> {
    let mut at = dir.to_path_buf();
    for component in relative.components() {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!("{} is a symbolic link", at.display()))
            }
            Ok(_) | Err(_) => {}
        }
    }
    match std::fs::symlink_metadata(&at) {
        Ok(meta) if !meta.is_file() => Err(format!("{} is not a regular file", at.display())),
        _ => Ok(()),
    }
}

/// The blob SHA of `path` at `rev` in `dir` (empty when it does not exist there).
fn blob_of(dir: &Path, rev: &str, path: &str) -> String {
    git(
        dir,
        &["rev-parse", "--verify", "-q", &format!("{rev}:{path}")],
        &[],
    )
    .map(|s| s.trim().to_string())
    .unwrap_or_default()
}

/// Writes `content` to `path` in the worktree `dir` and commits it as `author`.
fn commit(
    dir: &Path,
    path: &str,
    content: &str,
    message: &str,
    author: &str,
) -> Result<String, String> {
    let relative =
        inside(path).ok_or_else(|| format!("path {path:?} is not inside the repository"))?;
    if git(dir, &["rev-parse", "--is-bare-repository"], &[])
        .map_err(|e| e.to_string())?
        .trim()
        == "true"
    {
        return Err("the repository is bare: commits need a worktree".into());
    }
    no_links(dir, &relative)?;
    let file = dir.join(&relative);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    std::fs::write(&file, content).map_err(|e| e.to_string())?;
    let author = if author.contains('<') {
        author.to_string()
    } else {
        format!("{author} <{author}@orrery.invalid>")
    };
    let (name, email) = author
        .split_once('<')
        .map(|(n, e)| {
            (
                n.trim().to_string(),
                e.trim_end_matches('>').trim().to_string(),
            )
        })
        .unwrap_or_default();
    let env = [
        ("GIT_COMMITTER_NAME", name.as_str()),
        ("GIT_COMMITTER_EMAIL", email.as_str()),
    ];
    let relative = relative.to_string_lossy().into_owned();
    git(dir, &["add", "--", &relative], &env).map_err(|e| e.to_string())?;
    git(
        dir,
        &[
            "commit",
            "-q",
            "--allow-empty-message",
            // As the hosted providers' API, an unchanged file is still a commit.
            "--allow-empty",
            "--author",
            &author,
            "-m",
            message,
            "--",
            &relative,
        ],
        &env,
    )
    .map_err(|e| e.to_string())?;
    Ok(git(dir, &["rev-parse", "HEAD"], &[])
        .map_err(|e| e.to_string())?
        .trim()
        .to_string())
}

/// Serves `repos` (URL → local directory) on `addr` until the listener fails.
pub async fn serve(
    env: orrery_system::env::SharedEnv,
    repos: BTreeMap<String, PathBuf>,
    addr: &str,
) -> std::io::Result<()> {
    let repos = Arc::new(repos);
    // One commit at a time: `git add` and `git commit` share the index.
    let committing = Arc::new(std::sync::Mutex::new(()));
    let listener = env.listen(addr).await?;
    orrery_system::env::http::serve(listener, move |request, _| {
        let (repos, committing) = (repos.clone(), committing.clone());
        async move {
            let params = orrery_system::env::http::query(request.uri());
            let param = |k: &str| params.get(k).cloned().unwrap_or_default();
            match (request.method().as_str(), request.uri().path()) {
                ("GET", "/api/repos") => json(
                    StatusCode::OK,
                    &j!({"repositories": repos.keys().collect::<Vec<_>>()}),
                ),
                ("GET", "/api/commits") => {
                    let Some(dir) = repos.get(&param("repo")).cloned() else {
                        return json(
                            StatusCode::NOT_FOUND,
                            &j!({"message": format!("no repository {}", param("repo"))}),
                        );
                    };
                    let sha = param("sha");
                    let paths: Vec<String> = param("paths")
                        .split(';')
                        .filter(|p| !p.is_empty())
                        .map(str::to_string)
                        .collect();
                    if !is_commit(&dir, &sha) {
                        return json(
                            StatusCode::NOT_FOUND,
                            &j!({"message": format!("No commit found for SHA: {sha}")}),
                        );
                    }
                    match newest_touching(&dir, &sha, &paths) {
                        Ok(found) => json(
                            StatusCode::OK,
                            &Value::Array(
                                found
                                    .map(|sha| {
                                        let message = git(&dir, &["log", "-1", "--format=%B", &sha], &[])
                                            .map(|m| m.trim_end().to_string())
                                            .unwrap_or_default();
                                        j!({"sha": sha, "message": message})
                                    })
                                    .into_iter()
                                    .collect(),
                            ),
                        ),
                        Err(e) => json(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &j!({"message": e.to_string()}),
                        ),
                    }
                }
                ("POST", "/api/commits") => {
                    let request = match CommitRequest::read(request).await {
                        Ok(commit) => commit,
                        Err(refusal) => return refusal,
                    };
                    let Some(dir) = repos.get(&request.repo).cloned() else {
                        return json(
                            StatusCode::NOT_FOUND,
                            &j!({"error": format!("no repository {}", request.repo)}),
                        );
                    };
                    let branch = &request.branch;
                    let done = {
                        let _one_at_a_time = committing.lock().expect("commit lock poisoned");
                        let checked_out = git(&dir, &["branch", "--show-current"], &[])
                            .map(|b| b.trim().to_string())
                            .unwrap_or_default();
                        let now = blob_of(&dir, "HEAD", &request.path);
                        if checked_out.is_empty() || *branch != checked_out {
                            Err(format!("branch {branch:?}: orrery serve git commits on the checked-out branch ({checked_out:?}) only"))
                        } else if request.expected.as_ref().is_some_and(|e| *e != now) {
                            return json(
                                StatusCode::CONFLICT,
                                &j!({"message": format!("{} does not match {}", request.path, request.expected.unwrap_or_default())}),
                            );
                        } else {
                            commit(
                                &dir,
                                &request.path,
                                &request.content,
                                &request.message,
                                &request.author,
                            )
                        }
                    };
                    match done {
                        Ok(sha) => json(StatusCode::CREATED, &j!({"sha": sha})),
                        Err(e) => json(StatusCode::BAD_REQUEST, &j!({"error": e})),
                    }
                }
                ("GET", "/api/contents") => {
                    let Some(dir) = repos.get(&param("repo")).cloned() else {
                        return json(
                            StatusCode::NOT_FOUND,
                            &j!({"message": format!("no repository {}", param("repo"))}),
                        );
                    };
                    let rev = params.get("ref").cloned().unwrap_or_else(|| "HEAD".into());
                    let path = param("path");
                    if !is_commit(&dir, &rev) || inside(&path).is_none() {
                        return json(
                            StatusCode::NOT_FOUND,
                            &j!({"message": format!("No commit found for the ref {rev}")}),
                        );
                    }
                    let shown = git(&dir, &["show", &format!("{rev}:{path}")], &[]);
                    match shown {
                        Ok(content) => json(
                            StatusCode::OK,
                            &j!({"path": path, "sha": blob_of(&dir, &rev, &path), "content": content}),
                        ),
                        Err(_) => json(
                            StatusCode::NOT_FOUND,
                            &j!({"message": format!("Not Found: {path} at {rev}")}),
                        ),
                    }
                }
                ("GET", "/api/compare") => {
                    let Some(dir) = repos.get(&param("repo")).cloned() else {
                        return json(
                            StatusCode::NOT_FOUND,
                            &j!({"message": format!("no repository {}", param("repo"))}),
                        );
                    };
                    let (base, head) = (param("base"), param("head"));
                    if !is_commit(&dir, &base) || !is_commit(&dir, &head) {
                        return json(
                            StatusCode::NOT_FOUND,
                            &j!({"message": format!("No common ancestor or unknown revision: {base}...{head}")}),
                        );
                    }
                    let ancestor = |a: &str, b: &str| {
                        git(&dir, &["merge-base", "--is-ancestor", a, b], &[]).is_ok()
                    };
                    let id = |r: &str| git(&dir, &["rev-parse", &format!("{r}^{{commit}}")], &[]).map(|s| s.trim().to_string()).ok();
                    let status = if id(&base) == id(&head) {
                        "identical"
                    } else if ancestor(&base, &head) {
                        "ahead"
                    } else if ancestor(&head, &base) {
                        "behind"
                    } else {
                        "diverged"
                    };
                    json(StatusCode::OK, &j!({"status": status}))
                }
                (_, path) => json(
                    StatusCode::NOT_FOUND,
                    &j!({"error": format!("no route {path}")}),
                ),
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_relative_paths_inside_the_repository_are_written() {
        for ok in ["a.yaml", "teams/a/values.yaml"] {
            assert!(super::inside(ok).is_some(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "teams/../../x",
            "./a",
            ".git/config",
            "a/.GIT/hooks/x",
        ] {
            assert!(super::inside(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn log_output_is_read_with_any_file_name() {
        let paths = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Two commits, the newer touching a name with a space, the older a non-ASCII one
        // and a name that looks like a commit line.
        let log = "\u{1}bbbb\0\nx y.yaml\0\u{1}aaaa\0\ncaf\u{e9}/d.yaml\0commit deadbeef\0";
        assert_eq!(
            super::first_touching(log, &paths(&["/x y.yaml"])),
            Some("bbbb".into())
        );
        assert_eq!(
            super::first_touching(log, &paths(&["/caf\u{e9}"])),
            Some("aaaa".into())
        );
        assert_eq!(
            super::first_touching(log, &paths(&["/commit deadbeef"])),
            Some("aaaa".into())
        );
        assert_eq!(super::first_touching(log, &paths(&["/nothing"])), None);
        // A commit without files (an empty merge) touches nothing.
        assert_eq!(
            super::first_touching("\u{1}cccc\0\u{1}bbbb\0\na\0", &paths(&["/a"])),
            Some("bbbb".into())
        );
    }
}
