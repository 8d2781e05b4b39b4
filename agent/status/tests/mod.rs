//! Fixture builders for the status tests: `pod()` describes the spec, `observed()` the runtime
//! (instances are added oldest first), `Extra` the remaining `StatusInput` fields.

mod conditions;
mod containers;
mod misc;
mod phase;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Pod, PodCondition, PodReadinessGate, PodSpec, PodStatus, Probe, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{StartError, StatusInput, compute};
use crate::model::{
    ContainerState, DesiredPod, ObservedContainer, ObservedPod, ObservedSandbox, PodKey, ProbeState,
    SandboxState,
};

/// The fixtures' epoch (ns): 2023-11-14T22:13:20Z.
pub(super) const T0: i64 = 1_700_000_000_000_000_000;
const SECOND: i64 = 1_000_000_000;

/// T0 + `secs` seconds as an API time.
pub(super) fn at(secs: i64) -> Time {
    Time(jiff::Timestamp::from_nanosecond(i128::from(T0 + secs * SECOND)).expect("fixture time in range"))
}

/// The `now` every test uses unless it says otherwise.
pub(super) fn now() -> jiff::Timestamp {
    at(1000).0
}

pub(super) fn image(name: &str) -> String {
    format!("registry.local/{name}:1")
}

pub(super) struct PodBuilder(Pod);

/// A pod with `restartPolicy: Always` and no containers yet.
pub(super) fn pod() -> PodBuilder {
    PodBuilder(Pod {
        spec: Some(PodSpec { restart_policy: Some("Always".into()), ..Default::default() }),
        ..Default::default()
    })
}

fn container(name: &str) -> Container {
    Container { name: name.into(), image: Some(image(name)), ..Default::default() }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }
    fn find(&mut self, name: &str) -> &mut Container {
        let spec = self.spec();
        let init = spec.init_containers.get_or_insert_with(Vec::new);
        init.iter_mut()
            .chain(spec.containers.iter_mut())
            .find(|c| c.name == name)
            .expect("container in fixture")
    }
    pub fn init(mut self, name: &str) -> Self {
        self.spec().init_containers.get_or_insert_with(Vec::new).push(container(name));
        self
    }
    pub fn sidecar(mut self, name: &str) -> Self {
        let c = Container { restart_policy: Some("Always".into()), ..container(name) };
        self.spec().init_containers.get_or_insert_with(Vec::new).push(c);
        self
    }
    pub fn app(mut self, name: &str) -> Self {
        self.spec().containers.push(container(name));
        self
    }
    pub fn policy(mut self, policy: &str) -> Self {
        self.spec().restart_policy = Some(policy.into());
        self
    }
    pub fn startup_probe(mut self, name: &str) -> Self {
        self.find(name).startup_probe = Some(Probe::default());
        self
    }
    pub fn readiness_probe(mut self, name: &str) -> Self {
        self.find(name).readiness_probe = Some(Probe::default());
        self
    }
    pub fn gate(mut self, condition_type: &str) -> Self {
        let gates = self.spec().readiness_gates.get_or_insert_with(Vec::new);
        gates.push(PodReadinessGate { condition_type: condition_type.into() });
        self
    }
    pub fn host_network(mut self) -> Self {
        self.spec().host_network = Some(true);
        self
    }
    pub fn resources(mut self, name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Self {
        let list = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty())
                .then(|| pairs.iter().map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned()))).collect())
        };
        self.find(name).resources =
            Some(ResourceRequirements { requests: list(requests), limits: list(limits), claims: None });
        self
    }
    pub fn spec_pod(self) -> Pod {
        self.0
    }
    pub fn build(self) -> DesiredPod {
        DesiredPod {
            key: PodKey::new("default", "web"),
            uid: "uid-1".into(),
            pod: Arc::new(self.0),
            source: crate::model::PodSource::File("/etc/crilet/manifests/web.yaml".into()),
            doc: 0,
            warnings: Vec::new(),
        }
    }
}

/// Runtime state; sandboxes and containers are added oldest first. Container IDs are
/// `<name>-<restartCount>`, sandbox IDs `sb-<n>`; instance `k` of the whole pod is created at
/// T0 + k s, started 1 s later and (if exited) finished 2 s after creation.
pub(super) struct ObservedBuilder {
    pod: ObservedPod,
    seq: i64,
}

pub(super) fn observed() -> ObservedBuilder {
    ObservedBuilder { pod: ObservedPod { uid: "uid-1".into(), ..Default::default() }, seq: 0 }
}

