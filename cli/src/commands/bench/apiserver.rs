//! `orrery bench-apiserver`: `orrery apiserver` and a real kube-apiserver side by side, with
//! the same kube-rs client code in one run — start-up time, then create, list and watch
//! throughput over ConfigMaps. Wall-clock figures for `reports/perf/`, never gated.
//! The real server is the one `KUBECONFIG` names (`make bench` starts one with
//! `conformance/kube/run.sh`, which also measures its start-up).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{json, Value};

use orrery_system::env::kube::{client, real_client, KubeTarget};
use orrery_system::env::{RealEnv, SharedEnv};

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// No usable kubeconfig for the real server.
    #[error("no real API server: {0} (make bench starts one with conformance/kube/run.sh)")]
    Kubeconfig(String),
    /// The simulated server did not start.
    #[error("orrery apiserver did not start: {0}")]
    Start(String),
    /// A request failed.
    #[error("{server}: {what}: {reason}")]
    Request {
        /// `real` or `simulated`.
        server: &'static str,
        /// The step.
        what: &'static str,
        /// The error.
        reason: String,
    },
}

/// What is measured, per server.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// ConfigMaps created (and again while watching).
    pub objects: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Full lists of the namespace.
    pub lists: usize,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn config_map(prefix: &str, i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{prefix}-{i:05}"), "labels": {"bench": prefix}},
        "data": {"k": "v".repeat(64)},
    }))
    .expect("a valid ConfigMap")
}

/// Creates `count` ConfigMaps, `concurrency` at a time: per-request latencies in ms.
async fn create(api: &Api<ConfigMap>, prefix: &str, load: Load) -> Result<Vec<f64>, kube::Error> {
    let latencies: Vec<f64> = futures::stream::iter(0..load.objects)
        .map(|i| async move {
            let started = Instant::now(); // determinism: real-env (benchmark)
            api.create(&PostParams::default(), &config_map(prefix, i))
                .await?;
            Ok::<f64, kube::Error>(started.elapsed().as_secs_f64() * 1000.0)
        })
        .buffer_unordered(load.concurrency.max(1))
        .try_collect()
        .await?;
    Ok(latencies)
}

/// Runs the three measurements against one server.
async fn measure(
    server: &'static str,
    api: Api<ConfigMap>,
    load: Load,
) -> Result<Value, BenchError> {
    let failed = |what: &'static str| {
        move |e: kube::Error| BenchError::Request {
            server,
            what,
            reason: e.to_string(),
        }
    };
    let started = Instant::now(); // determinism: real-env (benchmark)
    let mut latencies = create(&api, "bench", load)
        .await
        .map_err(failed("create"))?;
    let create_seconds = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);

    let started = Instant::now(); // determinism: real-env (benchmark)
    let mut listed = 0;
    for _ in 0..load.lists {
        listed += api
            .list(&ListParams::default())
            .await
            .map_err(failed("list"))?
            .items
            .len();
    }
    let list_seconds = started.elapsed().as_secs_f64();

    let rv = api
        .list(&ListParams::default().limit(1))
        .await
        .map_err(failed("list"))?
        .metadata
        .resource_version
        .unwrap_or_default();
    let watch_params = WatchParams::default().labels("bench=watched").timeout(290);
    let mut events = api
        .watch(&watch_params, &rv)
        .await
        .map_err(failed("watch"))?
        .boxed();
    let started = Instant::now(); // determinism: real-env (benchmark)
    let writer = {
        let api = api.clone();
        tokio::spawn(async move { create(&api, "watched", load).await })
    };
    let mut seen = 0;
    while seen < load.objects {
        match tokio::time::timeout(Duration::from_secs(60), events.next()).await {
            Ok(Some(Ok(WatchEvent::Added(_)))) => seen += 1,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => return Err(failed("watch")(e)),
            Ok(None) | Err(_) => {
                return Err(BenchError::Request {
                    server,
                    what: "watch",
                    reason: format!("{seen} of {} events arrived", load.objects),
                })
            }
        }
    }
    let watch_seconds = started.elapsed().as_secs_f64();
    writer
        .await
        .map_err(|e| BenchError::Request {
            server,
            what: "create while watching",
            reason: e.to_string(),
        })?
        .map_err(failed("create while watching"))?;
    Ok(json!({
        "create_per_second": round(load.objects as f64 / create_seconds),
        "create_p50_ms": round(percentile(&latencies, 50.0)),
        "create_p99_ms": round(percentile(&latencies, 99.0)),
        "list_objects_per_second": round(listed as f64 / list_seconds),
        "watch_events_per_second": round(load.objects as f64 / watch_seconds),
    }))
}

