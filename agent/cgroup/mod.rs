//! The node's pod cgroups, as the kubelet's cgroup manager keeps them under either cgroup
//! driver (`pkg/kubelet/cm`): how a pod's cgroup is named (`name`), which driver is in force
//! (`driver`), its files on cgroup v1 and v2 (`files`), the pod cgroups found on the host
//! (`pods`), and, under the systemd driver, the slices systemd makes for them over D-Bus
//! (`systemd`).
//!
//! [`Cgroups`] is the one handle the agent makes from its resolved driver and hands to what
//! needs it (the pod engine, the orphan sweep): the pod's cgroup is named, created, changed
//! and removed through it, so no code spells a cgroup path by itself. The QoS parents
//! (`kubepods`, `burstable`, `besteffort`) are the agent's under either driver, made at start
//! with the kubelet's values (`qos`). Under cgroupfs the runtime makes the pod's cgroup with its
//! sandbox and the agent writes the values after; under systemd the agent makes the pod's slice
//! before its sandbox, as the kubelet does, since a slice made implicitly by runc would be
//! systemd's and not carry the pod's values.

pub mod driver;
pub mod files;
pub mod name;
pub mod pods;
pub mod qos;
pub mod systemd;

use std::collections::BTreeMap;
use std::time::SystemTime;

pub use driver::CgroupDriver;
use files::Hierarchy;
pub use name::{CgroupName, Qos};
pub use qos::{NodeAllocatable, QosValues};
use systemd::{Resources, Units, resource_properties, slice_properties};
use tracing::{debug, info};

/// The CFS period the kubelet uses (100 ms), in µs.
pub const CPU_PERIOD: i64 = 100_000;
/// The kernel's floor for `cpu.shares` (the kubelet's `MinShares`).
pub const MIN_SHARES: i64 = 2;
/// The kernel's ceiling for `cpu.shares` (the kubelet's `MaxShares`).
pub const MAX_SHARES: i64 = 262_144;

/// The cpu shares of a cpu request in millicores (the kubelet's `MilliCPUToShares`): 1024 a
/// CPU, within [`MIN_SHARES`, `MAX_SHARES`]; no request is `MIN_SHARES`, not the kernel's
/// default 1024.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    (milli * 1024 / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The cpu request in millicores that `shares` read back as (the kubelet's `sharesToMilliCPU`):
/// rounded up, so the shares of `m` millicores read back as `m`; below [`MIN_SHARES`], none.
pub fn shares_to_milli_cpu(shares: i64) -> i64 {
    if shares >= MIN_SHARES { (shares * 1000 + 1023) / 1024 } else { 0 }
}

/// A cgroup's values as the kubelet sets a pod's (`ResourceConfig`): the memory limit and the
/// CFS quota (`None`: unlimited) and the cpu shares (a weight on v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupValues {
    /// Bytes; `None` = unlimited.
    pub memory_limit: Option<i64>,
    /// µs per `CPU_PERIOD`; `None` = unlimited.
    pub cpu_quota: Option<i64>,
    pub cpu_shares: i64,
}

/// The node's pod cgroups under one driver.
pub struct Cgroups {
    driver: CgroupDriver,
    files: Hierarchy,
    /// systemd's units; only under the systemd driver (no D-Bus otherwise).
    units: Option<Units>,
}

impl Cgroups {
    /// The host's cgroups (`/sys/fs/cgroup`, its version read once) under `driver`. Makes no
    /// connection: under systemd the bus is dialled at the first call.
    pub fn new(driver: CgroupDriver) -> Self {
        Self::with_hierarchy(driver, Hierarchy::host())
    }

    /// Cgroups at another root (tests).
    pub fn with_hierarchy(driver: CgroupDriver, files: Hierarchy) -> Self {
        let units = (driver == CgroupDriver::Systemd).then(|| Units::new(files.is_v2()));
        Cgroups { driver, files, units }
    }

    pub fn driver(&self) -> CgroupDriver {
        self.driver
    }

    /// The pod cgroup of a pod of class `qos` (`GetPodContainerName`).
    pub fn pod_name(qos: Qos, uid: &str) -> CgroupName {
        name::pod(qos, uid)
    }

