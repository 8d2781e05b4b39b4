//! In-place image updates (DESIGN "Updates"): when running containers no longer match the
//! desired spec (an image edit that kept the pod UID), the pod reports
//! `InPlaceUpdateReady=False`, optionally waits for endpoints to drain, pulls every new image
//! before stopping anything, restarts changed sidecars before changed apps, and reports
//! `InPlaceUpdateReady=True` once each changed container runs the new image (by digest) and is
//! started and ready. The state lives under `--root-dir`, so a restarted agent carries on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::plan::{ProbeResult, ProbeResults, container_changed};
use crate::model::{ContainerState, ObservedContainer, ObservedPod, ProbeState};
use crate::podspec::is_sidecar;

/// The condition crilet owns for in-place updates.
pub const CONDITION: &str = "InPlaceUpdateReady";
/// Pod annotation: seconds to wait after `InPlaceUpdateReady=False` before touching anything.
pub const GRACE_ANNOTATION: &str = "crilet.io/inplace-update-grace-period-seconds";

/// What is known about the current (or last) in-place update of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateState {
    /// Wall-clock ns when the update began (the drain wait counts from here).
    pub started_ns: i64,
    /// The new image of each container being updated.
    pub images: BTreeMap<String, String>,
    /// Image ID and repo digests of each pulled new image, by container.
    pub pulled: BTreeMap<String, PulledImage>,
    /// Every updated container runs its new image and is started and ready.
    pub done: bool,
    /// Why the update is not progressing (a pull error), for the condition's message.
    pub blocked: Option<String>,
    /// The last failed pull's error by new image, named in the message while the back-off lasts.
    #[serde(default)]
    pub pull_errors: BTreeMap<String, String>,
    /// When `done` last changed (RFC 3339), for the condition's transition time.
    pub transition: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PulledImage {
    pub id: String,
    pub repo_digests: Vec<String>,
}

impl UpdateState {
    pub fn load(path: &Path) -> Option<UpdateState> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    pub async fn save(&self, path: std::path::PathBuf) -> Result<(), crate::checkpoint::CheckpointError> {
        crate::checkpoint::write_json_async(path, self).await
    }

    /// The `InPlaceUpdateReady` condition this state stands for.
    pub fn condition(&self) -> PodCondition {
        let time = self.transition.parse().ok().map(Time);
        let (status, reason, message) = if self.done {
            ("True", None, None)
        } else if let Some(b) = &self.blocked {
            ("False", Some("InPlaceUpdateBlocked".to_string()), Some(b.clone()))
        } else {
            let names: Vec<&str> = self.images.keys().map(String::as_str).collect();
            (
                "False",
                Some("InPlaceUpdating".to_string()),
                Some(format!("updating containers: [{}]", names.join(" "))),
            )
        };
        PodCondition {
            type_: CONDITION.into(),
            status: status.into(),
            reason,
            message,
            last_transition_time: time,
            last_probe_time: None,
            observed_generation: None,
        }
    }
}

/// The conditions a pod's status is computed from: the external ones (readiness gates set from
/// outside) with crilet's own `InPlaceUpdateReady` folded in.
/// - A static pod's `InPlaceUpdateReady` is crilet's: its condition replaces any other.
/// - An API pod that declares `InPlaceUpdateReady` as a readiness gate (OpenKruise's pods): the
///   condition belongs to the controller (OpenKruise sets it False before it patches an image and
///   True once its completion check passed), and the controller's condition stands as it is.
///   crilet only holds the pod unready while its own update is under way (a False of its own
///   where the controller has none or a True), and says nothing once its update is done, so a
///   finished update never hides the controller's next False.
/// - An API pod without that gate gets the kubelet's readiness: crilet adds nothing, and Ready
///   stays True while the old container still runs (as upstream; a client that reads the pod
///   right after patching its image sees it still ready).
pub fn with_own_condition(
    mut external: Vec<PodCondition>,
    own: Option<&UpdateState>,
    owner: Owner,
) -> Vec<PodCondition> {
    match owner {
        Owner::Crilet => {
            if let Some(u) = own {
                external.retain(|c| c.type_ != CONDITION);
                external.push(u.condition());
            }
        }
        Owner::Controller => {
            if let Some(u) = own.filter(|u| !u.done) {
                match external.iter_mut().find(|c| c.type_ == CONDITION) {
                    Some(c) if c.status == "False" => {}
                    Some(c) => *c = u.condition(),
                    None => external.push(u.condition()),
                }
            }
        }
        Owner::Nobody => {}
    }
    external
}

