//! `stop-signals`: does the runtime honour `lifecycle.stopSignal` (KEP-4960, CRI
//! `ContainerConfig.stop_signal`)? A runtime that does reports every container's effective
//! signal in `ContainerStatus.stop_signal` (containerd 2.3+: the config's, else the image's,
//! else SIGTERM); one that predates the field reports none and drops the field at creation
//! without an error. So the verdict comes from what its containers report; only a runtime with
//! no container to ask is judged by its version.

use super::runtime::{CallError, bounded};
use super::{Check, STOP_SIGNALS};
use crate::cri::{CriClient, RuntimeInfo};

/// How many containers' statuses are asked for (one reporting a signal settles it).
const SAMPLE: usize = 5;

/// What the runtime showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StopSignalProbe {
    pub runtime: RuntimeInfo,
    /// Per container asked: the signal its status reports (`None`: none).
    pub reported: Result<Vec<Option<String>>, CallError>,
}

pub(super) async fn probe(client: &CriClient) -> Result<StopSignalProbe, CallError> {
    let runtime = bounded(client.version()).await?;
    let reported = async {
        let (_, containers) = bounded(client.list_all(None)).await?;
        let mut reported = Vec::new();
        for c in containers.iter().take(SAMPLE) {
            match bounded(client.container_status(&c.id, &c.pod_sandbox_id)).await {
                Ok(st) => reported.push(st.stop_signal),
                // Removed since the list: not an answer either way.
                Err(CallError::Failed(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(reported)
    }
    .await;
    Ok(StopSignalProbe { runtime, reported })
}

/// The verdict: PASS when the runtime reports stop signals, WARN when it ignores them.
pub(crate) fn stop_signal_check(probe: &Result<StopSignalProbe, CallError>) -> Check {
    let probe = match probe {
        Ok(p) => p,
        Err(e) => return Check::warn(STOP_SIGNALS, format!("cannot tell: CRI Version failed: {e}")),
    };
    let rt = format!("{} {}", probe.runtime.name, probe.runtime.version);
    let ignored = format!(
        "{rt} ignores lifecycle.stopSignal (custom stop signals need containerd 2.3 or newer): such \
         containers are stopped with their image's STOPSIGNAL or SIGTERM, a StopSignalIgnored event says so"
    );
    match &probe.reported {
        Ok(r) if r.iter().any(Option::is_some) => Check::pass(
            STOP_SIGNALS,
            format!("{rt} reports each container's stop signal (lifecycle.stopSignal honoured)"),
        ),
        Ok(r) if !r.is_empty() => Check::warn(
            STOP_SIGNALS,
            format!("{ignored} (none of {} containers asked reports a stop signal)", r.len()),
        ),
        // No container to ask: the version is all there is.
        Ok(_) | Err(_) => match honours_by_version(&probe.runtime) {
            Some(true) => Check::pass(
                STOP_SIGNALS,
                format!("{rt} honours lifecycle.stopSignal (by its version: no container to confirm it)"),
            ),
            Some(false) => Check::warn(STOP_SIGNALS, ignored),
            None => Check::warn(
                STOP_SIGNALS,
                format!("cannot tell whether {rt} honours lifecycle.stopSignal: it runs no container to ask"),
            ),
        },
    }
}

/// containerd honours stop signals from 2.3.0 (its PR #11774); `None` for another runtime or
/// a version this cannot read.
fn honours_by_version(rt: &RuntimeInfo) -> Option<bool> {
    if rt.name != "containerd" {
        return None;
    }
    let v = rt.version.trim_start_matches('v');
    let mut parts = v.split(['.', '-', '+']).map(str::parse::<u32>);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else { return None };
    Some((major, minor) >= (2, 3))
}
