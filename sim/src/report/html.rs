//! The HTML view of the reports: `reports/index.html` and one HTML file beside each
//! Markdown page (`<scenario>/index.html` for its README, `<variant>.html`, `seeds.html`,
//! `sweeps/<family>/sweep.html`), for a person who opens the reports in a browser without a
//! server.
//!
//! Each HTML file is its Markdown page rendered (pulldown-cmark, GitHub's table syntax), so
//! the two views never say different things; links between pages are pointed at the HTML
//! views, and the charts are the same SVG files.

use std::path::Path;

use pulldown_cmark::{html, CowStr, Event, Options, Parser, Tag};

use super::escape_markup as escape;

/// Why an HTML view could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct HtmlError {
    /// The file read or written.
    pub path: String,
    /// The cause.
    pub source: std::io::Error,
}

/// The HTML view of a Markdown page: `README.md` is its directory's `index.html`, any other
/// `X.md` is `X.html`.
pub fn html_name(markdown: &str) -> Option<String> {
    match markdown {
        "README.md" => Some("index.html".to_string()),
        other => other.strip_suffix(".md").map(|stem| format!("{stem}.html")),
    }
}

/// A link as the browser view needs it: a relative link to a Markdown page points at its
/// HTML view (fragment kept); anything else (JSON, SVG, other sites) is left as is.
fn relink(url: &str) -> String {
    if url.contains("://") || url.starts_with('#') || url.starts_with('/') {
        return url.to_string();
    }
    let (path, fragment) = match url.split_once('#') {
        Some((path, fragment)) => (path, format!("#{fragment}")),
        None => (url, String::new()),
    };
    let (dir, file) = match path.rsplit_once('/') {
        Some((dir, file)) => (format!("{dir}/"), file),
        None => (String::new(), path),
    };
    match html_name(file) {
        Some(html) => format!("{dir}{html}{fragment}"),
        None => url.to_string(),
    }
}

/// `markdown` as a complete HTML document titled `title`; `home` is the relative path to
/// the reports' index (shown as a link back, unless this is the index).
pub fn render(title: &str, markdown: &str, home: Option<&str>) -> String {
    let parser = Parser::new_ext(markdown, Options::ENABLE_TABLES).map(|event| match event {
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: CowStr::from(relink(&dest_url)),
            title,
            id,
        }),
        // The reports are generated from scenario text and run data: raw HTML in them is
        // shown as text, never interpreted.
        Event::Html(text) | Event::InlineHtml(text) => Event::Text(text),
        other => other,
    });
    let mut body = String::new();
    html::push_html(&mut body, parser);
    let back = home
        .map(|h| format!("<nav><a href=\"{}\">all reports</a></nav>\n", escape(h)))
        .unwrap_or_default();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{back}{body}</body>\n</html>\n",
        escape(title)
    )
}

/// A plain, readable page: wide tables scroll, charts keep their size.
const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}table{border-collapse:collapse;margin:1em 0;display:block;overflow-x:auto}th,td{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f4f4f4}code{background:#f4f4f4;padding:0 .2em}pre{background:#f7f7f7;padding:.8em;overflow-x:auto}img{max-width:100%;border:1px solid #eee}nav{margin-bottom:1em}";

/// Writes `html_path` from the Markdown page `md_path`.
pub fn write_view(md_path: &Path, html_path: &Path, home: Option<&str>) -> Result<(), HtmlError> {
    let markdown = std::fs::read_to_string(md_path).map_err(|source| HtmlError {
        path: md_path.display().to_string(),
        source,
    })?;
    let title = markdown
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .unwrap_or("orrery report");
    std::fs::write(html_path, render(title, &markdown, home)).map_err(|source| HtmlError {
        path: html_path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_link_to_each_others_html_views_and_keep_other_files() {
        let markdown = "# x <y>\n\n| a | b |\n|---|---|\n| [p](p/README.md#v) | [f](faithful.md) |\n\n![c](c.svg) [s](../sweeps/x/sweep.md) [e](https://example.org/README.md) [j](a.json)\n\n<script>alert(1)</script> and <b>bold</b>\n";
        let html = render("x <y>", markdown, Some("../index.html"));
        assert!(html.contains("<title>x &lt;y&gt;</title>"));
        assert!(html.contains("<table>"), "GitHub's tables are tables");
        assert!(html.contains("href=\"p/index.html#v\""));
        assert!(html.contains("href=\"faithful.html\""));
        assert!(html.contains("href=\"a.json\""));
        assert!(
            !html.contains("<script>") && html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;b&gt;bold&lt;/b&gt;"));
        assert!(html.contains("src=\"c.svg\""));
        assert!(html.contains("href=\"../sweeps/x/sweep.html\""));
        assert!(html.contains("href=\"https://example.org/README.md\""));
        assert!(html.contains("<a href=\"../index.html\">all reports</a>"));
    }
}
