//! `crilet describe pod`: a port of kubectl's `describePod` layout (same sections, order, labels
//! and alignment), plus what only crilet knows: the manifest file, the manifest's warnings, and
//! (only while it is so) that the container runtime is unavailable, and the lifecycle timeline
//! the agent recorded (`describe_timeline.rs`). Container sections live in `describe_containers.rs`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::{Pod, Toleration};

use super::describe_containers::{describe_containers, describe_volumes};
use super::describe_timeline::pod_termination;
use super::events::{EventView, interval};
use super::format::{rfc1123z, s, since};
use super::tabwriter::{self, DESCRIBE};
use crate::proto::{RuntimeHealth, TimelineStep};

/// Everything `describe` shows about one pod.
pub(crate) struct DescribeInput<'a> {
    pub pod: &'a Pod,
    pub manifest_file: &'a str,
    pub warnings: &'a [String],
    pub events: &'a [EventView],
    /// The runtime's health as the agent sees it (`None`: the agent did not say).
    pub runtime: Option<&'a RuntimeHealth>,
    /// The lifecycle steps the agent recorded (the pod's, then each container's).
    pub timeline: &'a [TimelineStep],
}

/// Text under construction, written like kubectl's `PrefixWriter` (two spaces per level, cells
/// separated by tabs) and aligned at the end.
#[derive(Default)]
pub(crate) struct Doc {
    text: String,
}

impl Doc {
    /// Writes `s` at indentation `level` (the prefix goes before `s` only, as in kubectl).
    pub(crate) fn w(&mut self, level: usize, s: &str) {
        for _ in 0..level {
            self.text.push_str("  ");
        }
        self.text.push_str(s);
    }

    /// The text so far, not aligned.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }
}

/// kubectl's annotations column is cut at this many characters.
const MAX_ANNOTATION_LEN: usize = 140;

/// The whole `describe pod` text.
pub(crate) fn describe_pod(input: &DescribeInput<'_>, now: Timestamp, tz: &TimeZone) -> String {
    let pod = input.pod;
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let mut w = Doc::default();
    w.w(0, &format!("Name:\t{}\n", s(&meta.name)));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta.namespace)));
    if let Some(p) = spec.priority {
        w.w(0, &format!("Priority:\t{p}\n"));
    }
    for (label, v) in [
        ("Priority Class Name", &spec.priority_class_name),
        ("Runtime Class Name", &spec.runtime_class_name),
        ("Service Account", &spec.service_account_name),
    ] {
        if !s(v).is_empty() {
            w.w(0, &format!("{label}:\t{}\n", s(v)));
        }
    }
    match s(&spec.node_name) {
        "" => w.w(0, "Node:\t<none>\n"),
        node => w.w(0, &format!("Node:\t{node}/{}\n", s(&status.host_ip))),
    }
    if let Some(t) = &status.start_time {
        w.w(0, &format!("Start Time:\t{}\n", rfc1123z(t.0, tz)));
    }
    w.w(0, &format!("Manifest:\t{}\n", or_none(input.manifest_file)));
    labels(&mut w, "Labels", meta.labels.as_ref());
    annotations(&mut w, "Annotations", meta.annotations.as_ref());
    let phase = s(&status.phase);
    match &meta.deletion_timestamp {
        Some(t) if phase != "Failed" && phase != "Succeeded" => {
            w.w(0, &format!("Status:\tTerminating (lasts {})\n", since(Some(t.0), now)));
            let grace = meta.deletion_grace_period_seconds.or(spec.termination_grace_period_seconds);
            w.w(0, &format!("Termination Grace Period:\t{}s\n", grace.unwrap_or(30)));
        }
        _ => w.w(0, &format!("Status:\t{phase}\n")),
    }
    for (label, v) in [("Reason", &status.reason), ("Message", &status.message)] {
        if !s(v).is_empty() {
            w.w(0, &format!("{label}:\t{}\n", s(v)));
        }
    }
    // Right under the status it qualifies: that status is the last one observed.
    if let Some(h) = input.runtime.filter(|h| !h.available) {
        let since_text = match h.since.parse::<Timestamp>() {
            Ok(t) => format!("{} (since {})", since(Some(t), now), rfc1123z(t, tz)),
            Err(_) => "<unknown>".to_string(),
        };
        w.w(
            0,
            &format!("Runtime:\tUnavailable for {since_text}: {}; status as last observed\n", h.last_error),
        );
    }
    w.w(0, &format!("IP:\t{}\n", s(&status.pod_ip)));
    let ips = status.pod_ips.clone().unwrap_or_default();
    if ips.is_empty() {
        w.w(0, "IPs:\t<none>\n");
    } else {
        w.w(0, "IPs:\n");
        for ip in ips {
            w.w(1, &format!("IP:\t{}\n", ip.ip));
        }
    }
    if let Some(owner) = meta.owner_references.iter().flatten().find(|o| o.controller == Some(true)) {
        w.w(0, &format!("Controlled By:\t{}/{}\n", owner.kind, owner.name));
    }
    if !s(&status.nominated_node_name).is_empty() {
        w.w(0, &format!("NominatedNodeName:\t{}\n", s(&status.nominated_node_name)));
    }
    // Tab-free lines, just above the containers, so the fields above keep their alignment.
    pod_termination(&mut w, input.timeline, tz, now);
    let init = spec.init_containers.clone().unwrap_or_default();
    if !init.is_empty() {
        let statuses = status.init_container_statuses.clone().unwrap_or_default();
        describe_containers(&mut w, "Init Containers", &init, &statuses, pod, (input.timeline, now), tz);
    }
    let statuses = status.container_statuses.clone().unwrap_or_default();
    describe_containers(&mut w, "Containers", &spec.containers, &statuses, pod, (input.timeline, now), tz);
    let conditions = status.conditions.clone().unwrap_or_default();
    let gates = spec.readiness_gates.clone().unwrap_or_default();
    if !gates.is_empty() {
        w.w(0, "Readiness Gates:\n  Type\tStatus\n");
        for g in gates {
            let st = conditions.iter().find(|c| c.type_ == g.condition_type).map_or("<none>", |c| &c.status);
            w.w(1, &format!("{} \t{st} \n", g.condition_type));
        }
    }
    if !conditions.is_empty() {
        w.w(0, "Conditions:\n  Type\tStatus\n");
        for c in &conditions {
            w.w(1, &format!("{} \t{} \n", c.type_, c.status));
        }
    }
    describe_volumes(&mut w, &spec.volumes.clone().unwrap_or_default());
    let qos = status.qos_class.clone().unwrap_or_else(|| qos_class(pod));
    w.w(0, &format!("QoS Class:\t{qos}\n"));
    labels(&mut w, "Node-Selectors", spec.node_selector.as_ref());
    tolerations(&mut w, &spec.tolerations.clone().unwrap_or_default());
    if input.warnings.is_empty() {
        w.w(0, "Warnings:\t<none>\n");
    } else {
        w.w(0, "Warnings:\n");
        for warning in input.warnings {
            w.w(1, &format!("{warning}\n"));
        }
    }
    events(&mut w, input.events, now);
    tabwriter::align(&w.text, DESCRIBE)
}

