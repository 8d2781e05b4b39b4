//! The node's resource statistics, as the kubelet's stats provider gathers them for
//! `/stats/summary`, `/metrics/resource` and its eviction manager: per container from the
//! runtime (CRI `ListContainerStats`, the writable layer's use), per pod from its cgroup and the
//! runtime's `ListPodSandboxStats` (network), for the node from the root and `kubepods` cgroups
//! and the host (`/proc`, statvfs), the image filesystem from CRI `ImageFsInfo`.
//!
//! The [`Collector`] does the reading (`cri`, `cgroup::Cgroups`, files on the blocking pool);
//! what is derived from the readings is pure: the rates (`rate`, which keeps each CPU's previous
//! sample), the summary's shape (`shape`), its JSON (`summary`) and the Prometheus text of the
//! resource metrics (`resource_metrics`).

pub mod host;
pub mod rate;
pub mod resource_metrics;
pub mod shape;
pub mod summary;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

use self::rate::{CpuSample, Rates};
pub use self::rate::{memory_available, working_set};
use self::shape::{ContainerSample, Disk, Mem, PodSample, Samples};
use self::summary::{InterfaceStats, NetworkStats, PodReference, Summary, Time};
use crate::cgroup::{Cgroups, files::Usage};
use crate::cri::{CriClient, CriError, api};
use crate::registry::Registry;

/// Where the collector reads from.
#[derive(Clone)]
pub struct Collector {
    cri: CriClient,
    cgroups: Arc<Cgroups>,
    registry: Registry,
    node_name: String,
    root_dir: PathBuf,
    pod_logs_dir: PathBuf,
    rates: Arc<Mutex<Rates>>,
}

/// What a collection covers: everything, or only CPU and memory (`/metrics/resource`, as the
/// kubelet's `GetCPUAndMemoryStats`: no disk walks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Full,
    CpuAndMemory,
}

impl Collector {
    pub fn new(
        cri: CriClient,
        cgroups: Arc<Cgroups>,
        registry: Registry,
        node_name: String,
        root_dir: PathBuf,
        pod_logs_dir: PathBuf,
    ) -> Self {
        Collector { cri, cgroups, registry, node_name, root_dir, pod_logs_dir, rates: Arc::default() }
    }

    /// One collection: the summary now. Fails only when the runtime's container stats cannot be
    /// had (what the kubelet reports as a scrape error); anything else missing is left out.
    pub async fn summary(&self, scope: Scope) -> Result<Summary, CriError> {
        let pods: Vec<Pod> = self.registry.pods().into_iter().map(|r| r.pod).filter(active).collect();
        let full = scope == Scope::Full;
        let (container_stats, sandbox_stats, image_fs) =
            // The pods' network and the image filesystem only for the whole summary.
            tokio::join!(
                self.cri.list_container_stats(),
                async { if full { self.cri.list_pod_sandbox_stats().await } else { Ok(Vec::new()) } },
                async { if full { Some(self.cri.image_fs_info().await) } else { None } }
            );
        let container_stats: HashMap<String, api::ContainerStats> = container_stats?
            .into_iter()
            .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
            .collect();
        let networks: HashMap<String, api::NetworkUsage> = match sandbox_stats {
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
            Some(Ok(info)) => info.into_iter().next(),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "image filesystem stats unavailable");
                None
            }
            None => None,
        };

        // Every cgroup read in one trip to the blocking pool: the node's root, kubepods, each
        // pod's, and each container's the runtime gave no numbers for.
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
                let index = (!container_stats.get(&id).is_some_and(has_cpu_and_memory)).then(|| {
                    paths.push(self.cgroups.container_path(&pod_cgroup, &id));
                    paths.len() - 1
                });
                containers.push((name, id, started, index));
            }
            plans.push((pod_index, containers));
        }
        let read_at = jiff::Timestamp::now();
        let usages = self.cgroups.usages(paths).await;
        let usage = |i: usize| usages.get(i).copied().unwrap_or_default();

        // The host, and the disks (log directories, emptyDir volumes), on the blocking pool.
        let root_dir = self.root_dir.clone();
        let image_mount = image_fs.as_ref().map(|f| PathBuf::from(&f.mountpoint));
        let dirs: Vec<Vec<(String, PathBuf)>> = match full {
            true => pods.iter().map(|p| self.disk_dirs(p)).collect(),
            false => Vec::new(),
        };
        let (host, image_statvfs, disks) = crate::blocking(move || {
            let host = host::read(&root_dir);
            let image = image_mount.as_deref().and_then(host::statvfs);
            let disks: Vec<Vec<(String, Disk)>> = dirs
                .into_iter()
                .map(|pod| pod.into_iter().map(|(name, dir)| (name, host::disk_usage(&dir))).collect())
                .collect();
            Ok((host, image, disks))
        })
        .await
        .unwrap_or_default();

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
            image_fs: image_fs.map(|f| {
                let used = (f.used_bytes, f.inodes_used);
                (image_statvfs, used)
            }),
            host,
            pods: Vec::with_capacity(pods.len()),
        };
        for (i, (pod, (pod_index, containers))) in pods.iter().zip(plans).enumerate() {
            let disks: &[(String, Disk)] = disks.get(i).map_or(&[], Vec::as_slice);
            let disk = |key: &str| disks.iter().find(|(k, _)| k == key).map(|(_, d)| *d);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let pod_usage = usage(pod_index);
            let containers = containers
                .into_iter()
                .map(|(name, id, start, index)| {
                    let cri = container_stats.get(&id);
                    let own = index.map(usage);
                    let cpu = cri.and_then(cri_cpu).or_else(|| own.as_ref().and_then(cgroup_cpu));
                    let memory = cri
                        .and_then(cri_memory)
                        .or_else(|| own.and_then(|u| u.memory).map(|m| (Time(read_at), Mem::of_cgroup(&m))));
                    let rootfs = cri.and_then(|s| s.writable_layer.as_ref()).map(|w| {
                        (
                            w.used_bytes.as_ref().map_or(0, |v| v.value),
                            w.inodes_used.as_ref().map_or(0, |v| v.value),
                        )
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
                network: networks.get(&uid).map(|n| network(n, read_at)),
                volumes: disks
                    .iter()
                    .filter_map(|(k, d)| Some((k.strip_prefix("volume/")?.to_string(), *d)))
                    .collect(),
                containers,
                process_count: None,
            });
        }
        let mut rates = self.rates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(shape::summary(&samples, &mut rates))
    }

    /// The directories measured for a pod: `logs/<container>` (its log directory) and
    /// `volume/<name>` (each emptyDir not in memory).
    fn disk_dirs(&self, pod: &Pod) -> Vec<(String, PathBuf)> {
        let (ns, name, uid) = (
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.uid.as_deref().unwrap_or_default(),
        );
        let log_dir = self.pod_logs_dir.join(format!("{ns}_{name}_{uid}"));
        let mut out: Vec<(String, PathBuf)> = running_containers(pod)
            .into_iter()
            .map(|(c, _, _)| (format!("logs/{c}"), log_dir.join(&c)))
            .collect();
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).map_or(&[][..], Vec::as_slice);
        for v in volumes {
            let Some(e) = &v.empty_dir else { continue };
            if e.medium.as_deref() == Some("Memory") {
                continue;
            }
            out.push((format!("volume/{}", v.name), crate::node::empty_dir(&self.root_dir, uid, &v.name)));
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

fn has_cpu_and_memory(s: &api::ContainerStats) -> bool {
    cri_cpu(s).is_some() && cri_memory(s).is_some()
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
