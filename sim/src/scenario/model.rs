//! The scenario model: what a file in `scenarios/` may say, with every default documented.
//!
//! Every struct denies unknown fields, so a misspelt key is an error that names the file,
//! line, column and field instead of a silently ignored setting.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::knobs::ApiServerKnobs as Knobs;

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short identifier; reports go to `reports/<name>/`.
    pub name: String,
    /// What the scenario shows and why.
    pub description: String,
    /// Seeds `cargo test` and `make reports` run. The first one is the report seed.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// Simulated time per turmoil step. Default 10 ms; smaller is finer and slower.
    #[serde(default = "default_tick", with = "super::duration")]
    pub tick: Duration,
    /// Hosts and what runs on them.
    pub topology: Topology,
    /// API server knobs at the start (and restored for the calm phase).
    #[serde(default)]
    pub apiserver: Knobs,
    /// The simulated Argo CD.
    #[serde(default)]
    pub argocd: ArgoCd,
    /// Load applied during the fault phase.
    #[serde(default)]
    pub workload: Workload,
    /// The probe component (a kube-rs reflector).
    #[serde(default)]
    pub probe: Probe,
    /// The application event reporter replicas (hosts with role `reporter`).
    #[serde(default)]
    pub reporter: Reporter,
    /// The platform's events path (host with role `platform`).
    #[serde(default)]
    pub platform: Platform,
    /// Tunnel traffic settings.
    #[serde(default)]
    pub tunnel: Tunnel,
    /// Promotions: a Product released through its flow (needs hosts with roles promotions,
    /// operator, appproxy, runtime, gateway, git, workflows). Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotions: Option<Promotions>,
    /// Restricted Git Sources: tenants' Git Sources the GitOps operator turns into Argo CD
    /// AppProjects, and changes to them over time (needs hosts with roles operator, argocd,
    /// git, workload and `argocd.projects`). Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restricted_sources: Option<RestrictedSources>,
    /// Many tenants on one platform (`world::tenants`): every `role: runtime` host is an
    /// account of its own (named after the host) with `tunnel.runtimes_per_host` runtimes
    /// `rt-0`, `rt-1`, … whose apps share their names with every other account's, and
    /// `role: adversary` hosts probe across accounts. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Tenants>,
    /// Hosted runtimes (`world::hosted`): each `role: vcluster` host is a tenant's virtual
    /// cluster on the shared host cluster. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted: Option<Hosted>,
    /// The Codefresh Runner (`world::runner`): builds made through the builds API of the
    /// `role: platform` host, run by the agent on the `role: runner` host in the `role:
    /// apiserver` host's cluster, where a stand-in runs their engine pods. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<Runner>,
    /// Timed faults, applied between simulation steps.
    #[serde(default)]
    pub faults: Vec<FaultStep>,
    /// Fault points in the system code switched on for this run (`orrery buggify-points`
    /// lists them); none by default, so scripted scenarios keep their traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buggify: Option<Buggify>,
    /// Faults and knob values each seed draws (a swarm family); see [`super::swarm`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swarm: Option<super::swarm::Swarm>,
    /// Length of the fault phase (workload and faults active).
    #[serde(with = "super::duration")]
    pub duration: Duration,
    /// Length of the calm phase: faults healed, crashed hosts restarted, workload stopped.
    #[serde(with = "super::duration")]
    pub calm: Duration,
    /// Invariants checked, with their parameters.
    pub invariants: Vec<Invariant>,
    /// Situations a sweep of this scenario must reach in at least one seed (see
    /// [`crate::explore::reach`]); `orrery sweep` exits 6 when one never was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<Reach>,
    /// The expected result per variant (`faithful`, `hardened`).
    pub expect: BTreeMap<Variant, Outcome>,
}

fn default_seeds() -> Vec<u64> {
    vec![1]
}

fn default_tick() -> Duration {
    Duration::from_millis(10)
}

pub use orrery_system::core::Variant;

/// The result classes of a run (TigerBeetle's VOPR distinguishes the same ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every invariant held.
    Pass,
    /// A safety invariant was violated (something that must never happen, happened).
    SafetyViolation,
    /// A liveness invariant did not hold by the end of the calm phase.
    LivenessTimeout,
    /// Two runs of one seed differed.
    Nondeterminism,
    /// The harness itself failed (bad scenario, a host crashed with an error, …).
    HarnessError,
    /// Only as an expectation, and only in swarm families: any result but
    /// `harness_error` and `nondeterminism` is as expected.
    Any,
}

impl Outcome {
    /// The snake_case name printed in results.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::SafetyViolation => "safety_violation",
            Outcome::LivenessTimeout => "liveness_timeout",
            Outcome::Nondeterminism => "nondeterminism",
            Outcome::HarnessError => "harness_error",
            Outcome::Any => "any",
        }
    }

    /// True when a run's `self` meets the expectation `expected`.
    pub fn meets(self, expected: Outcome) -> bool {
        match expected {
            Outcome::Any => !matches!(self, Outcome::HarnessError | Outcome::Nondeterminism),
            expected => self == expected,
        }
    }
}

/// A declared reach condition: a name (every variant) or `{condition, variants}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ReachSyntax", into = "ReachSyntax")]
pub struct Reach {
    /// The condition.
    pub condition: super::condition::Condition,
    /// The variants whose sweeps must reach it (empty: every variant).
    pub variants: Vec<Variant>,
}

impl Reach {
    /// True when a sweep of `variant` must reach this condition.
    pub fn applies_to(&self, variant: Variant) -> bool {
        self.variants.is_empty() || self.variants.contains(&variant)
    }
}

/// How a reach entry is written.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum ReachSyntax {
    Name(String),
    Scoped {
        condition: String,
        variants: Vec<Variant>,
    },
}

impl TryFrom<ReachSyntax> for Reach {
    type Error = super::condition::UnknownCondition;

    fn try_from(syntax: ReachSyntax) -> Result<Reach, Self::Error> {
        let (name, variants) = match syntax {
            ReachSyntax::Name(name) => (name, Vec::new()),
            ReachSyntax::Scoped {
                condition,
                variants,
            } => (condition, variants),
        };
        Ok(Reach {
            condition: name.parse()?,
            variants,
        })
    }
}

