//! `orrery-containers`: make conformance's real services in Docker, through testcontainers.
//!
//! ```text
//! orrery-containers [--redis] [--postgres [--postgres-tls DIR]] [--k3s DIR] -- COMMAND [ARGS...]
//! ```
//!
//! Starts what is asked for, runs COMMAND with the same variables the local-process scripts
//! export (`conformance/redis/run.sh`, `conformance/postgres/run.sh`, `conformance/kube/run.sh`),
//! removes the containers when COMMAND ends whatever its result, and exits with COMMAND's code.
//! `conformance/containers.sh` builds it and the scripts choose it when a Docker engine answers
//! (docs/conformance.md, "With Docker").

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use testcontainers::runners::AsyncRunner;
use testcontainers::CopyTargetOptions;
use testcontainers::{ContainerAsync, ImageExt};
use testcontainers_modules::k3s::{K3s, KUBE_SECURE_PORT};
use testcontainers_modules::postgres::Postgres;
use testcontainers_modules::redis::{Redis, REDIS_PORT};

/// Redis as Debian bookworm ships it (7.0), the version the local path's answers are recorded
/// against; Argo CD's Redis holds only the reporter's dedup cache.
const REDIS_TAG: &str = "7.0";
/// PostgreSQL 15, as Debian's `postgresql-15` that the local path installs.
const POSTGRES_TAG: &str = "15";
/// k3s at the Kubernetes release the built-from-source kube-apiserver pins
/// (`conformance/kube/go.mod`: k8s.io/kubernetes v1.36.3).
const K3S_TAG: &str = "v1.36.3-k3s1";
/// k3s starts its controllers, kubelet and CoreDNS before it says the node is synced.
const K3S_STARTUP: Duration = Duration::from_secs(300);
/// PostgreSQL's superuser, as in the local path.
const POSTGRES_USER: &str = "orrery";

/// What went wrong, named for the user who ran `make conformance`.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("usage: orrery-containers [--redis] [--postgres [--postgres-tls DIR]] [--k3s DIR] -- COMMAND [ARGS...]\n{0}")]
    Usage(String),
    #[error("no Docker engine answered (DOCKER_HOST={docker_host}) while starting {what}: {source}\nWithout Docker, run with ORRERY_CONTAINERS=off: the scripts then start local processes")]
    Engine {
        what: &'static str,
        docker_host: String,
        source: Box<testcontainers::TestcontainersError>,
    },
    #[error("{what}: {source}")]
    Container {
        what: &'static str,
        source: Box<testcontainers::TestcontainersError>,
    },
    #[error("k3s wrote no usable kubeconfig into {dir}: {reason}")]
    Kubeconfig { dir: PathBuf, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not run {command}: {source}")]
    Command {
        command: String,
        source: std::io::Error,
    },
}

/// The services asked for and the command to run with them.
#[derive(Debug, PartialEq)]
struct Plan {
    redis: bool,
    postgres: Option<PostgresPlan>,
    /// The scratch directory k3s writes its kubeconfig into (mounted at /etc/rancher/k3s).
    k3s: Option<PathBuf>,
    command: Vec<String>,
}

/// PostgreSQL, with the TLS material `conformance/postgres/tls.sh` made, if any.
#[derive(Debug, PartialEq)]
struct PostgresPlan {
    tls: Option<PathBuf>,
}

impl Plan {
    /// Reads the command line (without the program's name).
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Plan, Error> {
        let mut args = args.into_iter();
        let (mut redis, mut postgres, mut tls, mut k3s) = (false, false, None, None);
        loop {
            match args.next().as_deref() {
                Some("--redis") => redis = true,
                Some("--postgres") => postgres = true,
                Some("--postgres-tls") => tls = Some(Self::dir(args.next(), "--postgres-tls")?),
                Some("--k3s") => k3s = Some(Self::dir(args.next(), "--k3s")?),
                Some("--") => break,
                Some(other) => return Err(Error::Usage(format!("unknown argument {other:?}"))),
                None => return Err(Error::Usage("no `-- COMMAND` to run".into())),
            }
        }
        let command: Vec<String> = args.collect();
        if command.is_empty() {
            return Err(Error::Usage("no COMMAND after `--`".into()));
        }
        if tls.is_some() && !postgres {
            return Err(Error::Usage("--postgres-tls without --postgres".into()));
        }
        if !(redis || postgres || k3s.is_some()) {
            return Err(Error::Usage(
                "no service asked for (--redis, --postgres, --k3s)".into(),
            ));
        }
        Ok(Plan {
            redis,
            postgres: postgres.then_some(PostgresPlan { tls }),
            k3s,
            command,
        })
    }

