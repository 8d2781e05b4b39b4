//! The QoS parents' values, as the kubelet keeps them (pure): `kubepods`, the node allocatable
//! cgroup (`enforceNodeAllocatableCgroups` with the default `enforceNodeAllocatable: [pods]`),
//! and `burstable` and `besteffort` (the QoS container manager's `Start` and `UpdateCgroups`).
//! Writing them is [`super::Cgroups::ensure_qos`]'s; when is the caller's.
//!
//! Left out as the kubelet leaves them by default: memory QoS (cgroup v2 `memory.min` and
//! `memory.high` on the QoS parents, the alpha `MemoryQoS` gate, off by default), the
//! `qosReserved` memory limits of `burstable` and `besteffort` (the alpha `QOSReserved` gate),
//! and hugetlb (the kubelet holds the QoS parents' hugepage limits unbounded, which they are
//! when nobody sets them).

use super::name::{CgroupName, Qos};
use super::systemd::Resources;
use super::{MIN_SHARES, milli_cpu_to_shares};

/// What the node allocatable cgroup holds: the node's capacity less the system and kube
/// reservations (`getNodeAllocatableAbsolute`). The hard eviction threshold is not taken off:
/// the kubelet evicts before the pods reach it, and the cgroup limit stays above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu_milli: i64,
    /// Bytes.
    pub memory: i64,
    /// The node's process IDs (the kubelet's internal `pid` capacity, `pidlimit.Stats`: the
    /// lesser of `kernel.pid_max` and `kernel.threads-max`); 0 when unknown.
    pub pids: i64,
}

/// The values of the three QoS parents; a value left `None` is not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QosValues {
    /// `kubepods` (where Guaranteed pods live): shares from the allocatable cpu, the memory
    /// limit at the allocatable memory, `pids.max` at the allocatable process IDs.
    pub kubepods: Resources,
    /// `kubepods/burstable`: the shares of its pods' summed cpu requests.
    pub burstable: Resources,
    /// `kubepods/besteffort`: always `MinShares`.
    pub besteffort: Resources,
}

impl QosValues {
    /// Each parent with its values, top down (the parent before its children, as made).
    pub fn by_parent(&self) -> [(CgroupName, Resources); 3] {
        [
            (Qos::Guaranteed.parent(), self.kubepods),
            (Qos::Burstable.parent(), self.burstable),
            (Qos::BestEffort.parent(), self.besteffort),
        ]
    }
}

/// The QoS parents' values for a node with `node` allocatable whose Burstable pods request
/// `burstable_cpu_milli` in all. An allocatable amount the agent could not read (0) is left
/// unset rather than written: a `memory.max` of 0 would kill every pod.
pub fn values(node: NodeAllocatable, burstable_cpu_milli: i64) -> QosValues {
    let shares = |milli: i64| Some(milli_cpu_to_shares(milli));
    QosValues {
        kubepods: Resources {
            memory_limit: (node.memory > 0).then_some(Some(node.memory)),
            cpu_shares: (node.cpu_milli > 0).then(|| milli_cpu_to_shares(node.cpu_milli)),
            cpu_quota: None,
            pids_limit: (node.pids > 0).then_some(Some(node.pids)),
        },
        burstable: Resources { cpu_shares: shares(burstable_cpu_milli.max(0)), ..Default::default() },
        besteffort: Resources { cpu_shares: Some(MIN_SHARES), ..Default::default() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: i64 = 1 << 30;

    fn parent(memory: Option<i64>, shares: Option<i64>) -> Resources {
        Resources { memory_limit: memory.map(Some), cpu_shares: shares, ..Default::default() }
    }

    fn kubepods(memory: Option<i64>, shares: Option<i64>, pids: Option<i64>) -> Resources {
        Resources { pids_limit: pids.map(Some), ..parent(memory, shares) }
    }

    #[test]
    fn qos_parents_as_the_kubelet_sets_them() {
        let node = |cpu_milli, memory| NodeAllocatable { cpu_milli, memory, pids: 32_768 };
        // The guest's node: 2 CPUs, 2 GiB, pid_max 32768.
        let (small, small_kubepods) =
            (node(2000, 2 * GIB), kubepods(Some(2 * GIB), Some(2048), Some(32_768)));
        // (what, node allocatable, Burstable pods' cpu requests, kubepods, burstable shares)
        let cases = [
            ("no Burstable pod", small, 0, small_kubepods, 2),
            ("one Burstable pod asking 100m", small, 100, small_kubepods, 102),
            ("Burstable pods asking 1.5 CPUs", small, 1500, small_kubepods, 1536),
            ("1m is below the kernel's floor", small, 1, small_kubepods, 2),
            ("a 1-CPU node", node(1000, GIB), 250, kubepods(Some(GIB), Some(1024), Some(32_768)), 256),
            (
                "a huge node: shares capped",
                node(512_000, 1 << 40),
                0,
                kubepods(Some(1 << 40), Some(262_144), Some(32_768)),
                2,
            ),
            (
                "memory unreadable: no limit written",
                node(2000, 0),
                0,
                kubepods(None, Some(2048), Some(32_768)),
                2,
            ),
            (
                "pid limits unreadable: none written",
                NodeAllocatable { pids: 0, ..small },
                0,
                parent(Some(2 * GIB), Some(2048)),
                2,
            ),
        ];
        for (what, node, burstable, kubepods, burstable_shares) in cases {
            let got = values(node, burstable);
            assert_eq!(got.kubepods, kubepods, "{what}: kubepods");
            assert_eq!(got.burstable, parent(None, Some(burstable_shares)), "{what}: burstable");
            assert_eq!(got.besteffort, parent(None, Some(2)), "{what}: besteffort");
        }
    }

    #[test]
    fn parents_top_down() {
        let v = values(NodeAllocatable { cpu_milli: 1000, memory: GIB, pids: 0 }, 0);
        let names: Vec<String> = v.by_parent().iter().map(|(n, _)| n.to_cgroupfs()).collect();
        assert_eq!(names, ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"]);
    }
}
