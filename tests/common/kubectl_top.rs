//! What `tests/top.rs` and the cluster benchmark's top check (`benches/cluster/top.rs`, which
//! includes this file) both read: `kubectl top` rows and a memory cgroup's working set, read
//! from the files themselves, apart from crilet's own readers.

use std::path::Path;

/// A quantity (`801m`, `40Mi`) as a number of units (cores, bytes).
pub fn quantity(s: &str) -> Option<f64> {
    Some(crilet::quantity::Quantity::parse(s)?.milli_value()? as f64 / 1000.0)
}

/// A `kubectl top ... --no-headers` row: (cpu in cores, memory in bytes) of the row named `name`
/// (`pod` rows: NAME CPU MEMORY; `node` rows: NAME CPU CPU% MEMORY MEMORY%).
pub fn top_row(out: &str, name: &str) -> Option<(f64, f64)> {
    let cols: Vec<&str> =
        out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|c| c.first() == Some(&name))?;
    let mem = if cols.len() >= 5 { cols[3] } else { cols.get(2)? };
    Some((quantity(cols.get(1)?)?, quantity(mem)?))
}

pub fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key`'s value in a flat-keyed stat file (`memory.stat`).
pub fn stat_field(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The working set of the memory cgroup at `dir` as the kubelet computes it: usage less the
/// inactive file cache (v1 `memory.usage_in_bytes` and `total_inactive_file`, v2
/// `memory.current` and `inactive_file`).
pub fn working_set(dir: &Path, v2: bool) -> Option<u64> {
    let (usage, inactive) = if v2 {
        ("memory.current", "inactive_file")
    } else {
        ("memory.usage_in_bytes", "total_inactive_file")
    };
    Some(read_u64(&dir.join(usage))?.saturating_sub(stat_field(&dir.join("memory.stat"), inactive)?))
}

/// `a` within `frac` of `b`.
pub fn within(a: f64, b: f64, frac: f64) -> bool {
    (a - b).abs() <= frac * b.max(1.0)
}