    /// The pod cgroup's path below a tree's root (also its sandbox's CRI `cgroup_parent`).
    pub fn pod_path(&self, pod: &CgroupName) -> String {
        self.driver.path(pod)
    }

    /// Container `id`'s cgroup path in the pod cgroup `pod`, where the runtime puts it.
    pub fn container_path(&self, pod: &CgroupName, id: &str) -> String {
        self.driver.container_path(pod, id)
    }

    /// The QoS parents made (if need be) and given `want` (the kubelet's node allocatable
    /// cgroup, then its QoS container manager's `Start` and `UpdateCgroups`): `kubepods`, then
    /// `burstable` and `besteffort`. Under systemd each slice is started, or, there already,
    /// given the values as unit properties, and its files written; under cgroupfs the
    /// directories are made and the files written. Idempotent: called at start, before any
    /// pod's cgroup, and again whenever the values may have changed.
    pub async fn ensure_qos(&self, want: &QosValues) -> Result<(), String> {
        for (name, values) in want.by_parent() {
            let what = |e: String| format!("QoS cgroup {}: {e}", self.pod_path(&name));
            match &self.units {
                Some(units) => self.ensure_slice(units, &name, Some(values)).await.map_err(what)?,
                None => {
                    let (files, path) = (self.files.clone(), self.pod_path(&name));
                    blocking(move || files.create(&path)).await.map_err(what)?;
                    self.write_files(&name, values).await.map_err(what)?;
                }
            }
        }
        debug!(?want, "QoS cgroups set");
        Ok(())
    }

    /// Makes sure the pod's cgroup exists with `values`, before its sandbox (the kubelet's
    /// `EnsureExists`). Under systemd: its slice is started (or, there already, given the
    /// values) and the cgroup's files written. Under cgroupfs nothing: the runtime makes the
    /// directory with the sandbox, and [`Self::write_values`] follows.
    pub async fn ensure_pod(&self, pod: &CgroupName, values: &CgroupValues) -> Result<(), String> {
        let Some(units) = &self.units else { return Ok(()) };
        self.ensure_slice(units, pod, Some(Resources::from(values))).await
    }

    /// A slice started with the libcontainer properties and `values`; one already there gets
    /// `values` through `SetUnitProperties`; then the cgroup's files get them too (libcontainer's
    /// `Apply` then `Set`).
    async fn ensure_slice(
        &self,
        units: &Units,
        name: &CgroupName,
        values: Option<Resources>,
    ) -> Result<(), String> {
        let unit = name.slice_unit();
        let parent = name.parent().slice_unit();
        let version = units.version().await;
        let (resources, quota) =
            values.map(|r| resource_properties(&r, units.is_v2(), version)).unwrap_or_default();
        let mut props = slice_properties(&unit, &parent, units.is_v2());
        props.extend(resources.iter().cloned());
        let chain = |e: systemd::UnitError| crate::error_chain(&e);
        let started = units.start(&unit, &props).await.map_err(chain)?;
        if started {
            info!(unit, "started the slice");
        } else {
            debug!(unit, "the slice exists; setting its values");
            units.set(&unit, &resources).await.map_err(chain)?;
        }
        let Some(r) = values else { return Ok(()) };
        self.write_files(name, Resources { cpu_quota: quota.or(r.cpu_quota), ..r }).await
    }

    /// Writes every value into the pod cgroup's files (a new pod's, once its sandbox made it).
    pub async fn write_values(&self, pod: &CgroupName, values: &CgroupValues) -> Result<(), String> {
        let r = Resources::from(values);
        let quota = self.rounded_quota(&r).await.unwrap_or(values.cpu_quota);
        let path = self.pod_path(pod);
        let files = self.files.clone();
        let values = CgroupValues { cpu_quota: quota, ..*values };
        blocking(move || files.write_values(&path, &values)).await
    }

    /// Under systemd, the quota as the slice holds it (rounded to whole percents).
    async fn rounded_quota(&self, r: &Resources) -> Option<Option<i64>> {
        let units = self.units.as_ref()?;
        resource_properties(r, units.is_v2(), None).1
    }

