//! AppArmor as the kubelet maps it: which profile a container asks for (`apparmor.GetProfile`:
//! the container's `appArmorProfile`, else its deprecated annotation
//! `container.apparmor.security.beta.kubernetes.io/<name>`, else the pod's field), what goes to
//! the runtime (`getAppArmorProfile`: the CRI `SecurityProfile` and the deprecated string, both
//! filled, nothing when nothing is asked, so the runtime applies its default), and the kubelet's
//! admission (`apparmor.Validator`): a pod asking for a profile other than Unconfined on a host
//! whose kernel has no AppArmor is refused with reason `AppArmor`, never run unconfined.
//! A Localhost profile that is not loaded is the runtime's `CreateContainerError`, as upstream.
//! Pure, but for [`host`], which reads the kernel's state once, as the kubelet does at start.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

use crate::cri_proto as api;
use crate::cri_proto::security_profile::ProfileType;

/// The kubelet's admission reason (`AppArmorNotAdmittedReason`).
pub const NOT_ADMITTED_REASON: &str = "AppArmor";
/// The deprecated per-container annotation's key prefix.
pub const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
/// The deprecated annotation's values (`runtime/default`, `unconfined`, `localhost/<name>`).
pub const RUNTIME_DEFAULT: &str = "runtime/default";
pub const UNCONFINED: &str = "unconfined";
pub const LOCALHOST_PREFIX: &str = "localhost/";
/// The API's profile types (`securityContext.appArmorProfile.type`).
pub const PROFILE_TYPES: &[&str] = &["Localhost", "RuntimeDefault", "Unconfined"];

/// A profile a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Profile {
    RuntimeDefault,
    Unconfined,
    Localhost(String),
}

impl Profile {
    /// The API field as a profile; `None` for a type the API does not know (the API server
    /// refuses it; static pods get that error from `source`).
    pub fn from_field(p: &AppArmorProfile) -> Option<Profile> {
        match p.type_.as_str() {
            "RuntimeDefault" => Some(Profile::RuntimeDefault),
            "Unconfined" => Some(Profile::Unconfined),
            "Localhost" => Some(Profile::Localhost(p.localhost_profile.clone().unwrap_or_default())),
            _ => None,
        }
    }

    /// The deprecated annotation's value as a profile; `None` for a value it cannot hold
    /// (`getProfileFromPodAnnotations`: such an annotation is ignored by the kubelet, refused by
    /// the API server's validation).
    pub fn from_annotation(value: &str) -> Option<Profile> {
        match value {
            RUNTIME_DEFAULT => Some(Profile::RuntimeDefault),
            UNCONFINED => Some(Profile::Unconfined),
            v => v.strip_prefix(LOCALHOST_PREFIX).map(|name| Profile::Localhost(name.to_string())),
        }
    }
}

/// The profile container `c` of `pod` asks for, in the kubelet's order: the container's field,
/// its annotation (static pods may carry only that), the pod's field.
pub fn profile_of(pod: &Pod, c: &Container) -> Option<Profile> {
    if let Some(p) = c.security_context.as_ref().and_then(|sc| sc.app_armor_profile.as_ref()) {
        return Profile::from_field(p);
    }
    let key = format!("{ANNOTATION_PREFIX}{}", c.name);
    if let Some(p) =
        pod.metadata.annotations.as_ref().and_then(|a| a.get(&key)).and_then(|v| Profile::from_annotation(v))
    {
        return Some(p);
    }
    let spec = pod.spec.as_ref()?;
    spec.security_context.as_ref().and_then(|sc| sc.app_armor_profile.as_ref()).and_then(Profile::from_field)
}

/// What the runtime gets for `profile` (LinuxContainerSecurityContext `apparmor` and the
/// deprecated `apparmor_profile`), as the kubelet fills both: nothing when nothing is asked.
pub fn cri_profile(profile: Option<&Profile>) -> (Option<api::SecurityProfile>, String) {
    let of = |t: ProfileType, name: &str| api::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: name.to_string(),
    };
    match profile {
        None => (None, String::new()),
        Some(Profile::RuntimeDefault) => (Some(of(ProfileType::RuntimeDefault, "")), RUNTIME_DEFAULT.into()),
        Some(Profile::Unconfined) => (Some(of(ProfileType::Unconfined, "")), UNCONFINED.into()),
        Some(Profile::Localhost(name)) => {
            (Some(of(ProfileType::Localhost, name)), format!("{LOCALHOST_PREFIX}{name}"))
        }
    }
}

