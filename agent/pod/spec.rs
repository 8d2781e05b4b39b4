//! Builds the CRI `PodSandboxConfig` and `ContainerConfig` for a desired pod, with the kubelet's
//! labels, annotations, paths and namespace modes (spec §1). Pure: directories are created by
//! the executor, which passes in the paths it prepared.

use std::collections::HashMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::hash::{CURRENT_SCHEME, HASH_SCHEME_ANNOTATION, container_hash};
use crate::cgroup::{CgroupName, Cgroups, Qos};
use crate::cri::api;
use crate::expand::expand;
use crate::model::{DesiredPod, keys};
pub use crate::node::{
    NodeConfig, container_log_path, legacy_log_symlink, pod_dir, pod_log_dir, restart_count_from_logs,
};
use crate::status::qos_class;
use crate::volumes::EnvSources;

use crate::podspec::spec;
pub use crate::podspec::{Kind, ephemeral_containers};

/// Where an emptyDir volume lives (R12.3): survives container restarts and sandbox re-creation.
pub fn empty_dir(node: &NodeConfig, uid: &str, volume: &str) -> PathBuf {
    pod_dir(node, uid).join("volumes/kubernetes.io~empty-dir").join(volume)
}

/// The pod's `terminationGracePeriodSeconds` (default 30).
pub fn termination_grace(pod: &Pod) -> std::time::Duration {
    let secs = spec(pod).termination_grace_period_seconds.unwrap_or(30);
    std::time::Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// R1.4: hostname for the sandbox.
pub fn hostname(pod: &Pod) -> String {
    let s = spec(pod);
    if s.host_network == Some(true) {
        return String::new();
    }
    let name = s.hostname.clone().or_else(|| pod.metadata.name.clone()).unwrap_or_default();
    let mut h: String = name.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

/// The pod's cgroup, as the kubelet names it: `pod<uid>` under its QoS class's parent.
pub fn pod_cgroup_name(pod: &Pod, uid: &str) -> CgroupName {
    Cgroups::pod_name(Qos::from_class(qos_class(pod)), uid)
}

/// The sandbox's cgroup parent, as the kubelet gives it to the runtime: the pod cgroup's path
/// under the node's driver (`/kubepods/burstable/pod<uid>`, or
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`, whose last
/// element containerd takes as the systemd parent of the sandbox's and containers' scopes).
pub fn cgroup_parent(node: &NodeConfig, pod: &Pod, uid: &str) -> String {
    node.cgroup_driver.path(&pod_cgroup_name(pod, uid))
}

fn namespace_options(pod: &Pod) -> api::NamespaceOption {
    let s = spec(pod);
    let mode = |node: bool| if node { api::NamespaceMode::Node } else { api::NamespaceMode::Pod } as i32;
    let pid = if s.host_pid == Some(true) {
        api::NamespaceMode::Node
    } else if s.share_process_namespace == Some(true) {
        api::NamespaceMode::Pod
    } else {
        api::NamespaceMode::Container
    } as i32;
    api::NamespaceOption {
        network: mode(s.host_network == Some(true)),
        pid,
        ipc: mode(s.host_ipc == Some(true)),
        ..Default::default()
    }
}

/// R1.6: port mappings from the app containers' ports only.
fn port_mappings(pod: &Pod) -> Vec<api::PortMapping> {
    let mut out = Vec::new();
    for c in &spec(pod).containers {
        for p in c.ports.iter().flatten() {
            let protocol = match p.protocol.as_deref() {
                Some("UDP") => api::Protocol::Udp,
                Some("SCTP") => api::Protocol::Sctp,
                _ => api::Protocol::Tcp,
            } as i32;
            let m = api::PortMapping {
                protocol,
                container_port: p.container_port,
                host_port: p.host_port.unwrap_or(0),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            };
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

/// R1.1–R1.7: the sandbox config for attempt `attempt`, with the pod's resolver `dns` (formed by
/// `crate::dns`, which reads the host's file).
pub fn sandbox_config(
    node: &NodeConfig,
    d: &DesiredPod,
    attempt: u32,
    dns: api::DnsConfig,
) -> api::PodSandboxConfig {
    let pod = &*d.pod;
    let s = spec(pod);
    let mut labels: HashMap<String, String> =
        pod.metadata.labels.clone().unwrap_or_default().into_iter().collect();
    labels.insert(keys::POD_NAME.into(), d.key.name.clone());
    labels.insert(keys::POD_NAMESPACE.into(), d.key.namespace.clone());
    labels.insert(keys::POD_UID.into(), d.uid.clone());
    labels.insert(keys::MANAGED_BY.into(), "crilet".into());
    let mut annotations: HashMap<String, String> =
        pod.metadata.annotations.clone().unwrap_or_default().into_iter().collect();
    annotations.insert(keys::MANIFEST_FILE.into(), d.source_text());
    if let Ok(json) = serde_json::to_string(pod) {
        annotations.insert(keys::POD_SPEC.into(), json);
    }
    let psc = s.security_context.clone().unwrap_or_default();
    let privileged = s
        .init_containers
        .iter()
        .flatten()
        .chain(s.containers.iter())
        .any(|c| c.security_context.as_ref().and_then(|sc| sc.privileged) == Some(true));
    // Dot form, as the kubelet hands them to the runtime (a `.` inside a `/`-separated name stays).
    let sysctls = psc
        .sysctls
        .iter()
        .flatten()
        .map(|sc| (crate::sysctl::normalize(&sc.name), sc.value.clone()))
        .collect();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: d.key.name.clone(),
            uid: d.uid.clone(),
            namespace: d.key.namespace.clone(),
            attempt,
        }),
        hostname: hostname(pod),
        log_directory: pod_log_dir(node, d).display().to_string(),
        dns_config: Some(dns),
        port_mappings: port_mappings(pod),
        labels,
        annotations,
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(node, pod, &d.uid),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc.run_as_user.map(|value| api::Int64Value { value }),
                run_as_group: psc.run_as_group.map(|value| api::Int64Value { value }),
                supplemental_groups: super::security::supplemental_groups(s.security_context.as_ref()),
                // An unknown value cannot pass validation or admission; Merge is the API's default.
                supplemental_groups_policy: super::security::groups_policy(s.security_context.as_ref())
                    .unwrap_or(api::SupplementalGroupsPolicy::Merge)
                    as i32,
                selinux_options: super::security::selinux(s.security_context.as_ref(), None),
                privileged,
                seccomp: Some(super::seccomp::sandbox_profile(
                    s.security_context.as_ref(),
                    &super::seccomp::profile_root(&node.root_dir),
                    node.seccomp_default,
                )),
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Values the downward API and `$(VAR)` expansion need at container creation.
#[derive(Debug, Clone, Default)]
pub struct RuntimeValues {
    pub pod_ips: Vec<String>,
    /// The image reference to run (the runtime's image ID, R1.9).
    pub image_ref: String,
    pub restart_count: u32,
    /// Host file bind-mounted at the termination-message path, if any (R1.12).
    pub termination_file: Option<PathBuf>,
    /// An ephemeral container's target: the container whose PID namespace it joins.
    pub pid_target: Option<String>,
}

/// An error in turning a container spec into a CRI config (shown as `CreateContainerConfigError`).
#[derive(Debug, thiserror::Error)]
#[error("container {container}: {reason}")]
pub struct ConfigError {
    pub container: String,
    pub reason: String,
}

/// Resolves the container's env list in order (the kubelet's `makeEnvironmentVariables`):
/// `envFrom` first, then `env`, whose entries replace same-named ones, with `$(VAR)` expansion
/// against earlier entries and the service variables, then the service variables not set. `api` holds the ConfigMaps and Secrets read for a cluster pod
/// (`None` for static pods, whose references to API objects then fail).
pub fn resolve_env(
    node: &NodeConfig,
    d: &DesiredPod,
    c: &Container,
    rv: &RuntimeValues,
    api: Option<&EnvSources>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let fail = |reason: String| ConfigError { container: c.name.clone(), reason };
    let namespace = &d.key.namespace;
    let mut env: Vec<(String, String)> = crate::volumes::env::env_from(api, namespace, c).map_err(fail)?;
    // `$(VAR)` also finds the service variables (cluster pods only).
    let services: &[(String, String)] = api.map_or(&[], |a| a.services.as_slice());
    let service_var = |n: &str| services.iter().find(|(k, _)| k == n).map(|(_, v)| v);
    for e in c.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(field) = &from.field_ref {
                field_value(node, d, &field.field_path, rv).ok_or_else(|| {
                    fail(format!("env {}: unsupported fieldPath {:?}", e.name, field.field_path))
                })?
            } else if let Some(r) = &from.resource_field_ref {
                crate::volumes::env::resource_ref(api, &d.pod, c, r).map_err(fail)?
            } else {
                match crate::volumes::env::key_ref(api, namespace, from).map_err(fail)? {
                    Some(v) => v,
                    // Optional and missing: the variable is not set at all.
                    None => continue,
                }
            }
        } else {
            let known: HashMap<String, String> = env.iter().cloned().collect();
            let lookup = |n: &str| known.get(n).or_else(|| service_var(n)).cloned();
            expand(e.value.as_deref().unwrap_or(""), &lookup)
        };
        env.retain(|(k, _)| k != &e.name);
        env.push((e.name.clone(), value));
    }
    // Then the service variables the container does not set itself.
    for (k, v) in services {
        if !env.iter().any(|(e, _)| e == k) {
            env.push((k.clone(), v.clone()));
        }
    }
    Ok(env)
}

fn field_value(node: &NodeConfig, d: &DesiredPod, path: &str, rv: &RuntimeValues) -> Option<String> {
    let host_ip = node.host_ip.clone().unwrap_or_default();
    let host_network = spec(&d.pod).host_network == Some(true);
    let pod_ip = if host_network { host_ip.clone() } else { rv.pod_ips.first().cloned().unwrap_or_default() };
    Some(match path {
        "metadata.name" => d.key.name.clone(),
        "metadata.namespace" => d.key.namespace.clone(),
        "metadata.uid" => d.uid.clone(),
        "spec.nodeName" => node.node_name.clone(),
        "spec.serviceAccountName" => spec(&d.pod).service_account_name.clone().unwrap_or_default(),
        "status.podIP" => pod_ip,
        "status.podIPs" => {
            if host_network {
                host_ip
            } else {
                rv.pod_ips.join(",")
            }
        }
        "status.hostIP" | "status.hostIPs" => host_ip,
        // Labels and annotations, one (`metadata.labels['app']`) or all.
        _ => return crate::volumes::projection::pod_metadata_field(&d.pod, path).ok(),
    })
}

/// The container's cgroup values: from its resources, which for a running pod are the
/// allocated ones (KEP-1287).
fn linux_resources(c: &Container) -> api::LinuxContainerResources {
    use crate::pod::resize::{Amounts, linux_resources};
    linux_resources(Amounts::of(c.resources.as_ref()))
}

/// R1.8–R1.12: the container config. `mounts` are prepared by the executor.
pub fn container_config(
    node: &NodeConfig,
    d: &DesiredPod,
    c: &Container,
    kind: Kind,
    rv: &RuntimeValues,
    mounts: Vec<api::Mount>,
) -> Result<api::ContainerConfig, ConfigError> {
    container_config_with_env(node, d, c, kind, rv, mounts, None)
}

/// [`container_config`] with the API objects the env names (cluster pods).
pub fn container_config_with_env(
    node: &NodeConfig,
    d: &DesiredPod,
    c: &Container,
    kind: Kind,
    rv: &RuntimeValues,
    mounts: Vec<api::Mount>,
    api_env: Option<&EnvSources>,
) -> Result<api::ContainerConfig, ConfigError> {
    let pod = &*d.pod;
    let s = spec(pod);
    let env = resolve_env(node, d, c, rv, api_env)?;
    let lookup: HashMap<String, String> = env.iter().cloned().collect();
    let exp = |v: &Vec<String>| v.iter().map(|a| expand(a, &|n| lookup.get(n).cloned())).collect::<Vec<_>>();

    let labels = HashMap::from([
        (keys::POD_NAME.to_string(), d.key.name.clone()),
        (keys::POD_NAMESPACE.to_string(), d.key.namespace.clone()),
        (keys::POD_UID.to_string(), d.uid.clone()),
        (keys::CONTAINER_NAME.to_string(), c.name.clone()),
    ]);
    let mut annotations = HashMap::from([
        (keys::CONTAINER_HASH.to_string(), container_hash(c)),
        (HASH_SCHEME_ANNOTATION.to_string(), CURRENT_SCHEME.to_string()),
        (keys::CONTAINER_RESTART_COUNT.to_string(), rv.restart_count.to_string()),
        (
            keys::TERMINATION_MESSAGE_PATH.to_string(),
            c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into()),
        ),
        (
            keys::TERMINATION_MESSAGE_POLICY.to_string(),
            c.termination_message_policy.clone().unwrap_or_else(|| "File".into()),
        ),
        (keys::CONTAINER_KIND.to_string(), kind.as_str().to_string()),
    ]);
    if let Some(g) = s.termination_grace_period_seconds {
        annotations.insert(keys::POD_TERMINATION_GRACE.into(), g.to_string());
    }
    if let Some(pre) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        if let Ok(json) = serde_json::to_string(pre) {
            annotations.insert(keys::PRESTOP_HANDLER.into(), json);
        }
    }
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        if let Ok(json) = serde_json::to_string(ports) {
            annotations.insert(keys::CONTAINER_PORTS.into(), json);
        }
    }
    if let Some(f) = &rv.termination_file {
        annotations.insert(TERMINATION_FILE_ANNOTATION.into(), f.display().to_string());
    }
    // A static pod's container remembers the labels and annotations its env read, so an edit of
    // them restarts it in place (API pods: the kubelet never does; Kruise's daemon does).
    if !d.source.is_api() {
        if let Some(h) = super::metadata_env::hash(pod, c) {
            annotations.insert(super::metadata_env::ANNOTATION.into(), h);
        }
    }

    let stop_signal = stop_signal(c)?;
    let seccomp = super::seccomp::container_profile(
        s.security_context.as_ref(),
        c,
        &super::seccomp::profile_root(&node.root_dir),
        node.seccomp_default,
    )
    .map_err(|reason| ConfigError { container: c.name.clone(), reason })?;
    // Both the profile and the deprecated string, as the kubelet sends them; nothing when the
    // pod asks for none (the runtime then applies its default to an unprivileged container).
    let (apparmor, apparmor_profile) =
        crate::apparmor::cri_profile(crate::apparmor::profile_of(pod, c).as_ref());
    let psc = s.security_context.clone().unwrap_or_default();
    let csc = c.security_context.clone().unwrap_or_default();
    let caps = csc.capabilities.clone().unwrap_or_default();
    let groups_policy = super::security::groups_policy(s.security_context.as_ref())
        .map_err(|reason| ConfigError { container: c.name.clone(), reason })?;
    let (masked_paths, readonly_paths) = super::security::proc_paths(c.security_context.as_ref());
    let security = api::LinuxContainerSecurityContext {
        capabilities: Some(api::Capability {
            add_capabilities: caps.add.clone().unwrap_or_default(),
            drop_capabilities: caps.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        privileged: csc.privileged == Some(true),
        namespace_options: Some(match &rv.pid_target {
            // `kubectl debug --target`: the target container's processes are visible.
            Some(id) => api::NamespaceOption {
                pid: api::NamespaceMode::Target as i32,
                target_id: id.clone(),
                ..namespace_options(pod)
            },
            None => namespace_options(pod),
        }),
        run_as_user: csc.run_as_user.or(psc.run_as_user).map(|value| api::Int64Value { value }),
        run_as_group: csc.run_as_group.or(psc.run_as_group).map(|value| api::Int64Value { value }),
        readonly_rootfs: csc.read_only_root_filesystem == Some(true),
        supplemental_groups: super::security::supplemental_groups(s.security_context.as_ref()),
        supplemental_groups_policy: groups_policy as i32,
        selinux_options: super::security::selinux(s.security_context.as_ref(), c.security_context.as_ref()),
        no_new_privs: csc.allow_privilege_escalation == Some(false),
        masked_paths,
        readonly_paths,
        seccomp: Some(seccomp),
        apparmor,
        #[allow(deprecated)]
        apparmor_profile,
        ..Default::default()
    };

    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata { name: c.name.clone(), attempt: rv.restart_count }),
        image: Some(api::ImageSpec {
            image: rv.image_ref.clone(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: exp(c.command.as_ref().unwrap_or(&Vec::new())),
        args: exp(c.args.as_ref().unwrap_or(&Vec::new())),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        // CRI 0.36 carries env values as bytes (same wire format as its earlier string).
        envs: env.into_iter().map(|(key, value)| api::KeyValue { key, value: value.into_bytes() }).collect(),
        mounts,
        labels,
        annotations,
        log_path: container_log_path(&c.name, rv.restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(linux_resources(c)),
            security_context: Some(security),
        }),
        stop_signal: stop_signal as i32,
        ..Default::default()
    })
}

/// KEP-4960: `lifecycle.stopSignal` as CRI's enum, fixed when the container is created (the
/// kubelet's `generateContainerConfig`); unset is `RUNTIME_DEFAULT` (the image's STOPSIGNAL,
/// else SIGTERM). A name outside the API's list is an error, not a silent default: validation
/// refuses it for static pods and the API server for API pods, so this is a backstop.
pub fn stop_signal(c: &Container) -> Result<api::Signal, ConfigError> {
    let name = c.lifecycle.as_ref().and_then(|l| l.stop_signal.as_deref());
    crate::cri::signal::to_cri(name).ok_or_else(|| ConfigError {
        container: c.name.clone(),
        reason: format!("lifecycle.stopSignal {:?} is not a signal the API knows", name.unwrap_or_default()),
    })
}

/// crilet's own annotation: the host file holding this instance's termination message.
pub const TERMINATION_FILE_ANNOTATION: &str = "crilet.io/termination-message-file";

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;

    use super::*;

    /// The sandbox's cgroup parent by QoS class under both drivers (the naming itself is
    /// table-tested in `cgroup::name`).
    #[test]
    fn cgroup_parents() {
        use crate::cgroup::CgroupDriver::{Cgroupfs, Systemd};
        let pod = |yaml: &str| -> Pod { serde_yaml_ng::from_str(yaml).expect("pod") };
        let best = pod("spec: {containers: [{name: a}]}");
        let burst = pod("spec: {containers: [{name: a, resources: {requests: {cpu: 100m}}}]}");
        let guar = pod("spec: {containers: [{name: a, resources: {limits: {cpu: '1', memory: 1Gi}}}]}");
        let node = |driver| NodeConfig {
            root_dir: "/r".into(),
            pod_logs_dir: "/l".into(),
            container_logs_dir: None,
            node_name: "n".into(),
            host_ip: None,
            dns: crate::dns::DnsSettings::default(),
            cgroup_driver: driver,
            seccomp_default: false,
        };
        for (p, driver, want) in [
            (&best, Cgroupfs, "/kubepods/besteffort/poda-1"),
            (&burst, Cgroupfs, "/kubepods/burstable/poda-1"),
            (&guar, Cgroupfs, "/kubepods/poda-1"),
            (&best, Systemd, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda_1.slice"),
            (&burst, Systemd, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_1.slice"),
            (&guar, Systemd, "/kubepods.slice/kubepods-poda_1.slice"),
        ] {
            assert_eq!(cgroup_parent(&node(driver), p, "a-1"), want);
        }
    }

    #[test]
    fn hostnames() {
        let mut pod = Pod::default();
        pod.metadata.name = Some(format!("{}-.x", "a".repeat(61)));
        assert_eq!(hostname(&pod), "a".repeat(61));
        pod.spec = Some(PodSpec { hostname: Some("h".into()), ..Default::default() });
        assert_eq!(hostname(&pod), "h");
        pod.spec = Some(PodSpec { host_network: Some(true), ..Default::default() });
        assert_eq!(hostname(&pod), "");
    }
}
