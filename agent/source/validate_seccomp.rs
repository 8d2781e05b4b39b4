//! `seccompProfile` (pod and container level) as the API server validates it
//! (`validateSeccompProfileField`), the API server's warnings for the seccomp annotations it
//! stopped honouring in 1.27, and a warning where the runtime cannot apply what the pod asks.
//! Which profile a container runs with is `pod::seccomp`'s.

use k8s_openapi::api::core::v1::{Pod, SeccompProfile};

use super::Findings;
use super::validate::one_of;
use crate::pod::seccomp::{PROFILE_TYPES, localhost_problems};

/// The annotations the kubelet read before 1.27 (`SeccompPodAnnotationKey`,
/// `SeccompContainerAnnotationKeyPrefix`).
const POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";
const NON_FUNCTIONAL: &str = "non-functional in v1.27+; use the \"seccompProfile\" field instead";

/// Checks the pod's and its containers' profiles; errors and warnings go into `f`.
pub(super) fn validate(pod: &Pod, f: &mut Findings) {
    let Some(spec) = pod.spec.as_ref() else { return };
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let pod_profile = spec.security_context.as_ref().and_then(|sc| sc.seccomp_profile.as_ref());
    match pod_profile {
        Some(p) => profile(p, "spec.securityContext.seccompProfile", f),
        None if annotations.contains_key(POD_ANNOTATION) => {
            f.warn(format!("metadata.annotations[{POD_ANNOTATION}]"), NON_FUNCTIONAL)
        }
        None => {}
    }
    for (path, c) in crate::podspec::containers_at(spec) {
        let sc = c.security_context.as_ref();
        let own = sc.and_then(|sc| sc.seccomp_profile.as_ref());
        match own {
            Some(p) => profile(p, &format!("{path}.securityContext.seccompProfile"), f),
            None => {
                let key = format!("{CONTAINER_ANNOTATION_PREFIX}{}", c.name);
                if annotations.contains_key(&key) {
                    f.warn(format!("metadata.annotations[{key}]"), NON_FUNCTIONAL);
                }
            }
        }
        // containerd (and CRI-O) apply no seccomp filter to a privileged container: what it asks
        // for is reported rather than silently dropped.
        let confined = own.or(pod_profile).is_some_and(|p| p.type_ != "Unconfined");
        if confined && sc.and_then(|sc| sc.privileged) == Some(true) {
            f.warn(
                format!("{path}.securityContext.privileged"),
                "a privileged container runs unconfined: the runtime applies no seccomp profile to it",
            );
        }
    }
}

fn profile(p: &SeccompProfile, path: &str, f: &mut Findings) {
    if p.type_.is_empty() {
        f.error(format!("{path}.type"), "required: type is required when seccompProfile is set");
    }
    one_of(f, &format!("{path}.type"), Some(p.type_.as_str()).filter(|t| !t.is_empty()), PROFILE_TYPES);
    let name = p.localhost_profile.as_deref().filter(|n| !n.is_empty());
    match (p.type_.as_str(), name) {
        ("Localhost", None) => f.error(
            format!("{path}.localhostProfile"),
            "required: must be set when seccomp type is Localhost",
        ),
        ("Localhost", Some(name)) => {
            for why in localhost_problems(name) {
                f.error(format!("{path}.localhostProfile"), why);
            }
        }
        (_, Some(_)) => {
            f.error(format!("{path}.localhostProfile"), "can only be set when seccomp type is Localhost")
        }
        (_, None) => {}
    }
}
