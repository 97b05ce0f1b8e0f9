//! The house, drawn from its own imports: no circle between modules, and the command line
//! apart from the simulator library.
//!
//! Every `.rs` file under `system/src`, `sim/src` and `cli/src` is a module. A module depends
//! on another when its code (comments and `#[cfg(test)] mod tests` aside) names a path into
//! it: `use crate::a::b::…`, `super::…`, `orrery_sim::…`, `orrery_system::…`, grouped imports
//! included. The test fails with each circle it finds, file by file, so the fix is a type
//! moved to the lower of the two rooms (CONTRIBUTING.md, "The house").

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: the crate's name, then the path of module names (`["world", "apiserver"]`).
type Module = Vec<String>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every crate of the house: its name in paths and its `src` folder.
const CRATES: [(&str, &str); 3] = [
    ("orrery_system", "system/src"),
    ("orrery_sim", "sim/src"),
    ("orrery_cli", "cli/src"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is (`mod.rs`, `lib.rs` and `main.rs` are their folder's).
fn module_of(krate: &str, src: &Path, file: &Path) -> Module {
    let relative = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = vec![krate.to_string()];
    parts.extend(relative.iter().map(|p| p.to_string_lossy().into_owned()));
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) && parts.len() > 1
    {
        parts.pop();
    }
    parts
}

/// The code of a file without comments, string literals' contents and its unit tests.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                // A string literal: skipped, escapes included (raw strings hold no path we need).
                let mut escaped = false;
                for c in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path the code names that starts at a crate root or `super`: its segments, with a
/// grouped import (`a::{b::C, d}`) expanded into one path per item.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let starts = [
        "crate",
        "super",
        "self",
        "orrery_system",
        "orrery_sim",
        "orrery_cli",
    ];
    let bytes: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && is_ident(bytes[j]) {
            j += 1;
        }
        let word: String = bytes[i..j].iter().collect();
        if !starts.contains(&word.as_str()) {
            i = j;
            continue;
        }
        let (paths, end) = parse_path(&bytes, i);
        out.extend(paths);
        i = end.max(j);
    }
    out
}

/// Parses `a::b::{c, d::e}` from `at`: the paths and where parsing stopped.
fn parse_path(chars: &[char], at: usize) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    let mut i = at;
    loop {
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        if i > start {
            segments.push(chars[start..i].iter().collect::<String>());
        }
        if i + 1 < chars.len() && chars[i] == ':' && chars[i + 1] == ':' {
            i += 2;
            if i < chars.len() && chars[i] == '{' {
                // A group: each top-level item is a path of its own under `segments`.
                let mut out = Vec::new();
                i += 1;
                loop {
                    while i < chars.len() && chars[i].is_whitespace() {
                        i += 1;
                    }
                    if i >= chars.len() || chars[i] == '}' {
                        return (if out.is_empty() { vec![segments] } else { out }, i + 1);
                    }
                    let (inner, end) = parse_path(chars, i);
                    for mut path in inner {
                        let mut full = segments.clone();
                        full.append(&mut path);
                        out.push(full);
                    }
                    i = end;
                    // Skip `as name` and anything else up to the next item.
                    while i < chars.len() && chars[i] != ',' && chars[i] != '}' {
                        i += 1;
                    }
                    if i < chars.len() && chars[i] == ',' {
                        i += 1;
                    }
                }
            }
            continue;
        }
        return (vec![segments], i);
    }
}

/// The module a path lands in: the longest prefix that is a module.
fn resolve(from: &Module, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut target: Module = match path.first().map(String::as_str) {
        Some("crate") => vec![from[0].clone()],
        Some("self") => from.clone(),
        Some("super") => {
            // A module's `super` is its parent, whether it is a file or a folder's mod.rs.
            let mut parent = from.clone();
            parent.pop();
            parent
        }
        Some(krate) => vec![krate.to_string()],
        None => return None,
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        target.pop();
        rest = &rest[1..];
    }
    target.extend(rest.iter().cloned());
    while !target.is_empty() {
        if modules.contains(&target) {
            return Some(target);
        }
        target.pop();
    }
    None
}

