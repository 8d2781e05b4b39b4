//! The `Control` service: registry → proto conversions, the readiness-gate rules for
//! `SetCondition`, and the event stream. Request errors are a typed enum turned into
//! `tonic::Status` here and nowhere else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeCondition, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::warn;

use super::RuntimeInfo;
use crate::model::PodKey;
use crate::proto::{self, control_server::Control};
use crate::registry::{Event, NodeEvent, PodRecord, Registry, RuntimeHealth};

/// Conditions the agent computes itself; an outside controller may not set them.
const AGENT_OWNED: [&str; 6] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
    "InPlaceUpdateReady",
];

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum RequestError {
    #[error("the request names no pod")]
    MissingPod,
    #[error("pods {0:?} not found")]
    PodNotFound(String),
    #[error("the condition type must not be empty")]
    EmptyType,
    #[error("condition {0:?} is owned by the agent; only conditions named in spec.readinessGates can be set")]
    AgentOwned(String),
    #[error("condition status must be True, False or Unknown (or empty to remove it), not {0:?}")]
    BadStatus(String),
    #[error("pod {pod} has no readiness gate for condition {condition:?} (spec.readinessGates: [{gates}])")]
    NotAGate { pod: PodKey, condition: String, gates: String },
    #[error("cannot encode pod {pod} as JSON: {source}")]
    Encode {
        pod: PodKey,
        #[source]
        source: serde_json::Error,
    },
}

impl From<RequestError> for Status {
    fn from(e: RequestError) -> Self {
        let message = e.to_string();
        match e {
            RequestError::PodNotFound(_) => Status::not_found(message),
            RequestError::MissingPod
            | RequestError::EmptyType
            | RequestError::AgentOwned(_)
            | RequestError::BadStatus(_) => Status::invalid_argument(message),
            RequestError::NotAGate { .. } => Status::failed_precondition(message),
            RequestError::Encode { .. } => Status::internal(message),
        }
    }
}

/// The pod a request names (an empty namespace means `default`).
fn pod_key(pod: Option<proto::PodRef>) -> Result<PodKey, RequestError> {
    let pod = pod.filter(|p| !p.name.is_empty()).ok_or(RequestError::MissingPod)?;
    let namespace = if pod.namespace.is_empty() { "default".to_string() } else { pod.namespace };
    Ok(PodKey::new(namespace, pod.name))
}

/// Checks a `SetCondition` request against the pod it names (`None` when there is no such pod).
pub(super) fn check_condition(
    key: &PodKey,
    pod: Option<&Pod>,
    condition: &str,
    status: &str,
) -> Result<(), RequestError> {
    if condition.is_empty() {
        return Err(RequestError::EmptyType);
    }
    if AGENT_OWNED.contains(&condition) {
        return Err(RequestError::AgentOwned(condition.to_string()));
    }
    if !matches!(status, "True" | "False" | "Unknown" | "") {
        return Err(RequestError::BadStatus(status.to_string()));
    }
    let pod = pod.ok_or_else(|| RequestError::PodNotFound(key.name.clone()))?;
    let gates: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .map(|g| g.condition_type.as_str())
        .collect();
    if !gates.contains(&condition) {
        let gates = gates.join(", ");
        return Err(RequestError::NotAGate { pod: key.clone(), condition: condition.to_string(), gates });
    }
    Ok(())
}

fn record_to_proto(key: &PodKey, r: &PodRecord) -> Result<proto::PodRecord, RequestError> {
    let pod_json =
        serde_json::to_string(&r.pod).map_err(|source| RequestError::Encode { pod: key.clone(), source })?;
    Ok(proto::PodRecord { pod_json, manifest_file: r.manifest_file.clone(), warnings: r.warnings.clone() })
}

fn health_to_proto(h: &RuntimeHealth) -> proto::RuntimeHealth {
    proto::RuntimeHealth {
        available: h.available,
        since: h.since.to_string(),
        last_error: h.last_error.clone(),
    }
}

fn event_to_proto(e: &Event) -> proto::Event {
    let mut object = e.pod.to_string();
    if let Some(c) = &e.container {
        object.push('/');
        object.push_str(c);
    }
    proto::Event {
        time: e.time.to_string(),
        r#type: e.kind.to_string(),
        reason: e.reason.clone(),
        object,
        message: e.message.clone(),
        count: e.count,
        first_time: e.first_time.to_string(),
        object_kind: String::new(),
    }
}

