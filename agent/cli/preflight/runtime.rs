//! Preflight checks of the container runtime over CRI (endpoint, conditions, event stream,
//! cgroup driver, pause image) and of the host's cgroups.

use std::collections::HashMap;
use std::fs;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use super::{
    CGROUP_DRIVER, CGROUPS, CRI_ENDPOINT, CRI_EVENTS, CRI_TIMEOUT, Check, Config, EVENTS_WAIT, NETWORK_READY,
    PAUSE_IMAGE, RUNTIME_READY, STOP_SIGNALS, blocking,
};
use crate::cgroup::CgroupDriver;
use crate::cri::{CriClient, CriError, RuntimeInfo, api};

/// The runtime's checks, in report order (the host's cgroup version among them, next to the
/// driver): the CRI ones are SKIPped when the endpoint does not answer.
pub(super) async fn checks(cfg: &Config) -> Vec<Check> {
    let mut checks = Vec::new();
    let host = blocking("reading /sys/fs/cgroup", probe_cgroups).await;
    let cgroups = match &host {
        Ok(h) => cgroup_version_check(h),
        Err(e) => Check::fail(CGROUPS, e.clone()),
    };
    let systemd_booted = host.as_ref().is_ok_and(|h| h.systemd_booted);

    match connect(cfg).await {
        Err(endpoint) => {
            let why = "skipped: the CRI endpoint is not reachable";
            checks.push(endpoint);
            checks.extend([RUNTIME_READY, NETWORK_READY, CRI_EVENTS].map(|n| Check::skip(n, why)));
            checks.push(cgroups);
            checks.extend([CGROUP_DRIVER, PAUSE_IMAGE, STOP_SIGNALS].map(|n| Check::skip(n, why)));
        }
        Ok((client, endpoint)) => {
            checks.push(endpoint);
            let status = bounded(client.runtime_status(true, CRI_TIMEOUT)).await;
            checks.extend(condition_checks(&status));
            checks.push(events_check(&probe_events(&client).await));
            checks.push(cgroups);
            let hints = status.as_ref().map(|s| runtime_hints(&s.info)).unwrap_or_default();
            let reported = bounded(client.cgroup_driver(CRI_TIMEOUT)).await;
            checks.push(cgroup_driver_check(
                cfg.cgroup_driver,
                &reported,
                hints.systemd_cgroup,
                systemd_booted,
            ));
            let pause = match hints.sandbox_image {
                Some(image) => {
                    let present = bounded(client.image_id(&image)).await.map(|i| i.map(|i| i.id));
                    PauseProbe::Named { image, present }
                }
                None => PauseProbe::Pinned(
                    bounded(client.list_images(CRI_TIMEOUT))
                        .await
                        .map(|images| images.iter().filter(|i| i.pinned).map(image_name).collect()),
                ),
            };
            checks.push(pause_image_check(&pause, &cfg.image_endpoint));
            checks.push(super::stop_signal::stop_signal_check(&super::stop_signal::probe(&client).await));
        }
    }
    checks
}

/// Why a CRI call gave no answer, as far as the verdicts care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallError {
    Unimplemented,
    TimedOut,
    Failed(String),
}

impl From<CriError> for CallError {
    fn from(e: CriError) -> Self {
        match e {
            CriError::DeadlineExceeded { .. } => CallError::TimedOut,
            e if e.is_unimplemented() => CallError::Unimplemented,
            e => CallError::Failed(e.to_string()),
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unimplemented => f.write_str("not implemented by the runtime"),
            CallError::TimedOut => write!(f, "no answer within {}s", CRI_TIMEOUT.as_secs()),
            CallError::Failed(e) => f.write_str(e),
        }
    }
}

