//! The seccomp profile a container and its sandbox run with, chosen as the kubelet's
//! `getSeccompProfile` chooses it: the container's `seccompProfile`, else the pod's, else
//! RuntimeDefault under `--seccomp-default` and Unconfined without it. The profile is always sent
//! explicitly, as upstream does. Localhost profiles live under `<root-dir>/seccomp/` (the
//! kubelet's layout). Pure; whether the file can be read is checked by `pod::start`, which is
//! where the kubelet's runtime reports it (`CreateContainerError`).
//!
//! The deprecated annotations (`seccomp.security.alpha.kubernetes.io/pod`,
//! `container.seccomp.security.alpha.kubernetes.io/<name>`) are not read: the kubelet stopped
//! honouring them in 1.27, and static pods get the API server's warning (`source::validate`).
//! A privileged container gets what is chosen here too, as upstream; the runtime applies no
//! seccomp filter to a privileged container, whatever the profile.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, PodSecurityContext, SeccompProfile};

use crate::cri::api;
use crate::cri::api::security_profile::ProfileType;

/// The API's profile types (`spec.securityContext.seccompProfile.type`).
pub const PROFILE_TYPES: &[&str] = &["Localhost", "RuntimeDefault", "Unconfined"];

/// The directory Localhost profiles are named under: `<root-dir>/seccomp`.
pub fn profile_root(root_dir: &Path) -> PathBuf {
    root_dir.join("seccomp")
}

/// The API server's rules for a `localhostProfile` (`validateLocalDescendingPath`): each rule it
/// breaks, as the API's message. A profile must stay under the profile root.
pub fn localhost_problems(name: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if name.starts_with('/') {
        out.push("must be a relative path");
    }
    if name.split('/').any(|part| part == "..") {
        out.push("must not contain '..'");
    }
    out
}

/// The profile of `c` (the container's field over the pod's, then the node's default). `Err`
/// says why the field cannot be honoured; the API server refuses all of these, so it is a
/// backstop for a pod that reached the node without that validation.
pub fn container_profile(
    pod: Option<&PodSecurityContext>,
    c: &Container,
    root: &Path,
    seccomp_default: bool,
) -> Result<api::SecurityProfile, String> {
    let own = c.security_context.as_ref().and_then(|sc| sc.seccomp_profile.as_ref());
    choose(own.or(pod.and_then(|sc| sc.seccomp_profile.as_ref())), root, seccomp_default)
}

/// The sandbox's profile: the pod's field, else the node's default. A pod-level profile that
/// cannot be honoured gives the sandbox RuntimeDefault (never less than asked); every container
/// that inherits it fails with the reason ([`container_profile`]), so nothing runs unconfined.
pub fn sandbox_profile(
    pod: Option<&PodSecurityContext>,
    root: &Path,
    seccomp_default: bool,
) -> api::SecurityProfile {
    choose(pod.and_then(|sc| sc.seccomp_profile.as_ref()), root, seccomp_default)
        .unwrap_or_else(|_| of(ProfileType::RuntimeDefault))
}

/// The Localhost file `p` names, if it is one (what `pod::start` checks before the create).
pub fn localhost_file(p: &api::SecurityProfile) -> Option<&Path> {
    (p.profile_type == ProfileType::Localhost as i32).then(|| Path::new(&p.localhost_ref))
}

fn choose(
    field: Option<&SeccompProfile>,
    root: &Path,
    seccomp_default: bool,
) -> Result<api::SecurityProfile, String> {
    let Some(p) = field else {
        return Ok(of(if seccomp_default { ProfileType::RuntimeDefault } else { ProfileType::Unconfined }));
    };
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(of(ProfileType::RuntimeDefault)),
        "Unconfined" => Ok(of(ProfileType::Unconfined)),
        "Localhost" => {
            let name = p.localhost_profile.as_deref().unwrap_or_default();
            if name.is_empty() {
                return Err(
                    "seccompProfile: localhostProfile must be set if seccompProfile type is Localhost".into(),
                );
            }
            if let Some(why) = localhost_problems(name).first() {
                return Err(format!("seccompProfile.localhostProfile {name:?}: {why}"));
            }
            Ok(api::SecurityProfile {
                profile_type: ProfileType::Localhost as i32,
                localhost_ref: root.join(name).display().to_string(),
            })
        }
        // Upstream runs an unknown type unconfined; a profile crilet cannot honour is refused.
        other => Err(format!(
            "seccompProfile type {other:?} is not supported: supported values are {}",
            PROFILE_TYPES.join(", ")
        )),
    }
}