impl ObservedBuilder {
    fn sandbox(mut self, state: SandboxState, ips: &[&str]) -> Self {
        self.seq += 1;
        let sb = ObservedSandbox {
            id: format!("sb-{}", self.pod.sandboxes.len()),
            attempt: u32::try_from(self.pod.sandboxes.len()).expect("few sandboxes"),
            state,
            created_at: T0 + self.seq * SECOND,
            ips: ips.iter().map(|s| (*s).to_owned()).collect(),
            host_network: false,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        };
        self.pod.sandboxes.insert(0, sb);
        self
    }
    pub fn sandbox_ready(self, ip: &str) -> Self {
        self.sandbox(SandboxState::Ready, &[ip])
    }
    pub fn sandbox_ips(self, ips: &[&str]) -> Self {
        self.sandbox(SandboxState::Ready, ips)
    }
    /// A sandbox that is not ready; its IP must not be reported.
    pub fn sandbox_not_ready(self) -> Self {
        self.sandbox(SandboxState::NotReady, &["10.0.0.1"])
    }
    /// A ready host-network sandbox (no IP of its own).
    pub fn sandbox_host(mut self) -> Self {
        self = self.sandbox(SandboxState::Ready, &[]);
        self.pod.sandboxes[0].host_network = true;
        self
    }
    fn add(mut self, name: &str, state: ContainerState, exit_code: i32) -> Self {
        self.seq += 1;
        let restart_count = self.pod.containers.iter().filter(|c| c.name == name).count();
        let created_at = T0 + self.seq * SECOND;
        let exited = state == ContainerState::Exited;
        let reason = match (exited, exit_code) {
            (false, _) => "",
            (true, 0) => "Completed",
            (true, _) => "Error",
        };
        self.pod.containers.insert(
            0,
            ObservedContainer {
                id: format!("{name}-{restart_count}"),
                sandbox_id: self.pod.sandboxes.first().map(|s| s.id.clone()).unwrap_or_default(),
                name: name.into(),
                attempt: u32::try_from(restart_count).expect("few restarts"),
                state,
                created_at,
                started_at: if state == ContainerState::Created { 0 } else { created_at + SECOND },
                finished_at: if exited { created_at + 2 * SECOND } else { 0 },
                exit_code,
                reason: reason.into(),
                message: String::new(),
                image: image(name),
                image_ref: format!("registry.local/{name}@sha256:{:064x}", 1),
                hash: "abc".into(),
                restart_count: u32::try_from(restart_count).expect("few restarts"),
                log_path: format!("/var/log/pods/default_web_uid-1/{name}/{restart_count}.log"),
                annotations: BTreeMap::new(),
                stop_signal: None,
                resources: None,
                user: None,
            },
        );
        self
    }
    pub fn running(self, name: &str) -> Self {
        self.add(name, ContainerState::Running, 0)
    }
    pub fn exited(self, name: &str, code: i32) -> Self {
        self.add(name, ContainerState::Exited, code)
    }
    pub fn created(self, name: &str) -> Self {
        self.add(name, ContainerState::Created, 0)
    }
    pub fn unknown(self, name: &str) -> Self {
        self.add(name, ContainerState::Unknown, 0)
    }
    /// Changes the instance added last.
    pub fn with(mut self, f: impl FnOnce(&mut ObservedContainer)) -> Self {
        f(self.pod.containers.first_mut().expect("an instance was added"));
        self
    }
    pub fn build(self) -> ObservedPod {
        self.pod
    }
}

/// The `StatusInput` fields other than the pod and the runtime state.
#[derive(Default)]
pub(super) struct Extra {
    pub probes: BTreeMap<String, ProbeState>,
    pub start_errors: BTreeMap<String, StartError>,
    pub terminating: bool,
    pub external: Vec<PodCondition>,
    pub previous: Option<PodStatus>,
    pub messages: BTreeMap<String, String>,
    pub host_ip: Option<&'static str>,
}

impl Extra {
    pub fn probe(mut self, id: &str, started: Option<bool>, ready: Option<bool>) -> Self {
        self.probes.insert(id.into(), ProbeState { started, ready });
        self
    }
    pub fn start_error(mut self, name: &str, reason: &str, message: &str) -> Self {
        self.start_errors.insert(name.into(), StartError { reason: reason.into(), message: message.into() });
        self
    }
    pub fn external(mut self, type_: &str, status: &str) -> Self {
        self.external.push(PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(at(7)),
            ..Default::default()
        });
        self
    }
    pub fn previous(mut self, status: PodStatus) -> Self {
        self.previous = Some(status);
        self
    }
    pub fn terminating(mut self) -> Self {
        self.terminating = true;
        self
    }
}

pub(super) fn none() -> Extra {
    Extra::default()
}

pub(super) fn run(desired: &DesiredPod, observed: &ObservedPod, extra: &Extra) -> PodStatus {
    compute(&StatusInput {
        desired,
        observed,
        probes: &extra.probes,
        start_errors: &extra.start_errors,
        terminating: extra.terminating,
        external_conditions: &extra.external,
        previous: extra.previous.as_ref(),
        termination_messages: &extra.messages,
        host_ip: extra.host_ip,
        now: now(),
    })
}
