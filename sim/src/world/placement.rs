//! Where the product runs in the simulated world: for each host, the runtime's and the
//! control plane's assembly configs its roles ask for — the same assemblies
//! `orrery serve runtime|control-plane` runs. A host may have several roles (`role:` plus
//! `roles:`), so a scenario puts components in one process or spreads them over hosts like
//! pods; adding a component touches its module, its config here and the scenario model,
//! never the harness.

use std::time::Duration;

use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::platform::assembly::{ControlPlaneConfig, GatewayConfig, TunnelServerConfig};
use orrery_system::platform::monitor;
use orrery_system::platform::tunnel as tunnel_server;
use orrery_system::runtime::assembly::{RouterConfig, RuntimeConfig};
use orrery_system::runtime::resource_reporter::{self, BUS_PORT};
use orrery_system::runtime::router::Routes;
use orrery_system::runtime::{
    acr, app_proxy, app_reporter, gitops_operator, source_server, tunnel_client,
};

use super::argocd;
use super::tunnel::{runtimes_of, APP_PROXY_PORT, GATEWAY_PORT, TUNNEL_PORT};
use crate::scenario::model::{Host, Install, Role};
use crate::scenario::Scenario;

pub use super::addresses::{
    ADMIN_TOKEN, APISERVER_PORT, ARGOCD_TOKEN, ARGOCD_TOKEN_SECRET, CACHE_PORT,
    EXISTING_ARGOCD_TOKEN, PLATFORM_PORT, RUNTIME_NAME, RUNTIME_TOKEN,
};

/// The first host that has `role`, or `absent` (the parser requires the ones that matter).
pub fn host_of(scenario: &Scenario, role: Role) -> &str {
    scenario
        .topology
        .hosts
        .iter()
        .find(|h| h.has(role))
        .map_or("absent", |h| h.name.as_str())
}

/// Every host that has `role`, in file order.
pub fn hosts_with(scenario: &Scenario, role: Role) -> Vec<String> {
    scenario
        .topology
        .hosts
        .iter()
        .filter(|h| h.has(role))
        .map(|h| h.name.clone())
        .collect()
}