fn or_none(v: &str) -> &str {
    if v.is_empty() { "<none>" } else { v }
}

/// kubectl's `printLabelsMultiline`.
fn labels(w: &mut Doc, title: &str, labels: Option<&BTreeMap<String, String>>) {
    w.w(0, &format!("{title}:\t"));
    let labels = labels.cloned().unwrap_or_default();
    if labels.is_empty() {
        w.w(0, "<none>\n");
    }
    for (i, (k, v)) in labels.iter().enumerate() {
        if i != 0 {
            w.w(0, "\t");
        }
        w.w(0, &format!("{k}={v}\n"));
    }
}

/// kubectl's `printAnnotationsMultiline`: long or multi-line values go on their own lines.
fn annotations(w: &mut Doc, title: &str, annotations: Option<&BTreeMap<String, String>>) {
    w.w(0, &format!("{title}:\t"));
    let skip = "kubectl.kubernetes.io/last-applied-configuration";
    let items: Vec<_> =
        annotations.iter().flat_map(|a| a.iter()).filter(|(k, _)| k.as_str() != skip).collect();
    if items.is_empty() {
        w.w(0, "<none>\n");
    }
    for (i, (k, v)) in items.into_iter().enumerate() {
        if i != 0 {
            w.w(0, "\t");
        }
        let v = v.strip_suffix('\n').unwrap_or(v);
        if v.len() + k.len() + 2 > MAX_ANNOTATION_LEN || v.contains('\n') {
            w.w(0, &format!("{k}:\n"));
            for line in v.split('\n') {
                w.w(0, &format!("\t  {}\n", shorten(line, MAX_ANNOTATION_LEN - 2)));
            }
        } else {
            w.w(0, &format!("{k}: {v}\n"));
        }
    }
}

fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// kubectl's `printPodTolerationsMultiline`.
fn tolerations(w: &mut Doc, list: &[Toleration]) {
    w.w(0, "Tolerations:\t");
    if list.is_empty() {
        w.w(0, "<none>\n");
    }
    let mut list = list.to_vec();
    list.sort_by(|a, b| a.key.cmp(&b.key));
    for (i, t) in list.iter().enumerate() {
        if i != 0 {
            w.w(0, "\t");
        }
        let mut line = s(&t.key).to_string();
        if !s(&t.value).is_empty() {
            line.push_str(&format!("={}", s(&t.value)));
        }
        if !s(&t.effect).is_empty() {
            line.push_str(&format!(":{}", s(&t.effect)));
        }
        if s(&t.operator) == "Exists" && s(&t.value).is_empty() {
            line.push_str(if line.is_empty() { "op=Exists" } else { " op=Exists" });
        }
        if let Some(secs) = t.toleration_seconds {
            line.push_str(&format!(" for {secs}s"));
        }
        w.w(0, &format!("{line}\n"));
    }
}

/// kubectl's `DescribeEvents`, with `From` = `crilet`.
pub(crate) fn events(w: &mut Doc, events: &[EventView], now: Timestamp) {
    if events.is_empty() {
        w.w(0, "Events:\t<none>\n");
        return;
    }
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.time);
    w.w(0, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n");
    w.w(1, "----\t------\t----\t----\t-------\n");
    for e in &events {
        w.w(1, &format!("{}\t{}\t{}\tcrilet\t{}\n", e.kind, e.reason, interval(e, now), e.message.trim()));
    }
}

/// The pod's QoS class as the API server computes it when `status.qosClass` is unset.
pub(crate) fn qos_class(pod: &Pod) -> String {
    crate::status::qos_class(pod).to_string()
}

#[cfg(test)]
#[path = "describe_tests.rs"]
mod tests;
