//! `appArmorProfile` (pod and container level) and the deprecated annotations
//! `container.apparmor.security.beta.kubernetes.io/<container>` as the API server validates them
//! (`ValidateAppArmorProfileField`, `ValidateAppArmorPodAnnotations`, and on create that a field
//! and its annotation agree), with its deprecation warning for the annotations and the kubelet's
//! refusal of an empty Localhost name. Whether the host can enforce the profile is admission's
//! (`source::pool`, with `apparmor::admit`); which profile a container runs with is `apparmor`'s.

use k8s_openapi::api::core::v1::{AppArmorProfile, Pod};

use super::Findings;
use super::validate::one_of;
use crate::apparmor::{ANNOTATION_PREFIX, LOCALHOST_PREFIX, PROFILE_TYPES, RUNTIME_DEFAULT, UNCONFINED};

/// Most bytes a Localhost profile name may hold (PATH_MAX - 1).
const NAME_MAX: usize = 4095;
const DEPRECATED: &str = "deprecated since v1.30; use the \"appArmorProfile\" field instead";

/// Checks the pod's and its containers' profiles and the annotations; findings go into `f`.
pub(super) fn validate(pod: &Pod, f: &mut Findings) {
    let Some(spec) = pod.spec.as_ref() else { return };
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let pod_profile = spec.security_context.as_ref().and_then(|sc| sc.app_armor_profile.as_ref());
    if let Some(p) = pod_profile {
        profile(p, "spec.securityContext.appArmorProfile", f);
    }
    let mut names = Vec::new();
    for (path, c) in crate::podspec::containers_at(spec) {
        names.push(c.name.as_str());
        let sc = c.security_context.as_ref();
        let own = sc.and_then(|sc| sc.app_armor_profile.as_ref());
        let field = format!("{path}.securityContext.appArmorProfile");
        if let Some(p) = own {
            profile(p, &field, f);
        }
        let key = format!("{ANNOTATION_PREFIX}{}", c.name);
        if let (Some(p), Some(value)) = (own.or(pod_profile), annotations.get(&key)) {
            agree(p, value, &field, f);
        }
        // containerd applies no RuntimeDefault profile to a privileged container: what it asks
        // for is reported rather than silently dropped (a Localhost profile is applied).
        let effective = own.or(pod_profile).map(|p| p.type_.as_str());
        let annotated = annotations.get(&key).map(String::as_str);
        let default_asked =
            effective == Some("RuntimeDefault") || (own.is_none() && annotated == Some(RUNTIME_DEFAULT));
        if default_asked && sc.and_then(|sc| sc.privileged) == Some(true) {
            f.warn(
                format!("{path}.securityContext.privileged"),
                "a privileged container runs unconfined: the runtime applies no RuntimeDefault AppArmor profile to it",
            );
        }
    }
    let mut keys: Vec<&String> = annotations.keys().filter(|k| k.starts_with(ANNOTATION_PREFIX)).collect();
    keys.sort();
    for key in keys {
        let here = format!("metadata.annotations[{key}]");
        let container = &key[ANNOTATION_PREFIX.len()..];
        if !names.contains(&container) {
            f.error(here.clone(), format!("container {container:?} not found"));
        }
        let value = &annotations[key];
        match value.as_str() {
            "" | RUNTIME_DEFAULT | UNCONFINED => {}
            v => match v.strip_prefix(LOCALHOST_PREFIX) {
                None => f.error(
                    here.clone(),
                    format!(
                        "invalid AppArmor profile name: {v:?} (use {RUNTIME_DEFAULT:?}, {UNCONFINED:?} or \"{LOCALHOST_PREFIX}<profile>\")"
                    ),
                ),
                // The API server lets it through; the kubelet refuses the pod at admission.
                Some(name) if name.trim().is_empty() => f.error(here.clone(), "invalid empty AppArmor profile name"),
                Some(_) => {}
            },
        }
        f.warn(here, DEPRECATED);
    }
}

fn profile(p: &AppArmorProfile, path: &str, f: &mut Findings) {
    if p.type_.is_empty() {
        f.error(format!("{path}.type"), "required: type is required when appArmorProfile is set");
    }
    one_of(f, &format!("{path}.type"), Some(p.type_.as_str()).filter(|t| !t.is_empty()), PROFILE_TYPES);
    let name = format!("{path}.localhostProfile");
    match (p.type_.as_str(), p.localhost_profile.as_deref()) {
        ("Localhost", None) => f.error(name, "required: must be set when AppArmor type is Localhost"),
        ("Localhost", Some(n)) if n.trim() != n => f.error(name, "must not be padded with whitespace"),
        ("Localhost", Some("")) => f.error(name, "required: must be set when AppArmor type is Localhost"),
        ("Localhost", Some(n)) if n.len() > NAME_MAX => {
            f.error(name, format!("may not be longer than {NAME_MAX} bytes"))
        }
        ("Localhost", Some(_)) => {}
        ("RuntimeDefault" | "Unconfined", Some(_)) => {
            f.error(name, "can only be set when AppArmor type is Localhost")
        }
        _ => {}
    }
}

/// On create, a field and its container's annotation must say the same.
fn agree(p: &AppArmorProfile, annotation: &str, field: &str, f: &mut Findings) {
    let same_type = match p.type_.as_str() {
        "Unconfined" => annotation == UNCONFINED,
        "RuntimeDefault" => annotation == RUNTIME_DEFAULT,
        "Localhost" => annotation.starts_with(LOCALHOST_PREFIX),
        _ => true,
    };
    if !same_type {
        f.error(format!("{field}.type"), "forbidden: apparmor type in annotation and field must match");
    } else if p.type_ == "Localhost"
        && p.localhost_profile.as_deref() != annotation.strip_prefix(LOCALHOST_PREFIX)
    {
        f.error(
            format!("{field}.localhostProfile"),
            "forbidden: apparmor profile in annotation and field must match",
        );
    }
}
