//! Container validation (init containers, sidecars and app containers), as the API server does
//! it for the fields crilet supports: names, images, policies, ports, env, mounts, resources,
//! security context, probes and lifecycle hooks. Runs on the defaulted pod.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, HTTPGetAction, LifecycleHandler, PodSpec, Probe, ResourceRequirements, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Findings;
use super::limits::quoted;
use super::names::{dns1123_label, env_var_name, http_header_name, iana_svc_name, qualified_name};
use super::validate::{check, id_range, one_of, quantity};
use super::validate_stop_signal::stop_signal;

/// Downward-API fields an env var may take with `valueFrom.fieldRef`.
pub(super) const SUPPORTED_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.podIPs",
    "status.hostIP",
];

const INIT_ONLY_ALWAYS: &str = "may not be set for init containers without restartPolicy: Always";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Init,
    Sidecar,
    App,
}

#[derive(Clone, Copy)]
enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

/// What a container's checks need to know about the pod.
struct Pod<'a> {
    volumes: &'a BTreeSet<&'a str>,
    host_network: bool,
    grace: i64,
    /// `spec.os.name`, which stop signals depend on.
    os: Option<&'a str>,
    /// `spec.restartPolicy`, which resize policies depend on.
    restart_policy: &'a str,
}

/// Validates every container of the pod; `volumes` are the pod's volume names.
pub(super) fn containers(spec: &PodSpec, volumes: &BTreeSet<&str>, f: &mut Findings) {
    if spec.containers.is_empty() {
        f.error("spec.containers", "required: a pod needs at least one container");
    }
    let pod = Pod {
        volumes,
        host_network: spec.host_network == Some(true),
        grace: spec.termination_grace_period_seconds.unwrap_or(0),
        os: spec.os.as_ref().map(|os| os.name.as_str()),
        restart_policy: spec.restart_policy.as_deref().unwrap_or("Always"),
    };
    let init = spec.init_containers.iter().flatten().enumerate().map(|(i, c)| {
        let kind = if c.restart_policy.as_deref() == Some("Always") { Kind::Sidecar } else { Kind::Init };
        (format!("spec.initContainers[{i}]"), kind, c)
    });
    let apps =
        spec.containers.iter().enumerate().map(|(i, c)| (format!("spec.containers[{i}]"), Kind::App, c));
    let mut names: BTreeMap<&str, String> = BTreeMap::new();
    let mut host_ports: BTreeMap<(i32, String, String), String> = BTreeMap::new();
    for (path, kind, c) in init.chain(apps) {
        if !c.name.is_empty() {
            if let Some(first) = names.get(c.name.as_str()) {
                f.error(
                    format!("{path}.name"),
                    format!("duplicate container name {} (also {first})", quoted(&c.name)),
                );
            } else {
                names.insert(&c.name, path.clone());
            }
        }
        container(c, &path, kind, &pod, f);
        for (j, port) in c.ports.iter().flatten().enumerate() {
            let host_port = port.host_port.unwrap_or(0);
            if host_port == 0 {
                continue;
            }
            let key = (
                host_port,
                port.protocol.clone().unwrap_or_default(),
                port.host_ip.clone().unwrap_or_default(),
            );
            let here = format!("{path}.ports[{j}].hostPort");
            if let Some(first) = host_ports.get(&key) {
                f.error(&here, format!("duplicate host port {host_port}/{} (also {first})", key.1));
            } else {
                host_ports.insert(key, here);
            }
        }
    }
}

