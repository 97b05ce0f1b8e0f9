//! The GitOps operator (`runtime::gitops_operator`) in a simulated world: two replicas
//! electing a leader through a Lease, the simulated API server, Argo CD, Git provider and
//! Argo Workflows. A PromotionTask runs a pre-action workflow, commits a promotion to the
//! staging app's file and verifies the app synced and healthy at it. The leader is crashed
//! the moment its promotion commit lands in Git, before it can record it: faithful's next
//! leader commits again (`promotion_commit_once` would fire), hardened's finds the commit
//! and makes none. Then the failures: a failed workflow, a Degraded app, a bad spec, and a
//! Git outage longer than faithful's ten polls.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use orrery_sim::env::SimEnv;
use orrery_sim::world::apiserver::Knobs;
use orrery_sim::world::argocd::{self, application_resource, HealthOverrides};
use orrery_sim::world::git::SharedGit;
use orrery_sim::world::workflows::{self, Job, Jobs};
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::observe::OperatorEvent;
use orrery_system::runtime::assembly::RuntimeConfig;
use orrery_system::runtime::gitops_operator::{self, promotion_task_resource};
use serde_json::{json, Value};

use crate::support::*;

const REPO: &str = "https://git.example/shop.git";
const TOKEN: &str = "argocd-sim-token";
const FILE: &str = "envs/staging/values.json";
const REPLICAS: [&str; 2] = ["operator-0", "operator-1"];

/// The world: API server, Argo CD (reconciling every 2 s), the Git provider on `git:80`,
/// the workflows controller, and `replicas` operator replicas.
struct Promotion {
    w: World,
    git: SharedGit,
    health: HealthOverrides,
    jobs: Jobs,
}

fn promotion_world(variant: Variant, replicas: usize) -> Promotion {
    let mut w = world(Knobs::default());
    let git = SharedGit::default();
    git.lock().commit(
        REPO,
        "dev",
        "initial",
        0,
        BTreeMap::from([(
            FILE.to_string(),
            "{\"image\": {\"tag\": \"v1\"}}\n".to_string(),
        )]),
    );
    let health = HealthOverrides::default();
    let config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(2),
        ..Default::default()
    };
    w.argocd(&git, &health, config, TOKEN);
    let (trace, host_git) = (w.trace.clone(), git.clone());
    w.sim.host("git", move || {
        let env = SimEnv::shared("git", SEED, trace.clone());
        let git = host_git.clone();
        async move {
            orrery_sim::world::git::serve(env, git, "0.0.0.0:80").await?;
            Ok(())
        }
    });
    let jobs = Jobs::default();
    let (trace, host_jobs) = (w.trace.clone(), jobs.clone());
    w.sim.host("workflows", move || {
        let env = SimEnv::shared("workflows", SEED, trace.clone());
        let run = workflows::run(
            env,
            KubeTarget::new("apiserver:6443"),
            host_jobs.clone(),
            Vec::new(),
        );
        async move {
            run.await;
            Ok(())
        }
    });
    for host in REPLICAS.iter().take(replicas) {
        let mut target = KubeTarget::new("apiserver:6443");
        target.namespace = argocd::NAMESPACE.into();
        let mut config =
            gitops_operator::Config::new(variant, target, host, "git:80", "argocd:8080", TOKEN);
        config.leader_elect = replicas > 1;
        let runtime = RuntimeConfig {
            operator: Some(config),
            ..RuntimeConfig::default()
        };
        boot_runtime(&mut w, host, runtime);
    }
    Promotion {
        w,
        git,
        health,
        jobs,
    }
}

fn app(name: &str, path: &str) -> DynamicObject {
    let mut app = DynamicObject::new(name, &application_resource()).within(argocd::NAMESPACE);
    app.data = json!({"spec": {"project": "default", "source": {"repoURL": REPO, "path": path},
        "syncPolicy": {"automated": {}}}});
    app
}

fn task(name: &str, steps: Value) -> DynamicObject {
    let mut task = DynamicObject::new(name, &promotion_task_resource()).within(argocd::NAMESPACE);
    task.data = json!({"spec": {"steps": steps}});
    task
}

