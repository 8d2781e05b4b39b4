//! The container and volume sections of `describe pod`, ported from kubectl's
//! `describeContainers` / `describeVolumes` (state, probes one-liners, environment, mounts),
//! each container followed by crilet's lifecycle timeline.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, Pod, Probe, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::describe::Doc;
use super::describe_timeline::container_timeline;
use super::format::{rfc1123z, s};
use crate::proto::TimelineStep;

/// One `Containers:` (or `Init Containers:`) section.
pub(crate) fn describe_containers(
    w: &mut Doc,
    label: &str,
    containers: &[Container],
    statuses: &[ContainerStatus],
    pod: &Pod,
    (timeline, now): (&[TimelineStep], Timestamp),
    tz: &TimeZone,
) {
    let none = if containers.is_empty() { " <none>" } else { "" };
    w.w(0, &format!("{label}:{none}\n"));
    for c in containers {
        let status = statuses.iter().find(|st| st.name == c.name);
        w.w(1, &format!("{}:\n", c.name));
        if let Some(st) = status {
            w.w(2, &format!("Container ID:\t{}\n", s(&st.container_id)));
        }
        w.w(2, &format!("Image:\t{}\n", s(&c.image)));
        if let Some(st) = status {
            w.w(2, &format!("Image ID:\t{}\n", st.image_id));
        }
        let ports = c.ports.clone().unwrap_or_default();
        let join = |f: &dyn Fn(&k8s_openapi::api::core::v1::ContainerPort) -> i32| {
            ports
                .iter()
                .map(|p| format!("{}/{}", f(p), p.protocol.as_deref().unwrap_or("TCP")))
                .collect::<Vec<_>>()
        };
        for (one, many, list) in [
            ("Port", "Ports", join(&|p| p.container_port)),
            ("Host Port", "Host Ports", join(&|p| p.host_port.unwrap_or(0))),
        ] {
            match list.len() {
                0 => w.w(2, &format!("{one}:\t<none>\n")),
                1 => w.w(2, &format!("{one}:\t{}\n", list[0])),
                _ => w.w(2, &format!("{many}:\t{}\n", list.join(", "))),
            }
        }
        for (title, items) in [("Command", &c.command), ("Args", &c.args)] {
            if let Some(items) = items.as_ref().filter(|i| !i.is_empty()) {
                w.w(2, &format!("{title}:\n"));
                for line in items.iter().flat_map(|i| i.split('\n')) {
                    w.w(3, &format!("{line}\n"));
                }
            }
        }
        if let Some(st) = status {
            describe_state(w, "State", st.state.as_ref(), tz);
            if let Some(last) = st.last_state.as_ref().filter(|l| l.terminated.is_some()) {
                describe_state(w, "Last State", Some(last), tz);
            }
            w.w(2, &format!("Ready:\t{}\n", if st.ready { "True" } else { "False" }));
            w.w(2, &format!("Restart Count:\t{}\n", st.restart_count));
        }
        describe_resources(w, c.resources.as_ref());
        for (title, probe) in [
            ("Liveness", &c.liveness_probe),
            ("Readiness", &c.readiness_probe),
            ("Startup", &c.startup_probe),
        ] {
            if let Some(p) = probe {
                w.w(2, &format!("{title}:\t{}\n", describe_probe(p)));
            }
        }
        describe_env(w, c, pod);
        let mut mounts = c.volume_mounts.clone().unwrap_or_default();
        w.w(2, if mounts.is_empty() { "Mounts:\t<none>\n" } else { "Mounts:\n" });
        mounts.sort_by(|a, b| a.mount_path.cmp(&b.mount_path));
        for m in mounts {
            let mut flags = vec![if m.read_only == Some(true) { "ro".to_string() } else { "rw".to_string() }];
            if !s(&m.sub_path).is_empty() {
                flags.push(format!("path={:?}", s(&m.sub_path)));
            }
            w.w(3, &format!("{} from {} ({})\n", m.mount_path, m.name, flags.join(",")));
        }
        container_timeline(w, timeline, &c.name, tz, now);
    }
}

/// Go's zero `time.Time` as RFC 1123Z, what kubectl prints for an unset time.
const ZERO_TIME: &str = "Mon, 01 Jan 0001 00:00:00 +0000";

fn time(t: &Option<Time>, tz: &TimeZone) -> String {
    t.as_ref().map_or_else(|| ZERO_TIME.to_string(), |t| rfc1123z(t.0, tz))
}

