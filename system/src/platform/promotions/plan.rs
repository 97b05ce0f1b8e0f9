//! What a release does, decided before it runs: which Product flow a commit triggers
//! (`gitTriggerSelectors`), the flow's environments as a DAG (`dependsOn`), and per
//! environment the merged policy — matching `PromotionPolicy`s by priority, a flow step's
//! inline policy over them (docs.codefresh.io@0d0a6103, `promotion-policy.md`; research §5).
//! Pure functions over the CRs' JSON; bad input is an error naming the object and field.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::core::label_selector::LabelSelector;

/// What a promotion into an environment does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A commit to the environment's files on the default branch.
    Commit,
    /// A pull request, promoted when it is merged.
    Pr,
    /// Nothing is changed (the environment is only verified).
    None,
}

/// One environment's merged policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// `action`; unset when no policy says (then [`Action::Commit`], inferred).
    pub action: Option<Action>,
    /// `preAction`: a workflow template run before the promotion.
    pub pre_action: Option<String>,
    /// `postAction`: a workflow template run after verification.
    pub post_action: Option<String>,
}

impl Policy {
    /// Fills the fields this policy leaves unset from `lower`.
    fn or(self, lower: &Policy) -> Policy {
        Policy {
            action: self.action.or(lower.action),
            pre_action: self.pre_action.or_else(|| lower.pre_action.clone()),
            post_action: self.post_action.or_else(|| lower.post_action.clone()),
        }
    }

    fn read(value: &Value, at: &str) -> Result<Policy, PlanError> {
        let text = |f: &str| value.get(f).and_then(Value::as_str).map(str::to_string);
        let action = match text("action").as_deref() {
            None => None,
            Some("commit") => Some(Action::Commit),
            Some("pr") => Some(Action::Pr),
            Some("none") => Some(Action::None),
            Some(other) => {
                return Err(PlanError(format!(
                    "{at}.action: {other:?} is not commit, pr or none"
                )))
            }
        };
        Ok(Policy {
            action,
            pre_action: text("preAction").filter(|s| !s.is_empty()),
            post_action: text("postAction").filter(|s| !s.is_empty()),
        })
    }
}

/// Why a product, flow or policy cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// One environment of a flow, planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// The environment.
    pub environment: String,
    /// Environments that must have verified the release first.
    pub depends_on: Vec<String>,
    /// Its merged policy.
    pub policy: Policy,
    /// The step's hooks (run once for this environment in each release).
    pub hooks: Hooks,
}

/// A flow's or a step's promotion hooks: the Promotion Workflow (a WorkflowTemplate's name)
/// run when the release (or its promotion into the environment) starts, succeeds or fails
/// (docs.codefresh.io, "Promotion Flow YAML": `hooks: {onStart: slack-start-hook,
/// onSuccess: …, onFail: …}`, and "Configure hooks in Promotion Workflows").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// `onStart`.
    pub on_start: Option<String>,
    /// `onSuccess`.
    pub on_success: Option<String>,
    /// `onFail`.
    pub on_fail: Option<String>,
}

impl Hooks {
    fn read(value: Option<&Value>, at: &str) -> Result<Hooks, PlanError> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(Hooks::default());
        };
        let Some(object) = value.as_object() else {
            return Err(PlanError(format!(
                "{at}: want a map of onStart, onSuccess, onFail to workflow template names"
            )));
        };
        if let Some(unknown) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "onStart" | "onSuccess" | "onFail"))
        {
            return Err(PlanError(format!(
                "{at}.{unknown}: unknown hook; hooks are onStart, onSuccess, onFail"
            )));
        }
        let name = |key: &str| -> Result<Option<String>, PlanError> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                Some(other) => Err(PlanError(format!(
                    "{at}.{key}: want a workflow template's name, not {other}"
                ))),
            }
        };
        Ok(Hooks {
            on_start: name("onStart")?,
            on_success: name("onSuccess")?,
            on_fail: name("onFail")?,
        })
    }
}

/// A flow, planned: its trigger environment and the stages after it, in a topological
/// order (ties by name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowPlan {
    /// The flow's name.
    pub name: String,
    /// `triggerEnvironment`: where a release starts (it is verified there, not promoted).
    pub trigger: String,
    /// The other environments.
    pub stages: Vec<Stage>,
    /// `promotionTimeoutLimit` in seconds, if set.
    pub timeout_s: Option<u64>,
    /// The flow's hooks (run once per release).
    pub hooks: Hooks,
}