/// One CRI call, given [`CRI_TIMEOUT`] at most.
pub(super) async fn bounded<T>(call: impl Future<Output = Result<T, CriError>>) -> Result<T, CallError> {
    match tokio::time::timeout(CRI_TIMEOUT, call).await {
        Err(_) => Err(CallError::TimedOut),
        Ok(r) => r.map_err(CallError::from),
    }
}

/// What is at a socket's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathState {
    Missing,
    Socket,
    NotASocket,
    Unreadable(String),
}

fn path_state(path: &Path) -> PathState {
    match fs::metadata(path) {
        Ok(m) if m.file_type().is_socket() => PathState::Socket,
        Ok(_) => PathState::NotASocket,
        Err(e) if e.kind() == io::ErrorKind::NotFound => PathState::Missing,
        Err(e) => PathState::Unreadable(e.to_string()),
    }
}

/// A client for the endpoints and the `cri-endpoint` line, or that line as a FAIL.
async fn connect(cfg: &Config) -> Result<(CriClient, Check), Check> {
    let hint = "set --container-runtime-endpoint to unix:///<path of the runtime's socket>";
    let client = CriClient::new(&cfg.runtime_endpoint, &cfg.image_endpoint)
        .map_err(|e| Check::fail(CRI_ENDPOINT, format!("{e}; {hint}")))?;
    let socket = CriClient::endpoint_socket_path(&cfg.runtime_endpoint)
        .map_err(|e| Check::fail(CRI_ENDPOINT, format!("{e}; {hint}")))?;
    let state = {
        let socket = socket.clone();
        blocking("looking at the socket", move || path_state(&socket))
            .await
            .unwrap_or_else(PathState::Unreadable)
    };
    let version = bounded(client.version()).await;
    let check = endpoint_check(&cfg.runtime_endpoint, &socket, &state, &version);
    if version.is_ok() { Ok((client, check)) } else { Err(check) }
}

/// `cri-endpoint`: did `Version` answer, and if not, what is at the socket's path.
pub(crate) fn endpoint_check(
    endpoint: &str,
    socket: &Path,
    state: &PathState,
    version: &Result<RuntimeInfo, CallError>,
) -> Check {
    let path = socket.display();
    let detail = match version {
        Ok(v) => {
            return Check::pass(
                CRI_ENDPOINT,
                format!("{} {} (CRI {}) at {endpoint}", v.name, v.version, v.api_version),
            );
        }
        Err(CallError::TimedOut) => format!(
            "{endpoint} did not answer Version within {}s; is the runtime hung? (see its log)",
            CRI_TIMEOUT.as_secs()
        ),
        Err(CallError::Unimplemented) => {
            format!(
                "{endpoint} does not serve the CRI v1 runtime service; is the runtime's CRI plugin disabled?"
            )
        }
        Err(CallError::Failed(e)) => match state {
            PathState::Missing => format!(
                "no socket at {path} ({endpoint}): is containerd running, and does \
                 --container-runtime-endpoint name its socket?"
            ),
            PathState::NotASocket => {
                format!("{path} is not a socket; --container-runtime-endpoint must name the runtime's socket")
            }
            PathState::Unreadable(why) => format!("cannot access {path}: {why}"),
            PathState::Socket => format!(
                "nothing answers on {path} ({e}); is containerd running? (a stopped runtime leaves its socket file behind)"
            ),
        },
    };
    Check::fail(CRI_ENDPOINT, detail)
}

/// `runtime-ready` and `network-ready` from the `Status` answer. The agent waits for both before
/// it starts any pod.
pub(crate) fn condition_checks(status: &Result<api::StatusResponse, CallError>) -> [Check; 2] {
    let s = match status {
        Ok(s) => s,
        Err(e) => {
            return [
                Check::fail(RUNTIME_READY, format!("CRI Status failed: {e}")),
                Check::skip(NETWORK_READY, "skipped: the runtime's Status call failed"),
            ];
        }
    };
    let conditions = s.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    [(RUNTIME_READY, "RuntimeReady"), (NETWORK_READY, "NetworkReady")].map(|(name, kind)| {
        match conditions.iter().find(|c| c.r#type == kind) {
            Some(c) if c.status => Check::pass(name, format!("{kind}=true")),
            Some(c) => Check::fail(name, format!("{kind}=false: {}: {}", c.reason, c.message)),
            None => Check::fail(name, format!("the runtime does not report {kind}; the agent waits for it")),
        }
    })
}

