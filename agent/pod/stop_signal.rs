//! KEP-4960 after `CreateContainer`: did the runtime take the container's `lifecycle.stopSignal`?
//!
//! The signal goes to CRI in `ContainerConfig.stop_signal` (built in `spec`). A runtime that
//! knows the field reports it back in `ContainerStatus.stop_signal` from creation on (containerd
//! 2.3+); one that predates it (containerd 2.1, 1.6) drops it without an error and reports no
//! signal. So the answer comes from the created container's status, not from a version table:
//! when it does not show the signal asked for, the pod gets a `StopSignalIgnored` warning, and
//! its status shows no `stopSignal` (the status always shows what the runtime reports).

use k8s_openapi::api::core::v1::Container;

use super::context::Executor;
use crate::cri::api;
use crate::model::DesiredPod;

/// The event's reason when the runtime did not take the signal.
pub const IGNORED_REASON: &str = "StopSignalIgnored";

/// Why the runtime's report shows the signal was not taken (`None`: it was, or none was asked).
pub fn ignored(wanted: api::Signal, reported: Option<&str>) -> Option<String> {
    if wanted == api::Signal::RuntimeDefault {
        return None;
    }
    let wanted_name = crate::cri::signal::name_of(wanted as i32)?;
    match reported {
        Some(r) if r == wanted_name => None,
        Some(r) => Some(format!("the runtime reports stop signal {r} for it instead")),
        None => Some("the runtime reports no stop signal for it".to_string()),
    }
}

/// Checks the created container `id` and warns on the pod when its `wanted` signal was not
/// taken. A failed status call is only logged: the container is fine, only the check is lost.
pub async fn report_if_ignored(
    exec: &Executor,
    d: &DesiredPod,
    c: &Container,
    id: &str,
    sandbox_id: &str,
    wanted: api::Signal,
) {
    if wanted == api::Signal::RuntimeDefault {
        return;
    }
    let reported = match exec.cri.container_status(id, sandbox_id).await {
        Ok(st) => st.stop_signal,
        Err(e) => {
            tracing::warn!(pod = %d.key, container = %c.name, error = %e, "cannot check the stop signal the runtime took");
            return;
        }
    };
    let Some(why) = ignored(wanted, reported.as_deref()) else { return };
    let runtime = match exec.cri.version().await {
        Ok(v) => format!("{} {}", v.name, v.version),
        Err(_) => "the runtime".to_string(),
    };
    let signal = crate::cri::signal::name_of(wanted as i32).unwrap_or_default();
    exec.rec.warning(
        &d.key,
        Some(&c.name),
        IGNORED_REASON,
        format!(
            "Container {} asks for stop signal {signal}, but {runtime} ignored it ({why}; custom stop \
             signals need containerd 2.3 or newer): it will be stopped with its image's STOPSIGNAL or SIGTERM",
            c.name
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_cases() {
        use api::Signal::{RuntimeDefault, Sigterm, Sigusr1};
        let cases = [
            ("nothing asked: nothing to report", RuntimeDefault, None, false),
            ("nothing asked, runtime reports its default", RuntimeDefault, Some("SIGTERM"), false),
            ("taken (containerd 2.3)", Sigusr1, Some("SIGUSR1"), false),
            ("dropped (containerd 2.1: no signal in the status)", Sigusr1, None, true),
            ("another signal reported", Sigusr1, Some("SIGTERM"), true),
            ("SIGTERM asked and reported", Sigterm, Some("SIGTERM"), false),
            ("SIGTERM asked, none reported: still ignored", Sigterm, None, true),
        ];
        for (what, wanted, reported, want) in cases {
            assert_eq!(ignored(wanted, reported).is_some(), want, "{what}");
        }
    }
}