/// KEP-5307 as the API server validates it (`validateContainerRestartPolicy`): a container's
/// own `restartPolicy` (Always on an init container makes it a sidecar) and its
/// `restartPolicyRules`: at most 20, each with an action and its `exitCodes` (In or NotIn, at
/// most 255 values), and only beside a `restartPolicy`.
fn restart_policy(c: &Container, path: &str, f: &mut Findings) {
    let policy = c.restart_policy.as_deref();
    one_of(f, &format!("{path}.restartPolicy"), policy, &["Always", "Never", "OnFailure"]);
    let rules = c.restart_policy_rules.as_deref().unwrap_or_default();
    if rules.is_empty() {
        return;
    }
    if policy.is_none() {
        f.error(
            format!("{path}.restartPolicy"),
            "required: must specify restartPolicy when restart rules are used",
        );
    }
    if rules.len() > 20 {
        f.error(format!("{path}.restartPolicyRules"), format!("too many: {} rules, at most 20", rules.len()));
    }
    for (i, rule) in rules.iter().enumerate() {
        let here = format!("{path}.restartPolicyRules[{i}]");
        one_of(
            f,
            &format!("{here}.action"),
            Some(rule.action.as_str()),
            &["Restart", "RestartAllContainers"],
        );
        let Some(codes) = rule.exit_codes.as_ref() else {
            f.error(format!("{here}.exitCodes"), "required: must be specified");
            continue;
        };
        one_of(f, &format!("{here}.exitCodes.operator"), Some(codes.operator.as_str()), &["In", "NotIn"]);
        let n = codes.values.as_ref().map_or(0, Vec::len);
        if n > 255 {
            f.error(format!("{here}.exitCodes.values"), format!("too many: {n} values, at most 255"));
        }
    }
}

/// KEP-1287 as the API server validates `resizePolicy`: cpu or memory, each once, NotRequired
/// or RestartContainer; not on regular init containers; only NotRequired in a `Never` pod.
fn resize_policy(c: &Container, path: &str, kind: Kind, pod: &Pod<'_>, f: &mut Findings) {
    let policies = c.resize_policy.as_deref().unwrap_or_default();
    if policies.is_empty() {
        return;
    }
    if kind == Kind::Init {
        f.error(format!("{path}.resizePolicy"), INIT_ONLY_ALWAYS);
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, p) in policies.iter().enumerate() {
        let here = format!("{path}.resizePolicy[{i}]");
        one_of(f, &format!("{here}.resourceName"), Some(p.resource_name.as_str()), &["cpu", "memory"]);
        if !seen.insert(p.resource_name.as_str()) {
            f.error(format!("{here}.resourceName"), format!("duplicate value {:?}", p.resource_name));
        }
        one_of(
            f,
            &format!("{here}.restartPolicy"),
            Some(p.restart_policy.as_str()),
            &["NotRequired", "RestartContainer"],
        );
        if pod.restart_policy == "Never" && p.restart_policy != "NotRequired" {
            f.error(
                format!("{here}.restartPolicy"),
                "must be NotRequired when the pod's restartPolicy is Never",
            );
        }
    }
}

fn container(c: &Container, path: &str, kind: Kind, pod: &Pod<'_>, f: &mut Findings) {
    if c.name.is_empty() {
        f.error(format!("{path}.name"), "required");
    } else {
        check(f, &format!("{path}.name"), dns1123_label(&c.name));
    }
    match c.image.as_deref() {
        None | Some("") => f.error(format!("{path}.image"), "required"),
        Some(image) if image.trim() != image => {
            f.error(format!("{path}.image"), "must not have leading or trailing whitespace")
        }
        Some(_) => {}
    }
    let pull = c.image_pull_policy.as_deref();
    one_of(f, &format!("{path}.imagePullPolicy"), pull, &["Always", "IfNotPresent", "Never"]);
    restart_policy(c, path, f);
    resize_policy(c, path, kind, pod, f);
    let policy = c.termination_message_policy.as_deref();
    one_of(f, &format!("{path}.terminationMessagePolicy"), policy, &["File", "FallbackToLogsOnError"]);
    ports(c, path, pod, f);
    for (k, env) in c.env.iter().flatten().enumerate() {
        env_var(env, &format!("{path}.env[{k}]"), f);
    }
    mounts(c, path, pod, f);
    if let Some(resources) = c.resources.as_ref() {
        self::resources(resources, &format!("{path}.resources"), f);
    }
    if let Some(sc) = c.security_context.as_ref() {
        security_context(sc, &format!("{path}.securityContext"), f);
    }
    let probes = [
        ("livenessProbe", &c.liveness_probe, ProbeKind::Liveness),
        ("readinessProbe", &c.readiness_probe, ProbeKind::Readiness),
        ("startupProbe", &c.startup_probe, ProbeKind::Startup),
    ];
    for (field, probe, probe_kind) in probes {
        let Some(probe) = probe else { continue };
        if kind == Kind::Init {
            f.error(format!("{path}.{field}"), INIT_ONLY_ALWAYS);
        } else {
            self::probe(probe, &format!("{path}.{field}"), probe_kind, f);
        }
    }
    if let Some(lifecycle) = c.lifecycle.as_ref() {
        if kind == Kind::Init {
            f.error(format!("{path}.lifecycle"), INIT_ONLY_ALWAYS);
        } else {
            for (field, handler) in [("postStart", &lifecycle.post_start), ("preStop", &lifecycle.pre_stop)] {
                if let Some(handler) = handler {
                    hook(handler, &format!("{path}.lifecycle.{field}"), pod.grace, f);
                }
            }
            if let Some(signal) = lifecycle.stop_signal.as_deref() {
                stop_signal(signal, pod.os, &format!("{path}.lifecycle.stopSignal"), f);
            }
        }
    }
}

