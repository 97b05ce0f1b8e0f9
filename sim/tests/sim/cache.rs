//! The dedup cache over turmoil: the real Redis client (`redis` crate) against the simulated
//! RESP server — values, TTLs in simulated time, a crash that loses every key, and a client
//! that reconnects by itself after the server comes back.

use std::time::Duration;

use bytes::Bytes;
use orrery_sim::env::SimEnv;
use orrery_sim::trace::Trace;
use orrery_system::runtime::cache::{self, Client};

use crate::support::*;

#[test]
fn the_redis_client_stores_expires_and_survives_a_cache_restart_with_empty_memory() {
    let mut sim = sim(Duration::from_secs(600));
    let trace = Trace::default();
    let host_trace = trace.clone();
    sim.host("cache", move || {
        let env = SimEnv::shared("cache", SEED, host_trace.clone());
        async move {
            cache::run(env, "0.0.0.0:6379").await?;
            Ok(())
        }
    });
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
