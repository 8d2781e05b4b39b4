//! crilet as a systemd `Type=notify` service, seen from systemd's side: the test binds the notify
//! socket itself (`NOTIFY_SOCKET`, `WATCHDOG_USEC`) and reads every datagram the agent sends.
//! READY=1 comes once per start, after the first sync of the pods already in the manifest
//! directory; STATUS= says what startup waits for, then summarises the node and changes when
//! the node does (never the same line twice in a row); WATCHDOG=1 comes every half interval
//! while the agent is alive, stops while the CRI does not answer relists (made unreachable by
//! the fault-injecting proxy; containerd itself keeps running for the other suites) and comes
//! back with it; SIGTERM gives STOPPING=1, and nothing after it.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cri_proxy::{CriProxy, Fault};
use common::*;
use crilet::health::RELIST_STALE;
use tokio::net::UnixDatagram;
use tonic::Code;

/// `WATCHDOG_USEC` given to the agent: it pings every 2 s.
const WATCHDOG: Duration = Duration::from_secs(4);
const PING_PERIOD: Duration = Duration::from_secs(2);

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: t-notify}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#;

/// One datagram: its `KEY=VALUE` fields in order, and when it arrived.
#[derive(Debug, Clone)]
struct Message {
    at: Instant,
    fields: Vec<(String, String)>,
}

impl Message {
    /// Newline-separated `KEY=VALUE` assignments (sd_notify(3)); empty lines are ignored.
    fn parse(datagram: &[u8], at: Instant) -> Message {
        let text = String::from_utf8_lossy(datagram);
        let fields = text
            .split('\n')
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => panic!("not a KEY=VALUE assignment: {l:?} in {text:?}"),
            })
            .collect();
        Message { at, fields }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn is(&self, key: &str, value: &str) -> bool {
        self.get(key) == Some(value)
    }

    fn ping(&self) -> bool {
        self.is("WATCHDOG", "1")
    }
}

/// systemd's end of the notify socket.
struct Manager {
    socket: UnixDatagram,
    path: PathBuf,
    /// Every message so far, oldest first.
    seen: Vec<Message>,
    agent_log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Manager {
    fn bind(agent_log: &Path) -> Manager {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        Manager { socket, path, seen: Vec::new(), agent_log: agent_log.to_path_buf(), _dir: dir }
    }

    /// The next message, or None once `deadline` passes.
    async fn next(&mut self, deadline: Instant) -> Option<Message> {
        let mut buf = vec![0u8; 8192];
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, self.socket.recv(&mut buf)).await {
            Ok(Ok(n)) => {
                let m = Message::parse(&buf[..n], Instant::now());
                self.seen.push(m.clone());
                Some(m)
            }
            Ok(Err(e)) => panic!("reading the notify socket: {e}"),
            Err(_) => None,
        }
    }

    /// Reads until a message satisfies `want`; panics after `limit` saying what was seen.
    async fn wait(&mut self, what: &str, limit: Duration, want: impl Fn(&Message) -> bool) -> Message {
        let deadline = Instant::now() + limit;
        while let Some(m) = self.next(deadline).await {
            if want(&m) {
                return m;
            }
        }
        self.fail(&format!("timed out after {limit:?} waiting for {what}"))
    }

    /// Panics with `why`, the latest messages and the agent's log.
    fn fail(&self, why: &str) -> ! {
        let recent: Vec<String> =
            self.seen.iter().rev().take(25).rev().map(|m| format!("  {:?}", m.fields)).collect();
        let log = std::fs::read_to_string(&self.agent_log).unwrap_or_default();
        let tail = &log[log.len().saturating_sub(6000)..];
        panic!("{why}\nlatest notify messages:\n{}\nagent log:\n{tail}", recent.join("\n"))
    }

    /// The STATUS= values from message `from` on, in order.
    fn statuses(&self, from: usize) -> Vec<&str> {
        self.seen[from..].iter().filter_map(|m| m.get("STATUS")).collect()
    }
}

fn status_starts(m: &Message, prefix: &str) -> bool {
    m.get("STATUS").is_some_and(|s| s.starts_with(prefix))
}