    /// The pod cgroup's memory limit (`SetPodCgroupConfig` for memory): the slice's property
    /// under systemd, then the cgroup's file.
    pub async fn set_memory_limit(&self, pod: &CgroupName, limit: Option<i64>) -> Result<(), String> {
        self.set(pod, Resources { memory_limit: Some(limit), ..Default::default() }).await
    }

    /// The pod cgroup's CFS quota, as [`Self::set_memory_limit`].
    pub async fn set_cpu_quota(&self, pod: &CgroupName, quota: Option<i64>) -> Result<(), String> {
        self.set(pod, Resources { cpu_quota: Some(quota), ..Default::default() }).await
    }

    /// The pod cgroup's cpu shares (its weight on v2), as [`Self::set_memory_limit`].
    pub async fn set_cpu_shares(&self, pod: &CgroupName, shares: i64) -> Result<(), String> {
        self.set(pod, Resources { cpu_shares: Some(shares), ..Default::default() }).await
    }

    /// One value changed, as libcontainer's systemd manager `Set` does it: the unit's property
    /// (`SetUnitProperties`), then the cgroup's file.
    async fn set(&self, pod: &CgroupName, r: Resources) -> Result<(), String> {
        let mut quota = r.cpu_quota;
        if let Some(units) = &self.units {
            let (props, rounded) = resource_properties(&r, units.is_v2(), units.version().await);
            units.set(&pod.slice_unit(), &props).await.map_err(|e| crate::error_chain(&e))?;
            quota = rounded.or(quota);
        }
        self.write_files(pod, Resources { cpu_quota: quota, ..r }).await
    }

    /// Writes the values `r` has into the cgroup's files, on the blocking pool.
    async fn write_files(&self, name: &CgroupName, r: Resources) -> Result<(), String> {
        let path = self.pod_path(name);
        let files = self.files.clone();
        blocking(move || {
            if let Some(m) = r.memory_limit {
                files.write_memory_limit(&path, m)?;
            }
            if let Some(s) = r.cpu_shares {
                files.write_cpu_shares(&path, s)?;
            }
            if let Some(q) = r.cpu_quota {
                files.write_cpu_quota(&path, q)?;
            }
            if let Some(p) = r.pids_limit {
                files.write_pids_limit(&path, p)?;
            }
            Ok(())
        })
        .await
    }

    /// A cgroup's values (`GetCgroupConfig`); `path` from [`Self::pod_path`] or
    /// [`Self::container_path`].
    pub async fn read_values(&self, path: String) -> Result<CgroupValues, String> {
        let files = self.files.clone();
        blocking(move || files.read_values(&path)).await
    }

    /// `shares` as this host's cgroups read them back: a v2 cgroup keeps a weight, whose shares
    /// are the fewest that write it ([`files::shares_of_weight`]); v1 keeps them as they are.
    pub fn shares_as_read(&self, shares: i64) -> i64 {
        if self.files.is_v2() { files::shares_of_weight(files::cpu_weight(shares)) } else { shares }
    }

    /// [`Self::read_values`] on the calling thread, for the one caller that cannot await (a
    /// container's values read lazily inside the worker's pure sync decision).
    pub fn read_values_now(&self, path: &str) -> Result<CgroupValues, String> {
        self.files.read_values(path)
    }

    /// A cgroup's memory use in bytes (`GetPodCgroupMemoryUsage`).
    pub async fn memory_usage(&self, path: String) -> Result<i64, String> {
        let files = self.files.clone();
        blocking(move || files.memory_usage(&path)).await
    }

    /// What cgroup `path` has used (CPU time and memory; `files::Usage`), read on the
    /// blocking pool. `path` from [`Self::pod_path`], [`Self::container_path`],
    /// [`Self::kubepods_path`] or `/` (the node).
    pub async fn usage(&self, path: String) -> files::Usage {
        let files = self.files.clone();
        blocking(move || Ok(files.usage(&path))).await.unwrap_or_default()
    }

