//! Which files belong to an app: Argo CD's refresh paths (`GetAppRefreshPaths`) and its
//! changed-files test (`AppFilesHaveChanged`), as in `util/app/path/path.go` (argo-cd v3).
//! The simulated repo-server, the ACR controller's hardened design and the harness's ground
//! truth all use these, so "touches the app" means one thing everywhere.

/// The annotation naming the paths an app's manifests depend on, `;`-separated; relative
/// entries are relative to `spec.source.path`, absolute ones to the repository root.
pub const MANIFEST_GENERATE_PATHS: &str = "argocd.argoproj.io/manifest-generate-paths";

/// Go's `filepath.Clean` for `/`-separated paths: no `.`, no `x/..`, no doubled or trailing
/// `/`; `..` above a rooted path is dropped; an empty result is `.`.
pub fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match out.last() {
                Some(last) if *last != ".." => {
                    out.pop();
                }
                _ if rooted => {}
                _ => out.push(".."),
            },
            part => out.push(part),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// The refresh paths of an app whose annotation is `annotation` and whose source path is
/// `source_path` (`GetAppRefreshPaths` for one source): empty entries are skipped, an
/// absolute entry loses its leading `/`, a relative one is joined to the source path and
/// cleaned. Entries are not trimmed (the v3 code does not trim).
pub fn refresh_paths(annotation: &str, source_path: &str) -> Vec<String> {
    annotation
        .split(';')
        .filter(|item| !item.is_empty())
        .map(|item| match item.strip_prefix('/') {
            Some(absolute) => absolute.to_string(),
            None => join(source_path, item),
        })
        .collect()
}

/// Go's `filepath.Join` of two elements: empty elements are ignored, the rest joined and
/// cleaned (both empty: empty).
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => String::new(),
        (true, false) => clean(b),
        (false, true) => clean(a),
        (false, false) => clean(&format!("{a}/{b}")),
    }
}

fn ensure_abs(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

/// Go's `filepath.Dir`.
fn dir(path: &str) -> String {
    match path.rfind('/') {
        Some(i) => clean(&path[..=i]),
        None => ".".into(),
    }
}

/// Whether a commit that changed `changed` touches an app with `refresh` paths
/// (`AppFilesHaveChanged`): no changed files or no refresh paths means yes (a payload
/// without a list must refresh); otherwise a file equal to a path, in or under a path's
/// directory, or matching a path as a glob (`filepath.Match`).
pub fn files_have_changed<S: AsRef<str>>(refresh: &[String], changed: &[S]) -> bool {
    if changed.is_empty() || refresh.is_empty() {
        return true;
    }
    // Each refresh path prepared once (absolute; its cleaned root with a trailing `/`;
    // whether it is a glob), and each changed file's directory once, not once per pair:
    // a commit storm asks this for every app and commit. A path without a glob
    // metacharacter matches as a glob exactly when it is equal, which is tested first.
    let refresh: Vec<Refresh> = refresh.iter().map(|item| Refresh::of(item)).collect();
    changed.iter().any(|file| {
        let file = ensure_abs(file.as_ref());
        let requested = with_slash(dir(&file));
        refresh.iter().any(|item| {
            file == item.path
                || item.contains(&requested)
                || (item.pattern && glob(&item.path, &file).unwrap_or(false))
        })
    })
}

/// One refresh path as `files_have_changed` compares it.
struct Refresh {
    /// The path made absolute.
    path: String,
    /// `clean(path)` with a trailing `/`.
    root: String,
    /// Whether it holds a glob metacharacter.
    pattern: bool,
}

impl Refresh {
    fn of(item: &str) -> Refresh {
        let path = ensure_abs(item);
        Refresh {
            root: with_slash(clean(&path)),
            pattern: item.contains(['*', '?', '[', '\\']),
            path,
        }
    }

    /// `security.EnforceToCurrentRoot(root, file)` for a file whose directory, with a
    /// trailing `/`, is `requested`: the root is `/`, that directory or one of its parents.
    fn contains(&self, requested: &str) -> bool {
        self.root == "/" || requested.starts_with(&self.root)
    }
}

/// `s` with a trailing `/`.
fn with_slash(mut s: String) -> String {
    if !s.ends_with('/') {
        s.push('/');
    }
    s
}

/// Go's `filepath.Match` for `/`-separated names: `*` any run of non-`/` characters, `?`
/// one non-`/` character, `[...]` a class (`^` negates, `a-z` ranges), `\` escapes.
/// `None` for a malformed pattern (Go's `ErrBadPattern`, which Argo CD treats as no match).
pub fn glob(pattern: &str, name: &str) -> Option<bool> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    glob_at(&p, &n)
}