/// Pre-action workflow → promote v2 to staging with a commit → verify staging.
fn release_steps() -> Value {
    json!([
        {"runWorkflow": {"workflowTemplateName": "smoke-test", "stage": "pre-action"}},
        {"promoteAppWithCommit": {"targetApplication": "shop-staging",
            "promotionValues": {"values.json": {"$.image.tag": "v2"}},
            "commitMessage": "promote shop v2 to staging"}},
        {"verifyApp": {"targetApplication": "shop-staging"}},
    ])
}

impl Promotion {
    /// Creates the staging app and the tasks from a client host.
    fn submit(&mut self, tasks: Vec<DynamicObject>) {
        let trace = self.w.trace.clone();
        self.w.sim.client("client", async move {
            let (_, client) = kube("client", &trace, Duration::from_secs(30));
            let apps: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), argocd::NAMESPACE, &application_resource());
            apps.create(&PostParams::default(), &app("shop-staging", "envs/staging"))
                .await?;
            let api: Api<DynamicObject> =
                Api::namespaced_with(client, argocd::NAMESPACE, &promotion_task_resource());
            for task in tasks {
                api.create(&PostParams::default(), &task).await?;
            }
            Ok(())
        });
    }

    /// Steps the world until `done` holds or `within` of simulated time passed.
    fn run_until(&mut self, within: Duration, mut done: impl FnMut(&Promotion) -> bool) -> bool {
        let deadline = self.w.sim.elapsed() + within;
        while self.w.sim.elapsed() < deadline {
            if done(self) {
                return true;
            }
            self.w.sim.step().expect("the world runs");
        }
        done(self)
    }

    /// The commits on `main` whose message names `task`'s step `step`.
    fn promotion_commits(&self, task: &str, step: usize) -> usize {
        let git = self.git.lock();
        let head = git.head(REPO).expect("main").sha.clone();
        let trailer = format!("Promotion-Task: argocd/{task}\nPromotion-Step: {step}\n");
        git.first_parent_range(REPO, "", &head)
            .iter()
            .filter(|c| c.message.contains(&trailer))
            .count()
    }

    /// `task`'s status as the API server holds it.
    fn status(&self, task: &str) -> Value {
        let kind = self.w.api.kind("promotiontasks").expect("served").clone();
        self.w
            .api
            .store()
            .objects_of(&kind)
            .into_iter()
            .find(|t| t["metadata"]["name"] == task)
            .map(|t| t["status"].clone())
            .unwrap_or(Value::Null)
    }

    fn phase(&self, task: &str) -> String {
        self.status(task)["phase"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    fn events(&self) -> Vec<(String, OperatorEvent)> {
        self.w
            .trace
            .events()
            .iter()
            .filter_map(|e| e.operator().map(|o| (e.line(), o.clone())))
            .collect()
    }

    /// The replica that became leader last.
    fn leader(&self) -> Option<String> {
        self.events().iter().rev().find_map(|(_, e)| match e {
            OperatorEvent::Leader { host } => Some(host.clone()),
            _ => None,
        })
    }
}

/// Runs the release with two replicas and crashes the leader as soon as its promotion
/// commit is in Git: (commits made for the step, the task's final status, events).
fn crash_mid_commit(variant: Variant) -> (usize, Value, Vec<(String, OperatorEvent)>) {
    let mut p = promotion_world(variant, 2);
    p.submit(vec![task("release-1-staging", release_steps())]);
    assert!(
        p.run_until(Duration::from_secs(120), |p| p
            .promotion_commits("release-1-staging", 1)
            >= 1),
        "{variant:?}: the promotion commit was made; events: {:?}",
        p.events()
    );
    let leader = p.leader().expect("a leader was elected");
    p.w.sim.crash(leader.as_str());
    let ended = p.run_until(Duration::from_secs(240), |p| {
        p.phase("release-1-staging") == "Succeeded" || p.phase("release-1-staging") == "Failed"
    });
    assert!(
        ended,
        "{variant:?}: the task ended: {}",
        p.status("release-1-staging")
    );
    let other = REPLICAS.iter().find(|r| **r != leader).unwrap();
    assert!(
        p.events()
            .iter()
            .any(|(_, e)| matches!(e, OperatorEvent::Leader { host } if host == other)),
        "{variant:?}: the other replica took over"
    );
    (
        p.promotion_commits("release-1-staging", 1),
        p.status("release-1-staging"),
        p.events(),
    )
}

#[test]
fn faithful_commits_a_promotion_twice_when_its_leader_dies_before_recording_it() {
    let (commits, status, _) = crash_mid_commit(Variant::Faithful);
    assert_eq!(status["phase"], "Succeeded", "{status}");
    assert_eq!(
        commits, 2,
        "the next leader re-ran the step it found unrecorded: {status}"
    );
    assert_eq!(status["steps"][0]["workflow"]["phase"], "Succeeded");
    assert_eq!(status["steps"][2]["appStatus"]["health"], "Healthy");
}

#[test]
fn hardened_commits_a_promotion_once_across_a_leader_failover() {
    let (commits, status, events) = crash_mid_commit(Variant::Hardened);
    assert_eq!(status["phase"], "Succeeded", "{status}");
    assert_eq!(commits, 1, "one promotion commit: {status}");
    assert!(
        events.iter().any(|(_, e)| matches!(
            e,
            OperatorEvent::Commit {
                deduplicated: true,
                step: 1,
                ..
            }
        )),
        "the new leader found the commit instead of making another"
    );
    assert_eq!(
        status["steps"][1]["commitInfo"]["commits"][0]["deduplicated"],
        true
    );
    assert!(status["steps"][1]["intent"]["key"].is_string(), "{status}");
    assert_eq!(status["steps"][2]["appStatus"]["sync"], "Synced");
}

/// A failed pre-action fails the task before anything is committed; a Degraded app fails
/// verification; a spec with two kinds in one step is refused naming the step.
#[test]
fn failed_workflows_degraded_apps_and_bad_specs_fail_the_task_with_their_reason() {
    for variant in [Variant::Faithful, Variant::Hardened] {
        let mut p = promotion_world(variant, 1);
        // faithful names its workflows with generateName: the failing job is the template's.
        p.jobs.set_template(
            "failing-check",
            vec![Job {
                phase: "Failed",
                seconds: 2,
            }],
        );
        p.health.set("shop-staging", "Degraded");
        let mut steps = release_steps();
        steps[0]["runWorkflow"]["workflowTemplateName"] = json!("failing-check");
        let broken = task("broken", steps);
        p.submit(vec![
            broken,
            task(
                "degraded",
                json!([
                    {"promoteAppWithCommit": {"targetApplication": "shop-staging",
                        "promotionValues": {"values.json": {"$.image.tag": "v3"}}}},
                    {"verifyApp": {"targetApplication": "shop-staging"}},
                ]),
            ),
            task(
                "two-kinds",
                json!([{"verifyApp": {"targetApplication": "a", "commitSha": "b"},
                "runWorkflow": {"workflowTemplateName": "t"}}]),
            ),
        ]);
        let ended = p.run_until(Duration::from_secs(180), |p| {
            ["broken", "degraded", "two-kinds"]
                .iter()
                .all(|t| p.phase(t) == "Failed")
        });
        assert!(
            ended,
            "{variant:?}: {} / {} / {}",
            p.status("broken"),
            p.status("degraded"),
            p.status("two-kinds")
        );
        let code = |t: &str| p.status(t)["failure"]["error"]["code"].clone();
        assert_eq!(code("broken"), "WorkflowFailed", "{variant:?}");
        assert_eq!(
            p.promotion_commits("broken", 1),
            0,
            "nothing promoted after a failed pre-action"
        );
        assert_eq!(code("degraded"), "AppDegraded", "{variant:?}");
        assert_eq!(code("two-kinds"), "InvalidSpec");
        assert_eq!(p.status("two-kinds")["failure"]["error"]["stepIndex"], 0);
        assert!(p.status("two-kinds")["failure"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exactly one of"));
    }
}

/// Git answers 503 for two minutes: faithful fails the promotion after ten polls
/// (MAX_RECONCILE_RETRIES), hardened waits the outage out and promotes.
#[test]
fn a_two_minute_git_outage_fails_faithfuls_promotion_and_not_hardeneds() {
    for (variant, expected) in [
        (Variant::Faithful, "Failed"),
        (Variant::Hardened, "Succeeded"),
    ] {
        let mut p = promotion_world(variant, 1);
        p.git.lock().serving.outage = true;
        p.submit(vec![task(
            "during-outage",
            json!([
                {"promoteAppWithCommit": {"targetApplication": "shop-staging",
                    "promotionValues": {"values.json": {"$.image.tag": "v2"}}}},
            ]),
        )]);
        p.run_until(Duration::from_secs(120), |_| false);
        p.git.lock().serving.outage = false;
        let ended = p.run_until(Duration::from_secs(120), |p| {
            ["Succeeded", "Failed"].contains(&p.phase("during-outage").as_str())
        });
        assert!(ended, "{variant:?}: {}", p.status("during-outage"));
        assert_eq!(
            p.phase("during-outage"),
            expected,
            "{variant:?}: {}",
            p.status("during-outage")
        );
        if variant == Variant::Faithful {
            assert_eq!(
                p.status("during-outage")["failure"]["error"]["code"],
                "RetriesExhausted"
            );
        }
    }
}

/// The platform terminates a task while its workflow runs (its release timed out or was
/// replaced): neither variant promotes after that, and the phase stays Terminated.
#[test]
fn a_terminated_task_is_not_promoted() {
    for variant in [Variant::Faithful, Variant::Hardened] {
        let mut p = promotion_world(variant, 1);
        p.jobs.set_template(
            "long-check",
            vec![Job {
                phase: "Succeeded",
                seconds: 60,
            }],
        );
        let mut steps = release_steps();
        steps[0]["runWorkflow"]["workflowTemplateName"] = json!("long-check");
        p.submit(vec![task("stopped", steps)]);
        assert!(
            p.run_until(Duration::from_secs(60), |p| p.status("stopped")["steps"][0]
                ["workflow"]["name"]
                .is_string()),
            "{variant:?}: the workflow was submitted: {}",
            p.status("stopped")
        );
        let trace = p.w.trace.clone();
        p.w.sim.client("platform", async move {
            let (_, client) = kube("platform", &trace, Duration::from_secs(30));
            let tasks: Api<DynamicObject> =
                Api::namespaced_with(client, argocd::NAMESPACE, &promotion_task_resource());
            tasks
                .patch_status(
                    "stopped",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"status": {"phase": "Terminated"}})),
                )
                .await?;
            Ok(())
        });
        p.run_until(Duration::from_secs(150), |_| false);
        assert_eq!(
            p.phase("stopped"),
            "Terminated",
            "{variant:?}: {}",
            p.status("stopped")
        );
        assert_eq!(
            p.promotion_commits("stopped", 1),
            0,
            "{variant:?}: nothing promoted"
        );
    }
}

