//! In-place edits of a YAML document's values: what a promotion commits to a Helm values
//! file. The file is kept as its bytes and only the edited value's text changes, so comments,
//! key order, quoting, blank lines and every other byte survive (as Kargo's `yaml-update`
//! step promises); values are read through the YAML parser.
//!
//! What is edited in place: a key of a block mapping (`image:` then indented `tag: v1`), at
//! any depth, whose value is written on its line (plain, `'single'` or `"double"` quoted, or
//! empty). A missing key is added at the end of its mapping. A value written in flow style
//! (`image: {tag: v1}`), a block scalar (`|`, `>`) or a list on the path is refused with the
//! key's path, never rewritten. Every edit is read back: unless the new text parses to the
//! old document with only that value changed, the edit is refused — a wrong file is never
//! committed.

use serde_json::Value;

use super::json::{get_keys, set_keys};

/// Why a YAML document cannot be read or edited in place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum YamlEditError {
    /// The text is not YAML (line and column as the parser found them).
    #[error("not YAML: line {line}, column {column}: {message}")]
    Syntax {
        /// Line, from 1.
        line: usize,
        /// Column, from 1.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The value at `path` cannot be edited in place (why, in `what`).
    #[error("{path}: {what}")]
    NotEditable {
        /// The dotted key path (`image.tag`).
        path: String,
        /// Why.
        what: String,
    },
}

/// A YAML document kept as its text, with its value as the parser reads it.
#[derive(Clone, Debug)]
pub struct YamlDoc {
    text: String,
    value: Value,
}

/// How a scalar was written: a new value keeps its quoting where it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
}

/// One line's shape, as far as finding keys needs it.
struct Line<'a> {
    /// The line with its ending.
    text: &'a str,
    /// Leading spaces.
    indent: usize,
    /// Holds a key or a value (not blank, not a comment, not inside a block scalar).
    content: bool,
}

/// Where a key was found: its line, and the byte range of its value on that line (after
/// `key:` and the spaces after it, up to a comment or the line's end).
struct Found {
    line: usize,
    value: std::ops::Range<usize>,
}

impl YamlDoc {
    /// Reads `text`; a syntax error names its line and column.
    pub fn parse(text: &str) -> Result<YamlDoc, YamlEditError> {
        let value = read(text)?;
        Ok(YamlDoc {
            text: text.to_string(),
            value,
        })
    }

    /// The document as the YAML parser reads it (an empty document is `null`).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The document's text, with every edit made.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Sets the value at `keys` (a path of mapping keys) to `value`, changing only that
    /// value's text, or adding the missing keys at the end of their mapping; whether anything
    /// changed (a value already equal leaves every byte alone).
    pub fn set(&mut self, keys: &[String], value: &Value) -> Result<bool, YamlEditError> {
        let path = keys.join(".");
        if keys.is_empty() {
            return Err(not_editable(&path, "an empty key path"));
        }
        if get_keys(&self.value, keys) == Some(value) {
            return Ok(false);
        }
        let text = self.edited(keys, value, &path)?;
        let mut expected = self.value.clone();
        set_keys(&mut expected, keys, value).map_err(|i| {
            not_editable(&path, &format!("{} is not a mapping", keys[..i].join(".")))
        })?;
        match read(&text) {
            Ok(reread) if reread == expected => {
                self.text = text;
                self.value = reread;
                Ok(true)
            }
            Ok(_) => Err(not_editable(
                &path,
                "the edited file would not read back with only this value changed",
            )),
            Err(e) => Err(not_editable(
                &path,
                &format!("the edited file would not parse ({e})"),
            )),
        }
    }

