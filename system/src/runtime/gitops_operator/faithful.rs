//! faithful: every `TASK_POLLING_INTERVAL` the leader lists the PromotionTasks and
//! reconciles each unfinished one in turn (oldest first, at most `MAX_CONCURRENT_RELEASES`).
//! The loop is inferred from the knobs; nothing watches, so a task waits for the next poll.

use kube::api::ListParams;

use super::engine::Operator;
use super::task::Phase;
use crate::observe::OperatorEvent;

/// Polls and reconciles until the caller drops it (leadership lost, host stopped).
pub async fn run(operator: &Operator) {
    loop {
        match operator.tasks.list(&ListParams::default()).await {
            Ok(list) => {
                let mut tasks: Vec<_> = list
                    .items
                    .into_iter()
                    .filter(|t| !Phase::of(&t.data).is_terminal())
                    .collect();
                tasks.sort_by(|a, b| {
                    (&a.metadata.creation_timestamp, &a.metadata.name)
                        .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
                });
                for task in tasks.into_iter().take(operator.config.max_concurrent) {
                    operator.reconcile(task).await;
                }
            }
            Err(error) => operator.env.observe(
                OperatorEvent::WatchError {
                    host: operator.env.identity().host.clone(),
                    error: error.to_string(),
                }
                .into(),
            ),
        }
        operator.env.sleep(operator.config.task_polling).await;
    }
}
