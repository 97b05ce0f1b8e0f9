//! The manifests under `deploy/` as a real kube-apiserver takes them: every document passes a
//! server-side dry run (schema, defaulting and validation of the pinned Kubernetes version),
//! and a broken one does not, so the check can fail.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

use crate::support::prepared;

/// Every document of every YAML file under `deploy/`, with the file it came from.
fn manifests() -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            documents.push((file.display().to_string(), doc));
        }
    }
    documents
}

/// Creates `doc` in `namespace` as a dry run: what the server answers.
async fn dry_run(
    client: &kube::Client,
    namespace: &str,
    doc: &Value,
) -> Result<DynamicObject, kube::Error> {
    let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap());
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&params, &object).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_deploy_manifests_pass_a_server_side_dry_run_on_a_real_api_server() {
    let (cluster, namespace) = prepared(format!("orrery-deploy-{}", std::process::id())).await;
    let client = cluster.client();
    let documents = manifests();
    assert!(
        documents
            .iter()
            .any(|(_, d)| d["kind"] == "Job" && d["spec"]["completionMode"] == "Indexed"),
        "deploy/ holds the sweep's Indexed Job"
    );
    for (file, doc) in &documents {
        let answer = dry_run(&client, &namespace, doc).await.unwrap_or_else(|e| {
            panic!(
                "{file}: {} {}: refused: {e}",
                doc["kind"], doc["metadata"]["name"]
            )
        });
        assert_eq!(
            answer.metadata.name.as_deref(),
            doc["metadata"]["name"].as_str()
        );
        if doc["kind"] == "Job" {
            // The server defaulted and kept what the sweep relies on.
            assert_eq!(answer.data["spec"]["completionMode"], "Indexed", "{file}");
            assert_eq!(
                answer.data["spec"]["completions"], answer.data["spec"]["parallelism"],
                "{file}: every shard runs at once"
            );
        }
    }
    // A broken Job (an Indexed Job needs completions) is refused: the dry run validates.
    let (_, job) = documents.iter().find(|(_, d)| d["kind"] == "Job").unwrap();
    let mut broken = job.clone();
    broken["spec"]
        .as_object_mut()
        .unwrap()
        .remove("completions");
    let refused = dry_run(&client, &namespace, &broken).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422),
        "{refused:?}"
    );
    println!(
        "deploy: {} manifest documents pass a server-side dry run",
        documents.len()
    );
}

