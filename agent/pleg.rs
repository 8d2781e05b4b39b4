//! The pod lifecycle event generator. Events first, relist as the safety net:
//! - where the runtime has a CRI event stream (containerd 1.7+, 2.x), each event is confirmed
//!   with a targeted `ContainerStatus` call and wakes its pod's worker at once;
//! - a relist of every sandbox and container each second (R10.1) wakes the worker of every pod
//!   whose runtime state changed, catching whatever the stream missed.
//!
//! Unlike the kubelet's evented PLEG (R10.3), a broken stream is never given up for good: the
//! relist runs at once (so nothing that happened during the gap waits for the next tick) and the
//! stream is reopened with a capped back-off for as long as the agent runs.
//!
//! The relist is also how the agent knows the runtime is up: a relist that fails, or has not
//! answered after `RELIST_SLOW`, reports the runtime unavailable to the registry (the control
//! API shows it, every pod gets an event); the next relist that answers reports it available.
//! Nothing else follows from it here: pod workers keep their own retries, and a failed call is
//! never taken as news about a container.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cri::{CriClient, CriError, RuntimeBrief, api};
use crate::metrics::Metrics;
use crate::model::keys;
use crate::registry::Registry;

/// Relist period (R10.1: 1 s).
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// First wait before the event stream is reopened after it broke.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
/// The back-off's cap: a runtime that is back is followed again within this time.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// A stream that lived this long was healthy: the next break starts the back-off afresh.
const HEALTHY_STREAM: Duration = Duration::from_secs(10);
/// How often a runtime without a stream is asked again (it may have been upgraded).
const UNIMPLEMENTED_RECHECK: Duration = Duration::from_secs(60);
/// A relist still unanswered after this long reports the runtime unavailable (the answer is
/// still awaited, up to the CRI client's deadline). The kubelet calls its PLEG unhealthy after
/// 3 min; a CRI list answers in milliseconds, so 10 s already means the runtime is stuck, and
/// saying so 20 s before the 30 s call deadline runs out is worth it.
pub const RELIST_SLOW: Duration = Duration::from_secs(10);

/// What the PLEG is doing, shared with the control API (`crilet version`) and the relist.
#[derive(Debug)]
pub struct PlegState {
    following: AtomicBool,
    events_received: AtomicU64,
    /// Asks the relist loop for a relist now (the stream broke, or came back).
    relist_now: Notify,
    /// Where the relists and the event stream are counted.
    metrics: Arc<Metrics>,
}

/// A state whose counts go to metrics of its own, which nobody serves (tools and tests).
impl Default for PlegState {
    fn default() -> Self {
        Self::new(Arc::new(Metrics::new()))
    }
}

impl PlegState {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            following: AtomicBool::new(false),
            events_received: AtomicU64::new(0),
            relist_now: Notify::new(),
            metrics,
        }
    }

    /// `events` while the CRI event stream is followed, `relist` otherwise.
    pub fn mode(&self) -> &'static str {
        if self.following.load(Ordering::Relaxed) { "events" } else { "relist" }
    }

    /// CRI events received since the agent started.
    pub fn events_received(&self) -> u64 {
        self.events_received.load(Ordering::Relaxed)
    }

    fn set_following(&self, on: bool) {
        self.following.store(on, Ordering::Relaxed);
        if on {
            self.metrics.evented_connected();
        }
        // Whatever happened while the stream was down (or before it was subscribed) is found
        // by a relist now rather than at the next tick.
        self.relist_now.notify_one();
    }
}

/// Pod UID → the Notify its worker waits on.
#[derive(Clone, Default)]
pub struct Wakers(Arc<Mutex<HashMap<String, Arc<Notify>>>>);

impl Wakers {
    pub fn register(&self, uid: &str) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        if let Ok(mut m) = self.0.lock() {
            m.insert(uid.to_string(), n.clone());
        }
        n
    }

    pub fn unregister(&self, uid: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(uid);
        }
    }

    pub fn wake(&self, uid: &str) {
        if let Some(n) = self.0.lock().ok().and_then(|m| m.get(uid).cloned()) {
            n.notify_one();
        }
    }
}