impl From<Reach> for ReachSyntax {
    fn from(reach: Reach) -> ReachSyntax {
        let name = reach.condition.name().to_string();
        if reach.variants.is_empty() {
            ReachSyntax::Name(name)
        } else {
            ReachSyntax::Scoped {
                condition: name,
                variants: reach.variants,
            }
        }
    }
}

/// Fault points switched on for a run: each evaluation of a listed point fires with
/// `probability`. A swarm family draws both per seed (`swarm: {buggify: ...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Buggify {
    /// Chance that one evaluation of a listed point fires, in `[0, 1]`.
    pub probability: f64,
    /// The points switched on.
    pub points: Vec<orrery_system::env::Point>,
}

/// The hosts of the simulated world.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Each host and its role; names are what faults refer to.
    pub hosts: Vec<Host>,
}

/// One simulated host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Host name (DNS name inside the simulation).
    pub name: String,
    /// What runs there.
    pub role: Role,
    /// More roles on the same host, e.g. `roles: [cache]` on a reporter: their components
    /// run in one process (one assembly per side), as containers of one pod would.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Role>,
}

impl Host {
    /// True when `role` runs on this host.
    pub fn has(&self, role: Role) -> bool {
        self.role == role || self.roles.contains(&role)
    }
}

/// What a host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The simulated Kubernetes API server (port 6443).
    Apiserver,
    /// Simulated Argo CD: application controller and server (port 8080), with the Git provider.
    Argocd,
    /// The workload generator: commits, app create/delete, health flaps, refreshes.
    Workload,
    /// A kube-rs reflector over Applications whose view is checked against the API server.
    Probe,
    /// One application event reporter replica; its ordinal is the host name's `-<n>` suffix.
    Reporter,
    /// The platform's events API, bus, handler and read model (port 8080).
    Platform,
    /// The reporters' shared dedup cache (Redis stand-in, port 6379).
    Cache,
    /// The platform's tunnel server (port 8443) and client gateway (port 8081).
    Gateway,
    /// A runtime reached through the tunnel: tunnel client, request routing service and an
    /// app-proxy stand-in that executes state-changing requests (port 3017).
    Runtime,
    /// Clients sending a steady mix of reads and state-changing requests through the gateway.
    Client,
    /// A destination (managed) cluster: its own simulated API server (port 6443), registered
    /// with Argo CD by a cluster Secret; the workload spreads apps over these hosts.
    Cluster,
    /// The simulated Argo Rollouts controller (`world::rollouts`).
    Rollouts,
    /// The simulated Argo Workflows controller (`world::workflows`).
    Workflows,
    /// The resource event reporter (`runtime::resource_reporter`): faithful runs the Argo
    /// Events EventSource and Sensor here, hardened its one process.
    Resources,
    /// The Argo Events EventBus the faithful resource reporter publishes to (port 4222);
    /// its stored messages survive its restarts (a file store).
    Eventbus,
    /// The change-revision (ACR) controller (`runtime::acr`), asking the `role: argocd`
    /// host's server for change revisions (hardened: and the Git provider, if served).
    Acr,
    /// The Git provider's HTTP API (port 80) and its push webhook deliveries
    /// (`world::git`).
    Git,
    /// The source server (`runtime::source_server`, port 8090), reading from the `role:
    /// argocd` host; with one in the world, reporters read app versions and revision
    /// metadata from it instead of from Argo CD.
    Sources,
    /// One GitOps operator replica (`runtime::gitops_operator`): PromotionTasks in the
    /// `argocd` namespace, the `role: git` host's API and the `role: argocd` host's server;
    /// several replicas elect a leader through a Lease.
    Operator,
    /// The runtime's app-proxy (`runtime::app_proxy`, port 3017) on a `role: runtime` host,
    /// in place of the tunnel world's stand-in: it creates and reads PromotionTasks for the
    /// platform (permissions from the `role: gateway` host).
    Appproxy,
    /// The platform's promotion orchestrator (`platform::promotions`): it reaches the
    /// runtime through the `role: gateway` host.
    Promotions,
    /// An adversarial client of a multi-tenant platform (`world::tenants`, with a
    /// `tenants:` section): it acts as users of every account and probes the others'.
    Adversary,
    /// The platform's database (`world::database`, port 5432): with one in the world, the
    /// `role: gateway` host keeps its runtime registry and audit log there, loads them when
    /// it starts, and is restarted when it stops (a crash of either loses only what was not
    /// committed).
    Database,
    /// The Codefresh Runner's agent (`runtime::runner`, with a `runner:` section), polling
    /// the `role: platform` host for its builds' tasks and creating their pods and volume
    /// claims in the `role: apiserver` host's cluster.
    Runner,
    /// One cronus replica (`platform::runner::cronus`, with a `runner.cron` section): it fires
    /// the cron triggers' ticks at the `role: platform` host's hermes; several hosts are an HA
    /// deployment.
    Cron,
    /// A hosted runtime's virtual cluster (`world::hosted`, with a `hosted:` section): its
    /// own API server (port 6443; its store outlives the host's crashes, as etcd on a
    /// volume), the tenant writing ConfigMaps and Secrets into it, and the control plane's
    /// vcluster syncer keeping them in namespace `vc-<host>` of the `role: apiserver` host
    /// (the shared host cluster). The host's name is the vcluster's. With
    /// `hosted.applications`, also the tenant's hosted runtime against that API server: its
    /// Argo CD, reporter and cache (so such a host takes none of those roles, nor workload;
    /// the tenant's workload runs on a host of its own, `<host>-developers`).
    Vcluster,
}