/// A node event on the wire: about `Node/<node>`.
fn node_event_to_proto(e: &NodeEvent, node: &str) -> proto::Event {
    proto::Event {
        time: e.time.to_string(),
        r#type: e.kind.to_string(),
        reason: e.reason.clone(),
        object: node.to_string(),
        message: e.message.clone(),
        count: e.count,
        first_time: e.first_time.to_string(),
        object_kind: "Node".into(),
    }
}

/// The next node event, or never without a node subscription.
async fn recv_node(
    rx: &mut Option<tokio::sync::broadcast::Receiver<NodeEvent>>,
) -> Result<NodeEvent, RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn node_condition_to_proto(c: &NodeCondition) -> proto::NodeCondition {
    let time = |t: &Option<Time>| t.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
    proto::NodeCondition {
        r#type: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone().unwrap_or_default(),
        message: c.message.clone().unwrap_or_default(),
        last_heartbeat_time: time(&c.last_heartbeat_time),
        last_transition_time: time(&c.last_transition_time),
    }
}

fn step_to_proto((container, step): &(Option<String>, crate::timeline::Step)) -> proto::TimelineStep {
    proto::TimelineStep {
        time: step.time.to_string(),
        container: container.clone().unwrap_or_default(),
        step: step.kind.label().to_string(),
        container_id: step.container_id.clone(),
        detail: step.detail.clone(),
    }
}

/// Whether a live event is already represented in the backlog a watcher was sent: the backlog
/// was read after subscribing, so it may hold the same event, or a later repeat of it (repeats
/// bump the count and time of the newest matching event in place).
pub(super) fn in_backlog(backlog: &[Event], e: &Event) -> bool {
    backlog.iter().any(|b| {
        (b.kind, &b.pod, &b.container, &b.reason, &b.message)
            == (e.kind, &e.pod, &e.container, &e.reason, &e.message)
            && b.time >= e.time
    })
}

/// The `Control` service over the shared registry.
pub(super) struct ControlService {
    registry: Registry,
    runtime: RuntimeInfo,
    /// Ends open event watches when the server shuts down.
    cancel: CancellationToken,
}

impl ControlService {
    pub(super) fn new(registry: Registry, runtime: RuntimeInfo, cancel: CancellationToken) -> Self {
        Self { registry, runtime, cancel }
    }
}

#[tonic::async_trait]
impl Control for ControlService {
    async fn list_pods(
        &self,
        request: Request<proto::ListPodsRequest>,
    ) -> Result<Response<proto::ListPodsResponse>, Status> {
        let namespace = request.into_inner().namespace;
        let mut pods = Vec::new();
        for record in self.registry.pods() {
            let meta = &record.pod.metadata;
            let key = PodKey::new(
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            );
            if namespace.is_empty() || key.namespace == namespace {
                pods.push(record_to_proto(&key, &record)?);
            }
        }
        let runtime = Some(health_to_proto(&self.registry.runtime_health()));
        Ok(Response::new(proto::ListPodsResponse { pods, runtime }))
    }

    async fn get_pod(
        &self,
        request: Request<proto::GetPodRequest>,
    ) -> Result<Response<proto::GetPodResponse>, Status> {
        let key = pod_key(request.into_inner().pod)?;
        let record = self.registry.pod(&key).ok_or_else(|| RequestError::PodNotFound(key.name.clone()))?;
        let events = self.registry.events(Some(&key)).iter().map(event_to_proto).collect();
        let runtime = Some(health_to_proto(&self.registry.runtime_health()));
        let pod = Some(record_to_proto(&key, &record)?);
        let timeline = self.registry.timeline(&key).iter().map(step_to_proto).collect();
        Ok(Response::new(proto::GetPodResponse { pod, events, runtime, timeline }))
    }

    type ListEventsStream = ReceiverStream<Result<proto::Event, Status>>;