/// (state, pod uid) of each sandbox and container, by ID.
type Snapshot = HashMap<String, (i32, String)>;

/// Which pod UIDs may have a sandbox or container in the runtime: those of the last relist, and
/// those this agent has begun to create since (a create can land after the relist's list).
/// A pod that is in neither has nothing to observe, so its worker's first sync need not list
/// the runtime before creating its sandbox (the kubelet's first sync reads its PLEG cache too).
/// Until the first relist has answered, every UID may have something.
#[derive(Clone, Default)]
pub struct RuntimeUids(Arc<Mutex<KnownUids>>);

#[derive(Default)]
struct KnownUids {
    /// The UIDs of the last relist; `None` before the first one answered.
    listed: Option<std::collections::HashSet<String>>,
    /// UIDs this agent began creating for that the last relist did not show yet.
    claimed: std::collections::HashSet<String>,
}

impl RuntimeUids {
    /// Whether the runtime may hold anything of pod `uid` (when unsure: yes).
    pub fn may_have(&self, uid: &str) -> bool {
        let Ok(k) = self.0.lock() else { return true };
        k.claimed.contains(uid) || k.listed.as_ref().is_none_or(|l| l.contains(uid))
    }

    /// Called before anything of pod `uid` is created in the runtime.
    pub fn claim(&self, uid: &str) {
        if let Ok(mut k) = self.0.lock() {
            k.claimed.insert(uid.to_string());
        }
    }

    /// Pod `uid` has terminated and everything of it is removed: its claim goes, even when no
    /// relist ever showed it (its sandbox was never created), or the set grows with every such
    /// pod ever seen.
    pub fn release(&self, uid: &str) {
        if let Ok(mut k) = self.0.lock() {
            k.claimed.remove(uid);
        }
    }

    /// A relist's UIDs. Claims it shows are dropped (the list answers for them from now on); a
    /// claim it does not show stays, as its create may have landed after the list.
    fn listed(&self, uids: std::collections::HashSet<String>) {
        if let Ok(mut k) = self.0.lock() {
            k.claimed.retain(|u| !uids.contains(u));
            k.listed = Some(uids);
        }
    }
}

/// The UIDs whose objects appeared, vanished or changed state between two relists.
pub fn changed_uids(old: &Snapshot, new: &Snapshot) -> Vec<String> {
    let mut uids: Vec<String> = Vec::new();
    for (id, (state, uid)) in new {
        if old.get(id).map(|(s, _)| s) != Some(state) {
            uids.push(uid.clone());
        }
    }
    for (id, (_, uid)) in old {
        if !new.contains_key(id) {
            uids.push(uid.clone());
        }
    }
    uids.sort();
    uids.dedup();
    uids
}

/// How one attempt at following the stream ended.
#[derive(Debug, PartialEq)]
enum Ended {
    Cancelled,
    /// The runtime has no event stream.
    Unimplemented,
    /// The stream could not be opened.
    NotOpened(String),
    /// The stream was followed, then broke after `lived`.
    Broke {
        why: String,
        lived: Duration,
    },
}

/// How long an opened call must stay quiet before the stream counts as established: the
/// runtime (grpc-go) sends its response headers only with the first event, but refuses an
/// unimplemented or unreachable stream at once.
const STREAM_SETTLE: Duration = Duration::from_millis(200);

/// The next wait before reopening, and the back-off after it (doubling up to the cap).
fn next_wait(ended: &Ended, backoff: Duration) -> (Duration, Duration) {
    match ended {
        Ended::Cancelled => (Duration::ZERO, backoff),
        Ended::Unimplemented => (UNIMPLEMENTED_RECHECK, RECONNECT_MIN),
        Ended::Broke { lived, .. } if *lived >= HEALTHY_STREAM => (RECONNECT_MIN, RECONNECT_MIN * 2),
        Ended::Broke { .. } | Ended::NotOpened(_) => (backoff, (backoff * 2).min(RECONNECT_MAX)),
    }
}

