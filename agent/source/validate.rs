//! Pod-level validation, as the API server's `ValidatePodCreate` does it for the fields crilet
//! supports: metadata, pod-wide spec fields and volumes. Container checks live in
//! `validate_container`. Runs on the defaulted pod; every finding names its field path.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig, PodSecurityContext, PodSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Findings;
use super::limits::quoted;
use super::names::{dns1123_label, dns1123_subdomain, label_value, qualified_name, sysctl_name};
use super::validate_container;
use crate::quantity::Quantity;

/// Most bytes all annotations of a pod may hold (`TotalAnnotationSizeLimitB`).
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// Validates a defaulted pod; errors and warnings go into `f`.
pub(super) fn validate_pod(pod: &Pod, f: &mut Findings) {
    metadata(&pod.metadata, f);
    let Some(spec) = pod.spec.as_ref() else {
        f.error("spec", "required");
        return;
    };
    spec_fields(spec, f);
    let volumes = volumes(spec, f);
    validate_container::containers(spec, &volumes, f);
    super::validate_seccomp::validate(pod, f);
    // The kubelet admits static pods through its OS checks too; a refusal names its reason.
    if let Some((reason, message)) = crate::podspec::os_mismatch(pod) {
        let field = if reason == "PodOSNotSupported" { "spec.os.name" } else { "metadata.labels" };
        f.error(field, format!("{reason}: {message}"));
    }
    // What crilet cannot enforce (procMount Unmasked, capability names the runtime ignores):
    // the same refusals as the API pods' admission.
    for (field, why) in crate::pod::security::unsupported(spec) {
        f.error(field, why);
    }
    super::validate_apparmor::validate(pod, f);
}

fn metadata(meta: &ObjectMeta, f: &mut Findings) {
    match meta.name.as_deref() {
        None | Some("") => f.error("metadata.name", "required"),
        Some(name) => check(f, "metadata.name", dns1123_subdomain(name)),
    }
    if let Some(ns) = meta.namespace.as_deref() {
        check(f, "metadata.namespace", dns1123_label(ns));
    }
    for (key, value) in meta.labels.iter().flatten() {
        check(f, "metadata.labels", qualified_name(key));
        check(f, "metadata.labels", label_value(value));
    }
    let mut size = 0;
    for (key, value) in meta.annotations.iter().flatten() {
        check(f, "metadata.annotations", qualified_name(&key.to_lowercase()));
        size += key.len() + value.len();
    }
    if size > ANNOTATIONS_MAX_BYTES {
        f.error(
            "metadata.annotations",
            format!("may not hold more than {ANNOTATIONS_MAX_BYTES} bytes in total"),
        );
    }
}

fn spec_fields(spec: &PodSpec, f: &mut Findings) {
    one_of(f, "spec.restartPolicy", spec.restart_policy.as_deref(), &["Always", "OnFailure", "Never"]);
    let dns_policy = spec.dns_policy.as_deref();
    one_of(f, "spec.dnsPolicy", dns_policy, &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"]);
    match (&spec.dns_config, dns_policy) {
        (Some(config), _) => dns_config(config, f),
        (None, Some("None")) => f.error("spec.dnsConfig", "required when dnsPolicy is None"),
        (None, _) => {}
    }
    if spec.termination_grace_period_seconds.is_some_and(|g| g < 0) {
        f.error("spec.terminationGracePeriodSeconds", "must be greater than or equal to 0");
    }
    if spec.active_deadline_seconds.is_some_and(|d| !(1..=i64::from(i32::MAX)).contains(&d)) {
        f.error("spec.activeDeadlineSeconds", "must be between 1 and 2147483647, inclusive");
    }
    for (field, value) in [("spec.hostname", &spec.hostname), ("spec.subdomain", &spec.subdomain)] {
        if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
            check(f, field, dns1123_label(value));
        }
    }
    if spec.share_process_namespace == Some(true) && spec.host_pid == Some(true) {
        f.error("spec.shareProcessNamespace", "may not be true when hostPID is true");
    }
    if spec.host_users == Some(false) {
        // The API server's rule: a user namespace does not go with the host's other namespaces.
        for (field, host) in [
            ("spec.hostNetwork", spec.host_network),
            ("spec.hostPID", spec.host_pid),
            ("spec.hostIPC", spec.host_ipc),
        ] {
            if host == Some(true) {
                f.error(field, "may not be true when hostUsers is false");
            }
        }
    }
    if let Some(sc) = spec.security_context.as_ref() {
        pod_security_context(sc, f);
    }
    for (i, alias) in spec.host_aliases.iter().flatten().enumerate() {
        let path = format!("spec.hostAliases[{i}]");
        if alias.ip.parse::<IpAddr>().is_err() {
            f.error(format!("{path}.ip"), format!("{} must be a valid IP address", quoted(&alias.ip)));
        }
        for (j, name) in alias.hostnames.iter().flatten().enumerate() {
            check(f, &format!("{path}.hostnames[{j}]"), dns1123_subdomain(name));
        }
    }
    for (i, gate) in spec.readiness_gates.iter().flatten().enumerate() {
        check(f, &format!("spec.readinessGates[{i}].conditionType"), qualified_name(&gate.condition_type));
    }
    if let Some(class) = spec.runtime_class_name.as_deref() {
        check(f, "spec.runtimeClassName", dns1123_subdomain(class));
    }
    match spec.os.as_ref().map(|os| os.name.as_str()) {
        None | Some("linux") => {}
        Some("windows") => {}
        Some(other) => one_of(f, "spec.os.name", Some(other), &["linux", "windows"]),
    }
}