fn ports(c: &Container, path: &str, pod: &Pod<'_>, f: &mut Findings) {
    let mut names = BTreeSet::new();
    for (j, port) in c.ports.iter().flatten().enumerate() {
        let path = format!("{path}.ports[{j}]");
        if !(1..=65535).contains(&port.container_port) {
            f.error(format!("{path}.containerPort"), "must be between 1 and 65535, inclusive");
        }
        let host_port = port.host_port.unwrap_or(0);
        if !(0..=65535).contains(&host_port) {
            f.error(format!("{path}.hostPort"), "must be between 1 and 65535, inclusive");
        } else if pod.host_network && host_port != 0 && host_port != port.container_port {
            f.error(format!("{path}.hostPort"), "must match containerPort when hostNetwork is true");
        }
        one_of(f, &format!("{path}.protocol"), port.protocol.as_deref(), &["TCP", "UDP", "SCTP"]);
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            check(f, &format!("{path}.name"), iana_svc_name(name));
            if !names.insert(name) {
                f.error(format!("{path}.name"), format!("duplicate port name {}", quoted(name)));
            }
        }
        if let Some(ip) = port.host_ip.as_deref().filter(|ip| !ip.is_empty()) {
            if ip.parse::<IpAddr>().is_err() {
                f.error(format!("{path}.hostIP"), format!("{} must be a valid IP address", quoted(ip)));
            }
        }
    }
}

fn env_var(env: &EnvVar, path: &str, f: &mut Findings) {
    check(f, &format!("{path}.name"), env_var_name(&env.name));
    let Some(from) = env.value_from.as_ref() else { return };
    if env.value.as_deref().is_some_and(|v| !v.is_empty()) {
        f.error(format!("{path}.valueFrom"), "may not be specified when value is not empty");
    }
    match from.field_ref.as_ref() {
        Some(field_ref) => {
            let api = field_ref.api_version.as_deref();
            one_of(f, &format!("{path}.valueFrom.fieldRef.apiVersion"), api, &["v1"]);
            let field = field_ref.field_path.as_str();
            // One label or annotation (`metadata.labels['k']`), as the API server allows for env.
            let key = ["metadata.labels", "metadata.annotations"]
                .iter()
                .find_map(|base| field.strip_prefix(base)?.strip_prefix("['")?.strip_suffix("']"));
            if let Some(key) = key {
                check(f, &format!("{path}.valueFrom.fieldRef.fieldPath"), qualified_name(key));
            } else if !SUPPORTED_FIELD_PATHS.contains(&field) {
                f.error(
                    format!("{path}.valueFrom.fieldRef.fieldPath"),
                    format!(
                        "{} is not supported by crilet (supported: {}, metadata.labels['<key>'], \
                         metadata.annotations['<key>'])",
                        quoted(&field_ref.field_path),
                        SUPPORTED_FIELD_PATHS.join(", ")
                    ),
                );
            }
        }
        // The other sources are refused by the allow-list; only "no source at all" is left.
        None if from.config_map_key_ref.is_none()
            && from.secret_key_ref.is_none()
            && from.resource_field_ref.is_none() =>
        {
            f.error(format!("{path}.valueFrom"), "must specify fieldRef")
        }
        None => {}
    }
}

