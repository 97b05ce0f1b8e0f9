//! The simulated world's well-known ports, names and tokens: what placement configures the
//! product with and what the world's other rooms (workload, tenants, hosted runtimes) address.
//! Below all of them, so none depends on placement to know a port.

/// Port of the simulated API server.
pub const APISERVER_PORT: u16 = 6443;
/// Port of the platform's events API.
pub const PLATFORM_PORT: u16 = 8080;
/// Port of the dedup cache.
pub const CACHE_PORT: u16 = 6379;
/// Token the simulated Argo CD server accepts.
pub const ARGOCD_TOKEN: &str = "argocd-sim-token";
/// The API token an existing Argo CD issued the runtime first (`argocd.install: existing`);
/// each `rotate_token` issues the next (`argocd-token-2`, …).
pub const EXISTING_ARGOCD_TOKEN: &str = "argocd-token-1";
/// The Secret that holds an existing Argo CD's token for the runtime (key `token`), in the
/// `argocd` namespace where the runtime is installed next to Argo CD.
pub const ARGOCD_TOKEN_SECRET: &str = "argocd-token";
/// Runtime token the simulated runtime's reporters present to the platform.
pub const RUNTIME_TOKEN: &str = "rt-token-acme-runtime";
/// The runtime the platform attributes [`RUNTIME_TOKEN`]'s events to (its read model's key).
pub const RUNTIME_NAME: &str = "acme-runtime";
/// The gateway's admin token in the simulated world.
pub const ADMIN_TOKEN: &str = "sim-admin";

/// The account a user token of the tenant world belongs to (`tok-<account>-<role>`, as
/// `tenants::admin` and its kin make them): here, below the tenant world and the runtime
/// hosts' app-proxy stand-in, which records whose token reached it.
pub fn account_of_token(token: &str) -> Option<&str> {
    token
        .strip_prefix("tok-")
        .and_then(|rest| rest.rsplit_once('-'))
        .map(|(account, _)| account)
}
