//! Drawing a swarm family's seed: [`concretize`] turns a scenario with a `swarm:` section
//! (its types: [`super::swarm`]) and a seed into the plain scenario that seed runs; the seed
//! farm's mutations draw one more fault ([`draw_fault`]) or new knob values
//! ([`redraw_knobs`]) the same way.

use std::collections::BTreeMap;
use std::time::Duration;

use orrery_system::env::{Point, Rng};

use super::duration::Span;
use super::knobs::ApiServerPatch;
use super::model::{Buggify, FaultStep, LatencyChange, PlatformChange, Scale, Scenario};
use super::swarm::*;

/// The latency bound a latency fault returns a link to (the harness's default link bound).
pub const DEFAULT_LINK_LATENCY: Duration = Duration::from_millis(5);

fn between(rng: &mut Rng, [low, high]: [Span; 2]) -> Duration {
    let (low, high) = (low.0.as_millis() as u64, high.0.as_millis() as u64);
    Duration::from_millis(low + rng.below(high.saturating_sub(low) + 1))
}

fn between_f64(rng: &mut Rng, [low, high]: [f64; 2]) -> f64 {
    // Rounded to 1e-4 so the concrete scenario file says exactly what ran.
    let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((low + (high - low) * unit) * 1e4).round() / 1e4
}

fn between_u32(rng: &mut Rng, [low, high]: [u32; 2]) -> u32 {
    low + rng.below(u64::from(high.saturating_sub(low)) + 1) as u32
}

/// Draws each range that is given into its knob.
fn draw(rng: &mut Rng, range: Option<[Span; 2]>, knob: &mut Duration) {
    if let Some(range) = range {
        *knob = between(rng, range);
    }
}

/// The hosts a swarm target names: a host name, or `role:<role>` for every host with that
/// role (`role:reporter`), in topology order.
pub fn hosts_named(scenario: &Scenario, target: &str) -> Vec<String> {
    match target.strip_prefix("role:") {
        Some(role) => {
            let role: Option<super::model::Role> =
                serde_json::from_value(serde_json::Value::String(role.to_string())).ok();
            scenario
                .topology
                .hosts
                .iter()
                .filter(|h| role.is_some_and(|r| h.has(r)))
                .map(|h| h.name.clone())
                .collect()
        }
        None => vec![target.to_string()],
    }
}

/// Links with role targets expanded into every pair of hosts they name (no self-links).
fn expand_links(scenario: &Scenario, links: &[[String; 2]]) -> Vec<[String; 2]> {
    let mut out = Vec::new();
    for [a, b] in links {
        for x in hosts_named(scenario, a) {
            for y in hosts_named(scenario, b) {
                if x != y {
                    out.push([x.clone(), y]);
                }
            }
        }
    }
    out
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len() as u64) as usize]
}