/// A Helm chart's values file as charts write them: `## @param` comments, a comment after
/// the tag, quoted and plain strings, blank lines.
const HELM_VALUES: &str = "## @section Common parameters
replicaCount: 2

## Shop image
## @param image.tag Shop image tag (immutable tags are recommended)
image:
  registry: docker.io
  repository: 'acme/shop'
  tag: v1   # the release's version; promotions change it
  pullPolicy: IfNotPresent

podAnnotations: {}
";

/// A promotion into a Helm values file (YAML) commits the file byte for byte as it was but
/// for the promoted value's text — comments, key order, quoting and blank lines survive — in
/// both variants (issue 51; Kargo's `yaml-update` promises the same). Before, a YAML file
/// failed the step with `UnsupportedFile`.
#[test]
fn a_helm_values_file_is_promoted_in_place_keeping_every_other_byte() {
    const VALUES: &str = "envs/staging/values.yaml";
    for variant in [Variant::Faithful, Variant::Hardened] {
        let mut p = promotion_world(variant, 1);
        p.git.lock().commit(
            REPO,
            "dev",
            "helm values",
            0,
            BTreeMap::from([(VALUES.to_string(), HELM_VALUES.to_string())]),
        );
        p.submit(vec![task(
            "release-2-staging",
            json!([{"promoteAppWithCommit": {"targetApplication": "shop-staging",
                "promotionValues": {"values.yaml": {"$.image.tag": "1.10", "$.replicaCount": 3}},
                "commitMessage": "promote shop 1.10 to staging"}}]),
        )]);
        let ended = p.run_until(Duration::from_secs(120), |p| {
            p.phase("release-2-staging") == "Succeeded" || p.phase("release-2-staging") == "Failed"
        });
        let status = p.status("release-2-staging");
        assert!(
            ended && status["phase"] == "Succeeded",
            "{variant:?}: {status}"
        );
        let committed = p
            .git
            .lock()
            .file_at(REPO, "main", VALUES)
            .flatten()
            .expect("the values file is on main");
        // "1.10" is quoted: plain, a YAML reader would take it for the number 1.1.
        let expected = HELM_VALUES
            .replace("replicaCount: 2\n", "replicaCount: 3\n")
            .replace("  tag: v1   #", "  tag: \"1.10\"   #");
        assert_eq!(committed, expected, "{variant:?}");
        assert_eq!(
            p.promotion_commits("release-2-staging", 0),
            1,
            "{variant:?}"
        );
    }
}

