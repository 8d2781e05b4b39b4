//! What the pod engine and the probes depend on, one struct per concern, each function taking the
//! narrowest: the [`Executor`] (the runtime, the CRI client or a test's in-memory one, and the
//! recorder) for kills, [`ImageContext`] for pulls (the node-wide back-off and pull lock, R11.3),
//! [`StartContext`] for sandbox and container starts, [`ProbeContext`] for the probes, and
//! [`WorkerContext`], which holds them with what a pod worker and the supervisor use themselves.
//! Built once by the agent (`WorkerContext::new`) and shared by every worker.

use std::sync::{Arc, Mutex};

use tokio::sync::Mutex as AsyncMutex;

use crate::backoff::Backoff;
use crate::cgroup::Cgroups;
use crate::cri::Runtime;
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::node::NodeConfig;
use crate::recorder::Recorder;
use crate::registry::Registry;
use crate::volumes::VolumeManager;

/// What acting on the runtime needs: the runtime, and the recorder of what was done (events,
/// timeline steps). All that stopping containers and pods takes (`pod::terminate`), and the
/// base of the pod engine's other concerns. Cheaply cloned.
#[derive(Clone)]
pub struct Executor {
    /// The runtime every CRI call of the pod engine and the probes goes to.
    pub cri: Arc<dyn Runtime>,
    /// Events, timeline steps and their metrics.
    pub rec: Recorder,
}

/// What the probes of every pod need: the runtime to run their checks and the recorder of their
/// failures, the prober metrics, and when the agent started.
pub struct ProbeContext {
    pub exec: Executor,
    pub metrics: Arc<Metrics>,
    /// When the agent started (R6.2: probes of an agent that started less than one period ago
    /// begin after a random fraction of the period).
    pub started: std::time::Instant,
}

/// What images need: lookups and pulls by the pod's `imagePullPolicy` and pull secrets, with the
/// node-wide pull back-off and one pull at a time (R11.3), counted in the pull metrics.
pub struct ImageContext {
    pub exec: Executor,
    /// The node-wide image pull back-off, by pod UID and image.
    pub backoff: Mutex<Backoff>,
    /// Pulls are serialized (R11.3).
    pub pull_lock: AsyncMutex<()>,
    /// Cluster mode: the pods' pull secrets (`None`: static pods only).
    pub volumes: Option<Arc<VolumeManager>>,
    pub metrics: Arc<Metrics>,
}

/// What starting a pod's sandbox and its containers needs (`pod::start`): the node's layout, the
/// pod's volumes and env sources, the images, and the UIDs the runtime holds (a new sandbox
/// claims its UID).
pub struct StartContext {
    pub exec: Executor,
    pub node: NodeConfig,
    /// Cluster mode: the API-backed volumes and env of pods (`None`: static pods only, which
    /// cannot name API objects).
    pub volumes: Option<Arc<VolumeManager>>,
    /// The pod UIDs the runtime may hold anything of (kept by the PLEG's relist).
    pub runtime_uids: crate::pleg::RuntimeUids,
    pub images: ImageContext,
}

/// What the supervisor and its pod workers use: the concerns above, and the node's state the
/// worker keeps (the registry's records and wakers, the ledger, the metrics, the pod cgroups).
pub struct WorkerContext {
    /// The runtime and the recorder.
    pub exec: Executor,
    pub node: NodeConfig,
    /// The agent's view of pods (published records, outside conditions, wakers).
    pub registry: Registry,
    /// What the pod's probes run with.
    pub probes: Arc<ProbeContext>,
    /// Sandbox and container starts.
    pub starts: StartContext,
    /// The pod UIDs the runtime may hold anything of (kept by the PLEG's relist).
    pub runtime_uids: crate::pleg::RuntimeUids,
    /// What every active pod holds, shared with admission: what a resize must fit beside.
    pub ledger: Ledger,
    /// Where pod starts, pulls, probes and published statuses are counted.
    pub metrics: Arc<Metrics>,
    /// The node's pod cgroups under its driver (`node.cgroup_driver`): named, made, changed and
    /// removed through it.
    pub cgroups: Arc<Cgroups>,
}

impl WorkerContext {
    /// The pod engine's context on `node`; `volumes`: cluster mode's API-backed volumes, env and
    /// pull secrets (`None`: static pods only, which cannot name API objects).
    pub fn new(
        cri: Arc<dyn Runtime>,
        node: NodeConfig,
        registry: Registry,
        ledger: Ledger,
        metrics: Arc<Metrics>,
        volumes: Option<Arc<VolumeManager>>,
    ) -> Arc<Self> {
        let exec = Executor { cri, rec: Recorder::new(registry.clone(), metrics.clone()) };
        let runtime_uids = crate::pleg::RuntimeUids::default();
        let images = ImageContext {
            exec: exec.clone(),
            backoff: Mutex::new(Backoff::image_pull()),
            pull_lock: AsyncMutex::new(()),
            volumes: volumes.clone(),
            metrics: metrics.clone(),
        };
        let starts = StartContext {
            exec: exec.clone(),
            node: node.clone(),
            volumes,
            runtime_uids: runtime_uids.clone(),
            images,
        };
        let probes = Arc::new(ProbeContext {
            exec: exec.clone(),
            metrics: metrics.clone(),
            started: std::time::Instant::now(),
        });
        Arc::new(Self {
            exec,
            cgroups: Arc::new(Cgroups::new(node.cgroup_driver)),
            node,
            registry,
            probes,
            starts,
            runtime_uids,
            ledger,
            metrics,
        })
    }

    /// The runtime's state of pod `uid`; without a CRI call when the runtime holds nothing of
    /// it (see [`crate::pleg::RuntimeUids`]): a new pod's first sync goes straight to its sandbox.
    pub async fn observe(&self, uid: &str) -> Result<crate::model::ObservedPod, crate::cri::CriError> {
        if self.runtime_uids.may_have(uid) {
            self.exec.cri.observe(uid).await
        } else {
            Ok(crate::model::ObservedPod { uid: uid.to_string(), ..Default::default() })
        }
    }
}

/// Wall-clock nanoseconds since the epoch (the clock CRI timestamps use).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