/// Follows the runtime's CRI event stream for as long as the agent runs, waking a pod's worker
/// on each event. The worker then observes its pod with targeted `PodSandboxStatus` /
/// `ContainerStatus` calls, so an event is never trusted on its own: a duplicated, stale or
/// reordered event costs one observation, never a wrong action.
pub async fn follow_events(cri: CriClient, wakers: Wakers, pleg: Arc<PlegState>, cancel: CancellationToken) {
    let mut backoff = RECONNECT_MIN;
    let mut told_unimplemented = false;
    let mut told_unavailable = false;
    loop {
        let ended = follow_once(&cri, &wakers, &pleg, &cancel).await;
        // A runtime without the stream (Unimplemented, rechecked every minute) is no error.
        if !matches!(ended, Ended::Cancelled | Ended::Unimplemented) {
            pleg.metrics.evented_connection_error();
        }
        if pleg.following.load(Ordering::Relaxed) {
            pleg.set_following(false);
        }
        match &ended {
            Ended::Cancelled => return,
            Ended::Unimplemented if !told_unimplemented => {
                told_unimplemented = true;
                info!(
                    "the runtime has no CRI event stream (GetContainerEvents is unimplemented); relist mode, every 1 s"
                );
            }
            Ended::Unimplemented => {}
            Ended::Broke { why, .. } => {
                told_unavailable = false;
                warn!(error = %why, "the CRI event stream broke; relist mode until it is reopened");
            }
            Ended::NotOpened(why) if !told_unavailable => {
                told_unavailable = true;
                warn!(error = %why, "cannot open the CRI event stream; relist mode, retrying with back-off");
            }
            Ended::NotOpened(why) => debug!(error = %why, "CRI event stream still unavailable"),
        }
        let (wait, next) = next_wait(&ended, backoff);
        backoff = next;
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Opens the stream once and follows it until it ends.
async fn follow_once(
    cri: &CriClient,
    wakers: &Wakers,
    pleg: &PlegState,
    cancel: &CancellationToken,
) -> Ended {
    let open = cri.container_events();
    tokio::pin!(open);
    let settle = tokio::time::sleep(STREAM_SETTLE);
    tokio::pin!(settle);
    let mut established: Option<Instant> = None;
    let opened = loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ended::Cancelled,
            r = &mut open => break r,
            _ = &mut settle, if established.is_none() => {
                established = Some(Instant::now());
                info!("following the runtime's CRI event stream (events mode)");
                pleg.set_following(true);
            }
        }
    };
    let mut stream = match opened {
        Ok(s) => s,
        Err(e) if e.is_unimplemented() => return Ended::Unimplemented,
        Err(e) => {
            return match established {
                Some(t) => Ended::Broke { why: e.to_string(), lived: t.elapsed() },
                None => Ended::NotOpened(e.to_string()),
            };
        }
    };
    let since = match established {
        Some(t) => t,
        None => {
            info!("following the runtime's CRI event stream (events mode)");
            pleg.set_following(true);
            Instant::now()
        }
    };
    loop {
        let msg = tokio::select! {
            _ = cancel.cancelled() => return Ended::Cancelled,
            m = stream.message() => m,
        };
        match msg {
            Ok(Some(ev)) => on_event(wakers, pleg, &ev),
            Ok(None) => {
                return Ended::Broke { why: "the runtime ended the stream".into(), lived: since.elapsed() };
            }
            Err(s) => return Ended::Broke { why: s.to_string(), lived: since.elapsed() },
        }
    }
}

/// The pod UID an event is about: from its sandbox status, else from a container's labels.
fn event_uid(ev: &api::ContainerEventResponse) -> Option<String> {
    ev.pod_sandbox_status
        .as_ref()
        .and_then(|s| s.metadata.as_ref().map(|m| m.uid.clone()))
        .filter(|u| !u.is_empty())
        .or_else(|| ev.containers_statuses.iter().find_map(|c| c.labels.get(keys::POD_UID).cloned()))
}

