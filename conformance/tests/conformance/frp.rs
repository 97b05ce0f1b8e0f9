//! The real frp (v0.44.0, what the Codefresh runtime's tunnel is built on) against the
//! faithful tunnel client's model of it: a test proxy between frpc and frps drops the
//! control connection and refuses every new one, and the times frpc tries again are
//! compared with `tunnel_client::backoff::Reconnect`'s faithful schedule; a black-holed
//! path (open, silent) must be noticed by frpc's multiplexer keepalive as the faithful
//! client's keepalive settings say; a first login
//! with a wrong token must end frpc (the pod then restarts), as the faithful client's
//! `Fatal::FirstLoginRefused` does; so must a first login to a server that is not there,
//! which the faithful client, run here against the same closed port, must end with
//! `Fatal::FirstLoginFailed`. A restarted frpc (a new run id) whose old session vanished
//! without a word is refused its subdomain until frps notices, and asks again 30 s later;
//! orrery's faithful server and client, run through the same sequence, must do the same.
//! Without `ORRERY_FRPC` (no Go here, optional mode) the tests
//! say FRP CONFORMANCE SKIPPED.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orrery_system::core::Variant;
use orrery_system::env::{RealEnv, SharedEnv};
use orrery_system::runtime::tunnel_client::backoff::Reconnect;
use tokio::net::{TcpListener, TcpStream};

/// frpc and frps from `conformance/frp/run.sh`, or `None` when skipped.
fn binaries() -> Option<(String, String)> {
    match (std::env::var("ORRERY_FRPC"), std::env::var("ORRERY_FRPS")) {
        (Ok(frpc), Ok(frps)) => Some((frpc, frps)),
        _ if std::env::var("ORRERY_CONFORMANCE_OPTIONAL").is_ok_and(|v| v == "1") => {
            eprintln!("FRP CONFORMANCE SKIPPED: no ORRERY_FRPC (see conformance/frp/run.sh)");
            None
        }
        _ => panic!("ORRERY_FRPC is not set: run through conformance/frp/run.sh (make conformance-apiserver)"),
    }
}

/// A TCP proxy that forwards to `target` until told the server is gone; from then on it
/// cuts every connection and refuses new ones, noting when each attempt came.
struct Proxy {
    port: u16,
    dead: Arc<AtomicBool>,
    /// Open connections stay open but forward nothing (a black hole).
    hole: Arc<AtomicBool>,
    attempts: Arc<Mutex<Vec<Instant>>>,
    cut: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let dead = Arc::new(AtomicBool::new(false));
        let hole = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let cut = Arc::new(Mutex::new(Vec::new()));
        let (d, h, a, c) = (dead.clone(), hole.clone(), attempts.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                a.lock().unwrap().push(Instant::now());
                if d.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let hole = h.clone();
                let task = tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await {
                        let (from_client, to_client) = client.into_split();
                        let (from_server, to_server) = server.into_split();
                        tokio::select! {
                            _ = pump(from_client, to_server, hole.clone()) => {}
                            _ = pump(from_server, to_client, hole) => {}
                        }
                    }
                });
                c.lock().unwrap().push(task.abort_handle());
            }
        });
        Proxy {
            port,
            dead,
            hole,
            attempts,
            cut,
        }
    }

    /// The path goes silent: open connections stay open and carry nothing, new ones are
    /// refused. Returns when.
    fn black_hole(&self) -> Instant {
        self.hole.store(true, Ordering::SeqCst);
        self.dead.store(true, Ordering::SeqCst);
        Instant::now()
    }

    /// The server "dies": every connection is cut, new ones are refused. Returns when.
    fn kill(&self) -> Instant {
        self.dead.store(true, Ordering::SeqCst);
        for task in self.cut.lock().unwrap().drain(..) {
            task.abort();
        }
        Instant::now()
    }

    /// Attempts after `since`, in seconds from it.
    fn attempts_after(&self, since: Instant) -> Vec<f64> {
        self.attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|t| **t >= since)
            .map(|t| t.duration_since(since).as_secs_f64())
            .collect()
    }
}

/// Copies `from` to `to` until either ends; bytes read while `hole` is set are dropped, and
/// once it is set an end is not passed on either (the far side never learns of it: a host
/// that vanished).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hole: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) if hole.load(Ordering::SeqCst) => {
                let _keep_open = to;
                return std::future::pending().await;
            }
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if hole.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(program: &str, config: &std::path::Path, log: &std::path::Path) -> Process {
    let log = std::fs::File::create(log).unwrap();
    Process(
        std::process::Command::new(program)
            .arg("-c")
            .arg(config)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}")),
    )
}