    fn dir(value: Option<String>, flag: &str) -> Result<PathBuf, Error> {
        value
            .filter(|v| !v.is_empty() && !v.starts_with("--"))
            .map(PathBuf::from)
            .ok_or_else(|| Error::Usage(format!("{flag} needs a directory")))
    }
}

/// The variables `conformance/redis/run.sh` exports, for a Redis at `host:port`.
fn redis_env(host: &str, port: u16) -> Vec<(String, String)> {
    vec![
        ("ORRERY_REDIS_ADDR".into(), format!("{host}:{port}")),
        (
            "ORRERY_REDIS_VERSION".into(),
            format!("{REDIS_TAG} (container redis:{REDIS_TAG})"),
        ),
    ]
}

/// The variables `conformance/postgres/run.sh` exports, for a PostgreSQL at `host:port`.
fn postgres_env(
    host: &str,
    port: u16,
    password: &str,
    tls: Option<&Path>,
) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "ORRERY_POSTGRES_URL".into(),
            format!("postgres://{POSTGRES_USER}:{password}@{host}:{port}/postgres"),
        ),
        (
            "ORRERY_POSTGRES_VERSION".into(),
            format!("{POSTGRES_TAG} (container postgres:{POSTGRES_TAG})"),
        ),
    ];
    if let Some(dir) = tls {
        env.push(("ORRERY_POSTGRES_CA".into(), path_text(&dir.join("ca.crt"))));
        env.push((
            "ORRERY_POSTGRES_OTHER_CA".into(),
            path_text(&dir.join("other-ca.crt")),
        ));
    }
    env
}

