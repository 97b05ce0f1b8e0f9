//! `orrery bench-sim`: what the simulator's own plumbing costs, the floor under every
//! scenario's time (issue 19). One HTTP request between two simulated hosts, through the
//! same pieces every component uses (hyper client and server over turmoil's TCP, via
//! [`SimEnv`] and `orrery_system::env::http`), with and without decoding the JSON body;
//! and one simulated step of idle hosts. Wall-clock figures: they go to the ungated perf
//! report (`reports/perf/sim.json`), never to gated ones.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use orrery_system::env::{http as web, SharedEnv};

use orrery_sim::env::SimEnv;
use orrery_sim::trace::Trace;

/// The simulated step, as the scenarios' default `tick`.
const TICK: Duration = Duration::from_millis(10);

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Requests per measurement.
    pub requests: usize,
    /// Requests in flight at once (each on its own client task; connections are pooled).
    pub concurrency: usize,
    /// Bytes of each response's JSON body (the reference scenario's watch lines average
    /// about 1.2 KB; its Argo CD answers are of that order).
    pub body_bytes: usize,
}

/// A JSON object of about `bytes` bytes, shaped like an Application's status.
fn body(bytes: usize) -> Bytes {
    let mut resources = Vec::new();
    let mut value = json!({"metadata": {"name": "app-00001", "namespace": "argocd"},
                           "status": {"resources": []}});
    while serde_json::to_vec(&value).map_or(0, |v| v.len()) < bytes {
        resources.push(
            json!({"group": "apps", "kind": "Deployment", "namespace": "default",
                              "name": format!("app-00001-{}", resources.len()),
                              "status": "Synced", "health": {"status": "Healthy"}}),
        );
        value["status"]["resources"] = Value::Array(resources.clone());
    }
    Bytes::from(serde_json::to_vec(&value).expect("JSON values serialise"))
}

/// One measurement: `load.requests` GETs from a client host to a server host; `decode`
/// parses each answer into a `serde_json::Value` as components do. Returns (wall seconds,
/// simulated seconds).
fn requests(load: Load, decode: bool) -> Result<(f64, f64), String> {
    let mut sim = turmoil::Builder::new()
        .rng_seed(1)
        .tick_duration(TICK)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(5))
        .simulation_duration(Duration::from_secs(1_000_000))
        .build();
    let answer = body(load.body_bytes);
    sim.host("server", move || {
        let answer = answer.clone();
        async move {
            let env = SimEnv::shared("server", 1, Trace::default());
            let listener = env.listen("0.0.0.0:8080").await?;
            web::serve(listener, move |_req, _peer| {
                let answer = answer.clone();
                async move {
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(web::full(answer))
                        .expect("static response parts are valid")
                }
            })
            .await?;
            Ok(())
        }
    });
    let started = Instant::now(); // determinism: real-env (benchmark)
    sim.client("client", async move {
        let env: SharedEnv = SimEnv::shared("client", 1, Trace::default());
        let client: web::Client<Full<Bytes>> = web::client(env, Duration::from_secs(30));
        let per_task = load.requests / load.concurrency.max(1);
        let tasks: Vec<_> = (0..load.concurrency.max(1))
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move {
                    for _ in 0..per_task {
                        let request =
                            http::Request::get("http://server:8080/api/v1/applications/app")
                                .body(Full::new(Bytes::new()))
                                .map_err(|e| e.to_string())?;
                        let response = client.request(request).await.map_err(|e| e.to_string())?;
                        let bytes = response
                            .into_body()
                            .collect()
                            .await
                            .map_err(|e| e.to_string())?
                            .to_bytes();
                        if decode {
                            let _: Value =
                                serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
                        }
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        Ok(())
    });
    sim.run().map_err(|e| e.to_string())?;
    Ok((started.elapsed().as_secs_f64(), sim.elapsed().as_secs_f64()))
}

/// Wall seconds for `steps` simulated steps of `hosts` idle hosts (each a sleeping task).
fn idle(hosts: usize, steps: u32) -> Result<f64, String> {
    let mut sim = turmoil::Builder::new()
        .rng_seed(1)
        .tick_duration(TICK)
        .simulation_duration(TICK * (steps + 10))
        .build();
    for i in 0..hosts {
        sim.host(format!("idle-{i}"), || async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    let started = Instant::now(); // determinism: real-env (benchmark)
    for _ in 0..steps {
        sim.step().map_err(|e| e.to_string())?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Runs every measurement; the record written to `reports/perf/sim.json`.
pub fn run(load: Load) -> Result<Value, String> {
    let mut rows = Vec::new();
    for (concurrency, decode) in [
        (1, false),
        (load.concurrency, false),
        (load.concurrency, true),
    ] {
        let load = Load {
            concurrency,
            ..load
        };
        let (wall, sim_seconds) = requests(load, decode)?;
        let n = (load.requests / concurrency.max(1)) * concurrency.max(1);
        rows.push(json!({
            "requests": n,
            "concurrency": concurrency,
            "body_bytes": load.body_bytes,
            "decode": decode,
            "wall_s": wall,
            "sim_s": sim_seconds,
            "us_per_request": wall * 1e6 / n as f64,
            "steps": (sim_seconds / TICK.as_secs_f64()).round() as u64,
        }));
    }
    let steps = 60_000;
    let idle_wall = idle(10, steps)?;
    Ok(json!({
        "http": rows,
        "idle": {
            "hosts": 10,
            "steps": steps,
            "wall_s": idle_wall,
            "us_per_step": idle_wall * 1e6 / f64::from(steps),
        },
    }))
}

/// The record as a Markdown table.
pub fn table(record: &Value) -> String {
    let mut out = String::from(
        "| requests | in flight | body bytes | JSON decoded | wall s | µs per request | simulated steps |\n|---|---|---|---|---|---|---|\n",
    );
    for row in record["http"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} | {:.1} | {} |\n",
            row["requests"],
            row["concurrency"],
            row["body_bytes"],
            if row["decode"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            row["wall_s"].as_f64().unwrap_or_default(),
            row["us_per_request"].as_f64().unwrap_or_default(),
            row["steps"],
        ));
    }
    let idle = &record["idle"];
    out.push_str(&format!(
        "\nIdle: {} hosts, {} steps of {} ms in {:.2} s wall ({:.1} µs a step).\n",
        idle["hosts"],
        idle["steps"],
        TICK.as_millis(),
        idle["wall_s"].as_f64().unwrap_or_default(),
        idle["us_per_step"].as_f64().unwrap_or_default(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_json_of_at_least_the_asked_size() {
        let b = body(1200);
        assert!(b.len() >= 1200 && b.len() < 1400, "{}", b.len());
        assert!(serde_json::from_slice::<Value>(&b).is_ok());
    }

    #[test]
    fn every_request_is_answered_in_simulated_time() {
        let (_, sim_seconds) = requests(
            Load {
                requests: 20,
                concurrency: 4,
                body_bytes: 300,
            },
            true,
        )
        .expect("the benchmark runs");
        assert!(sim_seconds > 0.0 && sim_seconds < 10.0, "{sim_seconds}");
    }
}