/// The plain scenario `seed` runs: scripted faults plus the drawn ones, drawn knob values,
/// no `swarm:`, `seeds: [seed]`. A scenario without `swarm:` comes back unchanged.
pub fn concretize(scenario: &Scenario, seed: u64) -> Scenario {
    let Some(swarm) = &scenario.swarm else {
        return scenario.clone();
    };
    let mut rng = Rng::derive(seed, "swarm");
    let mut concrete = scenario.clone();
    concrete.swarm = None;
    concrete.seeds = vec![seed];
    if let Some(ranges) = &swarm.knobs.apiserver {
        if let Some(range) = ranges.compaction_window {
            concrete.apiserver.compaction_window = between(&mut rng, range);
        }
        if let Some(range) = ranges.bookmark_interval {
            concrete.apiserver.bookmark_interval = between(&mut rng, range);
        }
    }
    draw_knobs(
        &mut Rng::derive(seed, "swarm#knobs"),
        &swarm.knobs,
        &mut concrete,
    );
    if let Some(draw) = &swarm.buggify {
        // Drawn from its own stream, so adding fault points never moves a seed's faults.
        let mut rng = Rng::derive(seed, "swarm#buggify");
        let from: &[Point] = if draw.points.is_empty() {
            Point::ALL
        } else {
            &draw.points
        };
        let mut points: Vec<Point> = from
            .iter()
            .copied()
            .filter(|_| rng.chance(draw.keep))
            .collect();
        if points.is_empty() && !from.is_empty() {
            points.push(*pick(&mut rng, from));
        }
        concrete.buggify = Some(Buggify {
            probability: between_f64(&mut rng, draw.probability),
            points,
        });
    }
    // Swarm testing: switch some kinds off for this seed (never all of them).
    let mut kept: Vec<&SwarmFault> = swarm
        .faults
        .iter()
        .filter(|_| rng.chance(swarm.keep))
        .collect();
    if kept.is_empty() && !swarm.faults.is_empty() {
        kept.push(pick(&mut rng, &swarm.faults));
    }
    let total_weight: u64 = kept.iter().map(|f| u64::from(f.weight.max(1))).sum();
    let [low, high] = swarm.count;
    let count = low + rng.below(u64::from(high.saturating_sub(low)) + 1) as u32;
    // Each target (link, host, the API server's knobs) holds one fault at a time.
    let mut busy: BTreeMap<String, Vec<(Duration, Duration)>> = BTreeMap::new();
    let mut drawn: Vec<FaultStep> = Vec::new();
    for _ in 0..count {
        if total_weight == 0 {
            break;
        }
        let kind = by_weight(&mut rng, &kept, total_weight);
        let start = between(&mut rng, swarm.window);
        let end = (start + between(&mut rng, kind.lasts)).min(scenario.duration);
        let (target, steps) = steps(&mut rng, kind, &concrete, start, end);
        let windows = busy.entry(target).or_default();
        if windows.iter().any(|(s, e)| start <= *e && *s <= end) {
            continue; // overlaps a fault already drawn on this target: skip it
        }
        windows.push((start, end));
        drawn.extend(steps);
    }
    drawn.sort_by_key(|s| s.at);
    concrete.faults.extend(drawn);
    concrete
}

/// Draws the reporter, workload, platform and tunnel knobs (from their own stream, so a
/// family that adds one never moves its seeds' faults).
fn draw_knobs(rng: &mut Rng, knobs: &SwarmKnobs, concrete: &mut Scenario) {
    if let Some(r) = &knobs.reporter {
        if let Some(range) = r.replicas {
            concrete.reporter.replicas = Some(between_u32(rng, range));
        }
        if let Some(range) = r.queue_capacity {
            concrete.reporter.queue_capacity = between_u32(rng, range) as usize;
        }
        if let Some(range) = r.workers {
            concrete.reporter.workers = between_u32(rng, range) as usize;
        }
    }
    if let Some(w) = &knobs.workload {
        draw(rng, w.commit_every, &mut concrete.workload.commit_every);
        draw(rng, w.churn_every, &mut concrete.workload.churn_every);
        draw(
            rng,
            w.health_flap_every,
            &mut concrete.workload.health_flap_every,
        );
    }
    if let Some(p) = &knobs.platform {
        draw(rng, p.api_latency, &mut concrete.platform.api_latency);
        draw(rng, p.handler_delay, &mut concrete.platform.handler_delay);
    }
    if let Some(t) = &knobs.tunnel {
        draw(rng, t.request_every, &mut concrete.tunnel.request_every);
        draw(rng, t.execute_delay, &mut concrete.tunnel.execute_delay);
        draw(rng, t.retry_after, &mut concrete.tunnel.retry_after);
    }
    if let (Some(r), Some(runner)) = (&knobs.runner, concrete.runner.as_mut()) {
        if let Some(range) = r.concurrency {
            runner.concurrency = Some(between_u32(rng, range));
        }
        if let Some(range) = r.burst {
            runner.burst = between_u32(rng, range).max(1);
        }
        if r.step.is_some() {
            let mut length = runner.steps.first().map(|s| s.duration).unwrap_or_default();
            draw(rng, r.step, &mut length);
            runner.steps = vec![crate::scenario::model::RunnerStep {
                duration: length,
                exit_code: 0,
                lines: 0,
                line_bytes: 0,
            }];
        }
        if let Some(range) = r.lost_requests {
            runner.lost_requests = between_u32(rng, range).min(100) as u8;
        }
        if let Some(range) = r.lost_answers {
            runner.lost_answers = between_u32(rng, range).min(100) as u8;
        }
        // Drawn last: families without it draw as before.
        if let Some(range) = r.lines_per_second {
            let rate = between_u32(rng, range);
            for step in &mut runner.steps {
                step.lines = (u64::from(rate) * step.duration.as_millis() as u64 / 1000).min(
                    u64::from(orrery_system::platform::runner::queue::MAX_STEP_LINES),
                ) as u32;
            }
        }
        // After the lines: families without these draw as before.
        if let Some(range) = r.branch_concurrency {
            runner.branch_concurrency = Some(between_u32(rng, range).max(1));
        }
        if let Some(range) = r.account_concurrency {
            runner.account_concurrency = Some(between_u32(rng, range));
        }
        // Last: families without it draw as before.
        if let Some(range) = r.trigger_concurrency {
            runner.trigger_concurrency = Some(between_u32(rng, range).max(1));
        }
    }
}