    async fn list_events(
        &self,
        request: Request<proto::ListEventsRequest>,
    ) -> Result<Response<Self::ListEventsStream>, Status> {
        let request = request.into_inner();
        let filter = request.pod.map(|p| pod_key(Some(p))).transpose()?;
        let node = (request.node && filter.is_none()).then(|| self.runtime.node_name.clone());
        // Subscribe before reading the backlog so that no event falls between the two.
        let mut live = request.watch.then(|| self.registry.subscribe());
        let mut live_node = (request.watch && node.is_some()).then(|| self.registry.subscribe_node());
        let mut backlog = self.registry.events(filter.as_ref());
        let node_backlog = if node.is_some() { self.registry.node_events() } else { Vec::new() };
        let (tx, rx) = mpsc::channel(64);
        let cancel = self.cancel.clone();
        tokio::spawn(async move {
            let node = node.unwrap_or_default();
            for e in &node_backlog {
                if tx.send(Ok(node_event_to_proto(e, &node))).await.is_err() {
                    return;
                }
            }
            for e in &backlog {
                if tx.send(Ok(event_to_proto(e))).await.is_err() {
                    return;
                }
            }
            let Some(live) = live.as_mut() else { return };
            loop {
                let e = tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tx.closed() => return,
                    // A node event (its repeats too: the client shows the newer count).
                    e = recv_node(&mut live_node) => match e {
                        Ok(e) => {
                            if tx.send(Ok(node_event_to_proto(&e, &node))).await.is_err() {
                                return;
                            }
                            continue;
                        }
                        Err(RecvError::Lagged(skipped)) => {
                            warn!(skipped, "a node event watcher fell behind; skipping events");
                            continue;
                        }
                        Err(RecvError::Closed) => return,
                    },
                    e = live.recv() => match e {
                        Ok(e) => e,
                        Err(RecvError::Lagged(skipped)) => {
                            warn!(skipped, "an event watcher fell behind; skipping events");
                            continue;
                        }
                        Err(RecvError::Closed) => return,
                    },
                };
                if filter.as_ref().is_some_and(|p| p != &e.pod) {
                    continue;
                }
                if !backlog.is_empty() {
                    if in_backlog(&backlog, &e) {
                        continue;
                    }
                    // Past the overlap: later events cannot be in the backlog.
                    if backlog.iter().all(|b| b.time < e.time) {
                        backlog.clear();
                    }
                }
                if tx.send(Ok(event_to_proto(&e))).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_node(
        &self,
        _: Request<proto::GetNodeRequest>,
    ) -> Result<Response<proto::GetNodeResponse>, Status> {
        let node = &self.runtime.node_name;
        Ok(Response::new(proto::GetNodeResponse {
            name: node.clone(),
            conditions: self.registry.node_conditions().iter().map(node_condition_to_proto).collect(),
            events: self.registry.node_events().iter().map(|e| node_event_to_proto(e, node)).collect(),
            runtime: Some(health_to_proto(&self.registry.runtime_health())),
        }))
    }

    async fn set_condition(
        &self,
        request: Request<proto::SetConditionRequest>,
    ) -> Result<Response<proto::SetConditionResponse>, Status> {
        let r = request.into_inner();
        let key = pod_key(r.pod)?;
        let record = self.registry.pod(&key);
        check_condition(&key, record.as_ref().map(|r| &r.pod), &r.r#type, &r.status)?;
        // lastTransitionTime moves only when the status changes, as in the API server.
        let existing: BTreeMap<String, PodCondition> =
            self.registry.external_conditions(&key).into_iter().map(|c| (c.type_.clone(), c)).collect();
        let since = existing
            .get(&r.r#type)
            .filter(|c| c.status == r.status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(jiff::Timestamp::now()));
        let condition = PodCondition {
            type_: r.r#type,
            status: r.status.clone(),
            reason: Some(r.reason).filter(|s| !s.is_empty()),
            message: Some(r.message).filter(|s| !s.is_empty()),
            last_transition_time: Some(since),
            ..PodCondition::default()
        };
        self.registry.set_external_condition(&key, condition, r.status.is_empty());
        Ok(Response::new(proto::SetConditionResponse {}))
    }

    async fn version(
        &self,
        _: Request<proto::VersionRequest>,
    ) -> Result<Response<proto::VersionResponse>, Status> {
        Ok(Response::new(proto::VersionResponse {
            crilet_version: env!("CARGO_PKG_VERSION").to_string(),
            runtime_name: self.runtime.name.clone(),
            runtime_version: self.runtime.version.clone(),
            runtime_api_version: self.runtime.api_version.clone(),
            pleg_mode: self.runtime.pleg.mode().to_string(),
            events_received: self.runtime.pleg.events_received(),
        }))
    }
}
