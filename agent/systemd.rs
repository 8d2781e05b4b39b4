//! `crilet run` as a systemd `Type=notify` service: the sd_notify(3) protocol. It owns what the
//! agent tells its service manager: `STATUS=` lines while starting, `READY=1` once every pod had
//! its first sync, then a one-line node summary whenever it changes, `WATCHDOG=1` only while the
//! agent is alive (its sync loop turns and the runtime answers relists; see [`crate::health`]),
//! and `STOPPING=1` when it begins to stop. Without `NOTIFY_SOCKET` (not started by systemd)
//! every call does nothing.
//!
//! The sending is done here rather than with the `sd-notify` crate for three reasons: a
//! `WATCHDOG_PID` that is unset means "this process" (libsystemd's rule; the crate then says the
//! watchdog is off), the socket may be abstract (`@…`, as under systemd-nspawn), and a send never
//! blocks a runtime thread (a manager that stopped reading loses a message, never the agent).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::health::Unhealthy;
use crate::pleg::PlegState;
use crate::registry::Registry;

/// How often the node summary is recomputed (it is sent only when it changed).
pub const STATUS_PERIOD: Duration = Duration::from_secs(1);
/// Longest runtime error quoted in a `STATUS=` line (`systemctl status` shows one line).
const MAX_ERROR_CHARS: usize = 160;

/// The agent's handle on its service manager; cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` when not started by systemd (or the socket could not be made).
    target: Option<(UnixDatagram, SocketAddr)>,
    /// The watchdog interval systemd expects pings within, when it watches this process.
    watchdog: Option<Duration>,
    /// Held while sending, so that nothing can follow STOPPING=1.
    sent: Mutex<Sent>,
}

