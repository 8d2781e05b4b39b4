//! The `crilet get pods` table: a port of kubectl's `printPod` (READY, STATUS, RESTARTS, AGE and
//! the wide columns), kept pure so each kubectl rule is a table-driven test case; plus the
//! warning printed on stderr while the agent cannot reach the container runtime.

use std::collections::HashMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};

use super::format::{s, since, ts};
use super::tabwriter::{self, TABLE};
use crate::proto::RuntimeHealth;

/// One row of the pods table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodRow {
    pub namespace: String,
    pub name: String,
    pub ready: String,
    pub status: String,
    pub restarts: String,
    pub age: String,
    pub ip: String,
    pub node: String,
    pub nominated_node: String,
    pub readiness_gates: String,
}

/// READY, STATUS and RESTARTS exactly as kubectl's `printPod` computes them.
pub(crate) fn pod_row(pod: &Pod, now: Timestamp) -> PodRow {
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let init_statuses = status.init_container_statuses.clone().unwrap_or_default();
    let statuses = status.container_statuses.clone().unwrap_or_default();
    let conditions = status.conditions.clone().unwrap_or_default();
    let init_specs = spec.init_containers.clone().unwrap_or_default();

    let mut total = spec.containers.len();
    let mut ready = 0;
    let mut restarts = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut sidecar_restarts = 0;
    let mut last_sidecar_restart: Option<Timestamp> = None;

    let phase = s(&status.phase).to_string();
    let mut reason = if s(&status.reason).is_empty() { phase.clone() } else { s(&status.reason).to_string() };
    if conditions.iter().any(|c| c.type_ == "PodScheduled" && s(&c.reason) == "SchedulingGated") {
        reason = "SchedulingGated".to_string();
    }

    let sidecars: HashMap<&str, bool> =
        init_specs.iter().map(|c| (c.name.as_str(), c.restart_policy.as_deref() == Some("Always"))).collect();
    total += sidecars.values().filter(|&&sidecar| sidecar).count();

    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        restarts += c.restart_count;
        latest(&mut last_restart, last_finished(c));
        let sidecar = sidecars.get(c.name.as_str()).copied().unwrap_or(false);
        if sidecar {
            sidecar_restarts += c.restart_count;
            latest(&mut last_sidecar_restart, last_finished(c));
        }
        let state = c.state.clone().unwrap_or_default();
        match (&state.terminated, &state.waiting) {
            (Some(t), _) if t.exit_code == 0 => continue,
            _ if sidecar && c.started == Some(true) => {
                if c.ready {
                    ready += 1;
                }
                continue;
            }
            (Some(t), _) => {
                reason = match (s(&t.reason), t.signal.unwrap_or(0)) {
                    ("", 0) => format!("Init:ExitCode:{}", t.exit_code),
                    ("", signal) => format!("Init:Signal:{signal}"),
                    (r, _) => format!("Init:{r}"),
                };
            }
            (None, Some(w)) if !s(&w.reason).is_empty() && s(&w.reason) != "PodInitializing" => {
                reason = format!("Init:{}", s(&w.reason));
            }
            _ => reason = format!("Init:{i}/{}", init_specs.len()),
        }
        initializing = true;
        break;
    }

    let initialized = conditions.iter().any(|c| c.type_ == "Initialized" && c.status == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in statuses.iter().rev() {
            restarts += c.restart_count;
            latest(&mut last_restart, last_finished(c));
            let state = c.state.clone().unwrap_or_default();
            if let Some(w) = state.waiting.as_ref().filter(|w| !s(&w.reason).is_empty()) {
                reason = s(&w.reason).to_string();
            } else if let Some(t) = &state.terminated {
                reason = match (s(&t.reason), t.signal.unwrap_or(0)) {
                    ("", 0) => format!("ExitCode:{}", t.exit_code),
                    ("", signal) => format!("Signal:{signal}"),
                    (r, _) => r.to_string(),
                };
            } else if c.ready && state.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        // At least one container still runs: the pod is not "Completed".
        if reason == "Completed" && has_running {
            let pod_ready = conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_string();
        }
    }

    if pod.metadata.deletion_timestamp.is_some() {
        if s(&status.reason) == "NodeLost" {
            reason = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_string();
        }
    }

    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };
    // kubectl ages a pod by creationTimestamp only; crilet falls back to startTime so a pod whose
    // metadata lacks a creation time still shows an age.
    let created = ts(pod.metadata.creation_timestamp.as_ref()).or(ts(status.start_time.as_ref()));
    let gates = spec.readiness_gates.clone().unwrap_or_default();
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_gates = gates
            .iter()
            .filter(|g| {
                conditions.iter().find(|c| c.type_ == g.condition_type).is_some_and(|c| c.status == "True")
            })
            .count();
        format!("{true_gates}/{}", gates.len())
    };
    let ip = status.pod_ips.iter().flatten().next().map(|ip| ip.ip.clone()).unwrap_or_default();
    PodRow {
        namespace: s(&pod.metadata.namespace).to_string(),
        name: s(&pod.metadata.name).to_string(),
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts,
        age: since(created, now),
        ip: or_none(ip),
        node: or_none(s(&spec.node_name).to_string()),
        nominated_node: or_none(s(&status.nominated_node_name).to_string()),
        readiness_gates,
    }
}

/// The pods table, aligned like kubectl's (`-A` adds NAMESPACE first; wide adds four columns).
pub(crate) fn render_pod_table(rows: &[PodRow], all_namespaces: bool, wide: bool) -> String {
    let mut text = String::new();
    let mut push = |cells: Vec<&str>| {
        text.push_str(&cells.join("\t"));
        text.push('\n');
    };
    let header = |ns: &'static str| {
        let mut h = vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
        if all_namespaces {
            h.insert(0, ns);
        }
        if wide {
            h.extend(["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]);
        }
        h
    };
    push(header("NAMESPACE"));
    for r in rows {
        let mut cells = vec![r.name.as_str(), &r.ready, &r.status, &r.restarts, &r.age];
        if all_namespaces {
            cells.insert(0, &r.namespace);
        }
        if wide {
            cells.extend([r.ip.as_str(), &r.node, &r.nominated_node, &r.readiness_gates]);
        }
        push(cells);
    }
    tabwriter::align(&text, TABLE)
}

/// The line `get pods` prints on stderr while the agent cannot reach the container runtime, in
/// the shape of the API-server warnings kubectl prints there (`Warning: ...`): stdout keeps
/// exactly the table or document a script parses, and the reader still learns that the
/// statuses on it are the last ones observed. `None` while the runtime answers (or the agent
/// does not say).
pub(crate) fn runtime_warning(health: Option<&RuntimeHealth>, now: Timestamp) -> Option<String> {
    let h = health.filter(|h| !h.available)?;
    let for_how_long = since(h.since.parse().ok(), now);
    Some(format!(
        "Warning: the container runtime has been unavailable for {for_how_long}: {}; pod statuses are the \
         last ones observed, running containers are left alone and the agent retries",
        h.last_error
    ))
}

fn or_none(v: String) -> String {
    if v.is_empty() { "<none>".to_string() } else { v }
}

fn last_finished(c: &ContainerStatus) -> Option<Timestamp> {
    c.last_state
        .as_ref()
        .and_then(|s: &ContainerState| s.terminated.as_ref())
        .and_then(|t| ts(t.finished_at.as_ref()))
}

fn latest(acc: &mut Option<Timestamp>, t: Option<Timestamp>) {
    if let Some(t) = t {
        if acc.is_none_or(|a| a < t) {
            *acc = Some(t);
        }
    }
}

#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