/// Promotion hooks (issue 51 item 4): the shop flow with release-level hooks and staging's
/// own, two releases — the first succeeds, the second's staging smoke test fails. Each hook
/// due is handed to the runtime once as a PromotionTask of its own running its workflow
/// template, which the operator runs to the end; a hook never changes a release's outcome.
#[test]
fn promotion_hooks_run_once_each_when_a_release_or_an_environment_starts_succeeds_or_fails() {
    use orrery_sim::harness::runner;
    use orrery_sim::scenario;
    use orrery_system::observe::PromotionEvent;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/promotion-failover.yaml");
    let mut scenario = scenario::parse::load(&path).unwrap_or_else(|e| panic!("{e}"));
    scenario.faults.clear();
    let promotions = scenario.promotions.as_mut().expect("a promotion world");
    promotions.releases = 2;
    promotions.health.clear();
    for object in &mut promotions.objects {
        if object["kind"] == "PromotionFlow" {
            object["spec"]["hooks"] = json!({"onStart": "notify-start", "onSuccess": "notify-done", "onFail": "open-bug"});
            object["spec"]["steps"][0]["hooks"] =
                json!({"onStart": "staging-start", "onFail": "staging-bug"});
        }
    }
    let run = runner::run(&scenario, 1, Variant::Hardened);
    assert_eq!(run.harness_error, None);
    let events = run.trace.events();
    let hooks: Vec<(String, String, String)> = events
        .iter()
        .filter_map(|e| match e.promotion() {
            Some(PromotionEvent::Hook {
                release,
                hook,
                template,
                ..
            }) => Some((release.clone(), hook.clone(), template.clone())),
            _ => None,
        })
        .collect();
    let want = |r: &str, h: &str, t: &str| (r.to_string(), h.to_string(), t.to_string());
    assert_eq!(
        hooks,
        [
            want("shop-1", "release.onStart", "notify-start"),
            want("shop-1", "staging.onStart", "staging-start"),
            want("shop-1", "release.onSuccess", "notify-done"),
            want("shop-2", "release.onStart", "notify-start"),
            want("shop-2", "staging.onStart", "staging-start"),
            want("shop-2", "staging.onFail", "staging-bug"),
            want("shop-2", "release.onFail", "open-bug"),
        ]
    );
    // The operator ran every hook's task to the end, each once.
    let ran: Vec<String> = events
        .iter()
        .filter_map(|e| match e.operator() {
            Some(OperatorEvent::Task { task, phase, .. })
                if task.contains("-hook-") && phase == "Succeeded" =>
            {
                Some(task.rsplit('/').next().unwrap_or("").to_string())
            }
            _ => None,
        })
        .collect();
    let mut ran_sorted = ran.clone();
    ran_sorted.sort();
    ran_sorted.dedup();
    assert_eq!(
        ran_sorted.len(),
        ran.len(),
        "each hook task ran once: {ran:?}"
    );
    assert_eq!(ran.len(), 7, "{ran:?}");
    assert!(ran.contains(&"shop-2-hook-env-staging-onfail".to_string()));
    assert!(ran.contains(&"shop-1-hook-release-onsuccess".to_string()));
    // The releases ended as they would without hooks.
    let ends: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e.promotion() {
            Some(PromotionEvent::ReleaseEnd { release, phase, .. }) => {
                Some((release.clone(), phase.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("shop-1".to_string(), "Succeeded".to_string()),
            ("shop-2".to_string(), "Failed".to_string())
        ]
    );
}