/// kubectl's `describeStatus`.
fn describe_state(w: &mut Doc, name: &str, state: Option<&ContainerState>, tz: &TimeZone) {
    let state = state.cloned().unwrap_or_default();
    if let Some(r) = &state.running {
        w.w(2, &format!("{name}:\tRunning\n"));
        w.w(3, &format!("Started:\t{}\n", time(&r.started_at, tz)));
    } else if let Some(wt) = &state.waiting {
        w.w(2, &format!("{name}:\tWaiting\n"));
        if !s(&wt.reason).is_empty() {
            w.w(3, &format!("Reason:\t{}\n", s(&wt.reason)));
        }
    } else if let Some(t) = &state.terminated {
        w.w(2, &format!("{name}:\tTerminated\n"));
        if !s(&t.reason).is_empty() {
            w.w(3, &format!("Reason:\t{}\n", s(&t.reason)));
        }
        if !s(&t.message).is_empty() {
            w.w(3, &format!("Message:\t{}\n", s(&t.message)));
        }
        w.w(3, &format!("Exit Code:\t{}\n", t.exit_code));
        if let Some(sig) = t.signal.filter(|&sig| sig > 0) {
            w.w(3, &format!("Signal:\t{sig}\n"));
        }
        w.w(3, &format!("Started:\t{}\n", time(&t.started_at, tz)));
        w.w(3, &format!("Finished:\t{}\n", time(&t.finished_at, tz)));
    } else {
        w.w(2, &format!("{name}:\tWaiting\n"));
    }
}

fn describe_resources(w: &mut Doc, r: Option<&ResourceRequirements>) {
    let Some(r) = r else { return };
    for (title, list) in [("Limits", &r.limits), ("Requests", &r.requests)] {
        let Some(list) = list.as_ref().filter(|l| !l.is_empty()) else { continue };
        w.w(2, &format!("{title}:\n"));
        for (name, q) in list {
            w.w(3, &format!("{name}:\t{}\n", q.0));
        }
    }
}

/// kubectl's `DescribeProbe` one-liner, with the API server's defaults for unset fields.
pub(crate) fn describe_probe(p: &Probe) -> String {
    let attrs = format!(
        "delay={}s timeout={}s period={}s #success={} #failure={}",
        p.initial_delay_seconds.unwrap_or(0),
        p.timeout_seconds.unwrap_or(1),
        p.period_seconds.unwrap_or(10),
        p.success_threshold.unwrap_or(1),
        p.failure_threshold.unwrap_or(3)
    );
    let port = |p: &IntOrString| match p {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    if let Some(e) = &p.exec {
        format!("exec [{}] {attrs}", e.command.clone().unwrap_or_default().join(" "))
    } else if let Some(h) = &p.http_get {
        let scheme = h.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
        let host = match (s(&h.host), port(&h.port)) {
            (host, port) if port.is_empty() => host.to_string(),
            (host, port) if host.contains(':') => format!("[{host}]:{port}"),
            (host, port) => format!("{host}:{port}"),
        };
        let path = match s(&h.path) {
            p if !p.is_empty() && !p.starts_with('/') => format!("/{p}"),
            p => p.to_string(),
        };
        format!("http-get {scheme}://{host}{path} {attrs}")
    } else if let Some(t) = &p.tcp_socket {
        format!("tcp-socket {}:{} {attrs}", s(&t.host), port(&t.port))
    } else if let Some(g) = &p.grpc {
        format!("grpc <pod>:{} {} {attrs}", g.port, s(&g.service))
    } else {
        format!("unknown {attrs}")
    }
}

/// kubectl's `describeContainerEnvFrom` and `describeContainerEnvVars`.
fn describe_env(w: &mut Doc, c: &Container, pod: &Pod) {
    if let Some(from) = c.env_from.as_ref().filter(|f| !f.is_empty()) {
        w.w(2, "Environment Variables from:\n");
        for e in from {
            let (kind, name, optional) = match (&e.config_map_ref, &e.secret_ref) {
                (Some(r), _) => ("ConfigMap", r.name.clone(), r.optional),
                (None, Some(r)) => ("Secret", r.name.clone(), r.optional),
                (None, None) => ("", String::new(), None),
            };
            let optional = optional.unwrap_or(false);
            match s(&e.prefix) {
                "" => w.w(3, &format!("{name}\t{kind}\tOptional: {optional}\n")),
                p => w.w(3, &format!("{name}\t{kind} with prefix '{p}'\tOptional: {optional}\n")),
            }
        }
    }
    let env = c.env.clone().unwrap_or_default();
    w.w(2, if env.is_empty() { "Environment:\t<none>\n" } else { "Environment:\n" });
    for e in &env {
        let Some(from) = &e.value_from else {
            for (i, line) in s(&e.value).split('\n').enumerate() {
                match i {
                    0 => w.w(3, &format!("{}:\t{line}\n", e.name)),
                    _ => w.w(3, &format!("\t{line}\n")),
                }
            }
            continue;
        };
        if let Some(f) = &from.field_ref {
            let v = field_value(pod, &f.field_path);
            w.w(3, &format!("{}:\t{v} ({}:{})\n", e.name, s(&f.api_version), f.field_path));
        } else if let Some(r) = &from.resource_field_ref {
            w.w(3, &format!("{}:\t{} ({})\n", e.name, resource_value(c, &r.resource), r.resource));
        } else if let Some(k) = &from.secret_key_ref {
            let optional = k.optional.unwrap_or(false);
            let line = format!("<set to the key '{}' in secret '{}'>\tOptional: {optional}", k.key, k.name);
            w.w(3, &format!("{}:\t{line}\n", e.name));
        } else if let Some(k) = &from.config_map_key_ref {
            let optional = k.optional.unwrap_or(false);
            let line =
                format!("<set to the key '{}' of config map '{}'>\tOptional: {optional}", k.key, k.name);
            w.w(3, &format!("{}:\t{line}\n", e.name));
        }
    }
}

/// The value a downward-API field path resolves to for this pod (kubectl's `EnvValueRetriever`).
fn field_value(pod: &Pod, path: &str) -> String {
    let meta = &pod.metadata;
    let status = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let keyed = |prefix: &str, map: &Option<std::collections::BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
    };
    if let Some(v) = keyed("metadata.labels['", &meta.labels)
        .or_else(|| keyed("metadata.annotations['", &meta.annotations))
    {
        return v;
    }
    match path {
        "metadata.name" => s(&meta.name).to_string(),
        "metadata.namespace" => s(&meta.namespace).to_string(),
        "metadata.uid" => s(&meta.uid).to_string(),
        "spec.nodeName" => s(&spec.node_name).to_string(),
        "spec.serviceAccountName" => s(&spec.service_account_name).to_string(),
        "status.hostIP" => s(&status.host_ip).to_string(),
        "status.podIP" => s(&status.pod_ip).to_string(),
        "status.podIPs" => {
            status.pod_ips.iter().flatten().map(|ip| ip.ip.as_str()).collect::<Vec<_>>().join(",")
        }
        _ => String::new(),
    }
}

