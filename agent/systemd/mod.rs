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

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::health::Unhealthy;
use crate::pleg::PlegState;
use crate::registry::Registry;

pub mod logind;
mod status;
#[cfg(test)]
mod tests;

use status::one_line;
pub use status::{Change, Decision, Summary, Watchdog, first_sync, pod_ready, watchdog_interval};

/// How often the node summary is recomputed (it is sent only when it changed).
pub const STATUS_PERIOD: Duration = Duration::from_secs(1);

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

    /// Whether anything is reported (started by systemd): without it [`Self::report`] returns
    /// at once.
    pub fn reports(&self) -> bool {
        self.inner.target.is_some()
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
        let (pods, ready) = self.registry.count_pods(pod_ready);
        let health = self.registry.runtime_health();
        let sync_loop_stuck = self
            .registry
            .liveness()
            .check()
            .is_err_and(|problems| problems.iter().any(|p| matches!(p, Unhealthy::SyncLoop(Some(_)))));
        Summary {
            pods,
            ready,
            runtime: self.runtime.clone(),
            pleg_mode: self.pleg.mode(),
            runtime_error: (!health.available).then_some(health.last_error),
            sync_loop_stuck,
        }
    }
}
