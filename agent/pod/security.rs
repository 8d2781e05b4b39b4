//! The parts of a container's security context crilet computes as the kubelet does
//! (`determineEffectiveSecurityContext`, `pkg/securitycontext`): the effective values of fields
//! set at both pod and container level, the supplemental groups, the `/proc` paths the runtime
//! masks, capability names the runtime can apply, and the `runAsNonRoot` check. Pure; the
//! static-pod validation and the API pods' admission share [`unsupported`].

use k8s_openapi::api::core::v1::{Container, PodSecurityContext, PodSpec, SELinuxOptions, SecurityContext};

use crate::cri::api;

/// The paths the kubelet asks the runtime to mask for `procMount: Default` (and unset), as
/// `pkg/securitycontext`'s list (kept in step with moby's). The runtime skips them for a
/// privileged container.
pub const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths the kubelet asks the runtime to mount read-only for `procMount: Default`.
pub const READONLY_PATHS: &[&str] =
    &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// Linux capability names as containerd takes them: it upper-cases a name and prefixes `CAP_`,
/// and the OCI runtime ignores a capability it does not know (so a misspelt `drop` would drop
/// nothing without a word).
const CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// Why the runtime could not apply capability `name`, or `None`. The kubelet passes names as
/// written; `ALL` is recognised in any case by containerd.
pub fn capability_problem(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    if upper == "ALL" || CAPABILITIES.contains(&upper.as_str()) {
        return None;
    }
    Some(match upper.strip_prefix("CAP_") {
        Some(bare) if CAPABILITIES.contains(&bare) => {
            format!("{name:?} has the CAP_ prefix, which the runtime adds itself; write {bare:?}")
        }
        _ => format!("{name:?} is not a Linux capability the runtime knows"),
    })
}

/// The security-context values crilet cannot honour, each as `(field path, why)`: a `/proc`
/// left unmasked (upstream allows it only in a user namespace; crilet always masks) and
/// capability names the runtime would ignore. Refused for static and API pods alike.
pub fn unsupported(spec: &PodSpec) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (path, c) in crate::podspec::containers_at(spec) {
        let Some(sc) = c.security_context.as_ref() else { continue };
        let at = format!("{path}.securityContext");
        if sc.proc_mount.as_deref() == Some("Unmasked") {
            found.push((
                format!("{at}.procMount"),
                "Unmasked is not supported by crilet (upstream allows it only with hostUsers: false; crilet always masks /proc)".into(),
            ));
        }
        let caps = sc.capabilities.as_ref();
        for (list, names) in
            [("add", caps.and_then(|c| c.add.as_ref())), ("drop", caps.and_then(|c| c.drop.as_ref()))]
        {
            for (j, name) in names.into_iter().flatten().enumerate() {
                if let Some(why) = capability_problem(name) {
                    found.push((format!("{at}.capabilities.{list}[{j}]"), why));
                }
            }
        }
    }
    found
}

/// The supplemental groups the kubelet gives every container of the pod: `fsGroup` first, then
/// `supplementalGroups`, in that order and with repeats kept.
pub fn supplemental_groups(psc: Option<&PodSecurityContext>) -> Vec<i64> {
    let Some(psc) = psc else { return Vec::new() };
    psc.fs_group.into_iter().chain(psc.supplemental_groups.iter().flatten().copied()).collect()
}

/// `supplementalGroupsPolicy` as CRI's enum (KEP-3619, on by default since 1.33, GA in 1.35):
/// unset is Merge (the image's `/etc/group` memberships are added), Strict uses only the listed
/// groups. A value the API does not know is an error, not a silent Merge.
pub fn groups_policy(psc: Option<&PodSecurityContext>) -> Result<api::SupplementalGroupsPolicy, String> {
    match psc.and_then(|s| s.supplemental_groups_policy.as_deref()) {
        None | Some("Merge") => Ok(api::SupplementalGroupsPolicy::Merge),
        Some("Strict") => Ok(api::SupplementalGroupsPolicy::Strict),
        Some(other) => Err(format!("unsupported supplementalGroupsPolicy: {other}")),
    }
}