fn glob_at(p: &[char], n: &[char]) -> Option<bool> {
    match p.first() {
        None => Some(n.is_empty()),
        Some('*') => {
            // Try every split that keeps the star inside one path element.
            let mut i = 0;
            loop {
                if glob_at(&p[1..], &n[i..])? {
                    return Some(true);
                }
                if i == n.len() || n[i] == '/' {
                    return Some(false);
                }
                i += 1;
            }
        }
        Some('?') => match n.first() {
            Some(c) if *c != '/' => glob_at(&p[1..], &n[1..]),
            _ => Some(false),
        },
        Some('[') => {
            let (matched, rest) = class(&p[1..], n.first().copied())?;
            if matched {
                glob_at(rest, &n[1..])
            } else {
                Some(false)
            }
        }
        Some('\\') => {
            let escaped = p.get(1)?;
            match n.first() {
                Some(c) if c == escaped => glob_at(&p[2..], &n[1..]),
                _ => Some(false),
            }
        }
        Some(c) => match n.first() {
            Some(d) if d == c => glob_at(&p[1..], &n[1..]),
            _ => Some(false),
        },
    }
}

/// Matches `c` against the class starting after `[` as Go's `matchChunk` does; returns
/// (matched, pattern after `]`), or `None` for a malformed class (a bare `-` or `]` where a
/// character belongs, an unterminated class). Unlike `?` and `*`, a class may match `/`.
fn class(p: &[char], c: Option<char>) -> Option<(bool, &[char])> {
    let negated = p.first() == Some(&'^');
    let mut i = usize::from(negated);
    let mut matched = false;
    let mut ranges = 0;
    loop {
        if p.get(i) == Some(&']') && ranges > 0 {
            i += 1;
            break;
        }
        let (lo, next) = class_char(p, i)?;
        i = next;
        let mut hi = lo;
        if p.get(i) == Some(&'-') {
            let (h, next) = class_char(p, i + 1)?;
            hi = h;
            i = next;
        }
        if c.is_some_and(|c| lo <= c && c <= hi) {
            matched = true;
        }
        ranges += 1;
    }
    Some((c.is_some() && matched != negated, &p[i..]))
}