/// The kubectl `conformance/kube/run.sh` built at the pinned version (`ORRERY_KUBECTL`),
/// else the one on PATH (`make conformance` on kind).
fn kubectl(args: &[&str]) -> (bool, String, String) {
    let program = std::env::var("ORRERY_KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let output = std::process::Command::new(&program)
        .args(args)
        .current_dir(orrery_conformance::repo_root())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (make conformance-apiserver builds kubectl)"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `kubectl kustomize DIR`: the documents the kustomization renders.
fn rendered(dir: &str) -> Vec<Value> {
    let (ok, out, err) = kubectl(&["kustomize", dir]);
    assert!(ok, "kubectl kustomize {dir}: {err}");
    serde_saphyr::from_multiple::<Value>(&out)
        .unwrap_or_else(|e| panic!("kubectl kustomize {dir}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The one container of a workload's pod template.
fn container(workload: &Value) -> &Value {
    let containers = workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1, "{}", workload["metadata"]["name"]);
    &containers[0]
}

/// `NAME=value` of a rendered ConfigMap's data.
fn setting<'a>(docs: &'a [Value], key: &str) -> &'a str {
    docs.iter()
        .find(|d| d["kind"] == "ConfigMap")
        .and_then(|c| c["data"][key].as_str())
        .unwrap_or_else(|| panic!("the runtime's settings have no {key}"))
}

/// The port of `service`'s port named `name`.
fn service_port(docs: &[Value], service: &str, name: &str) -> u64 {
    docs.iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == service)
        .and_then(|s| {
            s["spec"]["ports"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == name)?["port"]
                .as_u64()
        })
        .unwrap_or_else(|| panic!("no port {name} on Service {service}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_runtime_and_control_plane_apply_with_kubectl_as_a_server_side_dry_run() {
    // The kustomizations install into `orrery`, which a dry run needs to exist.
    let (_cluster, namespace) = prepared("orrery".into()).await;
    let control_plane = rendered("deploy/control-plane");
    let runtime = rendered("deploy/runtime");
    let runner = rendered("deploy/runner");
    let runner_volumes = rendered("deploy/runner-volumes");
    let cronus = rendered("deploy/cronus");
    for doc in control_plane
        .iter()
        .chain(&runtime)
        .chain(&runner)
        .chain(&runner_volumes)
        .chain(&cronus)
    {
        let what = format!("{} {}", doc["kind"], doc["metadata"]["name"]);
        // Every namespaced object lands in the kustomization's namespace (the resource
        // reporter's cluster-wide read grant is cluster-scoped).
        if !matches!(
            doc["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding")
        ) {
            assert_eq!(doc["metadata"]["namespace"], namespace.as_str(), "{what}");
        }
        if !matches!(doc["kind"].as_str(), Some("Deployment" | "StatefulSet")) {
            continue;
        }
        let container = container(doc);
        assert_eq!(container["image"], "ghcr.io/orrery/orrery:latest", "{what}");
        assert_eq!(
            container["securityContext"]["readOnlyRootFilesystem"], true,
            "{what}"
        );
        // Every long-running component is probed, but the tunnel client, which (as the
        // chart's frpc) has no port: it exits when it gives up.
        if doc["metadata"]["name"] != "tunnel-client" {
            assert!(
                container["livenessProbe"].is_object(),
                "{what}: liveness probe"
            );
            assert!(
                container["readinessProbe"].is_object(),
                "{what}: readiness probe"
            );
        }
    }
    // One workload per runtime component, each running just its own.
    let args = |name: &str| -> Vec<String> {
        let workload = runtime
            .iter()
            .find(|d| d["metadata"]["name"] == name && d["spec"]["template"].is_object())
            .unwrap_or_else(|| panic!("the runtime has no workload {name}"));
        serde_json::from_value(container(workload)["args"].clone()).unwrap()
    };
    for (workload, component) in [
        ("tunnel-client", "tunnel-client"),
        ("internal-router", "router"),
        ("cap-app-proxy", "app-proxy"),
        ("event-reporter", "app-reporter"),
        ("sources-server", "source-server"),
        ("resource-reporter", "resource-reporter"),
        ("orrery-event-bus", "event-bus"),
    ] {
        assert!(
            args(workload).contains(&format!("--components={component}")),
            "{workload}: {:?}",
            args(workload)
        );
    }
    // The faithful resource reporter publishes to the event bus's Service.
    let bus_port = service_port(&runtime, "orrery-event-bus", "bus");
    assert!(args("resource-reporter").contains(&format!("--event-bus=orrery-event-bus:{bus_port}")));
    // The control plane keeps its state in the database whose URL its Secret holds.
    let plane = control_plane
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the control plane's Deployment");
    let database = container(plane)["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ORRERY_DATABASE_URL")
        .cloned()
        .expect("the control plane reads ORRERY_DATABASE_URL");
    assert_eq!(
        database["valueFrom"]["secretKeyRef"]["key"], "database-url",
        "the database URL comes from the Secret, never from args"
    );
    // The tunnel client hands everything to the router's Service (frpc's local_ip).
    let router_port = service_port(&runtime, "internal-router", "http");
    assert!(
        args("tunnel-client").contains(&format!("--tunnel-local=internal-router:{router_port}"))
    );
    // The reporter StatefulSet: shard from the pod's ordinal, replicas told through the env.
    let reporter = runtime
        .iter()
        .find(|d| d["kind"] == "StatefulSet" && d["metadata"]["name"] == "event-reporter")
        .expect("the event-reporter StatefulSet");
    let env = container(reporter)["env"].as_array().unwrap();
    let var = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        var("POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        var("EVENT_REPORTER_REPLICAS")["value"]
            .as_str()
            .map(str::parse::<u64>),
        Some(Ok(reporter["spec"]["replicas"].as_u64().unwrap())),
        "EVENT_REPORTER_REPLICAS must equal the StatefulSet's replicas"
    );
    // The runtime may read one Secret: the one the reporters take Argo CD's token from.
    let secret = var("ARGO_CD_TOKEN_SECRET_NAME")["value"].clone();
    let role = runtime
        .iter()
        .find(|d| d["kind"] == "Role")
        .expect("the runtime's Role");
    let secret_rules: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|a| a.contains(&"secrets".into()))
        })
        .collect();
    assert!(
        !secret_rules.is_empty(),
        "the reporters read their token Secret"
    );
    for rule in secret_rules {
        assert_eq!(rule["resourceNames"], serde_json::json!([secret]), "{rule}");
    }
    // The runtime's defaults reach the control plane's Service.
    for (key, port) in [
        ("PLATFORM", "tunnel"),
        ("PLATFORM_API", "api"),
        ("EVENTS_API", "events"),
    ] {
        let wanted = format!(
            "orrery-control-plane:{}",
            service_port(&control_plane, "orrery-control-plane", port)
        );
        assert_eq!(setting(&runtime, key), wanted, "{key}");
    }
    // The Runner's agent runs `serve runner` against the control plane's runner port, may
    // make and delete pods and claims, and nothing else.
    let agent = runner
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the runner's Deployment");
    let agent_args: Vec<String> = serde_json::from_value(container(agent)["args"].clone()).unwrap();
    assert_eq!(agent_args[..2], ["serve", "runner"], "{agent_args:?}");
    assert_eq!(
        setting(&runner, "CODEFRESH_HOST"),
        format!(
            "orrery-control-plane:{}",
            service_port(&control_plane, "orrery-control-plane", "runner")
        )
    );
    let grants = runner
        .iter()
        .find(|d| d["kind"] == "Role")
        .expect("the runner's Role");
    assert_eq!(
        grants["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims"], "verbs": ["get", "list", "watch", "create", "delete"]}])
    );
    // The volumes overlay: the agent also runs the provisioner, which may make
    // PersistentVolumes and bind claims (a ClusterRole), and nothing more.
    let agent = runner_volumes
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the runner");
    assert!(
        container(agent)["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--volumes-node-gib=$(VOLUMES_NODE_GIB)"),
        "the overlay runs the provisioner"
    );
    let cluster_grants = runner_volumes
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("the provisioner's ClusterRole");
    assert_eq!(
        cluster_grants["rules"][0],
        serde_json::json!({"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
    );
    // cronus calls the platform's runner port with the control plane's admin token, one
    // replica (faithful replicas each fire every tick).
    let cron = cronus
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("cronus");
    assert_eq!(cron["spec"]["replicas"], 1);
    assert_eq!(
        setting(&cronus, "CODEFRESH_HOST"),
        format!(
            "orrery-control-plane:{}",
            service_port(&control_plane, "orrery-control-plane", "runner")
        )
    );
    assert_eq!(
        container(cron)["env"][1]["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "orrery-control-plane", "key": "admin-token"})
    );
    // kubectl apply --dry-run=server: the real server validates and defaults every object.
    for (dir, docs) in [
        ("deploy/control-plane", &control_plane),
        ("deploy/runtime", &runtime),
        ("deploy/runner", &runner),
        ("deploy/runner-volumes", &runner_volumes),
        ("deploy/cronus", &cronus),
    ] {
        let (ok, out, err) = kubectl(&["apply", "--dry-run=server", "-k", dir, "-o", "name"]);
        assert!(ok, "kubectl apply --dry-run=server -k {dir}: {err}");
        assert_eq!(
            out.lines().count(),
            docs.len(),
            "{dir}: every object applied:\n{out}"
        );
        println!(
            "deploy: {dir}: {} objects pass kubectl apply --dry-run=server",
            docs.len()
        );
    }
    // … and refuses a broken one: the check can fail.
    let broken = orrery_conformance::repo_root().join("target/deploy-broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("kustomization.yaml"),
        "resources: [../../deploy/runtime]\npatches:\n  - target: {kind: StatefulSet, name: event-reporter}\n    patch: '[{\"op\": \"replace\", \"path\": \"/spec/replicas\", \"value\": -1}]'\n",
    )
    .unwrap();
    let (ok, _, err) = kubectl(&["apply", "--dry-run=server", "-k", "target/deploy-broken"]);
    assert!(
        !ok && err.contains("Invalid"),
        "a negative replica count is refused: {err}"
    );
}