/// The masked and read-only paths for a container (`procMount` unset or Default: the kubelet's
/// lists; Unmasked is refused before a container is made).
pub fn proc_paths(csc: Option<&SecurityContext>) -> (Vec<String>, Vec<String>) {
    if csc.and_then(|s| s.proc_mount.as_deref()) == Some("Unmasked") {
        return (Vec::new(), Vec::new());
    }
    let owned = |l: &[&str]| l.iter().map(|p| p.to_string()).collect();
    (owned(MASKED_PATHS), owned(READONLY_PATHS))
}

/// The SELinux label the runtime is asked for: the container's options replace the pod's whole
/// (upstream copies the struct, it does not merge fields). The runtime applies it only where
/// SELinux is enabled, as for the kubelet.
pub fn selinux(
    psc: Option<&PodSecurityContext>,
    csc: Option<&SecurityContext>,
) -> Option<api::SeLinuxOption> {
    let o: &SELinuxOptions =
        csc.and_then(|s| s.se_linux_options.as_ref()).or(psc.and_then(|s| s.se_linux_options.as_ref()))?;
    Some(api::SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    })
}

/// The pod as the kubelet's `format.Pod` names it in messages: `name_namespace(uid)`.
fn pod_name(name: &str, namespace: &str, uid: &str) -> String {
    format!("{name}_{namespace}({uid})")
}