/// frps on a free port with `token`, listening: the process and its port.
async fn start_frps(frps: &str, dir: &std::path::Path, token: &str) -> (Process, u16) {
    serve_frps(frps, dir, |port| {
        format!("[common]\nbind_port = {port}\ntoken = {token}\n")
    })
    .await
}

/// frps with the configuration `config(bind_port)`, listening: the process and its bind port.
/// A free port can be taken by another test's connection between `free_port` and frps's
/// bind (frps then exits), so a frps that exits before it listens is started again on new
/// ports, up to five times; a failure shows frps's log.
async fn serve_frps(
    frps: &str,
    dir: &std::path::Path,
    config: impl Fn(u16) -> String,
) -> (Process, u16) {
    let (ini, log) = (dir.join("frps.ini"), dir.join("frps.log"));
    for _ in 0..5 {
        let port = free_port();
        std::fs::write(&ini, config(port)).unwrap();
        let mut process = spawn(frps, &ini, &log);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return (process, port);
            }
            if process.0.try_wait().ok().flatten().is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "frps did not listen on {port} within 20 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!(
        "frps exited before listening, five times; its last log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    )
}

/// frps, the test proxy in front of it, and frpc (its `[common]` section plus `extra`) logged
/// in through the proxy.
async fn logged_in_behind_proxy(
    frpc: &str,
    frps: &str,
    dir: &std::path::Path,
    extra: &str,
) -> (Process, Proxy, Process) {
    let (frps, server_port) = start_frps(frps, dir, "t").await;
    let proxy = Proxy::start(server_port).await;
    std::fs::write(
        dir.join("frpc.ini"),
        format!(
            "[common]\nserver_addr = 127.0.0.1\nserver_port = {}\ntoken = t\n{extra}",
            proxy.port
        ),
    )
    .unwrap();
    let frpc = spawn(frpc, &dir.join("frpc.ini"), &dir.join("frpc.log"));
    assert!(
        logged(
            &dir.join("frpc.log"),
            "login to server success",
            Duration::from_secs(10)
        )
        .await,
        "frpc never logged in: {}",
        std::fs::read_to_string(dir.join("frpc.log")).unwrap_or_default()
    );
    (frps, proxy, frpc)
}