/// Starts `orrery apiserver` (this executable) on `port` and waits until it answers
/// `/readyz`: the child and its start-up time in ms.
fn start_simulated(port: u16) -> Result<(std::process::Child, f64), BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::Start(e.to_string()))?;
    let started = Instant::now(); // determinism: real-env (benchmark)
    let mut child = std::process::Command::new(exe)
        .args(["apiserver", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| BenchError::Start(e.to_string()))?;
    let deadline = started + Duration::from_secs(30);
    loop {
        use std::io::{Read, Write};
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let mut answer = String::new();
            let asked = stream
                .write_all(b"GET /readyz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
            if asked.is_ok()
                && stream.read_to_string(&mut answer).is_ok()
                && answer.starts_with("HTTP/1.1 200")
            {
                return Ok((child, started.elapsed().as_secs_f64() * 1000.0));
            }
        }
        let timed_out = Instant::now() > deadline; // determinism: real-env (benchmark)
        if timed_out {
            let _ = child.kill();
            return Err(BenchError::Start("no answer on /readyz within 30 s".into()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs the benchmark against both servers; the record for `reports/perf/`.
pub fn run(load: Load) -> Result<Value, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| BenchError::Start(e.to_string()))?;
    runtime.block_on(async move {
        let config = kube::Config::infer()
            .await
            .map_err(|e| BenchError::Kubeconfig(e.to_string()))?;
        let namespace = format!("orrery-bench-{}", std::process::id());
        let real = real_client(&KubeTarget::real(config, &namespace))
            .map_err(|e| BenchError::Kubeconfig(e.to_string()))?
            .ok_or_else(|| BenchError::Kubeconfig("no kubeconfig".into()))?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(real.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": namespace}}))
            .expect("a valid Namespace");
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| BenchError::Request {
                server: "real",
                what: "create namespace",
                reason: e.to_string(),
            })?;
        let version = real
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_else(|_| "unknown".into());
        let real_figures = measure("real", Api::namespaced(real, &namespace), load).await;
        let _ = namespaces.delete(&namespace, &Default::default()).await;
        let mut real_figures = real_figures?;
        real_figures["startup_ms"] = std::env::var("ORRERY_KUBE_APISERVER_STARTUP_MS")
            .ok()
            .and_then(|ms| ms.parse::<f64>().ok())
            .map_or(Value::Null, |ms| json!(ms));

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| BenchError::Start(e.to_string()))?;
        let (mut child, startup_ms) = start_simulated(port)?;
        let env: SharedEnv = std::sync::Arc::new(RealEnv::new("bench-apiserver"));
        let simulated = client(env, &KubeTarget::new(format!("127.0.0.1:{port}")));
        let sim_figures = measure("simulated", Api::namespaced(simulated, &namespace), load).await;
        let _ = child.kill();
        let _ = child.wait();
        let mut sim_figures = sim_figures?;
        sim_figures["startup_ms"] = json!(round(startup_ms));
        Ok(json!({
            "benchmark": "apiserver",
            "kubernetes": version,
            "objects": load.objects,
            "concurrency": load.concurrency,
            "lists": load.lists,
            "real": real_figures,
            "simulated": sim_figures,
        }))
    })
}

/// The record as a table, one row per figure.
pub fn table(record: &Value) -> String {
    let mut out = format!(
        "orrery apiserver vs kube-apiserver {} ({} objects, {} in flight, {} lists)\n{:<26}{:>14}{:>14}\n",
        record["kubernetes"].as_str().unwrap_or("?"),
        record["objects"],
        record["concurrency"],
        record["lists"],
        "figure",
        "real",
        "simulated"
    );
    for figure in [
        "startup_ms",
        "create_per_second",
        "create_p50_ms",
        "create_p99_ms",
        "list_objects_per_second",
        "watch_events_per_second",
    ] {
        let cell = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
        out.push_str(&format!(
            "{figure:<26}{:>14}{:>14}\n",
            cell(&record["real"][figure]),
            cell(&record["simulated"][figure])
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_the_table_read_the_record() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 100.0];
        assert_eq!(percentile(&sorted, 50.0), 3.0);
        assert_eq!(percentile(&sorted, 99.0), 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        let record = json!({"kubernetes": "v1.36.3", "objects": 10, "concurrency": 2, "lists": 3,
            "real": {"startup_ms": null, "create_per_second": 5.0},
            "simulated": {"startup_ms": 12.5, "create_per_second": 50.0}});
        let text = table(&record);
        assert!(text.contains("v1.36.3"));
        assert!(text
            .lines()
            .any(|l| l.starts_with("startup_ms") && l.contains('-') && l.contains("12.5")));
    }
}
