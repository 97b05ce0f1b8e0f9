//! hardened: the leader watches PromotionTasks; a task is reconciled when it changes, when
//! a step it waits on is due another look (`poll_waiting`), or when its retry backoff ends.
//! One queue of due times, one task at a time, inside this future (nothing outlives a lost
//! leadership).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{watcher, WatchStreamExt};

use super::engine::{backoff, Next, Operator};
use super::task::Phase;
use crate::env::kube::SeededBackoff;
use crate::observe::OperatorEvent;

/// Watches and reconciles until the caller drops it.
pub async fn run(operator: &Operator) {
    let env = operator.env.clone();
    let config = &operator.config;
    let mut events = watcher(operator.tasks.clone(), watcher::Config::default())
        .backoff(SeededBackoff::new(env.clone()))
        .boxed();
    // Task name → when it is due.
    let mut due: BTreeMap<String, Duration> = BTreeMap::new();
    // Task name → the end of its retry backoff: a watch event (our own status write among
    // them) does not bring it forward.
    let mut backing_off: BTreeMap<String, Duration> = BTreeMap::new();
    loop {
        let now = env.elapsed();
        let next = due
            .iter()
            .min_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)))
            .map(|(name, at)| (name.clone(), *at));
        if let Some((name, _)) = next.as_ref().filter(|(_, at)| *at <= now) {
            let task = match operator.tasks.get_opt(name).await {
                Ok(Some(task)) => task,
                Ok(None) => {
                    due.remove(name);
                    continue;
                }
                Err(_) => {
                    due.insert(name.clone(), now + config.poll_waiting);
                    continue;
                }
            };
            let next = operator.reconcile(task).await;
            let after = match next {
                Next::Never => None,
                Next::Poll => Some(config.poll_waiting),
                Next::Reread => Some(Duration::ZERO),
                Next::Retry(n) => Some(backoff(&env, config.retry_initial, config.retry_max, n)),
            };
            match after {
                Some(after) => due.insert(name.clone(), env.elapsed() + after),
                None => due.remove(name),
            };
            match (next, after) {
                (Next::Retry(_), Some(after)) => {
                    backing_off.insert(name.clone(), env.elapsed() + after);
                }
                _ => {
                    backing_off.remove(name);
                }
            }
            continue;
        }
        let wait = next.map_or(Duration::from_secs(3600), |(_, at)| at.saturating_sub(now));
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(task) | watcher::Event::InitApply(task))) => {
                    if let Some(name) = task.metadata.name.clone() {
                        if Phase::of(&task.data).is_terminal() {
                            due.remove(&name);
                        } else {
                            let now = env.elapsed();
                            let at = backing_off.get(&name).map_or(now, |until| (*until).max(now));
                            let entry = due.entry(name).or_insert(at);
                            *entry = (*entry).min(at);
                        }
                    }
                }
                Some(Ok(watcher::Event::Delete(task))) => {
                    if let Some(name) = &task.metadata.name {
                        due.remove(name);
                        backing_off.remove(name);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => env.observe(
                    OperatorEvent::WatchError {
                        host: env.identity().host.clone(),
                        error: error.to_string(),
                    }
                    .into(),
                ),
                None => return,
            },
            () = env.sleep(wait) => {}
        }
    }
}
