//! The node's resource statistics, as the kubelet's stats provider gathers them for
//! `/stats/summary`, `/metrics/resource` and its eviction manager: CPU and memory per container
//! and pod from their cgroups, for the node from the root and `kubepods` cgroups and the host
//! (`/proc`, statvfs), read when asked; the writable layers (CRI `ListContainerStats`), the pods'
//! networks (`ListPodSandboxStats`), the image filesystem (`ImageFsInfo`) and the disk use of
//! logs and emptyDir volumes kept warm by the housekeeping loop (`cache`), as the kubelet's
//! cAdvisor and volume stats are.
//!
//! The [`Collector`] does the reading (`cri`, `cgroup::Cgroups`, files on the blocking pool);
//! what is derived from the readings is pure: what is due to be walked (`cache`), the rates
//! (`rate`, which keeps each CPU's previous sample), the summary's shape (`shape`), its JSON
//! (`summary`) and the Prometheus text of the resource metrics (`resource_metrics`).

pub mod cache;
pub mod host;
pub mod rate;
pub mod resource_metrics;
pub mod shape;
pub mod summary;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

use self::cache::{HOUSEKEEPING_INTERVAL, Measured, RuntimeSample, Wanted};
use self::rate::{CpuSample, Rates};
pub use self::rate::{memory_available, working_set};
use self::shape::{ContainerSample, Mem, PodSample, Samples};
use self::summary::{InterfaceStats, NetworkStats, PodReference, Summary, Time};
use crate::cgroup::{Cgroups, files::Usage};
use crate::cri::{CriClient, CriError, api};
use crate::registry::Registry;

/// Where the collector reads from, and what it keeps between requests (`cache`).
#[derive(Clone)]
pub struct Collector {
    cri: CriClient,
    cgroups: Arc<Cgroups>,
    registry: Registry,
    node_name: String,
    root_dir: PathBuf,
    pod_logs_dir: PathBuf,
    /// `--volume-stats-agg-period`; zero: emptyDir volumes are not measured.
    volume_period: Duration,
    rates: Arc<Mutex<Rates>>,
    runtime: Arc<Mutex<Option<Arc<RuntimeSample>>>>,
    disks: Arc<Mutex<HashMap<PathBuf, Measured>>>,
    /// When stats were last asked for (housekeeping pauses when nobody asks).
    asked: Arc<Mutex<Option<std::time::Instant>>>,
}