    /// The text with the value at `keys` replaced or added (not yet checked).
    fn edited(&self, keys: &[String], value: &Value, path: &str) -> Result<String, YamlEditError> {
        let lines = lines(&self.text);
        // The scope searched for the next key: a range of lines and the indentation of the
        // keys in it.
        let first = lines.iter().find(|l| l.content).map_or(0, |l| l.indent);
        let (mut from, mut to, mut indent) = (0, lines.len(), first);
        let mut parent: Option<usize> = None;
        for (depth, key) in keys.iter().enumerate() {
            let here = keys[..=depth].join(".");
            let Some(found) = find_key(&lines, from..to, indent, key, &here)? else {
                let at = insertion_point(&lines, from..to, parent);
                return Ok(insert_lines(
                    &self.text,
                    &lines,
                    at,
                    indent,
                    &keys[depth..],
                    value,
                ));
            };
            let inline = lines[found.line].text[found.value.clone()].trim_end();
            let end = block_end(&lines, found.line, indent);
            let nested = (found.line + 1..end).find(|i| lines[*i].content);
            if depth + 1 == keys.len() {
                if let Some(i) = nested {
                    if inline.is_empty() && lines[i].indent > indent {
                        return Err(not_editable(&here, "is a mapping or a list, not one value"));
                    }
                }
                let style = style_of(inline, &here)?;
                let rendered = render(value, style);
                let line_start = line_offset(&lines, found.line);
                let mut text = self.text.clone();
                let range =
                    line_start + found.value.start..line_start + found.value.start + inline.len();
                let replacement = if inline.is_empty() {
                    // `key:` with nothing after it (null): the value after one space; a
                    // comment already there keeps its place after the value.
                    let rest = &lines[found.line].text[found.value.start..];
                    if rest.starts_with('#') {
                        format!("{rendered} ")
                    } else if found.value.start > 0
                        && lines[found.line].text.as_bytes()[found.value.start - 1] == b' '
                    {
                        rendered
                    } else {
                        format!(" {rendered}")
                    }
                } else {
                    rendered
                };
                text.replace_range(range, &replacement);
                return Ok(text);
            }
            if !inline.is_empty() {
                return Err(not_editable(
                    &here,
                    "is written in flow style or as one value; only block mappings are edited in place",
                ));
            }
            match nested {
                Some(i) if lines[i].indent > indent => {
                    if lines[i].text[lines[i].indent..].starts_with("- ")
                        || lines[i].text[lines[i].indent..].trim_end() == "-"
                    {
                        return Err(not_editable(&here, "is a list; list items are not edited"));
                    }
                    (from, to, indent) = (found.line + 1, end, lines[i].indent);
                }
                _ => {
                    // `key:` holding nothing (null): the rest of the path goes under it.
                    return Ok(insert_lines(
                        &self.text,
                        &lines,
                        found.line + 1,
                        indent + 2,
                        &keys[depth + 1..],
                        value,
                    ));
                }
            }
            parent = Some(found.line);
        }
        Err(not_editable(path, "no key to set"))
    }
}

fn not_editable(path: &str, what: &str) -> YamlEditError {
    YamlEditError::NotEditable {
        path: path.to_string(),
        what: what.to_string(),
    }
}

/// The YAML parser's reading of `text` (serde_saphyr, YAML 1.2).
fn read(text: &str) -> Result<Value, YamlEditError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    super::yaml::from_str::<Value>(text).map_err(|e| YamlEditError::Syntax {
        line: e.line,
        column: e.column,
        message: e.message,
    })
}

/// The lines of `text`, each with its ending; lines inside a block scalar (`key: |`) are not
/// content.
fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    // The indentation a block scalar's lines must exceed, while inside one.
    let mut block: Option<usize> = None;
    for text in text.split_inclusive('\n') {
        let body = text.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start_matches(' ').len();
        let rest = body[indent..].trim_end();
        if let Some(parent) = block {
            if rest.is_empty() || indent > parent {
                out.push(Line {
                    text,
                    indent,
                    content: false,
                });
                continue;
            }
            block = None;
        }
        let content = !rest.is_empty() && !rest.starts_with('#');
        if content && opens_block_scalar(rest) {
            block = Some(indent);
        }
        out.push(Line {
            text,
            indent,
            content,
        });
    }
    out
}

/// Whether a line's value is a block scalar indicator (`|`, `>-`, `|2`, …, maybe commented).
fn opens_block_scalar(rest: &str) -> bool {
    let value = match split_key(rest) {
        Some((_, at)) => rest[at..].trim_start(),
        None => rest.strip_prefix("- ").map_or(rest, str::trim_start),
    };
    let value = value.split(" #").next().unwrap_or("").trim_end();
    let mut chars = value.chars();
    matches!(chars.next(), Some('|' | '>')) && chars.all(|c| matches!(c, '+' | '-' | '1'..='9'))
}

