//! The dedup cache over turmoil: the real Redis client (`redis` crate) against the simulated
//! RESP server — values, TTLs in simulated time, a crash that loses every key, and a client
//! that reconnects by itself after the server comes back.

use std::time::Duration;

use bytes::Bytes;
use orrery_sim::env::SimEnv;
use orrery_sim::trace::Trace;
use orrery_system::runtime::cache::{self, Client};

use crate::support::*;

/// The cache server on host `cache`, port 6379; a restart boots it with empty memory.
fn cache_host(sim: &mut turmoil::Sim<'static>, trace: &Trace) {
    let host_trace = trace.clone();
    sim.host("cache", move || {
        let env = SimEnv::shared("cache", SEED, host_trace.clone());
        async move {
            cache::run(env, "0.0.0.0:6379").await?;
            Ok(())
        }
    });
}

#[test]
fn the_redis_client_stores_expires_and_survives_a_cache_restart_with_empty_memory() {
    let mut sim = sim(Duration::from_secs(600));
    let trace = Trace::default();
    cache_host(&mut sim, &trace);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let client_trace = trace.clone();
    sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, client_trace);
        let cache = Client::new(env.clone(), "cache:6379", Duration::from_secs(2));
        assert_eq!(cache.get("k").await?, None, "absent");
        cache
            .put("k", Bytes::from_static(b"v1"), Duration::from_secs(1200))
            .await?;
        cache
            .put(
                "short",
                Bytes::from_static(b"s"),
                Duration::from_millis(1500),
            )
            .await?;
        assert_eq!(cache.get("k").await?, Some(Bytes::from_static(b"v1")));
        assert_eq!(cache.get("short").await?, Some(Bytes::from_static(b"s")));
        env.sleep(Duration::from_secs(2)).await;
        assert_eq!(cache.get("short").await?, None, "expired in simulated time");
        cache.delete("k").await?;
        assert_eq!(cache.get("k").await?, None, "deleted");
        cache
            .put("k", Bytes::from_static(b"v2"), Duration::from_secs(1200))
            .await?;
        done_tx.send(()).unwrap();
        // The harness crashes and restarts the cache here.
        env.sleep(Duration::from_secs(5)).await;
        assert_eq!(
            cache.get("k").await?,
            None,
            "a restarted cache has empty memory; the client reconnected by itself"
        );
        Ok(())
    });
    while done_rx.try_recv().is_err() {
        sim.step().unwrap();
    }
    sim.crash("cache");
    for _ in 0..100 {
        sim.step().unwrap();
    }
    sim.bounce("cache");
    sim.run().unwrap();
}

#[test]
fn a_cache_that_is_down_fails_calls_with_a_typed_error_within_the_timeout() {
    let mut sim = sim(Duration::from_secs(60));
    let trace = Trace::default();
    sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, trace);
        let cache = Client::new(env.clone(), "nowhere:6379", Duration::from_secs(1));
        let started = env.elapsed();
        let error = cache.get("k").await.unwrap_err();
        assert!(
            matches!(
                error,
                cache::Error::Connect { .. } | cache::Error::Timeout(_)
            ),
            "{error}"
        );
        assert!(env.elapsed() - started <= Duration::from_secs(2));
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn a_connection_that_went_silent_is_dropped_so_calls_recover_after_a_partition_heals() {
    // A call on a partitioned connection fails within the timeout; after the repair the next
    // call works at once. (The regression swarm-reporter seed 13 found — a connection whose
    // requests hit the redis crate's response timeout was kept, so every later call waited
    // out the timeout on it — needs concurrent callers to show; `make reports` runs that seed.)
    let mut sim = sim(Duration::from_secs(600));
    let trace = Trace::default();
    cache_host(&mut sim, &trace);
    let (phase_tx, phase_rx) = std::sync::mpsc::channel();
    sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, trace);
        let cache = Client::new(env.clone(), "cache:6379", Duration::from_secs(1));
        cache
            .put("k", Bytes::from_static(b"v"), Duration::from_secs(600))
            .await?;
        phase_tx.send("partition").unwrap();
        env.sleep(Duration::from_millis(100)).await;
        assert!(
            cache.get("k").await.is_err(),
            "partitioned: the call times out"
        );
        phase_tx.send("repair").unwrap();
        env.sleep(Duration::from_millis(100)).await;
        let started = env.elapsed();
        assert_eq!(cache.get("k").await?, Some(Bytes::from_static(b"v")));
        assert!(
            env.elapsed() - started < Duration::from_millis(500),
            "the first call after the repair uses a new connection, not the silent one"
        );
        Ok(())
    });
    loop {
        match phase_rx.try_recv() {
            Ok("partition") => sim.partition("client", "cache"),
            Ok(_) => sim.repair("client", "cache"),
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
            Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
        }
        if sim.step().unwrap() {
            break;
        }
    }
}
