//! The reports' HTML view in a real browser: headless Chromium opens `reports/index.html`,
//! follows every link to another HTML view, and checks that every chart on every page renders
//! and every other local link (Markdown, JSON, SVG) loads. `make conformance` runs it (`make
//! browser-check`) through `scripts/chromium.sh`, which installs Debian's package or fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The page that drives the check inside the browser: it loads each page in an iframe, waits
/// for its images, and reads local files with XMLHttpRequest (allowed for file:// pages by
/// `--allow-file-access-from-files`). Its result is the `RESULT {…}` line of the final DOM.
const CHECKER: &str = r#"<!DOCTYPE html><html><body><pre id="out">running</pre>
<script>
const start = new URL(location.hash.slice(1));
const seen = new Set(); const queue = [start.href]; const problems = [];
let pages = 0, images = 0, links = 0;
function load(url) {
  return new Promise((resolve) => {
    const f = document.createElement('iframe');
    f.onload = () => resolve(f); f.onerror = () => resolve(f);
    f.src = url; document.body.appendChild(f);
  });
}
function exists(url) {
  try {
    const x = new XMLHttpRequest(); x.open('GET', url, false); x.send();
    return (x.status === 0 || x.status === 200) && x.responseText.length > 0;
  } catch (e) { return false; }
}
async function main() {
  while (queue.length) {
    const url = queue.shift(); if (seen.has(url)) continue; seen.add(url);
    if (!exists(url)) { problems.push('page does not load: ' + url); continue; }
    const f = await load(url); let doc = null;
    try { doc = f.contentDocument; } catch (e) {}
    if (!doc || !doc.body) { problems.push('page does not render: ' + url); continue; }
    pages++;
    for (const img of Array.from(doc.images)) {
      images++;
      try { await img.decode(); } catch (e) {}
      if (!(img.complete && img.naturalWidth > 0)) problems.push('chart does not load: ' + img.src + ' on ' + url);
    }
    for (const a of Array.from(doc.querySelectorAll('a[href]'))) {
      const target = a.href.split('#')[0];
      if (!target.startsWith('file:')) continue;
      links++;
      if (target.endsWith('.html')) { if (!seen.has(target)) queue.push(target); }
      else if (!exists(target)) problems.push('link does not load: ' + target + ' on ' + url);
    }
    f.remove();
  }
  document.getElementById('out').textContent = 'RESULT ' + JSON.stringify({pages, images, links, problems});
}
main();
</script></body></html>
"#;

/// What the browser found from `index`: pages, charts and links checked, and the problems.
fn check(chromium: &str, index: &Path, scratch: &Path) -> serde_json::Value {
    std::fs::create_dir_all(scratch).unwrap();
    let checker = scratch.join("check.html");
    std::fs::write(&checker, CHECKER).unwrap();
    let index = index.canonicalize().unwrap();
    // A browser that hangs fails the check after two minutes instead of stalling make test.
    let out = Command::new("timeout")
        .args(["120", chromium])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--allow-file-access-from-files",
            "--virtual-time-budget=120000",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("profile").display()
        ))
        .arg(format!(
            "file://{}#file://{}",
            checker.display(),
            index.display()
        ))
        .output()
        .expect("chromium starts");
    let dom = String::from_utf8_lossy(&out.stdout);
    // The checker's verdict is the text of <pre id="out"> in the final DOM; "running" there
    // means the check never finished.
    let pre = dom
        .split("<pre id=\"out\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "the browser printed no page ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let json = pre
        .strip_prefix("RESULT ")
        .unwrap_or_else(|| panic!("the check did not finish: {pre:?}"))
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

#[test]
#[ignore = "needs Chromium: make browser-check (scripts/chromium.sh installs Debian's package)"]
fn every_chart_and_link_of_the_html_reports_loads_in_headless_chromium() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let scratch = std::env::temp_dir().join(format!("orrery-browser-{}", std::process::id()));
    let reports = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports");
    let found = check(
        &chromium,
        &reports.join("index.html"),
        &scratch.join("reports"),
    );
    let problems = found["problems"].as_array().unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
    let scenarios = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios"))
        .unwrap()
        .count() as u64;
    let (pages, images, links) = (
        found["pages"].as_u64().unwrap(),
        found["images"].as_u64().unwrap(),
        found["links"].as_u64().unwrap(),
    );
    // The index, a page per scenario and a sweep per swarm family, every chart on them.
    assert!(pages > scenarios, "{pages} pages for {scenarios} scenarios");
    assert!(images >= 3 * scenarios, "{images} charts");
    assert!(links > 4 * scenarios, "{links} links");
    // The check can fail: a page whose chart and link are missing is reported.
    let broken: PathBuf = scratch.join("broken");
    std::fs::create_dir_all(broken.join("p")).unwrap();
    std::fs::write(
        broken.join("index.html"),
        "<!DOCTYPE html><a href=\"p/index.html\">p</a>",
    )
    .unwrap();
    std::fs::write(
        broken.join("p/index.html"),
        "<!DOCTYPE html><img src=\"gone.svg\"><a href=\"gone.json\">j</a>",
    )
    .unwrap();
    let found = check(&chromium, &broken.join("index.html"), &scratch.join("b"));
    let problems: Vec<&str> = found["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("chart does not load: ") && problems[0].contains("gone.svg"));
    assert!(problems[1].starts_with("link does not load: ") && problems[1].contains("gone.json"));
    println!("browser: {pages} pages, {images} charts and {links} links load in {chromium}");
    let _ = std::fs::remove_dir_all(&scratch);
}
