//! (placeholder until the status module lands)
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

use crate::model::{DesiredPod, ObservedPod, ProbeState};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartError {
    pub reason: String,
    pub message: String,
}

pub struct StatusInput<'a> {
    pub desired: &'a DesiredPod,
    pub observed: &'a ObservedPod,
    pub probes: &'a BTreeMap<String, ProbeState>,
    pub start_errors: &'a BTreeMap<String, StartError>,
    pub terminating: bool,
    pub external_conditions: &'a [PodCondition],
    pub previous: Option<&'a PodStatus>,
    pub termination_messages: &'a BTreeMap<String, String>,
    pub host_ip: Option<&'a str>,
    pub now: jiff::Timestamp,
}

pub fn compute(_input: &StatusInput) -> PodStatus {
    PodStatus::default()
}