/// A Product released through its promotion flow (`promotions:`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Promotions {
    /// A multi-document YAML file (relative to the scenario file) with the Product, its
    /// PromotionFlow(s) and PromotionPolicies, as the shared configuration repository holds
    /// them. Each environment's app is `<product>-<environment>` with its files under
    /// `envs/<environment>/` (`values.json`: `{"image": {"tag": "v1"}}` at the start).
    pub resources: String,
    /// The first release: a new version committed to the trigger environment's file.
    #[serde(with = "super::duration", default = "Promotions::start_after")]
    pub start_after: Duration,
    /// A new version every this often after the first.
    #[serde(with = "super::duration", default = "Promotions::release_every")]
    pub release_every: Duration,
    /// How many releases.
    #[serde(default = "Promotions::releases")]
    pub releases: u32,
    /// Per workflow template, what its successive runs do (`Succeeded`, `Failed`); later
    /// runs succeed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workflow_runs: BTreeMap<String, Vec<String>>,
    /// Health changes of environments' apps (a Degraded staging after a sync).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<HealthStep>,
    /// The objects `resources` holds, read with the scenario file ([`super::parse::load`]).
    #[serde(skip)]
    pub objects: Vec<serde_json::Value>,
}

impl Promotions {
    fn start_after() -> Duration {
        Duration::from_secs(30)
    }
    fn release_every() -> Duration {
        Duration::from_secs(60)
    }
    fn releases() -> u32 {
        3
    }
}

/// Tenants' Restricted Git Sources (`restricted_sources:`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestrictedSources {
    /// A YAML file (relative to the scenario file) with `sources:` (the RestrictedGitSource
    /// objects the platform team applies in `argocd` at the start) and `repositories:`
    /// (repository URL → file → content: what the tenants' repositories hold, the
    /// Application manifests their Git Sources deploy among them).
    pub resources: String,
    /// Every this often each file named `deployment.yaml` in those repositories gets a new
    /// version (a commit per repository). Zero: never.
    #[serde(with = "super::duration", default = "RestrictedSources::commit_every")]
    pub commit_every: Duration,
    /// Changes to the sources over time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<SourceChange>,
    /// The sources `resources` holds, read with the scenario file.
    #[serde(skip)]
    pub sources: Vec<serde_json::Value>,
    /// The repositories `resources` holds.
    #[serde(skip)]
    pub repositories: BTreeMap<String, BTreeMap<String, String>>,
}

impl RestrictedSources {
    fn commit_every() -> Duration {
        Duration::from_secs(15)
    }
}

/// One change to a RestrictedGitSource at a time: fields of its `spec` replaced (`set`), or
/// the source deleted, or created again as the file first had it (`restore`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceChange {
    /// When.
    #[serde(with = "super::duration")]
    pub at: Duration,
    /// The source's name.
    pub source: String,
    /// `spec` fields to replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<serde_json::Map<String, serde_json::Value>>,
    /// Delete the source.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete: bool,
    /// Create the source again as `resources` has it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restore: bool,
}

/// One environment's app turning to a health at a time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthStep {
    /// When.
    #[serde(with = "super::duration")]
    pub at: Duration,
    /// The environment.
    pub environment: String,
    /// `Healthy`, `Degraded`, `Progressing`.
    pub health: String,
}

/// Simulated Argo CD settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArgoCd {
    /// The application controller reconciles every app this often. Default 10 s
    /// (Argo CD's default is 180 s; shorter keeps scenarios short).
    #[serde(with = "super::duration")]
    pub reconcile_every: Duration,
    /// Entries kept in `status.history`. Default 10, as Argo CD's `revisionHistoryLimit`.
    pub history_limit: usize,
    /// The controller's writes per second to the API server (`ARGOCD_K8S_CLIENT_QPS`).
    /// Default 50, as Argo CD.
    pub k8s_client_qps: u32,
    /// Its burst (`ARGOCD_K8S_CLIENT_BURST`). Default 100 (2 × QPS), as Argo CD.
    pub k8s_client_burst: u32,
    /// More namespaces Argo CD manages Applications in besides `argocd`
    /// (`application.namespaces`, "apps in any namespace"); the workload spreads apps over
    /// `argocd` and these, and the reporters watch them all. Default none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub application_namespaces: Vec<String>,
    /// How the runtime is installed next to Argo CD. `bundled` (default): the runtime
    /// installs Argo CD and is configured with its token. `existing`: Argo CD was there
    /// before; it issued the runtime's API token (`argocd-token-1`), which the runtime reads
    /// from Secret `argocd-token` (key `token`) in the `argocd` namespace, and the
    /// `rotate_token` fault can revoke it.
    #[serde(skip_serializing_if = "Install::is_bundled")]
    pub install: Install,
    /// How long a sync operation runs. Default 0: an auto-sync is folded into the refresh's
    /// one write and the `operation` field is never seen (every scenario before the ACR
    /// controller). Above 0 the operation is requested, runs, and is completed by a merge
    /// patch, as in Argo CD (see `world::argocd::controller`).
    #[serde(with = "super::duration", skip_serializing_if = "Duration::is_zero")]
    pub sync_duration: Duration,
    /// Whether AppProjects are enforced (`world::argocd::projects`): apps are checked
    /// against their project, and the built-in `default` project admits only apps in
    /// `argocd`. Default false: every app is in an unrestricted `default` project (the
    /// worlds before projects).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub projects: bool,
}

/// The runtime's installation mode with respect to Argo CD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Install {
    /// The runtime installs Argo CD and knows its token.
    #[default]
    Bundled,
    /// An Argo CD installed separately ("bring your own Argo CD"): its own token, in a Secret.
    Existing,
}

impl Install {
    fn is_bundled(&self) -> bool {
        *self == Install::Bundled
    }
}

impl Default for ArgoCd {
    fn default() -> Self {
        ArgoCd {
            reconcile_every: Duration::from_secs(10),
            history_limit: 10,
            k8s_client_qps: 50,
            k8s_client_burst: 100,
            application_namespaces: Vec::new(),
            install: Install::Bundled,
            sync_duration: Duration::ZERO,
            projects: false,
        }
    }
}

