//! Graceful node shutdown through systemd-logind (the kubelet's `nodeshutdown` manager and its
//! `systemd` D-Bus helpers): the agent holds a *delay* inhibitor lock on shutdown, so logind waits
//! for it (at most `InhibitDelayMaxSec`) before it powers off; on `PrepareForShutdown(true)` the
//! supervisor stops the pods group by group (`pod::shutdown`), then the lock is released and the
//! shutdown goes on. `PrepareForShutdown(false)` (the shutdown was cancelled) takes the lock again.
//!
//! logind's own limit is 5 s by default. A grace period above it is raised as the kubelet raises
//! it: a drop-in in `/etc/systemd/logind.conf.d/` and a SIGHUP to logind; if logind still reports
//! less, graceful shutdown stays off and the agent says why (as a lock logind refuses).

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use zbus::zvariant::OwnedValue;

use crate::pod::shutdown;
use crate::pod::supervisor::{NodeShutdown, ShutdownRequest};

const LOGIND: &str = "org.freedesktop.login1";
const LOGIND_PATH: &str = "/org/freedesktop/login1";
const LOGIND_MANAGER: &str = "org.freedesktop.login1.Manager";
/// Where the raised limit goes (the kubelet writes `99-kubelet.conf` there).
pub const DROP_IN: &str = "/etc/systemd/logind.conf.d/99-crilet.conf";
/// How long logind gets to re-read its configuration after the SIGHUP.
const RELOAD_WAIT: Duration = Duration::from_secs(5);

/// The drop-in that lets logind wait `grace` for the lock (whole seconds, rounded up).
pub fn drop_in(grace: Duration) -> String {
    let secs = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
    format!(
        "# Written by crilet (--shutdown-grace-period): logind waits this long for the node's pods\n\
         # to stop before the machine shuts down.\n[Login]\nInhibitDelayMaxSec={secs}\n"
    )
}

/// Why graceful node shutdown cannot be on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to the system bus: {0}")]
    Bus(#[source] zbus::Error),
    #[error("{call} on {LOGIND}: {source}")]
    Call {
        call: &'static str,
        #[source]
        source: zbus::Error,
    },
    #[error("writing {DROP_IN}: {0}")]
    DropIn(#[source] std::io::Error),
    #[error(
        "logind's InhibitDelayMaxSec is {have:?}, less than the shutdown grace period {want:?}, even after {DROP_IN} and a reload"
    )]
    DelayTooShort { have: Duration, want: Duration },
}

struct Logind {
    conn: zbus::Connection,
}

impl Logind {
    async fn connect() -> Result<Logind, Error> {
        Ok(Logind { conn: zbus::Connection::system().await.map_err(Error::Bus)? })
    }

    /// `InhibitDelayMaxUSec`: how long logind waits for a delay lock.
    async fn inhibit_delay_max(&self) -> Result<Duration, Error> {
        let call = |source| Error::Call { call: "Get InhibitDelayMaxUSec", source };
        let reply = self
            .conn
            .call_method(
                Some(LOGIND),
                LOGIND_PATH,
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &(LOGIND_MANAGER, "InhibitDelayMaxUSec"),
            )
            .await
            .map_err(call)?;
        let value: OwnedValue = reply.body().deserialize().map_err(call)?;
        let usec = u64::try_from(value).map_err(|e| call(e.into()))?;
        Ok(Duration::from_micros(usec))
    }

