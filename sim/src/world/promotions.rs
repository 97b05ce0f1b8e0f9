//! The promotion world: a Product's objects planned into the orchestrator's configuration,
//! and its workload — one automated app per environment (`<product>-<environment>`, files
//! under `envs/<environment>/`), a new version committed to the trigger environment every
//! `release_every`, the apps' health changes, and what the workflow templates' runs do.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{json, Value};

use orrery_system::env::SharedEnv;
use orrery_system::platform::promotions::plan::{self, FlowPlan};
use orrery_system::platform::promotions::{self, Concurrency, Target};

use super::argocd::{self, HealthOverrides};
use super::git::SharedGit;
use super::workflows::{Job, Jobs};
use crate::scenario::model::Promotions;

/// The GitOps repository of the promotion world.
pub const REPO: &str = "https://git.example/acme/shop-gitops.git";
/// The file each environment's version lives in, under its path.
pub const VALUES_FILE: &str = "values.json";
/// The orchestrator's user token at the gateway.
pub const ORCHESTRATOR_TOKEN: &str = "promotion-orchestrator-token";

/// A Product's objects, planned.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The Product's name.
    pub product: String,
    /// Its `spec`.
    pub spec: Value,
    /// Its flows.
    pub flows: BTreeMap<String, FlowPlan>,
    /// Every environment of every flow, sorted.
    pub environments: Vec<String>,
    /// `spec.concurrency`.
    pub concurrency: Concurrency,
    /// The PromotionTemplates that choose by label (when the Product names none).
    pub templates: plan::Templates,
}

impl Planned {
    /// Plans `promotions.objects`: exactly one Product (its template inline or a
    /// PromotionTemplate it references), the PromotionFlows its
    /// `promotionFlows` name, the PromotionPolicies; an error names what is wrong.
    pub fn of(promotions: &Promotions) -> Result<Planned, String> {
        let product = plan::Product::of(&promotions.objects).map_err(|e| e.to_string())?;
        // The simulated apps carry no labels: templates that select by label must select
        // an app without any, or the orchestrator would have no template.
        if !product.spec["promotionTemplate"].is_object()
            && product.templates.composite(&BTreeMap::new()).is_none()
        {
            return Err(format!(
                "Product {} names no promotion template (promotionTemplate or promotionTemplateRef), and the simulated apps carry no labels for a PromotionTemplate's applicationSourceSelector to match",
                product.name
            ));
        }
        Ok(Planned {
            product: product.name,
            spec: product.spec,
            flows: product.flows,
            environments: product.environments,
            concurrency: product.concurrency,
            templates: product.templates,
        })
    }

    /// The trigger environment (of the first flow).
    pub fn trigger(&self) -> &str {
        &self.flows.values().next().expect("a flow").trigger
    }

    /// The app of `environment`.
    pub fn app(&self, environment: &str) -> String {
        format!("{}-{environment}", self.product)
    }

    /// The orchestrator's configuration: every environment on `runtime`, through the
    /// gateway at `gateway_addr`.
    pub fn orchestrator(
        &self,
        runtime: &str,
        git_addr: &str,
        gateway_addr: &str,
    ) -> promotions::Config {
        let mut config = promotions::Config::new(
            &self.product,
            self.spec.clone(),
            REPO,
            git_addr,
            gateway_addr,
            ORCHESTRATOR_TOKEN,
        );
        config.flows = self.flows.clone();
        config.templates = self.templates.clone();
        config.concurrency = self.concurrency;
        config.targets = self
            .environments
            .iter()
            .map(|env| {
                (
                    env.clone(),
                    Target {
                        runtime: runtime.into(),
                        app: self.app(env),
                        path: format!("envs/{env}"),
                        labels: BTreeMap::new(),
                    },
                )
            })
            .collect();
        config
    }
}

/// The version file's content for `tag`.
pub fn values(tag: &str) -> String {
    format!("{{\"image\": {{\"tag\": \"{tag}\"}}}}\n")
}

/// Sets what the workflow templates' runs do, as the scenario says.
pub fn program_jobs(jobs: &Jobs, promotions: &Promotions) {
    for (template, runs) in &promotions.workflow_runs {
        let runs = runs
            .iter()
            .map(|phase| Job {
                phase: if phase == "Failed" {
                    "Failed"
                } else {
                    "Succeeded"
                },
                seconds: 5,
            })
            .collect();
        jobs.set_template_runs(template, runs);
    }
}