/// What opening the CRI event stream did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EventsProbe {
    /// The stream opened (headers arrived).
    Opened,
    /// No answer within [`EVENTS_WAIT`]: accepted, waiting for the first event.
    Accepted,
    Unimplemented,
    Failed(String),
}

async fn probe_events(client: &CriClient) -> EventsProbe {
    // Dropping the stream (or the pending call) cancels it.
    match tokio::time::timeout(EVENTS_WAIT, client.container_events()).await {
        Err(_) => EventsProbe::Accepted,
        Ok(Ok(_stream)) => EventsProbe::Opened,
        Ok(Err(e)) if e.is_unimplemented() => EventsProbe::Unimplemented,
        Ok(Err(e)) => EventsProbe::Failed(e.to_string()),
    }
}

/// `cri-events`: the agent follows the stream when there is one, and relists every second anyway.
pub(crate) fn events_check(probe: &EventsProbe) -> Check {
    match probe {
        EventsProbe::Opened => Check::pass(CRI_EVENTS, "events: GetContainerEvents stream opened"),
        EventsProbe::Accepted => Check::pass(
            CRI_EVENTS,
            format!(
                "events: GetContainerEvents stream accepted (not refused within {}s)",
                EVENTS_WAIT.as_secs()
            ),
        ),
        EventsProbe::Unimplemented => {
            Check::warn(CRI_EVENTS, "no CRI event stream; the agent relists every 1 s")
        }
        EventsProbe::Failed(e) => {
            Check::warn(CRI_EVENTS, format!("CRI event stream failed ({e}); the agent relists every 1 s"))
        }
    }
}

/// What the runtime's verbose `Status` info says about its configuration (containerd's only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RuntimeHints {
    /// The pause image (`sandboxImage` up to containerd 1.7, `pinnedImages.sandbox` from 2.0).
    pub sandbox_image: Option<String>,
    /// The default runtime's runc `SystemdCgroup` option.
    pub systemd_cgroup: Option<bool>,
}

/// Reads [`RuntimeHints`] from every JSON object in the `Status` info (containerd puts its
/// configuration under `config`); keys are visited in order so the result is deterministic.
pub(crate) fn runtime_hints(info: &HashMap<String, String>) -> RuntimeHints {
    let mut entries: Vec<(&String, &String)> = info.iter().collect();
    entries.sort();
    // The same reading of the sandbox image as image garbage collection's, which keeps it.
    let mut hints = RuntimeHints { sandbox_image: crate::images::sandbox_image(info), ..Default::default() };
    for (_, json) in entries {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else { continue };
        let default = v.pointer("/containerd/defaultRuntimeName").and_then(|n| n.as_str());
        let systemd = default
            .and_then(|name| v.pointer("/containerd/runtimes")?.get(name)?.pointer("/options/SystemdCgroup"))
            .and_then(|b| b.as_bool());
        if let Some(systemd) = systemd {
            hints.systemd_cgroup.get_or_insert(systemd);
        }
    }
    hints
}

/// What the host's cgroup filesystem looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CgroupHost {
    /// `/sys/fs/cgroup/cgroup.controllers` exists: cgroup v2 (unified).
    pub v2: bool,
    /// v1 controller directories (`memory`, `cpu`, ...) under `/sys/fs/cgroup`.
    pub v1_controllers: bool,
    /// v1 with a v2 hierarchy at `/sys/fs/cgroup/unified` (systemd's "hybrid" mode).
    pub hybrid: bool,
    /// systemd is the init system (`/run/systemd/system` exists, as `sd_booted(3)` tests).
    pub systemd_booted: bool,
}

