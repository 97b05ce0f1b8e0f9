//! Hosted runtimes: the platform's vcluster syncer, unchanged, in real mode against the
//! real kube-apiserver. Labelled namespaces of the one API server play the tenant's
//! virtual cluster (a real vcluster would be a second API server; the syncer takes any two
//! targets), and a third namespace is the host namespace of the copies.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use orrery_system::core::Variant;
use orrery_system::env::RealEnv;
use orrery_system::platform::vcluster::{self, naming};

use crate::runtime::record_row;
use crate::support::{eventually, prepared, real_target};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

const LABEL: &str = "orrery.test/tenant";

fn secret(namespace: &str, name: &str, tenant: &str, value: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(LABEL.to_string(), tenant.to_string())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "password".to_string(),
            k8s_openapi::ByteString(value.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

fn value_of(secret: &Secret) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get("password"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

fn annotation(secret: &Secret, key: &str) -> String {
    secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_default()
}

/// One variant's run: Secret `db-x-team` of namespace `N` and Secret `db` of namespace
/// `team-x-N` (one host name under vcluster's naming), and a ConfigMap.
async fn suite(variant: Variant) {
    let tenant = format!("{}-{}", std::process::id(), variant.as_str());
    let (cluster, first) = prepared(format!("orrery-vc-{tenant}")).await;
    let second = format!("team-x-{first}");
    let host_ns = format!("orrery-vchost-{tenant}");
    for namespace in [&second, &host_ns] {
        cluster
            .prepare(namespace)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let client = cluster.client();
    let first_secrets: Api<Secret> = Api::namespaced(client.clone(), &first);
    let second_secrets: Api<Secret> = Api::namespaced(client.clone(), &second);
    let host_secrets: Api<Secret> = Api::namespaced(client.clone(), &host_ns);
    let host_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &host_ns);
    first_secrets
        .create(
            &PostParams::default(),
            &secret(&first, "db-x-team", &tenant, "first"),
        )
        .await
        .expect("create Secret db-x-team");
    let web = ConfigMap {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some(first.clone()),
            labels: Some(BTreeMap::from([(LABEL.to_string(), tenant.clone())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("color".to_string(), "blue".to_string())])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &first)
        .create(&PostParams::default(), &web)
        .await
        .expect("create ConfigMap web");

    let mut config = vcluster::Config::new(
        variant,
        "vc",
        real_target("default").await,
        real_target(&host_ns).await,
    );
    config.selector = Some(format!("{LABEL}={tenant}"));
    let syncer = tokio::spawn(vcluster::run(Arc::new(RealEnv::new("vcluster")), config));

    let first_host = naming::host_name(variant, "db-x-team", &first, "vc");
    let second_host = naming::host_name(variant, "db", &second, "vc");
    let web_host = naming::host_name(variant, "web", &first, "vc");
    assert_eq!(first_host == second_host, variant == Variant::Faithful);
    let copy = eventually("Secret db-x-team's copy on the host", || async {
        match host_secrets.get_opt(&first_host).await {
            Ok(Some(copy)) if value_of(&copy) == "first" => Ok(copy),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(annotation(&copy, naming::NAME_ANNOTATION), "db-x-team");
    assert_eq!(annotation(&copy, naming::NAMESPACE_ANNOTATION), first);
    eventually("ConfigMap web's copy on the host", || async {
        match host_maps.get_opt(&web_host).await {
            Ok(Some(copy))
                if copy
                    .data
                    .as_ref()
                    .and_then(|d| d.get("color"))
                    .map(String::as_str)
                    == Some("blue") =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    second_secrets
        .create(
            &PostParams::default(),
            &secret(&second, "db", &tenant, "second"),
        )
        .await
        .expect("create Secret db");
    match variant {
        Variant::Faithful => {
            // The second Secret's reconcile deletes the first one's copy (its uid differs),
            // the host watch brings the first one's reconcile, which creates it again: the
            // host object a pod of `team-x-…` mounts as `db` is `db-x-team`'s, re-created.
            let first_uid = copy.metadata.uid.clone();
            let again = eventually(
                "the first Secret's copy deleted and created again",
                || async {
                    match host_secrets.get_opt(&first_host).await {
                        Ok(Some(c)) if c.metadata.uid != first_uid => Ok(c),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
            assert_eq!(annotation(&again, naming::NAME_ANNOTATION), "db-x-team");
            assert_eq!(
                value_of(&again),
                "first",
                "team-x-…/db mounts the other namespace's Secret"
            );
        }
        Variant::Hardened => {
            let copies = || async {
                let one = host_secrets.get_opt(&first_host).await;
                let two = host_secrets.get_opt(&second_host).await;
                Ok::<_, String>((
                    one.map_err(|e| e.to_string())?,
                    two.map_err(|e| e.to_string())?,
                ))
            };
            eventually("each Secret with its own copy", || async {
                match copies().await? {
                    (Some(a), Some(b)) if value_of(&a) == "first" && value_of(&b) == "second" => {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            // An update follows; a deletion removes its copy and leaves the other.
            let mut updated = second_secrets.get("db").await.expect("read Secret db");
            updated.data = secret(&second, "db", &tenant, "rotated").data;
            second_secrets
                .replace("db", &PostParams::default(), &updated)
                .await
                .expect("update Secret db");
            first_secrets
                .delete("db-x-team", &DeleteParams::default())
                .await
                .expect("delete Secret db-x-team");
            eventually(
                "the update followed and the deletion removed only its copy",
                || async {
                    match copies().await? {
                        (None, Some(b)) if value_of(&b) == "rotated" => Ok(()),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
        }
    }
    syncer.abort();
    for namespace in [&first, &second, &host_ns] {
        let _ = cluster.cleanup(namespace).await;
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_vcluster_syncer_keeps_a_tenants_objects_on_a_real_host_cluster_and_faithful_names_collide(
) {
    suite(Variant::Faithful).await;
    suite(Variant::Hardened).await;
    println!("hosted: the vcluster syncer kept a tenant's ConfigMaps and Secrets on the real API server; faithful's names collided, hardened's did not");
    record_row("vcluster syncer", "the platform's vcluster syncer (hosted runtimes) keeps a tenant's ConfigMaps and Secrets as copies in a host namespace of the real API server; faithful's vcluster naming gives Secret `db-x-team` of namespace N and Secret `db` of `team-x-N` one host name, and the second one's reconcile deletes the first one's copy, which is created again as the first's (what a pod of `team-x-N` mounts as `db`); hardened gives each its own copy and follows an update and a deletion");
}