/// What a collection covers: everything, or only CPU and memory (`/metrics/resource`, as the
/// kubelet's `GetCPUAndMemoryStats`: no disks or networks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Full,
    CpuAndMemory,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Collector {
    pub fn new(
        cri: CriClient,
        cgroups: Arc<Cgroups>,
        registry: Registry,
        node_name: String,
        root_dir: PathBuf,
        pod_logs_dir: PathBuf,
        volume_period: Duration,
    ) -> Self {
        Collector {
            cri,
            cgroups,
            registry,
            node_name,
            root_dir,
            pod_logs_dir,
            volume_period,
            rates: Arc::default(),
            runtime: Arc::default(),
            disks: Arc::default(),
            asked: Arc::default(),
        }
    }

    /// The background half (a long-lived loop): every [`HOUSEKEEPING_INTERVAL`] the runtime's
    /// numbers are sampled and the directories that are due walked, until `cancel`.
    pub async fn housekeeping(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(HOUSEKEEPING_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if !cache::wanted(*lock(&self.asked), std::time::Instant::now()) {
                continue;
            }
            if let Err(e) = self.sample_runtime().await {
                tracing::debug!(error = %e, "the runtime's container stats are unavailable");
            }
            self.walk_disks().await;
        }
    }

    /// Samples the runtime's numbers and keeps them. Without the containers' stats nothing is
    /// kept, so the next request asks again (and fails as the kubelet's scrape fails).
    async fn sample_runtime(&self) -> Result<Arc<RuntimeSample>, CriError> {
        let span = tracing::trace_span!("stats.runtime");
        let at = jiff::Timestamp::now();
        let (containers, sandboxes, image_fs) = tracing::Instrument::instrument(
            async {
                tokio::join!(
                    self.cri.list_container_stats(),
                    self.cri.list_pod_sandbox_stats(),
                    self.cri.image_fs_info()
                )
            },
            span,
        )
        .await;
        let containers = match containers {
            Ok(list) => {
                list.into_iter().filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s))).collect()
            }
            Err(e) => {
                *lock(&self.runtime) = None;
                return Err(e);
            }
        };
        let networks = match sandboxes {
            Ok(list) => list
                .into_iter()
                .filter_map(|s| {
                    let uid = s.attributes.as_ref()?.metadata.as_ref()?.uid.clone();
                    Some((uid, s.linux?.network?))
                })
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "pod network stats unavailable");
                HashMap::new()
            }
        };
        let image_fs = match image_fs {
            Ok(info) => info.into_iter().next(),
            Err(e) => {
                tracing::debug!(error = %e, "image filesystem stats unavailable");
                None
            }
        };
        let sample = Arc::new(RuntimeSample { at, containers, networks, image_fs });
        *lock(&self.runtime) = Some(sample.clone());
        Ok(sample)
    }

    /// Walks the pods' directories that are due (on the blocking pool) and keeps the results.
    async fn walk_disks(&self) {
        let wanted: Vec<Wanted> =
            self.active_pods().iter().flat_map(|p| self.disk_dirs(p)).map(|(_, w)| w).collect();
        let due = cache::due(&wanted, &lock(&self.disks), jiff::Timestamp::now());
        if due.is_empty() && lock(&self.disks).len() == wanted.len() {
            return;
        }
        let walked = crate::blocking(move || {
            let _span = tracing::trace_span!("stats.disks").entered();
            Ok(due
                .into_iter()
                .map(|dir| {
                    let used = host::disk_usage(&dir);
                    (dir, Measured { at: Time(jiff::Timestamp::now()), used })
                })
                .collect())
        })
        .await
        .unwrap_or_default();
        cache::merge(&mut lock(&self.disks), &wanted, walked);
    }

    fn active_pods(&self) -> Vec<Pod> {
        self.registry.pods().into_iter().map(|r| r.pod).filter(active).collect()
    }

    /// One collection: the summary now. CPU and memory are read from the cgroups now; the
    /// runtime's numbers and the disks' come from the last housekeeping, each with the time it
    /// was read (sampled here when there is none yet). Fails only when the runtime's container
    /// stats cannot be had (what the kubelet reports as a scrape error); anything else missing
    /// is left out.
    pub async fn summary(&self, scope: Scope) -> Result<Summary, CriError> {
        *lock(&self.asked) = Some(std::time::Instant::now());
        let span = tracing::trace_span!("stats.collect", op = ?scope);
        tracing::Instrument::instrument(self.collect(scope), span).await
    }

    async fn collect(&self, scope: Scope) -> Result<Summary, CriError> {
        let pods = self.active_pods();
        let full = scope == Scope::Full;
        let now = jiff::Timestamp::now();
        let cached = lock(&self.runtime).clone().filter(|s| cache::fresh(s.at, now));
        let runtime = match cached {
            Some(s) => s,
            None => self.sample_runtime().await?,
        };

        // Every cgroup read in one trip to the blocking pool: the node's root, kubepods, each
        // pod's and each container's (the runtime's numbers stand in for a container whose
        // cgroup cannot be read).
        let mut paths = vec!["/".to_string(), self.cgroups.kubepods_path()];
        let mut plans = Vec::with_capacity(pods.len());
        for pod in &pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let pod_cgroup =
                Cgroups::pod_name(crate::cgroup::Qos::from_class(crate::status::qos_class(pod)), &uid);
            let pod_index = paths.len();
            paths.push(self.cgroups.pod_path(&pod_cgroup));
            let mut containers = Vec::new();
            for (name, id, started) in running_containers(pod) {
                paths.push(self.cgroups.container_path(&pod_cgroup, &id));
                containers.push((name, id, started, paths.len() - 1));
            }
            plans.push((pod_index, containers));
        }
        let read_at = jiff::Timestamp::now();
        let usages = tracing::Instrument::instrument(
            self.cgroups.usages(paths),
            tracing::trace_span!("stats.cgroups"),
        )
        .await;
        let usage = |i: usize| usages.get(i).copied().unwrap_or_default();

        // The host on the blocking pool.
        let root_dir = self.root_dir.clone();
        let image_mount = runtime.image_fs.as_ref().filter(|_| full).map(|f| PathBuf::from(&f.mountpoint));
        let (host, image_statvfs) = crate::blocking(move || {
            let host = tracing::trace_span!("stats.host").in_scope(|| host::read(&root_dir));
            Ok((host, image_mount.as_deref().and_then(host::statvfs)))
        })
        .await
        .unwrap_or_default();
        let disks = if full { lock(&self.disks).clone() } else { HashMap::new() };

        let at_ns = read_at.as_nanosecond() as i64;
        let cgroup_cpu = |u: &Usage| u.cpu_ns.map(|usage_ns| CpuSample { at_ns, usage_ns });
        let root = usage(0);
        let kubepods = usage(1);
        let mut samples = Samples {
            now: Time(read_at),
            node_name: self.node_name.clone(),
            node_cpu: cgroup_cpu(&root),
            node_memory: Some(Mem::of_node(root.memory.as_ref(), &host)),
            pods_cpu: cgroup_cpu(&kubepods),
            pods_memory: kubepods.memory.as_ref().map(Mem::of_cgroup),
            image_fs: runtime.image_fs.as_ref().filter(|_| full).map(|f| {
                let used = (f.used_bytes, f.inodes_used);
                (image_statvfs, used)
            }),
            host,
            pods: Vec::with_capacity(pods.len()),
        };
        let sampled_at = runtime.at;
        for (pod, (pod_index, containers)) in pods.iter().zip(plans) {
            let dirs = if full { self.disk_dirs(pod) } else { Vec::new() };
            let disk = |key: &str| {
                let (_, w) = dirs.iter().find(|(k, _)| k == key)?;
                disks.get(&w.dir).map(|m| (m.at, m.used))
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let pod_usage = usage(pod_index);
            let containers = containers
                .into_iter()
                .map(|(name, id, start, index)| {
                    let cri = runtime.containers.get(&id);
                    let own = usage(index);
                    let cpu = cgroup_cpu(&own).or_else(|| cri.and_then(cri_cpu));
                    let memory = own
                        .memory
                        .map(|m| (Time(read_at), Mem::of_cgroup(&m)))
                        .or_else(|| cri.and_then(cri_memory));
                    let rootfs = cri.and_then(|s| s.writable_layer.as_ref()).map(|w| {
                        let at = match w.timestamp {
                            0 => sampled_at,
                            ns => jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(sampled_at),
                        };
                        let used = (
                            w.used_bytes.as_ref().map_or(0, |v| v.value),
                            w.inodes_used.as_ref().map_or(0, |v| v.value),
                        );
                        (Time(at), used)
                    });
                    let logs = disk(&format!("logs/{name}"));
                    ContainerSample { name, id, start, cpu, memory, rootfs: rootfs.filter(|_| full), logs }
                })
                .collect();
            samples.pods.push(PodSample {
                pod_ref: PodReference {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    uid: uid.clone(),
                },
                start: Time(
                    pod.status
                        .as_ref()
                        .and_then(|s| s.start_time.as_ref())
                        .map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0),
                ),
                cpu: cgroup_cpu(&pod_usage),
                memory: pod_usage.memory.as_ref().map(Mem::of_cgroup),
                network: runtime.networks.get(&uid).filter(|_| full).map(|n| network(n, sampled_at)),
                volumes: dirs
                    .iter()
                    .filter_map(|(k, _)| Some((k.strip_prefix("volume/")?.to_string(), disk(k)?)))
                    .collect(),
                containers,
                process_count: None,
            });
        }
        let mut rates = lock(&self.rates);
        Ok(tracing::trace_span!("stats.shape").in_scope(|| shape::summary(&samples, &mut rates)))
    }

    /// The directories measured for a pod, by key: `logs/<container>` (its log directory, every
    /// housekeeping) and `volume/<name>` (each emptyDir not in memory, every
    /// `--volume-stats-agg-period`, unless zero).
    fn disk_dirs(&self, pod: &Pod) -> Vec<(String, Wanted)> {
        let (ns, name, uid) = (
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.uid.as_deref().unwrap_or_default(),
        );
        let log_dir = self.pod_logs_dir.join(format!("{ns}_{name}_{uid}"));
        let mut out: Vec<(String, Wanted)> = running_containers(pod)
            .into_iter()
            .map(|(c, _, _)| {
                (format!("logs/{c}"), Wanted { dir: log_dir.join(&c), period: HOUSEKEEPING_INTERVAL })
            })
            .collect();
        if self.volume_period.is_zero() {
            return out;
        }
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).map_or(&[][..], Vec::as_slice);
        for v in volumes {
            let Some(e) = &v.empty_dir else { continue };
            if e.medium.as_deref() == Some("Memory") {
                continue;
            }
            let dir = crate::node::empty_dir(&self.root_dir, uid, &v.name);
            out.push((format!("volume/{}", v.name), Wanted { dir, period: self.volume_period }));
        }
        out
    }
}