fn probe_cgroups() -> CgroupHost {
    let root = Path::new("/sys/fs/cgroup");
    CgroupHost {
        v2: root.join("cgroup.controllers").is_file(),
        v1_controllers: ["memory", "cpu", "pids"].iter().any(|c| root.join(c).is_dir()),
        hybrid: root.join("unified/cgroup.controllers").is_file(),
        systemd_booted: Path::new("/run/systemd/system").is_dir(),
    }
}

/// `cgroups`: the agent works on both versions (its pod cgroups are laid out for either).
pub(crate) fn cgroup_version_check(host: &CgroupHost) -> Check {
    if host.v2 {
        Check::pass(CGROUPS, "v2 (unified hierarchy at /sys/fs/cgroup)")
    } else if host.v1_controllers && host.hybrid {
        Check::pass(CGROUPS, "v1 (hybrid: v2 also mounted at /sys/fs/cgroup/unified)")
    } else if host.v1_controllers {
        Check::pass(CGROUPS, "v1")
    } else {
        Check::fail(
            CGROUPS,
            "no cgroup hierarchy at /sys/fs/cgroup (neither v2 nor v1 controllers); containers cannot run",
        )
    }
}

/// `cgroup-driver`: the agent's driver against the runtime's. The agent's is worked out as
/// `crilet run` does it (`cgroup::driver::resolve`, the kubelet's rule): the runtime's own when
/// it reports one through CRI `RuntimeConfig` (then the two match by construction), else
/// `--cgroup-driver` (default cgroupfs), which the kubelet trusts without a check. Where the
/// runtime does not report it (containerd 1.6 to 2.1), its config's runc `SystemdCgroup`
/// (containerd's verbose `Status`) is compared with it: a mismatch is a FAIL naming both, as
/// no pod could start. The systemd driver on a host whose PID 1 is not systemd is a FAIL too.
pub(crate) fn cgroup_driver_check(
    flag: Option<CgroupDriver>,
    reported: &Result<Option<CgroupDriver>, CallError>,
    from_config: Option<bool>,
    systemd_booted: bool,
) -> Check {
    use crate::cgroup::driver::{RuntimeAnswer, resolve};
    let answer = match reported {
        Ok(Some(d)) => RuntimeAnswer::Reported(*d),
        Ok(None) => RuntimeAnswer::NoLinuxSection,
        Err(CallError::Unimplemented) => RuntimeAnswer::Unimplemented,
        Err(e) => RuntimeAnswer::Failed(e.to_string()),
    };
    let agent = match resolve(flag, &answer) {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                CGROUP_DRIVER,
                format!("{e}; crilet run stops at start when it cannot ask (as the kubelet does)"),
            );
        }
    };
    let ours = agent.driver;
    let no_systemd = |what: String| {
        Check::fail(
            CGROUP_DRIVER,
            format!(
                "{what}, but PID 1 is not systemd: the systemd driver cannot work on this host; use cgroupfs"
            ),
        )
    };
    if let RuntimeAnswer::Reported(_) = answer {
        if ours == CgroupDriver::Systemd && !systemd_booted {
            return no_systemd("the runtime reports the systemd cgroup driver (CRI RuntimeConfig)".into());
        }
        let note = match agent.overridden {
            Some(asked) => format!("; --cgroup-driver {asked} is not used"),
            None => String::new(),
        };
        return Check::pass(
            CGROUP_DRIVER,
            format!("{ours} (from CRI RuntimeConfig), which the agent follows as the kubelet does{note}"),
        );
    }
    let why = match answer {
        RuntimeAnswer::NoLinuxSection => "its RuntimeConfig has no Linux section",
        _ => "the runtime does not implement CRI RuntimeConfig",
    };
    let trust = format!("{why}, so the agent trusts {}, as the kubelet does", agent.source);
    if ours == CgroupDriver::Systemd && !systemd_booted {
        return no_systemd(format!("the agent would use the systemd cgroup driver ({})", agent.source));
    }
    let runtime =
        from_config.map(|systemd| if systemd { CgroupDriver::Systemd } else { CgroupDriver::Cgroupfs });
    match runtime {
        Some(theirs) if theirs == ours => Check::pass(
            CGROUP_DRIVER,
            format!(
                "{ours}, as the runtime's config (SystemdCgroup = {}); {trust}",
                theirs == CgroupDriver::Systemd
            ),
        ),
        Some(theirs) => Check::fail(
            CGROUP_DRIVER,
            format!(
                "the agent uses the {ours} cgroup driver ({}), the runtime the {theirs} one (its config: SystemdCgroup = {}); \
                 {why}: set --cgroup-driver {theirs}, or SystemdCgroup = {} in the runtime's runc options",
                agent.source,
                theirs == CgroupDriver::Systemd,
                ours == CgroupDriver::Systemd,
            ),
        ),
        None if systemd_booted => Check::warn(
            CGROUP_DRIVER,
            format!(
                "cannot tell the runtime's cgroup driver ({why}, and its config does not say); the agent uses {ours} \
                 ({}): make sure the runtime does too",
                agent.source
            ),
        ),
        None => Check::pass(
            CGROUP_DRIVER,
            format!("{ours} (PID 1 is not systemd, so the runtime cannot use the systemd driver; {trust})"),
        ),
    }
}