/// `1 pod, 1 ready, runtime containerd 2.1.9, events` (or `relist`), with the runtime's name.
fn healthy_summary(status: &str, pods: &str, ready: usize) -> bool {
    let Some(rest) = status.strip_prefix(&format!("{pods}, {ready} ready, runtime ")) else { return false };
    let Some((runtime, mode)) = rest.rsplit_once(", ") else { return false };
    runtime.starts_with("containerd ") && ["events", "relist"].contains(&mode)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notify_ready_status_watchdog_and_stopping() {
    let env = Env::load();
    let proxy = CriProxy::start("notify", &env.endpoint()).await;
    let log_file = PathBuf::from("/var/lib/crilet-dev/tests/notify/crilet.log");
    let mut systemd = Manager::bind(&log_file);
    let notify_socket = systemd.path.to_str().expect("utf-8 socket path").to_string();
    let usec = WATCHDOG.as_micros().to_string();
    // WATCHDOG_PID stays unset: the watchdog is then meant for the agent (sd_watchdog_enabled(3)).
    let vars = [("NOTIFY_SOCKET", notify_socket.as_str()), ("WATCHDOG_USEC", usec.as_str())];
    let mut a = Agent::start_with_endpoint_args("notify", &proxy.endpoint(), &[], &vars).await;
    assert_eq!(a.log_file, log_file, "the harness moved the agent's log");

    // --- First start, no pods: startup statuses, READY, an empty node; SIGTERM: STOPPING. ---
    systemd.wait("READY=1 of an agent with no pods", Duration::from_secs(60), |m| m.is("READY", "1")).await;
    systemd
        .wait("the empty node's summary", Duration::from_secs(10), |m| {
            m.get("STATUS").is_some_and(|s| healthy_summary(s, "0 pods", 0))
        })
        .await;
    a.stop();
    systemd.wait("STOPPING=1 after SIGTERM", Duration::from_secs(5), |m| m.is("STOPPING", "1")).await;

    // --- Second start with a pod waiting in the manifest directory. ---
    let second = systemd.seen.len();
    a.write_manifest("web.yaml", POD);
    a.spawn();
    let ready = systemd.wait("READY=1", Duration::from_secs(90), |m| m.is("READY", "1")).await;
    // READY means the first sync is done: the container already runs, in the runtime and in
    // the agent's own status.
    let p = a.pod("web").unwrap_or_else(|| systemd.fail("no pod web in `crilet get pods` at READY=1"));
    if !running(&p, "main") {
        systemd.fail(&format!("READY=1 came before the pod's container ran: {}", p["status"]));
    }
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let seen_by_cri = instances(&env.cri(), &uid).await.unwrap_or_default();
    if !seen_by_cri.iter().any(|(name, _, _, running)| name == "main" && *running) {
        systemd.fail(&format!("containerd shows no running main at READY=1: {seen_by_cri:?}"));
    }
    let startup = systemd.statuses(second);
    let want =
        ["starting: waiting for the runtime", "starting: loading manifests", "starting: first sync of 1 pod"];
    assert_eq!(startup, want, "the statuses before READY=1");

    let summary = systemd
        .wait("STATUS 1 pod, 1 ready", Duration::from_secs(30), |m| {
            m.get("STATUS").is_some_and(|s| healthy_summary(s, "1 pod", 1))
        })
        .await;

    // --- The watchdog: a ping every half interval while the agent is alive. ---
    let window = PING_PERIOD * 4;
    let end = summary.at + window;
    let mut pings = 0;
    while let Some(m) = systemd.next(end).await {
        pings += usize::from(m.ping());
    }
    // About 4; at least 3 (a ping every half interval), fewer than 7 (not every second).
    if !(3..7).contains(&pings) {
        systemd.fail(&format!("{pings} WATCHDOG=1 in {window:?} with WATCHDOG_USEC={usec}"));
    }

    // --- The CRI stops answering relists (containerd itself keeps running). ---
    let faulted = Instant::now();
    for method in ["ListPodSandbox", "ListContainers"] {
        proxy.inject(method, Fault::error(Code::Unavailable));
    }
    systemd
        .wait("STATUS runtime unavailable", Duration::from_secs(20), |m| {
            status_starts(m, "1 pod, 1 ready, runtime unavailable")
        })
        .await;
    // Pings stop once no relist was answered for RELIST_STALE: a silence longer than that.
    let silence = RELIST_STALE + PING_PERIOD;
    let mut last_ping = systemd.seen.iter().rev().find(|m| m.ping()).map_or(faulted, |m| m.at);
    let give_up = faulted + RELIST_STALE + silence + Duration::from_secs(15);
    while last_ping.elapsed() < silence {
        let deadline = (last_ping + silence).min(give_up);
        match systemd.next(deadline).await {
            Some(m) if m.ping() => last_ping = m.at,
            Some(_) => {}
            None if Instant::now() >= give_up => systemd
                .fail(&format!("WATCHDOG=1 went on while the CRI was unreachable (no {silence:?} gap)")),
            None => {}
        }
    }
    let stopped_after = last_ping.saturating_duration_since(faulted);
    if stopped_after > RELIST_STALE + PING_PERIOD * 2 {
        systemd.fail(&format!("pings stopped only {stopped_after:?} into the outage"));
    }

    // --- The CRI answers again: pings and the healthy summary come back. ---
    proxy.clear_all();
    let cleared = systemd.seen.len();
    let deadline = Instant::now() + PING_PERIOD * 3 + Duration::from_secs(10);
    loop {
        let since = &systemd.seen[cleared..];
        let pinged = since.iter().any(Message::ping);
        let healthy = since.iter().any(|m| m.get("STATUS").is_some_and(|s| healthy_summary(s, "1 pod", 1)));
        if pinged && healthy {
            break;
        }
        if systemd.next(deadline).await.is_none() {
            systemd.fail(&format!(
                "after the CRI answered again: WATCHDOG=1 {pinged}, healthy summary {healthy}"
            ));
        }
    }

    // --- SIGTERM: STOPPING=1, and nothing after it. ---
    a.stop();
    let stopping = systemd.wait("STOPPING=1", Duration::from_secs(5), |m| m.is("STOPPING", "1")).await;
    assert!(stopping.at >= ready.at);
    while systemd.next(Instant::now() + Duration::from_millis(300)).await.is_some() {}
    if !systemd.seen.last().is_some_and(|m| m.is("STOPPING", "1")) {
        systemd.fail("a message followed STOPPING=1");
    }

    // Once per start, and no STATUS line sent twice in a row.
    let readies = systemd.seen[second..].iter().filter(|m| m.is("READY", "1")).count();
    assert_eq!(readies, 1, "READY=1 per start");
    let all = systemd.statuses(0);
    if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
        systemd.fail(&format!("STATUS={} sent twice in a row", w[0]));
    }

    remove_pods_of(&env.cri(), &a.manifests).await;
}
