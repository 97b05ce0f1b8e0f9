//! The simulated Git provider: repositories, commits, files and revision metadata.
//!
//! Shared by the workload (which pushes commits, like developers do) and by Argo CD
//! (which reads revisions and manifests). Commit SHAs are derived from content, so the
//! same seed produces the same history.
//!
//! History is a DAG: `main` is the mainline every app follows, other branches fork from it
//! and come back as merge commits. [`Git::rev_list_ancestry_path`] and [`Git::diff_tree`]
//! answer as `git rev-list --ancestry-path A..B` and `git diff-tree --no-commit-id
//! --name-only -r C` do (a merge or root commit lists no files); `cli/tests/cli/git.rs`
//! compares them with real `git` on the same history. Tree reads ([`Git::files_at`],
//! [`Git::last_change`]) are answered for mainline commits, from a per-directory index.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use orrery_system::env::fnv1a_64;
use serde::Serialize;

/// One commit: who, when, why, and the files it wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Commit {
    /// 40 hex characters, derived from the parent and content.
    pub sha: String,
    /// Author as `Name <email>`.
    pub author: String,
    /// Commit message.
    pub message: String,
    /// Commit time, Unix milliseconds.
    pub unix_ms: u64,
    /// Parent SHAs: none for a root commit, two for a merge (mainline first).
    pub parents: Vec<String>,
    /// Files written by this commit relative to its first parent (path → content): for a
    /// merge, what the merged branch brought; deletions are not modelled.
    pub changes: BTreeMap<String, String>,
}

impl Commit {
    /// Whether this commit's changes (relative to its first parent) touch an app with
    /// `refresh` paths (Argo CD's `AppFilesHaveChanged`); a commit without changes does not.
    pub fn touches(&self, refresh: &[String]) -> bool {
        let files: Vec<&str> = self.changes.keys().map(String::as_str).collect();
        !files.is_empty() && orrery_system::runtime::acr::paths::files_have_changed(refresh, &files)
    }
}

/// The default branch every simulated app follows.
pub const MAIN: &str = "main";

/// A repository: every commit ever made (oldest first) and its branches.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Repo {
    /// Oldest first, on every branch.
    pub commits: Vec<Commit>,
    /// Branch → head SHA.
    pub branches: BTreeMap<String, String>,
    /// Indexes of the mainline commits (`main`'s first-parent chain), oldest first.
    #[serde(skip)]
    mainline: std::collections::BTreeSet<usize>,
    /// Indexes of branch commits a merge already brought to `main`.
    #[serde(skip)]
    merged: std::collections::BTreeSet<usize>,
    /// Directory → indexes of the mainline commits that wrote a file directly in it, so
    /// lookups by app path cost O(changes to that path), not O(history) (10,000-app
    /// scenarios need it).
    #[serde(skip)]
    by_dir: BTreeMap<String, Vec<usize>>,
    /// SHA → index (every app's reconcile looks up its deployed revision).
    #[serde(skip)]
    by_sha: BTreeMap<String, usize>,
}

fn dir_of(file: &str) -> &str {
    file.rsplit_once('/').map(|(dir, _)| dir).unwrap_or("")
}

impl Repo {
    fn index_of(&self, sha: &str) -> Option<usize> {
        self.by_sha.get(sha).copied()
    }

    /// The index of a mainline commit (tree reads are answered for those only).
    fn mainline_index(&self, sha: &str) -> Option<usize> {
        self.index_of(sha).filter(|i| self.mainline.contains(i))
    }

    fn parents_of(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        self.commits[index]
            .parents
            .iter()
            .filter_map(|p| self.index_of(p))
    }

    fn touching(&self, path: &str, end: usize) -> impl Iterator<Item = &Commit> {
        let dir = path.trim_end_matches('/');
        self.by_dir
            .get(dir)
            .into_iter()
            .flatten()
            .filter(move |i| **i <= end)
            .map(|i| &self.commits[*i])
    }
}

/// All repositories, by URL.
#[derive(Debug, Default)]
pub struct Git {
    repos: BTreeMap<String, Repo>,
    /// Push webhooks per repository.
    hooks: BTreeMap<String, Vec<Hook>>,
    /// Deliveries waiting for [`deliver_webhooks`].
    outbox: std::collections::VecDeque<Delivery>,
    /// Deliveries made so far (their ids).
    deliveries: u64,
    /// How fetches are served now (the `git` fault).
    pub serving: Serving,
    /// The API's current secondary rate-limit window (a minute).
    window: Window,
    /// The API's current primary rate-limit window (an hour).
    hour: Window,
    /// Pull requests per repository, numbered from 1 in opening order.
    pulls: BTreeMap<String, Vec<PullRequest>>,
}

/// A pull request: `head` to be merged into `base` (`main`; the merge button's merge
/// commit, no fast-forward).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PullRequest {
    /// Its number in the repository (from 1).
    pub number: u64,
    /// The branch to merge.
    pub head: String,
    /// The branch it merges into.
    pub base: String,
    /// Title.
    pub title: String,
    /// Who opened it.
    pub author: String,
    /// `open`, `closed` (merged or not).
    pub state: PullState,
    /// The merge commit, once merged.
    pub merge_commit_sha: Option<String>,
}

/// Where a pull request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PullState {
    /// Open.
    Open,
    /// Closed, merged or not.
    Closed,
}

/// Why a pull request could not be opened or merged (GitHub answers 422 and 405).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    /// The repository or a branch does not exist.
    #[error("{0}")]
    Unknown(String),
    /// The request is refused as it stands (GitHub's 422 "Validation Failed").
    #[error("{0}")]
    Invalid(String),
    /// The pull request cannot be merged (GitHub's 405 "Pull Request is not mergeable").
    #[error("{0}")]
    NotMergeable(String),
}

