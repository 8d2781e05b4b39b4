//! `lifecycle.stopSignal` (KEP-4960), validated as the API server's `validateStopSignal` does:
//! the pod must say its OS (`spec.os.name`), Linux pods may name any signal of the API's list,
//! Windows pods only SIGTERM and SIGKILL. (crilet refuses Windows pods anyway; the signal is
//! still checked the API server's way, so both problems are reported at once.)

use super::Findings;
use super::limits::quoted;
use crate::cri::signal::{NAMES, WINDOWS_NAMES};

/// Checks one container's `lifecycle.stopSignal` (`path` names that field).
pub(super) fn stop_signal(signal: &str, os: Option<&str>, path: &str, f: &mut Findings) {
    match os {
        None | Some("") => f.error(path, "may not be set for containers with empty `spec.os.name`"),
        Some("windows") if !WINDOWS_NAMES.contains(&signal) => f.error(
            path,
            format!(
                "unsupported value {} for a windows pod: supported values are \"SIGTERM\", \"SIGKILL\"",
                quoted(signal)
            ),
        ),
        Some("linux") if !NAMES.contains(&signal) => f.error(
            path,
            format!(
                "unsupported value {}: not a signal name of the API (SIGABRT … SIGUSR1, SIGRTMIN+n, SIGRTMAX-n)",
                quoted(signal)
            ),
        ),
        // Another OS name is reported at spec.os.name.
        _ => {}
    }
}
