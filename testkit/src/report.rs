//! What a container reports about its own confinement (tests/restricted.rs, and the cluster
//! benchmark's side-by-side check against the kubelet): the script it runs and the parse of its
//! output, so both read the same thing the same way.

/// A shell script: the security lines of `/proc/self/status`, the root mount's `ro`/`rw`, whether
/// `/scratch` takes a write, each as a `Key: value` line, then `END`; then it waits.
pub const SECURITY_REPORT: &str = r#"grep -E '^(Seccomp|NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb|Uid|Gid|Groups):' /proc/self/status; awk '$2 == "/" {print "Root:", substr($4, 1, 2)}' /proc/mounts; if touch /scratch/probe; then echo 'Scratch: rw'; fi; echo END; exec sleep 3600"#;

/// The `Key: value` lines before `END` (whitespace in values collapsed); `None` before `END`.
pub fn key_values<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<Vec<(String, String)>> {
    let lines: Vec<&str> = lines.into_iter().collect();
    let end = lines.iter().position(|l| l.trim() == "END")?;
    Some(
        lines[..end]
            .iter()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.split_whitespace().collect::<Vec<_>>().join(" ")))
            .collect(),
    )
}
