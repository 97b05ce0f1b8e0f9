use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::super::*;
use crate::platform::store::records::{RunnerKind, RunnerLog, RunnerObject};
use crate::platform::store::Change;

/// The database as the SQL of migration 2 keeps it: objects upserted and deleted by kind and
/// key (a build's log goes with it), log lines inserted unless their line is there.
#[derive(Debug, Default)]
struct Model {
    objects: BTreeMap<(RunnerKind, String), Value>,
    logs: BTreeMap<String, BTreeMap<u64, String>>,
}

impl Model {
    fn commit(&mut self, changes: Vec<Change>) {
        for change in changes {
            match change {
                Change::RunnerPut { kind, key, value } => {
                    self.objects.insert((kind, key), value);
                }
                Change::RunnerDelete { kind, key } => {
                    self.objects.remove(&(kind, key.clone()));
                    if kind == RunnerKind::Build {
                        self.logs.remove(&key);
                    }
                }
                Change::RunnerLog { build, from, lines } => {
                    let log = self.logs.entry(build).or_default();
                    for (n, line) in lines.into_iter().enumerate() {
                        log.entry(from + n as u64).or_insert(line);
                    }
                }
                other => panic!("not a runner change: {other:?}"),
            }
        }
    }

    /// What `Database::load` reads back.
    fn load(&self) -> (Vec<RunnerObject>, Vec<RunnerLog>) {
        let objects = self
            .objects
            .iter()
            .map(|((kind, key), value)| RunnerObject {
                kind: *kind,
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        let logs = self
            .logs
            .iter()
            .map(|(build, lines)| RunnerLog {
                build: build.clone(),
                lines: lines.values().cloned().collect(),
            })
            .collect();
        (objects, logs)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Pipeline {
        pipeline: u8,
        concurrency: Option<u32>,
        previous: bool,
        all: bool,
        pattern: bool,
    },
    Build {
        pipeline: u8,
        branch: u8,
        delivery: Option<u8>,
        tick: Option<u8>,
        trigger: Option<u8>,
        parent: Option<u16>,
    },
    Claim(u8),
    Cron(u8),
    Missed(u8, u8),
    Lease(u8),
    Poll(u8, Option<u8>),
    Renew(u8, u8, u8),
    Report {
        task: u16,
        error: bool,
        retriable: bool,
        stale: bool,
    },
    Heartbeat(u8),
    Engine(u16, Option<i32>),
    Log(u16, u8, u8),
    Proxy(u8),
    /// Advance the clock by this many seconds (days at the high end: builds and claims
    /// are forgotten).
    Tick(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (
            0..3u8,
            proptest::option::of(0..3u32),
            any::<bool>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(pipeline, concurrency, previous, all, pattern)| Op::Pipeline {
                pipeline,
                concurrency,
                previous,
                all: all && previous,
                pattern
            }),
        4 => (
            0..3u8,
            0..2u8,
            proptest::option::of(0..4u8),
            proptest::option::of(0..4u8),
            proptest::option::of(0..2u8),
            proptest::option::of(any::<u16>())
        )
            .prop_map(|(pipeline, branch, delivery, tick, trigger, parent)| Op::Build {
                pipeline,
                branch,
                delivery,
                tick,
                trigger,
                parent
            }),
        1 => (0..4u8).prop_map(Op::Claim),
        1 => (0..2u8).prop_map(Op::Cron),
        1 => (0..2u8, 0..6u8).prop_map(|(t, k)| Op::Missed(t, k)),
        1 => (0..2u8).prop_map(Op::Lease),
        4 => (0..2u8, proptest::option::of(0..2u8)).prop_map(|(a, r)| Op::Poll(a, r)),
        1 => (0..2u8, 0..2u8, any::<u8>()).prop_map(|(a, r, t)| Op::Renew(a, r, t)),
        4 => (any::<u16>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(task, error, retriable, stale)| Op::Report {
                task,
                error,
                retriable,
                stale: stale && error
            }
        ),
        1 => (0..2u8).prop_map(Op::Heartbeat),
        2 => (any::<u16>(), proptest::option::of(0..2i32)).prop_map(|(b, c)| Op::Engine(b, c)),
        2 => (any::<u16>(), 0..3u8, 0..4u8).prop_map(|(b, f, n)| Op::Log(b, f, n)),
        1 => (0..2u8).prop_map(Op::Proxy),
        1 => prop_oneof![
            3 => 1..400u32,
            1 => (200 * 24 * 3600)..(201 * 24 * 3600u32)
        ]
        .prop_map(Op::Tick),
    ]
}

const AGENTS: [&str; 2] = ["agent-a", "agent-b"];
const REPLICAS: [&str; 2] = ["pod-0", "pod-1"];

fn nth<T: Clone>(items: Vec<T>, n: u16) -> Option<T> {
    (!items.is_empty()).then(|| items[n as usize % items.len()].clone())
}

fn apply(q: &mut Queue, op: &Op, now: &mut u64) {
    let pipeline = |n: u8| format!("demo/p{n}");
    match op.clone() {
        Op::Pipeline {
            pipeline: p,
            concurrency,
            previous,
            all,
            pattern,
        } => {
            let settings = Pipeline {
                concurrency,
                trigger_concurrency: concurrency.map(|c| c + 1),
                terminate_children: pattern,
                terminate_previous_on_branch: previous,
                terminate_all: all,
                terminate_branch_pattern: pattern.then(|| "^feature/".to_string()),
                ..Pipeline::default()
            };
            q.set_pipeline(&pipeline(p), settings, *now);
        }
        Op::Build {
            pipeline: p,
            branch,
            delivery,
            tick,
            trigger,
            parent,
        } => {
            let parent = parent.and_then(|n| nth(q.builds().map(|b| b.id.clone()).collect(), n));
            let request = NewBuild {
                trigger: trigger.map(|t| format!("trigger-{t}")),
                parent,
                pipeline: pipeline(p),
                agent: AGENTS[(p % 2) as usize].into(),
                branch: ["main", "feature/x"][branch as usize].into(),
                steps: vec![Step::new(1000, 0)],
                delivery: delivery.map(|d| format!("d{d}")),
                tick: tick.map(|t| Tick {
                    trigger: "nightly".into(),
                    scheduled_ms: u64::from(t) * 60_000,
                }),
                priority: None,
            };
            if let Some(d) = &request.delivery {
                if q.claim_delivery(&delivery_key(d), *now).is_err() {
                    return;
                }
            }
            let seen = q.admitted_counts(
                &request.pipeline,
                &request.branch,
                request.trigger.as_deref(),
            );
            q.make_build(request, Some(seen), *now);
        }
        Op::Claim(d) => {
            let _ = q.claim_delivery(&delivery_key(&format!("d{d}")), *now);
        }
        Op::Cron(t) => {
            q.register_cron(
                ["nightly", "hourly"][t as usize],
                Duration::from_secs(60),
                *now,
            );
        }
        Op::Missed(t, k) => {
            let tick = Tick {
                trigger: ["nightly", "hourly"][t as usize].into(),
                scheduled_ms: u64::from(k) * 60_000,
            };
            let _ = q.report_missed(tick, *now);
        }
        Op::Lease(h) => {
            q.take_lease(REPLICAS[h as usize], Duration::from_secs(30), *now);
        }
        Op::Poll(a, r) => {
            q.poll(AGENTS[a as usize], r.map(|r| REPLICAS[r as usize]), *now);
        }
        Op::Renew(a, r, t) => {
            let ids: Vec<String> = q.tasks().map(|t| t.task.id.clone()).collect();
            let held: Vec<String> = ids.into_iter().skip(t as usize % 3).step_by(2).collect();
            q.renew(AGENTS[a as usize], REPLICAS[r as usize], &held, *now);
        }
        Op::Report {
            task,
            error,
            retriable,
            stale,
        } => {
            let Some(queued) = nth(q.tasks().cloned().collect(), task) else {
                return;
            };
            let status = TaskStatus {
                status: if error {
                    Outcome::Error
                } else {
                    Outcome::Success
                },
                occurred_at: "t".into(),
                status_revision: queued.task.metadata.current_status_revision + u64::from(!stale),
                is_retriable: retriable,
                reason: error.then(|| "AlreadyExists".into()),
            };
            let _ = q.report(&queued.agent, &queued.task.id, &status, *now);
        }
        Op::Heartbeat(a) => q.heartbeat(AGENTS[a as usize], *now),
        Op::Engine(b, code) => {
            if let Some(build) = nth(q.builds().map(|b| b.id.clone()).collect(), b) {
                q.engine_report(&build, code, *now);
            }
        }
        Op::Log(b, from, n) => {
            if let Some(build) = nth(q.builds().map(|b| b.id.clone()).collect(), b) {
                let have = q.log(&build, 0).map_or(0, <[String]>::len) as u64;
                let from = have.saturating_sub(u64::from(from));
                let lines = (0..n).map(|i| format!("{build} line {}", from + u64::from(i)));
                let _ = q.append_log(&build, from, lines.collect(), 1 << 20);
            }
        }
        Op::Proxy(a) => {
            q.proxy(AGENTS[a as usize], json!({"url": "http://x"}), *now);
        }
        Op::Tick(seconds) => {
            *now += u64::from(seconds) * 1000;
            q.tick(*now);
        }
    }
}

fn settings(variant: Variant) -> Settings {
    Settings {
        variant,
        ..Settings::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Whatever the queue went through, the queue rebuilt from what its journal committed
    /// equals it object for object, and goes on the same way (the ids it makes next, what
    /// a poll hands out).
    #[test]
    fn a_queue_rebuilt_from_its_journal_equals_the_live_one(
        ops in proptest::collection::vec(op(), 1..120),
        hardened in any::<bool>(),
        restart_at in any::<prop::sample::Index>(),
    ) {
        let variant = if hardened { Variant::Hardened } else { Variant::Faithful };
        let mut live = Queue::new(settings(variant));
        live.track();
        let mut db = Model::default();
        let mut now = 1_700_000_000_000u64;
        let restart = restart_at.index(ops.len());
        for (i, op) in ops.iter().enumerate() {
            apply(&mut live, op, &mut now);
            db.commit(live.take_changes());
            if i == restart {
                // A restart midway: the process that goes on is the rebuilt one.
                let (objects, logs) = db.load();
                live = Queue::restore(settings(variant), &objects, &logs).unwrap();
                live.track();
            }
        }
        let (objects, logs) = db.load();
        let mut rebuilt = Queue::restore(settings(variant), &objects, &logs).unwrap();
        prop_assert_eq!(rebuilt.export(), live.export());
        prop_assert_eq!(rebuilt.export_logs(), live.export_logs());
        for build in live.builds().map(|b| b.id.clone()).collect::<Vec<_>>() {
            let bytes = |q: &Queue| q.logs.get(&build).map_or(0, |l| l.1);
            prop_assert_eq!(bytes(&rebuilt), bytes(&live), "the log's bytes count against its limit");
        }
        now += 120_000;
        for q in [&mut live, &mut rebuilt] {
            q.create_build("demo/p0", "agent-a", vec![Step::new(1, 0)], now);
        }
        prop_assert_eq!(
            rebuilt.poll("agent-a", Some("pod-0"), now),
            live.poll("agent-a", Some("pod-0"), now)
        );
        prop_assert_eq!(rebuilt.export(), live.export());
    }
}

#[test]
fn without_tracking_nothing_is_recorded() {
    let mut q = Queue::new(Settings::default());
    q.create_build("p", "agent", vec![Step::new(1, 0)], 0);
    assert!(q.take_changes().is_empty());
}

#[test]
fn a_build_forgotten_after_its_retention_is_deleted_with_its_log() {
    let mut q = Queue::new(Settings::default());
    q.track();
    let b = q.create_build("p", "agent", vec![Step::new(1, 0)], 0);
    q.engine_report(&b, None, 1).unwrap();
    q.append_log(&b, 0, vec!["one".into(), "two".into()], 1 << 20)
        .unwrap();
    let made = q.take_changes();
    assert!(made.contains(&Change::RunnerLog {
        build: b.clone(),
        from: 0,
        lines: vec!["one".into(), "two".into()],
    }));
    assert!(made
        .iter()
        .any(|c| matches!(c, Change::RunnerPut { kind: RunnerKind::Build, key, .. } if *key == b)));
    q.engine_report(&b, Some(0), 2).unwrap();
    q.take_changes();
    q.tick(2 + BUILD_RETENTION.as_millis() as u64);
    let forgotten = q.take_changes();
    assert!(
        forgotten.contains(&Change::RunnerDelete {
            kind: RunnerKind::Build,
            key: b
        }),
        "{forgotten:#?}"
    );
}

#[test]
fn an_unreadable_stored_object_is_named_by_kind_and_key() {
    let objects = [RunnerObject {
        kind: RunnerKind::Build,
        key: "b00007".into(),
        value: json!({"id": "b00007"}),
    }];
    let error = Queue::restore(Settings::default(), &objects, &[]).unwrap_err();
    assert_eq!((error.kind, error.key.as_str()), ("build", "b00007"));
    assert!(error.to_string().contains("missing field"), "{error}");
}
