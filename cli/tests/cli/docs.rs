//! The documentation checked against the repository and the CLI: every relative link and
//! anchor of every Markdown file resolves, every `orrery …` command line quoted in a code
//! block parses with the current command line (and every one quoted in the text names a real
//! command and real flags), the book's table of contents lists every page, and the README
//! stays short.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::Parser;
use orrery_cli::Cli;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace root")
}

/// Every Markdown file the project writes by hand: not the generated reports, not build
/// output.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !matches!(
                    name,
                    "target" | "reports" | "node_modules" | ".git" | ".farm"
                ) {
                    walk(&path, out);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

/// A Markdown file split into its prose (code blocks blanked) and its fenced code blocks
/// (language, text).
struct Page {
    prose: String,
    blocks: Vec<(String, String)>,
}

fn split(text: &str) -> Page {
    let mut prose = String::new();
    let mut blocks = Vec::new();
    let mut fence: Option<(String, String, String)> = None; // (marker, lang, body)
    for line in text.lines() {
        let trimmed = line.trim_start();
        match &mut fence {
            Some((marker, _, body)) => {
                if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
                    let (_, lang, body) = fence.take().expect("in a fence");
                    blocks.push((lang, body));
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
                prose.push('\n');
            }
            None => {
                if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
                    let marker: String = trimmed
                        .chars()
                        .take_while(|c| *c == '`' || *c == '~')
                        .collect();
                    let lang = trimmed[marker.len()..].trim().to_string();
                    fence = Some((marker, lang, String::new()));
                    prose.push('\n');
                } else {
                    prose.push_str(line);
                    prose.push('\n');
                }
            }
        }
    }
    Page { prose, blocks }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    let mut text = heading.to_string();
    // Links keep their text: [text](target) → text.
    while let (Some(open), Some(mid)) = (text.find('['), text.find("](")) {
        if mid < open {
            break;
        }
        let Some(close) = text[mid..].find(')').map(|c| c + mid) else {
            break;
        };
        text = format!(
            "{}{}{}",
            &text[..open],
            &text[open + 1..mid],
            &text[close + 1..]
        );
    }
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown page offers: its headings' (with GitHub's -1, -2 for repeats) and
/// explicit `<a id="…">`/`<a name="…">`.
fn anchors(text: &str) -> BTreeSet<String> {
    let page = split(text);
    let mut out = BTreeSet::new();
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for line in page.prose.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') {
            let title = trimmed.trim_start_matches('#');
            if title.starts_with(' ') {
                let base = slug(title);
                let n = seen.entry(base.clone()).or_default();
                out.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
        }
        for key in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(key) {
                let after = &rest[at + key.len()..];
                if let Some(end) = after.find('"') {
                    out.insert(after[..end].to_string());
                }
                rest = after;
            }
        }
    }
    out
}