/// The kubelet's `verifyRunAsNonRoot`: `Err` with its message when the effective
/// `runAsNonRoot` is true and the container would (or might) run as root. `image_user` is the
/// image's numeric user, or its user name; an image with neither runs as root.
pub fn verify_run_as_non_root(
    (name, namespace, uid): (&str, &str, &str),
    psc: Option<&PodSecurityContext>,
    c: &Container,
    image_user: (Option<i64>, &str),
) -> Result<(), String> {
    let csc = c.security_context.as_ref();
    let non_root = csc.and_then(|s| s.run_as_non_root).or(psc.and_then(|s| s.run_as_non_root)) == Some(true);
    if !non_root {
        return Ok(());
    }
    let pod = pod_name(name, namespace, uid);
    let container = &c.name;
    if let Some(user) = csc.and_then(|s| s.run_as_user).or(psc.and_then(|s| s.run_as_user)) {
        if user == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})"
            ));
        }
        return Ok(());
    }
    match image_user {
        (None, user) if !user.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod:?}, container: {container})"
        )),
        (Some(0), _) => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
        )),
        (Some(u), _) if !(0..=i64::from(i32::MAX)).contains(&u) => Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({u}). (Must be 1-({})): must be between 0 and {}, inclusive (pod: {pod:?}, container: {container})",
            i32::MAX,
            i32::MAX
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).expect("test pod")
    }

    #[test]
    fn capability_names() {
        for (name, ok) in [
            ("NET_BIND_SERVICE", true),
            ("net_bind_service", true),
            ("ALL", true),
            ("all", true),
            ("CAP_NET_ADMIN", false),
            ("NET_BIND", false),
            ("", false),
        ] {
            assert_eq!(capability_problem(name).is_none(), ok, "{name}");
        }
        assert!(capability_problem("CAP_SYS_ADMIN").unwrap().contains("write \"SYS_ADMIN\""));
    }

    #[test]
    fn unsupported_fields_named() {
        let cases: [(&str, &[&str]); 4] = [
            ("spec: {containers: [{name: a, securityContext: {procMount: Default}}]}", &[]),
            (
                "spec: {initContainers: [{name: i, securityContext: {procMount: Unmasked}}], containers: [{name: a}]}",
                &["spec.initContainers[0].securityContext.procMount"],
            ),
            (
                "spec: {containers: [{name: a, securityContext: {capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}}}]}",
                &[],
            ),
            (
                "spec: {containers: [{name: a}, {name: b, securityContext: {capabilities: {drop: [ALL, CAP_SYS_ADMIN], add: [NETADMIN]}}}]}",
                &[
                    "spec.containers[1].securityContext.capabilities.add[0]",
                    "spec.containers[1].securityContext.capabilities.drop[1]",
                ],
            ),
        ];
        for (yaml, want) in cases {
            let got: Vec<String> =
                unsupported(pod(yaml).spec.as_ref().unwrap()).into_iter().map(|(p, _)| p).collect();
            assert_eq!(got, want, "{yaml}");
        }
    }

    #[test]
    fn groups_and_policy() {
        let psc = |yaml: &str| pod(yaml).spec.unwrap().security_context;
        let cases: [(&str, &[i64], Result<api::SupplementalGroupsPolicy, ()>); 4] = [
            ("spec: {containers: []}", &[], Ok(api::SupplementalGroupsPolicy::Merge)),
            (
                "spec: {securityContext: {fsGroup: 4, supplementalGroups: [5, 4]}, containers: []}",
                &[4, 5, 4],
                Ok(api::SupplementalGroupsPolicy::Merge),
            ),
            (
                "spec: {securityContext: {supplementalGroups: [5], supplementalGroupsPolicy: Strict}, containers: []}",
                &[5],
                Ok(api::SupplementalGroupsPolicy::Strict),
            ),
            ("spec: {securityContext: {supplementalGroupsPolicy: Loose}, containers: []}", &[], Err(())),
        ];
        for (yaml, groups, policy) in cases {
            let sc = psc(yaml);
            assert_eq!(supplemental_groups(sc.as_ref()), groups, "{yaml}");
            assert_eq!(groups_policy(sc.as_ref()).map_err(|_| ()), policy, "{yaml}");
        }
    }

    #[test]
    fn selinux_container_replaces_pod() {
        let p = pod(
            "spec: {securityContext: {seLinuxOptions: {level: 's0:c1', type: a_t}}, containers: [{name: a, securityContext: {seLinuxOptions: {type: b_t}}}, {name: b}]}",
        );
        let s = p.spec.unwrap();
        let psc = s.security_context.as_ref();
        let a = selinux(psc, s.containers[0].security_context.as_ref()).unwrap();
        assert_eq!((a.r#type.as_str(), a.level.as_str()), ("b_t", ""));
        let b = selinux(psc, None).unwrap();
        assert_eq!((b.r#type.as_str(), b.level.as_str()), ("a_t", "s0:c1"));
    }

    #[test]
    fn run_as_non_root_as_the_kubelet() {
        let id = ("web", "ns", "u-1");
        let at = "(pod: \"web_ns(u-1)\", container: c)";
        // (container securityContext, the image's (uid, user name), the refusal)
        type Case<'a> = (&'a str, (Option<i64>, &'a str), Option<String>);
        let cases: [Case; 8] = [
            ("{}", (Some(0), ""), None),
            ("{runAsNonRoot: false}", (Some(0), ""), None),
            (
                "{runAsNonRoot: true}",
                (Some(0), ""),
                Some(format!("container has runAsNonRoot and image will run as root {at}")),
            ),
            ("{runAsNonRoot: true}", (Some(1000), ""), None),
            (
                "{runAsNonRoot: true}",
                (None, "nobody"),
                Some(format!(
                    "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root {at}"
                )),
            ),
            ("{runAsNonRoot: true, runAsUser: 1000}", (Some(0), ""), None),
            (
                "{runAsNonRoot: true, runAsUser: 0}",
                (Some(5), ""),
                Some(format!("container's runAsUser breaks non-root policy {at}")),
            ),
            (
                "{runAsNonRoot: true}",
                (Some(1 << 40), ""),
                Some(format!(
                    "container has runAsNonRoot and image has an invalid user id (1099511627776). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive {at}"
                )),
            ),
        ];
        for (csc, image, want) in cases {
            let c: Container =
                serde_yaml_ng::from_str(&format!("{{name: c, securityContext: {csc}}}")).unwrap();
            assert_eq!(verify_run_as_non_root(id, None, &c, image).err(), want, "{csc}");
        }
        // The pod's value counts when the container sets none.
        let p = pod("spec: {securityContext: {runAsNonRoot: true}, containers: [{name: c}]}");
        let s = p.spec.unwrap();
        assert!(
            verify_run_as_non_root(id, s.security_context.as_ref(), &s.containers[0], (Some(0), "")).is_err()
        );
    }
}
