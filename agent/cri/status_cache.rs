//! Each pod's sandbox and container statuses as last observed, reused while the runtime's lists
//! show exactly the same objects of the pod in exactly the same states.
//!
//! Why: a pod is observed on every sync and after every sync that acted, and each observation
//! asked for the status of every sandbox and container it listed: about 25 status calls per pod
//! while 110 pods start at once, all served by a runtime already saturated by the starts, and one
//! round per pod per resync at rest. The kubelet's PLEG re-inspects a pod (`GetPodStatus`: the
//! status of each of its sandboxes and containers) only when a relist or an event shows a change
//! in it; this is the same rule, per pod: one object new, gone or in another state, and every
//! status of the pod is asked for again.
//!
//! What a status adds to a list is fixed while the states are, with two exceptions. A running
//! container's resources change in place: this agent forgets the pod whenever it updates them.
//! And `image_ref` is derived on each call from the runtime's image store: right after a pull a
//! container may show its bare image ID (`sha256:…`) where a later call shows the repo digest
//! (`name@sha256:…`), so a pod with a container without a digest is not kept.

use std::collections::HashMap;
use std::sync::Mutex;

use super::api;
use crate::model::{ObservedContainer, ObservedPod, ObservedSandbox};

/// The objects of a pod as its lists show them: (ID, listed state), sandboxes then containers,
/// each sorted by ID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listed {
    sandboxes: Vec<(String, i32)>,
    containers: Vec<(String, i32)>,
}

impl Listed {
    pub fn new(sandboxes: &[api::PodSandbox], containers: &[api::Container]) -> Self {
        Self::sorted(
            sandboxes.iter().map(|s| (s.id.clone(), s.state)).collect(),
            containers.iter().map(|c| (c.id.clone(), c.state)).collect(),
        )
    }

    /// What lists would show of a pod whose every object `observed` holds, in the states its
    /// statuses gave.
    pub fn of(observed: &ObservedPod) -> Self {
        use crate::model::{ContainerState as C, SandboxState as S};
        let sandbox = |s: S| match s {
            S::Ready => api::PodSandboxState::SandboxReady,
            S::NotReady => api::PodSandboxState::SandboxNotready,
        };
        let container = |c: C| match c {
            C::Created => api::ContainerState::ContainerCreated,
            C::Running => api::ContainerState::ContainerRunning,
            C::Exited => api::ContainerState::ContainerExited,
            C::Unknown => api::ContainerState::ContainerUnknown,
        };
        Self::sorted(
            observed.sandboxes.iter().map(|s| (s.id.clone(), sandbox(s.state) as i32)).collect(),
            observed.containers.iter().map(|c| (c.id.clone(), container(c.state) as i32)).collect(),
        )
    }

    fn sorted(mut sandboxes: Vec<(String, i32)>, mut containers: Vec<(String, i32)>) -> Self {
        sandboxes.sort();
        containers.sort();
        Self { sandboxes, containers }
    }

    /// A container in an unknown state may change without its listed state changing.
    fn settled(&self) -> bool {
        self.containers.iter().all(|(_, s)| *s != api::ContainerState::ContainerUnknown as i32)
    }
}

struct Kept {
    listed: Listed,
    sandboxes: Vec<ObservedSandbox>,
    containers: Vec<ObservedContainer>,
}

/// What was last observed of each pod UID.
#[derive(Default)]
pub struct StatusCache(Mutex<Pods>);

#[derive(Default)]
struct Pods {
    kept: HashMap<String, Kept>,
    /// Bumped by every forget: an observation read before one is not kept.
    generation: u64,
}

impl StatusCache {
    /// Where the cache stands before an observation's first call (for [`StatusCache::keep`]).
    pub fn generation(&self) -> u64 {
        self.0.lock().map_or(u64::MAX, |p| p.generation)
    }

    /// The statuses last observed for pod `uid`, if its lists show what they showed then.
    pub fn reuse(
        &self,
        uid: &str,
        listed: &Listed,
    ) -> Option<(Vec<ObservedSandbox>, Vec<ObservedContainer>)> {
        let pods = self.0.lock().ok()?;
        let kept = pods.kept.get(uid).filter(|k| k.listed == *listed)?;
        Some((kept.sandboxes.clone(), kept.containers.clone()))
    }

