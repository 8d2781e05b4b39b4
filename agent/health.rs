//! Is the agent alive? Two heartbeats answer it, read by `/healthz` and the systemd watchdog:
//! the supervisor's sync loop beats every [`SYNC_LOOP_BEAT`] while it turns, and the PLEG beats
//! on each relist the runtime answered. The kubelet's `/healthz` checks its sync loop the same
//! way (`syncLoopHealthCheck`); here the runtime's answer is part of it too, because a node agent
//! that cannot reach its runtime cannot keep its pods. A long-lived loop that ended while the
//! agent runs (reported by [`crate::tasks`]) makes it unhealthy for good: nothing restarts it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the sync loop beats while it turns.
pub const SYNC_LOOP_BEAT: Duration = Duration::from_secs(1);
/// A sync loop silent for longer is stuck.
pub const SYNC_LOOP_STALE: Duration = Duration::from_secs(30);
/// No relist answered for longer: the runtime is unreachable (the relist runs every second).
pub const RELIST_STALE: Duration = Duration::from_secs(10);

/// The two heartbeats, as milliseconds since `origin` (0: never).
#[derive(Debug)]
pub struct Liveness {
    origin: Instant,
    sync_loop: AtomicU64,
    relist_ok: AtomicU64,
    /// Long-lived loops that ended while the agent was not stopping, in the order they ended.
    ended: Mutex<Vec<Unhealthy>>,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            sync_loop: AtomicU64::new(0),
            relist_ok: AtomicU64::new(0),
            ended: Mutex::default(),
        }
    }
}

/// Why the agent is not healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unhealthy {
    /// The sync loop has not turned yet, or not for this long.
    SyncLoop(Option<Duration>),
    /// The runtime has not answered a relist yet, or not for this long.
    Runtime(Option<Duration>),
    /// A long-lived loop (by its name in [`crate::tasks`]) returned or panicked.
    LoopEnded { name: &'static str, panicked: bool },
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SyncLoop(None) => write!(f, "sync loop: not started"),
            Self::SyncLoop(Some(d)) => write!(f, "sync loop: stuck for {:.0}s", d.as_secs_f64()),
            Self::Runtime(None) => write!(f, "container runtime: no relist answered yet"),
            Self::Runtime(Some(d)) => {
                write!(f, "container runtime: no relist answered for {:.0}s", d.as_secs_f64())
            }
            Self::LoopEnded { name, panicked: false } => write!(f, "{name}: loop ended"),
            Self::LoopEnded { name, panicked: true } => write!(f, "{name}: loop panicked"),
        }
    }
}

impl Liveness {
    /// The sync loop turned.
    pub fn sync_loop_beat(&self) {
        self.sync_loop.store(self.millis(Instant::now()), Ordering::Relaxed);
    }

    /// The runtime answered a relist.
    pub fn relist_answered(&self) {
        self.relist_ok.store(self.millis(Instant::now()), Ordering::Relaxed);
    }

    /// The long-lived loop `name` ended (returned, or `panicked`) while the agent runs.
    pub fn loop_ended(&self, name: &'static str, panicked: bool) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.push(Unhealthy::LoopEnded { name, panicked });
        }
    }

    /// Healthy, or every reason why not.
    pub fn check(&self) -> Result<(), Vec<Unhealthy>> {
        self.check_at(Instant::now())
    }

    /// [`Self::check`] as of `now`.
    pub fn check_at(&self, now: Instant) -> Result<(), Vec<Unhealthy>> {
        let mut problems = Vec::new();
        if let Some(age) = self.stale(&self.sync_loop, now, SYNC_LOOP_STALE) {
            problems.push(Unhealthy::SyncLoop(age));
        }
        if let Some(age) = self.stale(&self.relist_ok, now, RELIST_STALE) {
            problems.push(Unhealthy::Runtime(age));
        }
        if let Ok(ended) = self.ended.lock() {
            problems.extend(ended.iter().cloned());
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// `Some(age)` when the beat is older than `limit`, `Some(None)` when it never came.
    fn stale(&self, beat: &AtomicU64, now: Instant, limit: Duration) -> Option<Option<Duration>> {
        let at = beat.load(Ordering::Relaxed);
        if at == 0 {
            return Some(None);
        }
        let age = Duration::from_millis(self.millis(now).saturating_sub(at));
        (age > limit).then_some(Some(age))
    }

    /// Milliseconds since `origin`, never 0 (0 means "never").
    fn millis(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_follows_both_heartbeats() {
        let l = Liveness::default();
        let t0 = Instant::now();
        assert_eq!(l.check_at(t0), Err(vec![Unhealthy::SyncLoop(None), Unhealthy::Runtime(None)]));

        l.sync_loop_beat();
        assert_eq!(l.check_at(t0), Err(vec![Unhealthy::Runtime(None)]), "runtime never answered");
        l.relist_answered();
        let beat = Instant::now();
        assert_eq!(l.check_at(beat), Ok(()));
        assert_eq!(l.check_at(beat + RELIST_STALE - Duration::from_millis(50)), Ok(()), "inside the limit");

        let later = beat + RELIST_STALE + Duration::from_secs(2);
        match l.check_at(later).as_ref().map_err(Vec::as_slice) {
            Err([Unhealthy::Runtime(Some(age))]) => assert!(*age > RELIST_STALE, "age {age:?}"),
            other => panic!("a silent runtime must be reported alone: {other:?}"),
        }
        let stuck = beat + SYNC_LOOP_STALE + Duration::from_secs(1);
        let problems = l.check_at(stuck).expect_err("both are stale");
        assert!(matches!(problems[0], Unhealthy::SyncLoop(Some(_))), "{problems:?}");
        assert!(problems[0].to_string().starts_with("sync loop: stuck for"), "{}", problems[0]);
    }
}
