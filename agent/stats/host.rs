//! The node's own numbers that no cgroup holds: `/proc/meminfo`, `/proc/net/dev` and the
//! default route, the filesystems (statvfs), the process counts, the boot time, and the disk
//! use of directories (logs, emptyDir volumes). Blocking: call on the blocking pool. The text
//! parsers are pure.

use std::path::Path;

/// A filesystem's totals (statvfs) and, when measured, what a directory on it uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fs {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// One interface's counters (`/proc/net/dev`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

/// The host's numbers for the node's summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Host {
    pub boot_time_s: Option<i64>,
    /// `MemTotal`, `MemFree` and `Inactive(file)` in bytes.
    pub mem_total: u64,
    pub mem_free: u64,
    pub inactive_file: u64,
    /// `SwapTotal - SwapFree`, when the node has swap.
    pub swap_used: Option<u64>,
    pub swap_free: Option<u64>,
    /// The interface of the default route, and every interface but loopback.
    pub default_interface: Option<String>,
    pub interfaces: Vec<Interface>,
    /// The filesystem of `--root-dir`.
    pub root_fs: Option<Fs>,
    pub max_pid: i64,
    pub processes: Option<i64>,
}

/// Reads [`Host`] (`root_dir`: the filesystem reported as the node's `fs`).
pub fn read(root_dir: &Path) -> Host {
    let text = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let meminfo = parse_meminfo(&text("/proc/meminfo"));
    let kb = |k: &str| meminfo.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let swap_total = kb("SwapTotal").unwrap_or(0);
    Host {
        boot_time_s: parse_btime(&text("/proc/stat")),
        mem_total: kb("MemTotal").unwrap_or(0),
        mem_free: kb("MemFree").unwrap_or(0),
        inactive_file: kb("Inactive(file)").unwrap_or(0),
        swap_used: (swap_total > 0).then(|| swap_total.saturating_sub(kb("SwapFree").unwrap_or(0))),
        swap_free: (swap_total > 0).then(|| kb("SwapFree").unwrap_or(0)),
        default_interface: parse_default_route(&text("/proc/net/route")),
        interfaces: parse_net_dev(&text("/proc/net/dev")),
        root_fs: statvfs(root_dir),
        max_pid: crate::node::max_pids(),
        processes: count_processes(),
    }
}

/// The totals of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> Option<Fs> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let frag = s.fragment_size() as u64;
    let capacity = s.blocks() as u64 * frag;
    let free = s.blocks_free() as u64 * frag;
    Some(Fs {
        capacity,
        available: s.blocks_available() as u64 * frag,
        used: capacity.saturating_sub(free),
        inodes: s.files() as u64,
        inodes_free: s.files_free() as u64,
    })
}

/// The bytes (allocated blocks, as `du`) and inodes a directory tree uses; a missing tree uses
/// nothing. Does not follow links or cross into other filesystems' mounts.
pub fn disk_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else { return (0, 0) };
    let dev = top.dev();
    let (mut bytes, mut inodes) = (top.blocks() * 512, 1u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(m) = e.path().symlink_metadata() else { continue };
            if m.dev() != dev {
                continue;
            }
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

/// The processes running now (the numeric entries of `/proc`, as the kubelet's `curproc`).
fn count_processes() -> Option<i64> {
    let d = std::fs::read_dir("/proc").ok()?;
    Some(
        d.flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
            .count() as i64,
    )
}

/// `/proc/meminfo` as (key, bytes).
pub fn parse_meminfo(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let mut words = v.split_whitespace();
            let n: u64 = words.next()?.parse().ok()?;
            let scale = if words.next() == Some("kB") { 1024 } else { 1 };
            Some((k.trim().to_string(), n * scale))
        })
        .collect()
}

/// The boot time (`btime`) of `/proc/stat`, in Unix seconds.
pub fn parse_btime(text: &str) -> Option<i64> {
    text.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
}

/// The interface of the first default route (destination 0) in `/proc/net/route`.
pub fn parse_default_route(text: &str) -> Option<String> {
    text.lines().skip(1).find_map(|l| {
        let mut w = l.split_whitespace();
        let (iface, dest) = (w.next()?, w.next()?);
        (dest == "00000000").then(|| iface.to_string())
    })
}

/// Every interface of `/proc/net/dev` but loopback.
pub fn parse_net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            let n: Vec<u64> = rest.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            if name == "lo" || n.len() < 16 {
                return None;
            }
            Some(Interface {
                name: name.to_string(),
                rx_bytes: n[0],
                rx_errors: n[2],
                tx_bytes: n[8],
                tx_errors: n[10],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let meminfo =
            "MemTotal:       16000 kB\nMemFree:  100 kB\nInactive(file):   50 kB\nHugePages_Total:       0\n";
        let m = parse_meminfo(meminfo);
        assert_eq!(m[0], ("MemTotal".to_string(), 16000 * 1024));
        assert_eq!(m[2], ("Inactive(file)".to_string(), 50 * 1024));
        assert_eq!(m[3], ("HugePages_Total".to_string(), 0));
        for (text, want) in [("cpu 1 2\nbtime 1700000000\n", Some(1_700_000_000)), ("cpu 1\n", None)] {
            assert_eq!(parse_btime(text), want);
        }
        let route = "Iface\tDestination\tGateway\nbr0\t0000A8C0\t00000000\neth0\t00000000\t0100A8C0\n";
        assert_eq!(parse_default_route(route).as_deref(), Some("eth0"));
        assert_eq!(parse_default_route("Iface\tDestination\n"), None);
        let dev = "Inter-|   Receive |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 1000 5 2 0 0 0 0 0 2000 6 3 0 0 0 0 0\n";
        assert_eq!(
            parse_net_dev(dev),
            vec![Interface {
                name: "eth0".into(),
                rx_bytes: 1000,
                rx_errors: 2,
                tx_bytes: 2000,
                tx_errors: 3
            }]
        );
    }
}