fn on_event(wakers: &Wakers, pleg: &PlegState, ev: &api::ContainerEventResponse) {
    pleg.events_received.fetch_add(1, Ordering::Relaxed);
    let kind =
        api::ContainerEventType::try_from(ev.container_event_type).map_or("unknown", |k| k.as_str_name());
    pleg.metrics.cri_event(kind, ev.created_at);
    match event_uid(ev) {
        Some(uid) => {
            debug!(uid = %uid, container = %ev.container_id, kind, "CRI event");
            wakers.wake(&uid);
        }
        None => {
            // Nothing names the pod: let the relist find out which one changed.
            debug!(container = %ev.container_id, kind, "CRI event without a pod; relisting");
            pleg.relist_now.notify_one();
        }
    }
}

/// Every sandbox and container, reporting the runtime unavailable to `registry` if the answer
/// takes longer than `RELIST_SLOW`.
async fn list_all_watched(cri: &CriClient, registry: &Registry) -> Result<RuntimeBrief, CriError> {
    let list = cri.list_brief();
    tokio::pin!(list);
    tokio::select! {
        r = &mut list => return r,
        _ = tokio::time::sleep(RELIST_SLOW) => {}
    }
    warn!(after = ?RELIST_SLOW, "the relist has not answered; the runtime is unavailable until it does");
    registry.runtime_unavailable(&format!("the relist has not answered for {}s", RELIST_SLOW.as_secs()));
    list.await
}