    /// Makes logind wait at least `grace` for the lock: the drop-in and a SIGHUP to logind when
    /// its limit is lower, then logind's word for it.
    async fn ensure_delay(&self, grace: Duration) -> Result<(), Error> {
        let have = self.inhibit_delay_max().await?;
        if have >= grace {
            return Ok(());
        }
        info!(
            have_s = have.as_secs_f64(),
            want_s = grace.as_secs_f64(),
            "raising logind's InhibitDelayMaxSec"
        );
        let text = drop_in(grace);
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(Path::new(DROP_IN).parent().unwrap_or(Path::new("/")))?;
            std::fs::write(DROP_IN, text)
        })
        .await
        .map_err(|e| Error::DropIn(std::io::Error::other(e)))?
        .map_err(Error::DropIn)?;
        // systemd's KillUnit: SIGHUP to logind's main process makes it re-read its config.
        self.conn
            .call_method(
                Some("org.freedesktop.systemd1"),
                "/org/freedesktop/systemd1",
                Some("org.freedesktop.systemd1.Manager"),
                "KillUnit",
                &("systemd-logind.service", "main", libc_sighup()),
            )
            .await
            .map_err(|source| Error::Call { call: "KillUnit systemd-logind.service SIGHUP", source })?;
        let start = tokio::time::Instant::now();
        loop {
            let have = self.inhibit_delay_max().await?;
            if have >= grace {
                return Ok(());
            }
            if start.elapsed() > RELOAD_WAIT {
                return Err(Error::DelayTooShort { have, want: grace });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A delay lock on shutdown: held while the returned descriptor is open.
    async fn inhibit(&self) -> Result<OwnedFd, Error> {
        let call = |source| Error::Call { call: "Inhibit", source };
        let reply = self
            .conn
            .call_method(
                Some(LOGIND),
                LOGIND_PATH,
                Some(LOGIND_MANAGER),
                "Inhibit",
                &(
                    "shutdown",
                    "crilet",
                    "crilet needs time to stop the node's pods (graceful node shutdown)",
                    "delay",
                ),
            )
            .await
            .map_err(call)?;
        let fd: zbus::zvariant::OwnedFd = reply.body().deserialize().map_err(call)?;
        Ok(fd.into())
    }

    /// logind's `PrepareForShutdown(bool)` signals.
    async fn prepare_for_shutdown(&self) -> Result<zbus::MessageStream, Error> {
        let call = |source| Error::Call { call: "AddMatch PrepareForShutdown", source };
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(LOGIND)
            .and_then(|b| b.path(LOGIND_PATH))
            .and_then(|b| b.interface(LOGIND_MANAGER))
            .and_then(|b| b.member("PrepareForShutdown"))
            .map_err(call)?
            .build();
        zbus::MessageStream::for_match_rule(rule, &self.conn, None).await.map_err(call)
    }
}

fn libc_sighup() -> i32 {
    nix::sys::signal::Signal::SIGHUP as i32
}

/// Sets graceful node shutdown up: logind's limit raised if need be, the signal subscribed and the
/// lock taken. An error leaves the node without it (the kubelet's manager logs and goes on).
async fn take_lock(grace: Duration) -> Result<(Logind, zbus::MessageStream, OwnedFd), Error> {
    let logind = Logind::connect().await?;
    logind.ensure_delay(grace).await?;
    let signals = logind.prepare_for_shutdown().await?;
    let lock = logind.inhibit().await?;
    Ok((logind, signals, lock))
}

/// Runs graceful node shutdown until the agent stops: `grace` is `--shutdown-grace-period`,
/// `critical` `--shutdown-grace-period-critical-pods`. `shutting_down` is true from the signal
/// until a cancelled shutdown (the Node's Ready condition reads it).
pub async fn run(
    grace: Duration,
    critical: Duration,
    requests: mpsc::Sender<NodeShutdown>,
    shutting_down: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let groups = shutdown::groups(grace, critical);
    if groups.is_empty() {
        return;
    }
    // A loop of the agent's task set: one that ends would count as dead, so on a failure it
    // says why and waits for the agent to stop.
    let (logind, mut signals, lock) = match take_lock(grace).await {
        Ok(taken) => taken,
        Err(e) => {
            error!(error = %e, "graceful node shutdown is off: pods will not be stopped before the node shuts down");
            return cancel.cancelled().await;
        }
    };
    info!(
        grace_s = grace.as_secs(),
        critical_s = critical.as_secs(),
        "graceful node shutdown on: holding logind's delay lock"
    );
    let mut lock = Some(lock);
    loop {
        let message = tokio::select! {
            _ = cancel.cancelled() => return,
            m = signals.next() => m,
        };
        let Some(message) = message else {
            error!("the system bus closed: graceful node shutdown is off from now on");
            return cancel.cancelled().await;
        };
        let start = match message
            .map_err(|e| e.to_string())
            .and_then(|m| m.body().deserialize::<bool>().map_err(|e| e.to_string()))
        {
            Ok(start) => start,
            Err(e) => {
                warn!(error = %e, "a PrepareForShutdown signal that could not be read");
                continue;
            }
        };
        if !start {
            info!("the node's shutdown was cancelled");
            let _ = shutting_down.send(false);
            let _ = requests.send(NodeShutdown::Cancelled).await;
            if lock.is_none() {
                match logind.inhibit().await {
                    Ok(l) => lock = Some(l),
                    Err(e) => {
                        error!(error = %e, "taking logind's delay lock again failed: graceful node shutdown is off")
                    }
                }
            }
            continue;
        }
        info!(grace_s = grace.as_secs(), "the node is shutting down: stopping its pods");
        let _ = shutting_down.send(true);
        let (done, stopped) = oneshot::channel();
        if requests.send(NodeShutdown::Stop(ShutdownRequest { groups: groups.clone(), done })).await.is_ok() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = stopped => {}
            }
        }
        // Released: logind goes on with the shutdown.
        lock = None;
        info!("pods stopped; logind's delay lock released");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_raises_loginds_limit_to_whole_seconds() {
        // (grace, InhibitDelayMaxSec)
        let cases = [
            (Duration::from_secs(30), "30"),
            (Duration::from_millis(30_500), "31"),
            (Duration::from_secs(1), "1"),
        ];
        for (grace, want) in cases {
            let text = drop_in(grace);
            assert!(text.contains("\n[Login]\n"), "{text}");
            assert!(text.ends_with(&format!("\nInhibitDelayMaxSec={want}\n")), "{grace:?}: {text}");
        }
    }
}