/// The runtime components `host` runs, if any. The reporter's replica count is the
/// StatefulSet's at the time the pod starts; the harness sets it on each boot.
pub fn runtime(scenario: &Scenario, host: &Host, variant: Variant) -> Option<RuntimeConfig> {
    let mut config = RuntimeConfig {
        // Each tunnel client is its own pod: the world plays its kubelet.
        tunnel_restart: Some(orrery_system::runtime::assembly::CrashLoopBackOff::kubelet()),
        ..RuntimeConfig::default()
    };
    if host.has(Role::Cache) {
        config.cache = Some(format!("0.0.0.0:{CACHE_PORT}"));
    }
    if host.has(Role::Vcluster) && scenario.hosted.as_ref().is_some_and(|h| h.runs_runtimes()) {
        // A tenant's hosted runtime: its reporter and cache next to its virtual cluster.
        config.cache = Some(format!("0.0.0.0:{CACHE_PORT}"));
        let pinned = scenario.reporter.variant.unwrap_or(variant);
        config.app_reporter = Some(hosted_reporter(scenario, &host.name, pinned));
    }
    if host.has(Role::Reporter) {
        let pinned = scenario.reporter.variant.unwrap_or(variant);
        config.app_reporter = Some(reporter(scenario, pinned));
    }
    if scenario.runner.is_some() {
        if host.has(Role::Runner) {
            config.runner = Some(super::runner::agent(scenario, variant, &host.name));
        }
        // The builds' engine pods run in the cluster.
        if host.has(Role::Apiserver) {
            config.engine = Some(super::runner::engine(scenario, variant));
            config.volumes = super::runner::volumes(scenario, variant);
        }
    }
    if host.has(Role::Eventbus) {
        config.event_bus = Some(format!("0.0.0.0:{BUS_PORT}"));
    }
    if host.has(Role::Resources) {
        config.resource_reporter = Some(resource_reporter(scenario, variant));
    }
    if host.has(Role::Acr) {
        config.acr = Some(acr_controller(scenario, variant));
    }
    if host.has(Role::Operator) {
        config.operator = Some(operator(scenario, host, variant));
    }
    if host.has(Role::Appproxy) {
        config.app_proxy = Some(app_proxy::Config {
            platform_addr: format!("{}:{GATEWAY_PORT}", host_of(scenario, Role::Gateway)),
            git_addr: format!("{}:80", host_of(scenario, Role::Git)),
            sources_addr: None,
            kube: KubeTarget {
                addr: format!("{}:{APISERVER_PORT}", host_of(scenario, Role::Apiserver)),
                namespace: argocd::NAMESPACE.into(),
                read_idle: Duration::from_secs(90),
                kubeconfig: None,
            },
            permissions_ttl: Duration::from_secs(60),
            // The runtime's name in its account, as its tunnel's `<account>-<runtime>`.
            runtime: host.name.clone(),
            account: super::tunnel::ACCOUNT.into(),
            listen: format!("0.0.0.0:{APP_PROXY_PORT}"),
        });
    }
    if host.has(Role::Sources) {
        let token = match scenario.argocd.install {
            Install::Bundled => ARGOCD_TOKEN,
            Install::Existing => EXISTING_ARGOCD_TOKEN,
        };
        let mut sources = source_server::Config::new(
            &format!("0.0.0.0:{}", source_server::PORT),
            &format!("{}:8080", host_of(scenario, Role::Argocd)),
            token,
        );
        // With a control plane in the world, each app's versionSource is asked of it with
        // the (first) runtime's own token.
        let runtime_host = scenario
            .topology
            .hosts
            .iter()
            .find(|h| h.has(Role::Runtime));
        if let (true, Some(runtime_host)) = (
            scenario.topology.hosts.iter().any(|h| h.has(Role::Gateway)),
            runtime_host,
        ) {
            let per_host = scenario.tunnel.runtimes_per_host;
            if let Some((_, _, runtime_token)) = runtimes_of(&runtime_host.name, per_host).first() {
                sources.templates = Some(source_server::TemplateLookup::new(
                    &format!("{}:{GATEWAY_PORT}", host_of(scenario, Role::Gateway)),
                    runtime_token,
                ));
            }
        }
        config.source_server = Some(sources);
    }
    if host.has(Role::Runtime) {
        let gateway = host_of(scenario, Role::Gateway);
        // With a cache host in the world, hardened keeps its request records there.
        let store = scenario
            .topology
            .hosts
            .iter()
            .find(|h| h.has(Role::Cache))
            .map(|h| format!("{}:{CACHE_PORT}", h.name));
        let per_host = scenario.tunnel.runtimes_per_host.max(1);
        // A tenant runtime in ingress mode has no tunnel: its host's router serves an ingress.
        let ingress = scenario
            .tenants
            .as_ref()
            .and_then(|t| super::tenants::ingress_runtime(t, scenario.tunnel.runtimes_per_host));
        let runtimes = if scenario.tenants.is_some() {
            super::tenants::runtimes(&host.name, scenario.tunnel.runtimes_per_host)
                .into_iter()
                .filter(|(runtime, _, _)| Some(runtime) != ingress.as_ref())
                .collect()
        } else {
            runtimes_of(&host.name, scenario.tunnel.runtimes_per_host)
        };
        // With the runtime monitor and an events path in the world, each runtime also sends
        // its heartbeats there.
        if let Some(platform) = scenario
            .topology
            .hosts
            .iter()
            .find(|h| h.has(Role::Platform))
            .filter(|_| scenario.platform.monitor)
        {
            config.heartbeats = runtimes
                .iter()
                .map(|(_, _, token)| {
                    orrery_system::runtime::heartbeat::Config::new(
                        &format!("{}:{PLATFORM_PORT}", platform.name),
                        token,
                    )
                })
                .collect();
        }
        config.tunnels = runtimes
            .into_iter()
            .enumerate()
            .map(|(i, (_, name, token))| tunnel_client::Config {
                dedup_store: store.clone(),
                start_after: scenario.tunnel.start_spread * i as u32 / per_host,
                ..tunnel_client::Config::new(
                    variant,
                    &format!("{gateway}:{TUNNEL_PORT}"),
                    &name,
                    &token,
                )
            })
            .collect();
        config.router = Some(RouterConfig {
            routes: Routes {
                app_proxy: format!("{}:{APP_PROXY_PORT}", host.name),
                ..Default::default()
            },
            ingress: ingress.map(|_| format!("0.0.0.0:{}", super::tenants::INGRESS_PORT)),
        });
    }
    let empty = config.cache.is_none()
        && config.heartbeats.is_empty()
        && config.app_reporter.is_none()
        && config.tunnels.is_empty()
        && config.event_bus.is_none()
        && config.resource_reporter.is_none()
        && config.acr.is_none()
        && config.operator.is_none()
        && config.runner.is_none()
        && config.engine.is_none()
        && config.app_proxy.is_none()
        && config.source_server.is_none();
    (!empty).then_some(config)
}