/// The targets of the prose's links: inline `[text](target)` and reference definitions.
fn links(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Inline code is not a link.
    let mut text = String::new();
    let mut in_code = false;
    for c in prose.chars() {
        if c == '`' {
            in_code = !in_code;
        }
        text.push(if in_code { ' ' } else { c });
    }
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0usize;
        let end = after
            .char_indices()
            .find(|&(_, c)| match c {
                '(' => {
                    depth += 1;
                    false
                }
                ')' if depth == 0 => true,
                ')' => {
                    depth -= 1;
                    false
                }
                _ => false,
            })
            .map_or(after.len(), |(i, _)| i);
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with('[') {
            if let Some(at) = line.find("]: ") {
                out.push(
                    line[at + 3..]
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_string(),
                );
            }
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = root();
    let files = markdown_files();
    assert!(
        files.len() > 30,
        "only {} Markdown files found",
        files.len()
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a Markdown file");
        let page = split(&text);
        for target in links(&page.prose) {
            if target.is_empty()
                || target.contains("://")
                || target.starts_with("mailto:")
                || target.starts_with("http")
            {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("a folder").join(path)
            };
            let shown = file
                .strip_prefix(&root)
                .unwrap_or(file)
                .display()
                .to_string();
            if !resolved.exists() {
                broken.push(format!("{shown}: {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                if resolved.extension().is_some_and(|e| e == "md") {
                    let there = std::fs::read_to_string(&resolved).expect("read the target");
                    if !anchors(&there).contains(anchor) {
                        broken.push(format!("{shown}: {target}: no heading or anchor #{anchor}"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 300,
        "only {checked} links checked: is the scan broken?"
    );
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// Splits a shell line into words (single and double quotes, backslash escapes).
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut has = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                has = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unclosed '".into()),
                    }
                }
            }
            '"' => {
                has = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.extend(chars.next()),
                        Some(c) => word.push(c),
                        None => return Err("unclosed \"".into()),
                    }
                }
            }
            '\\' => {
                has = true;
                word.extend(chars.next());
            }
            '#' if !has => break,
            c if c.is_whitespace() => {
                if has {
                    out.push(std::mem::take(&mut word));
                    has = false;
                }
            }
            c => {
                has = true;
                word.push(c);
            }
        }
    }
    if has {
        out.push(word);
    }
    Ok(out)
}

/// The arguments after `orrery` on a shell line that runs it (directly, through `cargo run
/// … --bin orrery --`, or as a built binary), cut at the first pipe, redirection, `&&` or
/// comment.
fn orrery_args(line: &str) -> Option<Result<Vec<String>, String>> {
    let line = line.trim().trim_start_matches("$ ");
    let words = match words(line) {
        Ok(w) => w,
        Err(e) => return Some(Err(e)),
    };
    let start = if let Some(cargo) = words.iter().position(|w| w == "cargo") {
        // cargo run … --bin orrery -- ARGS
        let bin = words[cargo..]
            .windows(2)
            .position(|w| w[0] == "--bin" && w[1] == "orrery")?;
        words[cargo + bin..].iter().position(|w| w == "--")? + cargo + bin + 1
    } else {
        let at = words.iter().position(|w| {
            w == "orrery"
                || w.ends_with("/orrery") && (w.starts_with("./") || w.starts_with("target/"))
        })?;
        // Only as the command itself, after environment assignments.
        if !words[..at]
            .iter()
            .all(|w| w.contains('=') && !w.starts_with('-'))
        {
            return None;
        }
        at + 1
    };
    let args: Vec<String> = words[start..]
        .iter()
        .take_while(|w| {
            !matches!(w.as_str(), "|" | "||" | "&&" | ";" | "&" | "#")
                && !w.starts_with('>')
                && !w.starts_with("2>")
                && !w.starts_with('#')
        })
        .cloned()
        .collect();
    Some(Ok(args))
}

/// Every command line of a code block: continuation lines joined.
fn block_lines(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in body.lines() {
        match line.trim_end().strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[test]
fn every_orrery_command_line_in_the_docs_parses_with_the_current_cli() {
    let root = root();
    let mut bad = Vec::new();
    let mut parsed = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("read a Markdown file");
        let page = split(&text);
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let mut check = |line: &str, full: bool| {
            let Some(args) = orrery_args(line) else {
                return;
            };
            let args = match args {
                Ok(a) => a,
                Err(e) => {
                    bad.push(format!("{shown}: {line}: {e}"));
                    return;
                }
            };
            parsed += 1;
            let argv = std::iter::once("orrery".to_string()).chain(args);
            if let Err(error) = Cli::try_parse_from(argv) {
                let mention = !full
                    && matches!(
                        error.kind(),
                        ErrorKind::MissingRequiredArgument
                            | ErrorKind::MissingSubcommand
                            | ErrorKind::ValueValidation
                            | ErrorKind::InvalidValue
                            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                    );
                if !mention
                    && !matches!(
                        error.kind(),
                        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                    )
                {
                    let first = error.to_string();
                    let first = first.lines().next().unwrap_or("");
                    bad.push(format!("{shown}: `{}`: {first}", line.trim()));
                }
            }
        };
        for (lang, body) in &page.blocks {
            if matches!(lang.as_str(), "sh" | "bash" | "shell" | "console" | "") {
                for line in block_lines(body) {
                    check(&line, true);
                }
            }
        }
        // Inline spans in the prose: a command named in passing may leave out what it needs
        // or write a placeholder (ADDR, FILE) for a value, but its command and flags must exist.
        for span in page.prose.split('`').skip(1).step_by(2) {
            if span.starts_with("orrery ") || span.contains("--bin orrery -- ") {
                check(span, false);
            }
        }
    }
    assert!(
        parsed > 60,
        "only {parsed} command lines found: is the scan broken?"
    );
    assert!(
        bad.is_empty(),
        "{} command lines the CLI refuses:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_checks_notice_what_they_guard() {
    // A flag the CLI does not have, and a link to a missing heading.
    let argv = ["orrery", "run", "scenarios/tunnel-drop.yaml", "--sed", "1"];
    assert!(Cli::try_parse_from(argv).is_err());
    assert_eq!(
        orrery_args("cargo run -q --bin orrery -- run x.yaml --seed 1 | jq ."),
        Some(Ok(vec![
            "run".into(),
            "x.yaml".into(),
            "--seed".into(),
            "1".into()
        ]))
    );
    assert_eq!(
        orrery_args("RUST_LOG=info orrery serve git --repo a=."),
        Some(Ok(vec![
            "serve".into(),
            "git".into(),
            "--repo".into(),
            "a=.".into()
        ]))
    );
    assert_eq!(orrery_args("echo orrery is great"), None);
    assert!(!anchors("# The seed farm\n").contains("the-seed-farms"));
    assert!(anchors("## Where make test's time goes\n").contains("where-make-tests-time-goes"));
    assert!(anchors("# A\n# A\n").contains("a-1"));
    assert_eq!(
        links("see [the farm](exploration.md#the-seed-farm) and `[x](y)`"),
        vec!["exploration.md#the-seed-farm"]
    );
}

#[test]
fn the_book_lists_every_page_and_the_readme_stays_short() {
    let root = root();
    let summary = std::fs::read_to_string(root.join("docs/SUMMARY.md")).expect("docs/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&split(&summary).prose)
        .iter()
        .map(|t| root.join("docs").join(t.split('#').next().unwrap_or("")))
        .collect();
    let missing: Vec<String> = markdown_files()
        .into_iter()
        .filter(|f| f.starts_with(root.join("docs")) && !f.ends_with("SUMMARY.md"))
        .filter(|f| !listed.contains(f))
        .map(|f| f.strip_prefix(&root).unwrap_or(&f).display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages docs/SUMMARY.md does not list (mdBook would leave them out): {missing:?}"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; the rest belongs in docs/ (at most 250)"
    );
}

// ---- The fidelity gap list: docs/fidelity-gaps.yaml rendered into docs/fidelity-gaps.md ----

/// docs/fidelity-gaps.yaml: the one list of known fidelity gaps.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GapList {
    /// The page's opening paragraphs (Markdown).
    intro: String,
    sections: Vec<GapSection>,
}

/// One stand-in (or group of them) and its gaps.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GapSection {
    title: String,
    /// Where the stand-in lives and what checks it (Markdown), before its gaps.
    #[serde(default)]
    intro: Option<String>,
    gaps: Vec<Gap>,
}

/// One known gap.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Gap {
    /// A stable kebab-case name.
    id: String,
    /// The code the gap is about: `path` (from the repository root) or `path: text`, where the
    /// file must still hold `text` — so a gap whose code moved or went away fails the check.
    code: Vec<String>,
    /// What is true today (Markdown).
    text: String,
}

/// The page, rendered from the list.
fn render_gaps(list: &GapList) -> String {
    let mut page = String::from(
        "# Fidelity gaps\n\n<!-- Rendered from fidelity-gaps.yaml (see its header): edit that file, not this page. -->\n\n",
    );
    page.push_str(list.intro.trim_end());
    page.push('\n');
    for section in &list.sections {
        page.push_str(&format!("\n## {}\n\n", section.title));
        if let Some(intro) = &section.intro {
            page.push_str(intro.trim_end());
            page.push_str("\n\n");
        }
        for gap in &section.gaps {
            let mut lines = gap.text.trim_end().lines();
            page.push_str(&format!("- {}\n", lines.next().unwrap_or("")));
            for line in lines {
                if line.is_empty() {
                    page.push('\n');
                } else {
                    page.push_str(&format!("  {line}\n"));
                }
            }
            let refs: Vec<String> = gap
                .code
                .iter()
                .map(|r| {
                    let (path, text) = r.split_once(": ").unwrap_or((r.as_str(), ""));
                    let link = format!("[`{path}`](../{path})");
                    if text.is_empty() {
                        link
                    } else {
                        format!("{link} (`{text}`)")
                    }
                })
                .collect();
            page.push_str(&format!(
                "  <sub>`{}` · {}</sub>\n",
                gap.id,
                refs.join(", ")
            ));
        }
    }
    page
}

/// Why a gap list is not sound: duplicate or malformed ids, stale code references.
fn gap_list_problems(list: &GapList, root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = BTreeSet::new();
    for gap in list.sections.iter().flat_map(|s| &s.gaps) {
        let kebab = !gap.id.is_empty()
            && gap
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !kebab {
            problems.push(format!("gap id {:?} is not kebab-case", gap.id));
        }
        if !ids.insert(gap.id.as_str()) {
            problems.push(format!("gap id {:?} is used twice", gap.id));
        }
        if gap.code.is_empty() {
            problems.push(format!("gap {}: no code reference", gap.id));
        }
        for reference in &gap.code {
            let (path, text) = reference
                .split_once(": ")
                .unwrap_or((reference.as_str(), ""));
            let file = root.join(path);
            if !file.exists() {
                problems.push(format!("gap {}: {path} does not exist", gap.id));
            } else if !text.is_empty() {
                let held = std::fs::read_to_string(&file).unwrap_or_default();
                if !held.contains(text) {
                    problems.push(format!("gap {}: {path} no longer holds {text:?}", gap.id));
                }
            }
        }
    }
    problems
}

#[test]
fn fidelity_gaps_page_is_rendered_from_its_list_and_every_code_reference_holds() {
    let root = root();
    let data = root.join("docs/fidelity-gaps.yaml");
    let text = std::fs::read_to_string(&data).expect("docs/fidelity-gaps.yaml");
    let list: GapList = orrery_system::core::yaml::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "docs/fidelity-gaps.yaml:{}:{}: {}{}",
            e.line, e.column, e.field, e.message
        )
    });
    let problems = gap_list_problems(&list, &root);
    assert!(
        problems.is_empty(),
        "docs/fidelity-gaps.yaml:\n{}",
        problems.join("\n")
    );
    let page = root.join("docs/fidelity-gaps.md");
    let rendered = render_gaps(&list);
    if std::env::var("ORRERY_RECORD").is_ok_and(|v| v == "1") {
        std::fs::write(&page, &rendered).expect("write docs/fidelity-gaps.md");
    }
    let held = std::fs::read_to_string(&page).expect("docs/fidelity-gaps.md");
    assert!(
        held == rendered,
        "docs/fidelity-gaps.md is not the rendering of docs/fidelity-gaps.yaml: edit the YAML, then \
         ORRERY_RECORD=1 cargo test -p orrery-cli --test cli docs::fidelity_gaps"
    );
}