/// The promotion workload: creates the apps (after their first files are in Git), then
/// commits `releases` new versions to the trigger environment and applies health changes.
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    git: SharedGit,
    health: HealthOverrides,
    promotions: Promotions,
) {
    let booted = env.elapsed();
    let Ok(planned) = Planned::of(&promotions) else {
        return;
    };
    {
        let mut git = git.lock();
        if git.head(REPO).is_none() {
            let files = planned
                .environments
                .iter()
                .map(|e| (format!("envs/{e}/{VALUES_FILE}"), values("v1")))
                .collect();
            git.commit(
                REPO,
                "Platform Team <platform@acme.example>",
                "shop: v1 everywhere",
                env.unix_millis(),
                files,
            );
        }
    }
    let apps: Api<DynamicObject> =
        Api::namespaced_with(client, argocd::NAMESPACE, &argocd::application_resource());
    for environment in &planned.environments {
        let mut app =
            DynamicObject::new(&planned.app(environment), &argocd::application_resource())
                .within(argocd::NAMESPACE);
        app.data = json!({"spec": {"project": "default",
            "source": {"repoURL": REPO, "path": format!("envs/{environment}")},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": environment},
            "syncPolicy": {"automated": {}}}});
        // A restarted workload finds them there.
        loop {
            match apps.create(&PostParams::default(), &app).await {
                Ok(_) => break,
                Err(kube::Error::Api(e)) if e.code == 409 => break,
                Err(_) => env.sleep(Duration::from_secs(1)).await,
            }
        }
    }
    // Timed actions: releases and health changes, in time order.
    let mut actions: Vec<(Duration, Action)> = (0..promotions.releases)
        .map(|n| {
            (
                promotions.start_after + promotions.release_every * n,
                Action::Release(n + 2),
            )
        })
        .collect();
    actions.extend(promotions.health.iter().map(|h| {
        (
            h.at,
            Action::Health(planned.app(&h.environment), h.health.clone()),
        )
    }));
    actions.sort_by_key(|a| a.0);
    // A restarted workload does not replay what its earlier boot did.
    actions.retain(|(at, _)| *at >= booted);
    for (at, action) in actions {
        let now = env.elapsed();
        if at > now {
            env.sleep(at - now).await;
        }
        match action {
            Action::Release(version) => {
                let file = format!("envs/{}/{VALUES_FILE}", planned.trigger());
                let mut git = git.lock();
                let tag = format!("v{version}");
                if git.file_at(REPO, "main", &file).flatten() != Some(values(&tag)) {
                    git.commit(
                        REPO,
                        "Dev <dev@acme.example>",
                        &format!("shop {tag}"),
                        env.unix_millis(),
                        BTreeMap::from([(file, values(&tag))]),
                    );
                }
            }
            Action::Health(app, status) => health.set(&app, &status),
        }
    }
}

/// One timed action of the workload.
enum Action {
    /// Commit version `v<n>` to the trigger environment.
    Release(u32),
    /// Set an app's health.
    Health(String, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn promotions(objects: Vec<Value>) -> Promotions {
        let mut promotions: Promotions =
            serde_json::from_value(json!({"resources": "shop.yaml"})).expect("promotions");
        promotions.objects = objects;
        promotions
    }

    #[test]
    fn a_product_whose_templates_cannot_select_the_unlabelled_apps_is_refused() {
        let product = json!({"kind": "Product", "metadata": {"name": "shop"},
            "spec": {"promotionFlows": [{"name": "main"}]}});
        let flow = json!({"kind": "PromotionFlow", "metadata": {"name": "main"},
            "spec": {"triggerEnvironment": "dev", "steps": [{"environment": "prod"}]}});
        let template = |selector: Value| {
            json!({"kind": "PromotionTemplate", "metadata": {"name": "t"},
                "spec": {"applicationSourceSelector": selector, "priority": 0,
                    "promotion": {"values.json": {"jsonPaths": ["$.image.tag"]}}}})
        };
        let error = Planned::of(&promotions(vec![
            product.clone(),
            flow.clone(),
            template(json!({"matchLabels": {"product": "shop"}})),
        ]))
        .unwrap_err();
        assert!(
            error.contains("the simulated apps carry no labels"),
            "{error}"
        );
        // A selector every app matches serves them.
        let planned =
            Planned::of(&promotions(vec![product, flow, template(json!({}))])).expect("planned");
        let config = planned.orchestrator("acme-prod", "git:80", "gateway:8081");
        assert!(config.template_for(&config.targets["dev"]).is_some());
    }
}