/// Whether the host can enforce AppArmor (the kubelet's `validateHost`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Host {
    #[default]
    Enabled,
    /// Why it cannot, in the kubelet's words.
    Disabled(&'static str),
}

/// This host's AppArmor support, read once (upstream reads it once at start: enabling AppArmor
/// needs a reboot, and the kubelet a restart). As runc's `apparmor.IsEnabled`: the AppArmor
/// securityfs directory exists and the module's `enabled` parameter reads `Y`. Two sysfs reads,
/// no disk.
pub fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let fs = std::path::Path::new("/sys/kernel/security/apparmor").exists();
        let enabled = std::fs::read("/sys/module/apparmor/parameters/enabled").ok();
        detect(fs, enabled.as_deref())
    })
}

fn detect(securityfs: bool, enabled: Option<&[u8]>) -> Host {
    match enabled {
        Some([b'Y', _, ..]) if securityfs => Host::Enabled,
        _ => Host::Disabled("AppArmor is not enabled on the host"),
    }
}

/// The kubelet's AppArmor admission of `pod` on `host`: `None` = admitted, else the message
/// (`Cannot enforce AppArmor: ...`) the pod is refused with, under [`NOT_ADMITTED_REASON`].
pub fn admit(pod: &Pod, host: &Host) -> Option<String> {
    asking(pod)?;
    if let Host::Disabled(why) = host {
        return Some(format!("Cannot enforce AppArmor: {why}"));
    }
    let spec = pod.spec.as_ref()?;
    let ephemeral: Vec<Container> =
        spec.ephemeral_containers.iter().flatten().map(ephemeral_as_container).collect();
    let all = spec.init_containers.iter().flatten().chain(&spec.containers).chain(&ephemeral);
    for c in all {
        if let Some(Profile::Localhost(name)) = profile_of(pod, c)
            && name.trim().is_empty()
        {
            return Some(format!("Cannot enforce AppArmor: invalid empty AppArmor profile name: {name:?}"));
        }
    }
    None
}

// An ephemeral container as `profile_of` reads it: its name (for the annotation) and its
// security context are all that matter.
fn ephemeral_as_container(e: &k8s_openapi::api::core::v1::EphemeralContainer) -> Container {
    Container { name: e.name.clone(), security_context: e.security_context.clone(), ..Default::default() }
}

