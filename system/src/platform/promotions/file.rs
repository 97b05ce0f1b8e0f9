//! The orchestrator's file, `orrery serve control-plane --promotions FILE`: one Product
//! with its flows, policies and template (the CRs as the cluster would hold them), where
//! each environment's app lives, and how to reach the Git provider and the gateway.
//!
//! ```yaml
//! git: 127.0.0.1:9418            # the Git provider's API (`orrery serve git`)
//! repo: https://git.example/acme/shop-gitops.git
//! token: orchestrator-token      # a user with promotions:write and promotions:read
//! gateway: 127.0.0.1:8081        # optional: this process's client API (--api)
//! poll_seconds: 5                # optional: how often commits and tasks are looked at
//! timeout_seconds: 1800          # optional: a release's timeout when its flow sets none
//! targets:                       # every environment of every flow: its app
//!   dev: {runtime: acme-prod, app: shop-dev, path: envs/dev}
//!   prod: {runtime: acme-prod, app: shop-prod, path: envs/prod}
//!   # labels: {codefresh.io/product: shop}  # optional: the Application's labels, which
//!   #   PromotionTemplates select by when the Product names no template
//! objects:                       # exactly one Product; its PromotionFlows, policies, template
//!   - apiVersion: codefresh.io/v1beta1
//!     kind: Product
//!     metadata: {name: shop}
//!     spec: {promotionFlows: [{name: main}], promotionTemplate: {…}}
//!   - apiVersion: codefresh.io/v1beta1
//!     kind: PromotionFlow
//!     metadata: {name: main}
//!     spec: {triggerEnvironment: dev, steps: [{environment: prod}]}
//! ```
//!
//! A mistake is refused with its line, column and field, or the part it is in; nothing
//! runs half configured.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::plan::Product;
use super::{Config, Target};