    /// Keeps `observed`, read after lists that showed `listed`, by an observation that began at
    /// `since` ([`StatusCache::generation`]). A pod with nothing listed, one whose statuses may
    /// change without its lists showing it, or one read across a forget, is dropped instead.
    pub fn keep(&self, since: u64, listed: Listed, observed: &ObservedPod) {
        let Ok(mut pods) = self.0.lock() else { return };
        let keepable = since == pods.generation
            && !(listed.sandboxes.is_empty() && listed.containers.is_empty())
            && listed.settled()
            && observed.containers.iter().all(|c| c.image_ref.contains('@'));
        if !keepable {
            pods.kept.remove(&observed.uid);
            return;
        }
        let kept =
            Kept { listed, sandboxes: observed.sandboxes.clone(), containers: observed.containers.clone() };
        pods.kept.insert(observed.uid.clone(), kept);
    }

    /// Forgets the pod that holds container `id` (its resources are being updated), and keeps
    /// no observation already under way.
    pub fn forget_container(&self, id: &str) {
        if let Ok(mut pods) = self.0.lock() {
            pods.generation = pods.generation.wrapping_add(1);
            pods.kept.retain(|_, kept| !kept.listed.containers.iter().any(|(c, _)| c == id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READY: i32 = api::PodSandboxState::SandboxReady as i32;
    const NOT_READY: i32 = api::PodSandboxState::SandboxNotready as i32;
    const RUNNING: i32 = api::ContainerState::ContainerRunning as i32;
    const EXITED: i32 = api::ContainerState::ContainerExited as i32;
    const UNKNOWN: i32 = api::ContainerState::ContainerUnknown as i32;

    fn listed(sandboxes: &[(&str, i32)], containers: &[(&str, i32)]) -> Listed {
        let sandboxes: Vec<_> = sandboxes
            .iter()
            .map(|(id, state)| api::PodSandbox { id: id.to_string(), state: *state, ..Default::default() })
            .collect();
        let containers: Vec<_> = containers
            .iter()
            .map(|(id, state)| api::Container { id: id.to_string(), state: *state, ..Default::default() })
            .collect();
        Listed::new(&sandboxes, &containers)
    }

    fn sandbox(id: &str, state: crate::model::SandboxState) -> ObservedSandbox {
        ObservedSandbox {
            id: id.to_string(),
            attempt: 0,
            state,
            created_at: 0,
            ips: vec![],
            host_network: false,
            labels: Default::default(),
            annotations: Default::default(),
        }
    }

    /// The pod `uid` as its statuses show `listed`; a container whose ID starts with "bare"
    /// shows a bare image ID, as one may right after its image was pulled.
    fn observed(uid: &str, listed: &Listed) -> ObservedPod {
        ObservedPod {
            uid: uid.into(),
            sandboxes: listed
                .sandboxes
                .iter()
                .map(|(id, _)| sandbox(id, crate::model::SandboxState::Ready))
                .collect(),
            containers: listed
                .containers
                .iter()
                .map(|(id, _)| ObservedContainer {
                    id: id.clone(),
                    image_ref: if id.starts_with("bare") { "sha256:1".into() } else { "img@sha256:1".into() },
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn statuses_are_reused_only_while_the_lists_show_the_same() {
        let kept = listed(&[("sb", READY)], &[("a", RUNNING), ("b", EXITED)]);
        // (what the next lists show, reused)
        let cases = [
            (listed(&[("sb", READY)], &[("a", RUNNING), ("b", EXITED)]), true),
            (listed(&[("sb", READY)], &[("b", EXITED), ("a", RUNNING)]), true),
            (listed(&[("sb", READY)], &[("a", EXITED), ("b", EXITED)]), false),
            (listed(&[("sb", NOT_READY)], &[("a", RUNNING), ("b", EXITED)]), false),
            (listed(&[("sb", READY)], &[("a", RUNNING)]), false),
            (listed(&[("sb", READY)], &[("a", RUNNING), ("b", EXITED), ("c", RUNNING)]), false),
            (listed(&[("sb", READY), ("sb2", READY)], &[("a", RUNNING), ("b", EXITED)]), false),
        ];
        for (i, (next, reused)) in cases.into_iter().enumerate() {
            let cache = StatusCache::default();
            cache.keep(0, kept.clone(), &observed("u1", &kept));
            assert_eq!(cache.reuse("u1", &next).is_some(), reused, "case {i}: {next:?}");
            assert!(cache.reuse("u2", &kept).is_none(), "case {i}: another pod's statuses");
        }
    }

    #[test]
    fn pods_whose_statuses_may_change_unseen_are_not_kept() {
        // (what the lists showed, kept)
        let cases = [
            (listed(&[("sb", READY)], &[("a", RUNNING)]), true),
            (listed(&[("sb", READY)], &[("a", UNKNOWN)]), false),
            (listed(&[("sb", READY)], &[("a", RUNNING), ("bare", RUNNING)]), false),
            (listed(&[], &[]), false),
        ];
        for (i, (shown, kept)) in cases.into_iter().enumerate() {
            let cache = StatusCache::default();
            cache.keep(0, shown.clone(), &observed("u1", &shown));
            assert_eq!(cache.reuse("u1", &shown).is_some(), kept, "case {i}: {shown:?}");
        }
    }

    #[test]
    fn a_newer_observation_replaces_a_pods_and_a_resource_update_forgets_it() {
        let cache = StatusCache::default();
        let one = listed(&[("sb", READY)], &[("a", RUNNING)]);
        let two = listed(&[("sb", READY)], &[("a", EXITED), ("c", RUNNING)]);
        let other = listed(&[("sb2", READY)], &[("d", RUNNING)]);
        cache.keep(0, one.clone(), &observed("u1", &one));
        cache.keep(0, other.clone(), &observed("u2", &other));
        cache.keep(0, two.clone(), &observed("u1", &two));
        assert!(cache.reuse("u1", &one).is_none());
        assert!(cache.reuse("u1", &two).is_some());
        // A pod whose lists now show nothing is dropped.
        cache.keep(0, Listed::default(), &ObservedPod { uid: "u1".into(), ..Default::default() });
        assert!(cache.reuse("u1", &two).is_none());
        cache.keep(0, two.clone(), &observed("u1", &two));
        let before = cache.generation();
        cache.forget_container("c");
        assert!(cache.reuse("u1", &two).is_none(), "resources of c updated");
        assert!(cache.reuse("u2", &other).is_some(), "another pod stays");
        // An observation that began before the update read the old resources: not kept.
        cache.keep(before, two.clone(), &observed("u1", &two));
        assert!(cache.reuse("u1", &two).is_none(), "kept across a forget");
        cache.keep(cache.generation(), two.clone(), &observed("u1", &two));
        assert!(cache.reuse("u1", &two).is_some());
    }

    #[test]
    fn a_snapshot_is_listed_in_the_states_its_statuses_gave() {
        use crate::model::{ContainerState as C, SandboxState as S};
        const CREATED: i32 = api::ContainerState::ContainerCreated as i32;
        let snapshot = |sandboxes: &[(&str, S)], containers: &[(&str, C)]| ObservedPod {
            uid: "u1".into(),
            sandboxes: sandboxes.iter().map(|(id, state)| sandbox(id, *state)).collect(),
            containers: containers
                .iter()
                .map(|(id, state)| ObservedContainer {
                    id: id.to_string(),
                    state: *state,
                    image_ref: "img@sha256:1".into(),
                    ..Default::default()
                })
                .collect(),
        };
        // (the snapshot, what lists show of the pod after it, reused)
        let cases = [
            (
                snapshot(&[("sb", S::Ready)], &[("side", C::Running), ("app", C::Running)]),
                listed(&[("sb", READY)], &[("app", RUNNING), ("side", RUNNING)]),
                true,
            ),
            (
                snapshot(&[("sb", S::Ready), ("old", S::NotReady)], &[("a", C::Exited), ("b", C::Created)]),
                listed(&[("old", NOT_READY), ("sb", READY)], &[("a", EXITED), ("b", CREATED)]),
                true,
            ),
            // The app exited since its status was read.
            (
                snapshot(&[("sb", S::Ready)], &[("side", C::Running), ("app", C::Running)]),
                listed(&[("sb", READY)], &[("app", EXITED), ("side", RUNNING)]),
                false,
            ),
            // A container the snapshot misses (made, but its start failed).
            (
                snapshot(&[("sb", S::Ready)], &[("side", C::Running)]),
                listed(&[("sb", READY)], &[("app", CREATED), ("side", RUNNING)]),
                false,
            ),
            // A state that can change unseen is never kept.
            (
                snapshot(&[("sb", S::Ready)], &[("side", C::Unknown)]),
                listed(&[("sb", READY)], &[("side", UNKNOWN)]),
                false,
            ),
        ];
        for (i, (snap, next, reused)) in cases.into_iter().enumerate() {
            let cache = StatusCache::default();
            cache.keep(0, Listed::of(&snap), &snap);
            assert_eq!(cache.reuse("u1", &next).is_some(), reused, "case {i}: {next:?}");
        }
    }
}