/// Splits `key: value` (the line without its indentation): the key as written and the byte
/// offset where the value starts (after `:`). None for a line that is not a mapping key.
fn split_key(rest: &str) -> Option<(String, usize)> {
    let bytes = rest.as_bytes();
    let (key, after) = match bytes.first()? {
        // A double-quoted key with JSON's escapes (YAML's own, such as `\x41`, are not
        // taken for keys).
        b'"' => {
            let end = quoted_len(rest)?;
            (serde_json::from_str(&rest[..end]).ok()?, end)
        }
        b'\'' => {
            let end = quoted_len(rest)?;
            (rest[1..end - 1].replace("''", "'"), end)
        }
        b'-' | b'[' | b'{' | b'#' | b'?' | b'&' | b'*' | b'!' | b'|' | b'>' | b'%' | b'@'
        | b'`' => return None,
        _ => {
            // A plain key ends at the first `:` followed by a space or the line's end.
            let mut at = None;
            for (i, c) in rest.char_indices() {
                if c == '#' && i > 0 && rest.as_bytes()[i - 1] == b' ' {
                    return None;
                }
                if c == ':' && matches!(rest.as_bytes().get(i + 1), None | Some(b' ' | b'\t')) {
                    at = Some(i);
                    break;
                }
            }
            let at = at?;
            (rest[..at].trim_end().to_string(), at)
        }
    };
    let tail = &rest[after..];
    let spaces = tail.len() - tail.trim_start_matches([' ', '\t']).len();
    let colon = after + spaces;
    if bytes.get(colon) != Some(&b':') {
        return None;
    }
    if !matches!(bytes.get(colon + 1), None | Some(b' ' | b'\t')) {
        return None;
    }
    Some((key, colon + 1))
}

