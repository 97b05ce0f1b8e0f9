//! The repo-server's `GetChangeRevision` (the Codefresh fork's
//! `reposerver/repository/change_revision.go`, argo-cd v3) over the simulated Git provider,
//! and the harness's ground truth it is judged against.
//!
//! The real algorithm, which the simulated Argo CD server answers
//! `/api/v1/application/changeRevision` with:
//! 1. no refresh paths → `InvalidArgument`; `current` must resolve (empty: `main`'s head);
//! 2. an empty `previous` → `current` is the change revision;
//! 3. `ListRevisions(previous, current)`: `[current]` when equal, else `git rev-list
//!    --ancestry-path previous..current` (newest first); both must be SHAs;
//! 4. no revisions (no ancestry path) → `current`;
//! 5. the first (newest) revision whose `git diff-tree` lists a file under the refresh paths
//!    (`AppFilesHaveChanged`; a commit listing no files is skipped) → it; none → empty.
//!
//! Known consequences, kept: a first sync or a rewritten history attributes `current` even
//! when it did not touch the app; a change that reaches `main` by a merge commit whose branch
//! forked before `previous` is not found (the branch's commits are off the ancestry path and
//! `diff-tree` lists nothing for a merge).

use orrery_system::runtime::acr::paths::files_have_changed;

use crate::world::git::Git;

/// Why `GetChangeRevision` failed (gRPC codes as the gateway maps them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeRevisionError {
    /// `codes.InvalidArgument` (HTTP 400).
    #[error("{0}")]
    InvalidArgument(String),
    /// `codes.Internal` (HTTP 500).
    #[error("{0}")]
    Internal(String),
}

fn is_sha(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The repo-server's answer for `repo` between `previous` and `current` with the app's
/// refresh paths: `Some(revision)` or `None` (no change found).
pub fn change_revision(
    git: &Git,
    repo: &str,
    current: &str,
    previous: &str,
    refresh: &[String],
) -> Result<Option<String>, ChangeRevisionError> {
    if refresh.is_empty() {
        return Err(ChangeRevisionError::InvalidArgument(
            "must pass a refresh path".into(),
        ));
    }
    let resolved = if current.is_empty() {
        git.head(repo).map(|c| c.sha.clone())
    } else {
        git.commit_by_sha(repo, current).map(|c| c.sha.clone())
    };
    let Some(current) = resolved else {
        return Err(ChangeRevisionError::Internal(format!(
            "unable to resolve git revision {current}: revision not found"
        )));
    };
    if previous.is_empty() {
        return Ok(Some(current));
    }
    let failed =
        || ChangeRevisionError::Internal(format!("failed to get revisions {previous}..{current}"));
    let revisions = if previous == current {
        vec![current.clone()]
    } else if !is_sha(previous) {
        return Err(failed());
    } else {
        git.rev_list_ancestry_path(repo, previous, &current)
            .ok_or_else(failed)?
    };
    if revisions.is_empty() {
        return Ok(Some(current));
    }
    for revision in revisions {
        let files = git.diff_tree(repo, &revision).unwrap_or_default();
        if !files.is_empty() && files_have_changed(refresh, &files) {
            return Ok(Some(revision));
        }
    }
    Ok(None)
}

/// The change revision a sync from `previous` to `current` should carry: the newest commit
/// on `main`'s first-parent chain `previous..current` (all of it when `previous` is empty)
/// whose changes relative to its first parent — a merge's included — touch `refresh`.
/// `None` when none does, for a `previous` off that chain (a rollback), and for `previous ==
/// current` (a sync that brought nothing new; the repo-server answers `current` when that
/// commit touched the app).
pub fn expected_change(
    git: &Git,
    repo: &str,
    previous: &str,
    current: &str,
    refresh: &[String],
) -> Option<String> {
    git.first_parent_range(repo, previous, current)
        .into_iter()
        .find(|commit| commit.touches(refresh))
        .map(|commit| commit.sha.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn files(entries: &[&str]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|f| (f.to_string(), format!("content of {f} ")))
            .collect()
    }

    #[test]
    fn the_newest_touching_commit_on_the_ancestry_path_is_the_change() {
        let mut git = Git::default();
        let base = git.commit(
            "r",
            "a",
            "base",
            0,
            files(&["apps/x/d.yaml", "apps/y/d.yaml"]),
        );
        let x = git.commit("r", "a", "x", 1, files(&["apps/x/d.yaml"]));
        let y = git.commit("r", "a", "y", 2, files(&["apps/y/d.yaml"]));
        let refresh = vec!["apps/x".to_string()];
        assert_eq!(
            change_revision(&git, "r", &y, &base, &refresh),
            Ok(Some(x.clone()))
        );
        assert_eq!(
            expected_change(&git, "r", &base, &y, &refresh),
            Some(x.clone())
        );
        // Nothing for x after x: no change found (empty), and the truth agrees.
        assert_eq!(change_revision(&git, "r", &y, &x, &refresh), Ok(None));
        assert_eq!(expected_change(&git, "r", &x, &y, &refresh), None);
        // An empty previous: the current revision, touching or not (the truth looks back).
        assert_eq!(
            change_revision(&git, "r", &y, "", &refresh),
            Ok(Some(y.clone()))
        );
        assert_eq!(
            expected_change(&git, "r", "", &y, &refresh),
            Some(x.clone())
        );
        // previous == current: only that commit is looked at.
        assert_eq!(
            change_revision(&git, "r", &x, &x, &refresh),
            Ok(Some(x.clone()))
        );
        // No refresh path, an unknown revision, a previous that is not a SHA: errors.
        assert!(matches!(
            change_revision(&git, "r", &y, &base, &[]),
            Err(ChangeRevisionError::InvalidArgument(_))
        ));
        assert!(matches!(
            change_revision(&git, "r", &"f".repeat(40), &base, &refresh),
            Err(ChangeRevisionError::Internal(_))
        ));
        assert!(matches!(
            change_revision(&git, "r", &y, "main", &refresh),
            Err(ChangeRevisionError::Internal(_))
        ));
    }

    #[test]
    fn a_change_merged_from_a_branch_forked_before_previous_is_not_found() {
        let mut git = Git::default();
        let base = git.commit(
            "r",
            "a",
            "base",
            0,
            files(&["apps/x/d.yaml", "apps/y/d.yaml"]),
        );
        let feature = git.commit_on(
            "r",
            "feature",
            "a",
            "x on a branch",
            1,
            files(&["apps/x/d.yaml"]),
        );
        let previous = git.commit("r", "a", "y", 2, files(&["apps/y/d.yaml"]));
        let merge = git.merge("r", "feature", "a", "merge feature", 3).unwrap();
        let refresh = vec!["apps/x".to_string()];
        // The branch commit is not a descendant of previous; the merge lists no files.
        assert_eq!(
            git.rev_list_ancestry_path("r", &previous, &merge).unwrap(),
            vec![merge.clone()]
        );
        assert_eq!(
            change_revision(&git, "r", &merge, &previous, &refresh),
            Ok(None)
        );
        // The truth: the merge brought x's change to main.
        assert_eq!(
            expected_change(&git, "r", &previous, &merge, &refresh),
            Some(merge)
        );
        assert_ne!(feature, base);
    }
}