/// The control-plane services `host` runs, if any.
pub fn control_plane(
    scenario: &Scenario,
    host: &Host,
    variant: Variant,
) -> Option<ControlPlaneConfig> {
    let mut config = ControlPlaneConfig::default();
    if host.has(Role::Platform) {
        config.events = Some(format!("0.0.0.0:{PLATFORM_PORT}"));
        if scenario.runner.is_some() {
            config.runner = Some(format!("0.0.0.0:{}", super::runner::API_PORT));
        }
    }
    if host.has(Role::Gateway) {
        let mut tunnel = tunnel_server::Config::new(variant);
        tunnel.registration_cost = scenario.tunnel.registration_cost;
        tunnel.max_pending_registrations = scenario.tunnel.max_pending_registrations;
        config.tunnel = Some(TunnelServerConfig {
            listen: format!("0.0.0.0:{TUNNEL_PORT}"),
            config: tunnel,
        });
        config.gateway = Some(GatewayConfig {
            listen: format!("0.0.0.0:{GATEWAY_PORT}"),
            admin_token: ADMIN_TOKEN.into(),
        });
        if scenario.platform.monitor {
            config.monitor = Some(monitor::Config::new(variant));
        }
        if let Some(database) = scenario
            .topology
            .hosts
            .iter()
            .find(|h| h.has(Role::Database))
        {
            config.database = Some(std::sync::Arc::new(super::database::Connector::new(
                &format!("{}:{}", database.name, super::database::PORT),
            )));
        }
        if scenario.tenants.is_some() {
            // The platform's periodic jobs: the tenants' expired tokens are cleaned up.
            config.cron = Some(orrery_system::platform::cron::Config::default());
        }
        if let Some(every) = scenario
            .platform
            .anti_entropy_every
            .filter(|_| variant == Variant::Hardened)
        {
            config.anti_entropy = Some(orrery_system::platform::anti_entropy::Config {
                every,
                ..Default::default()
            });
        }
    }
    if host.has(Role::Promotions) {
        if let Some(planned) = scenario
            .promotions
            .as_ref()
            .and_then(|p| super::promotions::Planned::of(p).ok())
        {
            // Every environment's app is on the one runtime with the app-proxy.
            let runtime_host = host_of(scenario, Role::Appproxy);
            let runtime = runtimes_of(runtime_host, 1)
                .into_iter()
                .next()
                .map(|(_, tunnel_name, _)| tunnel_name)
                .unwrap_or_default();
            config.promotions = Some(planned.orchestrator(
                &runtime,
                &format!("{}:80", host_of(scenario, Role::Git)),
                &format!("{}:{GATEWAY_PORT}", host_of(scenario, Role::Gateway)),
            ));
        }
    }
    if host.has(Role::Vcluster) {
        // The vcluster's syncer runs in its pod, next to its API server.
        let (virtual_cluster, host_cluster) =
            super::hosted::targets(&host.name, host_of(scenario, Role::Apiserver));
        config
            .vclusters
            .push(orrery_system::platform::vcluster::Config::new(
                variant,
                &host.name,
                virtual_cluster,
                host_cluster,
            ));
    }
    (config.events.is_some()
        || config.runner.is_some()
        || config.tunnel.is_some()
        || config.promotions.is_some()
        || !config.vclusters.is_empty())
    .then_some(config)
}