/// Why an orchestrator file was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Not YAML of the expected shape.
    #[error("{path}:{line}:{column}: {field}{message}")]
    Syntax {
        /// The file.
        path: String,
        /// Line, from 1 (0: unknown).
        line: usize,
        /// Column, from 1.
        column: usize,
        /// The field (`targets.dev.runtime: `), or empty.
        field: String,
        /// The parser's message.
        message: String,
    },
    /// Well-formed, but wrong.
    #[error("{path}: {at}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Where (`targets.dev.runtime`, `objects`).
        at: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    git: String,
    repo: String,
    token: String,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    poll_seconds: Option<u64>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
    targets: BTreeMap<String, TargetEntry>,
    objects: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetEntry {
    runtime: String,
    app: String,
    path: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// An orchestrator file, checked.
#[derive(Clone, Debug)]
pub struct OrchestratorFile {
    /// The orchestrator's configuration; its `gateway_addr` is empty when the file names
    /// none (the caller fills in its own gateway).
    pub config: Config,
}

impl OrchestratorFile {
    /// Parses and checks the file at `path` (named in errors) holding `text`.
    pub fn parse(path: &str, text: &str) -> Result<OrchestratorFile, FileError> {
        let file: File = crate::core::yaml::from_str(text).map_err(|e| FileError::Syntax {
            path: path.to_string(),
            line: e.line,
            column: e.column,
            field: e.field,
            message: e.message,
        })?;
        let invalid = |at: &str, message: String| FileError::Invalid {
            path: path.to_string(),
            at: at.to_string(),
            message,
        };
        let host_port = |at: &str, addr: &str| -> Result<(), FileError> {
            let ok = addr.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty()
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                    && port.parse::<u16>().is_ok_and(|p| p != 0)
            });
            if ok {
                Ok(())
            } else {
                Err(invalid(at, format!("{addr:?} is not host:port")))
            }
        };
        host_port("git", &file.git)?;
        if let Some(gateway) = &file.gateway {
            host_port("gateway", gateway)?;
        }
        if file.repo.is_empty() {
            return Err(invalid(
                "repo",
                "the GitOps repository's URL is empty".into(),
            ));
        }
        if file.token.is_empty() || file.token.chars().any(|c| !c.is_ascii_graphic()) {
            return Err(invalid(
                "token",
                "a token is visible ASCII, not empty".into(),
            ));
        }
        for (name, seconds) in [
            ("poll_seconds", file.poll_seconds),
            ("timeout_seconds", file.timeout_seconds),
        ] {
            if seconds == Some(0) {
                return Err(invalid(name, "must be at least 1".into()));
            }
        }
        for (environment, target) in &file.targets {
            let at = format!("targets.{environment}");
            if target
                .runtime
                .split_once('-')
                .is_none_or(|(account, runtime)| account.is_empty() || runtime.is_empty())
            {
                return Err(invalid(
                    &format!("{at}.runtime"),
                    format!(
                        "{:?} is not a runtime's gateway name (ACCOUNT-RUNTIME, e.g. acme-prod)",
                        target.runtime
                    ),
                ));
            }
            if target.app.is_empty() {
                return Err(invalid(
                    &format!("{at}.app"),
                    "the app's name is empty".into(),
                ));
            }
            if target.path.is_empty() || target.path.starts_with('/') {
                return Err(invalid(
                    &format!("{at}.path"),
                    format!(
                        "{:?} is not a path in the repository (relative, not empty)",
                        target.path
                    ),
                ));
            }
        }
        for (i, object) in file.objects.iter().enumerate() {
            if !object["kind"].is_string() || !object["metadata"]["name"].is_string() {
                return Err(invalid(
                    &format!("objects[{i}]"),
                    "an object needs kind and metadata.name".into(),
                ));
            }
        }
        let product = Product::of(&file.objects).map_err(|e| invalid("objects", e.to_string()))?;
        let mut config = Config::new(
            &product.name,
            product.spec,
            &file.repo,
            &file.git,
            file.gateway.as_deref().unwrap_or(""),
            &file.token,
        );
        config.flows = product.flows;
        config.templates = product.templates;
        config.concurrency = product.concurrency;
        config.targets = file
            .targets
            .into_iter()
            .map(|(environment, t)| {
                (
                    environment,
                    Target {
                        runtime: t.runtime,
                        app: t.app,
                        path: t.path,
                        labels: t.labels,
                    },
                )
            })
            .collect();
        if let Some(seconds) = file.poll_seconds {
            config.poll = Duration::from_secs(seconds);
        }
        if let Some(seconds) = file.timeout_seconds {
            config.default_timeout = Duration::from_secs(seconds);
        }
        config.check().map_err(|why| invalid("targets", why))?;
        Ok(OrchestratorFile { config })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
git: 127.0.0.1:9418
repo: https://git.example/acme/shop-gitops.git
token: orchestrator-token
poll_seconds: 1
targets:
  dev: {runtime: acme-prod, app: shop-dev, path: envs/dev}
  prod: {runtime: acme-prod, app: shop-prod, path: envs/prod}
objects:
  - apiVersion: codefresh.io/v1beta1
    kind: Product
    metadata: {name: shop}
    spec:
      promotionFlows: [{name: main}]
      concurrency: terminate
      promotionTemplate: {versionSource: {file: values.json, jsonPath: $.image.tag}, promotion: {values.json: {jsonPaths: [$.image.tag]}}}
  - apiVersion: codefresh.io/v1beta1
    kind: PromotionFlow
    metadata: {name: main}
    spec: {triggerEnvironment: dev, steps: [{environment: prod}]}
";

    #[test]
    fn an_orchestrator_file_becomes_its_configuration() {
        let file = OrchestratorFile::parse("promotions.yaml", GOOD).unwrap();
        let config = file.config;
        assert_eq!(config.product, "shop");
        assert_eq!(config.git_addr, "127.0.0.1:9418");
        assert_eq!(
            config.gateway_addr, "",
            "no gateway named: the caller's own"
        );
        assert_eq!(config.poll, Duration::from_secs(1));
        assert_eq!(config.default_timeout, super::super::DEFAULT_TIMEOUT);
        assert_eq!(config.concurrency, super::super::Concurrency::Terminate);
        assert_eq!(config.flows["main"].trigger, "dev");
        assert_eq!(config.flows["main"].stages[0].environment, "prod");
        assert_eq!(config.targets["prod"].app, "shop-prod");
        assert_eq!(config.check(), Ok("dev".to_string()));
    }

    #[test]
    fn a_product_without_a_template_gets_the_templates_that_select_its_app() {
        let inline = "      promotionTemplate: {versionSource: {file: values.json, jsonPath: $.image.tag}, promotion: {values.json: {jsonPaths: [$.image.tag]}}}\n";
        let templates = "  - apiVersion: codefresh.io/v1beta1
    kind: PromotionTemplate
    metadata: {name: base-helm}
    spec:
      applicationSourceSelector: {matchExpressions: [{key: codefresh.io/product, operator: Exists}]}
      priority: 0
      versionSource: {file: Chart.yaml, jsonPath: $.appVersion}
      promotion: {values.yaml: {jsonPaths: [$..image]}}
  - apiVersion: codefresh.io/v1beta1
    kind: PromotionTemplate
    metadata: {name: shop}
    spec:
      applicationSourceSelector: {matchLabels: {codefresh.io/product: shop}}
      priority: 10
      promotion: {values.yaml: {jsonPaths: [$.image.tag]}}
";
        let labelled = GOOD.replacen(inline, "", 1).replacen(
            "app: shop-dev, path: envs/dev}",
            "app: shop-dev, path: envs/dev, labels: {codefresh.io/product: shop}}",
            1,
        ) + templates;
        let config = OrchestratorFile::parse("promotions.yaml", &labelled)
            .unwrap()
            .config;
        assert_eq!(
            config.template_for(&config.targets["dev"]),
            Some(serde_json::json!({
                "versionSource": {"file": "Chart.yaml", "jsonPath": "$.appVersion"},
                "promotion": {"values.yaml": {"jsonPaths": ["$.image.tag"]}},
            }))
        );
        // The trigger environment's app carries no label a template selects.
        let unlabelled = GOOD.replacen(inline, "", 1) + templates;
        let error = OrchestratorFile::parse("promotions.yaml", &unlabelled)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "promotions.yaml: targets: Product shop: it names no promotion template, and no PromotionTemplate's applicationSourceSelector matches app shop-dev (environment dev) with labels {}"
        );
    }

    #[test]
    fn a_mistake_is_refused_with_where_it_is() {
        let cases: &[(&str, &str, &str)] = &[
            ("git: 127.0.0.1:9418", "git: nowhere", "promotions.yaml: git: \"nowhere\" is not host:port"),
            ("token: orchestrator-token", "token: \"\"", "promotions.yaml: token: a token is visible ASCII"),
            ("poll_seconds: 1", "poll_seconds: 0", "promotions.yaml: poll_seconds: must be at least 1"),
            ("runtime: acme-prod, app: shop-dev", "runtime: prod, app: shop-dev", "promotions.yaml: targets.dev.runtime: \"prod\" is not a runtime's gateway name"),
            ("path: envs/prod}", "path: /envs/prod}", "promotions.yaml: targets.prod.path: \"/envs/prod\" is not a path"),
            ("  prod: {runtime: acme-prod, app: shop-prod, path: envs/prod}\n", "", "promotions.yaml: targets: Product shop: no app (target) for environment(s) prod"),
            ("metadata: {name: main}", "metadata: {name: other}", "promotions.yaml: objects: Product shop names PromotionFlow \"main\", which the file does not hold"),
            ("poll_seconds: 1", "poll_seconds: soon", "promotions.yaml:4:15: poll_seconds: "),
            ("poll_seconds: 1", "poll: 1", "promotions.yaml:4:1: "),
        ];
        for (from, to, want) in cases {
            assert!(GOOD.contains(from), "{from}");
            let text = GOOD.replacen(from, to, 1);
            let error = OrchestratorFile::parse("promotions.yaml", &text)
                .expect_err(to)
                .to_string();
            assert!(error.starts_with(want), "{to}: {error}");
        }
    }
}
