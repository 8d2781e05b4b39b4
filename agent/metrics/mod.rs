//! Prometheus metrics of the agent, named after the kubelet's where one exists
//! (`pkg/kubelet/metrics`, `pkg/kubelet/prober`), and the `/healthz` answer. [`server`] serves
//! both on `--metrics-bind-address`.
//!
//! The agent makes one [`Metrics`] and hands it to what records: the CRI client (as its
//! `CallObserver`), the PLEG (`PlegState`), and the pod workers, images and probes (`WorkerContext`, `ImageContext`, `ProbeContext`);
//! prometheus-client's families are internally synchronized. Recording allocates nothing
//! beyond a label set (the CRI and PLEG ones are `&'static str`; probe workers build theirs once)
//! and no lock is held across an await. The decisions (start latency, runtime counts, health)
//! are pure functions in the submodules, tested on their own.

pub mod health;
pub mod runtime;
pub mod server;
pub mod startup;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use self::startup::StartupTracker;
use crate::model::PodKey;

/// `Content-Type` of `/metrics` (the Prometheus text format the kubelet serves).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The kubelet's pod startup buckets (`podStartupDurationBuckets`), in seconds.
pub const POD_START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0,
    480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];
/// Prometheus' default buckets (`metrics.DefBuckets`), used by the PLEG and prober histograms.
pub const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Upstream's `kubelet_evented_pleg_connection_{success,error}_count` are counters without the
/// `_total` suffix, which prometheus-client adds to every counter; they are written by hand so
/// the names stay the kubelet's.
const EVENTED_SUCCESS: &str = "kubelet_evented_pleg_connection_success_count";
const EVENTED_ERROR: &str = "kubelet_evented_pleg_connection_error_count";

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NetworkLabels {
    /// "true" for the node's first pod with its own network, else "" (upstream's values).
    first_with_network: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContainerStateLabels {
    container_state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeResultLabels {
    probe_type: &'static str,
    result: &'static str,
    container: String,
    pod: String,
    namespace: String,
    pod_uid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeDurationLabels {
    probe_type: &'static str,
    container: String,
    pod: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContainerLabels {
    namespace: String,
    pod: String,
    container: String,
}

/// `crilet_cri_events_total{type}`: `type` is a keyword, so a plain pair rather than a struct.
type EventLabels = [(&'static str, &'static str); 1];

/// The probe types of `prober_probe_total`, as upstream spells them (`probeType.String()`).
const PROBE_TYPES: [&str; 3] = ["Startup", "Readiness", "Liveness"];
/// Upstream's `result` values (crilet never yields `unknown`: an internal error is dropped, as
/// upstream drops a probe that returned an error).
const PROBE_RESULTS: [&str; 3] = ["successful", "failed", "unknown"];

/// The label sets of one probe's series, built once per probe worker.
#[derive(Debug, Clone)]
pub struct ProbeSeries {
    successful: ProbeResultLabels,
    failed: ProbeResultLabels,
    duration: ProbeDurationLabels,
}

impl ProbeSeries {
    /// `probe_type` is `Startup`, `Readiness` or `Liveness`.
    pub fn new(probe_type: &'static str, container: &str, pod: &PodKey, pod_uid: &str) -> Self {
        let result = |result| ProbeResultLabels {
            probe_type,
            result,
            container: container.to_string(),
            pod: pod.name.clone(),
            namespace: pod.namespace.clone(),
            pod_uid: pod_uid.to_string(),
        };
        Self {
            successful: result("successful"),
            failed: result("failed"),
            duration: ProbeDurationLabels {
                probe_type,
                container: container.to_string(),
                pod: pod.name.clone(),
                namespace: pod.namespace.clone(),
            },
        }
    }
}

/// When a relist began (see [`Metrics::relist_started`]).
#[derive(Debug, Clone, Copy)]
pub struct RelistTimer(Instant);

/// Every metric family of the agent, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pod_start: Histogram,
    pod_start_sli: HistogramFamily<NetworkLabels>,
    pod_start_total: HistogramFamily<NetworkLabels>,
    running_pods: Gauge,
    running_containers: Family<ContainerStateLabels, Gauge>,
    probe_total: Family<ProbeResultLabels, Counter>,
    probe_duration: HistogramFamily<ProbeDurationLabels>,
    container_restarts: Family<ContainerLabels, Counter>,
    runtime_operations: Family<OperationLabels, Counter>,
    runtime_errors: Family<OperationLabels, Counter>,
    runtime_duration: HistogramFamily<OperationLabels>,
    relist_duration: Histogram,
    relist_interval: Histogram,
    pleg_last_seen: Gauge<f64, AtomicU64>,
    evented_latency: Histogram,
    evented_success: AtomicU64,
    evented_error: AtomicU64,
    cri_events: Family<EventLabels, Counter>,
    startup: Mutex<StartupTracker>,
    /// When the last relist that answered began (for the interval histogram).
    last_relist: Mutex<Option<Instant>>,
}

fn pod_start_histogram() -> Histogram {
    Histogram::new(POD_START_BUCKETS)
}

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// Upstream's `ExponentialBuckets(.005, 2.5, 14)`: 5 ms to about 15 min.
fn runtime_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set of families in a registry of its own (the agent makes one and hands it to what
    /// records; tests build their own).
    pub fn new() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            pod_start: pod_start_histogram(),
            pod_start_sli: Family::new_with_constructor(pod_start_histogram),
            pod_start_total: Family::new_with_constructor(pod_start_histogram),
            running_pods: Gauge::default(),
            running_containers: Family::default(),
            probe_total: Family::default(),
            probe_duration: Family::new_with_constructor(default_histogram),
            container_restarts: Family::default(),
            runtime_operations: Family::default(),
            runtime_errors: Family::default(),
            runtime_duration: Family::new_with_constructor(runtime_histogram),
            relist_duration: default_histogram(),
            relist_interval: default_histogram(),
            pleg_last_seen: Gauge::default(),
            evented_latency: default_histogram(),
            evented_success: AtomicU64::new(0),
            evented_error: AtomicU64::new(0),
            cri_events: Family::default(),
            startup: Mutex::default(),
            last_relist: Mutex::default(),
        };
        m.register()
    }

    fn register(mut self) -> Self {
        let r = &mut self.registry;
        r.register(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from the agent seeing a pod for the first time to the pod starting to run",
            self.pod_start.clone(),
        );
        r.register(
            "kubelet_pod_start_sli_duration_seconds",
            "Duration in seconds to start a pod, excluding time to pull images, measured from the agent first \
             seeing the pod to all its containers observed running",
            self.pod_start_sli.clone(),
        );
        r.register(
            "kubelet_pod_start_total_duration_seconds",
            "Duration in seconds to start a pod, including time to pull images, measured from the agent first \
             seeing the pod to all its containers observed running",
            self.pod_start_total.clone(),
        );
        r.register(
            "kubelet_running_pods",
            "Number of pods that have a running pod sandbox",
            self.running_pods.clone(),
        );
        r.register(
            "kubelet_running_containers",
            "Number of containers currently running",
            self.running_containers.clone(),
        );
        r.register(
            "prober_probe",
            "Cumulative number of a liveness, readiness or startup probe for a container by result",
            self.probe_total.clone(),
        );
        r.register(
            "prober_probe_duration_seconds",
            "Duration in seconds for a probe response",
            self.probe_duration.clone(),
        );
        // The kubelet has no per-container restart counter (`kubelet_restarted_pods_total`
        // counts static pods recreated with the same UID, which crilet never does), so this one
        // is crilet's own: each increment is one more restartCount of that container.
        r.register(
            "crilet_container_restarts",
            "Cumulative number of container restarts (restartCount increments) by container",
            self.container_restarts.clone(),
        );
        r.register(
            "kubelet_runtime_operations",
            "Cumulative number of runtime operations by operation type",
            self.runtime_operations.clone(),
        );
        r.register(
            "kubelet_runtime_operations_errors",
            "Cumulative number of runtime operation errors by operation type",
            self.runtime_errors.clone(),
        );
        r.register(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type",
            self.runtime_duration.clone(),
        );
        r.register(
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG",
            self.relist_duration.clone(),
        );
        r.register(
            "kubelet_pleg_relist_interval_seconds",
            "Interval in seconds between relisting in PLEG",
            self.relist_interval.clone(),
        );
        r.register(
            "kubelet_pleg_last_seen_seconds",
            "Timestamp in seconds when PLEG was last seen active",
            self.pleg_last_seen.clone(),
        );
        r.register(
            "kubelet_evented_pleg_connection_latency_seconds",
            "The latency of streaming connection with the CRI runtime, measured in seconds",
            self.evented_latency.clone(),
        );
        r.register(
            "crilet_cri_events",
            "Cumulative number of CRI container events received, by event type",
            self.cri_events.clone(),
        );
        self
    }

    /// The Prometheus text exposition of every family.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(32 << 10);
        if let Err(e) = prometheus_text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding the metrics failed");
        }
        plain_counter(
            &mut out,
            EVENTED_SUCCESS,
            "The number of times a streaming client was obtained to receive CRI Events.",
            self.evented_success.load(Ordering::Relaxed),
        );
        plain_counter(
            &mut out,
            EVENTED_ERROR,
            "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
            self.evented_error.load(Ordering::Relaxed),
        );
        out
    }

    /// One CRI call (`op` is the CRI method name) took `took`; `failed` when it returned an error.
    pub fn runtime_operation(&self, op: &'static str, took: Duration, failed: bool) {
        let labels = OperationLabels { operation_type: runtime::operation_type(op) };
        self.runtime_operations.get_or_create(&labels).inc();
        self.runtime_duration.get_or_create(&labels).observe(took.as_secs_f64());
        if failed {
            self.runtime_errors.get_or_create(&labels).inc();
        }
    }

    /// A relist begins; observes the interval since the last one that answered.
    pub fn relist_started(&self) -> RelistTimer {
        let now = Instant::now();
        let last = self.last_relist.lock().ok().and_then(|l| *l);
        if let Some(last) = last {
            self.relist_interval.observe(now.saturating_duration_since(last).as_secs_f64());
        }
        RelistTimer(now)
    }

    /// The relist failed (its time still counts, as upstream's deferred observation does).
    pub fn relist_failed(&self, t: RelistTimer) {
        self.relist_duration.observe(t.0.elapsed().as_secs_f64());
    }

    /// The relist answered with these sandboxes and containers: its duration, and the running
    /// pods and containers they show.
    pub fn relisted(&self, t: RelistTimer, brief: &crate::cri::RuntimeBrief) {
        self.relist_duration.observe(t.0.elapsed().as_secs_f64());
        if let Ok(mut l) = self.last_relist.lock() {
            *l = Some(t.0);
        }
        self.pleg_last_seen.set(unix_now().as_secs_f64());
        let counts = runtime::count_runtime(brief);
        self.running_pods.set(counts.running_pods);
        for (state, n) in runtime::CONTAINER_STATES.iter().zip(counts.containers) {
            self.running_containers.get_or_create(&ContainerStateLabels { container_state: state }).set(n);
        }
    }

    /// The CRI event stream was opened.
    pub fn evented_connected(&self) {
        self.evented_success.fetch_add(1, Ordering::Relaxed);
    }

    /// The CRI event stream could not be opened, or broke.
    pub fn evented_connection_error(&self) {
        self.evented_error.fetch_add(1, Ordering::Relaxed);
    }

    /// A CRI event of `kind` (its CRI name) arrived; `created_at` is the runtime's timestamp in
    /// nanoseconds (the latency histogram measures from it, as upstream does).
    pub fn cri_event(&self, kind: &'static str, created_at: i64) {
        self.cri_events.get_or_create(&[("type", kind)]).inc();
        let now = i64::try_from(unix_now().as_nanos()).unwrap_or(i64::MAX);
        if created_at > 0 && now >= created_at {
            self.evented_latency.observe(Duration::from_nanos((now - created_at) as u64).as_secs_f64());
        }
    }

    /// One probe attempt of `series` ended with a result after `took`. Upstream observes the
    /// duration of successful (and unknown) results only.
    pub fn probe(&self, series: &ProbeSeries, success: bool, took: Duration) {
        if success {
            self.probe_total.get_or_create(&series.successful).inc();
            self.probe_duration.get_or_create(&series.duration).observe(took.as_secs_f64());
        } else {
            self.probe_total.get_or_create(&series.failed).inc();
        }
    }

    /// A container instance was started with `restart_count`: above 0 it is a restart.
    pub fn container_started(&self, pod: &PodKey, container: &str, restart_count: u32) {
        if restart_count == 0 {
            return;
        }
        let labels = ContainerLabels {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            container: container.to_string(),
        };
        self.container_restarts.get_or_create(&labels).inc();
    }

    /// A pod worker starts for `uid`; `saved` is the status an earlier agent left (a pod that
    /// had started then is not measured again).
    pub fn pod_seen(&self, uid: &str, saved: Option<&PodStatus>) {
        let started = saved.is_some_and(|s| s.start_time.is_some());
        if let Ok(mut t) = self.startup.lock() {
            t.seen(uid, started, Instant::now());
        }
    }

    /// An image pull for pod `uid` began at `started` and has just ended.
    pub fn image_pulled(&self, uid: &str, started: Instant) {
        if let Ok(mut t) = self.startup.lock() {
            t.pulled(uid, started, Instant::now());
        }
    }

    /// The pod's status was published: records its start latency once it runs.
    pub fn pod_published(&self, uid: &str, pod: &Pod) {
        let Some(status) = pod.status.as_ref() else { return };
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        let samples = match self.startup.lock() {
            Ok(mut t) => t.observe(uid, status, host_network, Instant::now()),
            Err(_) => return,
        };
        if let Some(d) = samples.start {
            self.pod_start.observe(d.as_secs_f64());
        }
        if let Some(s) = samples.sli {
            let labels = NetworkLabels { first_with_network: if s.first_with_network { "true" } else { "" } };
            self.pod_start_sli.get_or_create(&labels).observe(s.without_pulls.as_secs_f64());
            self.pod_start_total.get_or_create(&labels).observe(s.total.as_secs_f64());
        }
    }

    /// The pod is gone: its per-pod series go too (as upstream's probe workers delete theirs),
    /// so a node that churns pods does not grow its exposition for ever.
    pub fn forget_pod(&self, pod: &PodKey, uid: &str, containers: &[String]) {
        if let Ok(mut t) = self.startup.lock() {
            t.forget(uid);
        }
        for container in containers {
            for probe_type in PROBE_TYPES {
                for result in PROBE_RESULTS {
                    self.probe_total.remove(&ProbeResultLabels {
                        probe_type,
                        result,
                        container: container.clone(),
                        pod: pod.name.clone(),
                        namespace: pod.namespace.clone(),
                        pod_uid: uid.to_string(),
                    });
                }
                self.probe_duration.remove(&ProbeDurationLabels {
                    probe_type,
                    container: container.clone(),
                    pod: pod.name.clone(),
                    namespace: pod.namespace.clone(),
                });
            }
            self.container_restarts.remove(&ContainerLabels {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: container.clone(),
            });
        }
    }

    /// Pods whose start is still being measured (for tests).
    pub fn pods_tracked(&self) -> usize {
        self.startup.lock().map(|t| t.tracked()).unwrap_or(0)
    }
}

/// Time since the Unix epoch (zero if the clock is before it).
fn unix_now() -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

/// A counter in the Prometheus text format, named exactly `name` (no `_total` added).
fn plain_counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n");
}

/// The CRI client's calls are `kubelet_runtime_operations_*` (the agent's client is given the
/// process's metrics as its observer).
impl crate::cri::CallObserver for Metrics {
    fn call_finished(&self, op: &'static str, took: Duration, failed: bool) {
        self.runtime_operation(op, took, failed);
    }
}