/// A pod the summary reports: one not yet finished (a terminated pod's containers are gone).
fn active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    !matches!(phase, "Succeeded" | "Failed")
}

/// Each running container of the pod's status: (name, runtime ID, start time).
fn running_containers(pod: &Pod) -> Vec<(String, String, Time)> {
    let status = pod.status.as_ref();
    let lists = status.into_iter().flat_map(|s| {
        [s.init_container_statuses.as_ref(), s.container_statuses.as_ref()].into_iter().flatten().flatten()
    });
    lists
        .filter_map(|c| {
            let started = c.state.as_ref()?.running.as_ref()?.started_at.as_ref().map(|t| t.0);
            let id = c.container_id.as_deref()?;
            let id = id.split_once("://").map_or(id, |(_, id)| id);
            Some((c.name.clone(), id.to_string(), Time(started.unwrap_or(jiff::Timestamp::UNIX_EPOCH))))
        })
        .collect()
}

fn cri_cpu(s: &api::ContainerStats) -> Option<CpuSample> {
    let cpu = s.cpu.as_ref()?;
    Some(CpuSample { at_ns: cpu.timestamp, usage_ns: cpu.usage_core_nano_seconds.as_ref()?.value })
}

fn cri_memory(s: &api::ContainerStats) -> Option<(Time, Mem)> {
    let m = s.memory.as_ref()?;
    let v = |x: &Option<api::UInt64Value>| x.as_ref().map(|v| v.value);
    let working_set = v(&m.working_set_bytes)?;
    let at = jiff::Timestamp::from_nanosecond(i128::from(m.timestamp)).unwrap_or_default();
    let swap = s.swap.as_ref().and_then(|w| v(&w.swap_usage_bytes));
    Some((
        Time(at),
        Mem {
            usage: v(&m.usage_bytes).unwrap_or(working_set),
            working_set,
            rss: v(&m.rss_bytes),
            page_faults: v(&m.page_faults),
            major_page_faults: v(&m.major_page_faults),
            swap,
        },
    ))
}

/// The runtime's network counters of a pod; `now` stands for the time when the runtime gives
/// none (containerd leaves it 0).
fn network(n: &api::NetworkUsage, now: jiff::Timestamp) -> NetworkStats {
    let v = |x: &Option<api::UInt64Value>| x.as_ref().map(|v| v.value);
    let iface = |i: &api::NetworkInterfaceUsage| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: v(&i.rx_bytes),
        rx_errors: v(&i.rx_errors),
        tx_bytes: v(&i.tx_bytes),
        tx_errors: v(&i.tx_errors),
    };
    let default = n.default_interface.as_ref().map(iface).unwrap_or_default();
    NetworkStats {
        time: Time(match n.timestamp {
            0 => now,
            ns => jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(now),
        }),
        default,
        interfaces: n.interfaces.iter().map(iface).collect(),
    }
}
