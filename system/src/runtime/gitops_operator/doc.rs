//! A promotion file as the operator reads and writes it: JSON rewritten whole, YAML (a Helm
//! values file) edited in place, so every byte but the promoted values survives — comments,
//! key order, quoting (as Kargo's `yaml-update` promises; [`crate::core::yaml_edit`]).

use serde_json::Value;

use super::task;
use crate::core::yaml_edit::YamlDoc;

/// A file's content, parsed by its name's extension.
pub enum Doc {
    /// A `.json` file (or any other name): rewritten pretty-printed.
    Json(Value),
    /// A `.yaml` or `.yml` file: edited in place.
    Yaml(YamlDoc),
}

/// Whether `path` names a YAML file.
fn is_yaml(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml")
}

impl Doc {
    /// Reads `content` of the file at `path`; why not, if it does not parse.
    pub fn parse(path: &str, content: &str) -> Result<Doc, String> {
        if is_yaml(path) {
            YamlDoc::parse(content)
                .map(Doc::Yaml)
                .map_err(|e| format!("not YAML: {e}"))
        } else {
            serde_json::from_str(content)
                .map(Doc::Json)
                .map_err(|e| format!("not JSON: {e}"))
        }
    }

    /// The content of a file that does not exist yet.
    pub fn empty(path: &str) -> Doc {
        if is_yaml(path) {
            Doc::Yaml(YamlDoc::parse("").expect("an empty document parses"))
        } else {
            Doc::Json(Value::Object(serde_json::Map::new()))
        }
    }

    /// The document's values.
    pub fn value(&self) -> &Value {
        match self {
            Doc::Json(value) => value,
            Doc::Yaml(doc) => doc.value(),
        }
    }

    /// Sets the dotted JSON path (`$.image.tag`) to `value`; whether it changed.
    pub fn set(&mut self, json_path: &str, value: &Value) -> Result<bool, String> {
        match self {
            Doc::Json(doc) => task::set(doc, json_path, value),
            Doc::Yaml(doc) => doc
                .set(&task::json_path(json_path)?, value)
                .map_err(|e| e.to_string()),
        }
    }

    /// The file's new content.
    pub fn render(&self) -> String {
        match self {
            Doc::Json(value) => serde_json::to_string_pretty(value).unwrap_or_default() + "\n",
            Doc::Yaml(doc) => doc.text().to_string(),
        }
    }
}
