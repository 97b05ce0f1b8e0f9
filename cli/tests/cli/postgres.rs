//! The control plane's store against a real PostgreSQL (the conformance tier: `make
//! conformance-postgres`, which starts one through `conformance/postgres/run.sh`): what is
//! committed survives a kill, bad settings and TLS are refused with clear words, a transient
//! failure is a 503, and hardened answers an event only once it is committed.

use std::time::Duration;

use crate::real_mode::{app_event, ask_graphql, http_as, report_event, Process, POLICY};
use crate::support::{eventually, free_port};

/// A fresh database in the PostgreSQL that `conformance/postgres/run.sh` started (make
/// conformance runs these tests under it, with its URL in `ORRERY_POSTGRES_URL`). Without one
/// the test fails, naming what to run: these tests only run when asked for (`--ignored`).
fn fresh_database(tag: &str) -> String {
    let Ok(url) = std::env::var("ORRERY_POSTGRES_URL") else {
        panic!("no ORRERY_POSTGRES_URL: run these tests with make conformance-postgres (conformance/postgres/run.sh starts a real PostgreSQL)");
    };
    let name = format!("orrery_{tag}_{}", std::process::id());
    sql(&url, &format!("DROP DATABASE IF EXISTS {name}"));
    sql(&url, &format!("CREATE DATABASE {name}"));
    let (server, _) = url
        .rsplit_once('/')
        .expect("a database URL ends in /<database>");
    format!("{server}/{name}")
}

/// A connection to the database at `url` (its connection task runs on the caller's runtime).
async fn connect(url: &str) -> tokio_postgres::Client {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let Some(tokio_postgres::config::Host::Tcp(host)) = config.get_hosts().first().cloned() else {
        panic!("{url}: a TCP host")
    };
    let stream = tokio::net::TcpStream::connect((host.as_str(), config.get_ports()[0]))
        .await
        .unwrap();
    let (client, connection) = config
        .connect_raw(stream, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Holds `LOCK TABLE events` on `database` from a second session (every insert waits) until
/// the returned sender is dropped.
fn lock_events(database: &str) -> std::sync::mpsc::Sender<()> {
    lock_table(database, "events")
}

/// Holds `LOCK TABLE <table>` on `database` from a second session (without a statement
/// timeout of its own) until the returned sender is dropped.
fn lock_table(database: &str, table: &str) -> std::sync::mpsc::Sender<()> {
    let lock = format!("SET statement_timeout = 0; BEGIN; LOCK TABLE {table} IN EXCLUSIVE MODE");
    let (locked, is_locked) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let url = database.to_string();
    let session = move || {
        let runtime = current_thread();
        let client = runtime.block_on(async {
            let client = connect(&url).await;
            client.batch_execute(&lock).await.unwrap();
            client
        });
        locked.send(()).unwrap();
        let _ = released.recv();
        runtime.block_on(client.batch_execute("COMMIT")).unwrap();
    };
    std::thread::spawn(session); // determinism: real-env (real-mode test: a second database session)
    is_locked.recv().unwrap();
    release
}

/// Runs `query` on the database at `url`; the first column of each row it returns, as text.
fn sql(url: &str, query: &str) -> Vec<String> {
    current_thread().block_on(async {
        let client = connect(url).await;
        client
            .simple_query(query)
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"))
            .into_iter()
            .filter_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    Some(row.get(0).unwrap_or_default().to_string())
                }
                _ => None,
            })
            .collect()
    })
}

/// `orrery serve control-plane` with `args` and `database` (through `ORRERY_DATABASE_URL`,
/// so its password is not on a command line), expected to stop on its own: its exit code and
/// what it printed to stderr.
fn control_plane_fails(args: &[&str], database: &str) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["serve", "control-plane", "--admin-token", "adm"])
        .args(args)
        .env("ORRERY_DATABASE_URL", database)
        .output()
        .expect("run orrery");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs a real PostgreSQL: make conformance-postgres"]
