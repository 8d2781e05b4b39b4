//! What every pod worker shares: the runtime (the CRI client, or a test's in-memory one), node settings, the registry (status + events),
//! the node-wide image pull back-off and the pull lock (pulls are serialized, R11.3).

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

pub struct PodContext {
    /// The runtime and the recorder.
    pub exec: Executor,
    pub node: NodeConfig,
    pub registry: Registry,
    pub image_backoff: Mutex<Backoff>,
    pub pull_lock: AsyncMutex<()>,
    /// What the pod's probes run with.
    pub probes: Arc<ProbeContext>,
    /// Cluster mode: the API-backed volumes and env of pods (`None`: static pods only, which
    /// cannot name API objects).
    pub volumes: Option<Arc<VolumeManager>>,
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

pub type Shared = Arc<PodContext>;

impl PodContext {
    pub fn new(
        cri: Arc<dyn Runtime>,
        node: NodeConfig,
        registry: Registry,
        ledger: Ledger,
        metrics: Arc<Metrics>,
    ) -> Shared {
        Arc::new(Self::unshared(cri, node, registry, ledger, metrics))
    }

    /// Cluster mode: [`Self::new`] with API-backed volumes and env from `volumes`.
    pub fn new_with_volumes(
        cri: Arc<dyn Runtime>,
        node: NodeConfig,
        registry: Registry,
        ledger: Ledger,
        metrics: Arc<Metrics>,
        volumes: Arc<VolumeManager>,
    ) -> Shared {
        Arc::new(Self { volumes: Some(volumes), ..Self::unshared(cri, node, registry, ledger, metrics) })
    }

    fn unshared(
        cri: Arc<dyn Runtime>,
        node: NodeConfig,
        registry: Registry,
        ledger: Ledger,
        metrics: Arc<Metrics>,
    ) -> Self {
        let exec = Executor { cri, rec: Recorder::new(registry.clone(), metrics.clone()) };
        Self {
            probes: Arc::new(ProbeContext {
                exec: exec.clone(),
                metrics: metrics.clone(),
                started: std::time::Instant::now(),
            }),
            exec,
            cgroups: Arc::new(Cgroups::new(node.cgroup_driver)),
            node,
            registry,
            image_backoff: Mutex::new(Backoff::image_pull()),
            pull_lock: AsyncMutex::new(()),
            volumes: None,
            runtime_uids: Default::default(),
            ledger,
            metrics,
        }
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