/// The address to reach a published port at: Docker publishes on every interface, and the
/// tests' certificates and error messages name `127.0.0.1`, so testcontainers' `localhost`
/// becomes that (a remote engine's address is kept).
fn reachable(host: &str) -> String {
    if host == "localhost" {
        "127.0.0.1".into()
    } else {
        host.into()
    }
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The init script the postgres image runs once, as the `postgres` user, after initdb: TLS
/// with the certificate tls.sh made, and role orrery_tls refused without TLS — the local
/// path's configuration, so the same TLS test runs against both.
const POSTGRES_TLS_INIT: &str = r#"#!/bin/sh
set -e
cp /docker-entrypoint-initdb.d/server.crt /docker-entrypoint-initdb.d/server.key "$PGDATA/"
chmod 600 "$PGDATA/server.key"
printf "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n" >> "$PGDATA/postgresql.conf"
{ echo "hostnossl all orrery_tls 0.0.0.0/0 reject"; echo "hostnossl all orrery_tls ::/0 reject"; cat "$PGDATA/pg_hba.conf"; } > "$PGDATA/pg_hba.conf.new"
mv "$PGDATA/pg_hba.conf.new" "$PGDATA/pg_hba.conf"
"#;

/// k3s's kubeconfig (YAML) with its server moved to the address Docker maps 6443 to: k3s
/// writes `https://127.0.0.1:6443`, its address inside the container. Written as JSON, which
/// every kubeconfig reader takes (JSON is YAML).
fn kubeconfig_for(yaml: &str, host: &str, port: u16) -> Result<String, String> {
    let mut config: Value = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
    let clusters = config
        .get_mut("clusters")
        .and_then(Value::as_array_mut)
        .filter(|c| !c.is_empty())
        .ok_or("no clusters")?;
    for cluster in clusters {
        let server = cluster
            .get_mut("cluster")
            .and_then(|c| c.get_mut("server"))
            .ok_or("a cluster without a server")?;
        *server = Value::String(format!("https://{host}:{port}"));
    }
    serde_json::to_string_pretty(&config).map_err(|e| e.to_string())
}

/// A started container, kept until the command ends.
enum Running {
    Redis(ContainerAsync<Redis>),
    Postgres(ContainerAsync<Postgres>),
    K3s(ContainerAsync<K3s>),
}

impl Running {
    async fn remove(self) {
        let removed = match self {
            Running::Redis(c) => c.rm().await,
            Running::Postgres(c) => c.rm().await,
            Running::K3s(c) => c.rm().await,
        };
        if let Err(e) = removed {
            eprintln!("orrery-containers: could not remove a container: {e}");
        }
    }
}

/// The first start meets the engine: its failure is worded as "no Docker engine".
fn started<I>(
    what: &'static str,
    first: bool,
    result: Result<ContainerAsync<I>, testcontainers::TestcontainersError>,
) -> Result<ContainerAsync<I>, Error>
where
    I: testcontainers::Image,
{
    result.map_err(|source| match (&source, first) {
        (testcontainers::TestcontainersError::Client(_), true) => Error::Engine {
            what,
            docker_host: std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unset".into()),
            source: Box::new(source),
        },
        _ => Error::Container {
            what,
            source: Box::new(source),
        },
    })
}

fn container(what: &'static str) -> impl Fn(testcontainers::TestcontainersError) -> Error {
    move |source| Error::Container {
        what,
        source: Box::new(source),
    }
}

/// Starts what `plan` asks for, pushing each container into `running` as soon as it runs (so
/// a later failure still removes it), and returns the variables for the command.
async fn start(plan: &Plan, running: &mut Vec<Running>) -> Result<Vec<(String, String)>, Error> {
    let mut env = Vec::new();
    if plan.redis {
        let c = started(
            "redis",
            running.is_empty(),
            Redis::default().with_tag(REDIS_TAG).start().await,
        )?;
        let host = reachable(&c.get_host().await.map_err(container("redis"))?.to_string());
        let port = c
            .get_host_port_ipv4(REDIS_PORT)
            .await
            .map_err(container("redis"))?;
        env.extend(redis_env(&host, port));
        eprintln!("orrery-containers: redis:{REDIS_TAG} ready on {host}:{port}");
        running.push(Running::Redis(c));
    }
    if let Some(postgres) = &plan.postgres {
        let password = format!("orrery-{}", std::process::id());
        let mut image = Postgres::default()
            .with_user(POSTGRES_USER)
            .with_password(&password)
            .with_tag(POSTGRES_TAG);
        if let Some(dir) = &postgres.tls {
            for file in ["server.crt", "server.key"] {
                let bytes = std::fs::read(dir.join(file)).map_err(|source| Error::Io {
                    path: dir.join(file),
                    source,
                })?;
                image = image.with_copy_to(
                    CopyTargetOptions::new(format!("/docker-entrypoint-initdb.d/{file}"))
                        .with_mode(0o644),
                    bytes,
                );
            }
            image = image.with_copy_to(
                CopyTargetOptions::new("/docker-entrypoint-initdb.d/tls.sh").with_mode(0o755),
                POSTGRES_TLS_INIT.as_bytes().to_vec(),
            );
        }
        let c = started("postgres", running.is_empty(), image.start().await)?;
        let host = c
            .get_host()
            .await
            .map_err(container("postgres"))?
            .to_string();
        let port = c
            .get_host_port_ipv4(5432)
            .await
            .map_err(container("postgres"))?;
        env.extend(postgres_env(
            &host,
            port,
            &password,
            postgres.tls.as_deref(),
        ));
        eprintln!("orrery-containers: postgres:{POSTGRES_TAG} ready on {host}:{port}");
        running.push(Running::Postgres(c));
    }
    if let Some(dir) = &plan.k3s {
        let image = K3s::default()
            .with_conf_mount(dir)
            .with_tag(K3S_TAG)
            .with_privileged(true)
            .with_userns_mode("host")
            .with_startup_timeout(K3S_STARTUP);
        let c = started("k3s", running.is_empty(), image.start().await)?;
        let host = reachable(&c.get_host().await.map_err(container("k3s"))?.to_string());
        let port = c
            .get_host_port_ipv4(KUBE_SECURE_PORT)
            .await
            .map_err(container("k3s"))?;
        let kubeconfig_error = |reason: String| Error::Kubeconfig {
            dir: dir.clone(),
            reason,
        };
        let yaml = c
            .image()
            .read_kube_config()
            .map_err(|e| kubeconfig_error(e.to_string()))?;
        let json = kubeconfig_for(&yaml, &host, port).map_err(kubeconfig_error)?;
        let path = dir.join("kubeconfig.json");
        std::fs::write(&path, json).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        env.push(("KUBECONFIG".into(), path_text(&path)));
        // The runtime suite writes its rows under a section of their own.
        env.push(("ORRERY_CONFORMANCE_CLUSTER".into(), "k3s".into()));
        eprintln!(
            "orrery-containers: rancher/k3s:{K3S_TAG} ready on {host}:{port} (KUBECONFIG={})",
            path.display()
        );
        running.push(Running::K3s(c));
    }
    Ok(env)
}

async fn run(plan: Plan) -> Result<ExitCode, Error> {
    let mut running = Vec::new();
    let outcome = match start(&plan, &mut running).await {
        Ok(env) => {
            let (program, args) = plan.command.split_first().expect("parse keeps a command");
            tokio::process::Command::new(program)
                .args(args)
                .envs(env)
                .status()
                .await
                .map_err(|source| Error::Command {
                    command: program.clone(),
                    source,
                })
        }
        Err(e) => Err(e),
    };
    for c in running.into_iter().rev() {
        c.remove().await;
    }
    let status = outcome?;
    // A command killed by a signal has no code: report it as a failure.
    Ok(ExitCode::from(
        status.code().map_or(1, |c| c.clamp(0, 255) as u8),
    ))
}

fn main() -> ExitCode {
    let plan = match Plan::parse(std::env::args().skip(1)) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("orrery-containers: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(plan)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("orrery-containers: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_command_line_names_services_and_the_command() {
        let plan = Plan::parse(args(
            "--redis --postgres --postgres-tls /t --k3s /k -- cargo test -q",
        ))
        .unwrap();
        assert_eq!(
            plan,
            Plan {
                redis: true,
                postgres: Some(PostgresPlan {
                    tls: Some("/t".into())
                }),
                k3s: Some("/k".into()),
                command: args("cargo test -q"),
            }
        );
        // What follows `--` is the command's, flags included.
        let plan = Plan::parse(args("--redis -- env --redis")).unwrap();
        assert_eq!(plan.command, args("env --redis"));
        assert_eq!(plan.postgres, None);
    }

    #[test]
    fn a_bad_command_line_says_what_is_wrong() {
        for (line, wanted) in [
            ("--redis", "no `-- COMMAND`"),
            ("--redis --", "no COMMAND after"),
            ("-- true", "no service asked for"),
            ("--mysql -- true", "unknown argument \"--mysql\""),
            ("--k3s -- true", "--k3s needs a directory"),
            (
                "--postgres-tls /t -- true",
                "--postgres-tls without --postgres",
            ),
        ] {
            let error = Plan::parse(args(line)).unwrap_err().to_string();
            assert!(error.contains(wanted), "{line}: {error}");
            assert!(
                error.starts_with("usage: orrery-containers"),
                "{line}: {error}"
            );
        }
    }

    #[test]
    fn the_variables_are_the_local_scripts_names() {
        assert_eq!(
            redis_env("127.0.0.1", 32768)[0],
            ("ORRERY_REDIS_ADDR".into(), "127.0.0.1:32768".into())
        );
        let env = postgres_env("localhost", 5433, "pw", Some(Path::new("/tls")));
        assert_eq!(
            env,
            vec![
                (
                    "ORRERY_POSTGRES_URL".into(),
                    "postgres://orrery:pw@localhost:5433/postgres".into()
                ),
                (
                    "ORRERY_POSTGRES_VERSION".into(),
                    "15 (container postgres:15)".into()
                ),
                ("ORRERY_POSTGRES_CA".into(), "/tls/ca.crt".into()),
                (
                    "ORRERY_POSTGRES_OTHER_CA".into(),
                    "/tls/other-ca.crt".into()
                ),
            ]
        );
        assert_eq!(postgres_env("h", 1, "pw", None).len(), 2);
        assert_eq!(reachable("localhost"), "127.0.0.1");
        assert_eq!(reachable("172.17.0.1"), "172.17.0.1");
    }

    /// k3s's own kubeconfig, as it writes it (certificates shortened).
    const K3S_YAML: &str = "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTi==
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: LS0tLS1CRUdJTi==
    client-key-data: LS0tLS1CRUdJTi==
";

    #[test]
    fn the_kubeconfig_points_at_the_mapped_port_and_keeps_the_rest() {
        let json = kubeconfig_for(K3S_YAML, "127.0.0.1", 40123).unwrap();
        let config: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:40123"
        );
        assert_eq!(
            config["clusters"][0]["cluster"]["certificate-authority-data"],
            "LS0tLS1CRUdJTi=="
        );
        assert_eq!(config["current-context"], "default");
        assert_eq!(
            config["users"][0]["user"]["client-key-data"],
            "LS0tLS1CRUdJTi=="
        );
    }

    #[test]
    fn a_kubeconfig_without_a_server_is_refused() {
        assert_eq!(
            kubeconfig_for("kind: Config\nclusters: []\n", "h", 1).unwrap_err(),
            "no clusters"
        );
        assert_eq!(
            kubeconfig_for("clusters:\n- name: x\n  cluster: {}\n", "h", 1).unwrap_err(),
            "a cluster without a server"
        );
        assert!(kubeconfig_for("clusters: [", "h", 1).is_err());
    }
}