/// An environment as the platform knows it (name, tags and type, for policy selectors).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Environment {
    /// Its name.
    pub name: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its type (`non-production`, `production`).
    pub kind: String,
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Whether a selector's list admits `value` (an empty or absent list admits anything).
fn admits(list: &[String], values: &[&str]) -> bool {
    list.is_empty() || values.iter().any(|v| list.iter().any(|l| l == v))
}

/// Whether a PromotionPolicy's `selector` matches the product and target environment.
fn selects(
    selector: &Value,
    product: &str,
    product_tags: &[String],
    environment: &Environment,
) -> bool {
    let product_selector = &selector["product"];
    let tags: Vec<&str> = product_tags.iter().map(String::as_str).collect();
    let env_selector = &selector["targetEnvironment"];
    let env_tags: Vec<&str> = environment.tags.iter().map(String::as_str).collect();
    admits(&strings(product_selector.get("names")), &[product])
        && (strings(product_selector.get("tags")).is_empty()
            || admits(&strings(product_selector.get("tags")), &tags))
        && admits(
            &strings(env_selector.get("names")),
            &[environment.name.as_str()],
        )
        && (strings(env_selector.get("tags")).is_empty()
            || admits(&strings(env_selector.get("tags")), &env_tags))
        && admits(
            &strings(env_selector.get("types")),
            &[environment.kind.as_str()],
        )
}

/// The merged policy for `environment`: the matching policies (`spec` of each
/// PromotionPolicy, with its name) by priority, highest first, each filling what the
/// higher ones left unset; then `inline` (the flow step's) over all of them.
pub fn merged_policy(
    policies: &[(String, Value)],
    product: &str,
    product_tags: &[String],
    environment: &Environment,
    inline: Option<&Value>,
) -> Result<Policy, PlanError> {
    let mut matching: Vec<(i64, &String, &Value)> = Vec::new();
    for (name, spec) in policies {
        let priority = spec["priority"].as_i64().ok_or_else(|| {
            PlanError(format!(
                "PromotionPolicy {name}: spec.priority: want an integer"
            ))
        })?;
        if selects(&spec["selector"], product, product_tags, environment) {
            matching.push((priority, name, spec));
        }
    }
    // Higher priority first; equal priorities by name, so the merge is deterministic.
    matching.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let mut merged = Policy::default();
    for (_, name, spec) in matching {
        let policy = Policy::read(
            &spec["policy"],
            &format!("PromotionPolicy {name}: spec.policy"),
        )?;
        merged = merged.or(&policy);
    }
    if let Some(inline) = inline.filter(|v| !v.is_null()) {
        merged = Policy::read(inline, "the flow step's policy")?.or(&merged);
    }
    Ok(merged)
}

