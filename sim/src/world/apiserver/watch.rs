//! Watch streams: replay history after an RV, then follow new changes; bookmarks,
//! selector transitions, in-stream 410 after compaction, clean close at `timeoutSeconds`,
//! and the fault knobs (cut mid-line, slow watchers dropped).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

use super::resources::ResourceKind;
use super::store::{Change, ChangeType, Filter};
use super::table::{self, Include};
use super::ApiServer;

/// What a watch request asked for.
#[derive(Clone, Debug)]
pub struct WatchRequest {
    /// The type watched.
    pub kind: ResourceKind,
    /// Namespace and selectors.
    pub filter: Filter,
    /// `resourceVersion`; `None` or `"0"` means "send the current state first".
    pub resource_version: Option<u64>,
    /// `timeoutSeconds` (the stream closes cleanly then).
    pub timeout: Duration,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents=true` (watch-list): synthetic ADDED, then an initial-events-end bookmark.
    pub send_initial_events: bool,
    /// Events as one-row tables (`kubectl get -w`): column definitions in the first only.
    pub as_table: Option<Include>,
    /// Objects shown in events.k8s.io/v1 (`kind` is then core/v1's Event, whose store it is).
    pub events_v1: bool,
}

/// How a stream ended (the `apiserver.watch_end` observation carries it).
use orrery_system::observe::WatchEnd as End;

/// The watch line a change produces for a watcher with `filter`, if any (selector
/// transitions: starts matching → ADDED, stops matching → DELETED with the old body at the
/// new RV). The change's body is serialised once for all watchers.
fn event_for(change: &Change, filter: &Filter) -> Option<Bytes> {
    let old = change
        .previous
        .as_ref()
        .is_some_and(|p| filter.matches(&change.namespace, p));
    if change.change == ChangeType::Deleted {
        return old.then(|| shared_line("DELETED", change));
    }
    let new = filter.matches(&change.namespace, &change.object);
    match (old, new) {
        (true, true) => Some(shared_line("MODIFIED", change)),
        (false, true) => Some(shared_line("ADDED", change)),
        (true, false) => {
            let mut gone = (**change.previous.as_ref().expect("old implies previous")).clone();
            gone["metadata"]["resourceVersion"] = json!(change.rv.to_string());
            Some(line("DELETED", &gone))
        }
        (false, false) => None,
    }
}

/// `{"type":…,"object":…}\n` around the change's cached body: byte for byte what
/// [`line`] writes for the same object.
fn shared_line(event_type: &str, change: &Change) -> Bytes {
    let object = change.object_json();
    let mut text = Vec::with_capacity(object.len() + event_type.len() + 24);
    text.extend_from_slice(b"{\"type\":\"");
    text.extend_from_slice(event_type.as_bytes());
    text.extend_from_slice(b"\",\"object\":");
    text.extend_from_slice(&object);
    text.extend_from_slice(b"}\n");
    Bytes::from(text)
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut text = serde_json::to_string(&json!({"type": event_type, "object": object}))
        .expect("JSON values serialise");
    text.push('\n');
    Bytes::from(text)
}

fn bookmark(kind: &ResourceKind, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": kind.kind, "apiVersion": kind.api_version(), "metadata": metadata}),
    )
}

fn expired(rv: u64) -> Bytes {
    line(
        "ERROR",
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
                "message": format!("too old resource version: {rv}")}),
    )
}

struct Stream {
    env: SharedEnv,
    server: Arc<ApiServer>,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    /// For a table watch: the type and what rows carry, and whether columns were sent.
    table: Option<(ResourceKind, Include, std::sync::atomic::AtomicBool)>,
    /// Whether lines are shown in events.k8s.io/v1 ([`super::events_v1`]).
    events_v1: bool,
}

impl Stream {
    /// An event line rewritten as a one-row table, for a table watch (other lines as they are).
    fn tabled(&self, bytes: Bytes) -> Bytes {
        let Some((kind, include, columns_sent)) = &self.table else {
            return bytes;
        };
        let Ok(mut event) = serde_json::from_slice::<Value>(&bytes) else {
            return bytes;
        };
        if !matches!(
            event["type"].as_str(),
            Some("ADDED" | "MODIFIED" | "DELETED")
        ) {
            return bytes; // bookmarks and errors are sent as they are
        }
        let object = event["object"].take();
        let metadata = json!({"resourceVersion": object["metadata"]["resourceVersion"]});
        let row = table::row(kind, &object, self.env.unix_millis(), *include);
        event["object"] = table::table(
            kind,
            metadata,
            vec![row],
            !columns_sent.swap(true, std::sync::atomic::Ordering::Relaxed),
        );
        line(event["type"].as_str().unwrap_or_default(), &event["object"])
    }

    /// Sends one line, applying the cut and slow-watcher knobs.
    async fn send(&self, bytes: Bytes) -> Result<(), End> {
        let bytes = if self.events_v1 && self.table.is_none() {
            super::events_v1::watch_line(&bytes).map_or(bytes, Bytes::from)
        } else {
            self.tabled(bytes)
        };
        let knobs = self.server.knobs();
        if knobs.cut_stream_rate > 0.0
            && self.env.random_u64() % 1_000_000 < (knobs.cut_stream_rate * 1e6) as u64
        {
            let half = bytes.slice(..bytes.len() / 2);
            let _ = self.tx.send(Ok(half)).await;
            let _ = self
                .tx
                .send(Err(std::io::Error::other(
                    "watch stream cut mid-line (fault)",
                )))
                .await;
            return Err(End::Cut);
        }
        self.server.cost().watch_line(bytes.len());
        if knobs.drop_slow_watchers {
            return match self.tx.try_send(Ok(bytes)) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => Err(End::DroppedSlow),
                Err(mpsc::error::TrySendError::Closed(_)) => Err(End::ClientGone),
            };
        }
        self.tx.send(Ok(bytes)).await.map_err(|_| End::ClientGone)
    }

    async fn run(&self, request: WatchRequest) -> End {
        let kind_key = request.kind.key();
        let started = self.env.elapsed();
        let deadline = started + request.timeout;
        let mut rv_changes = self.server.subscribe();
        let mut cursor = match request.resource_version {
            Some(rv) if rv > 0 && !request.send_initial_events => rv,
            _ => {
                let (items, rv) = {
                    let store = self.server.store();
                    let page = store
                        .list(&request.kind, &request.filter, None, None)
                        .expect("an unpaged list of now cannot expire");
                    (page.items, page.rv)
                };
                for item in items {
                    if let Err(end) = self.send(line("ADDED", &item)).await {
                        return end;
                    }
                }
                if request.send_initial_events {
                    if let Err(end) = self.send(bookmark(&request.kind, rv, true)).await {
                        return end;
                    }
                }
                rv
            }
        };
        // kube-apiserver's cache watcher sends a bookmark only above its floor: the RV the
        // watch started from, raised by the events it found in the watch cache at the start
        // (the first pass below) but not by events that arrive later — so a quiet watch gets
        // no bookmarks, and a bookmark may repeat the RV of a live event
        // (`cacheWatcher.processInterval` / `process` in k8s.io/apiserver).
        let mut floor = cursor;
        let mut first_pass = true;
        let interval = self
            .server
            .knobs()
            .bookmark_interval
            .max(Duration::from_millis(100));
        // kube-apiserver sends a bookmark 2 s before a watch's deadline (so the client can
        // resume from it) and none at the deadline itself; a watch shorter than 2 s gets none.
        let pre_timeout = deadline
            .checked_sub(Duration::from_secs(2))
            .filter(|t| *t > started);
        let schedule = |from: Duration| match pre_timeout {
            Some(t) if from < t => (from + interval).min(t),
            _ => from + interval,
        };
        let mut next_bookmark = schedule(started);
        loop {
            let changes = self.server.store().changes_after(cursor, &kind_key);
            let Ok((changes, newest)) = changes else {
                let _ = self.send(expired(cursor)).await;
                return End::Expired;
            };
            for change in &changes {
                if let Some(bytes) = event_for(change, &request.filter) {
                    if let Err(end) = self.send(bytes).await {
                        return end;
                    }
                    if first_pass {
                        floor = change.rv;
                    }
                }
                cursor = change.rv;
            }
            first_pass = false;
            // Every change up to `newest` was looked at (other types are not ours), so the
            // cursor may move there: bookmarks then carry the global RV, as upstream.
            cursor = cursor.max(newest);
            let now = self.env.elapsed();
            if now >= deadline {
                return End::Timeout;
            }
            if request.bookmarks && now >= next_bookmark {
                if cursor > floor {
                    if let Err(end) = self.send(bookmark(&request.kind, cursor, false)).await {
                        return end;
                    }
                }
                next_bookmark = schedule(now);
            }
            let wake = if request.bookmarks {
                next_bookmark.min(deadline)
            } else {
                deadline
            };
            tokio::select! {
                biased;
                _ = self.tx.closed() => return End::ClientGone,
                _ = rv_changes.changed() => {}
                _ = self.env.sleep(wake.saturating_sub(now)) => {}
            }
        }
    }
}

/// Runs one watch until it ends, writing NDJSON lines into `tx`.
pub async fn serve(
    env: SharedEnv,
    server: Arc<ApiServer>,
    request: WatchRequest,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let resource = request.kind.plural.clone();
    let from = request.resource_version;
    let stream = Stream {
        env: env.clone(),
        server,
        tx,
        table: request.as_table.map(|include| {
            (
                request.kind.clone(),
                include,
                std::sync::atomic::AtomicBool::new(false),
            )
        }),
        events_v1: request.events_v1,
    };
    let end = stream.run(request).await;
    env.observe(
        WorldEvent::WatchEnded {
            resource,
            from_rv: from,
            end,
        }
        .into(),
    );
}