/// How `process` ended within 10 s, or `None` if it still runs.
async fn exit_within_10s(process: &mut Process) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("orrery-frp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits until `log` contains `text` (frpc logs to stdout).
async fn logged(log: &std::path::Path, text: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if std::fs::read_to_string(log).is_ok_and(|l| l.contains(text)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The faithful model's attempt times after a drop (of a tunnel that had been up for
/// minutes): its wait after the drop, then its waits after each failed login; cumulative,
/// in seconds.
fn model_attempts(within: f64) -> Vec<f64> {
    let env: SharedEnv = Arc::new(RealEnv::new("frp-model"));
    let mut schedule = Reconnect::new(Variant::Faithful, Duration::ZERO);
    let up = Duration::from_secs(300);
    let mut at = schedule.after_drop(&env, up, up).as_secs_f64();
    let mut times = Vec::new();
    while at <= within {
        times.push(at);
        at += schedule.after_failed_attempt(&env).as_secs_f64();
    }
    times
}

/// How long the proxy refuses frps in the reconnect test.
const DOWN_FOR: f64 = 25.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs frp: make conformance-apiserver or make conformance"]
async fn frpc_retries_a_dropped_server_on_the_faithful_clients_schedule() {
    let Some((frpc, frps)) = binaries() else {
        return;
    };
    let dir = scratch("reconnect");
    let (_frps, proxy, _frpc) = logged_in_behind_proxy(&frpc, &frps, &dir, "").await;
    let killed = proxy.kill();
    tokio::time::sleep(Duration::from_secs_f64(DOWN_FOR)).await;
    let real = proxy.attempts_after(killed);
    let model = model_attempts(DOWN_FOR - 0.5);
    let _ = std::fs::remove_dir_all(&dir);
    let show = |times: &[f64]| {
        times
            .iter()
            .map(|t| format!("{t:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "frp reconnect after a drop: real frpc tried at [{}] s, the faithful model at [{}] s",
        show(&real),
        show(&model)
    );
    // frp 0.44's `keepControllerWorking`: the first retry within 0–0.5 s of the drop, then
    // waits of 1 s doubling to 20 s, each ±10 %. Each wait within 0.3 s + 10 % (a failed
    // login itself takes a moment).
    let gaps = |times: &[f64]| times.windows(2).map(|w| w[1] - w[0]).collect::<Vec<f64>>();
    let like = |times: &[f64], first: f64, waits: &[f64]| {
        times.first().is_some_and(|t| *t <= first)
            && gaps(times).len() == waits.len()
            && gaps(times)
                .iter()
                .zip(waits)
                .all(|(r, m)| (r - m).abs() <= 0.3 + 0.1 * m)
    };
    let frp_waits = [1.0, 2.0, 4.0, 8.0];
    let real_is_frp = like(&real, 1.0, &frp_waits);
    let model_is_frp = like(&model, 0.5, &frp_waits);
    record_row(
        "reconnect",
        &format!(
            "| retries after the control connection drops ({DOWN_FOR:.0} s down) | frpc: within 0.5 s, then waits of 1, 2, 4, 8 s ±10 % (doubling to 20 s) — {}; the faithful model: frp 0.44's two loops (0–0.5 s after a drop, the fourth drop of a minute on slower; 1 s doubling to 20 s ±10 % between failed logins) | {} |",
            if real_is_frp { "as measured" } else { "NOT AS MEASURED BEFORE" },
            if model_is_frp { "matches" } else { "DIFFERS" }
        ),
    );
    assert!(
        real_is_frp,
        "real frpc tried at [{}] s (waits [{}]): not frp 0.44's schedule (at once, then 1, 2, 4, 8 s)",
        show(&real),
        show(&gaps(&real))
    );
    assert!(
        model_is_frp,
        "the faithful model tries at [{}] s (waits [{}]): not frp 0.44's schedule",
        show(&model),
        show(&gaps(&model))
    );
}

/// The multiplexer keepalive interval the black-hole test gives frpc (the default is 60 s).
const KEEPALIVE_S: f64 = 5.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs frp: make conformance-apiserver or make conformance"]
async fn frpc_notices_a_black_holed_connection_by_its_multiplexer_keepalive() {
    let Some((frpc, frps)) = binaries() else {
        return;
    };
    let dir = scratch("blackhole");
    let (_frps, proxy, _frpc) = logged_in_behind_proxy(
        &frpc,
        &frps,
        &dir,
        &format!("tcp_mux_keepalive_interval = {KEEPALIVE_S}\n"),
    )
    .await;
    let holed = proxy.black_hole();
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.attempts_after(holed).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let noticed = proxy.attempts_after(holed).first().copied();
    // yamux pings every interval and drops the session when a ping is not answered within
    // its ConnectionWriteTimeout (10 s): the drop comes 10 to 10 + interval s after the path
    // went silent, and frp tries again within 0.5 s.
    let timeout = 10.0;
    let real_ok =
        noticed.is_some_and(|t| (timeout - 0.5..=timeout + KEEPALIVE_S + 1.0).contains(&t));
    // The faithful model pings every 60 s (frp's default interval) and gives up on a ping
    // after its keepalive timeout: yamux's 10 s.
    let model = orrery_system::runtime::tunnel_client::Config::new(
        Variant::Faithful,
        "127.0.0.1:1",
        "acme-hole",
        "t",
    );
    let model_ok = model.keepalive == Duration::from_secs(60)
        && model.keepalive_timeout == Duration::from_secs_f64(timeout);
    eprintln!(
        "frp black hole: frpc tried again {noticed:?} s after the path went silent (keepalive every {KEEPALIVE_S} s); the faithful model pings every {:?}, timeout {:?}",
        model.keepalive, model.keepalive_timeout
    );
    record_row(
        "blackhole",
        &format!(
            "| a black-holed connection (open, silent) | frpc with a {KEEPALIVE_S:.0} s multiplexer keepalive tried again {} after the path went silent: yamux drops a session whose ping is unanswered for 10 s (so 10 to 10 + interval s); the faithful model: an HTTP/2 PING every 60 s (frp's default interval), dropped after 10 s unanswered | {} |",
            if real_ok { format!("{:.0}–{:.0} s", timeout, timeout + KEEPALIVE_S) } else { "OUTSIDE 10 s TO 10 s + INTERVAL".into() },
            if real_ok && model_ok { "matches" } else { "DIFFERS" }
        ),
    );
    assert!(
        real_ok,
        "frpc noticed the black hole after {noticed:?} s, not within {timeout} to {} s",
        timeout + KEEPALIVE_S
    );
    assert!(
        model_ok,
        "the faithful model's keepalive is {:?} with a {:?} timeout, not 60 s and 10 s",
        model.keepalive, model.keepalive_timeout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs frp: make conformance-apiserver or make conformance"]
async fn frpc_exits_when_its_first_login_is_refused() {
    let Some((frpc, frps)) = binaries() else {
        return;
    };
    let dir = scratch("login");
    let (_frps, server_port) = start_frps(&frps, &dir, "right").await;
    std::fs::write(
        dir.join("frpc.ini"),
        format!("[common]\nserver_addr = 127.0.0.1\nserver_port = {server_port}\ntoken = wrong\n"),
    )
    .unwrap();
    let mut frpc = spawn(&frpc, &dir.join("frpc.ini"), &dir.join("frpc.log"));
    let status = exit_within_10s(&mut frpc).await;
    let log = std::fs::read_to_string(dir.join("frpc.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    // Refused for its token, not for anything else.
    let exited =
        status.is_some_and(|s| !s.success()) && log.contains("token in login doesn't match");
    record_row(
        "login",
        &format!(
            "| a first login with a wrong token | the client exits (the pod restarts); the faithful client's run ends with `Fatal::FirstLoginRefused` | {} |",
            if exited { "matches" } else { "DIFFERS" }
        ),
    );
    assert!(
        exited,
        "frpc did not exit on a refused first login within 10 s: {status:?}\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs frp: make conformance-apiserver or make conformance"]
async fn frpc_exits_when_its_first_login_finds_no_server() {
    let Some((frpc, _)) = binaries() else { return };
    let dir = scratch("absent");
    std::fs::write(
        dir.join("frpc.ini"),
        format!(
            "[common]\nserver_addr = 127.0.0.1\nserver_port = {}\ntoken = t\n",
            free_port()
        ),
    )
    .unwrap();
    let mut frpc = spawn(&frpc, &dir.join("frpc.ini"), &dir.join("frpc.log"));
    let status = exit_within_10s(&mut frpc).await;
    let _ = std::fs::remove_dir_all(&dir);
    let exited = status.is_some_and(|s| !s.success());
    // The faithful client against a closed port too: its run must end, not retry.
    let closed = format!("127.0.0.1:{}", free_port());
    let client = orrery_system::runtime::tunnel_client::Config::new(
        Variant::Faithful,
        &closed,
        "acme-absent",
        "t",
    );
    let handler: orrery_system::runtime::tunnel_client::Handler =
        Arc::new(|_request| Box::pin(async { unreachable!("no tunnel, no request") }));
    let env: SharedEnv = Arc::new(RealEnv::new("frp-absent"));
    let ended = tokio::time::timeout(
        Duration::from_secs(10),
        orrery_system::runtime::tunnel_client::run(env, client, handler),
    )
    .await;
    let model_exits = matches!(
        ended,
        Ok(Err(
            orrery_system::runtime::tunnel_client::Fatal::FirstLoginFailed(_)
        ))
    );
    record_row(
        "login-absent",
        &format!(
            "| a first login to a server that is not listening | frpc {}; the faithful client's run ends with `Fatal::FirstLoginFailed` and the world's kubelet restarts it (CrashLoopBackOff: 10 s doubling to 5 min) | {} |",
            if exited { "exits" } else { "DOES NOT EXIT" },
            if exited && model_exits { "matches" } else { "DIFFERS" }
        ),
    );
    assert!(
        exited,
        "frpc did not exit when its first login found no server: {status:?}"
    );
    assert!(
        model_exits,
        "the faithful client did not end on a first login that found no server: {ended:?}"
    );
}

/// frps's multiplexer keepalive in the takeover test (and the faithful server's there): the
/// old session is noticed 10 to 15 s after it went silent.
const SERVER_KEEPALIVE_S: u64 = 5;

/// When each line containing `text` first appeared in `log`, in seconds from `since`, and
/// whether `done` appeared; polled until `done` appears or `within` passes.
async fn log_times(
    log: &std::path::Path,
    text: &str,
    done: &str,
    since: Instant,
    within: Duration,
) -> (Vec<f64>, Option<f64>) {
    let mut seen = Vec::new();
    while since.elapsed() < within {
        let now = since.elapsed().as_secs_f64();
        let content = std::fs::read_to_string(log).unwrap_or_default();
        while content.matches(text).count() > seen.len() {
            seen.push(now);
        }
        if content.contains(done) {
            return (seen, Some(now));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (seen, None)
}

/// The real frp: frpc #1 registers subdomain `rt` through the test proxy, the path goes
/// silent and frpc #1 dies (frps never hears of it), frpc #2 starts with the same proxy:
/// the times it was refused and when it got the subdomain, from its start.
async fn frp_takeover(frpc: &str, frps: &str) -> (Vec<f64>, Option<f64>) {
    let dir = scratch("takeover");
    let (_frps, bind) = serve_frps(frps, &dir, |bind| {
        let vhost = free_port();
        format!("[common]\nbind_port = {bind}\ntoken = t\nvhost_http_port = {vhost}\nsubdomain_host = frp.test\ntcp_mux_keepalive_interval = {SERVER_KEEPALIVE_S}\n")
    })
    .await;
    let proxy = Proxy::start(bind).await;
    let client = |port: u16| {
        format!("[common]\nserver_addr = 127.0.0.1\nserver_port = {port}\ntoken = t\n\n[rt]\ntype = http\nlocal_port = {}\nsubdomain = rt\n", free_port())
    };
    std::fs::write(dir.join("frpc1.ini"), client(proxy.port)).unwrap();
    std::fs::write(dir.join("frpc2.ini"), client(bind)).unwrap();
    let first = spawn(frpc, &dir.join("frpc1.ini"), &dir.join("frpc1.log"));
    assert!(
        logged(
            &dir.join("frpc1.log"),
            "start proxy success",
            Duration::from_secs(10)
        )
        .await,
        "frpc #1 never got its proxy: {}",
        std::fs::read_to_string(dir.join("frpc1.log")).unwrap_or_default()
    );
    proxy.black_hole();
    drop(first);
    let started = Instant::now();
    let _second = spawn(frpc, &dir.join("frpc2.ini"), &dir.join("frpc2.log"));
    let times = log_times(
        &dir.join("frpc2.log"),
        "start error",
        "start proxy success",
        started,
        Duration::from_secs(50),
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    times
}

/// An observation in the takeover test: when, on which host, of what kind.
type Seen = (Instant, String, &'static str);

/// orrery's tunnel server and two clients of `variant` through the same sequence: the times
/// client #2 was refused and when its tunnel came up, from its start.
async fn model_takeover(variant: Variant) -> (Vec<f64>, Option<f64>) {
    use orrery_system::platform::registry::Registry;
    use orrery_system::platform::tunnel::{self as server, TunnelServer};
    use orrery_system::runtime::tunnel_client;
    let events: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let sink = events.clone();
    let env = move |host: &str| -> SharedEnv {
        let sink = sink.clone();
        let host = host.to_string();
        Arc::new(RealEnv::new(host.clone()).with_observer(move |o| {
            sink.lock()
                .unwrap()
                .push((Instant::now(), host.clone(), o.kind()));
        }))
    };
    let registry = Arc::new(Registry::default());
    registry.insert("t", "acme", "rt");
    let mut config = server::Config::new(variant);
    config.keepalive = Duration::from_secs(SERVER_KEEPALIVE_S);
    let server = TunnelServer::new(config, registry);
    let platform = env("platform");
    // Bound here, on port 0: a port picked free and bound later can be taken meanwhile (the
    // three takeovers run at once), and a client would then reach another test's server.
    let listener = platform
        .listen("127.0.0.1:0")
        .await
        .expect("bind the tunnel server");
    let port: u16 = listener
        .local_addr()
        .expect("the tunnel server's address")
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("a port");
    let serving = tokio::spawn(async move {
        let _ = server::serve(platform, server, listener).await;
    });
    let proxy = Proxy::start(port).await;
    let handler: tunnel_client::Handler =
        Arc::new(|_request| Box::pin(async { unreachable!("nothing is forwarded") }));
    let client = |host: &str, port: u16| {
        let config =
            tunnel_client::Config::new(variant, &format!("127.0.0.1:{port}"), "acme-rt", "t");
        tokio::spawn(tunnel_client::run(env(host), config, handler.clone()))
    };
    let first = client("rt-1", proxy.port);
    let up = |host: &str| {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|(_, h, kind)| h == host && *kind == "tunnel.client_up")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !up("rt-1") {
        assert!(
            Instant::now() < deadline,
            "the first {variant:?} client never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.black_hole();
    first.abort();
    let started = Instant::now();
    let second = client("rt-2", port);
    let deadline = started + Duration::from_secs(50);
    while !up("rt-2") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    second.abort();
    serving.abort();
    let events = events.lock().unwrap();
    let at = |kind: &str| {
        events
            .iter()
            .filter(|(t, h, k)| h == "rt-2" && *k == kind && *t >= started)
            .map(|(t, _, _)| t.duration_since(started).as_secs_f64())
            .collect::<Vec<f64>>()
    };
    (
        at("tunnel.client_refused"),
        at("tunnel.client_up").first().copied(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs frp: make conformance-apiserver or make conformance"]
async fn a_restarted_frpc_is_refused_its_subdomain_until_frps_notices_the_dead_session() {
    let Some((frpc, frps)) = binaries() else {
        return;
    };
    let (real, faithful, hardened) = tokio::join!(
        frp_takeover(&frpc, &frps),
        model_takeover(Variant::Faithful),
        model_takeover(Variant::Hardened)
    );
    let show = |(refused, up): &(Vec<f64>, Option<f64>)| {
        format!(
            "refused at [{}] s, up at {}",
            refused
                .iter()
                .map(|t| format!("{t:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            up.map_or("never".into(), |t| format!("{t:.1} s"))
        )
    };
    eprintln!(
        "frp takeover: frpc #2 {}; the faithful client #2 {}; the hardened one {}",
        show(&real),
        show(&faithful),
        show(&hardened)
    );
    // Refused once at its start (frps heard nothing of the old session), noticed 10–15 s
    // later, asked again at the first 3 s check 30 s after the refusal: up 30 s in (33 s
    // when the refusal's round trip outruns the check timer's drift; not on loopback).
    let like_frp = |(refused, up): &(Vec<f64>, Option<f64>)| {
        refused.len() == 1 && refused[0] < 2.0 && up.is_some_and(|t| (29.5..=34.0).contains(&t))
    };
    let real_ok = like_frp(&real);
    let faithful_ok = like_frp(&faithful);
    let hardened_ok = hardened.0.is_empty() && hardened.1.is_some_and(|t| t < 2.0);
    record_row(
        "takeover",
        &format!(
            "| a restarted client while its old session vanished silently (server keepalive {SERVER_KEEPALIVE_S} s) | frpc #2 {}: its subdomain is refused (router config conflict) until frps notices the dead session 10–15 s later, and asked for again 30 s after the refusal (a 3 s check, 30 s after an error); the faithful server refuses a name held by another process's session (frp's run id) with 409 and the faithful client asks again after 30 s (hardened takes over at once: {}) | {} |",
            if real_ok { "refused at once, up 30 s later" } else { "NOT AS MEASURED BEFORE" },
            if hardened_ok { "yes" } else { "NO" },
            if real_ok && faithful_ok { "matches" } else { "DIFFERS" }
        ),
    );
    assert!(real_ok, "real frpc #2: {}", show(&real));
    assert!(faithful_ok, "the faithful client #2: {}", show(&faithful));
    assert!(
        hardened_ok,
        "the hardened client #2 did not take over at once: {}",
        show(&hardened)
    );
}

/// Keeps each test's row and rewrites the frp section of `reports/conformance.md` with the
/// rows so far (the tests run one at a time; rows keep a fixed order by key).
fn record_row(key: &str, row: &str) {
    static ROWS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let mut rows = ROWS.lock().unwrap();
    rows.retain(|(k, _)| k != key);
    rows.push((key.to_string(), row.to_string()));
    rows.sort();
    let mut body = String::from("## frp: the faithful tunnel client against the real frp\n\n");
    body.push_str("- frpc and frps v0.44.0, built from the Go module `conformance/frp/go.mod` pins; a test proxy between them cuts the control connection (or leaves it open and silent, even after a client vanished) and refuses new ones.\n\n");
    body.push_str("| behaviour | faithful model | verdict |\n|---|---|---|\n");
    for (_, row) in rows.iter() {
        body.push_str(row);
        body.push('\n');
    }
    orrery_conformance::report::write_section("frp", &body).expect("write reports/conformance.md");
}
