//! Node-pressure eviction, as the kubelet's eviction manager: the thresholds of
//! `--eviction-hard`/`--eviction-soft` (`threshold`), one cycle's decision over the signals'
//! observations (`decide`: which thresholds are met, past their grace, which node conditions
//! that sets), the ranking of pods, the eviction message and admission under pressure (`rank`),
//! all pure and table-tested; and the manager loop (`manager`) that reads the signals through
//! the narrow [`Signals`] trait (the host's readers in `host`), frees disk through [`Reclaim`]
//! before evicting for disk, and asks the supervisor to evict one pod per cycle. It publishes
//! the node's pressure conditions on a `watch` channel that the Node's status and admission
//! (`cluster`) follow. What it leaves to others: stopping the pod (`pod::worker`, through the
//! supervisor), image garbage collection (the [`Reclaim`] the agent hands it).

pub mod conditions;
pub mod decide;
pub mod host;
pub mod manager;
pub mod rank;
pub mod threshold;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

pub use decide::{Observation, Observations};
pub use manager::Manager;
pub use rank::Usage;
pub use threshold::{Condition, Signal, Threshold};

/// The node's pressure conditions now (empty: none).
pub type Pressure = BTreeSet<Condition>;

/// The manager's settings, from the eviction flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub thresholds: Vec<Threshold>,
    /// `--eviction-max-pod-grace-period`: the most grace a pod evicted for a soft threshold
    /// gets (its own, if shorter).
    pub max_pod_grace_period: Duration,
    /// `--eviction-pressure-transition-period`: how long a condition stays after it was last
    /// met.
    pub transition_period: Duration,
    /// How often the signals are read (the kubelet's 10 s).
    pub monitoring_period: Duration,
}

/// The kubelet's eviction monitoring period.
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);

/// The eviction flags, parsed and checked as the kubelet's; errors name the flag and entry.
pub fn config(
    flags: &threshold::Flags<'_>,
    max_pod_grace_period: Option<i64>,
    transition_period: Option<&str>,
) -> Result<Config, String> {
    let thresholds = threshold::parse(flags)?;
    let max = max_pod_grace_period.unwrap_or(0);
    let max_pod_grace_period = u64::try_from(max)
        .map(Duration::from_secs)
        .map_err(|_| format!("--eviction-max-pod-grace-period: {max}: must not be negative"))?;
    let text = transition_period.unwrap_or("5m");
    let transition_period = crate::logrotate::plan::parse_go_duration(text).ok_or_else(|| {
        format!("--eviction-pressure-transition-period: {text:?} is not a duration (e.g. 5m, 30s)")
    })?;
    Ok(Config { thresholds, max_pod_grace_period, transition_period, monitoring_period: MONITORING_PERIOD })
}

/// A pod the readers measure: its UID, QoS class (its cgroup) and directories (its volumes
/// and its logs).
#[derive(Debug, Clone)]
pub struct PodRef {
    pub uid: String,
    pub qos: crate::cgroup::Qos,
    pub dirs: Vec<PathBuf>,
}

/// The eviction signals' readers: what the node has available, and what each pod uses. The
/// agent's are in `host`; the stats room can stand in for them.
pub trait Signals: Send + Sync + 'static {
    /// Every signal it can observe now (an unobserved signal meets no threshold).
    fn observe(&self) -> impl Future<Output = Observations> + Send;
    /// What `pods` use; `disk` also measures their disk use (a walk of their directories).
    fn usage(&self, pods: &[PodRef], disk: bool) -> impl Future<Output = BTreeMap<String, Usage>> + Send;
    /// Whether the image filesystem is a device of its own, not the nodefs' (the kubelet's
    /// `HasDedicatedImageFs`); `None` when the image filesystem cannot be found.
    fn dedicated_image_fs(&self) -> impl Future<Output = Option<bool>> + Send;
}

/// Whether node-level reclaim (removing unused images) can relieve a threshold of `signal`, as
/// the kubelet's `buildSignalToNodeReclaimFuncs` decides: the imagefs signals always; the nodefs
/// ones only when the images are on the nodefs (no dedicated image filesystem); never memory or
/// PIDs.
pub fn reclaims_images(signal: Signal, dedicated_image_fs: bool) -> bool {
    match signal {
        Signal::ImageFsAvailable | Signal::ImageFsInodesFree => true,
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree => !dedicated_image_fs,
        Signal::MemoryAvailable | Signal::PidAvailable => false,
    }
}

/// Node-level reclaim before evicting for disk (the kubelet deletes dead containers and unused
/// images first), for the signals [`reclaims_images`] names. The integrator connects image garbage collection here; [`NoReclaim`] frees
/// nothing.
pub trait Reclaim: Send + Sync + 'static {
    /// Frees what it can of the disk; the manager reads the signals again after it.
    fn free_disk(&self) -> impl Future<Output = ()> + Send;
}

/// Reclaims nothing: eviction goes straight to pods.
pub struct NoReclaim;

impl Reclaim for NoReclaim {
    async fn free_disk(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_reclaimed_for_the_filesystem_they_are_on() {
        use Signal::*;
        // (signal, dedicated image filesystem, reclaims images)
        let cases = [
            (ImageFsAvailable, true, true),
            (ImageFsAvailable, false, true),
            (ImageFsInodesFree, true, true),
            (ImageFsInodesFree, false, true),
            (NodeFsAvailable, false, true),
            (NodeFsInodesFree, false, true),
            (NodeFsAvailable, true, false),
            (NodeFsInodesFree, true, false),
            (MemoryAvailable, false, false),
            (PidAvailable, false, false),
        ];
        for (signal, dedicated, want) in cases {
            assert_eq!(reclaims_images(signal, dedicated), want, "{signal} dedicated={dedicated}");
        }
    }
}
