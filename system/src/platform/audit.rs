//! The audit log: every mutating request the platform's gateway handles and every request it
//! denies, with who, what, when and the result. Append-only: entries are numbered in the
//! order they were recorded and never changed or removed. Queried through the gateway
//! (`GET /api/audit`): the admin sees every entry, a user only their own account's.
//!
//! Kept in the control plane's state, which outlives a gateway process as its database
//! would; in real mode with a database, each entry is also appended to the store's journal
//! (PostgreSQL, [`crate::platform::store`]) and a restarted process loads the log back.

use std::sync::{Arc, Mutex, OnceLock};

pub use super::store::records::{Actor, Entry, Outcome};
use super::store::{Change, Journal};
use crate::env::SharedEnv;

/// What a caller records; [`Audit::record`] numbers and timestamps it.
#[derive(Clone, Debug)]
pub struct Record {
    /// Who.
    pub actor: Actor,
    /// The account acted in, or empty.
    pub account: String,
    /// Method and path.
    pub action: String,
    /// The runtime named, or empty.
    pub runtime: String,
    /// Allowed or denied.
    pub outcome: Outcome,
    /// The answer's status.
    pub status: u16,
    /// Why, for a denial; what else happened, for an allowed request.
    pub reason: String,
}

/// The log.
#[derive(Default)]
pub struct Audit {
    entries: Mutex<Vec<Entry>>,
    /// Where entries are kept for good (real mode with a database).
    journal: OnceLock<Arc<Journal>>,
}

/// Longest action or reason kept, in bytes.
pub const MAX_TEXT: usize = 512;

/// Most entries one query returns.
pub const MAX_PAGE: usize = 1000;

impl Audit {
    /// Appends `record`, stamped with `env`'s clock; returns its sequence number. The
    /// action and reason are kept to [`MAX_TEXT`] bytes each (a path is the client's to
    /// make long).
    pub fn record(&self, env: &SharedEnv, record: Record) -> u64 {
        // A NUL is the one character PostgreSQL cannot store (the store keeps this log).
        let cut = |text: String| {
            let mut text = if text.contains('\0') {
                text.replace('\0', "\u{fffd}")
            } else {
                text
            };
            if text.len() > MAX_TEXT {
                let mut end = MAX_TEXT;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push('…');
            }
            text
        };
        let at = jiff::Timestamp::from_millisecond(env.unix_millis() as i64)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let mut entries = self.entries.lock().expect("audit lock");
        let seq = entries.len() as u64 + 1;
        let entry = Entry {
            seq,
            at,
            actor: record.actor,
            account: cut(record.account),
            action: cut(record.action),
            runtime: cut(record.runtime),
            outcome: record.outcome,
            status: record.status,
            reason: cut(record.reason),
        };
        // Appended under the log's lock: the journal has the entries in their order.
        if let Some(journal) = self.journal.get() {
            journal.append(Change::Audit(entry.clone()));
        }
        entries.push(entry);
        seq
    }

    /// Keeps every entry from now on in `journal` (once; a second call is ignored).
    pub fn keep_in(&self, journal: Arc<Journal>) {
        let _ = self.journal.set(journal);
    }

    /// Waits until everything appended to the store's journal so far (these entries, and the
    /// registry's changes, which share it) is committed; at once without a store.
    pub async fn durable(&self) -> Result<(), super::store::Unavailable> {
        match self.journal.get() {
            Some(journal) => journal.sync().await,
            None => Ok(()),
        }
    }

    /// Takes back the log the store held (numbered from 1, in order), before anything is
    /// recorded.
    pub fn restore(&self, stored: Vec<Entry>) {
        let mut entries = self.entries.lock().expect("audit lock");
        debug_assert!(entries.is_empty(), "restored into a log in use");
        *entries = stored;
    }

    /// Entries after `after` (a sequence number; 0 for the start), oldest first, at most
    /// `limit` (capped at [`MAX_PAGE`]); only `account`'s when one is given.
    pub fn query(&self, account: Option<&str>, after: u64, limit: usize) -> Vec<Entry> {
        let entries = self.entries.lock().expect("audit lock");
        entries
            .iter()
            .skip(after.min(entries.len() as u64) as usize)
            .filter(|e| account.is_none_or(|a| e.account == a))
            .take(limit.min(MAX_PAGE))
            .cloned()
            .collect()
    }

    /// Every entry, oldest first (end-of-run checks; a client pages with [`Audit::query`]).
    pub fn all(&self) -> Vec<Entry> {
        self.entries.lock().expect("audit lock").clone()
    }

    /// How many entries the log holds.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("audit lock").len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
