//! The pure part of the service protocol: the `STATUS=` summary text and the watchdog's
//! ping decision (table-tested in `tests.rs`; the sending is in `mod.rs`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::health::Unhealthy;

/// Longest runtime error quoted in a `STATUS=` line (`systemctl status` shows one line).
pub(super) const MAX_ERROR_CHARS: usize = 160;

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
pub(super) fn one_line(text: &str, max: usize) -> String {
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
    /// Pings only while the agent is alive: a stuck sync loop, a runtime that answers no relist
    /// or a long-lived loop that ended stops them, so systemd restarts the agent (the issue's
    /// "only while the sync loop and the CRI connection are alive").
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
