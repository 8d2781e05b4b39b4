//! The node's one ledger of what its pods hold: each active pod's cpu (millicores) and memory
//! requests at its allocation, by UID. Admission (cluster mode) reads it to decide whether a new
//! pod fits, and a resize (KEP-1287) reads it to decide whether the new size fits beside the
//! others, so the two can never disagree about what the node has given out.
//!
//! Who writes: admission enters an API pod when it admits it (its requests as asked for) and
//! removes it when the API server no longer has it; each pod worker enters its pod at its
//! allocation once it runs (static pods included, as the kubelet counts them) and removes it
//! when the pod finishes or is gone.
//!
//! Each entry also keeps the pod's QoS class, for the `burstable` QoS cgroup's shares (the
//! kubelet's `UpdateQOSCgroups`): whoever keeps them subscribes to the ledger's changes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::cgroup::Qos;

/// Requests as (cpu millicores, memory bytes).
pub type Requests = (i64, i64);

/// What one pod holds: its requests and its QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub requests: Requests,
    pub qos: Qos,
}

impl Held {
    /// What `pod` holds: its effective requests and its class.
    pub fn of(pod: &Pod) -> Self {
        Held { requests: crate::podspec::requests(pod), qos: Qos::from_class(crate::status::qos_class(pod)) }
    }
}

/// Shared, cheaply cloned.
#[derive(Debug, Clone)]
pub struct Ledger {
    held: Arc<Mutex<BTreeMap<String, Held>>>,
    /// Bumped on every change, for those who follow it.
    changes: Arc<watch::Sender<u64>>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger { held: Arc::default(), changes: Arc::new(watch::Sender::new(0)) }
    }
}

impl Ledger {
    /// Enters (or, with `None`, removes) what pod `uid` holds.
    pub fn set(&self, uid: &str, held: Option<Held>) {
        let Ok(mut entries) = self.held.lock() else { return };
        let before = match held {
            Some(h) => entries.insert(uid.to_string(), h),
            None => entries.remove(uid),
        };
        drop(entries);
        if before != held {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A receiver that sees each change of the ledger (coalesced: the latest wins).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The summed cpu requests (millicores) of the Burstable pods (the kubelet's
    /// `setCPUCgroupConfig`, from which the `burstable` QoS cgroup gets its shares).
    pub fn burstable_cpu_milli(&self) -> i64 {
        let Ok(held) = self.held.lock() else { return 0 };
        held.values().filter(|h| h.qos == Qos::Burstable).map(|h| h.requests.0).sum()
    }

    /// The summed requests of every pod but `uid` (what a resize of `uid` must fit beside).
    pub fn others(&self, uid: &str) -> Requests {
        self.sum(|u| u != uid)
    }

    /// The summed requests of every pod not in `finished` (what a new pod must fit beside).
    pub fn active(&self, finished: &BTreeSet<String>) -> Requests {
        self.sum(|u| !finished.contains(u))
    }

    /// How many pods the ledger holds.
    pub fn len(&self) -> usize {
        self.held.lock().map_or(0, |h| h.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn sum(&self, counted: impl Fn(&str) -> bool) -> Requests {
        let Ok(held) = self.held.lock() else { return (0, 0) };
        held.iter()
            .filter(|(u, _)| counted(u))
            .fold((0, 0), |(c, m), (_, h)| (c + h.requests.0, m + h.requests.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burstable(cpu: i64, memory: i64) -> Option<Held> {
        Some(Held { requests: (cpu, memory), qos: Qos::Burstable })
    }

    #[test]
    fn sums_leave_out_the_asker_and_finished_pods() {
        let l = Ledger::default();
        l.set("a", burstable(100, 10));
        l.set("b", burstable(200, 20));
        l.set("c", burstable(400, 40));
        // (what is asked, the answer)
        let finished_b: BTreeSet<String> = ["b".to_string()].into();
        let cases = [
            ("others of a", l.others("a"), (600, 60)),
            ("others of a stranger", l.others("z"), (700, 70)),
            ("active, none finished", l.active(&BTreeSet::new()), (700, 70)),
            ("active, b finished", l.active(&finished_b), (500, 50)),
        ];
        for (what, got, want) in cases {
            assert_eq!(got, want, "{what}");
        }
        // A resize changes a pod's entry; removal frees it; removing twice is harmless.
        l.set("a", burstable(150, 10));
        assert_eq!(l.others("b"), (550, 50));
        l.set("c", None);
        l.set("c", None);
        assert_eq!((l.len(), l.active(&BTreeSet::new())), (2, (350, 30)));
    }

    /// The burstable sum counts Burstable pods only, and each change (not a repeat) is seen.
    #[test]
    fn burstable_requests_and_changes() {
        let l = Ledger::default();
        let mut changes = l.subscribe();
        let held = |cpu, qos| Some(Held { requests: (cpu, 0), qos });
        l.set("g", held(1000, Qos::Guaranteed));
        l.set("b1", held(250, Qos::Burstable));
        l.set("b2", held(100, Qos::Burstable));
        l.set("e", held(0, Qos::BestEffort));
        assert_eq!(l.burstable_cpu_milli(), 350);
        assert!(changes.has_changed().expect("open"));
        changes.mark_unchanged();
        l.set("b2", held(100, Qos::Burstable));
        l.set("z", None);
        assert!(!changes.has_changed().expect("open"), "a repeat is no change");
        l.set("b1", None);
        assert!(changes.has_changed().expect("open"));
        assert_eq!(l.burstable_cpu_milli(), 100);
    }

    /// A pod's class and effective requests, from its spec.
    #[test]
    fn held_of_a_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}},
            ]}
        }))
        .expect("pod");
        assert_eq!(Held::of(&pod), Held { requests: (1250, (64 << 20) + (1 << 30)), qos: Qos::Burstable });
    }
}