fn of(t: ProfileType) -> api::SecurityProfile {
    api::SecurityProfile { profile_type: t as i32, localhost_ref: String::new() }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::SecurityContext;

    use super::*;

    fn profile(t: &str, name: Option<&str>) -> Option<SeccompProfile> {
        Some(SeccompProfile { type_: t.into(), localhost_profile: name.map(Into::into) })
    }

    fn container(p: Option<SeccompProfile>, privileged: bool) -> Container {
        Container {
            name: "app".into(),
            security_context: Some(SecurityContext {
                seccomp_profile: p,
                privileged: privileged.then_some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn shown(r: Result<api::SecurityProfile, String>) -> String {
        match r {
            Ok(p) if p.profile_type == ProfileType::Localhost as i32 => {
                format!("Localhost {}", p.localhost_ref)
            }
            Ok(p) => {
                ProfileType::try_from(p.profile_type).map_or("?".into(), |t| t.as_str_name().to_string())
            }
            Err(e) => format!("error: {e}"),
        }
    }

    /// The kubelet's choice: container over pod over `--seccomp-default`, every type mapped,
    /// Localhost under `<root-dir>/seccomp`, bad names refused.
    #[test]
    fn profile_choice() {
        let root = Path::new("/var/lib/crilet/seccomp");
        let cases = [
            ("nothing set, no default: unconfined", None, None, false, false, "Unconfined"),
            ("nothing set, --seccomp-default", None, None, true, false, "RuntimeDefault"),
            ("pod RuntimeDefault", profile("RuntimeDefault", None), None, false, false, "RuntimeDefault"),
            (
                "pod Unconfined wins over the default",
                profile("Unconfined", None),
                None,
                true,
                false,
                "Unconfined",
            ),
            (
                "container over pod",
                profile("RuntimeDefault", None),
                profile("Unconfined", None),
                false,
                false,
                "Unconfined",
            ),
            (
                "container Localhost over pod",
                profile("Unconfined", None),
                profile("Localhost", Some("profiles/audit.json")),
                false,
                false,
                "Localhost /var/lib/crilet/seccomp/profiles/audit.json",
            ),
            (
                "privileged: passed as chosen (the runtime applies none)",
                None,
                profile("RuntimeDefault", None),
                false,
                true,
                "RuntimeDefault",
            ),
            ("privileged, --seccomp-default", None, None, true, true, "RuntimeDefault"),
            (
                "Localhost without a name",
                profile("Localhost", None),
                None,
                false,
                false,
                "error: seccompProfile: localhostProfile must be set",
            ),
            (
                "Localhost with ..",
                None,
                profile("Localhost", Some("../../etc/x.json")),
                false,
                false,
                "error: seccompProfile.localhostProfile \"../../etc/x.json\": must not contain '..'",
            ),
            (
                "Localhost absolute",
                None,
                profile("Localhost", Some("/etc/x.json")),
                false,
                false,
                "error: seccompProfile.localhostProfile \"/etc/x.json\": must be a relative path",
            ),
            (
                "unknown type",
                None,
                profile("Default", None),
                true,
                false,
                "error: seccompProfile type \"Default\"",
            ),
        ];
        for (name, pod, own, default, privileged, want) in cases {
            let psc = PodSecurityContext { seccomp_profile: pod, ..Default::default() };
            let got = shown(container_profile(Some(&psc), &container(own, privileged), root, default));
            assert!(got.starts_with(want), "{name}: got {got:?}, want {want:?}");
        }
    }

    /// The sandbox follows the pod's field and the default; a pod-level profile that cannot be
    /// honoured confines the sandbox rather than leaving it unconfined.
    #[test]
    fn sandbox_profile_cases() {
        let root = Path::new("/r/seccomp");
        let cases = [
            (None, false, "Unconfined"),
            (None, true, "RuntimeDefault"),
            (profile("Unconfined", None), true, "Unconfined"),
            (profile("Localhost", Some("a/b.json")), false, "Localhost /r/seccomp/a/b.json"),
            (profile("Localhost", Some("../b.json")), false, "RuntimeDefault"),
            (profile("Bogus", None), false, "RuntimeDefault"),
        ];
        for (pod, default, want) in cases {
            let psc = PodSecurityContext { seccomp_profile: pod.clone(), ..Default::default() };
            assert_eq!(
                shown(Ok(sandbox_profile(Some(&psc), root, default))),
                want,
                "{pod:?} default {default}"
            );
        }
        assert_eq!(shown(Ok(sandbox_profile(None, root, true))), "RuntimeDefault");
    }

    #[test]
    fn localhost_names() {
        let cases: [(&str, &[&str]); 5] = [
            ("audit.json", &[]),
            ("profiles/a..b.json", &[]),
            ("../x", &["must not contain '..'"]),
            ("a/../../x", &["must not contain '..'"]),
            ("/../x", &["must be a relative path", "must not contain '..'"]),
        ];
        for (name, want) in cases {
            assert_eq!(localhost_problems(name), want, "{name}");
        }
        let p = api::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: "/r/a".into(),
        };
        assert_eq!(localhost_file(&p), Some(Path::new("/r/a")));
        assert_eq!(localhost_file(&of(ProfileType::RuntimeDefault)), None);
    }
}