/// Plans flow `name` (its PromotionFlow `spec`) for `product`: the DAG checked (every
/// `dependsOn` names an environment of the flow or the trigger; no cycles) and each
/// environment's policy merged.
pub fn plan_flow(
    name: &str,
    flow: &Value,
    policies: &[(String, Value)],
    product: &str,
    product_tags: &[String],
    environments: &BTreeMap<String, Environment>,
) -> Result<FlowPlan, PlanError> {
    let at = format!("PromotionFlow {name}");
    let trigger = flow["triggerEnvironment"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| PlanError(format!("{at}: spec.triggerEnvironment: required")))?
        .to_string();
    let steps = flow["steps"].as_array().cloned().unwrap_or_default();
    let flow_hooks = Hooks::read(flow.get("hooks"), &format!("{at}: spec.hooks"))?;
    let mut declared: BTreeMap<String, (Vec<String>, Option<Value>, Hooks)> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        let env = step["environment"]
            .as_str()
            .filter(|e| !e.is_empty())
            .ok_or_else(|| PlanError(format!("{at}: spec.steps[{i}].environment: required")))?
            .to_string();
        if env == trigger || declared.contains_key(&env) {
            return Err(PlanError(format!(
                "{at}: spec.steps[{i}]: environment {env} appears twice"
            )));
        }
        let mut depends_on = strings(step.get("dependsOn"));
        if depends_on.is_empty() {
            depends_on.push(trigger.clone());
        }
        let hooks = Hooks::read(step.get("hooks"), &format!("{at}: spec.steps[{i}].hooks"))?;
        declared.insert(env, (depends_on, step.get("policy").cloned(), hooks));
    }
    for (env, (depends_on, _, _)) in &declared {
        for dep in depends_on {
            if *dep != trigger && !declared.contains_key(dep) {
                return Err(PlanError(format!(
                    "{at}: {env} depends on {dep}, which is not in the flow"
                )));
            }
        }
    }
    // Kahn's algorithm, smallest name first among the ready ones.
    let mut done: BTreeSet<String> = BTreeSet::from([trigger.clone()]);
    let mut order = Vec::new();
    while order.len() < declared.len() {
        let ready = declared
            .iter()
            .find(|(env, (deps, _, _))| {
                !done.contains(*env) && deps.iter().all(|d| done.contains(d))
            })
            .map(|(env, _)| env.clone());
        let Some(env) = ready else {
            let stuck: Vec<&String> = declared.keys().filter(|e| !done.contains(*e)).collect();
            return Err(PlanError(format!(
                "{at}: the steps' dependsOn form a cycle among {stuck:?}"
            )));
        };
        done.insert(env.clone());
        order.push(env);
    }
    let mut stages = Vec::new();
    for env in order {
        let (depends_on, inline, hooks) = &declared[&env];
        let environment = environments.get(&env).cloned().unwrap_or(Environment {
            name: env.clone(),
            ..Environment::default()
        });
        stages.push(Stage {
            policy: merged_policy(
                policies,
                product,
                product_tags,
                &environment,
                inline.as_ref(),
            )?,
            environment: env,
            depends_on: depends_on.clone(),
            hooks: hooks.clone(),
        });
    }
    Ok(FlowPlan {
        name: name.into(),
        trigger,
        stages,
        timeout_s: flow["promotionTimeoutLimit"].as_u64(),
        hooks: flow_hooks,
    })
}

/// The Product's promotion template: its inline `promotionTemplate`, or the
/// `PromotionTemplate` its `promotionTemplateRef` names (`templates`: name → spec); `None`
/// when it names neither and the file holds PromotionTemplates, which then choose their
/// applications by label ([`Templates`]). An error names a missing or unknown reference.
pub fn promotion_template(
    product: &str,
    spec: &Value,
    templates: &BTreeMap<String, Value>,
) -> Result<Option<Value>, PlanError> {
    if let Some(inline) = spec.get("promotionTemplate").filter(|t| t.is_object()) {
        return Ok(Some(inline.clone()));
    }
    let reference = spec
        .get("promotionTemplateRef")
        .and_then(|r| r.as_str().or_else(|| r.get("name").and_then(Value::as_str)));
    let Some(name) = reference else {
        if !templates.is_empty() {
            return Ok(None);
        }
        return Err(PlanError(format!(
            "Product {product}: spec.promotionTemplate or spec.promotionTemplateRef, or a PromotionTemplate that selects its applications: required"
        )));
    };
    templates.get(name).cloned().map(Some).ok_or_else(|| {
        PlanError(format!(
            "Product {product}: spec.promotionTemplateRef names PromotionTemplate {name:?}, which does not exist"
        ))
    })
}

/// One PromotionTemplate that chooses its applications by label.
#[derive(Clone, Debug)]
struct Template {
    name: String,
    selector: LabelSelector,
    priority: i64,
    spec: Value,
}

/// The PromotionTemplates, for a Product that names none: every template whose
/// `applicationSourceSelector` matches an application's labels applies to it, merged into
/// one composite — the highest `priority` is the base, and what it lacks is taken from the
/// next (docs.codefresh.io, "Promotable changes": "Codefresh generates a composite Promotion
/// Template by merging the specifications from all relevant Promotion Templates"). Merged
/// per field: `versionSource` whole, `promotion` file by file (inferred: the docs give no
/// finer rule). Equal priorities rank by name (inferred).
#[derive(Clone, Debug, Default)]
pub struct Templates {
    /// Highest priority first.
    ranked: Vec<Template>,
}