/// Runs the relist loop until `cancel` fires: every period, and at once when the event stream
/// breaks or is (re)established. Each relist's outcome is the runtime's health in `registry`.
pub async fn run(
    cri: CriClient,
    wakers: Wakers,
    pleg: Arc<PlegState>,
    registry: Registry,
    known: RuntimeUids,
    cancel: CancellationToken,
) {
    let mut last: Option<Snapshot> = None;
    let mut failing = false;
    let mut tick = tokio::time::interval(RELIST_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
            _ = pleg.relist_now.notified() => tick.reset(),
        }
        let timer = pleg.metrics.relist_started();
        let brief = match list_all_watched(&cri, &registry).await {
            Ok(v) => v,
            Err(e) => {
                pleg.metrics.relist_failed(timer);
                if !failing {
                    warn!(error = %e, "relist failed; the runtime may be restarting");
                }
                failing = true;
                registry.runtime_unavailable(&e.to_string());
                continue;
            }
        };
        pleg.metrics.relisted(timer, &brief);
        registry.runtime_available();
        registry.liveness().relist_answered();
        if failing {
            info!("relist works again");
            failing = false;
        }
        let mut snap = Snapshot::with_capacity(brief.sandboxes.len() + brief.containers.len());
        for b in brief.sandboxes.into_iter().chain(brief.containers) {
            if let Some(uid) = b.uid {
                snap.insert(b.id, (b.state, uid));
            }
        }
        known.listed(snap.values().map(|(_, uid)| uid.clone()).collect());
        if let Some(old) = &last {
            for uid in changed_uids(old, &snap) {
                debug!(uid = %uid, "runtime state changed");
                wakers.wake(&uid);
            }
        }
        last = Some(snap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_uids_answer_yes_when_unsure() {
        let set = |v: &[&str]| v.iter().map(|u| u.to_string()).collect();
        let k = RuntimeUids::default();
        // Before any relist, nothing is known: every pod may have something.
        assert!(k.may_have("a"));
        k.listed(set(&["a"]));
        assert!(k.may_have("a"));
        assert!(!k.may_have("b"), "listed without b, and nothing of b was created since");
        // A create began after that list: b may exist until a relist says otherwise.
        k.claim("b");
        assert!(k.may_have("b"));
        // A relist that does not show b (its list may have been taken before the create
        // landed) keeps the claim.
        k.listed(set(&["a"]));
        assert!(k.may_have("b"));
        // One that shows it answers for it from now on: once b is gone from the runtime, so is
        // the claim.
        k.listed(set(&["a", "b"]));
        assert!(k.may_have("b"));
        k.listed(set(&["a"]));
        assert!(!k.may_have("b"));
        assert!(!k.may_have("c"));
    }

    /// Pods whose sandbox was never created (no relist shows them) are released when they end:
    /// churning a few hundred leaves no claim behind.
    #[test]
    fn released_claims_do_not_accumulate() {
        let k = RuntimeUids::default();
        k.listed(std::collections::HashSet::new());
        for i in 0..300 {
            let uid = format!("uid-{i}");
            k.claim(&uid);
            k.listed(std::collections::HashSet::new());
            k.release(&uid);
        }
        assert_eq!(k.0.lock().map(|k| k.claimed.len()).unwrap_or(usize::MAX), 0);
    }

    #[test]
    fn changes() {
        let snap = |v: &[(&str, i32, &str)]| -> Snapshot {
            v.iter().map(|(id, s, u)| (id.to_string(), (*s, u.to_string()))).collect()
        };
        let old = snap(&[("a", 1, "u1"), ("b", 1, "u2"), ("c", 2, "u3")]);
        let new = snap(&[("a", 1, "u1"), ("b", 2, "u2"), ("d", 0, "u4")]);
        assert_eq!(changed_uids(&old, &new), vec!["u2", "u3", "u4"]);
        assert!(changed_uids(&new, &new).is_empty());
    }

    #[test]
    fn reconnect_backoff_is_capped_and_never_gives_up() {
        let broke = |secs| Ended::Broke { why: String::new(), lived: Duration::from_secs(secs) };
        let not_opened = Ended::NotOpened(String::new());
        // (what ended, back-off before) → (wait now, back-off after)
        let cases = [
            (not_opened, RECONNECT_MIN, (RECONNECT_MIN, RECONNECT_MIN * 2)),
            (
                Ended::NotOpened(String::new()),
                Duration::from_millis(1600),
                (Duration::from_millis(1600), RECONNECT_MAX),
            ),
            (Ended::NotOpened(String::new()), RECONNECT_MAX, (RECONNECT_MAX, RECONNECT_MAX)),
            (broke(1), Duration::from_millis(800), (Duration::from_millis(800), Duration::from_millis(1600))),
            // A stream that lived long was healthy: start over.
            (broke(60), RECONNECT_MAX, (RECONNECT_MIN, RECONNECT_MIN * 2)),
            (Ended::Unimplemented, RECONNECT_MAX, (UNIMPLEMENTED_RECHECK, RECONNECT_MIN)),
        ];
        for (ended, before, want) in cases {
            assert_eq!(next_wait(&ended, before), want, "{ended:?} after {before:?}");
        }
        // However long the outage, the wait stays bounded: the stream is always tried again.
        let mut backoff = RECONNECT_MIN;
        for _ in 0..1000 {
            let (wait, next) = next_wait(&Ended::NotOpened(String::new()), backoff);
            assert!(wait <= RECONNECT_MAX);
            backoff = next;
        }
    }

    #[test]
    fn event_uid_from_sandbox_then_labels() {
        let mut ev = api::ContainerEventResponse { container_id: "c1".into(), ..Default::default() };
        assert_eq!(event_uid(&ev), None);
        ev.containers_statuses.push(api::ContainerStatus {
            labels: [(keys::POD_UID.to_string(), "from-label".to_string())].into(),
            ..Default::default()
        });
        assert_eq!(event_uid(&ev).as_deref(), Some("from-label"));
        ev.pod_sandbox_status = Some(api::PodSandboxStatus {
            metadata: Some(api::PodSandboxMetadata { uid: "from-sandbox".into(), ..Default::default() }),
            ..Default::default()
        });
        assert_eq!(event_uid(&ev).as_deref(), Some("from-sandbox"));
    }
}