#[derive(Default)]
struct Sent {
    /// The last `STATUS=` text, so an unchanged summary is not sent again.
    last_status: Option<String>,
    /// STOPPING=1 went out: nothing is reported after it.
    stopping: bool,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` as systemd sets them.
    pub fn from_env() -> Notifier {
        let var = |k| std::env::var(k).ok();
        let watchdog = watchdog_interval(
            var("WATCHDOG_USEC").as_deref(),
            var("WATCHDOG_PID").as_deref(),
            std::process::id(),
        );
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let path = path.to_string_lossy().into_owned();
            match open_target(&path) {
                Ok(t) => Some(t),
                Err(e) => {
                    warn!(socket = %path, error = %e, "cannot use systemd's notify socket; not reporting to it");
                    None
                }
            }
        });
        if target.is_some() {
            info!(watchdog = ?watchdog, "reporting to systemd (sd_notify)");
        }
        Notifier {
            inner: Arc::new(Inner {
                watchdog: watchdog.filter(|_| target.is_some()),
                target,
                sent: Mutex::default(),
            }),
        }
    }

    /// `STATUS=starting: {what}` (before READY=1).
    pub fn starting(&self, what: &str) {
        self.status(&format!("starting: {what}"));
    }

    /// `READY=1`: every pod has had its first sync.
    pub fn ready(&self) {
        self.send_unless_stopping("READY=1\n");
    }

    /// `STOPPING=1`: the agent begins to stop (its containers keep running). Nothing but this is
    /// reported afterwards.
    pub fn stopping(&self) {
        let Ok(mut sent) = self.inner.sent.lock() else { return };
        sent.stopping = true;
        self.send("STOPPING=1\nSTATUS=stopping; containers keep running\n");
    }

    /// `STATUS={text}`, unless it is what was sent last.
    pub fn status(&self, text: &str) {
        if self.inner.target.is_none() {
            return;
        }
        let line = one_line(text, usize::MAX);
        let Ok(mut sent) = self.inner.sent.lock() else { return };
        if sent.stopping || sent.last_status.as_deref() == Some(line.as_str()) {
            return;
        }
        if self.send(&format!("STATUS={line}\n")) {
            sent.last_status = Some(line);
        }
    }

    /// After READY=1, until `cancel`: the node summary every [`STATUS_PERIOD`] (sent when it
    /// changed) and, when systemd watches this process, `WATCHDOG=1` every half interval while
    /// [`crate::health::Liveness`] says the agent is alive.
    pub async fn report(self, node: NodeView, cancel: CancellationToken) {
        if self.inner.target.is_none() {
            return;
        }
        let mut status = tokio::time::interval(STATUS_PERIOD);
        status.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Never 0 (a 0 period panics); a watchdog under 2 ms is not a real configuration.
        let period = self.inner.watchdog.map(|w| (w / 2).max(Duration::from_millis(1)));
        // The first ping after a full period: the sync loop starts beating only now.
        let mut ping = period.map(|p| {
            let mut i = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        let mut watchdog = Watchdog::default();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = status.tick() => self.status(&node.summary().to_string()),
                _ = async { ping.as_mut()?.tick().await; Some(()) }, if ping.is_some() => {
                    let decision = watchdog.decide(&node.registry.liveness().check());
                    match decision.change {
                        Some(Change::Withheld(why)) => warn!(
                            reasons = %why,
                            "not pinging systemd's watchdog: the agent is not alive; systemd restarts it \
                             if this lasts (containers keep running)"
                        ),
                        Some(Change::Resumed) => info!("the agent is alive again; pinging systemd's watchdog"),
                        None => {}
                    }
                    if decision.ping {
                        self.send_unless_stopping("WATCHDOG=1\n");
                    }
                }
            }
        }
    }

    /// Sends `message` unless STOPPING=1 went out.
    fn send_unless_stopping(&self, message: &str) {
        let Ok(sent) = self.inner.sent.lock() else { return };
        if !sent.stopping {
            self.send(message);
        }
    }

    /// Sends one datagram; false when it was not sent (logged at debug: the agent goes on).
    fn send(&self, message: &str) -> bool {
        let Some((socket, addr)) = &self.inner.target else { return false };
        match socket.send_to_addr(message.as_bytes(), addr) {
            Ok(_) => true,
            Err(e) => {
                debug!(error = %e, message = message.trim_end(), "sd_notify message not sent");
                false
            }
        }
    }
}

/// An unbound, non-blocking datagram socket and the manager's address (a path, or `@name` for
/// the abstract namespace).
fn open_target(path: &str) -> io::Result<(UnixDatagram, SocketAddr)> {
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(path)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    Ok((socket, addr))
}

/// What the summary is made of, read live each time.
pub struct NodeView {
    pub registry: Registry,
    /// Runtime name and version, e.g. `containerd 2.1.9`.
    pub runtime: String,
    pub pleg: Arc<PlegState>,
}

impl NodeView {
    /// The summary as of now.
    pub fn summary(&self) -> Summary {
        let pods = self.registry.pods();
        let health = self.registry.runtime_health();
        let sync_loop_stuck = self
            .registry
            .liveness()
            .check()
            .is_err_and(|problems| problems.iter().any(|p| matches!(p, Unhealthy::SyncLoop(Some(_)))));
        Summary {
            pods: pods.len(),
            ready: pods.iter().filter(|r| pod_ready(&r.pod)).count(),
            runtime: self.runtime.clone(),
            pleg_mode: self.pleg.mode(),
            runtime_error: (!health.available).then_some(health.last_error),
            sync_loop_stuck,
        }
    }
}

/// The one-line node summary of `STATUS=`, e.g.
/// `12 pods, 11 ready, runtime containerd 2.1.9, events`.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub pods: usize,
    pub ready: usize,
    pub runtime: String,
    /// How runtime changes are followed: `events` or `relist`.
    pub pleg_mode: &'static str,
    /// Set while the runtime is unavailable: the newest failure.
    pub runtime_error: Option<String>,
    /// The sync loop stopped beating (the watchdog pings stop too).
    pub sync_loop_stuck: bool,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = if self.pods == 1 { "pod" } else { "pods" };
        write!(f, "{} {noun}, {} ready, ", self.pods, self.ready)?;
        match &self.runtime_error {
            None => write!(f, "runtime {}, {}", self.runtime, self.pleg_mode)?,
            Some(e) if e.trim().is_empty() => write!(f, "runtime unavailable")?,
            Some(e) => write!(f, "runtime unavailable: {}", one_line(e, MAX_ERROR_CHARS))?,
        }
        if self.sync_loop_stuck {
            write!(f, "; sync loop stuck")?;
        }
        Ok(())
    }
}

/// `first sync of N pods`, the last `STATUS=` before READY=1.
pub fn first_sync(pods: usize) -> String {
    format!("first sync of {pods} {}", if pods == 1 { "pod" } else { "pods" })
}

/// The pod's `Ready` condition is `True`.
pub fn pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `text` on one line (a newline would start another notify field), at most `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The watchdog interval from `WATCHDOG_USEC` and `WATCHDOG_PID` (sd_watchdog_enabled(3)): set,
/// positive, and meant for this process (`WATCHDOG_PID` unset or equal to `me`).
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    match pid.map(|p| p.trim().parse::<u32>()) {
        None => {}
        Some(Ok(p)) if p == me => {}
        Some(_) => return None,
    }
    Some(Duration::from_micros(usec))
}