/// What the runtime says about its pause image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PauseProbe {
    /// The runtime names it in its `Status` info (containerd 1.x `sandboxImage`); its `ImageStatus`
    /// (the image ID when present).
    Named { image: String, present: Result<Option<String>, CallError> },
    /// The runtime does not name it: the images it pins (containerd 2.x pins its sandbox image
    /// once the image is present, and names it nowhere in CRI).
    Pinned(Result<Vec<String>, CallError>),
}

/// An image's name for people: its first tag, else its first digest reference, else its ID.
pub(super) fn image_name(image: &api::Image) -> String {
    image.repo_tags.first().or(image.repo_digests.first()).unwrap_or(&image.id).clone()
}

/// `pause-image`: the image the runtime makes sandboxes from, and whether it is already there.
/// Missing is only a WARN: the runtime pulls it with the first pod (a registry that cannot be
/// reached then is the pod's event to report, preflight cannot tell beforehand).
pub(crate) fn pause_image_check(probe: &PauseProbe, image_endpoint: &str) -> Check {
    let failed = |call: &str, e: &CallError| {
        Check::fail(PAUSE_IMAGE, format!("CRI {call} at {image_endpoint} failed: {e}"))
    };
    match probe {
        PauseProbe::Named { image, present: Ok(Some(id)) } => {
            Check::pass(PAUSE_IMAGE, format!("{image} present ({})", short_id(id)))
        }
        PauseProbe::Named { image, present: Ok(None) } => {
            Check::warn(PAUSE_IMAGE, format!("{image} not present; will be pulled on the first pod"))
        }
        PauseProbe::Named { image, present: Err(e) } => failed(&format!("ImageStatus of {image}"), e),
        PauseProbe::Pinned(Ok(pinned)) if pinned.is_empty() => Check::warn(
            PAUSE_IMAGE,
            "no pinned sandbox image (the runtime does not name its pause image, and pins it only once \
             present); will be pulled on the first pod",
        ),
        PauseProbe::Pinned(Ok(pinned)) => {
            Check::pass(PAUSE_IMAGE, format!("{} present (pinned by the runtime)", pinned.join(", ")))
        }
        PauseProbe::Pinned(Err(e)) => failed("ListImages", e),
    }
}

fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    hex.get(..12).unwrap_or(hex)
}