/// Where `pod` asks for AppArmor, if anywhere (`isRequired`): the first field whose type is not
/// Unconfined, or else the first annotation whose value is not `unconfined`.
pub fn asking(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let confining = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    if confining(spec.security_context.as_ref().and_then(|sc| sc.app_armor_profile.as_ref())) {
        return Some("spec.securityContext.appArmorProfile".into());
    }
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| ("initContainers", i, c.security_context.as_ref()));
    let apps =
        spec.containers.iter().enumerate().map(|(i, c)| ("containers", i, c.security_context.as_ref()));
    let eph = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| ("ephemeralContainers", i, c.security_context.as_ref()));
    for (list, i, sc) in init.chain(apps).chain(eph) {
        if confining(sc.and_then(|sc| sc.app_armor_profile.as_ref())) {
            return Some(format!("spec.{list}[{i}].securityContext.appArmorProfile"));
        }
    }
    let mut keys: Vec<&String> = pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, v)| k.starts_with(ANNOTATION_PREFIX) && *v != UNCONFINED)
        .map(|(k, _)| k)
        .collect();
    keys.sort();
    keys.first().map(|k| format!("metadata.annotations[{k}]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).expect("test pod")
    }

    #[test]
    fn the_profile_a_container_gets() {
        let cases = [
            ("nothing asked", "metadata: {name: p}\nspec: {containers: [{name: c}]}", None),
            (
                "pod field",
                "metadata: {name: p}\nspec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: c}]}",
                Some(Profile::RuntimeDefault),
            ),
            (
                "container field over the pod's",
                "metadata: {name: p}\nspec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: c, securityContext: {appArmorProfile: {type: Unconfined}}}]}",
                Some(Profile::Unconfined),
            ),
            (
                "annotation over the pod's field",
                "metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/c: localhost/k8s-x}}\nspec: {securityContext: {appArmorProfile: {type: Unconfined}}, containers: [{name: c}]}",
                Some(Profile::Localhost("k8s-x".into())),
            ),
            (
                "container field over the annotation",
                "metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/c: unconfined}}\nspec: {containers: [{name: c, securityContext: {appArmorProfile: {type: Localhost, localhostProfile: y}}}]}",
                Some(Profile::Localhost("y".into())),
            ),
            (
                "another container's annotation",
                "metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/d: runtime/default}}\nspec: {containers: [{name: c}]}",
                None,
            ),
            (
                "a bad annotation value is ignored",
                "metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/c: bogus}}\nspec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: c}]}",
                Some(Profile::RuntimeDefault),
            ),
        ];
        for (name, yaml, want) in cases {
            let p = pod(yaml);
            let c = &p.spec.as_ref().expect("spec").containers[0];
            assert_eq!(profile_of(&p, c), want, "{name}");
        }
    }

    #[test]
    fn what_the_runtime_gets() {
        let t =
            |p: &Option<api::SecurityProfile>| p.as_ref().map(|p| (p.profile_type, p.localhost_ref.clone()));
        let cases = [
            (None, None, ""),
            (
                Some(Profile::RuntimeDefault),
                Some((ProfileType::RuntimeDefault as i32, String::new())),
                "runtime/default",
            ),
            (Some(Profile::Unconfined), Some((ProfileType::Unconfined as i32, String::new())), "unconfined"),
            (
                Some(Profile::Localhost("k".into())),
                Some((ProfileType::Localhost as i32, "k".into())),
                "localhost/k",
            ),
        ];
        for (profile, want, deprecated) in cases {
            let (sp, old) = cri_profile(profile.as_ref());
            assert_eq!((t(&sp), old.as_str()), (want, deprecated), "{profile:?}");
        }
    }

    #[test]
    fn host_detection() {
        let off = Host::Disabled("AppArmor is not enabled on the host");
        let cases = [
            (true, Some(&b"Y\n"[..]), Host::Enabled),
            (true, Some(&b"N\n"[..]), off.clone()),
            (true, Some(&b"Y"[..]), off.clone()),
            (false, Some(&b"Y\n"[..]), off.clone()),
            (true, None, off.clone()),
        ];
        for (fs, enabled, want) in cases {
            assert_eq!(detect(fs, enabled), want, "{fs} {enabled:?}");
        }
    }

    #[test]
    fn admission() {
        let off = Host::Disabled("AppArmor is not enabled on the host");
        let no = Some("Cannot enforce AppArmor: AppArmor is not enabled on the host");
        let cases = [
            ("nothing asked, no AppArmor", "spec: {containers: [{name: c}]}", off.clone(), None),
            (
                "Unconfined needs no AppArmor",
                "spec: {securityContext: {appArmorProfile: {type: Unconfined}}, containers: [{name: c, securityContext: {appArmorProfile: {type: Unconfined}}}]}",
                off.clone(),
                None,
            ),
            (
                "an unconfined annotation needs none",
                "metadata: {annotations: {container.apparmor.security.beta.kubernetes.io/c: unconfined}}\nspec: {containers: [{name: c}]}",
                off.clone(),
                None,
            ),
            (
                "pod RuntimeDefault without AppArmor",
                "spec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: c}]}",
                off.clone(),
                no,
            ),
            (
                "init container Localhost without AppArmor",
                "spec: {initContainers: [{name: i, securityContext: {appArmorProfile: {type: Localhost, localhostProfile: x}}}], containers: [{name: c}]}",
                off.clone(),
                no,
            ),
            (
                "annotation without AppArmor",
                "metadata: {annotations: {container.apparmor.security.beta.kubernetes.io/c: runtime/default}}\nspec: {containers: [{name: c}]}",
                off.clone(),
                no,
            ),
            (
                "RuntimeDefault with AppArmor",
                "spec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: c}]}",
                Host::Enabled,
                None,
            ),
            (
                "an empty Localhost name with AppArmor",
                "metadata: {annotations: {container.apparmor.security.beta.kubernetes.io/c: localhost/}}\nspec: {containers: [{name: c}]}",
                Host::Enabled,
                Some("Cannot enforce AppArmor: invalid empty AppArmor profile name: \"\""),
            ),
        ];
        for (name, yaml, host, want) in cases {
            assert_eq!(admit(&pod(yaml), &host).as_deref(), want, "{name}");
        }
    }
}
