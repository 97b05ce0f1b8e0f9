//! The simulated Git provider: repositories, commits, files and revision metadata.
//!
//! Shared by the workload (which pushes commits, like developers do) and by Argo CD
//! (which reads revisions and manifests). Commit SHAs are derived from content, so the
//! same seed produces the same history.

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
    /// Files written by this commit (path → content); deletions are not modelled.
    pub changes: BTreeMap<String, String>,
}

/// A repository: an append-only list of commits on one branch.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Repo {
    /// Oldest first.
    pub commits: Vec<Commit>,
}

/// All repositories, by URL.
#[derive(Debug, Default)]
pub struct Git {
    repos: BTreeMap<String, Repo>,
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
    /// Appends a commit to `repo` (created on first use) and returns its SHA.
    pub fn commit(&mut self, repo: &str, author: &str, message: &str, unix_ms: u64, changes: BTreeMap<String, String>) -> String {
        let repository = self.repos.entry(repo.to_string()).or_default();
        let parent = repository.commits.last().map(|c| c.sha.clone()).unwrap_or_default();
        let sha = sha(&parent, author, message, &changes);
        repository.commits.push(Commit { sha: sha.clone(), author: author.into(), message: message.into(), unix_ms, changes });
        sha
    }

    /// The newest commit of `repo`.
    pub fn head(&self, repo: &str) -> Option<&Commit> {
        self.repos.get(repo)?.commits.last()
    }

    /// A commit by SHA.
    pub fn commit_by_sha(&self, repo: &str, sha: &str) -> Option<&Commit> {
        self.repos.get(repo)?.commits.iter().find(|c| c.sha == sha)
    }

    /// The files under `path` as of `sha` (path → content), or `None` if `sha` is unknown.
    pub fn files_at(&self, repo: &str, sha: &str, path: &str) -> Option<BTreeMap<String, String>> {
        let commits = &self.repos.get(repo)?.commits;
        let end = commits.iter().position(|c| c.sha == sha)?;
        let prefix = format!("{}/", path.trim_end_matches('/'));
        let mut files = BTreeMap::new();
        for commit in &commits[..=end] {
            for (file, content) in &commit.changes {
                if file.starts_with(&prefix) {
                    files.insert(file.clone(), content.clone());
                }
            }
        }
        Some(files)
    }

    /// The newest commit at or before `sha` that changed anything under `path`.
    pub fn last_change(&self, repo: &str, sha: &str, path: &str) -> Option<&Commit> {
        let commits = &self.repos.get(repo)?.commits;
        let end = commits.iter().position(|c| c.sha == sha)?;
        let prefix = format!("{}/", path.trim_end_matches('/'));
        commits[..=end].iter().rev().find(|c| c.changes.keys().any(|f| f.starts_with(&prefix)))
    }

    /// Repository URLs in order.
    pub fn repos(&self) -> Vec<String> {
        self.repos.keys().cloned().collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_last_change_follow_history() {
        let mut git = Git::default();
        let one = git.commit("r", "a", "m1", 0, BTreeMap::from([("apps/x/d.yaml".into(), "v1".into()), ("apps/y/d.yaml".into(), "v1".into())]));
        let two = git.commit("r", "a", "m2", 1, BTreeMap::from([("apps/x/d.yaml".into(), "v2".into())]));
        assert_ne!(one, two);
        assert_eq!(git.files_at("r", &two, "apps/x").unwrap()["apps/x/d.yaml"], "v2");
        assert_eq!(git.files_at("r", &one, "apps/x").unwrap()["apps/x/d.yaml"], "v1");
        assert_eq!(git.last_change("r", &two, "apps/y").unwrap().sha, one);
        assert_eq!(git.head("r").unwrap().sha, two);
    }
}
