//! The summary from the raw samples (what the collector read from the runtime, the cgroups and
//! the host), with the CPU rates from the previous samples. Pure but for the [`Rates`] it
//! updates.

use super::host::{Fs, Host};
use super::rate::{CpuSample, Rates, memory_available, working_set};
use super::summary::*;
use crate::cgroup::files::MemoryUsage;

/// A memory reading, from the runtime or a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mem {
    pub usage: u64,
    pub working_set: u64,
    pub rss: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    pub swap: Option<u64>,
}

impl Mem {
    /// A cgroup's memory: the working set is usage less the inactive file cache.
    pub fn of_cgroup(m: &MemoryUsage) -> Mem {
        Mem {
            usage: m.usage,
            working_set: working_set(m.usage, m.inactive_file),
            rss: Some(m.rss),
            page_faults: Some(m.page_faults),
            major_page_faults: Some(m.major_page_faults),
            swap: m.swap,
        }
    }

    /// The node's memory: the root cgroup's when it has one (v1), else `/proc/meminfo`'s used
    /// memory (`MemTotal - MemFree`) less `Inactive(file)`, as cadvisor reads the root on v2.
    pub fn of_node(root: Option<&MemoryUsage>, host: &Host) -> Mem {
        match root {
            Some(m) => Mem::of_cgroup(m),
            None => {
                let usage = host.mem_total.saturating_sub(host.mem_free);
                Mem {
                    usage,
                    working_set: working_set(usage, host.inactive_file),
                    swap: host.swap_used,
                    ..Mem::default()
                }
            }
        }
    }
}

/// A measured use of a disk: (bytes, inodes).
pub type Disk = (u64, u64);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSample {
    pub name: String,
    /// The rate's key: the container's ID.
    pub id: String,
    pub start: Time,
    pub cpu: Option<CpuSample>,
    pub memory: Option<(Time, Mem)>,
    /// The writable layer's and the log directory's use, each with when it was read.
    pub rootfs: Option<(Time, Disk)>,
    pub logs: Option<(Time, Disk)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSample {
    pub pod_ref: PodReference,
    pub start: Time,
    pub cpu: Option<CpuSample>,
    pub memory: Option<Mem>,
    pub network: Option<NetworkStats>,
    /// emptyDir volumes by name, each with when it was walked.
    pub volumes: Vec<(String, (Time, Disk))>,
    pub containers: Vec<ContainerSample>,
    pub process_count: Option<u64>,
}

/// Everything one collection read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    pub now: Time,
    pub node_name: String,
    pub host: Host,
    pub node_cpu: Option<CpuSample>,
    pub node_memory: Option<Mem>,
    pub pods_cpu: Option<CpuSample>,
    pub pods_memory: Option<Mem>,
    /// The runtime's image filesystem: its statvfs, and what the images use (bytes, inodes).
    pub image_fs: Option<(Option<Fs>, Disk)>,
    pub pods: Vec<PodSample>,
}

fn time_of(ns: i64) -> Time {
    Time(jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or_default())
}

fn cpu(rates: &mut Rates, key: &str, s: Option<CpuSample>) -> Option<CpuStats> {
    let s = s?;
    Some(CpuStats {
        time: time_of(s.at_ns),
        usage_nano_cores: rates.observe(key, s),
        usage_core_nano_seconds: Some(s.usage_ns),
    })
}

