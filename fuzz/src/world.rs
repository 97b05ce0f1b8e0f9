//! The fuzz world: every server orrery runs, booted once per thread through its production
//! entry point (the same `run`/`serve` functions `orrery serve` calls) on an in-memory
//! [`Network`], on a current-thread runtime whose clock is paused.
//!
//! It is the hardened variant throughout (our design; the faithful one reproduces known
//! flaws on purpose, but neither may crash on bad input). Its credentials are fixed, so a
//! corpus file can carry a valid token and the fuzzer reaches past authentication.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use orrery_sim::world::apiserver::{self, ApiServer};
use orrery_system::core::variant::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::SharedEnv;
use orrery_system::platform::assembly::{
    self, ControlPlaneConfig, ControlPlaneState, GatewayConfig, TunnelServerConfig,
};
use orrery_system::platform::{events, permissions, runner, tunnel};
use orrery_system::runtime::{app_proxy, cache, router};

use crate::memory::{MemoryEnv, Network};

/// The platform's client API (gateway: REST, GraphQL, webhooks).
pub const GATEWAY: &str = "platform:8080";
/// The tunnel server (runtimes dial it). On a second control plane, `edge`, whose registry
/// no fuzzed gateway can reach: a gateway input that registers `acme-prod` again rotates
/// its token, and every tunnel and events input after it would stop at 401.
pub const TUNNEL: &str = "edge:8443";
/// The events API (runtimes' reporters post here), on `edge` with the tunnel server.
pub const EVENTS: &str = "edge:8090";
/// The Runner's builds and agent task API.
pub const RUNNER: &str = "platform:8070";
/// The simulated Kubernetes API server.
pub const APISERVER: &str = "kube:6443";
/// The runtime's app-proxy.
pub const APP_PROXY: &str = "runtime:8081";
/// The runtime's router (its ingress).
pub const ROUTER: &str = "runtime:8080";
/// The runtime's cache (RESP).
pub const CACHE: &str = "runtime:6379";

/// The admin token (registers runtimes; triggers builds).
pub const ADMIN_TOKEN: &str = "fuzz-admin-token";
/// The runtime `acme-prod`'s token (tunnel, events API).
pub const RUNTIME_TOKEN: &str = "fuzz-runtime-token";
/// User `alice` of account `acme`, allowed every operation.
pub const USER_TOKEN: &str = "fuzz-user-token";
/// Runner agent `agent-1`'s token.
pub const AGENT_TOKEN: &str = "fuzz-agent-token";

/// The booted world of one thread.
pub struct World {
    runtime: tokio::runtime::Runtime,
    network: Arc<Network>,
}

thread_local! {
    static WORLD: World = World::boot();
}

/// Runs `f` with this thread's world (booted on first use).
pub fn with<T>(f: impl FnOnce(&World) -> T) -> T {
    WORLD.with(f)
}

impl World {
    fn boot() -> World {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        let network = Arc::new(Network::default());
        let world = World { runtime, network };
        world.block_on(async {
            tokio::spawn(control_plane(world.env("platform"), Side::Clients));
            tokio::spawn(control_plane(world.env("edge"), Side::Runtimes));
            let env = world.env("kube");
            tokio::spawn(apiserver::run(
                env,
                ApiServer::new(apiserver::Knobs::default()),
                APISERVER,
            ));
            let env = world.env("runtime");
            tokio::spawn(cache::server::run(env.clone(), CACHE));
            tokio::spawn(app_proxy::run(
                env.clone(),
                app_proxy::Config {
                    platform_addr: GATEWAY.into(),
                    git_addr: "git:80".into(),
                    sources_addr: None,
                    kube: KubeTarget::new(APISERVER),
                    permissions_ttl: Duration::from_secs(30),
                    runtime: "prod".into(),
                    account: "acme".into(),
                    listen: APP_PROXY.into(),
                },
            ));
            tokio::spawn(router::run(
                env,
                router::Routes::new(APP_PROXY, "workflows:2746"),
                ROUTER,
            ));
            // Every server binds before the first input.
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
        });
        world
    }

    /// The environment of `host` on this world's network.
    pub fn env(&self, host: &str) -> SharedEnv {
        Arc::new(MemoryEnv::new(host, self.network.clone()))
    }

    /// The network, to dial a server as a client.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Drives `future` (and every server) to completion.
    pub fn block_on<T>(&self, future: impl Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }
}

/// Which servers of a control plane run.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    /// The gateway (REST, GraphQL, webhooks) and the Runner API (with a tunnel server, which
    /// the gateway needs).
    Clients,
    /// The tunnel server and the events API.
    Runtimes,
}

/// The control plane as `orrery serve control-plane --variant hardened --events … --runner …`
/// boots it, with the fixed credentials above; `side` chooses which servers listen.
async fn control_plane(env: SharedEnv, side: Side) {
    let variant = Variant::Hardened;
    let state = ControlPlaneState::default();
    state.registry.insert(RUNTIME_TOKEN, "acme", "prod");
    let state = ControlPlaneState {
        events: Some(events::Platform::new(events::Config {
            tokens: [(RUNTIME_TOKEN.to_string(), "acme-prod".to_string())].into(),
            bus_capacity: 10_000,
            durability: events::bus::Durability::of(variant),
            idempotency_keys: true,
        })),
        runner: Some(runner::Builds::new(
            runner::Settings {
                variant,
                ..Default::default()
            },
            [(AGENT_TOKEN.to_string(), "agent-1".to_string())].into(),
            ADMIN_TOKEN,
        )),
        ..state
    };
    state
        .permissions
        .grant_in(USER_TOKEN, "acme", "alice", &permissions::ACTIONS);
    let tunnel = |listen: &str| TunnelServerConfig {
        listen: listen.into(),
        config: tunnel::Config::new(variant),
    };
    let config = match side {
        Side::Clients => ControlPlaneConfig {
            tunnel: Some(tunnel("platform:8443")),
            gateway: Some(GatewayConfig {
                listen: GATEWAY.into(),
                admin_token: ADMIN_TOKEN.into(),
            }),
            runner: Some(RUNNER.into()),
            ..Default::default()
        },
        Side::Runtimes => ControlPlaneConfig {
            tunnel: Some(tunnel(TUNNEL)),
            events: Some(EVENTS.into()),
            ..Default::default()
        },
    };
    if let Err(e) = assembly::run(env, config, state, std::future::pending()).await {
        panic!("the fuzz world's control plane stopped: {e}");
    }
}