    /// [`Self::usage`] of several cgroups in one trip to the blocking pool.
    pub async fn usages(&self, paths: Vec<String>) -> Vec<files::Usage> {
        let files = self.files.clone();
        blocking(move || Ok(paths.iter().map(|p| files.usage(p)).collect())).await.unwrap_or_default()
    }

    /// The path of the pods' parent, `kubepods` (the kubelet's "pods" system container).
    pub fn kubepods_path(&self) -> String {
        self.driver.path(&Qos::Guaranteed.parent())
    }

    /// Whether the host's cgroups are v2 (unified).
    pub fn is_v2(&self) -> bool {
        self.files.is_v2()
    }

    /// A cgroup's memory working set in bytes (usage less inactive file pages); `path` ""
    /// for the root cgroup (the node's own).
    pub async fn memory_working_set(&self, path: String) -> Result<i64, String> {
        let files = self.files.clone();
        blocking(move || files.memory_working_set(&path)).await
    }

    /// The tasks in a cgroup (`pids.current`).
    pub async fn pids_current(&self, path: String) -> Result<i64, String> {
        let files = self.files.clone();
        blocking(move || files.pids_current(&path)).await
    }

    /// Every pod cgroup on the host under this driver (the orphan sweep's candidates).
    pub async fn scan_pods(&self) -> Vec<pods::Found> {
        let (files, driver) = (self.files.clone(), self.driver);
        blocking(move || Ok(pods::scan(&files, driver, SystemTime::now()))).await.unwrap_or_default()
    }

    /// Removes pod `uid`'s cgroups, best effort (the kubelet's pod container manager `Destroy`):
    /// under systemd its slice is stopped (`StopUnit`, so systemd removes the cgroup), then
    /// whatever directory is left is removed with `rmdir`. True when none is left.
    pub async fn remove_pod(&self, uid: &str) -> bool {
        let (files, driver, owned) = (self.files.clone(), self.driver, uid.to_string());
        let found = blocking(move || Ok(pods::of_pod(&files, driver, &owned))).await.unwrap_or_default();
        self.remove(found).await.is_empty()
    }

    /// Removes the pod cgroups `found` (their slices stopped first under systemd), and returns
    /// the ones still there (busy: processes or children left).
    pub async fn remove(&self, found: Vec<pods::Found>) -> Vec<pods::Found> {
        if found.is_empty() {
            return found;
        }
        if let Some(units) = &self.units {
            let by_unit: BTreeMap<String, &pods::Found> = found.iter().map(|f| (f.unit(), f)).collect();
            for unit in by_unit.keys() {
                if let Err(e) = units.stop(unit).await {
                    debug!(unit, error = %crate::error_chain(&e), "stopping the pod slice failed");
                }
            }
        }
        blocking(move || {
            Ok(found
                .into_iter()
                .filter(|f| {
                    let gone = pods::remove_empty_tree(&f.path).is_ok() || !f.path.exists();
                    if !gone {
                        debug!(path = %f.path.display(), "pod cgroup not removed (busy)");
                    }
                    !gone
                })
                .collect())
        })
        .await
        .unwrap_or_default()
    }
}