/// Load during the fault phase; every choice is drawn from the seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Workload {
    /// Applications created at the start. Default 50.
    pub applications: usize,
    /// Git repositories they are spread over. Default 5.
    pub repositories: usize,
    /// A commit to a random app's path this often. Default 2 s.
    #[serde(with = "super::duration")]
    pub commit_every: Duration,
    /// An app is deleted and another created this often. Default 15 s; 0 disables.
    #[serde(with = "super::duration")]
    pub churn_every: Duration,
    /// A random app's health flips (Degraded ↔ Healthy) this often. Default 5 s; 0 disables.
    #[serde(with = "super::duration")]
    pub health_flap_every: Duration,
    /// Every app is annotated for a hard refresh this often. Default 0 (disabled).
    #[serde(with = "super::duration")]
    pub refresh_every: Duration,
    /// App-of-apps: the first `parents` apps are parents whose Git path holds `children`
    /// Application manifests each (the next `parents × children` apps), which Argo CD
    /// creates when it syncs the parent. Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_of_apps: Option<AppOfApps>,
    /// Argo Rollouts load: Rollouts created at the start, new versions deployed with
    /// drawn analysis verdicts, an operator promoting and retrying (needs a
    /// `role: rollouts` host). Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollouts: Option<RolloutsLoad>,
    /// Argo Workflows load: workflows submitted with drawn step outcomes (needs a
    /// `role: workflows` host). Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflows: Option<WorkflowsLoad>,
    /// A monorepo: the apps share one repository under `paths` team directories, carry the
    /// `manifest-generate-paths` annotation, and a commit storm touches random subsets of
    /// the directories (needs `repositories: 1`). Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monorepo: Option<Monorepo>,
    /// Replay a workload trace recorded from a real cluster (`orrery record`) instead of the
    /// generated changes: the apps it starts with are created (`applications` is their
    /// number), then its changes happen at their recorded times divided by `speed`; the
    /// `*_every` generators are off. A path relative to the scenario file. Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
    /// How many times faster than recorded the replay runs. Default 1.
    #[serde(skip_serializing_if = "is_one")]
    pub speed: f64,
    /// The trace `replay` names, read with the scenario file ([`super::parse::load`]).
    #[serde(skip)]
    pub trace: Option<std::sync::Arc<super::trace::Trace>>,
}

fn is_one(speed: &f64) -> bool {
    *speed == 1.0
}

/// A monorepo and its commit storm (see `world::workload`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Monorepo {
    /// Team directories (`teams/team-NNN`); app `i` lives in directory `i % paths`, with
    /// the annotation `.`. Default 100.
    pub paths: usize,
    /// Every n-th app's annotation also names `/platform/base` (an absolute path). Default
    /// 10; 0: none.
    pub shared_every: usize,
    /// A storm commit touches 1 to `touch` directories, drawn. Default 3.
    pub touch: usize,
    /// One in `shared_touch` storm commits also touches `platform/base`. Default 10; 0:
    /// never.
    pub shared_touch: usize,
    /// A storm commit this often. Default 200 ms.
    #[serde(with = "super::duration")]
    pub commit_every: Duration,
    /// The storm starts this long after the apps were created (their first syncs happen
    /// at the initial commit). Default 90 s.
    #[serde(with = "super::duration")]
    pub start_after: Duration,
}

impl Default for Monorepo {
    fn default() -> Self {
        Monorepo {
            paths: 100,
            shared_every: 10,
            touch: 3,
            shared_touch: 10,
            commit_every: Duration::from_millis(200),
            start_after: Duration::from_secs(90),
        }
    }
}

/// Rollouts in the workload (see `world::rollouts::workload`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutsLoad {
    /// Rollouts created at the start. Default 20.
    pub count: usize,
    /// Their namespace. Default `rollouts`.
    pub namespace: String,
    /// Every n-th Rollout is blue-green (manual promotion, pre-promotion analysis), the
    /// others canaries. Default 4; 0: canaries only.
    pub blue_green_every: usize,
    /// Pods per Rollout. Default 4.
    pub replicas: i32,
    /// A new version of a random Rollout this often. Default 10 s; 0 disables.
    #[serde(with = "super::duration")]
    pub deploy_every: Duration,
    /// Weights of what analysing a new version finds (drawn per version).
    pub verdicts: VerdictWeights,
    /// The operator promotes a Rollout paused this long (a pause without duration, a
    /// blue-green pause, an inconclusive analysis). Default 30 s; 0: never.
    #[serde(with = "super::duration")]
    pub promote_after: Duration,
    /// The operator retries a Rollout aborted this long ago. Default 0: never.
    #[serde(with = "super::duration")]
    pub retry_after: Duration,
}

impl Default for RolloutsLoad {
    fn default() -> Self {
        RolloutsLoad {
            count: 20,
            namespace: "rollouts".into(),
            blue_green_every: 4,
            replicas: 4,
            deploy_every: Duration::from_secs(10),
            verdicts: VerdictWeights::default(),
            promote_after: Duration::from_secs(30),
            retry_after: Duration::ZERO,
        }
    }
}

/// Relative weights of analysis verdicts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerdictWeights {
    /// The version is fine. Default 80.
    pub good: u32,
    /// Its success rate is too low (the analysis fails). Default 10.
    pub bad: u32,
    /// Between the conditions (inconclusive). Default 5.
    pub unsure: u32,
    /// The metrics provider does not answer (the analysis errors). Default 0.
    pub unreachable: u32,
    /// Its pods never become ready. Default 5.
    pub crash_loop: u32,
}

impl Default for VerdictWeights {
    fn default() -> Self {
        VerdictWeights {
            good: 80,
            bad: 10,
            unsure: 5,
            unreachable: 0,
            crash_loop: 5,
        }
    }
}

/// Workflows in the workload (see `world::workflows::workload`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkflowsLoad {
    /// Their namespace. Default `workflows`.
    pub namespace: String,
    /// A workflow is submitted this often. Default 5 s; 0 disables.
    #[serde(with = "super::duration")]
    pub submit_every: Duration,
    /// Sequential steps per workflow. Default 3.
    pub steps: usize,
    /// Percent of step attempts that fail (exit code 1; retried). Default 10.
    pub fail_percent: u32,
    /// Retries per step (`retryStrategy.limit`). Default 1.
    pub retry_limit: u32,
    /// Longest a step runs, in seconds (drawn from 1 up to this). Default 20.
    pub max_step_seconds: u64,
    /// `ttlStrategy.secondsAfterCompletion`. Default 120; 0: no TTL.
    pub ttl_seconds: u64,
    /// Argo Workflows is the runtime chart's own, so its `workflowDefaults` carry what the
    /// runtime sets (hardened: the resource reporter's finalizer). Default true; false: an
    /// existing Argo Workflows the runtime does not configure.
    pub runtime_defaults: bool,
}