#[test]
fn the_gap_list_check_notices_stale_references_and_twice_used_ids() {
    let root = root();
    let gap = |id: &str, code: &str| Gap {
        id: id.into(),
        code: vec![code.into()],
        text: "x".into(),
    };
    let list = GapList {
        intro: String::new(),
        sections: vec![GapSection {
            title: "t".into(),
            intro: None,
            gaps: vec![
                gap("held", "Makefile: make test"),
                gap("gone", "sim/src/no_such_file.rs"),
                gap("moved", "Makefile: a text the Makefile does not hold"),
                gap("held", "Makefile"),
                gap("Not_Kebab", "Makefile"),
            ],
        }],
    };
    let problems = gap_list_problems(&list, &root);
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(problems[0].contains("no_such_file.rs does not exist"));
    assert!(problems[1].contains("no longer holds"));
    assert!(problems[2].contains("used twice"));
    assert!(problems[3].contains("not kebab-case"));
}

/// Every `deploy/` file's YAML files, recursively, sorted.
fn deploy_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            deploy_files(&path, found);
        } else if path.extension().is_some_and(|x| x == "yaml") {
            found.push(path);
        }
    }
}

/// Every workload under `deploy/` runs a command line this CLI takes: its `args`, with the
/// `$(VAR)`s the pod's environment fills in, parse (an option the manifest gives through an
/// environment variable, such as `AGENT_ID`, may be missing here). A renamed flag fails here,
/// in `make test`, rather than as a crash-looping pod.
#[test]
fn the_deploy_manifests_run_command_lines_the_cli_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    deploy_files(&root.join("deploy"), &mut files);
    let value = |name: &str| match name {
        "VARIANT" => "hardened",
        "SEEDS" => "1..10",
        "BUDGET" => "5m",
        "SHARD" => "0",
        _ => "x",
    };
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for doc in docs {
            let Some(containers) = doc["spec"]["template"]["spec"]["containers"].as_array() else {
                continue;
            };
            for container in containers {
                let Some(args) = container["args"].as_array() else {
                    continue;
                };
                let args = args.iter().map(|a| {
                    let mut arg = a.as_str().unwrap().to_string();
                    while let Some(start) = arg.find("$(") {
                        let end = start + arg[start..].find(')').unwrap();
                        let filled = value(&arg[start + 2..end]);
                        arg.replace_range(start..=end, filled);
                    }
                    arg
                });
                let argv: Vec<String> = std::iter::once("orrery".to_string()).chain(args).collect();
                if let Err(error) = Cli::try_parse_from(&argv) {
                    assert_eq!(
                        error.kind(),
                        ErrorKind::MissingRequiredArgument,
                        "{}: {argv:?}: {error}",
                        file.display()
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 12,
        "only {checked} workloads found under deploy/"
    );
    // The check can fail: a flag the CLI does not have.
    let bad = ["orrery", "serve", "runner", "--agent", "a"];
    assert!(Cli::try_parse_from(bad).is_err());
}

// ---- The CLI reference: each command's table rendered from its `--help` (clap) ----

/// `cmd`'s arguments as the reference's table rows: `| usage | meaning |`.
fn render_arguments(cmd: &clap::Command) -> Vec<String> {
    let escape = |text: &str| {
        text.replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('|', "\\|")
    };
    let mut rows = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_hide_set() || id == "help" || id == "version" {
            continue;
        }
        let names = arg
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|n| format!("<{n}>"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| format!("<{}>", id.to_uppercase()));
        let takes_value = arg.get_action().takes_values();
        let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
        let usage = match (arg.get_long(), takes_value) {
            (None, _) => {
                let one = match arg.is_required_set() {
                    true => names,
                    false => format!("[{}]", names.trim_matches(['<', '>'])),
                };
                match many {
                    true => format!("{one}..."),
                    false => one,
                }
            }
            (Some(long), true) => format!("--{long} {names}"),
            (Some(long), false) => format!("--{long}"),
        };
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let mut meaning = help
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .trim_end_matches('.')
            .to_string();
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| match v.get_help() {
                Some(help) => format!(
                    "`{}` ({})",
                    v.get_name(),
                    help.to_string().trim_end_matches('.')
                ),
                None => format!("`{}`", v.get_name()),
            })
            .collect();
        if takes_value
            && !values.is_empty()
            && !matches!(arg.get_action(), clap::ArgAction::SetTrue)
        {
            meaning.push_str(&format!(". Values: {}", values.join("; ")));
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        let mut notes = Vec::new();
        if takes_value {
            match defaults.as_slice() {
                [] => {}
                [d] if d.is_empty() => notes.push("default empty".to_string()),
                all => notes.push(format!("default `{}`", all.join(","))),
            }
        }
        if let Some(env) = arg.get_env() {
            notes.push(format!("env `{}`", env.to_string_lossy()));
        }
        if !notes.is_empty() {
            meaning.push_str(&format!(" ({})", notes.join(", ")));
        }
        rows.push(format!("| `{usage}` | {} |", escape(&meaning)));
    }
    rows
}

/// `text` (the reference page) with each command section's table rendered from clap; and
/// the commands that have no section.
fn render_reference(text: &str) -> (String, Vec<String>) {
    use clap::CommandFactory;
    let mut root = Cli::command();
    root.build();
    let mut leaves: BTreeSet<String> = BTreeSet::new();
    // (`help` is clap's own, at each level.)
    for cmd in root.get_subcommands().filter(|c| c.get_name() != "help") {
        let name = cmd.get_name().to_string();
        match cmd.has_subcommands() {
            true => leaves.extend(
                cmd.get_subcommands()
                    .filter(|c| c.get_name() != "help")
                    .map(|sub| format!("{name} {}", sub.get_name())),
            ),
            false => {
                leaves.insert(name);
            }
        }
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<clap::Command> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(heading) = line.strip_prefix("### ") {
            leaves.remove(heading);
            let mut cmd = root.clone();
            let mut found = true;
            for word in heading.split(' ') {
                match cmd.find_subcommand(word) {
                    Some(sub) => cmd = sub.clone(),
                    None => found = false,
                }
            }
            current = found.then_some(cmd);
        }
        if line == "| argument or flag | meaning |" {
            if let Some(cmd) = &current {
                out.push(line.to_string());
                out.push("|---|---|".to_string());
                out.extend(render_arguments(cmd));
                i += 2;
                while i < lines.len() && lines[i].starts_with('|') {
                    i += 1;
                }
                continue;
            }
        }
        out.push(line.to_string());
        i += 1;
    }
    let mut rendered = out.join("\n");
    rendered.push('\n');
    (rendered, leaves.into_iter().collect())
}

#[test]
fn the_cli_reference_tables_are_the_rendering_of_each_commands_help() {
    let page = root().join("docs/reference/cli.md");
    let text = std::fs::read_to_string(&page).expect("docs/reference/cli.md");
    let (rendered, missing) = render_reference(&text);
    if std::env::var("ORRERY_RECORD").is_ok_and(|v| v == "1") {
        std::fs::write(&page, &rendered).expect("write docs/reference/cli.md");
    }
    assert!(
        missing.is_empty(),
        "docs/reference/cli.md has no `### <command>` section for {missing:?}: add one (what it \
         does, `| argument or flag | meaning |`, an example), then ORRERY_RECORD=1 cargo test -p \
         orrery-cli --test cli docs::the_cli_reference"
    );
    let held = std::fs::read_to_string(&page).expect("docs/reference/cli.md");
    assert!(
        held == rendered,
        "docs/reference/cli.md's tables are not the rendering of the commands' --help: \
         ORRERY_RECORD=1 cargo test -p orrery-cli --test cli docs::the_cli_reference"
    );
}
