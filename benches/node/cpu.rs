//! Where a start's CPU goes on the machine: snapshots of /proc before and after, by process
//! group. Every process's utime + stime, and the cutime + cstime of the children it reaped: a
//! short-lived `runc` reaped by its shim counts in the runc group; a process that started in
//! between counts from zero; one that ended in between and was reaped by nobody alive at the
//! end is missed (the rest of the machine row still has it: that is /proc/stat's busy time).

use std::collections::HashMap;

/// The groups reported. The shims' own time and that of the `runc` processes they reaped (a
/// create, start or exec each) are apart: the second counts the runtime's invocations.
pub const GROUPS: [&str; 6] = [
    "containerd",
    "containerd-shim",
    "runc and the probe commands (reaped by the shims)",
    "the agent (crilet, or the upstream kubelet on its side)",
    "the benchmark itself (the raw client)",
    "the control plane (etcd, kube-*; hack/bench.sh --cluster)",
];

#[derive(Default)]
pub struct Shot {
    /// Busy clock ticks of the whole machine (/proc/stat: all but idle and iowait).
    busy: u64,
    /// Ticks the hypervisor gave to others while this machine's CPUs wanted to run (steal).
    steal: u64,
    /// (pid, start time) → (group index, own ticks, reaped children's ticks).
    procs: HashMap<(u32, u64), (Option<usize>, u64, u64)>,
}

fn group_of(comm: &str) -> Option<usize> {
    match comm {
        "containerd" => Some(0),
        c if c.starts_with("containerd-shim") => Some(1),
        // A runc still running at the snapshot (one that ended is in its shim's reaped time).
        c if c.starts_with("runc") => Some(2),
        c if c.starts_with("crilet") || c == "kubelet" => Some(3),
        // The bench binary `node-<hash>` (a name cut to 15 characters).
        c if c.starts_with("node-") => Some(4),
        c if c == "etcd" || c.starts_with("kube-") => Some(5),
        _ => None,
    }
}

pub fn shot() -> Shot {
    let mut s = Shot::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is inside user already)
        s.busy = f.iter().take(8).enumerate().filter(|(i, _)| !matches!(i, 3 | 4)).map(|(_, v)| v).sum();
        s.steal = f.get(7).copied().unwrap_or(0);
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return s };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let (Some(open), Some(close)) = (text.find('('), text.rfind(')')) else { continue };
        let comm = &text[open + 1..close];
        // Fields after the command start at the state, field 3.
        let f: Vec<u64> = text[close + 2..].split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
        if f.len() < 20 {
            continue;
        }
        s.procs.insert((pid, f[19]), (group_of(comm), f[11] + f[12], f[13] + f[14]));
    }
    s
}

/// Where the hypervisor's steal time is in [`spent`]'s list: after the groups.
pub const STEAL: usize = GROUPS.len();

/// CPU seconds between `before` and `after`: the machine's, then each of [`GROUPS`], then the
/// steal time (a virtual machine's CPUs waiting for the host: a round slowed from outside).
pub fn spent(before: &Shot, after: &Shot, tck: f64) -> (f64, Vec<f64>) {
    let mut groups = vec![0u64; GROUPS.len()];
    for (k, (g, own, reaped)) in &after.procs {
        let Some(g) = g else { continue };
        let (own0, reaped0) = before.procs.get(k).map_or((0, 0), |(_, o, r)| (*o, *r));
        groups[*g] += own.saturating_sub(own0);
        // A shim's reaped children are runc's; anyone else's stay with the parent.
        let to = if *g == 1 { 2 } else { *g };
        groups[to] += reaped.saturating_sub(reaped0);
    }
    let secs = |t: u64| t as f64 / tck;
    groups.push(after.steal.saturating_sub(before.steal));
    (secs(after.busy.saturating_sub(before.busy)), groups.into_iter().map(secs).collect())
}