/// The reporter replica count a run starts with.
fn starting_replicas(scenario: &Scenario) -> u32 {
    scenario.reporter.replicas.unwrap_or_else(|| {
        scenario
            .topology
            .hosts
            .iter()
            .filter(|h| h.has(super::model::Role::Reporter))
            .count() as u32
    })
}

fn step(at: Duration) -> FaultStep {
    FaultStep {
        at,
        partition: None,
        repair: None,
        crash: None,
        restart: None,
        latency: None,
        apiserver: None,
        scale: None,
        platform: None,
        flush: None,
        unregister: None,
        rotate_token: None,
        git: None,
    }
}

/// The fault and its healing, and the target they occupy.
fn steps(
    rng: &mut Rng,
    kind: &SwarmFault,
    scenario: &Scenario,
    start: Duration,
    end: Duration,
) -> (String, Vec<FaultStep>) {
    let (mut on, mut off) = (step(start), step(end));
    let target = if let Some(links) = &kind.partition {
        let links = expand_links(scenario, links);
        let link = pick(rng, &links).clone();
        on.partition = Some(link.clone());
        off.repair = Some(link.clone());
        format!("link {} {}", link[0], link[1])
    } else if let Some(hosts) = &kind.crash {
        let hosts: Vec<String> = hosts
            .iter()
            .flat_map(|h| hosts_named(scenario, h))
            .collect();
        let host = pick(rng, &hosts).clone();
        on.crash = Some(host.clone());
        off.restart = Some(host.clone());
        format!("host {host}")
    } else if let Some(links) = &kind.latency {
        let links = expand_links(scenario, links);
        let link = pick(rng, &links).clone();
        let max = kind
            .max
            .map_or(DEFAULT_LINK_LATENCY, |range| between(rng, range));
        on.latency = Some(LatencyChange {
            between: link.clone(),
            max,
        });
        off.latency = Some(LatencyChange {
            between: link.clone(),
            max: DEFAULT_LINK_LATENCY,
        });
        format!("link {} {}", link[0], link[1])
    } else if let Some(range) = kind.scale {
        let every = between(
            rng,
            kind.every
                .unwrap_or([Span(Duration::from_secs(5)), Span(Duration::from_secs(15))]),
        );
        on.scale = Some(Scale {
            replicas: between_u32(rng, range).max(1),
            every,
        });
        off.scale = Some(Scale {
            replicas: starting_replicas(scenario),
            every,
        });
        "reporter replicas".to_string()
    } else if let Some(ranges) = &kind.platform {
        let pick_change = |rng: &mut Rng| PlatformChange {
            api_latency: ranges.api_latency.map(|r| between(rng, r)),
            handler_delay: ranges.handler_delay.map(|r| between(rng, r)),
            reject: None,
            runner_silent: None,
        };
        on.platform = Some(pick_change(rng));
        off.platform = Some(PlatformChange {
            api_latency: ranges.api_latency.map(|_| scenario.platform.api_latency),
            handler_delay: ranges
                .handler_delay
                .map(|_| scenario.platform.handler_delay),
            reject: None,
            runner_silent: None,
        });
        "platform knobs".to_string()
    } else {
        let mut set = ApiServerPatch::default();
        let mut back = ApiServerPatch::default();
        for (knob, range) in kind.apiserver.iter().flatten() {
            let value = between_f64(rng, *range);
            match knob.as_str() {
                "cut_stream_rate" => {
                    set.cut_stream_rate = Some(value);
                    back.cut_stream_rate = Some(scenario.apiserver.cut_stream_rate);
                }
                "throttle_rate" => {
                    set.throttle_rate = Some(value);
                    back.throttle_rate = Some(scenario.apiserver.throttle_rate);
                }
                _ => {} // the parser refuses other knobs
            }
        }
        on.apiserver = Some(set);
        off.apiserver = Some(back);
        "apiserver knobs".to_string()
    };
    (target, vec![on, off])
}