fn the_control_plane_keeps_runtimes_the_audit_log_and_acknowledged_events_in_postgresql_across_a_kill(
) {
    let database = fresh_database("restart");
    let (tunnel, gateway, events) = (free_port(), free_port(), free_port());
    let [tunnel_addr, gateway_addr, events_addr] =
        [tunnel, gateway, events].map(|p| format!("127.0.0.1:{p}"));
    let dir = std::env::temp_dir().join(format!("orrery-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.to_str().unwrap();
    let start = || {
        Process(
            std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
                .args([
                    "serve",
                    "control-plane",
                    "--admin-token",
                    "adm",
                    "--tunnel",
                    &tunnel_addr,
                    "--api",
                    &gateway_addr,
                    "--runtimes",
                    "globex-prod=tok-2",
                    "--policy",
                    policy,
                    "--events",
                    &events_addr,
                    "--variant",
                    "hardened",
                ])
                .env("ORRERY_DATABASE_URL", &database)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start orrery"),
        )
    };
    let report = |token: &str, body: String| report_event(events, token, &body);
    let ask = |token: &str, query: &str| ask_graphql(gateway, token, query);
    let audit = || -> Vec<serde_json::Value> {
        let (_, log) = http_as(gateway, "GET", "/api/audit?limit=1000", "", "adm").unwrap();
        let log: serde_json::Value = serde_json::from_str(&log).unwrap();
        log["entries"].as_array().cloned().unwrap_or_default()
    };
    let create = r#"mutation { createRuntime(name: "prod") { newAccessToken rotated } }"#;
    let list = "{ applications { items { name syncStatus } } }";

    let platform = start();
    eventually("the GitOps API answers", Duration::from_secs(20), || {
        http_as(gateway, "POST", "/2.0/api/graphql", "{}", "alice-token").is_some()
    });
    let (code, created) = ask("alice-token", create);
    assert_eq!(code, 200, "{created}");
    let first = created["data"]["createRuntime"]["newAccessToken"]
        .as_str()
        .unwrap()
        .to_string();
    // A denial (only account admins create runtimes) and a rotation of prod's token.
    let (code, denied) = ask("bob-token", create);
    assert_eq!(code, 403, "{denied}");
    let (code, rotated) = ask("alice-token", create);
    assert_eq!(code, 200, "{rotated}");
    assert_eq!(rotated["data"]["createRuntime"]["rotated"], true);
    let second = rotated["data"]["createRuntime"]["newAccessToken"]
        .as_str()
        .unwrap()
        .to_string();
    let before = audit();
    assert!(
        before
            .iter()
            .any(|e| e["action"] == "graphql createRuntime" && e["status"] == 403),
        "{before:#?}"
    );

    // Hardened answers 200 only once the event is committed: the kill comes right after the
    // last answer, with nothing in between that would wait for the store.
    for (name, destination, sync, rv) in [
        ("web", "team-a", "Synced", 5),
        ("db", "team-b", "OutOfSync", 6),
        ("web", "team-a", "OutOfSync", 7),
        ("web", "team-a", "Synced", 6),
    ] {
        assert_eq!(
            report(&second, app_event(name, destination, sync, rv)),
            Some(200),
            "{name}@{rv}"
        );
    }
    drop(platform); // SIGKILL: nothing is flushed on the way out.
    let _platform = start();
    eventually(
        "the restarted control plane answers",
        Duration::from_secs(20),
        || http_as(gateway, "POST", "/2.0/api/graphql", "{}", "alice-token").is_some(),
    );
    // The read models, rebuilt from the stored events: web at its newest state (rv 7; the
    // stale rv 6 ignored again), db as reported.
    assert_eq!(
        ask("alice-token", list).1["data"]["applications"]["items"],
        serde_json::json!([{"name": "db", "syncStatus": "OutOfSync"}, {"name": "web", "syncStatus": "OutOfSync"}]),
    );
    assert_eq!(
        ask("bob-token", list).1["data"]["applications"]["items"],
        serde_json::json!([{"name": "web", "syncStatus": "OutOfSync"}]),
        "the rules still apply to what was restored"
    );
    // The registry: the rotated token is still refused, the current one accepted.
    assert_eq!(
        report(&first, app_event("db", "team-b", "Synced", 8)),
        Some(401)
    );
    assert_eq!(
        report(&second, app_event("db", "team-b", "Synced", 8)),
        Some(200)
    );
    // The audit log: every entry from before the kill, unchanged, then the new ones.
    let after = audit();
    assert_eq!(
        after[..before.len()],
        before[..],
        "the log survives as it was"
    );
    assert!(after.len() > before.len(), "and grows after the restart");
    // The store itself: each migration applied once; the current token's digest, never a token;
    // one stored event per app once newer ones are projected (the older compacted away).
    assert_eq!(
        sql(
            &database,
            "SELECT version FROM orrery_schema_migrations ORDER BY version"
        ),
        ["1", "2"]
    );
    // (globex-prod is preregistered: it comes from --runtimes at every start, not the store.)
    assert_eq!(
        sql(
            &database,
            "SELECT name || ' ' || token_sha256 FROM runtimes"
        ),
        [format!(
            "acme-prod {}",
            orrery_system::platform::store::token_digest(&second)
        )]
    );
    eventually("older events compacted", Duration::from_secs(10), || {
        let mut stored = sql(&database, "SELECT object_sha256 FROM events");
        stored.sort();
        let mut wanted = ["app:argocd/db", "app:argocd/web"]
            .map(orrery_system::platform::store::sha256_hex)
            .to_vec();
        wanted.sort();
        stored == wanted
    });

    // One control plane per database: a second is refused while this one runs.
    let (other_tunnel, other_gateway) = (free_port(), free_port());
    let (code, stderr) = control_plane_fails(
        &[
            "--tunnel",
            &format!("127.0.0.1:{other_tunnel}"),
            "--api",
            &format!("127.0.0.1:{other_gateway}"),
        ],
        &database,
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("another orrery control plane is using the database"),
        "{stderr}"
    );
}

#[test]
#[ignore = "needs a real PostgreSQL: make conformance-postgres"]
fn a_control_plane_names_what_is_wrong_with_its_database_and_never_shows_its_password() {
    let database = fresh_database("refusals");
    sql(
        &database,
        "CREATE TABLE orrery_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, \
         applied_at timestamptz NOT NULL DEFAULT now()); \
         INSERT INTO orrery_schema_migrations (version, name) VALUES (99, 'from the future')",
    );
    let password = std::env::var("ORRERY_POSTGRES_URL")
        .unwrap()
        .split_once("orrery:")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(password, _)| password.to_string())
        .unwrap();
    for (url, wanted) in [
        (
            database.as_str(),
            "the database's schema is at version 99, newer than this orrery's 2",
        ),
        (
            "postgres://orrery:s3cret@127.0.0.1:9/orrery",
            "cannot reach PostgreSQL at 127.0.0.1:9",
        ),
        (
            "postgres://orrery:s3cret@127.0.0.1:5432/x?sslmode=bogus",
            "database URL postgres://orrery:***@",
        ),
        (
            "host=/var/run/postgresql user=orrery",
            "a Unix socket host is not supported",
        ),
    ] {
        let (tunnel, gateway) = (free_port(), free_port());
        let (code, stderr) = control_plane_fails(
            &[
                "--tunnel",
                &format!("127.0.0.1:{tunnel}"),
                "--api",
                &format!("127.0.0.1:{gateway}"),
            ],
            url,
        );
        assert_ne!(code, Some(0), "{url}: {stderr}");
        assert!(stderr.contains(wanted), "{url}: {stderr}");
        assert!(
            !stderr.contains("s3cret") && !stderr.contains(&password),
            "{url}: {stderr}"
        );
    }
}

#[test]
#[ignore = "needs a real PostgreSQL: make conformance-postgres"]
fn the_store_speaks_tls_to_postgresql_verifies_the_server_and_refuses_what_it_cannot_verify() {
    let database = fresh_database("tls");
    let (Ok(ca), Ok(other_ca)) = (
        std::env::var("ORRERY_POSTGRES_CA"),
        std::env::var("ORRERY_POSTGRES_OTHER_CA"),
    ) else {
        eprintln!(
            "POSTGRES TLS TEST SKIPPED: conformance/postgres/run.sh started no TLS (no openssl)"
        );
        return;
    };
    // Role orrery_tls may log in over TLS only (run.sh's hostnossl line): logged in as it, the
    // control plane's connection was TLS.
    let name = database.rsplit('/').next().unwrap().to_string();
    sql(
        &database,
        "DO $$ BEGIN CREATE ROLE orrery_tls LOGIN PASSWORD 'tls-s3cret'; \
         EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    );
    sql(
        &database,
        &format!("ALTER DATABASE {name} OWNER TO orrery_tls"),
    );
    let server = database
        .split_once('@')
        .map(|(_, rest)| rest)
        .unwrap()
        .to_string();
    let as_tls = |query: &str| format!("postgres://orrery_tls:tls-s3cret@{server}{query}");
    let ports = [free_port(), free_port(), free_port()];
    let [_, gateway, _] = ports;
    let listen = |p: u16| format!("127.0.0.1:{p}");
    for (url, wanted) in [
        (as_tls(""), "pg_hba.conf rejects connection"),
        (
            as_tls(&format!("?sslrootcert={other_ca}")),
            "TLS to PostgreSQL at 127.0.0.1:",
        ),
        (as_tls("?sslmode=verify-full"), "needs sslrootcert=FILE"),
        (
            as_tls("?sslrootcert=/nonexistent/ca.pem"),
            "sslrootcert /nonexistent/ca.pem",
        ),
    ] {
        let (code, stderr) = control_plane_fails(
            &["--tunnel", &listen(ports[0]), "--api", &listen(gateway)],
            &url,
        );
        assert_ne!(code, Some(0), "{url}: {stderr}");
        assert!(
            stderr.contains(wanted),
            "{url}: want {wanted:?} in {stderr}"
        );
        assert!(!stderr.contains("tls-s3cret"), "{url}: {stderr}");
    }
    let dir = std::env::temp_dir().join(format!("orrery-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.join("control-plane.log");
    let url = as_tls(&format!("?sslmode=verify-full&sslrootcert={ca}"));
    let platform = control_plane_on(&url, "hardened", ports, policy.to_str().unwrap(), &log);
    let graphql = |token: &str, query: &str| {
        let body = serde_json::json!({"query": query}).to_string();
        http_as(gateway, "POST", "/2.0/api/graphql", &body, token)
    };
    eventually(
        "the GitOps API answers over a TLS store",
        Duration::from_secs(20),
        || graphql("alice-token", "{ me { name } }").is_some(),
    );
    let (code, created) = graphql(
        "alice-token",
        r#"mutation { createRuntime(name: "prod") { newAccessToken } }"#,
    )
    .unwrap();
    assert_eq!(code, 200, "{created}");
    drop(platform);
    // What it answered is in the database, committed over TLS.
    assert_eq!(
        sql(
            &database,
            "SELECT name FROM runtimes WHERE name = 'acme-prod'"
        ),
        vec!["acme-prod".to_string()],
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs a real PostgreSQL: make conformance-postgres"]
fn a_transient_database_failure_is_answered_503_and_the_control_plane_recovers_without_a_restart() {
    let database = fresh_database("transient");
    // Every statement of the control plane's sessions gives up after 300 ms: a table held
    // by another session makes its commits fail with SQLSTATE 57014 while the connection
    // stands — a transient failure, which the writer retries (every second, 3 times).
    let name = database.rsplit('/').next().unwrap().to_string();
    sql(
        &database,
        &format!("ALTER DATABASE {name} SET statement_timeout = '300ms'"),
    );
    let ports = [free_port(), free_port(), free_port()];
    let [_, gateway, _] = ports;
    let dir = std::env::temp_dir().join(format!("orrery-transient-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.join("control-plane.log");
    let mut platform =
        control_plane_on(&database, "hardened", ports, policy.to_str().unwrap(), &log);
    let graphql = |token: &str, query: &str| {
        let body = serde_json::json!({"query": query}).to_string();
        http_as(gateway, "POST", "/2.0/api/graphql", &body, token)
    };
    let create = |runtime: &str| {
        graphql(
            "alice-token",
            &format!(r#"mutation {{ createRuntime(name: "{runtime}") {{ newAccessToken }} }}"#),
        )
        .unwrap()
    };
    eventually("the GitOps API answers", Duration::from_secs(20), || {
        graphql("alice-token", "{ me { name } }").is_some()
    });
    let (code, answer) = create("prod");
    assert_eq!(code, 200, "{answer}");

    let release = lock_table(&database, "runtimes");
    let (code, answer) = create("staging");
    assert_eq!(code, 503, "{answer}");
    let said = answer.to_string();
    assert!(
        said.contains("the platform's store is unavailable") && said.contains("57014"),
        "{said}"
    );
    drop(release);
    // The writer's next try commits what waited; the process never stopped.
    eventually("staging is committed", Duration::from_secs(10), || {
        sql(
            &database,
            "SELECT name FROM runtimes WHERE name = 'acme-staging'",
        )
        .len()
            == 1
    });
    assert!(
        platform.0.try_wait().unwrap().is_none(),
        "the control plane stopped: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let (code, answer) = create("dev");
    assert_eq!(code, 200, "{answer}");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains("retrying in 1 s"), "{logged}");
    drop(platform);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `orrery serve control-plane` of the store tests: the [`POLICY`] users, the events API, a
/// preregistered globex-prod, `variant`, and `database` through `ORRERY_DATABASE_URL`; stderr
/// goes to `log`.
fn control_plane_on(
    database: &str,
    variant: &str,
    [tunnel, gateway, events]: [u16; 3],
    policy: &str,
    log: &std::path::Path,
) -> Process {
    Process(
        std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
            .args(["serve", "control-plane", "--admin-token", "adm", "--tunnel"])
            .arg(format!("127.0.0.1:{tunnel}"))
            .arg("--api")
            .arg(format!("127.0.0.1:{gateway}"))
            .arg("--events")
            .arg(format!("127.0.0.1:{events}"))
            .args(["--runtimes", "globex-prod=tok-2", "--policy", policy])
            .args(["--variant", variant])
            .env("ORRERY_DATABASE_URL", database)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("start orrery"),
    )
}

#[test]
#[ignore = "needs a real PostgreSQL: make conformance-postgres"]
fn hardened_answers_an_event_only_once_it_is_committed_faithful_before_and_a_lost_database_stops_the_control_plane(
) {
    for variant in ["hardened", "faithful"] {
        let database = fresh_database(&format!("ack_{variant}"));
        let ports = [free_port(), free_port(), free_port()];
        let [_, gateway, events] = ports;
        let dir = std::env::temp_dir().join(format!("orrery-ack-{}-{variant}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let policy = dir.join("policy.yaml");
        std::fs::write(&policy, POLICY).unwrap();
        let log = dir.join("control-plane.log");
        let mut platform =
            control_plane_on(&database, variant, ports, policy.to_str().unwrap(), &log);
        let graphql = |token: &str, query: &str| {
            let body = serde_json::json!({"query": query}).to_string();
            http_as(gateway, "POST", "/2.0/api/graphql", &body, token)
        };
        eventually("the GitOps API answers", Duration::from_secs(20), || {
            graphql("alice-token", "{ me { name } }").is_some()
        });
        let (_, created) = graphql(
            "alice-token",
            r#"mutation { createRuntime(name: "prod") { newAccessToken } }"#,
        )
        .unwrap();
        let created: serde_json::Value = serde_json::from_str(&created).unwrap();
        let token = created["data"]["createRuntime"]["newAccessToken"]
            .as_str()
            .unwrap()
            .to_string();
        let report = move |rv: u64| {
            let token = token.clone();
            let (answered, answer) = std::sync::mpsc::channel();
            let post = move || {
                let status =
                    report_event(events, &token, &app_event("web", "team-a", "Synced", rv));
                let _ = answered.send(status);
            };
            std::thread::spawn(post); // determinism: real-env (real-mode test: a request that may hang)
            answer
        };
        assert_eq!(
            report(5).recv_timeout(Duration::from_secs(10)),
            Ok(Some(200))
        );
        // A second session locks the events table: the store cannot commit the next event.
        let release = lock_events(&database);
        let answer = report(6);
        let early = answer.recv_timeout(Duration::from_millis(1500));
        if variant == "hardened" {
            assert!(
                early.is_err(),
                "hardened answered before the commit: {early:?}"
            );
            drop(release);
            assert_eq!(answer.recv_timeout(Duration::from_secs(10)), Ok(Some(200)));
        } else {
            assert_eq!(
                early,
                Ok(Some(200)),
                "faithful answers once the event is queued"
            );
            drop(release);
        }
        if variant == "faithful" {
            continue;
        }
        // The database drops the control plane's connection: the next change cannot be
        // kept, its request is answered 503, and the process stops (fail-stop).
        sql(
            &database,
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = '{}' AND pid <> pg_backend_pid()",
                database.rsplit('/').next().unwrap()
            ),
        );
        let (code, body) = graphql(
            "bob-token",
            r#"mutation { createRuntime(name: "x") { name } }"#,
        )
        .expect("an answer");
        assert_eq!(code, 503, "{body}");
        assert!(
            body.contains("the platform's store is unavailable"),
            "{body}"
        );
        let mut exited = None;
        eventually("the control plane stops", Duration::from_secs(20), || {
            exited = platform.0.try_wait().unwrap();
            exited.is_some()
        });
        assert!(!exited.unwrap().success());
        let said = std::fs::read_to_string(&log).unwrap();
        assert!(said.contains("store writer"), "{said}");
    }
}

/// The Runner's state in PostgreSQL (issue 52): a control plane at schema version 1 is
/// migrated to 2 with what it held intact; then pipelines, builds (admitted and waiting),
/// agent tasks and their status revisions, a build's log, a webhook delivery hardened
/// deduplicates, and the ids made so far all survive a kill: the restarted control plane
/// carries on where the last one's answers left off.
#[test]
#[ignore = "needs a real PostgreSQL: make conformance-postgres"]
fn the_runners_builds_tasks_logs_and_deliveries_survive_a_kill_in_postgresql() {
    use crate::real_mode::exchange;
    let database = fresh_database("runner");
    // A database a release before the Runner's tables left: migration 1 and one runtime.
    let (version, name, first) = orrery_system::platform::store::postgres::MIGRATIONS[0];
    assert_eq!(version, 1);
    sql(&database, first);
    sql(
        &database,
        &format!(
            "CREATE TABLE orrery_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now()); \
             INSERT INTO orrery_schema_migrations (version, name) VALUES (1, '{name}'); \
             INSERT INTO revoked_tokens (token_sha256) VALUES ('kept-from-version-1')"
        ),
    );
    let (tunnel, gateway, runner) = (free_port(), free_port(), free_port());
    let runner_at = format!("127.0.0.1:{runner}");
    let start = || {
        Process(
            std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
                .args(["serve", "control-plane", "--admin-token", "adm", "--tunnel"])
                .arg(format!("127.0.0.1:{tunnel}"))
                .arg("--api")
                .arg(format!("127.0.0.1:{gateway}"))
                .args([
                    "--runner",
                    &runner_at,
                    "--runner-agents",
                    "agent-1=agent-tok",
                ])
                .args(["--runner-redeliver-after", "2s", "--variant", "hardened"])
                .env("ORRERY_DATABASE_URL", &database)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start orrery"),
        )
    };
    let up = || {
        eventually("the runner API answers", Duration::from_secs(20), || {
            http_as(runner, "GET", "/api/builds/none", "", "adm").is_some_and(|(s, _)| s == 404)
        })
    };
    let admin = |method: &str, path: &str, body: &str| {
        let (status, answer) = http_as(runner, method, path, body, "adm").expect(path);
        let value = serde_json::from_str(&answer).unwrap_or(serde_json::Value::Null);
        (status, value)
    };
    let as_agent = "authorization: agent-tok\r\n";
    let agent = |method: &str, path: &str, body: &str| {
        let (status, answer) = exchange(runner, method, path, body, as_agent).expect(path);
        let value = serde_json::from_str(&answer).unwrap_or(serde_json::Value::Null);
        (status, value)
    };
    let build =
        r#"{"pipeline":"demo/a","agent":"agent-1","steps":[{"millis":1000,"exit_code":0}]}"#;
    let deliver = || {
        let headers = "authorization: Bearer adm\r\nx-github-delivery: 72d3162e\r\n";
        let (status, answer) = exchange(runner, "POST", "/api/webhooks", build, headers).unwrap();
        (
            status,
            serde_json::from_str::<serde_json::Value>(&answer).unwrap(),
        )
    };
    let poll = "/api/agent/agent-1/tasks?waitForStatusReport=true";
    let status_of = |id: &str| admin("GET", &format!("/api/builds/{id}"), "").1["status"].clone();

    let platform = start();
    up();
    let (status, _) = admin("PUT", "/api/pipelines/demo/a", r#"{"concurrency":1}"#);
    assert_eq!(status, 200);
    let (status, made) = admin("POST", "/api/builds", build);
    assert_eq!(status, 201, "{made}");
    let (first, waiting) = (
        made["id"].as_str().unwrap().to_string(),
        admin("POST", "/api/builds", build).1,
    );
    let waiting = waiting["id"].as_str().unwrap().to_string();
    let (status, hooked) = deliver();
    assert_eq!(status, 201, "{hooked}");
    assert_eq!(
        (status_of(&first), status_of(&waiting)),
        ("elected".into(), "pending".into()),
        "concurrency 1 admits one"
    );
    // The agent takes the first build's three tasks and reports the claim made.
    let (status, tasks) = agent("GET", poll, "");
    assert_eq!(status, 200, "{tasks}");
    let tasks = tasks.as_array().unwrap().clone();
    assert_eq!(tasks.len(), 3, "{tasks:#?}");
    let claim = tasks[0]["_id"].as_str().unwrap().to_string();
    let report = format!("/api/agent/agent-1/tasks/{claim}/statuses");
    let done = r#"{"status":"Success","occurredAt":"2026-11-30T00:00:00Z","statusRevision":1,"isRetriable":false}"#;
    assert_eq!(agent("POST", &report, done).0, 200);
    // Its engine starts and writes two lines.
    let engine = format!("/api/builds/{first}/engine");
    let logs = format!("/api/builds/{first}/logs");
    assert_eq!(
        exchange(runner, "POST", &engine, r#"{"exitCode":null}"#, as_agent)
            .unwrap()
            .0,
        200
    );
    let (status, next) = agent("POST", &logs, r#"{"from":0,"lines":["step 1","step 2"]}"#);
    assert_eq!((status, next["next"].as_u64()), (200, Some(2)), "{next}");
    drop(platform); // SIGKILL: every answer above waited for its commit, nothing else is flushed.

    let _platform = start();
    up();
    assert_eq!(
        (status_of(&first), status_of(&waiting)),
        ("running".into(), "pending".into())
    );
    assert_eq!(
        admin("GET", "/api/pipelines/demo/a", "").1["concurrency"],
        1,
        "the pipeline's settings"
    );
    let (_, page) = admin("GET", &format!("{logs}?from=0"), "");
    assert_eq!(
        page["lines"],
        serde_json::json!(["step 1", "step 2"]),
        "{page}"
    );
    // A line sent again after its answer was lost is kept once; the log goes on after it.
    let (status, next) = agent("POST", &logs, r#"{"from":1,"lines":["step 2","step 3"]}"#);
    assert_eq!((status, next["next"].as_u64()), (200, Some(3)), "{next}");
    // The claim's report was taken: the same revision again is stale.
    assert_eq!(agent("POST", &report, done).0, 409);
    // The redelivery of the webhook is answered with the build it started before the kill.
    let (status, again) = deliver();
    assert_eq!((status, &again["id"]), (200, &hooked["id"]), "{again}");
    // The two tasks never reported come back once their lease (2 s) runs out, not the claim.
    let mut redelivered = Vec::new();
    eventually(
        "the unreported tasks are handed out again",
        Duration::from_secs(10),
        || {
            let (_, tasks) = agent("GET", poll, "");
            redelivered.extend(tasks.as_array().cloned().unwrap_or_default());
            redelivered.len() >= 2
        },
    );
    let ids: Vec<&str> = redelivered
        .iter()
        .map(|t| t["_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            tasks[1]["_id"].as_str().unwrap(),
            tasks[2]["_id"].as_str().unwrap()
        ]
    );
    // Ids go on from the last ones made: a new build is not b00001 again.
    let (_, fourth) = admin("POST", "/api/builds", build);
    assert_eq!(fourth["id"], "b00004", "{fourth}");
    // The first build ends: the waiting one is admitted, as before the kill.
    assert_eq!(
        exchange(runner, "POST", &engine, r#"{"exitCode":0}"#, as_agent)
            .unwrap()
            .0,
        200
    );
    assert_eq!(status_of(&first), "success");
    assert_eq!(status_of(&waiting), "elected");

    // The store: migration 2 applied on top of 1, what 1 held kept; the log one row a line.
    assert_eq!(
        sql(
            &database,
            "SELECT version FROM orrery_schema_migrations ORDER BY version"
        ),
        ["1", "2"]
    );
    assert_eq!(
        sql(&database, "SELECT token_sha256 FROM revoked_tokens"),
        ["kept-from-version-1"]
    );
    assert_eq!(
        sql(
            &database,
            &format!("SELECT line FROM runner_log_lines WHERE build = '{first}' ORDER BY line_no")
        ),
        ["step 1", "step 2", "step 3"]
    );
    assert_eq!(
        sql(
            &database,
            "SELECT key FROM runner_objects WHERE kind = 'build' ORDER BY key"
        ),
        ["b00001", "b00002", "b00003", "b00004"]
    );
}
