//! Pure conversions from CRI status messages to the domain's observed types.

use std::collections::BTreeMap;

use super::api;
use crate::model::{ContainerState, ObservedContainer, ObservedSandbox, SandboxState, keys};

fn to_btree(m: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A sandbox from its `PodSandboxStatus`.
pub fn sandbox_from_status(s: &api::PodSandboxStatus) -> ObservedSandbox {
    let mut ips = Vec::new();
    if let Some(net) = &s.network {
        if !net.ip.is_empty() {
            ips.push(net.ip.clone());
        }
        ips.extend(net.additional_ips.iter().map(|ip| ip.ip.clone()).filter(|ip| !ip.is_empty()));
    }
    let host_network = s
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
    ObservedSandbox {
        id: s.id.clone(),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        state: if s.state == api::PodSandboxState::SandboxReady as i32 {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        },
        created_at: s.created_at,
        ips,
        host_network,
        labels: to_btree(&s.labels),
        annotations: to_btree(&s.annotations),
    }
}

/// A container from its `ContainerStatus` (R1.16: hash and restart count from annotations,
/// missing or invalid → "" / 0, never an error).
pub fn container_from_status(s: &api::ContainerStatus, sandbox_id: &str) -> ObservedContainer {
    let state = match api::ContainerState::try_from(s.state) {
        Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    };
    let name = s
        .labels
        .get(keys::CONTAINER_NAME)
        .cloned()
        .or_else(|| s.metadata.as_ref().map(|m| m.name.clone()))
        .unwrap_or_default();
    ObservedContainer {
        id: s.id.clone(),
        sandbox_id: sandbox_id.to_string(),
        name,
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        state,
        created_at: s.created_at,
        started_at: s.started_at,
        finished_at: s.finished_at,
        exit_code: s.exit_code,
        reason: s.reason.clone(),
        message: s.message.clone(),
        image: s.image.as_ref().map(|i| i.image.clone()).unwrap_or_default(),
        image_ref: s.image_ref.clone(),
        hash: s.annotations.get(keys::CONTAINER_HASH).cloned().unwrap_or_default(),
        restart_count: s
            .annotations
            .get(keys::CONTAINER_RESTART_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        log_path: s.log_path.clone(),
        annotations: to_btree(&s.annotations),
        stop_signal: super::signal::name_of(s.stop_signal).map(str::to_string),
        resources: s.resources.as_ref().and_then(|r| r.linux.clone()),
        user: s.user.as_ref().and_then(|u| u.linux.clone()),
    }
}