fn resource_value(c: &Container, resource: &str) -> String {
    let r = c.resources.clone().unwrap_or_default();
    let (list, name) = match resource.split_once('.') {
        Some(("limits", name)) => (r.limits, name),
        Some(("requests", name)) => (r.requests, name),
        _ => (None, resource),
    };
    let v = list.and_then(|l| l.get(name).map(|q| q.0.clone())).unwrap_or_else(|| "0".to_string());
    match (v.as_str(), resource) {
        ("0", "limits.cpu" | "limits.memory") => "node allocatable".to_string(),
        _ => v,
    }
}

/// kubectl's `describeVolumes` for the volume types crilet runs (others print `<unknown>`).
pub(crate) fn describe_volumes(w: &mut Doc, volumes: &[Volume]) {
    if volumes.is_empty() {
        w.w(0, "Volumes:\t<none>\n");
        return;
    }
    w.w(0, "Volumes:\n");
    for v in volumes {
        w.w(1, &format!("{}:\n", v.name));
        if let Some(h) = &v.host_path {
            w.w(2, "Type:\tHostPath (bare host directory volume)\n");
            w.w(2, &format!("Path:\t{}\n", h.path));
            w.w(2, &format!("HostPathType:\t{}\n", h.type_.as_deref().unwrap_or("<none>")));
        } else if let Some(e) = &v.empty_dir {
            w.w(2, "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n");
            w.w(2, &format!("Medium:\t{}\n", s(&e.medium)));
            let limit = e.size_limit.as_ref().map(|q| q.0.clone()).filter(|q| !q.is_empty() && q != "0");
            w.w(2, &format!("SizeLimit:\t{}\n", limit.as_deref().unwrap_or("<unset>")));
        } else if let Some(c) = &v.config_map {
            w.w(2, "Type:\tConfigMap (a volume populated by a ConfigMap)\n");
            w.w(2, &format!("Name:\t{}\n", c.name));
            w.w(2, &format!("Optional:\t{}\n", c.optional.unwrap_or(false)));
        } else if let Some(c) = &v.secret {
            w.w(2, "Type:\tSecret (a volume populated by a Secret)\n");
            w.w(2, &format!("SecretName:\t{}\n", s(&c.secret_name)));
            w.w(2, &format!("Optional:\t{}\n", c.optional.unwrap_or(false)));
        } else if let Some(d) = &v.downward_api {
            w.w(2, "Type:\tDownwardAPI (a volume populated by information about the pod)\n");
            w.w(2, "Items:\n");
            for item in d.items.iter().flatten() {
                if let Some(f) = &item.field_ref {
                    w.w(3, &format!("{} -> {}\n", f.field_path, item.path));
                }
                if let Some(r) = &item.resource_field_ref {
                    w.w(3, &format!("{} -> {}\n", r.resource, item.path));
                }
            }
        } else {
            w.w(2, "<unknown>\n");
        }
    }
}
