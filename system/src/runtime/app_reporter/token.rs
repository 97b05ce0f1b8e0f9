//! Where the reporter's Argo CD token comes from.
//!
//! A runtime with a bundled Argo CD gets the token in its configuration (`argocd_token`). A
//! runtime installed next to an **existing** Argo CD is given an API token that Argo CD
//! issued (`argocd account generate-token`), kept in a Secret: `argocd-token`, key `token`
//! (gitops-runtime-helm `global.external-argo-cd.auth.type: token` with
//! `tokenSecretKeyRef`; research §1.11: `ARGO_CD_TOKEN_SECRET_NAME` / `_KEY`, defaults
//! `argocd-token` / `token`). Such a token expires or gets regenerated, and someone puts the
//! new one into the Secret.
//!
//! - **faithful** resolves the Secret once, when the replica starts — as Kubernetes resolves
//!   an environment variable from a `secretKeyRef` (`ARGOCD_TOKEN`, research §1.1) at
//!   container start and never updates it. A rotated token is only picked up by a restart;
//!   until then every Argo CD call answers 401, and each app event carries those read errors.
//! - **hardened** watches the Secret, swaps the token in place when it changes, and
//!   re-queues every app it owns so the platform stops showing the old token's errors.
//!
//! Either way a replica does not start working before the Secret exists (a pod whose
//! `secretKeyRef` is missing stays in `CreateContainerConfigError` and is retried).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher;

use super::process::Processor;
use super::Replica;
use crate::observe::ReporterEvent;

/// The Secret key holding the token.
pub const TOKEN_KEY: &str = "token";

/// How often a replica looks for a Secret that is missing or unreadable.
const RETRY: Duration = Duration::from_secs(1);

/// The token in `secret`, if it holds a non-empty UTF-8 one.
pub fn token_of(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(TOKEN_KEY)?;
    let token = String::from_utf8(bytes.0.clone()).ok()?;
    let token = token.trim().to_string();
    (!token.is_empty()).then_some(token)
}

/// Reads the token from Secret `name` in `namespace`, waiting until it exists and holds one.
pub(super) async fn load(replica: &Replica, client: kube::Client, name: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(client, &replica.config.namespace);
    loop {
        match secrets.get_opt(name).await {
            Ok(Some(secret)) => {
                if let Some(token) = token_of(&secret) {
                    return token;
                }
                replica.env.observe(
                    ReporterEvent::TokenError {
                        replica: replica.me.clone(),
                        error: format!(
                            "Secret {}/{name} has no non-empty `{TOKEN_KEY}` key",
                            replica.config.namespace
                        ),
                    }
                    .into(),
                );
            }
            Ok(None) => replica.env.observe(
                ReporterEvent::TokenError {
                    replica: replica.me.clone(),
                    error: format!("Secret {}/{name} not found", replica.config.namespace),
                }
                .into(),
            ),
            Err(e) => replica.env.observe(
                ReporterEvent::TokenError {
                    replica: replica.me.clone(),
                    error: format!("reading Secret {}/{name}: {e}", replica.config.namespace),
                }
                .into(),
            ),
        }
        replica.env.sleep(RETRY).await;
    }
}

/// hardened: follows Secret `name` and puts each new token into use, then re-queues every
/// app this replica owns (their last events may carry the old token's 401s).
pub(super) async fn follow(
    replica: Arc<Replica>,
    processor: Arc<Processor>,
    client: kube::Client,
    name: String,
) {
    let secrets: Api<Secret> = Api::namespaced(client, &replica.config.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let backoff = crate::env::kube::SeededBackoff::new(replica.env.clone());
    let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::backoff(
        watcher(secrets, config),
        backoff
    ));
    while let Some(event) = events.next().await {
        let secret = match event {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
            _ => continue,
        };
        let Some(token) = token_of(&secret) else {
            continue;
        };
        if token == processor.argocd().token() {
            continue;
        }
        processor.token_rotated(&token);
        let requeued = replica.requeue_owned();
        replica.env.observe(
            ReporterEvent::TokenLoaded {
                replica: replica.me.clone(),
                requeued,
            }
            .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_token_is_the_trimmed_non_empty_utf8_value_of_the_token_key() {
        assert_eq!(
            token_of(&secret(&[("token", b"argocd-token-2\n")])).as_deref(),
            Some("argocd-token-2"),
            "a trailing newline (echo | kubectl create secret) is not part of the token"
        );
        assert_eq!(token_of(&secret(&[("password", b"x")])), None, "wrong key");
        assert_eq!(token_of(&secret(&[("token", b"  ")])), None, "blank");
        assert_eq!(
            token_of(&secret(&[("token", &[0xff, 0xfe])])),
            None,
            "not UTF-8"
        );
        assert_eq!(token_of(&Secret::default()), None, "no data");
    }
}