impl Default for WorkflowsLoad {
    fn default() -> Self {
        WorkflowsLoad {
            namespace: "workflows".into(),
            submit_every: Duration::from_secs(5),
            steps: 3,
            fail_percent: 10,
            retry_limit: 1,
            max_step_seconds: 20,
            ttl_seconds: 120,
            runtime_defaults: true,
        }
    }
}

/// App-of-apps in the workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppOfApps {
    /// Parent apps.
    pub parents: usize,
    /// Children per parent.
    pub children: usize,
}

impl AppOfApps {
    /// The parent of app `index`, if it is a child.
    pub fn parent_of(&self, index: usize) -> Option<usize> {
        (index >= self.parents && index < self.parents + self.parents * self.children)
            .then(|| (index - self.parents) / self.children.max(1))
    }

    /// The children of app `index`, if it is a parent.
    pub fn children_of(&self, index: usize) -> std::ops::Range<usize> {
        if index < self.parents {
            let first = self.parents + index * self.children;
            first..first + self.children
        } else {
            0..0
        }
    }
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            applications: 50,
            repositories: 5,
            commit_every: Duration::from_secs(2),
            churn_every: Duration::from_secs(15),
            health_flap_every: Duration::from_secs(5),
            refresh_every: Duration::ZERO,
            app_of_apps: None,
            rollouts: None,
            workflows: None,
            monorepo: None,
            replay: None,
            speed: 1.0,
            trace: None,
        }
    }
}

/// The probe's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Probe {
    /// Read deadline on its API connections. Default 30 s.
    #[serde(with = "super::duration")]
    pub read_idle: Duration,
    /// `timeoutSeconds` of its watches. Default 290 s, kube-rs's default.
    pub watch_timeout_seconds: u32,
    /// List at `resourceVersion=0` (served from the API server's watch cache, see the
    /// `apiserver.stale_list_lag` knob) instead of kube-rs's default quorum read. Default false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub list_from_cache: bool,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            read_idle: Duration::from_secs(30),
            watch_timeout_seconds: 290,
            list_from_cache: false,
        }
    }
}

/// Application event reporter settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Reporter {
    /// Replicas running at the start (`EVENT_REPORTER_REPLICAS`); reporter hosts with a
    /// higher ordinal start stopped. Default: every reporter host.
    pub replicas: Option<u32>,
    /// hardened: workers per replica. Default 8.
    pub workers: usize,
    /// Queue capacity per replica. Default 1,000, as the real reporter.
    pub queue_capacity: usize,
    /// hardened: lease duration. Default 15 s.
    #[serde(with = "super::duration")]
    pub lease_duration: Duration,
    /// hardened: lease renewal period. Default 5 s.
    #[serde(with = "super::duration")]
    pub lease_renew: Duration,
    /// The per-app rate limiter (`RATE_LIMITER_*`); absent = off, the real default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limiter: Option<RateLimiter>,
    /// hardened: resource events of one app in flight at once. Default 10.
    pub resource_concurrency: usize,
    /// Runs this variant's reporter whatever the run's variant: a runtime still on an
    /// older version (`faithful`) beside a platform of the run's variant. Default: the
    /// run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<Variant>,
}

/// `RATE_LIMITER_BUCKET_SIZE`, `RATE_LIMITER_DURATION`, `RATE_LIMITER_LEARNING_MODE_ENABLED`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimiter {
    /// Events per app per window.
    pub bucket_size: u64,
    /// Window length (fixed window per app, starting at its first event).
    #[serde(with = "super::duration")]
    pub period: Duration,
    /// Count limited events but still enqueue them.
    #[serde(default)]
    pub learning_mode: bool,
}

impl Default for Reporter {
    fn default() -> Self {
        Reporter {
            replicas: None,
            workers: 8,
            queue_capacity: 1_000,
            lease_duration: Duration::from_secs(15),
            lease_renew: Duration::from_secs(5),
            rate_limiter: None,
            resource_concurrency: 10,
            variant: None,
        }
    }
}

/// Platform settings at the start (and restored for the calm phase).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Platform {
    /// Added before the events API answers (a slow gateway).
    #[serde(with = "super::duration")]
    pub api_latency: Duration,
    /// Time the event handler spends per event.
    #[serde(with = "super::duration")]
    pub handler_delay: Duration,
    /// Event bus capacity. Default 10,000.
    pub bus_capacity: usize,
    /// Run the runtime monitor beside the gateway (what the platform shows about each
    /// runtime's health). Default off: it probes every runtime through its tunnel.
    pub monitor: bool,
    /// hardened: the cron executor's anti-entropy job on the `role: gateway` host (which
    /// must have `role: platform` too) lists every runtime's Applications through its
    /// app-proxy this often and sends again what the read model missed
    /// (`platform::anti_entropy`; faithful runs none). Default: not run.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub anti_entropy_every: Option<Duration>,
}

impl Default for Platform {
    fn default() -> Self {
        Platform {
            api_latency: Duration::ZERO,
            handler_delay: Duration::ZERO,
            bus_capacity: 10_000,
            monitor: false,
            anti_entropy_every: None,
        }
    }
}

/// Tunnel traffic and timing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tunnel {
    /// Each client sends a request this often, alternating reads and state-changing writes.
    /// Default 500 ms.
    #[serde(with = "super::duration")]
    pub request_every: Duration,
    /// How long the runtime takes to execute a write (so some are in flight at a drop).
    /// Default 300 ms.
    #[serde(with = "super::duration")]
    pub execute_delay: Duration,
    /// A client retries a write whose outcome it does not know (502/503/504, no answer)
    /// after this long, with the same idempotency key. Default 2 s.
    #[serde(with = "super::duration")]
    pub retry_after: Duration,
    /// Attempts per write, the first included. Default 6.
    pub write_attempts: u32,
    /// Runtimes (tunnel clients) per runtime host, for fleets. Default 1.
    pub runtimes_per_host: u32,
    /// Tunnel server work per registration, one at a time. Default 0.
    #[serde(with = "super::duration")]
    pub registration_cost: Duration,
    /// Registrations that may wait for that work; more are refused with 503. Default 1024.
    pub max_pending_registrations: usize,
    /// A fleet's runtimes are installed over this long: on each runtime host, the i-th of n
    /// tunnel clients starts at `start_spread · i / n`. Default 0 (all at once).
    #[serde(with = "super::duration")]
    pub start_spread: Duration,
}

