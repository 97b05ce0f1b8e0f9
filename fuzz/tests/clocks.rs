//! Components under a wall clock that steps: a replica whose clock an NTP correction moves
//! back must not take its lapsed lease for a held one (hardened cronus times its lease on the
//! monotonic clock; its ticks stay wall time, as cron's are).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orrery_fuzz::memory::{MemoryEnv, Network};
use orrery_system::core::Variant;
use orrery_system::env::{BoxFuture, BoxStream, Env, Identity, Listener, Observation, SharedEnv};
use orrery_system::observe::RunnerEvent;
use orrery_system::platform::runner::{self, cronus, Builds, Settings};

/// A host whose wall clock is stepped back by `back` once `after` has passed; it keeps what
/// it observes.
struct SteppedClock {
    inner: MemoryEnv,
    after: Duration,
    back: Duration,
    seen: Mutex<Vec<Observation>>,
}

impl Env for SteppedClock {
    fn identity(&self) -> &Identity {
        self.inner.identity()
    }
    fn elapsed(&self) -> Duration {
        self.inner.elapsed()
    }
    fn unix_millis(&self) -> u64 {
        let now = self.inner.unix_millis();
        if self.inner.elapsed() >= self.after {
            now - self.back.as_millis() as u64
        } else {
            now
        }
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.inner.sleep(duration)
    }
    fn random_u64(&self) -> u64 {
        self.inner.random_u64()
    }
    fn connect(&self, addr: &str) -> BoxFuture<'static, std::io::Result<BoxStream>> {
        self.inner.connect(addr)
    }
    fn listen(&self, addr: &str) -> BoxFuture<'static, std::io::Result<Box<dyn Listener>>> {
        self.inner.listen(addr)
    }
    fn observe(&self, observation: Observation) {
        self.seen.lock().unwrap().push(observation);
    }
}

/// The replica holds the lease and renews it; its wall clock steps back an hour and then the
/// platform stops answering. Its last renewal's term (15 s) must end on time: it stops
/// firing as leader, as the platform has already let the lease lapse. (Timed on the wall
/// clock, the term would last another hour.)
#[test]
fn a_hardened_cronus_whose_wall_clock_steps_back_gives_its_lease_up_on_time() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let network = Arc::new(Network::default());
        let platform: SharedEnv = Arc::new(MemoryEnv::new("platform", network.clone()));
        let builds = Builds::new(
            Settings::default(),
            BTreeMap::from([("agent-token".to_string(), "agent-1".to_string())]),
            "trigger",
        );
        let listener = platform.listen("platform:8086").await.unwrap();
        let serving = tokio::spawn(runner::serve(platform.clone(), builds.clone(), listener));
        let replica = Arc::new(SteppedClock {
            inner: MemoryEnv::new("cronus-0", network.clone()),
            after: Duration::from_secs(12),
            back: Duration::from_secs(3600),
            seen: Mutex::default(),
        });
        let mut config =
            cronus::Config::new(Variant::Hardened, "cronus-0", "platform:8086", "trigger");
        config.triggers = vec![cronus::Trigger {
            name: "nightly".into(),
            every: Duration::from_secs(24 * 3600),
            build: serde_json::json!({"pipeline": "demo/build", "agent": "agent-1"}),
        }];
        tokio::spawn(cronus::run(replica.clone(), config));
        let leader = |replica: &SteppedClock| -> Vec<bool> {
            replica
                .seen
                .lock()
                .unwrap()
                .iter()
                .filter_map(|o| match o {
                    Observation::Runner(RunnerEvent::CronLeader { leader, .. }) => Some(*leader),
                    _ => None,
                })
                .collect()
        };
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_eq!(leader(&replica), [true], "it took the lease");
        // The platform goes away (its listener closes): no renewal succeeds from now on.
        serving.abort();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            leader(&replica),
            [true, false],
            "its last term (renewed at 10 s, 15 s long) ended by 42 s"
        );
    });
}