/// The dependency graph of every module of the house.
fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let root = root();
    let mut files: BTreeMap<Module, PathBuf> = BTreeMap::new();
    for (krate, src) in CRATES {
        let src = root.join(src);
        let mut found = Vec::new();
        rust_files(&src, &mut found);
        for file in found {
            files.insert(module_of(krate, &src, &file), file);
        }
    }
    let modules: BTreeSet<Module> = files.keys().cloned().collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let to = edges.entry(module.clone()).or_default();
        for path in paths_in(&code_of(&text)) {
            if let Some(target) = resolve(module, &path, &modules) {
                if &target != module {
                    to.insert(target);
                }
            }
        }
    }
    edges
}

/// Strongly connected components with more than one module (Tarjan, iterative enough for
/// a few hundred modules).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[w].min(s.low[v]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.index[w].min(s.low[v]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

fn name(module: &Module) -> String {
    module.join("::")
}

#[test]
fn no_circle_between_modules() {
    let edges = graph();
    assert!(
        edges.len() > 150,
        "the house has {} modules: is the scan broken?",
        edges.len()
    );
    let found = circles(&edges);
    let described: Vec<String> = found
        .iter()
        .map(|c| {
            let members: BTreeSet<&Module> = c.iter().collect();
            let links: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|b| members.contains(b))
                        .map(move |b| format!("{} → {}", name(a), name(b)))
                })
                .collect();
            format!("{} modules: {}", c.len(), links.join(", "))
        })
        .collect();
    assert!(
        found.is_empty(),
        "circles between modules (move what both sides need to the lower one):\n{}",
        described.join("\n")
    );
}

#[test]
fn the_scan_sees_a_circle_when_there_is_one() {
    // The same scan over a made-up pair that names each other: one circle of two.
    let mut edges = BTreeMap::new();
    let a: Module = vec!["k".into(), "a".into()];
    let b: Module = vec!["k".into(), "b".into()];
    let modules: BTreeSet<Module> = [vec!["k".to_string()], a.clone(), b.clone()].into();
    for (from, code) in [
        (&a, "use crate::b::{Thing, other::X};"),
        (&b, "fn f() { super::a::g() }"),
    ] {
        let to: BTreeSet<Module> = paths_in(&code_of(code))
            .iter()
            .filter_map(|p| resolve(from, p, &modules))
            .filter(|t| t != from)
            .collect();
        edges.insert(from.clone(), to);
    }
    assert_eq!(circles(&edges), vec![vec![a, b]]);
    // Comments and strings name nothing.
    assert!(paths_in(&code_of("// crate::a\nlet s = \"crate::b\";")).is_empty());
}

#[test]
fn the_command_line_lives_apart_from_the_simulator_library() {
    let root = root();
    let manifest = std::fs::read_to_string(root.join("sim/Cargo.toml")).expect("sim/Cargo.toml");
    assert!(
        !manifest.contains("[[bin]]"),
        "sim/Cargo.toml declares a binary: the commands belong in cli/"
    );
    // The simulator library's root holds its rooms and nothing of the binary.
    let rooms = [
        "checkers", "env", "exit.rs", "explore", "faults", "harness", "lib.rs", "report",
        "scenario", "trace.rs", "world",
    ];
    let mut found: Vec<String> = std::fs::read_dir(root.join("sim/src"))
        .expect("sim/src")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let strays: Vec<&String> = found
        .iter()
        .filter(|f| !rooms.contains(&f.as_str()))
        .collect();
    assert!(
        strays.is_empty(),
        "sim/src holds {strays:?} beside its rooms {rooms:?}: a command goes to cli/src/commands/, \
         a new room is added to this list and to docs/architecture.md"
    );
    // Every command the CLI knows has its module in cli/src/commands/.
    let commands = root.join("cli/src/commands");
    for module in [
        "run.rs",
        "sweep",
        "shrink.rs",
        "farm.rs",
        "reports.rs",
        "determinism.rs",
        "serve",
        "record",
        "bench",
        "apiserver.rs",
    ] {
        assert!(
            commands.join(module).exists(),
            "cli/src/commands/{module} is missing"
        );
    }
}