impl Templates {
    /// Reads `templates` (name → spec); an error names the template and field.
    pub fn of(templates: &BTreeMap<String, Value>) -> Result<Templates, PlanError> {
        let mut ranked = Vec::new();
        for (name, spec) in templates {
            let at = format!("PromotionTemplate {name}: spec.applicationSourceSelector");
            let selector = match spec.get("applicationSourceSelector") {
                None | Some(Value::Null) => return Err(PlanError(format!("{at}: required"))),
                Some(selector) => {
                    LabelSelector::from_json(selector, &at).map_err(|e| PlanError(e.to_string()))?
                }
            };
            let priority = match spec.get("priority") {
                None | Some(Value::Null) => {
                    return Err(PlanError(format!(
                        "PromotionTemplate {name}: spec.priority: required"
                    )))
                }
                Some(p) => p.as_i64().ok_or_else(|| {
                    PlanError(format!(
                        "PromotionTemplate {name}: spec.priority: want an integer, not {p}"
                    ))
                })?,
            };
            ranked.push(Template {
                name: name.clone(),
                selector,
                priority,
                spec: spec.clone(),
            });
        }
        ranked.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        Ok(Templates { ranked })
    }

    /// The composite template for an application with `labels`, and the names it was made
    /// of (highest priority first); `None` when no template selects it.
    pub fn composite(&self, labels: &BTreeMap<String, String>) -> Option<(Value, Vec<String>)> {
        let matching: Vec<&Template> = self
            .ranked
            .iter()
            .filter(|t| t.selector.matches(labels))
            .collect();
        if matching.is_empty() {
            return None;
        }
        let mut composite = serde_json::Map::new();
        let mut files = serde_json::Map::new();
        for template in &matching {
            if let Some(source) = template.spec.get("versionSource").filter(|v| v.is_object()) {
                composite
                    .entry("versionSource")
                    .or_insert_with(|| source.clone());
            }
            for (file, paths) in template.spec["promotion"].as_object().into_iter().flatten() {
                files.entry(file.clone()).or_insert_with(|| paths.clone());
            }
        }
        composite.insert("promotion".into(), Value::Object(files));
        let names = matching.iter().map(|t| t.name.clone()).collect();
        Some((Value::Object(composite), names))
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ranked.is_empty()
    }
}

/// The flow a commit triggers for a Product (`spec`): the first of its `promotionFlows`
/// whose every `gitTriggerSelectors` entry holds for the commit's message and revision
/// (`In`: one of the values is contained in it — inferred; `NotIn`: none is).
pub fn triggered_flow(product: &Value, message: &str, revision: &str) -> Option<String> {
    product["promotionFlows"]
        .as_array()?
        .iter()
        .find(|flow| {
            flow["gitTriggerSelectors"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|selector| {
                    let subject = match selector["key"].as_str() {
                        Some("gitRevision") => revision,
                        _ => message,
                    };
                    let hit = strings(selector.get("values"))
                        .iter()
                        .any(|v| subject.contains(v.as_str()));
                    match selector["operator"].as_str() {
                        Some("NotIn") => !hit,
                        _ => hit,
                    }
                })
        })
        .and_then(|flow| flow["name"].as_str().map(str::to_string))
}

/// A Product's objects, planned: what the orchestrator needs of them.
#[derive(Clone, Debug)]
pub struct Product {
    /// The Product's name.
    pub name: String,
    /// Its `spec`, its promotion template resolved into `promotionTemplate`.
    pub spec: Value,
    /// Its flows, planned, by name.
    pub flows: BTreeMap<String, FlowPlan>,
    /// Every environment of every flow, sorted.
    pub environments: Vec<String>,
    /// `spec.concurrency`.
    pub concurrency: super::Concurrency,
    /// When its spec names no template: the PromotionTemplates that choose by label.
    pub templates: Templates,
}

