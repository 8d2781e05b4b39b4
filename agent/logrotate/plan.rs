//! Pure decisions of a rotation pass for one container log, after the kubelet's `rotateLog`:
//! which leftovers to drop, which rotated files to remove or compress, and the rotated name.
//! All names are file names within the container's log directory.

/// Suffix of a compressed rotated log.
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a file being compressed (a leftover of an interrupted compression).
pub const TMP_SUFFIX: &str = ".tmp";
/// The rotated file's suffix: the kubelet's Go layout `20060102-150405`, local time.
pub const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// What one pass does with one container log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RotationPlan {
    /// Leftovers of an interrupted pass, removed by the next pass that finds the log due (as
    /// the kubelet's `cleanupUnusedLogs`): `.tmp` files, and rotated files whose `.gz` already
    /// exists (compressed, but the original was not removed).
    pub unused: Vec<String>,
    pub action: Action,
}

/// The decision for the current log file.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Action {
    /// Below the size limit: nothing to rotate.
    #[default]
    Keep,
    /// Over the limit, but a rotated file of this second exists already (a second rotation in
    /// the same second would overwrite it); the next pass rotates.
    Defer { taken: String },
    /// Remove `remove` (oldest first), rename the current file to `rename_to` and have the
    /// runtime reopen it, then compress `compress` (the kubelet compresses before the rename;
    /// see `rotate`).
    Rotate { remove: Vec<String>, compress: Vec<String>, rename_to: String },
}

/// Plans one pass for the log file `log` (a file name) given every file name in its directory,
/// its size, the policy and the timestamp (formatted with [`TIMESTAMP_FORMAT`]) of now.
///
/// As the kubelet counts, `max_files` includes the current file and the one being rotated now,
/// so at most `max_files - 2` older rotated files are kept, removed oldest first (so an ongoing
/// `logs` reader of a newer file is not disturbed), and the newest kept one is compressed.
pub fn plan(
    log: &str,
    siblings: &[String],
    size: u64,
    max_size: u64,
    max_files: usize,
    stamp: &str,
) -> RotationPlan {
    if size < max_size {
        return RotationPlan::default();
    }
    let prefix = format!("{log}.");
    let rotated: Vec<&str> = siblings.iter().map(String::as_str).filter(|n| n.starts_with(&prefix)).collect();
    let (mut in_use, unused): (Vec<&str>, Vec<&str>) = rotated.iter().partition(|n| is_in_use(n, &rotated));
    let unused: Vec<String> = unused.into_iter().map(str::to_string).collect();
    let rename_to = format!("{log}.{stamp}");
    let compressed = format!("{rename_to}{COMPRESS_SUFFIX}");
    if let Some(taken) = in_use.iter().find(|n| **n == rename_to || **n == compressed) {
        return RotationPlan { unused, action: Action::Defer { taken: taken.to_string() } };
    }
    // The timestamp layout sorts oldest first, and `x.gz` right after `x`.
    in_use.sort_unstable();
    let keep = max_files.saturating_sub(2);
    let cut = in_use.len().saturating_sub(keep);
    let remove = in_use[..cut].iter().map(|n| n.to_string()).collect();
    let compress =
        in_use[cut..].iter().filter(|n| !n.ends_with(COMPRESS_SUFFIX)).map(|n| n.to_string()).collect();
    RotationPlan { unused, action: Action::Rotate { remove, compress, rename_to } }
}

/// The kubelet's `isInUse`: temporary files never are, compressed files always are, and an
/// uncompressed file is unless its `.gz` exists.
fn is_in_use(name: &str, all: &[&str]) -> bool {
    if name.ends_with(TMP_SUFFIX) {
        return false;
    }
    if name.ends_with(COMPRESS_SUFFIX) {
        return true;
    }
    let gz = format!("{name}{COMPRESS_SUFFIX}");
    !all.iter().any(|n| *n == gz)
}

/// Parses a Go duration (`10s`, `500ms`, `1m30s`, `1.5h`; units ns, us, µs, ms, s, m, h) as the
/// kubelet's config does; `None` for anything else. A bare `0` is zero.
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    if s == "0" {
        return Some(std::time::Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, tail) = rest.split_at(num_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let nanos = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * nanos;
        rest = tail;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return None;
    }
    Some(std::time::Duration::from_nanos(total as u64))
}