impl Default for Tunnel {
    fn default() -> Self {
        Tunnel {
            request_every: Duration::from_millis(500),
            execute_delay: Duration::from_millis(300),
            retry_after: Duration::from_secs(2),
            write_attempts: 6,
            runtimes_per_host: 1,
            registration_cost: Duration::ZERO,
            max_pending_registrations: 1024,
            start_spread: Duration::ZERO,
        }
    }
}

/// A multi-tenant platform (`tenants:`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tenants {
    /// Applications each runtime reports (`web`, `api`, `db`, then `app-<n>`): the same
    /// names in every account. Default 3.
    pub apps_per_runtime: u32,
    /// Each adversary host sends one probe this often. Default 250 ms.
    #[serde(with = "super::duration")]
    pub probe_every: Duration,
    /// Each account's runtimes report their apps again this often (new resourceVersions,
    /// one event of them claiming another account in its payload). Default 20 s.
    #[serde(with = "super::duration")]
    pub report_every: Duration,
    /// Each adversary host also registers a runtime of its own in an account (as that
    /// account's admin, `createRuntime`) this often, again and again under three names, so
    /// tokens are minted and rotated while the platform runs. Default none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub register_every: Option<Duration>,
    /// Each account's last runtime (`rt-<n-1>`, with two or more runtimes per account) is
    /// in ingress mode: registered with its host's router ingress (port 8088) and no
    /// tunnel, so the gateway reaches it directly (research §2: access by tunnel or
    /// ingress). Adversaries then aim half their own writes and foreign paths at it.
    /// Default false.
    pub ingress: bool,
}

impl Default for Tenants {
    fn default() -> Self {
        Tenants {
            apps_per_runtime: 3,
            probe_every: Duration::from_millis(250),
            report_every: Duration::from_secs(20),
            register_every: None,
            ingress: false,
        }
    }
}

/// The Codefresh Runner's load and link (`runner:`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Runner {
    /// Builds made during the fault phase, one every `every` from its start. Default 20.
    pub builds: u32,
    /// Time between two builds. Default 5 s.
    #[serde(with = "super::duration")]
    pub every: Duration,
    /// Each build's steps, run by the engine stand-in. Default one 20 s step exiting 0.
    pub steps: Vec<RunnerStep>,
    /// Percent of the agent's requests the link in front of the platform answers 502
    /// before the platform saw them, during the fault phase. Default 0.
    pub lost_requests: u8,
    /// Percent of the agent's requests handled by the platform whose answer the link loses
    /// (502), during the fault phase. Default 0.
    pub lost_answers: u8,
    /// The platform hands a task out again when its status has not come this long after
    /// (the redelivery rule is not public, `runner-research.md` §6.1). Default 60 s.
    #[serde(with = "super::duration")]
    pub redeliver_after: Duration,
    /// The pipeline's concurrency limit (`pipelines.md`: builds admitted at once; 0 is
    /// maintenance mode). Default: unlimited.
    pub concurrency: Option<u32>,
    /// The pipeline's policy "terminate previous builds from the same branch". Default false.
    pub terminate_previous: bool,
    /// With `terminate_previous`: only for a new build whose branch matches this regular
    /// expression. Default: every branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminate_branch_pattern: Option<String>,
    /// The pipeline's policy "once a build is created, terminate all other running builds".
    /// Default false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub terminate_all: bool,
    /// Builds of one branch admitted at once (each pipeline's "branch concurrency").
    /// Default: unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_concurrency: Option<u32>,
    /// Builds of every pipeline admitted at once (the account's plan). Default: unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_concurrency: Option<u32>,
    /// Builds one trigger started admitted at once (each pipeline's "trigger
    /// concurrency"). Default: unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_concurrency: Option<u32>,
    /// Triggers the builds the builds API makes cycle through (`trigger-0`, `trigger-1`,
    /// …; 0: they name none). A cron tick's build names its cron trigger. Default 0.
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub triggers: u32,
    /// Pipelines the builds cycle through, each with the limits and policies above
    /// (`demo/build` for one; `demo/build-0`, `demo/build-1`, … for more). Default 1.
    #[serde(skip_serializing_if = "is_one_u32")]
    pub pipelines: u32,
    /// Builds made at the same moment at each slot (a push that triggers several). Default 1.
    pub burst: u32,
    /// Branches the builds cycle through (`branch-0`, `branch-1`, …). Default 1.
    pub branches: u32,
    /// Builds are asked for by Git webhook deliveries (hermes) instead of the builds API.
    /// Default: the builds API.
    pub webhook: Option<WebhookTrigger>,
    /// Cron triggers fired by the `role: cron` hosts (cronus replicas), each tick a build.
    /// Default: none.
    pub cron: Option<CronTriggers>,
    /// The dind volume provisioner and the local volumes cleaner run in the cluster, and
    /// builds wait for their claims to be bound. Default: none (claims are not bound).
    pub volumes: Option<RunnerVolumes>,
    /// The engine pod's memory limit in MiB: what the log lines it has not sent yet may
    /// take. Default 2048 (the chart's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_memory_mib: Option<u64>,
    /// The UI's requests into the customer's network: `proxy` agent tasks committing files
    /// to the `role: git` host's provider through the agents. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<RunnerProxy>,
    /// Pods per agent (`runner.replicasCount`, chart values L67): every `replicas`
    /// consecutive `role: runner` hosts are the replicas of one agent, polling with the
    /// same `AGENT_ID` (the first one's name). Default 1.
    #[serde(skip_serializing_if = "is_one_u32")]
    pub replicas: u32,
}

/// `runner.proxy`: the UI asks the platform for `requests` proxy tasks, one every `every`,
/// each a commit of its own file (`proxy/r<n>.txt`) on the Git provider behind the firewall.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerProxy {
    /// Proxy tasks asked for during the fault phase. Default 20.
    pub requests: u32,
    /// Time between two. Default 5 s.
    #[serde(with = "super::duration")]
    pub every: Duration,
    /// Every `stale_every`-th request was made from a stale view of its file: it names a
    /// blob SHA the file does not have, and the provider refuses it with 409 (0: none).
    /// Default 0.
    pub stale_every: u32,
}