impl Product {
    /// Plans `objects` (each a whole CR: `kind`, `metadata.name`, `spec`): exactly one
    /// Product (its template inline or a PromotionTemplate it references), the
    /// PromotionFlows its `promotionFlows` name, and the PromotionPolicies. An error names
    /// what is wrong.
    pub fn of(objects: &[Value]) -> Result<Product, PlanError> {
        let of_kind = |kind: &str| -> Vec<(String, Value)> {
            objects
                .iter()
                .filter(|o| o["kind"] == kind)
                .map(|o| {
                    (
                        o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                        o["spec"].clone(),
                    )
                })
                .collect()
        };
        let products = of_kind("Product");
        let [(product, spec)] = products.as_slice() else {
            return Err(PlanError(format!(
                "want exactly one Product, found {}",
                products.len()
            )));
        };
        let templates: BTreeMap<String, Value> = of_kind("PromotionTemplate").into_iter().collect();
        let mut spec = spec.clone();
        let mut by_label = Templates::default();
        match promotion_template(product, &spec, &templates)? {
            Some(template) => spec["promotionTemplate"] = template,
            None => by_label = Templates::of(&templates)?,
        }
        let flow_specs: BTreeMap<String, Value> = of_kind("PromotionFlow").into_iter().collect();
        let policies = of_kind("PromotionPolicy");
        let mut flows = BTreeMap::new();
        for flow in spec["promotionFlows"].as_array().into_iter().flatten() {
            let name = flow["name"].as_str().unwrap_or("");
            let Some(flow_spec) = flow_specs.get(name) else {
                return Err(PlanError(format!(
                    "Product {product} names PromotionFlow {name:?}, which the file does not hold"
                )));
            };
            let environments: BTreeMap<String, Environment> = BTreeMap::new();
            let planned = plan_flow(name, flow_spec, &policies, product, &[], &environments)?;
            flows.insert(name.to_string(), planned);
        }
        if flows.is_empty() {
            return Err(PlanError(format!(
                "Product {product} has no promotionFlows"
            )));
        }
        let mut environments: Vec<String> = flows
            .values()
            .flat_map(|f| {
                std::iter::once(f.trigger.clone())
                    .chain(f.stages.iter().map(|s| s.environment.clone()))
            })
            .collect();
        environments.sort();
        environments.dedup();
        let concurrency = match spec["concurrency"].as_str() {
            Some("terminate") => super::Concurrency::Terminate,
            _ => super::Concurrency::Queue,
        };
        Ok(Product {
            name: product.clone(),
            spec,
            flows,
            environments,
            concurrency,
            templates: by_label,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envs() -> BTreeMap<String, Environment> {
        [
            ("dev", "non-production"),
            ("staging", "non-production"),
            ("prod-eu", "production"),
            ("prod-us", "production"),
        ]
        .iter()
        .map(|(n, k)| {
            (
                n.to_string(),
                Environment {
                    name: n.to_string(),
                    tags: if n.starts_with("prod") {
                        vec!["prod".into()]
                    } else {
                        vec![]
                    },
                    kind: k.to_string(),
                },
            )
        })
        .collect()
    }

    #[test]
    fn a_flow_is_planned_in_dependency_order_with_merged_policies() {
        let flow = json!({"triggerEnvironment": "dev", "promotionTimeoutLimit": 900, "steps": [
            {"environment": "prod-us", "dependsOn": ["staging"]},
            {"environment": "staging", "policy": {"preAction": "staging-smoke"}},
            {"environment": "prod-eu", "dependsOn": ["staging"], "policy": {"action": "commit"}},
        ]});
        let policies = vec![
            (
                "everything".to_string(),
                json!({"priority": 1, "policy": {"action": "commit", "preAction": "lint", "postAction": "notify"}}),
            ),
            (
                "production".to_string(),
                json!({"priority": 10, "selector": {"targetEnvironment": {"types": ["production"]}},
                "policy": {"action": "pr", "preAction": "change-ticket"}}),
            ),
            (
                "other-product".to_string(),
                json!({"priority": 100, "selector": {"product": {"names": ["billing"]}},
                "policy": {"action": "none"}}),
            ),
        ];
        let plan = plan_flow("shop-flow", &flow, &policies, "shop", &[], &envs()).unwrap();
        assert_eq!(plan.trigger, "dev");
        assert_eq!(plan.timeout_s, Some(900));
        let order: Vec<&str> = plan.stages.iter().map(|s| s.environment.as_str()).collect();
        assert_eq!(order, ["staging", "prod-eu", "prod-us"]);
        assert_eq!(plan.stages[0].depends_on, ["dev"]);
        // staging: the global commit policy, the inline preAction over lint.
        assert_eq!(
            plan.stages[0].policy,
            Policy {
                action: Some(Action::Commit),
                pre_action: Some("staging-smoke".into()),
                post_action: Some("notify".into())
            }
        );
        // prod-us: the production policy (priority 10) over the global one.
        assert_eq!(plan.stages[2].policy.action, Some(Action::Pr));
        assert_eq!(
            plan.stages[2].policy.pre_action.as_deref(),
            Some("change-ticket")
        );
        assert_eq!(plan.stages[2].policy.post_action.as_deref(), Some("notify"));
        // prod-eu: the inline action over the production policy's pr.
        assert_eq!(plan.stages[1].policy.action, Some(Action::Commit));
    }

    #[test]
    fn bad_flows_and_policies_are_refused_naming_what_is_wrong() {
        let plan = |flow: Value, policies: Vec<(String, Value)>| {
            plan_flow("f", &flow, &policies, "shop", &[], &envs())
                .unwrap_err()
                .0
        };
        assert_eq!(
            plan(json!({"steps": []}), vec![]),
            "PromotionFlow f: spec.triggerEnvironment: required"
        );
        assert!(plan(json!({"triggerEnvironment": "dev", "steps": [{"environment": "a", "dependsOn": ["b"]}, {"environment": "b", "dependsOn": ["a"]}]}), vec![])
            .contains("cycle"));
        assert!(plan(json!({"triggerEnvironment": "dev", "steps": [{"environment": "a", "dependsOn": ["qa"]}]}), vec![])
            .contains("a depends on qa, which is not in the flow"));
        assert!(plan(
            json!({"triggerEnvironment": "dev", "steps": [{"environment": "dev"}]}),
            vec![]
        )
        .contains("appears twice"));
        assert_eq!(
            plan(
                json!({"triggerEnvironment": "dev", "steps": [{"environment": "a"}]}),
                vec![("p".into(), json!({"policy": {}}))]
            ),
            "PromotionPolicy p: spec.priority: want an integer"
        );
        assert!(plan(json!({"triggerEnvironment": "dev", "steps": [{"environment": "a", "policy": {"action": "merge"}}]}), vec![])
            .contains("\"merge\" is not commit, pr or none"));
    }

    #[test]
    fn trigger_selectors_pick_the_flow_a_commit_starts() {
        let product = json!({"promotionFlows": [
            {"name": "hotfix", "gitTriggerSelectors": [{"key": "commitMessage", "operator": "In", "values": ["[hotfix]"]}]},
            {"name": "regular", "gitTriggerSelectors": [{"key": "commitMessage", "operator": "NotIn", "values": ["[skip promotion]"]}]},
        ]});
        assert_eq!(
            triggered_flow(&product, "[hotfix] fix prices", "abc").as_deref(),
            Some("hotfix")
        );
        assert_eq!(
            triggered_flow(&product, "bump shop to v7", "abc").as_deref(),
            Some("regular")
        );
        assert_eq!(
            triggered_flow(&product, "docs [skip promotion]", "abc"),
            None
        );
    }

    #[test]
    fn the_promotion_template_is_inline_or_referenced() {
        use serde_json::json;
        let templates = BTreeMap::from([(
            "web".to_string(),
            json!({"versionSource": {"file": "v.json", "jsonPath": "$.tag"}}),
        )]);
        let inline = json!({"promotionTemplate": {"promotion": {}}});
        assert_eq!(
            promotion_template("shop", &inline, &templates).unwrap(),
            Some(json!({"promotion": {}}))
        );
        for reference in [json!("web"), json!({"name": "web"})] {
            let spec = json!({ "promotionTemplateRef": reference });
            assert_eq!(
                promotion_template("shop", &spec, &templates).unwrap(),
                Some(templates["web"].clone())
            );
        }
        // Neither: the templates choose by label.
        assert_eq!(
            promotion_template("shop", &json!({}), &templates).unwrap(),
            None
        );
        assert_eq!(
            promotion_template("shop", &json!({"promotionTemplateRef": "api"}), &templates)
                .unwrap_err()
                .to_string(),
            "Product shop: spec.promotionTemplateRef names PromotionTemplate \"api\", which does not exist"
        );
        assert_eq!(
            promotion_template("shop", &json!({}), &BTreeMap::new())
                .unwrap_err()
                .to_string(),
            "Product shop: spec.promotionTemplate or spec.promotionTemplateRef, or a PromotionTemplate that selects its applications: required"
        );
    }

    #[test]
    fn hooks_are_read_from_the_flow_and_its_steps_and_a_bad_one_is_named() {
        use serde_json::json;
        let flow = json!({
            "triggerEnvironment": "dev",
            "hooks": {"onStart": "notify", "onFail": "page"},
            "steps": [{"environment": "prod", "hooks": {"onSuccess": "done"}}],
        });
        let plan = plan_flow("main", &flow, &[], "shop", &[], &BTreeMap::new()).unwrap();
        assert_eq!(
            plan.hooks,
            Hooks {
                on_start: Some("notify".into()),
                on_success: None,
                on_fail: Some("page".into()),
            }
        );
        assert_eq!(plan.stages[0].hooks.on_success.as_deref(), Some("done"));
        for (hooks, message) in [
            (
                json!({"onStart": {"name": "notify"}}),
                "PromotionFlow main: spec.hooks.onStart: want a workflow template's name, not {\"name\":\"notify\"}",
            ),
            (
                json!({"onFinish": "x"}),
                "PromotionFlow main: spec.hooks.onFinish: unknown hook; hooks are onStart, onSuccess, onFail",
            ),
            (
                json!("notify"),
                "PromotionFlow main: spec.hooks: want a map of onStart, onSuccess, onFail to workflow template names",
            ),
        ] {
            let mut flow = flow.clone();
            flow["hooks"] = hooks;
            let error = plan_flow("main", &flow, &[], "shop", &[], &BTreeMap::new()).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn templates_that_select_an_app_merge_highest_priority_first() {
        use serde_json::json;
        let templates = BTreeMap::from([
            (
                "base-helm".to_string(),
                json!({
                    "applicationSourceSelector": {"matchExpressions": [
                        {"key": "codefresh.io/product", "operator": "Exists"}]},
                    "priority": 0,
                    "versionSource": {"file": "Chart.yaml", "jsonPath": "$.appVersion"},
                    "promotion": {
                        "Chart.yaml": {"jsonPaths": ["$.appVersion"]},
                        "values.yaml": {"jsonPaths": ["$..image"]},
                    },
                }),
            ),
            (
                "loans".to_string(),
                json!({
                    "applicationSourceSelector": {"matchLabels": {"codefresh.io/product": "loans"}},
                    "priority": 5,
                    "promotion": {"values.yaml": {"jsonPaths": ["$.image.tag"]}},
                }),
            ),
            (
                "prod-only".to_string(),
                json!({
                    "applicationSourceSelector": {"matchLabels": {"codefresh.io/environment": "prod"}},
                    "priority": -1,
                    "versionSource": {"file": "VERSION.json", "jsonPath": "$.v"},
                }),
            ),
        ]);
        let templates = Templates::of(&templates).unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // loans (5) is the base: its values.yaml wins; base-helm (0) adds Chart.yaml and the
        // versionSource loans lacks.
        let (composite, names) = templates
            .composite(&labels(&[("codefresh.io/product", "loans")]))
            .unwrap();
        assert_eq!(names, ["loans", "base-helm"]);
        assert_eq!(
            composite,
            json!({
                "versionSource": {"file": "Chart.yaml", "jsonPath": "$.appVersion"},
                "promotion": {
                    "Chart.yaml": {"jsonPaths": ["$.appVersion"]},
                    "values.yaml": {"jsonPaths": ["$.image.tag"]},
                },
            })
        );
        // A lower priority gives only what the higher ones lack.
        let (composite, names) = templates
            .composite(&labels(&[
                ("codefresh.io/product", "cards"),
                ("codefresh.io/environment", "prod"),
            ]))
            .unwrap();
        assert_eq!(names, ["base-helm", "prod-only"]);
        assert_eq!(composite["versionSource"]["file"], "Chart.yaml");
        let (composite, _) = templates
            .composite(&labels(&[("codefresh.io/environment", "prod")]))
            .unwrap();
        assert_eq!(
            composite,
            json!({"versionSource": {"file": "VERSION.json", "jsonPath": "$.v"}, "promotion": {}})
        );
        assert!(templates.composite(&labels(&[("team", "x")])).is_none());
        // Bad templates are named.
        for (spec, message) in [
            (
                json!({"priority": 1}),
                "PromotionTemplate t: spec.applicationSourceSelector: required",
            ),
            (
                json!({"applicationSourceSelector": {}}),
                "PromotionTemplate t: spec.priority: required",
            ),
            (
                json!({"applicationSourceSelector": {}, "priority": "high"}),
                "PromotionTemplate t: spec.priority: want an integer, not \"high\"",
            ),
            (
                json!({"applicationSourceSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}, "priority": 1}),
                "PromotionTemplate t: spec.applicationSourceSelector.matchExpressions[0].operator: \"Is\" is not In, NotIn, Exists or DoesNotExist",
            ),
        ] {
            let error = Templates::of(&BTreeMap::from([("t".to_string(), spec)])).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }
}