fn mounts(c: &Container, path: &str, pod: &Pod<'_>, f: &mut Findings) {
    let mut paths = BTreeSet::new();
    for (k, mount) in c.volume_mounts.iter().flatten().enumerate() {
        let path = format!("{path}.volumeMounts[{k}]");
        if !pod.volumes.contains(mount.name.as_str()) {
            f.error(
                format!("{path}.name"),
                format!("volume {} is not defined in spec.volumes", quoted(&mount.name)),
            );
        }
        let mount_path = &mount.mount_path;
        if mount_path.is_empty() {
            f.error(format!("{path}.mountPath"), "required");
        } else if !mount_path.starts_with('/') {
            f.error(format!("{path}.mountPath"), "must be an absolute path");
        } else if !paths.insert(mount_path.trim_end_matches('/')) {
            f.error(
                format!("{path}.mountPath"),
                format!("{} must be unique within the container", quoted(mount_path)),
            );
        }
        if let Some(sub) = mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            if sub.starts_with('/') {
                f.error(format!("{path}.subPath"), "must be a relative path");
            } else if sub.split('/').any(|part| part == "..") {
                f.error(format!("{path}.subPath"), "must not contain '..'");
            }
        }
        mount_propagation(c, mount.mount_propagation.as_deref(), &format!("{path}.mountPropagation"), f);
    }
}

/// `mountPropagation` as the API server's `validateMountPropagation` checks it: one of the
/// three modes, and `Bidirectional` only in a privileged container (a mount made inside would
/// reach the host).
fn mount_propagation(c: &Container, mode: Option<&str>, path: &str, f: &mut Findings) {
    one_of(f, path, mode, &["Bidirectional", "HostToContainer", "None"]);
    let privileged = c.security_context.as_ref().and_then(|sc| sc.privileged) == Some(true);
    if mode == Some("Bidirectional") && !privileged {
        f.error(path, crate::mountinfo::BIDIRECTIONAL_UNPRIVILEGED);
    }
}

fn resources(r: &ResourceRequirements, path: &str, f: &mut Findings) {
    let mut parsed = BTreeMap::new();
    let mut warned = BTreeSet::new();
    for (section, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, value) in map.iter().flatten() {
            let here = format!("{path}.{section}.{name}");
            if let Some(q) = quantity(f, &here, &value.0) {
                parsed.insert((section, name.as_str()), q);
            }
            if name != "cpu" && name != "memory" && warned.insert(name) {
                f.warn(here, format!("resource {name} is not enforced by crilet; ignored"));
            }
        }
    }
    for ((section, name), request) in &parsed {
        let Some(limit) = parsed.get(&("limits", *name)).filter(|_| *section == "requests") else { continue };
        if request.cmp_value(limit) == Some(std::cmp::Ordering::Greater) {
            let limit_text = r.limits.as_ref().and_then(|l| l.get(*name)).map(|q| q.0.as_str()).unwrap_or("");
            f.error(
                format!("{path}.requests.{name}"),
                format!("must be less than or equal to the {name} limit of {limit_text}"),
            );
        }
    }
}

fn security_context(sc: &SecurityContext, path: &str, f: &mut Findings) {
    id_range(f, &format!("{path}.runAsUser"), sc.run_as_user);
    id_range(f, &format!("{path}.runAsGroup"), sc.run_as_group);
    one_of(f, &format!("{path}.procMount"), sc.proc_mount.as_deref(), &["Default", "Unmasked"]);
    if sc.privileged == Some(true) && sc.allow_privilege_escalation == Some(false) {
        f.error(path, "cannot set allowPrivilegeEscalation to false and privileged to true");
    }
}