impl Default for RunnerProxy {
    fn default() -> Self {
        RunnerProxy {
            requests: 20,
            every: Duration::from_secs(5),
            stale_every: 0,
        }
    }
}

fn is_one_u32(n: &u32) -> bool {
    *n == 1
}

/// `runner.volumes`: the node the builds' dind volumes live on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerVolumes {
    /// The size of the node's volume directory, in GiB; each volume takes 16. Default 80.
    pub node_gib: u64,
    /// The cleaner's `KB_USAGE_THRESHOLD`, percent. Default 80.
    pub threshold_pct: u64,
    /// The external volumes cleaner's `RETENTION_DAYS` (it runs every 10 minutes): a
    /// released volume last used longer ago is deleted. Default 4 days.
    #[serde(
        with = "super::duration",
        skip_serializing_if = "RunnerVolumes::default_retention"
    )]
    pub retention: Duration,
}

impl RunnerVolumes {
    fn default_retention(d: &Duration) -> bool {
        *d == orrery_system::runtime::runner::volumes::RETENTION_DAYS
    }
}

impl Default for RunnerVolumes {
    fn default() -> Self {
        RunnerVolumes {
            node_gib: 80,
            threshold_pct: 80,
            retention: orrery_system::runtime::runner::volumes::RETENTION_DAYS,
        }
    }
}

/// The cron triggers of `runner.cron`: `cron-0`, `cron-1`, … each a build of the pipeline
/// every `every`, on multiples of it since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CronTriggers {
    /// Time between two ticks; at least 60 s (cronus' `LIMIT`). Default 60 s.
    #[serde(with = "super::duration")]
    pub every: Duration,
    /// How many triggers. Default 1.
    pub triggers: u32,
    /// hardened: a tick found owed later than this after it was due is reported missed
    /// instead of run. Default 10 min.
    #[serde(with = "super::duration")]
    pub catch_up: Duration,
}

impl Default for CronTriggers {
    fn default() -> Self {
        CronTriggers {
            every: Duration::from_secs(60),
            triggers: 1,
            catch_up: Duration::from_secs(600),
        }
    }
}

/// A Git provider delivering webhooks to hermes (`runner.webhook`): each build is one
/// delivery, sent again with the same id when its answer does not come in time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookTrigger {
    /// How long the provider waits for an answer. Default 10 s (GitHub's).
    #[serde(with = "super::duration")]
    pub timeout: Duration,
    /// Deliveries of one event at most. Default 3.
    pub attempts: u32,
    /// How long hermes takes to answer (resolving the trigger, asking for the build).
    /// Default 0 s.
    #[serde(with = "super::duration")]
    pub delay: Duration,
}

impl Default for WebhookTrigger {
    fn default() -> Self {
        WebhookTrigger {
            timeout: Duration::from_secs(10),
            attempts: 3,
            delay: Duration::ZERO,
        }
    }
}

impl Default for Runner {
    fn default() -> Self {
        Runner {
            builds: 20,
            every: Duration::from_secs(5),
            steps: vec![RunnerStep {
                duration: Duration::from_secs(20),
                exit_code: 0,
                lines: 0,
                line_bytes: 0,
            }],
            lost_requests: 0,
            lost_answers: 0,
            redeliver_after: Duration::from_secs(60),
            concurrency: None,
            terminate_previous: false,
            terminate_branch_pattern: None,
            terminate_all: false,
            branch_concurrency: None,
            account_concurrency: None,
            trigger_concurrency: None,
            triggers: 0,
            pipelines: 1,
            burst: 1,
            branches: 1,
            webhook: None,
            cron: None,
            volumes: None,
            engine_memory_mib: None,
            proxy: None,
            replicas: 1,
        }
    }
}

/// One step of the Runner's pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerStep {
    /// How long it runs.
    #[serde(with = "super::duration")]
    pub duration: Duration,
    /// How it exits. Default 0.
    #[serde(default)]
    pub exit_code: i32,
    /// Lines of log it writes, evenly over its time (sent by the engine to the platform and
    /// followed over the broadcaster's WebSocket). Default 0.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub lines: u32,
    /// Each line's length in bytes (1 to 65536). Default 80.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub line_bytes: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// Hosted runtimes' virtual clusters (`hosted:`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hosted {
    /// Each tenant writes (creates or updates 4 in 5, deletes 1 in 5) one of its
    /// ConfigMaps or Secrets this often, until the calm phase. Default 1 s.
    #[serde(with = "super::duration")]
    pub write_every: Duration,
    /// Names per namespace each tenant draws from (`db`, `web`, `api`, then `cm-<n>`) in
    /// its namespaces `prod`, `team`, `staging`. Default 4.
    pub names: u32,
    /// Each tenant also keeps Secret `db-x-team` in namespace `prod` and Secret `db` in
    /// namespace `team-x-prod` (names any tenant may choose, which vcluster's naming maps
    /// to one host name), created in that order and updated, never deleted. Default true.
    pub colliding: bool,
    /// Each tenant's hosted runtime, on its vcluster host: its Argo CD, and its runtime's
    /// application event reporter and cache, reporting to the platform (a `role: platform`
    /// host) with the token of runtime `hosted` of account `<vcluster>`; and a workload of
    /// this many Applications in its virtual cluster (its own Git), run from a host of its
    /// own (`<vcluster>-developers`). 0 (the default) runs no runtime, only the tenant's
    /// writes.
    pub applications: usize,
}

impl Hosted {
    /// Whether each tenant also runs its hosted runtime (`applications` above 0).
    pub fn runs_runtimes(&self) -> bool {
        self.applications > 0
    }
}

impl Default for Hosted {
    fn default() -> Self {
        Hosted {
            write_every: Duration::from_secs(1),
            names: 4,
            colliding: true,
            applications: 0,
        }
    }
}