/// Whether to ping the watchdog, and when that changes (for the log).
#[derive(Debug, Default)]
pub struct Watchdog {
    withholding: bool,
}

/// One ping tick's outcome.
#[derive(Debug, PartialEq)]
pub struct Decision {
    pub ping: bool,
    pub change: Option<Change>,
}

/// A change in whether the watchdog is pinged.
#[derive(Debug, PartialEq)]
pub enum Change {
    /// Pings stop, for these reasons.
    Withheld(String),
    /// Pings start again.
    Resumed,
}

impl Watchdog {
    /// Pings only while the agent is alive: a stuck sync loop or a runtime that answers no
    /// relist stops them, so systemd restarts the agent (the issue's "only while the sync loop
    /// and the CRI connection are alive").
    pub fn decide(&mut self, health: &Result<(), Vec<Unhealthy>>) -> Decision {
        match health {
            Ok(()) => {
                let change = std::mem::take(&mut self.withholding).then_some(Change::Resumed);
                Decision { ping: true, change }
            }
            Err(problems) => {
                let change = (!self.withholding).then(|| {
                    Change::Withheld(problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
                });
                self.withholding = true;
                Decision { ping: false, change }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    use super::*;

    fn summary(pods: usize, ready: usize, error: Option<&str>, stuck: bool) -> Summary {
        Summary {
            pods,
            ready,
            runtime: "containerd 2.1.9".into(),
            pleg_mode: "events",
            runtime_error: error.map(str::to_string),
            sync_loop_stuck: stuck,
        }
    }

    #[test]
    fn summary_lines() {
        let long = "x".repeat(400);
        let cases = [
            (
                "a busy node",
                summary(12, 11, None, false),
                "12 pods, 11 ready, runtime containerd 2.1.9, events",
            ),
            (
                "one pod: singular",
                summary(1, 1, None, false),
                "1 pod, 1 ready, runtime containerd 2.1.9, events",
            ),
            ("no pods", summary(0, 0, None, false), "0 pods, 0 ready, runtime containerd 2.1.9, events"),
            (
                "runtime down: its error instead of its version",
                summary(3, 2, Some("CRI ListContainers failed: connection refused"), false),
                "3 pods, 2 ready, runtime unavailable: CRI ListContainers failed: connection refused",
            ),
            (
                "an error over lines stays on one",
                summary(1, 0, Some("first\nsecond\r\n  third"), false),
                "1 pod, 0 ready, runtime unavailable: first second third",
            ),
            (
                "down without a message",
                summary(2, 0, Some(" "), false),
                "2 pods, 0 ready, runtime unavailable",
            ),
            (
                "a stuck sync loop is said",
                summary(2, 2, None, true),
                "2 pods, 2 ready, runtime containerd 2.1.9, events; sync loop stuck",
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(s.to_string(), want, "{name}");
        }
        assert_eq!(first_sync(1), "first sync of 1 pod");
        assert_eq!(first_sync(0), "first sync of 0 pods");
        let line = summary(1, 1, Some(&long), false).to_string();
        assert_eq!(
            line.chars().count(),
            "1 pod, 1 ready, runtime unavailable: ".len() + MAX_ERROR_CHARS,
            "{line}"
        );
        assert!(line.ends_with("x…"), "a long error is cut: {line}");
    }

    #[test]
    fn ready_pods() {
        let pod = |conds: &[(&str, &str)]| Pod {
            status: Some(PodStatus {
                conditions: Some(
                    conds
                        .iter()
                        .map(|(t, s)| PodCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases = [
            ("Ready=True", pod(&[("PodScheduled", "True"), ("Ready", "True")]), true),
            ("Ready=False", pod(&[("ContainersReady", "True"), ("Ready", "False")]), false),
            ("no Ready condition", pod(&[("ContainersReady", "True")]), false),
            ("no status yet", Pod::default(), false),
        ];
        for (name, p, want) in cases {
            assert_eq!(pod_ready(&p), want, "{name}");
        }
    }

    #[test]
    fn watchdog_intervals() {
        let cases = [
            ("systemd's usual pair", Some("60000000"), Some("42"), Some(Duration::from_secs(60))),
            ("no WATCHDOG_PID: meant for us", Some("2000000"), None, Some(Duration::from_secs(2))),
            ("another process's watchdog", Some("2000000"), Some("7"), None),
            ("a PID that is not a number", Some("2000000"), Some("x"), None),
            ("no WATCHDOG_USEC", None, Some("42"), None),
            ("0 means off", Some("0"), None, None),
            ("not a number", Some("60s"), None, None),
        ];
        for (name, usec, pid, want) in cases {
            assert_eq!(watchdog_interval(usec, pid, 42), want, "{name}");
        }
    }

    #[test]
    fn watchdog_pings_only_while_alive() {
        let stuck = || Err(vec![Unhealthy::SyncLoop(Some(Duration::from_secs(31)))]);
        let silent = || Err(vec![Unhealthy::Runtime(Some(Duration::from_secs(11)))]);
        let withheld = |why: &str| Some(Change::Withheld(why.to_string()));
        // (case, health at each tick, (ping?, change) at each tick)
        let cases = [
            (
                "alive: a ping each tick, nothing to log",
                vec![Ok(()), Ok(())],
                vec![(true, None), (true, None)],
            ),
            (
                "a silent runtime stops pings, logged once; its answer resumes them",
                vec![Ok(()), silent(), silent(), Ok(())],
                vec![
                    (true, None),
                    (false, withheld("container runtime: no relist answered for 11s")),
                    (false, None),
                    (true, Some(Change::Resumed)),
                ],
            ),
            (
                "a stuck sync loop stops pings",
                vec![stuck()],
                vec![(false, withheld("sync loop: stuck for 31s"))],
            ),
            (
                "every reason is named",
                vec![Err(vec![Unhealthy::SyncLoop(None), Unhealthy::Runtime(None)])],
                vec![(false, withheld("sync loop: not started; container runtime: no relist answered yet"))],
            ),
        ];
        for (name, ticks, want) in cases {
            let mut w = Watchdog::default();
            let got: Vec<(bool, Option<Change>)> = ticks
                .iter()
                .map(|h| {
                    let d = w.decide(h);
                    (d.ping, d.change)
                })
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn status_is_not_repeated_and_nothing_follows_stopping() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let n = Notifier {
            inner: Arc::new(Inner {
                target: Some(open_target(path.to_str().expect("utf-8 path")).expect("target")),
                watchdog: None,
                sent: Mutex::default(),
            }),
        };
        n.starting("loading manifests");
        n.status("1 pod, 0 ready");
        n.status("1 pod, 0 ready");
        n.ready();
        n.status("1 pod, 1 ready");
        n.stopping();
        n.status("0 pods, 0 ready");
        n.ready();
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while let Ok(len) = listener.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..len]).into_owned());
        }
        assert_eq!(
            got,
            [
                "STATUS=starting: loading manifests\n",
                "STATUS=1 pod, 0 ready\n",
                "READY=1\n",
                "STATUS=1 pod, 1 ready\n",
                "STOPPING=1\nSTATUS=stopping; containers keep running\n",
            ]
        );
    }
}