fn dns_config(config: &PodDNSConfig, f: &mut Findings) {
    let nameservers = config.nameservers.as_deref().unwrap_or_default();
    if nameservers.len() > 3 {
        f.error("spec.dnsConfig.nameservers", "must not have more than 3 nameservers");
    }
    for (i, ns) in nameservers.iter().enumerate() {
        if ns.parse::<IpAddr>().is_err() {
            f.error(
                format!("spec.dnsConfig.nameservers[{i}]"),
                format!("{} must be a valid IP address", quoted(ns)),
            );
        }
    }
    let searches = config.searches.as_deref().unwrap_or_default();
    if searches.len() > 32 {
        f.error("spec.dnsConfig.searches", "must not have more than 32 search paths");
    }
    if searches.iter().map(|s| s.len() + 1).sum::<usize>() > 2048 {
        f.error("spec.dnsConfig.searches", "must not have more than 2048 characters in total");
    }
    for (i, search) in searches.iter().enumerate() {
        let domain = search.strip_suffix('.').unwrap_or(search);
        check(f, &format!("spec.dnsConfig.searches[{i}]"), dns1123_subdomain(domain));
    }
    for (i, option) in config.options.iter().flatten().enumerate() {
        if option.name.as_deref().unwrap_or("").is_empty() {
            f.error(format!("spec.dnsConfig.options[{i}].name"), "required");
        }
    }
}

fn pod_security_context(sc: &PodSecurityContext, f: &mut Findings) {
    id_range(f, "spec.securityContext.runAsUser", sc.run_as_user);
    id_range(f, "spec.securityContext.runAsGroup", sc.run_as_group);
    id_range(f, "spec.securityContext.fsGroup", sc.fs_group);
    let policy = sc.supplemental_groups_policy.as_deref();
    one_of(f, "spec.securityContext.supplementalGroupsPolicy", policy, &["Merge", "Strict"]);
    for (i, gid) in sc.supplemental_groups.iter().flatten().enumerate() {
        id_range(f, &format!("spec.securityContext.supplementalGroups[{i}]"), Some(*gid));
    }
    let mut seen = BTreeSet::new();
    for (i, sysctl) in sc.sysctls.iter().flatten().enumerate() {
        let path = format!("spec.securityContext.sysctls[{i}].name");
        check(f, &path, sysctl_name(&sysctl.name));
        if !seen.insert(sysctl.name.as_str()) {
            f.error(path, format!("duplicate sysctl {}", quoted(&sysctl.name)));
        }
    }
}

/// Checks the volumes and returns their names, for the containers' mounts.
fn volumes<'a>(spec: &'a PodSpec, f: &mut Findings) -> BTreeSet<&'a str> {
    let mut names = BTreeSet::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let path = format!("spec.volumes[{i}]");
        check(f, &format!("{path}.name"), dns1123_label(&volume.name));
        if !names.insert(volume.name.as_str()) {
            f.error(format!("{path}.name"), format!("duplicate volume name {}", quoted(&volume.name)));
        }
        volume_source(volume, &path, f);
    }
    names
}

fn volume_source(volume: &Volume, path: &str, f: &mut Findings) {
    if volume.empty_dir.is_some() && volume.host_path.is_some() {
        f.error(path, "may not specify more than 1 volume type");
    }
    if let Some(empty_dir) = volume.empty_dir.as_ref() {
        match empty_dir.medium.as_deref().unwrap_or("") {
            "" | "Memory" => {}
            m if m.starts_with("HugePages") => {
                f.error(format!("{path}.emptyDir.medium"), "hugepages are not supported by crilet")
            }
            m => one_of(f, &format!("{path}.emptyDir.medium"), Some(m), &["", "Memory"]),
        }
        if let Some(limit) = empty_dir.size_limit.as_ref() {
            quantity(f, &format!("{path}.emptyDir.sizeLimit"), &limit.0);
        }
    }
    if let Some(host_path) = volume.host_path.as_ref() {
        let p = format!("{path}.hostPath.path");
        if host_path.path.is_empty() {
            f.error(p, "required");
        } else if !host_path.path.starts_with('/') {
            f.error(p, "must be an absolute path");
        } else if host_path.path.split('/').any(|part| part == "..") {
            f.error(p, "must not contain '..'");
        }
        let types = [
            "",
            "DirectoryOrCreate",
            "Directory",
            "FileOrCreate",
            "File",
            "Socket",
            "CharDevice",
            "BlockDevice",
        ];
        one_of(f, &format!("{path}.hostPath.type"), host_path.type_.as_deref(), &types);
    }
}

/// Records `why` as an error at `field` when present.
pub(super) fn check(f: &mut Findings, field: &str, why: Option<String>) {
    if let Some(why) = why {
        f.error(field, why);
    }
}

/// An error unless `value` (when set) is one of `allowed`.
pub(super) fn one_of(f: &mut Findings, field: &str, value: Option<&str>, allowed: &[&str]) {
    if let Some(value) = value.filter(|v| !allowed.contains(v)) {
        let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        f.error(
            field,
            format!("unsupported value {}: supported values are {}", quoted(value), list.join(", ")),
        );
    }
}

/// A user or group ID: 0 to 2^31-1.
pub(super) fn id_range(f: &mut Findings, field: &str, id: Option<i64>) {
    if id.is_some_and(|id| !(0..=i64::from(i32::MAX)).contains(&id)) {
        f.error(field, "must be between 0 and 2147483647, inclusive");
    }
}

/// A non-negative resource quantity; returns it when valid.
pub(super) fn quantity(f: &mut Findings, field: &str, text: &str) -> Option<Quantity> {
    match Quantity::parse(text) {
        None => f.error(field, format!("{} must be a quantity (like 500m, 2 or 128Mi)", quoted(text))),
        Some(q) if q.is_negative() => f.error(field, "must be greater than or equal to 0"),
        Some(q) => return Some(q),
    }
    None
}
