//! Replica counts of a basic canary (no traffic routing: the weight *is* the share of
//! pods), ported from argo-rollouts v1.8 `utils/replicaset/canary.go`
//! (`CalculateReplicaCountsForBasicCanary`, `approximateWeightedCanaryStableReplicaCounts`,
//! `adjustReplicaWithinLimits`) and `replicaset.go` (`resolveFenceposts`): the closest
//! counts to the weight within `maxSurge` extra pods and `maxUnavailable` missing ones.

use serde_json::Value;

/// The spec and available pods of one ReplicaSet, as the count functions read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `spec.replicas`.
    pub spec: i32,
    /// `status.availableReplicas`.
    pub available: i32,
}

/// An int-or-percent (`2` or `"25%"`) resolved against `total`, rounding up or down as
/// `intstr.GetValueFromIntOrPercent` does; unreadable values count as the default 25 %.
fn int_or_percent(value: Option<&Value>, total: i32, round_up: bool) -> i32 {
    let percent = |p: f64| {
        let v = p * f64::from(total) / 100.0;
        (if round_up { v.ceil() } else { v.floor() }) as i32
    };
    match value {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0) as i32,
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()) {
            Some(p) => percent(p),
            None => s.parse().unwrap_or_else(|_| percent(25.0)),
        },
        _ => percent(25.0),
    }
}

/// (maxSurge, maxUnavailable) for `replicas` pods; both zero → unavailable 1
/// (`resolveFenceposts`), unavailable at most `replicas`.
pub fn fenceposts(
    max_surge: Option<&Value>,
    max_unavailable: Option<&Value>,
    replicas: i32,
) -> (i32, i32) {
    if replicas == 0 {
        return (0, 0);
    }
    // Bounded so that no later sum can overflow on absurd input.
    let surge = int_or_percent(max_surge, replicas, true).clamp(0, 1_000_000);
    let mut unavailable = int_or_percent(max_unavailable, replicas, false).clamp(0, 1_000_000);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(replicas))
}

fn tied(weight: i32, total: i32) -> bool {
    let v = f64::from(total) * (f64::from(weight) / 100.0);
    v - v.floor() == 0.5
}

fn delta(weight: i32, canary: i32, total: i32) -> f64 {
    (f64::from(canary * 100) / f64::from(total) - f64::from(weight)).abs()
}

/// (canary, stable) pods closest to `weight` percent of `replicas`, using one surge pod
/// when that is closer; never 0 canary pods for a weight of 1–99 unless that is the only
/// way (one replica, no surge). A tie keeps the first option (rounding up).
pub fn approximate(replicas: i32, weight: i32, max_surge: i32) -> (i32, i32) {
    if replicas == 0 {
        return (0, 0);
    }
    let exact = f64::from(replicas * weight) / 100.0;
    let (ceil, floor) = (exact.ceil() as i32, exact.floor() as i32);
    let zero_allowed = weight == 100 || weight == 0 || (replicas == 1 && max_surge == 0);
    let mut options = Vec::new();
    if ceil < replicas || zero_allowed {
        options.push((ceil, replicas));
    }
    if !tied(weight, replicas) && (floor != 0 || zero_allowed) {
        options.push((floor, replicas));
    }
    if max_surge > 0 {
        options.push((ceil, replicas + 1));
        if !tied(weight, replicas + 1) && (floor != 0 || zero_allowed) {
            options.push((floor, replicas + 1));
        }
    }
    let Some(mut best) = options.first().copied() else {
        return (0, replicas);
    };
    for option in options.into_iter().skip(1) {
        if delta(weight, option.0, option.1) < delta(weight, best.0, best.1) {
            best = option;
        }
    }
    (best.0, best.1 - best.0)
}

/// `GetReplicasForScaleDown`: the pods of `rs` that count as available for a scale-down
/// decision.
fn for_scale_down(rs: Option<Counts>, ignore_availability: bool) -> i32 {
    match rs {
        None => 0,
        Some(rs) if rs.spec < rs.available || ignore_availability => rs.spec,
        Some(rs) => rs.available,
    }
}

fn scale_down_count(drain: Option<Counts>, desired: i32, scale_down: i32, current: i32) -> i32 {
    match drain {
        Some(rs) if rs.spec > desired => desired.max(rs.spec - scale_down),
        _ => current,
    }
}

fn within_limits(
    drain: Option<Counts>,
    adjust: Option<Counts>,
    mut drain_count: i32,
    mut adjust_count: i32,
    max_allowed: i32,
    min_available: i32,
) -> (i32, i32) {
    let mut available = drain.map_or(0, |rs| rs.available.min(drain_count));
    if let Some(adjust_rs) = adjust {
        let over = (adjust_count + drain_count - max_allowed).max(0);
        adjust_count -= over;
        available += adjust_rs.available.min(adjust_count);
        let extra = (adjust_rs.available - adjust_count).max(0);
        let needed = (min_available - available).max(0);
        adjust_count += extra.min(needed);
        let over = (adjust_count + drain_count - max_allowed).max(0);
        drain_count -= over;
    }
    (drain_count, adjust_count)
}

