//! The node's one ledger of what its pods hold: each active pod's cpu (millicores) and memory
//! requests at its allocation, by UID. Admission (cluster mode) reads it to decide whether a new
//! pod fits, and a resize (KEP-1287) reads it to decide whether the new size fits beside the
//! others, so the two can never disagree about what the node has given out.
//!
//! Who writes: admission enters an API pod when it admits it (its requests as asked for) and
//! removes it when the API server no longer has it; each pod worker enters its pod at its
//! allocation once it runs (static pods included, as the kubelet counts them) and removes it
//! when the pod finishes or is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Requests as (cpu millicores, memory bytes).
pub type Requests = (i64, i64);

/// Shared, cheaply cloned.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    held: Arc<Mutex<BTreeMap<String, Requests>>>,
}

impl Ledger {
    /// Enters (or, with `None`, removes) pod `uid`'s requests.
    pub fn set(&self, uid: &str, requests: Option<Requests>) {
        let Ok(mut held) = self.held.lock() else { return };
        match requests {
            Some(r) => held.insert(uid.to_string(), r),
            None => held.remove(uid),
        };
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
        held.iter().filter(|(u, _)| counted(u)).fold((0, 0), |(c, m), (_, r)| (c + r.0, m + r.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_leave_out_the_asker_and_finished_pods() {
        let l = Ledger::default();
        l.set("a", Some((100, 10)));
        l.set("b", Some((200, 20)));
        l.set("c", Some((400, 40)));
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
        l.set("a", Some((150, 10)));
        assert_eq!(l.others("b"), (550, 50));
        l.set("c", None);
        l.set("c", None);
        assert_eq!((l.len(), l.active(&BTreeSet::new())), (2, (350, 30)));
    }
}
