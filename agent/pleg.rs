//! The pod lifecycle event generator: relists every sandbox and container each second and wakes
//! the worker of every pod whose runtime state changed (R10.1). containerd 1.6 has no CRI event
//! stream, so relisting is the baseline; a quiet relist costs two list calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cri::CriClient;
use crate::model::keys;

/// Relist period (R10.1: 1 s).
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

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

/// Failed attempts at the event stream before relisting alone is trusted (R10.3: 5).
const EVENT_STREAM_ATTEMPTS: u32 = 5;

/// Follows the runtime's CRI event stream where it has one (containerd 1.7+), waking a pod's
/// worker on each event, so changes are seen at once instead of on the next relist. The relist
/// keeps running beside it as the safety net. Returns when the runtime has no stream.
pub async fn follow_events(cri: CriClient, wakers: Wakers, cancel: CancellationToken) {
    let mut failures = 0;
    while failures < EVENT_STREAM_ATTEMPTS {
        let stream = tokio::select! {
            _ = cancel.cancelled() => return,
            s = cri.container_events() => s,
        };
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) if e.is_unimplemented() => {
                info!("the runtime has no CRI event stream; relying on the 1 s relist");
                return;
            }
            Err(e) => {
                failures += 1;
                debug!(error = %e, failures, "CRI event stream unavailable");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        info!("following the runtime's CRI event stream");
        loop {
            let msg = tokio::select! {
                _ = cancel.cancelled() => return,
                m = stream.message() => m,
            };
            match msg {
                Ok(Some(ev)) => {
                    failures = 0;
                    let uid = ev
                        .pod_sandbox_status
                        .as_ref()
                        .and_then(|s| s.metadata.as_ref().map(|m| m.uid.clone()))
                        .or_else(|| {
                            ev.containers_statuses.iter().find_map(|c| c.labels.get(keys::POD_UID).cloned())
                        });
                    if let Some(uid) = uid {
                        debug!(uid = %uid, container = %ev.container_id, kind = ev.container_event_type, "CRI event");
                        wakers.wake(&uid);
                    }
                }
                Ok(None) | Err(_) => {
                    failures += 1;
                    break;
                }
            }
        }
    }
    warn!("the CRI event stream keeps failing; relying on the 1 s relist");
}

/// Runs the relist loop until `cancel` fires.
pub async fn run(cri: CriClient, wakers: Wakers, cancel: CancellationToken) {
    let mut last: Option<Snapshot> = None;
    let mut failing = false;
    let mut tick = tokio::time::interval(RELIST_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (sandboxes, containers) = match cri.list_all(None).await {
            Ok(v) => v,
            Err(e) => {
                if !failing {
                    warn!(error = %e, "relist failed; the runtime may be restarting");
                }
                failing = true;
                continue;
            }
        };
        if failing {
            info!("relist works again");
            failing = false;
        }
        let mut snap = Snapshot::new();
        for s in sandboxes {
            if let Some(uid) = s.labels.get(keys::POD_UID) {
                snap.insert(s.id, (s.state, uid.clone()));
            }
        }
        for c in containers {
            if let Some(uid) = c.labels.get(keys::POD_UID) {
                snap.insert(c.id, (c.state, uid.clone()));
            }
        }
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
    fn changes() {
        let snap = |v: &[(&str, i32, &str)]| -> Snapshot {
            v.iter().map(|(id, s, u)| (id.to_string(), (*s, u.to_string()))).collect()
        };
        let old = snap(&[("a", 1, "u1"), ("b", 1, "u2"), ("c", 2, "u3")]);
        let new = snap(&[("a", 1, "u1"), ("b", 2, "u2"), ("d", 0, "u4")]);
        assert_eq!(changed_uids(&old, &new), vec!["u2", "u3", "u4"]);
        assert!(changed_uids(&new, &new).is_empty());
    }
}