/// A rolling change of the reporter replica count (a StatefulSet update): new pods start
/// first (or surplus pods stop, highest ordinal first), then the remaining pods restart one
/// by one, highest ordinal first, `every` apart. Old and new counts coexist meanwhile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    /// The new replica count.
    pub replicas: u32,
    /// Time between two pod changes. Default 10 s.
    #[serde(default = "default_scale_every", with = "super::duration")]
    pub every: Duration,
}

fn default_scale_every() -> Duration {
    Duration::from_secs(10)
}

/// Platform knob changes (only the fields given).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformChange {
    /// New events API latency.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub api_latency: Option<Duration>,
    /// New handler delay per event.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub handler_delay: Option<Duration>,
    /// An events API outage: `percent` of POSTs answered `status` unread (`percent: 0`
    /// ends it; the calm phase ends it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject: Option<Reject>,
    /// The link in front of the Runner's agent API goes silent (`true`): it takes requests
    /// and never answers nor closes them, as a proxy or NAT that lost the connection's other
    /// side; `false` ends it for new requests (one already taken stays unanswered). The
    /// calm phase ends it too. Needs a `runner:` section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_silent: Option<bool>,
}

/// Answers the events API gives instead of handling a POST.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reject {
    /// The HTTP status (a 5xx outage, 429 from a rate limiter, 404 from a misrouted
    /// ingress).
    pub status: u16,
    /// Share of POSTs answered so, in percent. Default 100.
    #[serde(default = "Reject::all")]
    pub percent: u32,
}

impl Reject {
    fn all() -> u32 {
        100
    }
}

/// One timed fault. Exactly one action per step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultStep {
    /// When, from the start of the run.
    #[serde(with = "super::duration")]
    pub at: Duration,
    /// Cut the link between two hosts (both directions; silent, like turmoil's partitions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<[String; 2]>,
    /// Heal the link between two hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<[String; 2]>,
    /// Crash a host: its software stops, its connections die.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<String>,
    /// Restart a crashed host's software.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
    /// Change the latency of a link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyChange>,
    /// Change API server knobs (only the fields given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apiserver: Option<super::knobs::ApiServerPatch>,
    /// Change the reporter replica count with a rolling restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<Scale>,
    /// Change platform knobs (a slow platform).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformChange>,
    /// Flush a `role: cache` host: every key gone at once (`FLUSHALL`, or Redis restarted
    /// without persistence while its clients kept their connections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush: Option<String>,
    /// Remove a `role: cluster` host's registration from Argo CD (its cluster Secret is
    /// deleted) while apps still target it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unregister: Option<String>,
    /// Revoke the runtime's Argo CD token (it expired, or an admin regenerated it): Argo CD
    /// answers the old one with 401 at once; the new one reaches Secret `argocd-token`
    /// `secret_after` later. Needs `argocd.install: existing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate_token: Option<RotateToken>,
    /// Change how the Git provider serves fetches (throttled, down); the calm phase ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitChange>,
}

/// How the Git provider serves fetches from now on (only the fields given change).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitChange {
    /// Every fetch takes this long (a rate-limited provider whose clients wait for the
    /// reset); `0s` ends it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub latency: Option<Duration>,
    /// Every fetch fails (a provider outage); `false` ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outage: Option<bool>,
    /// The provider's HTTP API answers at most this many calls a minute, then 429 until
    /// the minute is over; `0` ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
    /// The provider's HTTP API answers at most this many calls an hour, then 403 "API rate
    /// limit exceeded" until the hour is over (GitHub's primary limit); `0` ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hourly_limit: Option<u32>,
    /// Commits through the API are made but answered 502 (the push went through, the
    /// answer was lost behind a failing proxy); `false` ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_commit_answers: Option<bool>,
}

/// A rotation of the runtime's Argo CD token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateToken {
    /// The `role: argocd` host whose token is revoked.
    pub argocd: String,
    /// Time until the operator puts the new token into the Secret.
    #[serde(with = "super::duration")]
    pub secret_after: Duration,
}

/// A latency change on one link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyChange {
    /// The two hosts of the link.
    pub between: [String; 2],
    /// New maximum one-way message latency.
    #[serde(with = "super::duration")]
    pub max: Duration,
}

/// An invariant and its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invariant {
    /// Which checker (see `checkers`).
    pub name: String,
    /// Checker parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, serde_json::Value>,
}

/// The invariant names a scenario may use (each has a checker in `checkers`).
pub const KNOWN_INVARIANTS: [&str; 40] = [
    "probe_matches_apiserver",
    "probe_rv_monotonic",
    "platform_converges",
    "single_owner",
    "requests_answered",
    "executed_at_most_once",
    "tunnel_recovers",
    "all_reconnect",
    "no_app_stuck_unknown",
    "no_stale_read_errors",
    "platform_shows_rollouts",
    "platform_never_older",
    "platform_resources_never_older",
    "workflow_phases_reported",
    "change_revision_correct",
    "no_spurious_change",
    "app_version_reported",
    "change_revision_reported",
    "promotion_commit_once",
    "promotion_ordered",
    "promotion_terminates",
    "restricted_sources",
    "restricted_source_applied",
    "runtime_health_shown",
    "no_acknowledged_event_lost",
    "no_acknowledged_write_lost",
    "tenant_isolation",
    "vcluster_isolation",
    "hosted_runtimes_converge",
    "runner_build_outcome",
    "runner_builds_finish",
    "runner_no_orphans",
    "runner_concurrency_limit",
    "runner_trigger_once",
    "runner_cron_once",
    "runner_stall_detected",
    "runner_volume_kept",
    "runner_engine_memory",
    "runner_logs_complete",
    "runner_proxy_truthful",
];

/// Checks an invariant's name and parameters (none of today's invariants takes one).
pub fn validate_invariant(invariant: &Invariant) -> Result<(), String> {
    if !KNOWN_INVARIANTS.contains(&invariant.name.as_str()) {
        return Err(format!(
            "unknown invariant {:?}; known invariants are {KNOWN_INVARIANTS:?}",
            invariant.name
        ));
    }
    if let Some(param) = invariant.params.keys().next() {
        return Err(format!(
            "invariant {:?} takes no parameter {param:?}",
            invariant.name
        ));
    }
    Ok(())
}