fn memory(time: Time, m: Option<Mem>, capacity: Option<u64>) -> Option<MemoryStats> {
    let m = m?;
    Some(MemoryStats {
        time,
        available_bytes: capacity.map(|c| memory_available(c, m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: m.rss,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    })
}

fn swap(time: Time, m: Option<Mem>, free: Option<u64>) -> Option<SwapStats> {
    let used = m?.swap?;
    Some(SwapStats { time, swap_usage_bytes: Some(used), swap_available_bytes: free })
}

/// `used` (bytes, inodes) on a filesystem whose totals are `fs`.
fn fs_stats(time: Time, fs: Option<Fs>, used: Option<Disk>) -> FsStats {
    FsStats {
        time,
        available_bytes: fs.map(|f| f.available),
        capacity_bytes: fs.map(|f| f.capacity),
        used_bytes: used.map(|u| u.0),
        inodes_free: fs.map(|f| f.inodes_free),
        inodes: fs.map(|f| f.inodes),
        inodes_used: used.map(|u| u.1),
    }
}

/// The summary of `s`; `rates` gives (and keeps) each CPU's previous sample.
pub fn summary(s: &Samples, rates: &mut Rates) -> Summary {
    let now = s.now;
    let host = &s.host;
    let root_fs = host.root_fs;
    let image_fs = s.image_fs.and_then(|(fs, _)| fs);
    let interface = |i: &super::host::Interface| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    };
    let network = (!host.interfaces.is_empty()).then(|| {
        let default = host
            .default_interface
            .as_ref()
            .and_then(|d| host.interfaces.iter().find(|i| &i.name == d))
            .unwrap_or(&host.interfaces[0]);
        NetworkStats {
            time: now,
            default: interface(default),
            interfaces: host.interfaces.iter().map(interface).collect(),
        }
    });
    let mut system_containers = Vec::new();
    if s.pods_cpu.is_some() || s.pods_memory.is_some() {
        system_containers.push(ContainerStats {
            name: SYSTEM_CONTAINER_PODS.to_string(),
            start_time: Time(jiff::Timestamp::from_second(host.boot_time_s.unwrap_or(0)).unwrap_or_default()),
            cpu: cpu(rates, "system/pods", s.pods_cpu),
            memory: memory(now, s.pods_memory, None),
            ..Default::default()
        });
    }
    let node = NodeStats {
        node_name: s.node_name.clone(),
        system_containers,
        start_time: Time(jiff::Timestamp::from_second(host.boot_time_s.unwrap_or(0)).unwrap_or_default()),
        cpu: cpu(rates, "node", s.node_cpu),
        memory: memory(now, s.node_memory, Some(host.mem_total)),
        network,
        fs: root_fs.map(|f| fs_stats(now, Some(f), Some((f.used, f.inodes.saturating_sub(f.inodes_free))))),
        runtime: s.image_fs.map(|(fs, used)| RuntimeStats {
            image_fs: Some(fs_stats(now, fs, Some(used))),
            // One filesystem for images and writable layers, as containerd's default.
            container_fs: Some(fs_stats(now, fs, Some(used))),
        }),
        rlimit: Some(RlimitStats {
            time: now,
            maxpid: (host.max_pid > 0).then_some(host.max_pid),
            curproc: host.processes,
        }),
        swap: host.swap_used.map(|used| SwapStats {
            time: now,
            swap_usage_bytes: Some(used),
            swap_available_bytes: host.swap_free,
        }),
    };
    let pods = s
        .pods
        .iter()
        .map(|p| {
            let containers: Vec<ContainerStats> = p
                .containers
                .iter()
                .map(|c| ContainerStats {
                    name: c.name.clone(),
                    start_time: c.start,
                    cpu: cpu(rates, &c.id, c.cpu),
                    memory: c.memory.and_then(|(t, m)| memory(t, Some(m), None)),
                    swap: c.memory.and_then(|(t, m)| swap(t, Some(m), None)),
                    rootfs: c.rootfs.map(|(t, u)| fs_stats(t, image_fs, Some(u))),
                    logs: c.logs.map(|(t, u)| fs_stats(t, root_fs, Some(u))),
                })
                .collect();
            let volume_stats: Vec<VolumeStats> = p
                .volumes
                .iter()
                .map(|(name, (at, used))| VolumeStats {
                    fs: fs_stats(*at, root_fs, Some(*used)),
                    name: name.clone(),
                })
                .collect();
            // The kubelet's ephemeral storage: the containers' writable layers and logs and
            // the pod's emptyDir volumes, at the latest of their times (`calcEphemeralStorage`).
            let mut total: Disk = (0, 0);
            let mut latest: Option<Time> = None;
            let mut add = |d: Option<(Time, Disk)>| {
                if let Some((t, (b, i))) = d {
                    total = (total.0 + b, total.1 + i);
                    latest = latest.max(Some(t));
                }
            };
            p.containers.iter().for_each(|c| {
                add(c.rootfs);
                add(c.logs);
            });
            p.volumes.iter().for_each(|(_, d)| add(Some(*d)));
            let measured =
                p.containers.iter().any(|c| c.rootfs.is_some() || c.logs.is_some()) || !p.volumes.is_empty();
            PodStats {
                pod_ref: p.pod_ref.clone(),
                start_time: p.start,
                containers,
                cpu: cpu(rates, &format!("pod/{}", p.pod_ref.uid), p.cpu),
                memory: memory(now, p.memory, None),
                swap: swap(now, p.memory, None),
                network: p.network.clone(),
                volume_stats,
                ephemeral_storage: measured.then(|| fs_stats(latest.unwrap_or(now), root_fs, Some(total))),
                process_stats: p.process_count.map(|n| ProcessStats { process_count: Some(n) }),
            }
        })
        .collect();
    rates.forget_stale(now.0.as_nanosecond() as i64);
    Summary { node, pods }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn samples(at_s: i64, node_cpu_s: u64, pod_cpu_s: u64) -> Samples {
        let now = time_of(at_s * S);
        Samples {
            now,
            node_name: "n1".into(),
            host: Host {
                boot_time_s: Some(100),
                mem_total: 1000,
                root_fs: Some(Fs { capacity: 100, available: 40, used: 60, inodes: 10, inodes_free: 4 }),
                max_pid: 4096,
                processes: Some(7),
                ..Host::default()
            },
            node_cpu: Some(CpuSample { at_ns: at_s * S, usage_ns: node_cpu_s * S as u64 }),
            node_memory: Some(Mem { usage: 500, working_set: 300, ..Mem::default() }),
            image_fs: Some((
                Some(Fs { capacity: 200, available: 50, used: 150, inodes: 20, inodes_free: 5 }),
                (90, 9),
            )),
            pods: vec![PodSample {
                pod_ref: PodReference { name: "p".into(), namespace: "ns".into(), uid: "u1".into() },
                cpu: Some(CpuSample { at_ns: at_s * S, usage_ns: pod_cpu_s * S as u64 }),
                memory: Some(Mem { usage: 80, working_set: 60, ..Mem::default() }),
                volumes: vec![("scratch".into(), (time_of((at_s - 30) * S), (8, 2)))],
                containers: vec![ContainerSample {
                    name: "c".into(),
                    id: "cid".into(),
                    cpu: Some(CpuSample { at_ns: at_s * S, usage_ns: pod_cpu_s * S as u64 }),
                    memory: Some((now, Mem { usage: 70, working_set: 50, ..Mem::default() })),
                    rootfs: Some((time_of((at_s - 5) * S), (4, 1))),
                    logs: Some((time_of((at_s - 8) * S), (2, 1))),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Samples::default()
        }
    }

    /// Two collections: the rates come with the second; the derived fields each time.
    #[test]
    fn summary_of_two_collections() {
        let mut rates = Rates::default();
        let first = summary(&samples(1000, 10, 2), &mut rates);
        assert_eq!(first.node.cpu.as_ref().and_then(|c| c.usage_nano_cores), None);
        let second = summary(&samples(1010, 30, 7), &mut rates);
        let node = &second.node;
        assert_eq!(
            node.cpu.as_ref().and_then(|c| c.usage_nano_cores),
            Some(2 * S as u64),
            "20 s of CPU in 10 s"
        );
        let mem = node.memory.as_ref().expect("node memory");
        assert_eq!((mem.working_set_bytes, mem.available_bytes), (Some(300), Some(700)));
        let fs = node.fs.as_ref().expect("node fs");
        assert_eq!(
            (fs.capacity_bytes, fs.available_bytes, fs.used_bytes, fs.inodes_used),
            (Some(100), Some(40), Some(60), Some(6))
        );
        let image = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()).expect("imagefs");
        assert_eq!(
            (image.used_bytes, image.inodes_used, image.capacity_bytes),
            (Some(90), Some(9), Some(200))
        );
        assert_eq!(node.rlimit.as_ref().map(|r| (r.maxpid, r.curproc)), Some((Some(4096), Some(7))));
        let pod = &second.pods[0];
        assert_eq!(pod.cpu.as_ref().and_then(|c| c.usage_nano_cores), Some(S as u64 / 2));
        assert_eq!(pod.containers[0].cpu.as_ref().and_then(|c| c.usage_nano_cores), Some(S as u64 / 2));
        assert_eq!(pod.memory.as_ref().and_then(|m| m.working_set_bytes), Some(60));
        assert_eq!(pod.memory.as_ref().and_then(|m| m.available_bytes), None, "no limit known: left out");
        let eph = pod.ephemeral_storage.as_ref().expect("ephemeral storage");
        assert_eq!((eph.used_bytes, eph.inodes_used, eph.capacity_bytes), (Some(14), Some(4), Some(100)));
        // Each disk number at the time it was read; their sum at the latest of those.
        let (rootfs, logs) = (&pod.containers[0].rootfs, &pod.containers[0].logs);
        let t = |s: i64| Some(time_of(s * S));
        assert_eq!(rootfs.as_ref().map(|f| f.time), t(1005));
        assert_eq!(logs.as_ref().map(|f| f.time), t(1002));
        assert_eq!(pod.volume_stats[0].fs.time, time_of(980 * S));
        assert_eq!(eph.time, time_of(1005 * S));
        assert_eq!(
            pod.containers[0].rootfs.as_ref().and_then(|r| r.capacity_bytes),
            Some(200),
            "rootfs on the imagefs"
        );
        assert_eq!(pod.volume_stats[0].name, "scratch");
        let json = serde_json::to_value(&second).expect("json");
        assert!(json["pods"][0]["ephemeral-storage"].is_object(), "{json}");
        assert!(json["pods"][0]["volume"][0]["usedBytes"] == 8, "{json}");
        assert_eq!(json["node"]["startTime"], "1970-01-01T00:01:40Z");
    }

    #[test]
    fn node_memory_from_the_root_cgroup_or_meminfo() {
        let host = Host { mem_total: 1000, mem_free: 300, inactive_file: 200, ..Host::default() };
        let v1 = MemoryUsage { usage: 600, inactive_file: 100, rss: 50, ..MemoryUsage::default() };
        for (root, usage, ws) in [(Some(&v1), 600, 500), (None, 700, 500)] {
            let m = Mem::of_node(root, &host);
            assert_eq!((m.usage, m.working_set), (usage, ws), "{root:?}");
        }
    }
}