/// `f` on the blocking pool (cgroup files are small, but a runtime thread never waits on one).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(format!("cgroup file work: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kubelet's `MilliCPUToShares` (helpers_linux_test.go's cases and the clamps).
    #[test]
    fn millicores_to_shares_as_the_kubelet() {
        for (milli, shares) in [
            (0, 2),
            (1, 2),
            (2, 2),
            (10, 10),
            (100, 102),
            (250, 256),
            (1000, 1024),
            (2000, 2048),
            (300_000, 262_144),
        ] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "{milli}m");
        }
    }

    /// Under cgroupfs the agent makes the QoS parents itself and writes their values, on v1 in
    /// the `cpu` and `memory` trees, on v2 with the root's controllers enabled on the way down.
    #[tokio::test]
    async fn cgroupfs_makes_the_qos_parents_with_their_values() {
        let want = qos::values(NodeAllocatable { cpu_milli: 2000, memory: 2 << 30, pids: 4096 }, 250);
        for v2 in [false, true] {
            let root = tempfile::tempdir().expect("tempdir");
            let r = root.path();
            if !v2 {
                // The pids controller is mounted (as on this host): kubepods is made in it too.
                std::fs::create_dir(r.join("pids")).expect("mkdir");
            }
            if v2 {
                std::fs::write(r.join("cgroup.controllers"), "cpuset cpu memory pids").expect("write");
                // Already enabled at the root: only what is missing is written.
                std::fs::write(r.join("cgroup.subtree_control"), "cpu memory").expect("write");
            }
            let cg = Cgroups::with_hierarchy(CgroupDriver::Cgroupfs, Hierarchy::at(r, v2));
            cg.ensure_qos(&want).await.expect("made");
            let file = |p: &str| std::fs::read_to_string(r.join(p)).expect(p);
            if v2 {
                // (A plain file here keeps what was written last; the kernel's adds it.)
                assert_eq!(file("cgroup.subtree_control"), "+cpuset +pids");
                assert_eq!(file("kubepods/cgroup.subtree_control"), "+cpuset +cpu +memory +pids");
            }
            // Twice is the same (the periodic update).
            cg.ensure_qos(&want).await.expect("again");
            if v2 {
                assert_eq!(file("kubepods/memory.max"), (2u64 << 30).to_string());
                assert_eq!(file("kubepods/cpu.weight"), "79");
                assert_eq!(file("kubepods/burstable/cpu.weight"), "10");
                assert_eq!(file("kubepods/besteffort/cpu.weight"), "1");
                assert_eq!(file("kubepods/pids.max"), "4096");
                assert!(!r.join("kubepods/burstable/pids.max").exists(), "no pids limit below kubepods");
                assert!(!r.join("kubepods/burstable/memory.max").exists(), "no memory limit below kubepods");
            } else {
                assert_eq!(file("memory/kubepods/memory.limit_in_bytes"), (2u64 << 30).to_string());
                assert_eq!(file("cpu/kubepods/cpu.shares"), "2048");
                assert_eq!(file("pids/kubepods/pids.max"), "4096");
                assert_eq!(file("cpu/kubepods/burstable/cpu.shares"), "256");
                assert_eq!(file("cpu/kubepods/besteffort/cpu.shares"), "2");
                assert!(r.join("memory/kubepods/besteffort").is_dir());
                assert!(!r.join("memory/kubepods/burstable/memory.limit_in_bytes").exists());
            }
        }
    }

    #[tokio::test]
    async fn cgroupfs_writes_files_and_never_talks_to_systemd() {
        let root = tempfile::tempdir().expect("tempdir");
        let cg = Cgroups::with_hierarchy(CgroupDriver::Cgroupfs, Hierarchy::at(root.path(), true));
        assert!(cg.units.is_none());
        let pod = Cgroups::pod_name(Qos::Burstable, "a-b");
        assert_eq!(cg.pod_path(&pod), "/kubepods/burstable/poda-b");
        // Nothing to make for the pod: the runtime makes it with the sandbox.
        cg.ensure_pod(&pod, &CgroupValues::default()).await.expect("no-op");
        let dir = root.path().join("kubepods/burstable/poda-b");
        std::fs::create_dir_all(dir.join("c1")).expect("mkdir");
        let values = CgroupValues { memory_limit: Some(1 << 20), cpu_quota: Some(1_500), cpu_shares: 1024 };
        cg.write_values(&pod, &values).await.expect("write");
        // No rounding of the quota under cgroupfs.
        assert_eq!(std::fs::read_to_string(dir.join("cpu.max")).expect("read"), "1500 100000");
        cg.set_cpu_shares(&pod, 2048).await.expect("shares");
        assert_eq!(std::fs::read_to_string(dir.join("cpu.weight")).expect("read"), "79");
        assert_eq!(cg.read_values(cg.pod_path(&pod)).await.expect("read").cpu_shares, 2047);
        // Plain directories here, so the files written above keep them busy; an empty tree goes.
        for f in ["memory.max", "cpu.max", "cpu.weight"] {
            std::fs::remove_file(dir.join(f)).expect("rm");
        }
        assert!(cg.remove_pod("a-b").await);
        assert!(!dir.exists());
    }
}