/// The first line in `range` at `indent` whose key is `key`, and its value's span.
fn find_key(
    lines: &[Line<'_>],
    range: std::ops::Range<usize>,
    indent: usize,
    key: &str,
    path: &str,
) -> Result<Option<Found>, YamlEditError> {
    for i in range {
        let line = &lines[i];
        if !line.content || line.indent != indent {
            continue;
        }
        let body = line.text.trim_end_matches(['\n', '\r']);
        let rest = &body[indent..];
        if rest == "---" || rest.starts_with("--- ") || rest == "..." {
            return Err(not_editable(
                path,
                "the file holds more than one YAML document",
            ));
        }
        let Some((found, after)) = split_key(rest) else {
            continue;
        };
        if found != key {
            continue;
        }
        let start = indent + after;
        let value = &body[start..];
        let skipped = value.len() - value.trim_start_matches([' ', '\t']).len();
        let start = start + skipped;
        let end = start + value_len(&body[start..]);
        return Ok(Some(Found {
            line: i,
            value: start..end,
        }));
    }
    Ok(None)
}

/// The length of a value written on a line, up to its comment (` #`) or the line's end.
fn value_len(value: &str) -> usize {
    let bytes = value.as_bytes();
    match bytes.first() {
        None | Some(b'#') => 0,
        Some(b'"' | b'\'') => quoted_len(value).unwrap_or(value.len()),
        _ => {
            let end = (1..bytes.len())
                .find(|i| bytes[*i] == b'#' && matches!(bytes[i - 1], b' ' | b'\t'))
                .unwrap_or(bytes.len());
            value[..end].trim_end().len()
        }
    }
}

/// The length of the quoted scalar `text` starts with (`"…"` with `\` escapes, or `'…'`
/// with `''`), quotes included; `None` when it does not end on this line.
fn quoted_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let quote = *bytes.first()?;
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b'\'' if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 2,
            b if b == quote => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The line after the last line of the entry at `line` (whose key is at `indent`).
fn block_end(lines: &[Line<'_>], line: usize, indent: usize) -> usize {
    (line + 1..lines.len())
        .find(|i| lines[*i].content && lines[*i].indent <= indent)
        .unwrap_or(lines.len())
}

/// Where new keys of a mapping go: after its last content line (before the blank lines and
/// comments that end it), or right after its parent's line when it has none.
fn insertion_point(
    lines: &[Line<'_>],
    range: std::ops::Range<usize>,
    parent: Option<usize>,
) -> usize {
    let last = range.clone().rev().find(|i| lines[*i].content);
    // Lines inside a block scalar that ends the mapping belong to it too.
    match last {
        Some(i) => {
            let mut end = i + 1;
            while end < range.end
                && !lines[end].content
                && !lines[end].text.trim().is_empty()
                && !lines[end].text.trim_start().starts_with('#')
            {
                end += 1;
            }
            end
        }
        None => parent.map_or(range.start, |p| p + 1),
    }
}

/// `text` with `keys` (nested, each one level deeper) and `value` added before line `at`.
fn insert_lines(
    text: &str,
    lines: &[Line<'_>],
    at: usize,
    indent: usize,
    keys: &[String],
    value: &Value,
) -> String {
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let offset = line_offset(lines, at);
    let mut added = String::new();
    if offset > 0 && !text[..offset].ends_with('\n') {
        added.push_str(newline);
    }
    for (i, key) in keys.iter().enumerate() {
        added.push_str(&" ".repeat(indent + 2 * i));
        added.push_str(&render_key(key));
        added.push(':');
        if i + 1 == keys.len() {
            added.push(' ');
            added.push_str(&render(value, Style::Plain));
        }
        added.push_str(newline);
    }
    let mut out = text.to_string();
    out.insert_str(offset, &added);
    out
}

fn line_offset(lines: &[Line<'_>], line: usize) -> usize {
    lines[..line].iter().map(|l| l.text.len()).sum()
}

fn style_of(inline: &str, path: &str) -> Result<Style, YamlEditError> {
    match inline.as_bytes().first() {
        None => Ok(Style::Plain),
        Some(b'\'') => Ok(Style::Single),
        Some(b'"') => Ok(Style::Double),
        Some(b'|' | b'>') => Err(not_editable(
            path,
            "is a block scalar (| or >); not edited in place",
        )),
        Some(b'{' | b'[') => Err(not_editable(
            path,
            "is written in flow style; not edited in place",
        )),
        Some(b'&' | b'*' | b'!') => Err(not_editable(
            path,
            "carries an anchor, alias or tag; not edited in place",
        )),
        _ => Ok(Style::Plain),
    }
}

/// `value` as YAML text in `style` where that reads back as the same value.
fn render(value: &Value, style: Style) -> String {
    match value {
        Value::String(s) => match style {
            Style::Single if !s.chars().any(char::is_control) => {
                format!("'{}'", s.replace('\'', "''"))
            }
            Style::Plain if plain_safe(s) => s.clone(),
            _ => Value::String(s.clone()).to_string(),
        },
        // Numbers, booleans and null as YAML writes them; lists and mappings in flow style
        // (JSON is YAML).
        other => other.to_string(),
    }
}

fn render_key(key: &str) -> String {
    if plain_safe(key) {
        key.to_string()
    } else {
        Value::String(key.to_string()).to_string()
    }
}

/// Whether `s` written plain reads back as the same string under YAML 1.2 and the YAML 1.1
/// that Helm's parser still speaks (`yes`, `on`, `1.10`, `2024-01-01` and `0x1f` are not
/// strings there, so they are quoted).
fn plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if s.trim() != s || s.chars().any(char::is_control) {
        return false;
    }
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) {
        return false;
    }
    if s.contains(": ") || s.contains(" #") || s.ends_with(':') {
        return false;
    }
    let lower = s.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "null" | "~" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | ".inf" | ".nan"
    ) {
        return false;
    }
    // Anything that starts like a number and is made of number characters (integers, floats,
    // hex, octal, sexagesimal, dates) is quoted.
    let numeric = first.is_ascii_digit() || ((first == '+' || first == '.') && s.len() > 1);
    !(numeric
        && s.chars()
            .all(|c| c.is_ascii_hexdigit() || "._:+-xXoO".contains(c)))
}

#[cfg(test)]
mod tests;
