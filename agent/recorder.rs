//! What a pod's life leaves for the people watching it, recorded in one place: an Event (`kubectl
//! get events`, `crilet events`, with a log line), a lifecycle step of the pod's timeline
//! (`crilet describe`) and the metric that counts it. A start, for one, is all three, and
//! recording them together keeps them from disagreeing.

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::model::PodKey;
use crate::registry::Registry;
use crate::timeline::{Step, StepKind};

/// Cheaply cloned.
#[derive(Clone)]
pub struct Recorder {
    registry: Registry,
    metrics: Arc<Metrics>,
}

impl Recorder {
    pub fn new(registry: Registry, metrics: Arc<Metrics>) -> Self {
        Self { registry, metrics }
    }

    /// A `Normal` event about `pod` (and `container`), also logged.
    pub fn normal(&self, pod: &PodKey, container: Option<&str>, reason: &str, message: String) {
        tracing::info!(pod = %pod, container = container.unwrap_or(""), reason, "{message}");
        self.registry.record("Normal", pod, container, reason, message);
    }

    /// A `Warning` event about `pod` (and `container`), also logged.
    pub fn warning(&self, pod: &PodKey, container: Option<&str>, reason: &str, message: String) {
        tracing::warn!(pod = %pod, container = container.unwrap_or(""), reason, "{message}");
        self.registry.record("Warning", pod, container, reason, message);
    }

    /// A step of the pod's (or one container's) timeline.
    pub fn step(&self, pod: &PodKey, container: Option<&str>, step: Step) {
        self.registry.add_step(pod, container, step);
    }

    /// Container `name` of `pod` started as instance `id`: the `Started` event, the step, and
    /// the kubelet's started-containers count.
    pub fn started(&self, pod: &PodKey, name: &str, id: &str, restart_count: u32) {
        self.normal(pod, Some(name), "Started", format!("Started container {name}"));
        self.step(pod, Some(name), Step::now(StepKind::Started, id, ""));
        self.metrics.container_started(pod, name, restart_count);
    }
}