/// Whose `InPlaceUpdateReady` a pod's readiness follows (see `with_own_condition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A static pod: crilet's (DESIGN "Updates").
    Crilet,
    /// An API pod with the readiness gate: its controller's (OpenKruise).
    Controller,
    /// An API pod without the gate: nobody's; readiness is the containers' alone.
    Nobody,
}

impl Owner {
    pub fn of(pod: &Pod, api_pod: bool) -> Owner {
        let gated = || {
            pod.spec
                .as_ref()
                .and_then(|s| s.readiness_gates.as_ref())
                .is_some_and(|g| g.iter().any(|g| g.condition_type == CONDITION))
        };
        if !api_pod {
            Owner::Crilet
        } else if gated() {
            Owner::Controller
        } else {
            Owner::Nobody
        }
    }
}

fn spec_containers(pod: &Pod) -> Vec<&Container> {
    let Some(s) = pod.spec.as_ref() else { return Vec::new() };
    s.init_containers.iter().flatten().filter(|c| is_sidecar(c)).chain(s.containers.iter()).collect()
}

/// Running sidecars and app containers whose definition differs from the desired one.
pub fn changed_containers(pod: &Pod, observed: &ObservedPod) -> BTreeMap<String, String> {
    spec_containers(pod)
        .into_iter()
        .filter_map(|c| {
            let o = observed.newest(&c.name)?;
            (o.state == ContainerState::Running && container_changed(pod, c, o))
                .then(|| (c.name.clone(), c.image.clone().unwrap_or_default()))
        })
        .collect()
}

/// Changed containers that must keep running for now: all of them during the drain wait and
/// until every new image is pulled (nothing is stopped before all pulls succeeded), and changed
/// apps while a sidecar is not yet updated and started (apps wait for their sidecars as at start).
pub fn held(
    pod: &Pod,
    observed: &ObservedPod,
    changed: &BTreeMap<String, String>,
    pulled: &BTreeSet<String>,
    waiting: bool,
    probes: &ProbeResults,
) -> BTreeSet<String> {
    if waiting || changed.keys().any(|n| !pulled.contains(n)) {
        return changed.keys().cloned().collect();
    }
    let mut held = BTreeSet::new();
    let sidecars_ready = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| is_sidecar(c))
        .all(|c| {
            observed.newest(&c.name).is_some_and(|o| {
                o.state == ContainerState::Running
                    && !container_changed(pod, c, o)
                    && (c.startup_probe.is_none() || probes.startup.get(&o.id) == Some(&ProbeResult::Success))
            })
        });
    if !sidecars_ready {
        let apps = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or(&[]);
        held.extend(apps.iter().filter(|c| changed.contains_key(&c.name)).map(|c| c.name.clone()));
    }
    held
}

/// Does the running instance use the pulled image? Compared by image ID or manifest digest, never
/// by the tag string. The digest alone, whatever repository names it: the runtime reports an
/// image by the first of its names, so a second name for the same image (another pod pulling it
/// from elsewhere, a retag) changes the repository in `image_ref` but not the content.
fn runs_image(o: &ObservedContainer, img: &PulledImage) -> bool {
    o.image_ref == img.id || o.image == img.id || digest(&o.image_ref).is_some_and(|d| carries(img, d))
}

/// The digest of a `repo@sha256:…` reference.
fn digest(reference: &str) -> Option<&str> {
    reference.rsplit_once('@').map(|(_, d)| d)
}

/// One of the pulled image's repo digests is `digest`, under whichever repository.
fn carries(img: &PulledImage, digest_wanted: &str) -> bool {
    img.repo_digests.iter().any(|r| digest(r) == Some(digest_wanted))
}

/// Is the update finished: every updated container running its new image, started and ready?
pub fn finished(
    pod: &Pod,
    observed: &ObservedPod,
    state: &UpdateState,
    probe_states: &BTreeMap<String, ProbeState>,
) -> bool {
    let specs = spec_containers(pod);
    state.images.keys().all(|name| {
        let (Some(spec), Some(o), Some(img)) =
            (specs.iter().find(|c| &c.name == name), observed.newest(name), state.pulled.get(name))
        else {
            return false;
        };
        let p = probe_states.get(&o.id).copied().unwrap_or_default();
        let started = spec.startup_probe.is_none() || p.started == Some(true);
        let ready = spec.readiness_probe.is_none() || p.ready == Some(true);
        o.state == ContainerState::Running
            && !container_changed(pod, spec, o)
            && runs_image(o, img)
            && started
            && ready
    })
}