fn probe(p: &Probe, path: &str, kind: ProbeKind, f: &mut Findings) {
    let handlers = [p.exec.is_some(), p.http_get.is_some(), p.tcp_socket.is_some(), p.grpc.is_some()];
    match handlers.iter().filter(|h| **h).count() {
        0 => f.error(path, "must specify a handler type (exec, httpGet, tcpSocket or grpc)"),
        1 => {}
        _ => f.error(path, "may not specify more than 1 handler type"),
    }
    let numbers = [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ];
    for (field, value) in numbers {
        if value.is_some_and(|v| v < 0) {
            f.error(format!("{path}.{field}"), "must be greater than or equal to 0");
        }
    }
    if matches!(kind, ProbeKind::Liveness | ProbeKind::Startup) && p.success_threshold.is_some_and(|s| s != 1)
    {
        f.error(format!("{path}.successThreshold"), "must be 1 for liveness and startup probes");
    }
    match (kind, p.termination_grace_period_seconds) {
        (ProbeKind::Readiness, Some(_)) => {
            f.error(format!("{path}.terminationGracePeriodSeconds"), "must not be set for readiness probes")
        }
        (_, Some(g)) if g <= 0 => {
            f.error(format!("{path}.terminationGracePeriodSeconds"), "must be greater than 0")
        }
        _ => {}
    }
    if let Some(exec) = p.exec.as_ref() {
        if exec.command.as_deref().unwrap_or_default().is_empty() {
            f.error(format!("{path}.exec.command"), "required");
        }
    }
    if let Some(http) = p.http_get.as_ref() {
        http_get(http, &format!("{path}.httpGet"), f);
    }
    if let Some(tcp) = p.tcp_socket.as_ref() {
        port_num_or_name(&tcp.port, &format!("{path}.tcpSocket.port"), f);
    }
    if let Some(grpc) = p.grpc.as_ref() {
        if !(1..=65535).contains(&grpc.port) {
            f.error(format!("{path}.grpc.port"), "must be between 1 and 65535, inclusive");
        }
    }
}

fn hook(h: &LifecycleHandler, path: &str, grace: i64, f: &mut Findings) {
    let handlers = [h.exec.is_some(), h.http_get.is_some(), h.sleep.is_some(), h.tcp_socket.is_some()];
    match handlers.iter().filter(|h| **h).count() {
        0 => f.error(path, "must specify a handler type (exec, httpGet or sleep)"),
        1 => {}
        _ => f.error(path, "may not specify more than 1 handler type"),
    }
    if let Some(exec) = h.exec.as_ref() {
        if exec.command.as_deref().unwrap_or_default().is_empty() {
            f.error(format!("{path}.exec.command"), "required");
        }
    }
    if let Some(http) = h.http_get.as_ref() {
        http_get(http, &format!("{path}.httpGet"), f);
    }
    if let Some(sleep) = h.sleep.as_ref() {
        // PodLifecycleSleepActionAllowZero (on since 1.33): 0 ≤ seconds ≤ the grace period.
        if !(0..=grace).contains(&sleep.seconds) {
            f.error(
                format!("{path}.sleep.seconds"),
                format!("must be between 0 and terminationGracePeriodSeconds ({grace}), inclusive"),
            );
        }
    }
}

fn http_get(http: &HTTPGetAction, path: &str, f: &mut Findings) {
    port_num_or_name(&http.port, &format!("{path}.port"), f);
    one_of(f, &format!("{path}.scheme"), http.scheme.as_deref(), &["HTTP", "HTTPS"]);
    for (i, header) in http.http_headers.iter().flatten().enumerate() {
        check(f, &format!("{path}.httpHeaders[{i}].name"), http_header_name(&header.name));
    }
}

fn port_num_or_name(port: &IntOrString, path: &str, f: &mut Findings) {
    match port {
        IntOrString::Int(n) if !(1..=65535).contains(n) => {
            f.error(path, "must be between 1 and 65535, inclusive")
        }
        IntOrString::Int(_) => {}
        IntOrString::String(name) => check(f, path, iana_svc_name(name)),
    }
}