/// The resource event reporter's configuration, pointing at the world's hosts: Workflows
/// are watched in the workflows load's namespace (the chart watches the runtime's, where
/// its workflows run).
fn resource_reporter(scenario: &Scenario, variant: Variant) -> resource_reporter::Config {
    let target = KubeTarget {
        addr: format!("{}:{APISERVER_PORT}", host_of(scenario, Role::Apiserver)),
        namespace: argocd::NAMESPACE.into(),
        read_idle: Duration::from_secs(90),
        kubeconfig: None,
    };
    let mut config = resource_reporter::Config::new(
        variant,
        target,
        &format!("{}:{PLATFORM_PORT}", host_of(scenario, Role::Platform)),
        RUNTIME_TOKEN,
    );
    config.bus_addr = format!("{}:{BUS_PORT}", host_of(scenario, Role::Eventbus));
    config.workflow_namespace = scenario
        .workload
        .workflows
        .as_ref()
        .map(|w| w.namespace.clone());
    config
}

/// The Workflows controller's `workflowDefaults.metadata.finalizers`: the runtime's chart
/// installs Argo Workflows, and with a hardened resource reporter watching Workflows its
/// defaults carry the reporter's finalizer ([`resource_reporter::workflow_finalizers`]) —
/// unless the scenario says Argo Workflows is an existing install the runtime does not
/// configure (`workload.workflows.runtime_defaults: false`).
pub fn workflow_finalizers(scenario: &Scenario, variant: Variant) -> Vec<String> {
    let reported = scenario
        .topology
        .hosts
        .iter()
        .any(|h| h.has(Role::Resources));
    let configured = scenario
        .workload
        .workflows
        .as_ref()
        .is_none_or(|w| w.runtime_defaults);
    if reported && configured {
        resource_reporter::workflow_finalizers(variant)
    } else {
        Vec::new()
    }
}

/// The ACR controller's configuration: Applications in `argocd`, the world's Argo CD and the
/// token the runtime was installed with (an existing Argo CD's first token).
fn acr_controller(scenario: &Scenario, variant: Variant) -> acr::Config {
    let target = KubeTarget {
        addr: format!("{}:{APISERVER_PORT}", host_of(scenario, Role::Apiserver)),
        namespace: argocd::NAMESPACE.into(),
        read_idle: Duration::from_secs(90),
        kubeconfig: None,
    };
    let token = match scenario.argocd.install {
        Install::Bundled => ARGOCD_TOKEN,
        Install::Existing => EXISTING_ARGOCD_TOKEN,
    };
    let mut config = acr::Config::new(
        variant,
        target,
        &format!("{}:8080", host_of(scenario, Role::Argocd)),
        token,
    );
    if scenario.topology.hosts.iter().any(|h| h.has(Role::Git)) {
        config.git_api = Some(format!("{}:80", host_of(scenario, Role::Git)));
    }
    config
}

