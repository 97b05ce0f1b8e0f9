-- Migration 1: the registry, the audit log and the accepted events (see store/postgres.rs).
-- Shipped: never edit; add the next migration instead.

-- One row per runtime (tunnel name <account>-<runtime>); the token itself is never stored.
CREATE TABLE runtimes (
    name         text PRIMARY KEY,
    account      text NOT NULL,
    runtime      text NOT NULL,
    token_sha256 text NOT NULL,
    info         jsonb NOT NULL
);

-- Tokens a registration replaced: refused everywhere.
CREATE TABLE revoked_tokens (
    token_sha256 text PRIMARY KEY
);

-- Append-only: every mutating request and every denial, in order.
CREATE TABLE audit_log (
    seq   bigint PRIMARY KEY,
    entry jsonb NOT NULL
);

-- Events the events API accepted, as they arrived. `object_sha256` (the SHA-256 of what the
-- event is about, `app:<ns>/<name>`, …) is set when the event is projected; an event that
-- replaced its object's state deletes the older events of the same object, so the table holds
-- about one event per live object plus what is not projected yet.
CREATE TABLE events (
    id        bigint PRIMARY KEY,
    runtime   text NOT NULL,
    object_sha256 text NOT NULL DEFAULT '',
    gzip      boolean NOT NULL,
    body      bytea NOT NULL,
    projected boolean NOT NULL DEFAULT false
);
CREATE INDEX events_by_object ON events (runtime, object_sha256, id);

-- Counters that must never go back (event ids are not reused after compaction).
CREATE TABLE orrery_counters (
    name  text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO orrery_counters (name, value) VALUES ('last_event_id', 0);