/// `:latest` or no tag (and no digest): the image may change under the same string.
pub fn floating_tag(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// For `repo@sha256:…` images: the pulled image must carry that digest.
pub fn digest_matches(image: &str, pulled: &PulledImage) -> bool {
    digest(image).is_none_or(|d| pulled.id == d || carries(pulled, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::PodSpec;

    use crate::model::ObservedSandbox;
    use crate::pod::hash::container_hash;

    fn c(name: &str, image: &str, sidecar: bool) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    fn running(name: &str, image: &str) -> ObservedContainer {
        ObservedContainer {
            id: format!("{name}-id"),
            sandbox_id: "sb".into(),
            name: name.into(),
            attempt: 0,
            state: ContainerState::Running,
            created_at: 1,
            started_at: 1,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: image.into(),
            image_ref: String::new(),
            hash: container_hash(&c(name, image, false)),
            restart_count: 0,
            log_path: String::new(),
            annotations: Default::default(),
            stop_signal: None,
            resources: None,
            user: None,
        }
    }

    #[test]
    fn held_cases() {
        // Desired: sidecar s and apps a, b; a and s moved to :2, b unchanged.
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![c("s", "x:2", true)]),
                containers: vec![c("a", "x:2", false), c("b", "x:1", false)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let sandbox = ObservedSandbox {
            id: "sb".into(),
            attempt: 0,
            state: crate::model::SandboxState::Ready,
            created_at: 0,
            ips: vec!["10.0.0.2".into()],
            host_network: false,
            labels: Default::default(),
            annotations: Default::default(),
        };
        let old = ObservedPod {
            uid: "u".into(),
            sandboxes: vec![sandbox.clone()],
            containers: vec![running("s", "x:1"), running("a", "x:1"), running("b", "x:1")],
        };
        let changed = changed_containers(&pod, &old);
        assert_eq!(changed.keys().collect::<Vec<_>>(), vec!["a", "s"], "only the edited containers");
        let probes = ProbeResults::default();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<String>>();
        let cases: Vec<(&str, &[&str], bool, &[&str])> = vec![
            ("drain wait: everything held", &["a", "s"], true, &["a", "s"]),
            ("nothing pulled yet: everything held", &[], false, &["a", "s"]),
            (
                "sidecar pulled, app not: nothing stops before every pull succeeded",
                &["s"],
                false,
                &["a", "s"],
            ),
            ("both pulled: the app still waits for the sidecar", &["a", "s"], false, &["a"]),
        ];
        for (name, pulled, waiting, want) in cases {
            assert_eq!(held(&pod, &old, &changed, &names(pulled), waiting, &probes), names(want), "{name}");
        }
        // Once the sidecar runs its new image, the app may go.
        let mid = ObservedPod {
            containers: vec![running("s", "x:2"), running("a", "x:1"), running("b", "x:1")],
            ..old.clone()
        };
        let changed = changed_containers(&pod, &mid);
        assert_eq!(held(&pod, &mid, &changed, &names(&["a", "s"]), false, &probes), names(&[]));
    }

    #[test]
    fn floating_tags() {
        let cases = [
            ("busybox", true),
            ("busybox:latest", true),
            ("localhost:5099/busybox", true),
            ("localhost:5099/busybox:1.36", false),
            ("busybox@sha256:abc", false),
            ("reg:5000/a/b:v2", false),
        ];
        for (image, want) in cases {
            assert_eq!(floating_tag(image), want, "{image}");
        }
    }

    #[test]
    fn digests() {
        let p =
            PulledImage { id: "sha256:1".into(), repo_digests: vec!["localhost:5099/web@sha256:aa".into()] };
        assert!(digest_matches("localhost:5099/web@sha256:aa", &p));
        assert!(!digest_matches("localhost:5099/web@sha256:bb", &p));
        assert!(digest_matches("localhost:5099/web:v2", &p));
    }

    #[test]
    fn the_running_image_is_known_by_id_or_digest_under_any_repository() {
        let img = PulledImage {
            id: "sha256:c0".into(),
            repo_digests: vec!["localhost:5099/web@sha256:d2".into(), "mirror.io/web@sha256:d2".into()],
        };
        // (image, image_ref the runtime reports, runs the pulled image)
        let cases = [
            ("localhost:5099/web:v2", "localhost:5099/web@sha256:d2", true),
            ("localhost:5099/web:v2", "sha256:c0", true),
            ("sha256:c0", "", true),
            // The same image under a name pulled after ours: the first name sorts first.
            ("localhost:5099/alias:latest", "localhost:5099/alias@sha256:d2", true),
            ("localhost:5099/web:v2", "localhost:5099/web@sha256:d1", false),
            ("localhost:5099/web:v1", "sha256:c1", false),
            ("localhost:5099/web:v2", "", false),
            ("localhost:5099/web:v2", "sha256:d2", false),
        ];
        for (image, image_ref, want) in cases {
            let o = ObservedContainer { image_ref: image_ref.into(), ..running("web", image) };
            assert_eq!(runs_image(&o, &img), want, "{image} / {image_ref}");
        }
    }

    fn cond(status: &str, reason: &str) -> PodCondition {
        PodCondition {
            type_: CONDITION.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..Default::default()
        }
    }

    #[test]
    fn own_condition_with_a_controllers() {
        let under_way =
            UpdateState { images: [("app".to_string(), "x:2".to_string())].into(), ..Default::default() };
        let done = UpdateState { done: true, ..under_way.clone() };
        let gate =
            PodCondition { type_: "KruisePodReady".into(), status: "True".into(), ..Default::default() };
        let view = |v: Vec<PodCondition>| -> Vec<(String, String, Option<String>)> {
            v.into_iter().map(|c| (c.type_, c.status, c.reason)).collect()
        };
        let inplace = |status: &str, reason: &str| {
            (CONDITION.to_string(), status.to_string(), Some(reason.to_string()))
        };
        let ours_false = (CONDITION.to_string(), "False".to_string(), Some("InPlaceUpdating".to_string()));
        let ours_true = (CONDITION.to_string(), "True".to_string(), None);
        let kruise = ("KruisePodReady".to_string(), "True".to_string(), None);
        // (name, external, own, whose condition, want)
        let cases: Vec<(
            &str,
            Vec<PodCondition>,
            Option<&UpdateState>,
            Owner,
            Vec<(String, String, Option<String>)>,
        )> = vec![
            (
                "static pod: crilet's condition replaces any",
                vec![cond("False", "X")],
                Some(&done),
                Owner::Crilet,
                vec![ours_true.clone()],
            ),
            ("static pod under way", vec![], Some(&under_way), Owner::Crilet, vec![ours_false.clone()]),
            (
                "static pod, no update: as given",
                vec![cond("True", "X")],
                None,
                Owner::Crilet,
                vec![inplace("True", "X")],
            ),
            (
                "API pod: the controller's False stands while crilet updates",
                vec![gate.clone(), cond("False", "Kruise")],
                Some(&under_way),
                Owner::Controller,
                vec![kruise.clone(), inplace("False", "Kruise")],
            ),
            (
                "API pod: crilet's finished update never turns the controller's False True",
                vec![cond("False", "Kruise")],
                Some(&done),
                Owner::Controller,
                vec![inplace("False", "Kruise")],
            ),
            (
                "API pod: the controller's True is held False while crilet updates",
                vec![cond("True", "Kruise")],
                Some(&under_way),
                Owner::Controller,
                vec![ours_false.clone()],
            ),
            (
                "gated API pod without the controller's condition yet, under way",
                vec![],
                Some(&under_way),
                Owner::Controller,
                vec![ours_false],
            ),
            (
                "API pod without the gate, under way: the kubelet's readiness, nothing added",
                vec![gate.clone()],
                Some(&under_way),
                Owner::Nobody,
                vec![kruise.clone()],
            ),
            (
                "gated API pod without the controller's condition, done: nothing added",
                vec![gate],
                Some(&done),
                Owner::Controller,
                vec![kruise],
            ),
        ];
        for (name, external, own, api, want) in cases {
            assert_eq!(view(with_own_condition(external, own, api)), want, "{name}");
        }
    }

    /// Only a static pod's condition is crilet's; an API pod's only when it declares the gate.
    #[test]
    fn owners() {
        let pod = |gates: &[&str]| Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                readiness_gates: Some(
                    gates
                        .iter()
                        .map(|g| k8s_openapi::api::core::v1::PodReadinessGate { condition_type: (*g).into() })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(Owner::of(&pod(&[]), false), Owner::Crilet, "static");
        assert_eq!(Owner::of(&pod(&[CONDITION]), false), Owner::Crilet, "static, gated");
        assert_eq!(Owner::of(&pod(&["other", CONDITION]), true), Owner::Controller, "OpenKruise's pod");
        assert_eq!(Owner::of(&pod(&["other"]), true), Owner::Nobody, "another gate only");
        assert_eq!(Owner::of(&Pod::default(), true), Owner::Nobody, "no spec");
    }

    #[test]
    fn condition_shapes() {
        let mut s =
            UpdateState { images: [("app".to_string(), "x:2".to_string())].into(), ..Default::default() };
        let c = s.condition();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", Some("InPlaceUpdating")));
        s.blocked = Some("pull failed".into());
        assert_eq!(s.condition().reason.as_deref(), Some("InPlaceUpdateBlocked"));
        s.done = true;
        assert_eq!(s.condition().status, "True");
    }
}