/// One GitOps operator replica: tasks (and its Lease) in `argocd`, wrapper workflows in the
/// workflows load's namespace (else `argocd`), the world's Git provider and Argo CD; it
/// elects a leader when the world has more than one replica, as the chart sets
/// `LEADER_ELECT`.
fn operator(scenario: &Scenario, host: &Host, variant: Variant) -> gitops_operator::Config {
    let target = KubeTarget {
        addr: format!("{}:{APISERVER_PORT}", host_of(scenario, Role::Apiserver)),
        namespace: argocd::NAMESPACE.into(),
        read_idle: Duration::from_secs(90),
        kubeconfig: None,
    };
    let token = match scenario.argocd.install {
        Install::Bundled => ARGOCD_TOKEN,
        Install::Existing => EXISTING_ARGOCD_TOKEN,
    };
    let mut config = gitops_operator::Config::new(
        variant,
        target,
        &host.name,
        &format!("{}:80", host_of(scenario, Role::Git)),
        &format!("{}:8080", host_of(scenario, Role::Argocd)),
        token,
    );
    if let Some(workflows) = &scenario.workload.workflows {
        config.workflow_namespace = workflows.namespace.clone();
    }
    config.leader_elect = hosts_with(scenario, Role::Operator).len() > 1;
    config
}

/// The reporter of vcluster `vcluster`'s hosted runtime: its virtual cluster's API server,
/// its own Argo CD (bundled) and cache, the platform, and its hosted runtime's token.
fn hosted_reporter(scenario: &Scenario, vcluster: &str, variant: Variant) -> app_reporter::Config {
    let mut config = reporter(scenario, variant);
    config.apiserver.addr = format!("{vcluster}:{APISERVER_PORT}");
    config.argocd_addr = format!("{vcluster}:8080");
    config.argocd_token = ARGOCD_TOKEN.into();
    config.argocd_token_secret = None;
    config.application_namespaces = Vec::new();
    config.sources_addr = None;
    config.runtime_token = super::hosted::runtime_token(vcluster);
    config.cache_addr = format!("{vcluster}:{CACHE_PORT}");
    config.replicas = 1;
    config
}

/// One reporter replica's configuration, pointing at the world's hosts.
fn reporter(scenario: &Scenario, variant: Variant) -> app_reporter::Config {
    let target = KubeTarget {
        addr: format!("{}:{APISERVER_PORT}", host_of(scenario, Role::Apiserver)),
        namespace: argocd::NAMESPACE.into(),
        // Reporters keep kube's 90 s read deadline (the bookmark interval is 60 s).
        read_idle: Duration::from_secs(90),
        kubeconfig: None,
    };
    let mut config = app_reporter::Config::new(variant, target, argocd::NAMESPACE);
    config.argocd_addr = format!("{}:8080", host_of(scenario, Role::Argocd));
    match scenario.argocd.install {
        Install::Bundled => config.argocd_token = ARGOCD_TOKEN.into(),
        Install::Existing => config.argocd_token_secret = Some(ARGOCD_TOKEN_SECRET.into()),
    }
    config.application_namespaces = scenario.argocd.application_namespaces.clone();
    if scenario.topology.hosts.iter().any(|h| h.has(Role::Sources)) {
        config.sources_addr = Some(format!(
            "{}:{}",
            host_of(scenario, Role::Sources),
            source_server::PORT
        ));
    }
    config.platform_addr = format!("{}:{PLATFORM_PORT}", host_of(scenario, Role::Platform));
    config.runtime_token = RUNTIME_TOKEN.into();
    config.cache_addr = format!("{}:{CACHE_PORT}", host_of(scenario, Role::Cache));
    config.workers = scenario.reporter.workers;
    config.queue_capacity = scenario.reporter.queue_capacity;
    config.lease_duration = scenario.reporter.lease_duration;
    config.lease_renew = scenario.reporter.lease_renew;
    config.resource_concurrency = scenario.reporter.resource_concurrency;
    config.rate_limit =
        scenario
            .reporter
            .rate_limiter
            .as_ref()
            .map(|r| app_reporter::rate_limit::RateLimit {
                bucket_size: r.bucket_size,
                period: r.period,
                learning_mode: r.learning_mode,
            });
    config
}