/// How the provider serves Git fetches and its HTTP API now (the `git` fault): throttled —
/// every fetch takes `latency`, as clients wait out a rate limit's reset — or down, every
/// fetch and API call failing; and the API's rate limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Serving {
    /// Added to every fetch and API call.
    pub latency: std::time::Duration,
    /// Fetches fail; the API answers 503.
    pub outage: bool,
    /// API calls allowed per minute (0: unlimited); beyond it the API answers 429 with
    /// `retry-after` and `x-ratelimit-reset`, as GitHub's secondary rate limits.
    pub rate_limit: u32,
    /// API calls allowed per hour (0: unlimited); beyond it the API answers 403 "API rate
    /// limit exceeded" with `x-ratelimit-remaining: 0` and `x-ratelimit-reset`, as GitHub's
    /// primary rate limit (5,000 an hour for a token). Every admitted answer carries the
    /// `x-ratelimit-*` headers while it is set.
    pub hourly_limit: u32,
    /// `POST /api/commits` commits, then answers 502 (the answer is lost).
    pub lost_commit_answers: bool,
}

/// Why the API refused a call, and when it may be tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The hour's allowance is spent (GitHub's primary rate limit: 403).
    Primary {
        /// The allowance.
        limit: u32,
        /// When the hour ends (Unix seconds).
        reset: u64,
    },
    /// The minute's allowance is spent (a secondary rate limit: 429).
    Secondary {
        /// When the minute ends (Unix seconds).
        reset: u64,
    },
}

/// The primary rate limit's standing after an admitted call (GitHub's `x-ratelimit-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Calls allowed in the hour.
    pub limit: u32,
    /// Calls made in it, this one included.
    pub used: u32,
    /// When the hour ends (Unix seconds).
    pub reset: u64,
}

/// A rate-limit window: its start (Unix seconds) and the calls made in it.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    start_s: u64,
    used: u32,
}

impl Window {
    /// Starts a new window at `unix_s` when this one (`length_s` long) is over.
    fn roll(&mut self, unix_s: u64, length_s: u64) {
        if unix_s >= self.start_s + length_s {
            *self = Window {
                start_s: unix_s,
                used: 0,
            };
        }
    }
}

/// A repository's push webhook (GitHub's `config.url` and `config.secret`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    /// Where deliveries are POSTed (`http://host:port/path`).
    pub url: String,
    /// Signs each delivery (`X-Hub-Signature-256`); `None`: unsigned.
    pub secret: Option<String>,
}

/// One push delivery to one hook.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// `X-GitHub-Delivery`.
    pub id: String,
    /// The hook.
    pub hook: Hook,
    /// The push event payload.
    pub payload: serde_json::Value,
}

fn sha(parent: &str, author: &str, message: &str, changes: &BTreeMap<String, String>) -> String {
    let mut text = format!("{parent}\n{author}\n{message}\n");
    for (path, content) in changes {
        text.push_str(path);
        text.push('\0');
        text.push_str(content);
    }
    (0..3u8)
        .map(|i| format!("{:016x}", fnv1a_64(&[text.as_bytes(), &[i]].concat())))
        .collect::<String>()[..40]
        .to_string()
}

impl Git {
    /// Appends a commit to `main` of `repo` (created on first use) and returns its SHA.
    pub fn commit(
        &mut self,
        repo: &str,
        author: &str,
        message: &str,
        unix_ms: u64,
        changes: BTreeMap<String, String>,
    ) -> String {
        self.commit_on(repo, MAIN, author, message, unix_ms, changes)
    }

    /// Appends a commit to `branch` of `repo` and returns its SHA. A new branch forks from
    /// `main`'s head.
    pub fn commit_on(
        &mut self,
        repo: &str,
        branch: &str,
        author: &str,
        message: &str,
        unix_ms: u64,
        changes: BTreeMap<String, String>,
    ) -> String {
        let repository = self.repos.entry(repo.to_string()).or_default();
        let parent = repository
            .branches
            .get(branch)
            .or_else(|| repository.branches.get(MAIN))
            .cloned();
        self.append(
            repo,
            branch,
            author,
            message,
            unix_ms,
            parent.into_iter().collect(),
            changes,
        )
    }