/// The next (canary, stable) `spec.replicas` of a basic canary at `weight`, from the
/// ReplicaSets as they are (`CalculateReplicaCountsForBasicCanary`). `stable` is `None`
/// when there is no separate stable ReplicaSet (then the canary goes to 100 %); `old` is
/// the total of older ReplicaSets' pods (they are scaled down first).
pub fn next_counts(
    replicas: i32,
    weight: i32,
    (max_surge, max_unavailable): (i32, i32),
    new: Option<Counts>,
    stable: Option<Counts>,
    old: i32,
) -> (i32, i32) {
    let (mut desired_new, mut desired_stable) = approximate(replicas, weight, max_surge);
    let mut new_count = new.map_or(0, |rs| rs.spec);
    let mut stable_count = 0;
    match stable {
        Some(rs) => stable_count = rs.spec,
        None => {
            desired_new = replicas;
            desired_stable = 0;
        }
    }
    let max_allowed = replicas + max_surge;
    let total = old + new.map_or(0, |rs| rs.spec) + stable.map_or(0, |rs| rs.spec);
    let mut scale_up = max_allowed - total;
    if let Some(rs) = stable {
        if rs.spec < desired_stable && scale_up > 0 {
            if rs.spec + scale_up < desired_stable {
                stable_count = rs.spec + scale_up;
                scale_up = 0;
            } else {
                stable_count = desired_stable;
                scale_up -= desired_stable - rs.spec;
            }
        }
    }
    if let Some(rs) = new {
        if rs.spec < desired_new && scale_up > 0 {
            new_count = if rs.spec + scale_up < desired_new {
                rs.spec + scale_up
            } else {
                desired_new
            };
        }
    }
    if old > 0 {
        return (new_count, stable_count);
    }
    let min_available = replicas - max_unavailable;
    let increasing = new.is_none_or(|rs| desired_new >= rs.spec);
    let to_scale_down = for_scale_down(new, !increasing) + for_scale_down(stable, increasing);
    if to_scale_down <= min_available {
        return (new_count, stable_count);
    }
    let scale_down = to_scale_down - min_available;
    if !increasing {
        new_count = scale_down_count(new, desired_new, scale_down, new_count);
        (new_count, stable_count) = within_limits(
            new,
            stable,
            new_count,
            stable_count,
            max_allowed,
            min_available,
        );
    } else if stable.is_some() {
        stable_count = scale_down_count(stable, desired_stable, scale_down, stable_count);
        (stable_count, new_count) = within_limits(
            stable,
            new,
            stable_count,
            new_count,
            max_allowed,
            min_available,
        );
    }
    (new_count, stable_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn weights_round_to_the_closest_split_as_upstream() {
        // Upstream's own table (canary_test.go): 10 replicas at 10 % → 1 + 9.
        assert_eq!(approximate(10, 10, 0), (1, 9));
        // 3 replicas at 50 %: tied, the larger canary count wins; with surge 2 + 2.
        assert_eq!(approximate(3, 50, 0), (2, 1));
        assert_eq!(approximate(3, 50, 1), (2, 2));
        // 1–99 % never gives 0 canary pods with two or more replicas.
        assert_eq!(approximate(5, 1, 0), (1, 4));
        assert_eq!(approximate(1, 10, 0), (0, 1));
        assert_eq!(approximate(4, 0, 1), (0, 4));
        assert_eq!(approximate(4, 100, 1), (4, 0));
    }

    #[test]
    fn fenceposts_default_to_a_quarter_and_never_both_zero() {
        assert_eq!(fenceposts(None, None, 10), (3, 2));
        assert_eq!(fenceposts(None, None, 1), (1, 0));
        assert_eq!(fenceposts(Some(&json!(0)), Some(&json!("0%")), 4), (0, 1));
        assert_eq!(fenceposts(Some(&json!("50%")), Some(&json!(9)), 4), (2, 4));
    }

    #[test]
    fn a_canary_scales_up_within_surge_and_the_stable_down_within_availability() {
        let rs = |spec, available| Some(Counts { spec, available });
        // maxSurge 3, maxUnavailable 2. 50 % of 10 from (0 new, 10 stable all available):
        // surge allows 3 new first, and the stable goes down by what availability allows.
        let limits = fenceposts(None, None, 10);
        assert_eq!(next_counts(10, 50, limits, rs(0, 0), rs(10, 10), 0), (3, 8));
        // Once the new pods are up, the rest follows.
        assert_eq!(next_counts(10, 50, limits, rs(3, 3), rs(8, 8), 0), (5, 5));
        // At the target nothing moves.
        assert_eq!(next_counts(10, 50, limits, rs(5, 5), rs(5, 5), 0), (5, 5));
        // Aborting (weight 0): the stable comes back within surge, the canary drains
        // within availability.
        assert_eq!(next_counts(10, 0, limits, rs(5, 5), rs(5, 5), 0), (3, 8));
        // No separate stable: the canary goes to 100 %.
        assert_eq!(next_counts(10, 20, limits, rs(0, 0), None, 0), (10, 0));
        // Older ReplicaSets still have pods: nothing is scaled down yet.
        assert_eq!(
            next_counts(10, 50, limits, rs(0, 0), rs(10, 10), 2),
            (1, 10)
        );
    }
}