/// A fault kind drawn by weight (`total` is the kinds' weights summed, each at least 1).
fn by_weight<'a>(rng: &mut Rng, kinds: &[&'a SwarmFault], total: u64) -> &'a SwarmFault {
    let mut ticket = rng.below(total);
    kinds
        .iter()
        .find(|f| {
            let weight = u64::from(f.weight.max(1));
            if ticket < weight {
                true
            } else {
                ticket -= weight;
                false
            }
        })
        .expect("a ticket below the total weight picks a kind")
}

/// One more fault drawn from `family`'s swarm kinds (every kind, as if all were kept) into
/// `concrete`'s world: the steps that inject it and heal it. The seed farm adds it to a
/// parent's schedule when it mutates a run that reached a rare condition. Empty for a family
/// without `swarm:` faults.
pub fn draw_fault(family: &Scenario, concrete: &Scenario, rng: &mut Rng) -> Vec<FaultStep> {
    let Some(swarm) = &family.swarm else {
        return Vec::new();
    };
    if swarm.faults.is_empty() {
        return Vec::new();
    }
    let kinds: Vec<&SwarmFault> = swarm.faults.iter().collect();
    let total: u64 = kinds.iter().map(|f| u64::from(f.weight.max(1))).sum();
    let kind = by_weight(rng, &kinds, total);
    let start = between(rng, swarm.window);
    let end = (start + between(rng, kind.lasts)).min(concrete.duration);
    steps(rng, kind, concrete, start, end).1
}

/// Draws `family`'s swarm knobs again into `concrete` (from `rng`): the seed farm's "knob
/// redrawn" mutation. Returns false when the family draws no knobs.
pub fn redraw_knobs(family: &Scenario, concrete: &mut Scenario, rng: &mut Rng) -> bool {
    let Some(swarm) = &family.swarm else {
        return false;
    };
    if swarm.knobs.is_empty() {
        return false;
    }
    if let Some(ranges) = &swarm.knobs.apiserver {
        if let Some(range) = ranges.compaction_window {
            concrete.apiserver.compaction_window = between(rng, range);
        }
        if let Some(range) = ranges.bookmark_interval {
            concrete.apiserver.bookmark_interval = between(rng, range);
        }
    }
    draw_knobs(rng, &swarm.knobs, concrete);
    true
}