/// Go's `getEsc`: one class character at `i` (escaped with `\`), and the index after it.
fn class_char(p: &[char], i: usize) -> Option<(char, usize)> {
    match *p.get(i)? {
        '-' | ']' => None,
        '\\' => Some((*p.get(i + 1)?, i + 2)),
        ch => Some((ch, i + 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn clean_follows_go() {
        for (input, want) in [
            ("", "."),
            (".", "."),
            ("a/./b", "a/b"),
            ("a/../b", "b"),
            ("a/b/../../..", ".."),
            ("/../a", "/a"),
            ("a//b/", "a/b"),
            ("/", "/"),
            ("apps/x/..", "apps"),
        ] {
            assert_eq!(clean(input), want, "clean({input:?})");
        }
    }

    #[test]
    fn refresh_paths_join_relative_and_strip_absolute() {
        assert_eq!(
            refresh_paths(".;../common;/platform/base;;", "apps/x"),
            s(&["apps/x", "apps/common", "platform/base"])
        );
        assert_eq!(refresh_paths("..", "apps"), s(&["."]));
        assert_eq!(refresh_paths("*.yaml", "apps/x"), s(&["apps/x/*.yaml"]));
        // An empty source path (the repository root): Go's Join ignores it.
        assert_eq!(refresh_paths(".;x/../y", ""), s(&[".", "y"]));
    }

    #[test]
    fn changed_files_under_equal_or_matching_a_path_touch_the_app() {
        let refresh = s(&["apps/x"]);
        assert!(files_have_changed(&refresh, &s(&["apps/x/deploy.yaml"])));
        assert!(files_have_changed(
            &refresh,
            &s(&["apps/x/sub/deploy.yaml"])
        ));
        assert!(files_have_changed(&refresh, &s(&["apps/x"])));
        assert!(!files_have_changed(&refresh, &s(&["apps/xy/deploy.yaml"])));
        assert!(!files_have_changed(&refresh, &s(&["apps/deploy.yaml"])));
        // A glob matches one path element per star.
        let glob_paths = s(&["apps/*/values.yaml"]);
        assert!(files_have_changed(&glob_paths, &s(&["apps/y/values.yaml"])));
        assert!(!files_have_changed(
            &glob_paths,
            &s(&["apps/y/z/values.yaml"])
        ));
        // The root touches everything; no list or no paths means "refresh".
        assert!(files_have_changed(&s(&["."]), &s(&["anything/at/all"])));
        assert!(files_have_changed::<String>(&refresh, &[]));
        assert!(files_have_changed(&[], &s(&["elsewhere/f"])));
    }

    #[test]
    fn globs_follow_filepath_match() {
        assert_eq!(glob("/a/*.yaml", "/a/b.yaml"), Some(true));
        assert_eq!(glob("/a/?.yaml", "/a/bc.yaml"), Some(false));
        assert_eq!(glob("/a/[b-d].yaml", "/a/c.yaml"), Some(true));
        assert_eq!(glob("/a/[^b-d].yaml", "/a/c.yaml"), Some(false));
        assert_eq!(glob("/a/\\*.yaml", "/a/*.yaml"), Some(true));
        assert_eq!(glob("/a/[b", "/a/b"), None);
        // Malformed classes are errors (no match), as Go's ErrBadPattern.
        assert_eq!(glob("/a/[]b]", "/a/b"), None);
        assert_eq!(glob("/a/[-b]", "/a/b"), None);
        assert_eq!(glob("/a/[b-]", "/a/b"), None);
        // A class may match the separator; `?` may not.
        assert_eq!(glob("/a[/]b", "/a/b"), Some(true));
        assert_eq!(glob("/a?b", "/a/b"), Some(false));
    }

    /// `EnforceToCurrentRoot` pair by pair, as `files_have_changed` asked it before it
    /// prepared each side once.
    fn under_pairwise(root: &str, file: &str) -> bool {
        let root = clean(root);
        let requested = dir(file);
        if root == "/" || root == requested {
            return true;
        }
        let with_slash = |s: &str| {
            if s.ends_with('/') {
                s.to_string()
            } else {
                format!("{s}/")
            }
        };
        with_slash(&requested).starts_with(&with_slash(&root))
    }

    #[test]
    fn a_prepared_root_contains_what_the_pairwise_test_put_under_it() {
        let paths = [
            "", "/", ".", "a", "a/", "a/b", "a/b/", "a//b", "a/./b", "a/../b", "../a", "ab",
            "a/bc", "a/b/c", "/a/b", "b", "a/b/../c", "a/*", "a/?",
        ];
        for root in paths {
            let prepared = Refresh::of(root);
            for file in paths {
                let file = ensure_abs(file);
                let requested = with_slash(dir(&file));
                assert_eq!(
                    prepared.contains(&requested),
                    under_pairwise(&prepared.path, &file),
                    "root {root:?}, file {file:?}"
                );
            }
        }
    }
}
