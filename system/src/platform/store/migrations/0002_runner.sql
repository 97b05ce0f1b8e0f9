-- Migration 2: the Runner's builds, task queue and logs (see store/postgres.rs).
-- Shipped: never edit; add the next migration instead.

-- One row per Runner object, kept whole as the queue serialises it: kind is build, task,
-- pipeline, claim (a webhook delivery id or cron tick key), cron, missed, lease, counters or
-- heartbeat; key is its id or name ('' for the one-row kinds).
CREATE TABLE runner_objects (
    kind  text NOT NULL,
    key   text NOT NULL,
    value jsonb NOT NULL,
    PRIMARY KEY (kind, key)
);

-- Each build's log, one row per line (line_no from 0): appended, never rewritten; deleted
-- with its build.
CREATE TABLE runner_log_lines (
    build   text NOT NULL,
    line_no bigint NOT NULL,
    line    text NOT NULL,
    PRIMARY KEY (build, line_no)
);