    /// Merges `branch` into `main` with a merge commit (no fast-forward, as a pull
    /// request's merge button does) and returns its SHA, or `None` when either branch is
    /// unknown. The merge carries the files the branch changed since it forked; on a
    /// conflict the branch's content wins.
    pub fn merge(
        &mut self,
        repo: &str,
        branch: &str,
        author: &str,
        message: &str,
        unix_ms: u64,
    ) -> Option<String> {
        let repository = self.repos.get(repo)?;
        let main = repository.branches.get(MAIN)?.clone();
        let head = repository.branches.get(branch)?.clone();
        // The branch's own commits not merged before: its first-parent chain down to the
        // mainline or to what an earlier merge brought.
        let mut brought = BTreeMap::new();
        let mut walked = Vec::new();
        let mut at = repository.index_of(&head);
        while let Some(i) =
            at.filter(|i| !repository.mainline.contains(i) && !repository.merged.contains(i))
        {
            walked.push(i);
            for (file, content) in &repository.commits[i].changes {
                brought
                    .entry(file.clone())
                    .or_insert_with(|| content.clone());
            }
            at = repository.parents_of(i).next();
        }
        if let Some(repository) = self.repos.get_mut(repo) {
            repository.merged.extend(walked);
        }
        Some(self.append(
            repo,
            MAIN,
            author,
            message,
            unix_ms,
            vec![main, head],
            brought,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        repo: &str,
        branch: &str,
        author: &str,
        message: &str,
        unix_ms: u64,
        parents: Vec<String>,
        changes: BTreeMap<String, String>,
    ) -> String {
        let repository = self.repos.entry(repo.to_string()).or_default();
        let before = parents.first().cloned().unwrap_or_default();
        let sha = sha(&parents.join(" "), author, message, &changes);
        let index = repository.commits.len();
        if branch == MAIN {
            let dirs: std::collections::BTreeSet<String> =
                changes.keys().map(|f| dir_of(f).to_string()).collect();
            for dir in dirs {
                repository.by_dir.entry(dir).or_default().push(index);
            }
            repository.mainline.insert(index);
        }
        repository.by_sha.insert(sha.clone(), index);
        repository.branches.insert(branch.to_string(), sha.clone());
        let commit = Commit {
            sha: sha.clone(),
            author: author.into(),
            message: message.into(),
            unix_ms,
            parents,
            changes,
        };
        for hook in self.hooks.get(repo).into_iter().flatten() {
            self.deliveries += 1;
            self.outbox.push_back(Delivery {
                id: format!("delivery-{:08}", self.deliveries),
                hook: hook.clone(),
                payload: push_payload(repo, branch, &before, &commit),
            });
        }
        repository.commits.push(commit);
        sha
    }

    /// `git rev-list --ancestry-path from..to`: the commits that are ancestors of `to`
    /// (itself included) and descendants of `from`, newest first; `None` when either SHA is
    /// unknown. Commits are ordered by creation, which is commit-date order here.
    pub fn rev_list_ancestry_path(&self, repo: &str, from: &str, to: &str) -> Option<Vec<String>> {
        let repository = self.repos.get(repo)?;
        let (from, to) = (repository.index_of(from)?, repository.index_of(to)?);
        // Paint ancestors of `to` (1) and of `from` (2) newest first, as git's merge-base
        // walk does, until only commits reachable from both are left to visit.
        const TO: u8 = 1;
        const FROM: u8 = 2;
        let mut flags: BTreeMap<usize, u8> = BTreeMap::from([(to, TO)]);
        *flags.entry(from).or_default() |= FROM;
        let mut queue: std::collections::BTreeSet<usize> = [from, to].into();
        while let Some(&i) = queue.last() {
            if queue.iter().all(|q| flags[q] & FROM != 0) {
                break; // everything left is an ancestor of `from`
            }
            queue.remove(&i);
            let flag = flags[&i];
            for parent in repository.parents_of(i) {
                let entry = flags.entry(parent).or_default();
                if *entry | flag != *entry {
                    *entry |= flag;
                    queue.insert(parent);
                }
            }
        }
        // `from..to`: reachable from `to` only. Ancestry path: of those, the ones with
        // `from` among their ancestors (parents come before children in `commits`).
        let range: Vec<usize> = flags
            .iter()
            .filter(|(_, f)| **f == TO)
            .map(|(i, _)| *i)
            .collect();
        let mut on_path = std::collections::BTreeSet::new();
        for &i in &range {
            if repository
                .parents_of(i)
                .any(|p| p == from || on_path.contains(&p))
            {
                on_path.insert(i);
            }
        }
        Some(
            on_path
                .iter()
                .rev()
                .map(|i| repository.commits[*i].sha.clone())
                .collect(),
        )
    }

    /// `git diff-tree --no-commit-id --name-only -r <sha>`: the files a commit changed
    /// relative to its parent, sorted; empty for a merge commit (git shows a merge's diff only
    /// with `-m`, `-c` or `--cc`) and for a root commit (only with `--root`). `None` when
    /// the SHA is unknown.
    pub fn diff_tree(&self, repo: &str, sha: &str) -> Option<Vec<String>> {
        let repository = self.repos.get(repo)?;
        let commit = &repository.commits[repository.index_of(sha)?];
        Some(if commit.parents.len() == 1 {
            commit.changes.keys().cloned().collect()
        } else {
            Vec::new()
        })
    }

    /// The commits on `to`'s first-parent chain after `from` (`git log --first-parent
    /// from..to` when `from` is on that chain), newest first, with the files each changed
    /// relative to its first parent (a merge: what it brought). The harness's ground truth
    /// for change revisions. `from` empty means the whole chain; a `from` that is not on the
    /// chain (a rollback to an older revision, another branch) gives none.
    pub fn first_parent_range(&self, repo: &str, from: &str, to: &str) -> Vec<&Commit> {
        let Some(repository) = self.repos.get(repo) else {
            return Vec::new();
        };
        let Some(mut at) = repository.index_of(to) else {
            return Vec::new();
        };
        let stop = repository.index_of(from);
        if !from.is_empty() && stop.is_none() {
            return Vec::new();
        }
        let mut out = Vec::new();
        loop {
            if Some(at) == stop {
                return out;
            }
            out.push(&repository.commits[at]);
            match repository.parents_of(at).next() {
                Some(parent) => at = parent,
                // The root: complete when the whole chain was asked for.
                None if stop.is_none() => return out,
                None => return Vec::new(),
            }
        }
    }

    /// Adds a push webhook to `repo` (GitHub's `POST /repos/{repo}/hooks` with `events:
    /// [push]`): every later commit is delivered to it.
    pub fn add_hook(&mut self, repo: &str, hook: Hook) {
        self.hooks.entry(repo.to_string()).or_default().push(hook);
    }

    /// Takes the deliveries waiting to be sent.
    pub fn take_deliveries(&mut self) -> Vec<Delivery> {
        self.outbox.drain(..).collect()
    }

    /// Every commit of `repo` on every branch, oldest first (empty for an unknown one).
    pub fn commits(&self, repo: &str) -> &[Commit] {
        self.repos.get(repo).map_or(&[], |r| r.commits.as_slice())
    }

    /// The head of `main` of `repo`.
    pub fn head(&self, repo: &str) -> Option<&Commit> {
        let repository = self.repos.get(repo)?;
        repository
            .commits
            .get(repository.index_of(repository.branches.get(MAIN)?)?)
    }

    /// The commit a revision names: a branch's head, or a commit by SHA.
    pub fn resolve(&self, repo: &str, rev: &str) -> Option<&Commit> {
        let repository = self.repos.get(repo)?;
        let sha = repository.branches.get(rev).map_or(rev, String::as_str);
        repository.commits.get(repository.index_of(sha)?)
    }

    /// The content of `path` as of `rev` (a branch or a SHA): the newest write of it along
    /// the first parents (a merge carries what its branch wrote). `None` for an unknown
    /// revision; `Some(None)` when the file does not exist there.
    pub fn file_at(&self, repo: &str, rev: &str, path: &str) -> Option<Option<String>> {
        let repository = self.repos.get(repo)?;
        let start = self.resolve(repo, rev)?;
        let mut at = repository.index_of(&start.sha);
        while let Some(index) = at {
            if let Some(content) = repository.commits[index].changes.get(path) {
                return Some(Some(content.clone()));
            }
            at = repository.parents_of(index).next();
        }
        Some(None)
    }

    /// GitHub's compare status of `head` against `base`: `identical`, `ahead` (`base` is an
    /// ancestor of `head`), `behind` (the reverse) or `diverged`; `None` for an unknown SHA.
    pub fn compare(&self, repo: &str, base: &str, head: &str) -> Option<&'static str> {
        let base = self.resolve(repo, base)?.sha.clone();
        let head = self.resolve(repo, head)?.sha.clone();
        if base == head {
            return Some("identical");
        }
        let reaches = |from: &str, to: &str| {
            self.rev_list_ancestry_path(repo, from, to)
                .is_some_and(|path| !path.is_empty())
        };
        Some(if reaches(&base, &head) {
            "ahead"
        } else if reaches(&head, &base) {
            "behind"
        } else {
            "diverged"
        })
    }

    /// A commit by SHA.
    pub fn commit_by_sha(&self, repo: &str, sha: &str) -> Option<&Commit> {
        let repository = self.repos.get(repo)?;
        repository.commits.get(repository.index_of(sha)?)
    }

    /// The files directly under `path` as of `sha` (path → content), or `None` if `sha` is
    /// unknown or not on the mainline.
    pub fn files_at(&self, repo: &str, sha: &str, path: &str) -> Option<BTreeMap<String, String>> {
        let repository = self.repos.get(repo)?;
        let end = repository.mainline_index(sha)?;
        let dir = path.trim_end_matches('/');
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut files = BTreeMap::new();
        for commit in repository.touching(path, end) {
            // `changes` is sorted by path, so the files under `dir/` are one contiguous range.
            let under = commit.changes.range::<str, _>((
                std::ops::Bound::Included(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ));
            for (file, content) in under.take_while(|(file, _)| file.starts_with(&prefix)) {
                if dir_of(file) == dir {
                    files.insert(file.clone(), content.clone());
                }
            }
        }
        Some(files)
    }

    /// The order in which `sha` was pushed to `repo` (0 = first, on any branch): a clone
    /// fetched when the newest commit was number N holds every commit up to N.
    pub fn pushed_as(&self, repo: &str, sha: &str) -> Option<usize> {
        self.repos.get(repo)?.index_of(sha)
    }

    /// The number of the newest commit pushed to `repo` (see [`Git::pushed_as`]).
    pub fn newest_pushed(&self, repo: &str) -> Option<usize> {
        self.repos.get(repo)?.commits.len().checked_sub(1)
    }

    /// The newest commit at or before `sha` that changed a file directly under `path`.
    pub fn last_change(&self, repo: &str, sha: &str, path: &str) -> Option<&Commit> {
        let repository = self.repos.get(repo)?;
        let end = repository.mainline_index(sha)?;
        repository.touching(path, end).last()
    }

    /// Opens a pull request merging `head` into `base` of `repo`; its number.
    pub fn open_pull(
        &mut self,
        repo: &str,
        head: &str,
        base: &str,
        title: &str,
        author: &str,
    ) -> Result<u64, PullError> {
        let repository = self
            .repos
            .get(repo)
            .ok_or_else(|| PullError::Unknown(format!("no repository {repo}")))?;
        if base != MAIN {
            return Err(PullError::Invalid(format!(
                "base {base}: pull requests merge into {MAIN} here"
            )));
        }
        let Some(head_sha) = repository.branches.get(head) else {
            return Err(PullError::Invalid(format!(
                "head: no branch {head} in {repo}"
            )));
        };
        let index = repository.index_of(head_sha);
        if head == MAIN
            || index
                .is_some_and(|i| repository.mainline.contains(&i) || repository.merged.contains(&i))
        {
            return Err(PullError::Invalid(format!(
                "No commits between {base} and {head}"
            )));
        }
        let pulls = self.pulls.entry(repo.to_string()).or_default();
        if pulls
            .iter()
            .any(|p| p.head == head && p.state == PullState::Open)
        {
            return Err(PullError::Invalid(format!(
                "A pull request already exists for {head}"
            )));
        }
        let number = pulls.len() as u64 + 1;
        pulls.push(PullRequest {
            number,
            head: head.into(),
            base: base.into(),
            title: title.into(),
            author: author.into(),
            state: PullState::Open,
            merge_commit_sha: None,
        });
        Ok(number)
    }

    /// Merges open pull request `number` of `repo` (a merge commit "Merge pull request #n
    /// from head") and closes it; the merge commit's SHA.
    pub fn merge_pull(
        &mut self,
        repo: &str,
        number: u64,
        author: &str,
        unix_ms: u64,
    ) -> Result<String, PullError> {
        let pull = self
            .pulls
            .get(repo)
            .and_then(|p| p.iter().find(|p| p.number == number))
            .cloned()
            .ok_or_else(|| PullError::Unknown(format!("no pull request #{number} in {repo}")))?;
        if pull.state != PullState::Open {
            return Err(PullError::NotMergeable(format!(
                "Pull Request #{number} is not mergeable: it is closed"
            )));
        }
        let nothing = self.repos.get(repo).is_none_or(|r| {
            r.branches
                .get(&pull.head)
                .and_then(|h| r.index_of(h))
                .is_none_or(|i| r.mainline.contains(&i) || r.merged.contains(&i))
        });
        if nothing {
            return Err(PullError::NotMergeable(format!(
                "Pull Request #{number} is not mergeable: {} has no commits {} lacks",
                pull.head, pull.base
            )));
        }
        let message = format!(
            "Merge pull request #{number} from {}\n\n{}",
            pull.head, pull.title
        );
        let sha = self
            .merge(repo, &pull.head, author, &message, unix_ms)
            .ok_or_else(|| PullError::Unknown(format!("branch {} is gone", pull.head)))?;
        if let Some(open) = self
            .pulls
            .get_mut(repo)
            .and_then(|p| p.iter_mut().find(|p| p.number == number))
        {
            open.state = PullState::Closed;
            open.merge_commit_sha = Some(sha.clone());
        }
        Ok(sha)
    }

    /// Closes open pull request `number` of `repo` without merging it.
    pub fn close_pull(&mut self, repo: &str, number: u64) -> Result<(), PullError> {
        let pull = self
            .pulls
            .get_mut(repo)
            .and_then(|p| p.iter_mut().find(|p| p.number == number))
            .ok_or_else(|| PullError::Unknown(format!("no pull request #{number} in {repo}")))?;
        pull.state = PullState::Closed;
        Ok(())
    }

    /// `repo`'s pull requests, in number order.
    pub fn pulls(&self, repo: &str) -> &[PullRequest] {
        self.pulls.get(repo).map_or(&[], Vec::as_slice)
    }

    /// Counts one API call at `unix_s` against the rate limits: the primary limit's standing
    /// when one is set, or why the call is refused. A refused call counts against neither.
    pub fn admit(&mut self, unix_s: u64) -> Result<Option<Quota>, Refusal> {
        let (minute, hour) = (self.serving.rate_limit, self.serving.hourly_limit);
        // A window runs only while its limit is set: the first call after the fault sets
        // it starts a full one.
        if minute > 0 {
            self.window.roll(unix_s, 60);
        }
        if hour > 0 {
            self.hour.roll(unix_s, 3600);
        }
        if hour > 0 && self.hour.used >= hour {
            return Err(Refusal::Primary {
                limit: hour,
                reset: self.hour.start_s + 3600,
            });
        }
        if minute > 0 && self.window.used >= minute {
            return Err(Refusal::Secondary {
                reset: self.window.start_s + 60,
            });
        }
        // Each limit counts the calls made while it is set, as the fault started it.
        if minute > 0 {
            self.window.used += 1;
        }
        if hour > 0 {
            self.hour.used += 1;
        }
        Ok((hour > 0).then_some(Quota {
            limit: hour,
            used: self.hour.used,
            reset: self.hour.start_s + 3600,
        }))
    }

    /// The newest commit on the first-parent chain from `sha` (itself included) whose
    /// changes touch one of `paths` (`git log -1 --first-parent <sha> -- <paths>`, Argo CD's
    /// path rules); `None` when none does or `sha` is unknown.
    pub fn newest_touching(&self, repo: &str, sha: &str, paths: &[String]) -> Option<&Commit> {
        self.first_parent_range(repo, "", sha)
            .into_iter()
            .find(|commit| commit.touches(paths))
    }

    /// Repository URLs in order.
    pub fn repos(&self) -> Vec<String> {
        self.repos.keys().cloned().collect()
    }
}

/// A GitHub `push` event payload for `commit` on `branch` of `repo`. Every changed file is
/// listed under `modified` (the provider does not tell additions apart).
fn push_payload(repo: &str, branch: &str, before: &str, commit: &Commit) -> serde_json::Value {
    let timestamp = jiff::Timestamp::from_millisecond(commit.unix_ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let files: Vec<&String> = commit.changes.keys().collect();
    let head = serde_json::json!({
        "id": commit.sha,
        "message": commit.message,
        "timestamp": timestamp,
        "author": {"name": commit.author},
        "added": [],
        "removed": [],
        "modified": files,
    });
    let name = repo
        .rsplit('/')
        .next()
        .unwrap_or(repo)
        .trim_end_matches(".git");
    serde_json::json!({
        "ref": format!("refs/heads/{branch}"),
        "before": if before.is_empty() { "0".repeat(40) } else { before.to_string() },
        "after": commit.sha,
        "repository": {"name": name, "clone_url": repo, "default_branch": "main"},
        "head_commit": head,
        "commits": [head],
    })
}

/// Sends the provider's push deliveries as they are made, each once (GitHub does not
/// redeliver a failed delivery on its own) with a 10 s timeout (GitHub's), headers
/// `X-GitHub-Event: push`, `X-GitHub-Delivery` and, for a hook with a secret,
/// `X-Hub-Signature-256`. Runs until the host stops.
pub async fn deliver_webhooks(env: orrery_system::env::SharedEnv, git: SharedGit) {
    use http_body_util::{BodyExt, Full};
    use orrery_system::observe::WorldEvent;
    let client = orrery_system::env::http::client_with_connect_timeout::<Full<bytes::Bytes>>(
        env.clone(),
        std::time::Duration::from_secs(10),
        std::time::Duration::from_secs(10),
    );
    loop {
        let deliveries = git.lock().take_deliveries();
        for delivery in deliveries {
            let body = bytes::Bytes::from(delivery.payload.to_string());
            let mut request = http::Request::post(&delivery.hook.url)
                .header("content-type", "application/json")
                .header("x-github-event", "push")
                .header("x-github-delivery", &delivery.id);
            if let Some(secret) = &delivery.hook.secret {
                request = request.header(
                    "x-hub-signature-256",
                    orrery_system::runtime::webhook_source::signature(secret, &body),
                );
            }
            let status = match request.body(Full::new(body)) {
                Ok(request) => match tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    client.request(request),
                )
                .await
                {
                    Ok(Ok(response)) => {
                        let status = response.status().as_u16();
                        let _ = response.into_body().collect().await;
                        status
                    }
                    _ => 0,
                },
                Err(_) => 0,
            };
            env.observe(
                WorldEvent::GitWebhook {
                    delivery: delivery.id.clone(),
                    url: delivery.hook.url.clone(),
                    after: delivery.payload["after"].as_str().unwrap_or("").to_string(),
                    status,
                }
                .into(),
            );
        }
        env.sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The provider shared between hosts.
#[derive(Clone, Debug, Default)]
pub struct SharedGit(Arc<Mutex<Git>>);

impl SharedGit {
    /// Locks the provider (never held across an await).
    pub fn lock(&self) -> MutexGuard<'_, Git> {
        self.0.lock().expect("git lock poisoned")
    }
}

/// The API's answer to a refused pull-request call: 404 unknown, 422 invalid, 405 not
/// mergeable (GitHub's statuses).
fn pull_error(e: PullError) -> http::Response<orrery_system::env::http::Body> {
    let status = match e {
        PullError::Unknown(_) => http::StatusCode::NOT_FOUND,
        PullError::Invalid(_) => http::StatusCode::UNPROCESSABLE_ENTITY,
        PullError::NotMergeable(_) => http::StatusCode::METHOD_NOT_ALLOWED,
    };
    orrery_system::env::http::json(status, &serde_json::json!({"message": e.to_string()}))
}

/// A `POST /api/commits` body: `{"repo","path","content","message","author","branch"}`
/// (message empty, author `unknown` and branch `main` when left out); shared with `orrery
/// serve git`.
pub struct CommitRequest {
    /// Repository URL.
    pub repo: String,
    /// File path in the repository.
    pub path: String,
    /// The file's new content.
    pub content: String,
    /// Commit message.
    pub message: String,
    /// Author.
    pub author: String,
    /// The branch to commit on (`main` when left out; a new branch forks from `main`).
    pub branch: String,
    /// `"sha"`: the blob SHA the file must have on the branch now (`""`: it must not exist),
    /// as GitHub's create-or-update-file call asks for the SHA of the file it replaces; a
    /// mismatch is refused with 409 and nothing is committed. Left out: no check.
    pub expected: Option<String>,
}

/// The blob SHA of a file's content as the simulated provider names it (content-derived,
/// 40 hex characters; not git's SHA-1, which real mode answers).
pub fn blob_sha(content: &str) -> String {
    (0..3u8)
        .map(|i| {
            format!(
                "{:016x}",
                fnv1a_64(&[b"blob\0", content.as_bytes(), &[i]].concat())
            )
        })
        .collect::<String>()[..40]
        .to_string()
}

impl CommitRequest {
    /// Reads the body (at most 1 MiB), or the 400 answer naming what is wrong.
    pub async fn read(
        request: http::Request<hyper::body::Incoming>,
    ) -> Result<CommitRequest, http::Response<orrery_system::env::http::Body>> {
        use http_body_util::BodyExt;
        use orrery_system::env::http::json;
        let refuse = |why: String| {
            json(
                http::StatusCode::BAD_REQUEST,
                &serde_json::json!({"error": why}),
            )
        };
        let body = http_body_util::Limited::new(request.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| refuse(format!("reading the body: {e}")))?
            .to_bytes();
        let parsed: serde_json::Value =
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        let field = |name: &str| parsed[name].as_str().map(str::to_string);
        let (Some(repo), Some(path), Some(content)) =
            (field("repo"), field("path"), field("content"))
        else {
            return Err(refuse("want repo, path and content".into()));
        };
        let branch = field("branch").unwrap_or_else(|| MAIN.into());
        if branch.is_empty() {
            return Err(refuse("branch: empty".into()));
        }
        Ok(CommitRequest {
            repo,
            path,
            content,
            message: field("message").unwrap_or_default(),
            author: field("author").unwrap_or_else(|| "unknown".into()),
            branch,
            expected: field("sha"),
        })
    }
}

/// The Git provider's HTTP API, a small subset shaped after the hosted providers':
/// - `GET /api/repos` → `{"repositories": [...]}`;
/// - `POST /api/commits` `{"repo","path","content","message","author","branch","sha"}` → `201 {"sha": …}`
///   (400 with the reason for a malformed body; with `"sha"`, 409 when the file's blob SHA on
///   the branch is not that one — GitHub's create-or-update-file precondition). Like
///   GitHub's, it commits even when the content is unchanged;
/// - `GET /api/contents?repo=&path=&ref=` (GitHub's `GET /repos/{o}/{r}/contents/{path}?ref=`)
///   → `{"path","content","sha"}` (the blob SHA), `ref` a branch (default `main`) or a SHA;
///   404 for an unknown revision or a file that does not exist there;
/// - `GET /api/compare?repo=&base=&head=` (GitHub's `compare/{base}...{head}`) →
///   `{"status": "identical"|"ahead"|"behind"|"diverged"}`; 404 for an unknown revision;
/// - `POST /api/pulls` `{"repo","head","base","title","author"}` → `201 {"number"}` (422
///   when there is nothing to merge or one is open for `head`; `base` must be `main`);
/// - `GET /api/pulls?repo=&state=open|closed|all` → the pull requests (`number`, `head`,
///   `base`, `title`, `state`, `merged`, `merge_commit_sha`);
/// - `PUT /api/pulls/{n}/merge?repo=` → `{"sha","merged":true}`: a merge commit on `main`
///   (its push webhook delivered), 405 when it is closed;
/// - `GET /api/commits?repo=&sha=&paths=` (GitHub's `GET /repos/{o}/{r}/commits?sha=&path=&per_page=1`;
///   `sha` a SHA or a branch,
///   with `;`-separated paths as the `manifest-generate-paths` annotation resolves them) →
///   `[{"sha": …, "message": …}]` — the newest commit from `sha` along the first parents that touched
///   one of the paths, `[]` when none did; 404 for an unknown repository or SHA.
///
/// The `git` fault applies: an outage answers 503, `lost_commit_answers` answers a made
/// commit with 502, `latency` delays every answer,
/// beyond `hourly_limit` calls an hour the answer is 403 "API rate limit exceeded" (GitHub's
/// primary limit; every admitted answer carries `x-ratelimit-limit`, `-remaining`, `-used`, `-reset`
/// and `-resource` while it is set), and beyond `rate_limit` calls a minute 429 with
/// `retry-after` and `x-ratelimit-remaining: 0`, `x-ratelimit-reset: <unix seconds>` (a
/// secondary limit). Serves until the listener fails.
pub async fn serve(
    env: orrery_system::env::SharedEnv,
    git: SharedGit,
    addr: &str,
) -> std::io::Result<()> {
    use orrery_system::env::http::json;
    use serde_json::json as j;
    let listener = env.listen(addr).await?;
    orrery_system::env::http::serve(listener, move |request, _| {
        let (env, git) = (env.clone(), git.clone());
        async move {
            let serving = git.lock().serving;
            if !serving.latency.is_zero() {
                env.sleep(serving.latency).await;
            }
            if serving.outage {
                return json(
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    &j!({"message": "Service Unavailable"}),
                );
            }
            let now_s = env.unix_millis() / 1000;
            let admitted = git.lock().admit(now_s);
            let quota = match admitted {
                Ok(quota) => quota,
                Err(refusal) => return refused(refusal, now_s),
            };
            let mut answer = route(&git, &env, request).await;
            if let Some(quota) = quota {
                rate_headers(
                    answer.headers_mut(),
                    quota.limit,
                    quota.limit - quota.used,
                    quota.used,
                    quota.reset,
                );
            }
            answer
        }
    })
    .await
}

/// One API call, admitted by the rate limits.
async fn route(
    git: &SharedGit,
    env: &orrery_system::env::SharedEnv,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<orrery_system::env::http::Body> {
    use orrery_system::env::http::json;
    use serde_json::{json as j, Value};
    match (request.method().as_str(), request.uri().path()) {
        ("GET", "/api/commits") => {
            let params = orrery_system::env::http::query(request.uri());
            let param = |k: &str| params.get(k).cloned().unwrap_or_default();
            let paths: Vec<String> = param("paths")
                .split(';')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            let git = git.lock();
            // `sha` is a SHA or a branch name, as GitHub takes it.
            let Some(from) = git
                .resolve(&param("repo"), &param("sha"))
                .map(|c| c.sha.clone())
            else {
                return json(
                    http::StatusCode::NOT_FOUND,
                    &j!({"message": format!("No commit found for SHA: {}", param("sha"))}),
                );
            };
            let found: Vec<Value> = git
                .newest_touching(&param("repo"), &from, &paths)
                .map(|c| j!({"sha": c.sha, "message": c.message}))
                .into_iter()
                .collect();
            json(http::StatusCode::OK, &Value::Array(found))
        }
        ("GET", "/api/repos") => json(
            http::StatusCode::OK,
            &j!({"repositories": git.lock().repos()}),
        ),
        ("POST", "/api/commits") => {
            let commit = match CommitRequest::read(request).await {
                Ok(commit) => commit,
                Err(refusal) => return refusal,
            };
            let mut git = git.lock();
            if let Some(expected) = &commit.expected {
                let branch = if git.resolve(&commit.repo, &commit.branch).is_some() {
                    commit.branch.as_str()
                } else {
                    MAIN
                };
                let now = git
                    .file_at(&commit.repo, branch, &commit.path)
                    .flatten()
                    .map(|content| blob_sha(&content))
                    .unwrap_or_default();
                if now != *expected {
                    return json(
                        http::StatusCode::CONFLICT,
                        &j!({"message": format!("{} does not match {expected}", commit.path)}),
                    );
                }
            }
            let sha = git.commit_on(
                &commit.repo,
                &commit.branch,
                &commit.author,
                &commit.message,
                env.unix_millis(),
                [(commit.path, commit.content)].into_iter().collect(),
            );
            if git.serving.lost_commit_answers {
                return json(
                    http::StatusCode::BAD_GATEWAY,
                    &j!({"message": "Bad Gateway"}),
                );
            }
            json(http::StatusCode::CREATED, &j!({"sha": sha}))
        }
        ("GET", "/api/contents") => {
            let params = orrery_system::env::http::query(request.uri());
            let param = |k: &str| params.get(k).cloned().unwrap_or_default();
            let rev = params.get("ref").cloned().unwrap_or_else(|| MAIN.into());
            match git.lock().file_at(&param("repo"), &rev, &param("path")) {
                Some(Some(content)) => json(
                    http::StatusCode::OK,
                    &j!({"path": param("path"), "sha": blob_sha(&content), "content": content}),
                ),
                Some(None) => json(
                    http::StatusCode::NOT_FOUND,
                    &j!({"message": format!("Not Found: {} at {rev}", param("path"))}),
                ),
                None => json(
                    http::StatusCode::NOT_FOUND,
                    &j!({"message": format!("No commit found for the ref {rev}")}),
                ),
            }
        }
        ("GET", "/api/compare") => {
            let params = orrery_system::env::http::query(request.uri());
            let param = |k: &str| params.get(k).cloned().unwrap_or_default();
            match git
                .lock()
                .compare(&param("repo"), &param("base"), &param("head"))
            {
                Some(status) => json(http::StatusCode::OK, &j!({"status": status})),
                None => json(
                    http::StatusCode::NOT_FOUND,
                    &j!({"message": format!("No common ancestor or unknown revision: {}...{}", param("base"), param("head"))}),
                ),
            }
        }
        ("POST", "/api/pulls") => {
            let body = match http_body_util::BodyExt::collect(http_body_util::Limited::new(
                request.into_body(),
                1 << 20,
            ))
            .await
            {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    return json(
                        http::StatusCode::BAD_REQUEST,
                        &j!({"message": format!("reading the body: {e}")}),
                    )
                }
            };
            let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let field = |name: &str| parsed[name].as_str().map(str::to_string);
            let (Some(repo), Some(head)) = (field("repo"), field("head")) else {
                return json(
                    http::StatusCode::UNPROCESSABLE_ENTITY,
                    &j!({"message": "want repo and head (and base, title, author)"}),
                );
            };
            let opened = git.lock().open_pull(
                &repo,
                &head,
                &field("base").unwrap_or_else(|| MAIN.into()),
                &field("title").unwrap_or_default(),
                &field("author").unwrap_or_else(|| "unknown".into()),
            );
            match opened {
                Ok(number) => json(
                    http::StatusCode::CREATED,
                    &j!({"number": number, "state": "open"}),
                ),
                Err(e) => pull_error(e),
            }
        }
        ("GET", "/api/pulls") => {
            let params = orrery_system::env::http::query(request.uri());
            let repo = params.get("repo").cloned().unwrap_or_default();
            let state = params.get("state").map_or("open", String::as_str);
            if !matches!(state, "open" | "closed" | "all") {
                return json(
                    http::StatusCode::UNPROCESSABLE_ENTITY,
                    &j!({"message": format!("state {state:?}: want open, closed or all")}),
                );
            }
            let git = git.lock();
            let listed: Vec<Value> = git
                .pulls(&repo)
                .iter()
                .filter(|p| match state {
                    "all" => true,
                    "closed" => p.state == PullState::Closed,
                    _ => p.state == PullState::Open,
                })
                .map(|p| {
                    j!({
                        "number": p.number,
                        "head": p.head,
                        "base": p.base,
                        "title": p.title,
                        "author": p.author,
                        "state": p.state,
                        "merged": p.merge_commit_sha.is_some(),
                        "merge_commit_sha": p.merge_commit_sha,
                    })
                })
                .collect();
            json(http::StatusCode::OK, &Value::Array(listed))
        }
        ("PUT", path) if path.starts_with("/api/pulls/") && path.ends_with("/merge") => {
            let params = orrery_system::env::http::query(request.uri());
            let repo = params.get("repo").cloned().unwrap_or_default();
            let number = path
                .trim_start_matches("/api/pulls/")
                .trim_end_matches("/merge")
                .parse::<u64>();
            let Ok(number) = number else {
                return json(
                    http::StatusCode::BAD_REQUEST,
                    &j!({"message": format!("{path}: not a pull request number")}),
                );
            };
            let merged = git
                .lock()
                .merge_pull(&repo, number, "merge-button", env.unix_millis());
            match merged {
                Ok(sha) => json(
                    http::StatusCode::OK,
                    &j!({"sha": sha, "merged": true, "message": "Pull Request successfully merged"}),
                ),
                Err(e) => pull_error(e),
            }
        }
        (_, path) => json(
            http::StatusCode::NOT_FOUND,
            &j!({"error": format!("no route {path}")}),
        ),
    }
}

/// The answer to a call the rate limits refuse, as GitHub words and heads it.
fn refused(refusal: Refusal, now_s: u64) -> http::Response<orrery_system::env::http::Body> {
    use orrery_system::env::http::json;
    use serde_json::json as j;
    match refusal {
        Refusal::Primary { limit, reset } => {
            let mut answer = json(
                http::StatusCode::FORBIDDEN,
                &j!({
                    "message": "API rate limit exceeded for installation. If you reach out to GitHub Support for help, please include the request ID.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                }),
            );
            rate_headers(answer.headers_mut(), limit, 0, limit, reset);
            answer
        }
        Refusal::Secondary { reset } => {
            let mut answer = json(
                http::StatusCode::TOO_MANY_REQUESTS,
                &j!({"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}),
            );
            insert_headers(
                answer.headers_mut(),
                [
                    ("retry-after", reset.saturating_sub(now_s).to_string()),
                    ("x-ratelimit-remaining", "0".to_string()),
                    ("x-ratelimit-reset", reset.to_string()),
                ],
            );
            answer
        }
    }
}

/// GitHub's `x-ratelimit-*` headers for the `core` resource.
fn rate_headers(headers: &mut http::HeaderMap, limit: u32, remaining: u32, used: u32, reset: u64) {
    insert_headers(
        headers,
        [
            ("x-ratelimit-limit", limit.to_string()),
            ("x-ratelimit-remaining", remaining.to_string()),
            ("x-ratelimit-used", used.to_string()),
            ("x-ratelimit-reset", reset.to_string()),
            ("x-ratelimit-resource", "core".to_string()),
        ],
    );
}

/// Sets each header (the values are numbers and ASCII words, always valid).
fn insert_headers<const N: usize>(
    headers: &mut http::HeaderMap,
    pairs: [(&'static str, String); N],
) {
    for (name, value) in pairs {
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hourly_limit_refuses_until_its_hour_ends_and_outranks_the_minute() {
        let mut git = Git::default();
        git.serving.hourly_limit = 2;
        git.serving.rate_limit = 1;
        let quota = |used| Quota {
            limit: 2,
            used,
            reset: 1003700,
        };
        assert_eq!(git.admit(1000100), Ok(Some(quota(1))));
        // The minute's allowance is spent first: 429 until 1000160.
        assert_eq!(
            git.admit(1000130),
            Err(Refusal::Secondary { reset: 1000160 })
        );
        assert_eq!(git.admit(1000160), Ok(Some(quota(2))));
        // Then the hour's, whatever the minute says: refused calls count against neither.
        for at in [1000220, 1001000, 1003699] {
            assert_eq!(
                git.admit(at),
                Err(Refusal::Primary {
                    limit: 2,
                    reset: 1003700
                })
            );
        }
        let next = Quota {
            limit: 2,
            used: 1,
            reset: 1007300,
        };
        assert_eq!(git.admit(1003700), Ok(Some(next)));
        // Without limits nothing is counted.
        git.serving = Serving::default();
        assert_eq!(git.admit(1003701), Ok(None));
    }

    #[test]
    fn files_and_last_change_follow_history() {
        let mut git = Git::default();
        let one = git.commit(
            "r",
            "a",
            "m1",
            0,
            BTreeMap::from([
                ("apps/x/d.yaml".into(), "v1".into()),
                ("apps/y/d.yaml".into(), "v1".into()),
            ]),
        );
        let two = git.commit(
            "r",
            "a",
            "m2",
            1,
            BTreeMap::from([("apps/x/d.yaml".into(), "v2".into())]),
        );
        assert_ne!(one, two);
        assert_eq!(
            git.files_at("r", &two, "apps/x").unwrap()["apps/x/d.yaml"],
            "v2"
        );
        assert_eq!(
            git.files_at("r", &one, "apps/x").unwrap()["apps/x/d.yaml"],
            "v1"
        );
        assert_eq!(git.last_change("r", &two, "apps/y").unwrap().sha, one);
        assert_eq!(git.head("r").unwrap().sha, two);
    }

    #[test]
    fn files_at_takes_only_files_directly_under_the_path() {
        let mut git = Git::default();
        let changes = BTreeMap::from([
            ("apps/x/a.yaml".into(), "a".into()),
            ("apps/x/sub/b.yaml".into(), "nested".into()),
            ("apps/x2/c.yaml".into(), "sibling".into()),
            ("apps/x-y/d.yaml".into(), "sorts-before".into()),
            ("top.yaml".into(), "root".into()),
        ]);
        let sha = git.commit("r", "a", "m", 0, changes);
        let files = git.files_at("r", &sha, "apps/x/").unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["apps/x/a.yaml"]);
        assert_eq!(
            git.files_at("r", &sha, "")
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["top.yaml"]
        );
        assert!(git.files_at("r", "unknown", "apps/x").is_none());
    }
}
