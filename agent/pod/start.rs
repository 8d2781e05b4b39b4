//! Starting things: the sandbox, and one container (image, restart count, mounts, create,
//! start, postStart). Failures come back as the waiting reason the kubelet would show (R7.10).

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

use super::backoff::Backoff;
use super::context::{Shared, now_ns};
use super::hash::container_hash;
use super::hooks::run_handler;
use super::spec::{
    self, Kind, RuntimeValues, container_config_with_env, empty_dir, pod_dir, pod_log_dir,
    restart_count_from_logs, sandbox_config,
};
use crate::cri::api;
use crate::model::{ContainerState, DesiredPod, ObservedPod};
use crate::status::StartError;
use crate::timeline::{Step, StepKind};

fn err(reason: &str, message: impl Into<String>) -> StartError {
    StartError { reason: reason.to_string(), message: message.into() }
}

/// Creates the sandbox (R1.1): log directory first, then `RunPodSandbox`, then its status for
/// the pod IPs. Returns (sandbox ID, pod IPs).
pub async fn create_sandbox(
    ctx: &Shared,
    d: &DesiredPod,
    attempt: u32,
) -> Result<(String, Option<crate::model::ObservedSandbox>), StartError> {
    let log_dir = pod_log_dir(&ctx.node, d);
    mkdir(&log_dir, 0o755)
        .map_err(|e| err("CreatePodSandboxError", format!("creating {}: {e}", log_dir.display())))?;
    mkdir(&pod_dir(&ctx.node, &d.uid), 0o750)
        .map_err(|e| err("CreatePodSandboxError", format!("creating pod directory: {e}")))?;
    prepare_volumes(ctx, d).await?;
    let config = sandbox_config(&ctx.node, d, attempt);
    let handler = d.pod.spec.as_ref().and_then(|s| s.runtime_class_name.clone()).unwrap_or_default();
    ctx.runtime_uids.claim(&d.uid);
    let id = ctx.cri.run_sandbox(config, &handler).await.map_err(|e| {
        ctx.rec.warning(&d.key, None, "FailedCreatePodSandBox", format!("Failed to create pod sandbox: {e}"));
        err("CreatePodSandboxError", e.to_string())
    })?;
    // Its IPs; the sync also follows the pod from this status (`publish_started`).
    let status = ctx.cri.sandbox_status(&id).await.ok();
    Ok((id, status))
}

/// The reason of [`create_sandbox`]'s error when a volume could not be set up: the worker
/// retries it on the kubelet's volume back-off, not the sync's.
pub const FAILED_MOUNT: &str = "FailedMount";

/// The pod's configMap, secret, downwardAPI and projected volumes are written before anything
/// uses them (the kubelet waits for its volumes before the sandbox). A failure is a FailedMount
/// event, and a `FAILED_MOUNT` error.
async fn prepare_volumes(ctx: &Shared, d: &DesiredPod) -> Result<(), StartError> {
    let Some(vm) = &ctx.volumes else { return Ok(()) };
    vm.prepare(&d.pod).await.map_err(|msg| {
        ctx.rec.warning(&d.key, None, "FailedMount", msg.clone());
        err(FAILED_MOUNT, msg)
    })
}

/// The ConfigMaps and Secrets the container's env names, read before its config is built.
async fn env_sources(
    ctx: &Shared,
    d: &DesiredPod,
    c: &Container,
) -> Result<Option<crate::volumes::EnvSources>, StartError> {
    let Some(vm) = &ctx.volumes else { return Ok(None) };
    vm.env_sources(&d.pod, c).await.map(Some).map_err(|msg| {
        ctx.rec.warning(&d.key, Some(&c.name), "Failed", format!("Error: {msg}"));
        err("CreateContainerConfigError", msg)
    })
}

fn mkdir(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// The crash-loop back-off key (R7.4): container name and hash, so a changed container
/// starts without back-off (R2.5).
pub fn backoff_key(c: &Container) -> String {
    format!("{}_{}", c.name, container_hash(c))
}

/// R7.5: whether `c` must wait; returns the error to show and the time (ns) the wait ends.
pub fn crash_backoff_wait(
    backoff: &Backoff,
    d: &DesiredPod,
    c: &Container,
    observed: &ObservedPod,
    now: i64,
) -> Option<(StartError, i64)> {
    let exited =
        observed.containers.iter().find(|o| o.name == c.name && o.state == ContainerState::Exited)?;
    let key = backoff_key(c);
    let until = backoff.backoff_until(&key, exited.finished_at, now)?;
    let delay = backoff.delay(&key).unwrap_or_default();
    let message = format!(
        "back-off {} restarting failed container={} pod={}_{}({})",
        humanize(delay),
        c.name,
        d.key.name,
        d.key.namespace,
        d.uid
    );
    Some((err("CrashLoopBackOff", message), until))
}

fn humanize(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s % 60 == 0 {
        format!("{}m0s", s / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// What a start needs from the sync that asked for it.
pub struct StartRequest<'a> {
    pub desired: &'a DesiredPod,
    pub spec: &'a Container,
    pub kind: Kind,
    pub observed: &'a ObservedPod,
    pub sandbox_id: &'a str,
    pub pod_ips: &'a [String],
    pub sandbox_config: &'a api::PodSandboxConfig,
    /// The image ID an in-place update already pulled (and checked) for this container before
    /// stopping the old instance: the new instance runs exactly that image, with no second pull.
    pub pulled_image: Option<&'a str>,
    /// Images this sync looked up while it created the sandbox.
    pub images_seen: Option<&'a ImagesSeen>,
}

/// What `ImageStatus` answered for each image, asked while the sandbox was being created.
pub type ImagesSeen = HashMap<String, Option<api::Image>>;

/// Asks the runtime for each image at once. Done beside `RunPodSandbox` for the containers the
/// same sync will start, so the sandbox's creation hides the lookups; an image whose lookup
/// failed is simply asked again at its start.
pub async fn look_up_images(ctx: &Shared, images: BTreeSet<String>) -> ImagesSeen {
    let lookups = images.into_iter().filter(|i| !i.is_empty()).map(|image| async move {
        let found = ctx.cri.image_id(&image).await;
        found.ok().map(|img| (image, img))
    });
    futures::future::join_all(lookups).await.into_iter().flatten().collect()
}

/// Ensures the image per `imagePullPolicy` (R11.2, R7.11); returns the runtime's image ID.
/// `seen` is what `ImageStatus` answered for it moments ago, in this sync ([`look_up_images`]).
pub async fn ensure_image(
    ctx: &Shared,
    d: &DesiredPod,
    c: &Container,
    sandbox_config: &api::PodSandboxConfig,
    seen: Option<&ImagesSeen>,
) -> Result<String, StartError> {
    let image = c.image.clone().unwrap_or_default();
    if image.is_empty() {
        return Err(err("InvalidImageName", "container image is empty"));
    }
    let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
    let present = match seen.and_then(|s| s.get(&image)) {
        Some(found) => found.clone(),
        None => ctx
            .cri
            .image_id(&image)
            .await
            .map_err(|e| err("ImageInspectError", format!("Failed to inspect image \"{image}\": {e}")))?,
    };
    let name = Some(c.name.as_str());
    match (policy, present) {
        ("Never", Some(img)) | ("IfNotPresent", Some(img)) => {
            ctx.rec.normal(
                &d.key,
                name,
                "Pulled",
                format!("Container image \"{image}\" already present on machine"),
            );
            return Ok(img.id);
        }
        ("Never", None) => {
            let msg = format!("Container image \"{image}\" is not present with pull policy of Never");
            ctx.rec.warning(&d.key, name, "ErrImageNeverPull", msg.clone());
            return Err(err("ErrImageNeverPull", msg));
        }
        _ => {}
    }
    let key = format!("{}_{}", d.uid, image);
    let now = now_ns();
    if let Ok(mut b) = ctx.image_backoff.lock() {
        // Entries unused for 2 × max are gone (they no longer change any decision).
        b.gc(now);
        if b.backoff_since_update(&key, now).is_some() {
            let msg = format!("Back-off pulling image \"{image}\"");
            drop(b);
            ctx.rec.normal(&d.key, name, "BackOff", msg.clone());
            return Err(err("ImagePullBackOff", msg));
        }
    }
    ctx.rec.normal(&d.key, name, "Pulling", format!("Pulling image \"{image}\""));
    let started = std::time::Instant::now();
    let result = {
        let credentials = match &ctx.volumes {
            Some(vm) => vm.pull_credentials(&d.pod, &image).await,
            None => Vec::new(),
        };
        let _serial =
            tracing::Instrument::instrument(ctx.pull_lock.lock(), tracing::trace_span!("wait_pull_lock"))
                .await;
        pull_with_credentials(ctx, &image, sandbox_config, credentials).await
    };
    ctx.metrics.image_pulled(&d.uid, started);
    match result {
        Ok(_) => {
            if let Ok(mut b) = ctx.image_backoff.lock() {
                b.reset(&key);
            }
            ctx.rec.normal(
                &d.key,
                name,
                "Pulled",
                format!("Successfully pulled image \"{image}\" in {:.3}s", started.elapsed().as_secs_f64()),
            );
            let img = ctx
                .cri
                .image_id(&image)
                .await
                .map_err(|e| err("ImageInspectError", e.to_string()))?
                .ok_or_else(|| err("ErrImagePull", format!("image \"{image}\" not present after pull")))?;
            Ok(img.id)
        }
        Err(e) => {
            if let Ok(mut b) = ctx.image_backoff.lock() {
                b.next(&key, now, now);
            }
            let msg = format!("Failed to pull image \"{image}\": {e}");
            ctx.rec.warning(&d.key, name, "Failed", msg.clone());
            ctx.rec.warning(&d.key, name, "Failed", "Error: ErrImagePull".into());
            Err(err("ErrImagePull", msg))
        }
    }
}

/// Pulls `image` with each matching credential in turn until one works (the kubelet's
/// keyring order), or without any when none matches.
async fn pull_with_credentials(
    ctx: &Shared,
    image: &str,
    sandbox_config: &api::PodSandboxConfig,
    credentials: Vec<crate::volumes::pull_secrets::Credential>,
) -> Result<String, crate::cri::CriError> {
    if credentials.is_empty() {
        return ctx.cri.pull_image(image, Some(sandbox_config.clone())).await;
    }
    let mut last = None;
    for c in credentials {
        // No server address: the credential was matched to the image's registry here, and
        // containerd drops one whose address is not a URL naming the host it dials.
        let _ = c.server;
        let auth = api::AuthConfig { username: c.username, password: c.password, ..Default::default() };
        match ctx.cri.pull_image_with(image, Some(sandbox_config.clone()), Some(auth)).await {
            Ok(r) => return Ok(r),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e),
        None => ctx.cri.pull_image(image, Some(sandbox_config.clone())).await,
    }
}

/// R1.14: the restart count of the new instance.
fn next_restart_count(ctx: &Shared, req: &StartRequest<'_>) -> u32 {
    match req.observed.newest(&req.spec.name) {
        Some(c) => c.restart_count + 1,
        None => {
            restart_count_from_logs(&pod_log_dir(&ctx.node, req.desired).join(&req.spec.name)).unwrap_or(0)
        }
    }
}

/// A mount's `subPathExpr` with `$(VAR)` taken from the container's environment, refused as
/// the kubelet refuses it: a variable without a value, an absolute path, a `..` step.
fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, String> {
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let value = |n: &str| {
        let v = env.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
        if v.is_none() {
            missing.borrow_mut().insert(n.to_string());
        }
        Some(v.unwrap_or_default())
    };
    let sub = crate::expand::expand(expr, &value);
    let missing = missing.into_inner();
    if !missing.is_empty() {
        return Err(format!("missing value for {}", missing.into_iter().collect::<Vec<_>>().join(", ")));
    }
    if sub.starts_with('/') {
        return Err(format!("error SubPath `{sub}` must not be an absolute path"));
    }
    if sub.split('/').any(|part| part == "..") {
        return Err(format!("unable to provision SubPath `{sub}`: must not contain '..'"));
    }
    Ok(sub)
}

/// Host paths for the container's volume mounts (emptyDir created on first use), plus the
/// termination-message file (R1.12).
fn prepare_mounts(
    ctx: &Shared,
    req: &StartRequest<'_>,
    env: &[(String, String)],
) -> Result<(Vec<api::Mount>, Option<PathBuf>), StartError> {
    let d = req.desired;
    let c = req.spec;
    let volumes = d.pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    let mut mounts = Vec::new();
    for vm in c.volume_mounts.iter().flatten() {
        let Some(vol) = volumes.iter().find(|v| v.name == vm.name) else {
            return Err(err("CreateContainerConfigError", format!("volume {:?} not found", vm.name)));
        };
        let api_volume = crate::volumes::host_path(&ctx.node, &d.uid, vol);
        let mut host: PathBuf = if let Some(hp) = &vol.host_path {
            let p = PathBuf::from(&hp.path);
            prepare_host_path(&p, hp.type_.as_deref().unwrap_or("")).map_err(|m| {
                err("CreateContainerConfigError", format!("hostPath volume {:?}: {m}", vol.name))
            })?;
            p
        } else if let Some(p) = api_volume.clone() {
            // Written by `VolumeManager::prepare` before the sandbox.
            if !crate::volumes::is_set_up(&p) {
                return Err(err(
                    "CreateContainerConfigError",
                    format!("volume {:?} is not set up", vol.name),
                ));
            }
            p
        } else {
            let p = empty_dir(&ctx.node, &d.uid, &vol.name);
            // World-writable like the kubelet's emptyDir, so non-root containers can use it.
            mkdir(&p, 0o777)
                .map_err(|e| err("CreateContainerConfigError", format!("emptyDir {:?}: {e}", vol.name)))?;
            p
        };
        let expanded = match vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
            Some(expr) => Some(expand_sub_path(expr, env).map_err(|m| err("CreateContainerConfigError", m))?),
            None => None,
        };
        if let Some(sub) = expanded.as_deref().or(vm.sub_path.as_deref()).filter(|s| !s.is_empty()) {
            let resolved = match api_volume {
                Some(_) => crate::volumes::sub_path_in_volume(&host, sub),
                None => crate::volumes::sub_path_in(&host, sub),
            };
            host = resolved.map_err(|e| {
                err("CreateContainerConfigError", format!("volume {:?} subPath {sub:?}: {e}", vol.name))
            })?;
        }
        mounts.push(api::Mount {
            container_path: vm.mount_path.clone(),
            host_path: host.display().to_string(),
            // The kubelet mounts these volume types read-only whatever the mount says.
            readonly: vm.read_only == Some(true) || api_volume.is_some(),
            ..Default::default()
        });
    }
    // The kubelet-managed /etc/hosts (pod IP, hostname, hostAliases), unless the container
    // mounts its own.
    if !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
        let dir = pod_dir(&ctx.node, &d.uid);
        mkdir(&dir, 0o750)
            .map_err(|e| err("CreateContainerConfigError", format!("creating pod directory: {e}")))?;
        let hosts = dir.join("etc-hosts");
        let text = hosts_file(&d.pod, req.pod_ips);
        std::fs::write(&hosts, text)
            .and_then(|_| std::fs::set_permissions(&hosts, std::fs::Permissions::from_mode(0o644)))
            .map_err(|e| err("CreateContainerConfigError", format!("writing /etc/hosts: {e}")))?;
        mounts.push(api::Mount {
            container_path: "/etc/hosts".into(),
            host_path: hosts.display().to_string(),
            readonly: false,
            ..Default::default()
        });
    }
    let mut termination_file = None;
    let tpath = c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
    if !tpath.is_empty() {
        let dir = pod_dir(&ctx.node, &d.uid).join("containers").join(&c.name);
        mkdir(&dir, 0o750)
            .map_err(|e| err("CreateContainerConfigError", format!("termination message dir: {e}")))?;
        let file = dir.join(format!("{:08x}", fastrand::u32(..)));
        std::fs::write(&file, b"")
            .and_then(|_| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)))
            .map_err(|e| err("CreateContainerConfigError", format!("termination message file: {e}")))?;
        mounts.push(api::Mount {
            container_path: tpath,
            host_path: file.display().to_string(),
            readonly: false,
            ..Default::default()
        });
        termination_file = Some(file);
    }
    Ok((mounts, termination_file))
}

/// hostPath `type` checks as the kubelet does them (create the *OrCreate kinds).
fn prepare_host_path(p: &Path, kind: &str) -> Result<(), String> {
    let meta = std::fs::metadata(p);
    use std::os::unix::fs::FileTypeExt;
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if meta.is_err() {
                mkdir(p, 0o755).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        "FileOrCreate" => {
            if meta.is_err() {
                std::fs::OpenOptions::new().create(true).append(true).open(p).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        "Directory" if meta.as_ref().is_ok_and(|m| m.is_dir()) => Ok(()),
        "File" if meta.as_ref().is_ok_and(|m| m.is_file()) => Ok(()),
        "Socket" if meta.as_ref().is_ok_and(|m| m.file_type().is_socket()) => Ok(()),
        "CharDevice" if meta.as_ref().is_ok_and(|m| m.file_type().is_char_device()) => Ok(()),
        "BlockDevice" if meta.as_ref().is_ok_and(|m| m.file_type().is_block_device()) => Ok(()),
        other => Err(format!("{} is not a {other}", p.display())),
    }
}

/// The image an in-place update pulled, if the runtime still has it (else the normal pull path).
async fn pulled_image_present(ctx: &Shared, id: Option<&str>) -> Option<String> {
    let id = id.filter(|id| !id.is_empty())?;
    ctx.cri.image_id(id).await.ok().flatten().map(|img| img.id)
}

/// An ephemeral container's `targetContainerName`: the running instance whose PID namespace it
/// joins (none running: its own, as upstream when the target is gone).
fn pid_target(req: &StartRequest<'_>) -> Option<String> {
    if req.kind != Kind::Ephemeral {
        return None;
    }
    let (_, target) = crate::pod::spec::ephemeral_containers(&req.desired.pod)
        .into_iter()
        .find(|(c, _)| c.name == req.spec.name)?;
    let running = req.observed.newest(&target?)?;
    (running.state == ContainerState::Running).then(|| running.id.clone())
}

/// Pulls, creates and starts one container, then runs its postStart hook (R1.8, R8.1).
/// Returns the new container ID.
pub async fn start_container(ctx: &Shared, req: &StartRequest<'_>) -> Result<String, StartError> {
    let d = req.desired;
    let c = req.spec;
    let name = Some(c.name.as_str());
    let image_ref = match pulled_image_present(ctx, req.pulled_image).await {
        Some(id) => id,
        None => ensure_image(ctx, d, c, req.sandbox_config, req.images_seen).await?,
    };
    verify_run_as_non_root(ctx, d, c, &image_ref).await.inspect_err(|e| {
        ctx.rec.warning(&d.key, name, "Failed", format!("Error: {}", e.message));
    })?;
    let restart_count = next_restart_count(ctx, req);
    let log_dir = pod_log_dir(&ctx.node, d).join(&c.name);
    mkdir(&log_dir, 0o755)
        .map_err(|e| err("CreateContainerConfigError", format!("creating {}: {e}", log_dir.display())))?;
    prepare_volumes(ctx, d).await?;
    let api_env = env_sources(ctx, d, c).await?;
    // `subPathExpr` expands against the container's environment (the kubelet's makeMounts).
    let mount_env = if c
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.sub_path_expr.as_deref().is_some_and(|e| !e.is_empty()))
    {
        let rv = RuntimeValues {
            pod_ips: req.pod_ips.to_vec(),
            image_ref: image_ref.clone(),
            restart_count,
            termination_file: None,
            pid_target: None,
        };
        crate::pod::spec::resolve_env(&ctx.node, d, c, &rv, api_env.as_ref())
            .map_err(|e| err("CreateContainerConfigError", e.reason))?
    } else {
        Vec::new()
    };
    let (mounts, termination_file) = prepare_mounts(ctx, req, &mount_env)?;
    let rv = RuntimeValues {
        pod_ips: req.pod_ips.to_vec(),
        image_ref,
        restart_count,
        termination_file,
        pid_target: pid_target(req),
    };
    let config = container_config_with_env(&ctx.node, d, c, req.kind, &rv, mounts, api_env.as_ref())
        .map_err(|e| {
            // The kubelet's text: the event and status already name the container.
            ctx.rec.warning(&d.key, name, "Failed", format!("Error: {}", e.reason));
            err("CreateContainerConfigError", e.reason)
        })?;
    let wanted_signal = api::Signal::try_from(config.stop_signal).unwrap_or(api::Signal::RuntimeDefault);
    let id =
        ctx.cri.create_container(req.sandbox_id, config, req.sandbox_config.clone()).await.map_err(|e| {
            ctx.rec.warning(&d.key, name, "Failed", format!("Error: {e}"));
            err("CreateContainerError", e.to_string())
        })?;
    ctx.rec.normal(&d.key, name, "Created", format!("Created container: {}", c.name));
    super::stop_signal::report_if_ignored(ctx, d, c, &id, req.sandbox_id, wanted_signal).await;
    ctx.rec.step(&d.key, name, Step::now(StepKind::Created, &id, format!("restart {restart_count}")));
    if let Err(e) = ctx.cri.start_container(&id).await {
        ctx.rec.warning(&d.key, name, "Failed", format!("Error: {e}"));
        return Err(err("RunContainerError", e.to_string()));
    }
    ctx.rec.started(&d.key, &c.name, &id, restart_count);
    link_legacy_log(ctx, d, &c.name, &id, &log_dir.join(format!("{restart_count}.log")));
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
        if let Err(msg) = run_handler(&ctx.cri, &id, c, hook, req.pod_ips.first().map(String::as_str)).await {
            tracing::warn!(pod = %d.key, container = %c.name, error = %msg, "postStart hook failed");
            ctx.rec.warning(&d.key, name, "FailedPostStartHook", format!("PostStartHook failed: {msg}"));
            ctx.rec.step(
                &d.key,
                name,
                Step::now(StepKind::Killing, &id, format!("postStart hook failed: {msg}")),
            );
            // R8.2: the container is killed through the normal path (preStop and grace).
            let grace = spec::termination_grace(&d.pod);
            super::terminate::kill_one(
                ctx,
                d,
                c,
                &id,
                grace,
                "FailedPostStartHook",
                req.pod_ips.first().map(String::as_str),
            )
            .await;
            return Err(err("PostStartHookError", msg));
        }
    }
    Ok(id)
}

/// R1.13: `/var/log/containers/<pod>_<ns>_<container>-<id>.log` → the CRI log file, once it
/// exists. Best effort: a failure is logged, never fatal.
fn link_legacy_log(ctx: &Shared, d: &DesiredPod, container: &str, id: &str, target: &Path) {
    let Some(link) = spec::legacy_log_symlink(&ctx.node, &d.key, container, id) else { return };
    if !target.exists() {
        return;
    }
    let made = link.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|_| {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link)
    });
    if let Err(e) = made {
        tracing::warn!(link = %link.display(), error = %e, "cannot create the legacy log symlink");
    }
}

/// `runAsNonRoot` as the kubelet enforces it: the effective user (container, then pod, then the
/// image's) must be known and not 0.
async fn verify_run_as_non_root(
    ctx: &Shared,
    d: &DesiredPod,
    c: &Container,
    image_ref: &str,
) -> Result<(), StartError> {
    let psc = d.pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let non_root = csc.and_then(|s| s.run_as_non_root).or(psc.and_then(|s| s.run_as_non_root)) == Some(true);
    if !non_root {
        return Ok(());
    }
    let configured = csc.and_then(|s| s.run_as_user).or(psc.and_then(|s| s.run_as_user));
    let uid = match configured {
        Some(u) => Some(u),
        None => {
            let img = ctx
                .cri
                .image_id(image_ref)
                .await
                .map_err(|e| err("CreateContainerConfigError", e.to_string()))?;
            match img {
                Some(img) => match img.uid {
                    Some(u) => Some(u.value),
                    None if img.username.is_empty() => Some(0),
                    None => None,
                },
                None => None,
            }
        }
    };
    match uid {
        Some(0) => Err(err(
            "CreateContainerConfigError",
            "container has runAsNonRoot and image will run as root".to_string(),
        )),
        None => Err(err(
            "CreateContainerConfigError",
            "container has runAsNonRoot and image has non-numeric user, cannot verify user is non-root"
                .to_string(),
        )),
        Some(_) => Ok(()),
    }
}

/// The pod's /etc/hosts as the kubelet writes it: the node's file for host-network pods, else
/// the standard local entries and the pod's own IP and hostname; then the hostAliases.
pub fn hosts_file(pod: &k8s_openapi::api::core::v1::Pod, pod_ips: &[String]) -> String {
    let spec = pod.spec.as_ref();
    let mut out = String::from("# Kubernetes-managed hosts file.\n");
    if spec.and_then(|s| s.host_network) == Some(true) {
        out = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    } else {
        out.push_str("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n");
        let host = super::spec::hostname(pod);
        let fqdn = match spec.and_then(|s| s.subdomain.as_deref()) {
            Some(sub) if !sub.is_empty() => {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                format!("{host}.{sub}.{ns}.svc.cluster.local\t{host}")
            }
            _ => host,
        };
        for ip in pod_ips {
            out.push_str(&format!("{ip}\t{fqdn}\n"));
        }
    }
    let aliases = spec.and_then(|s| s.host_aliases.as_ref()).filter(|a| !a.is_empty());
    if let Some(aliases) = aliases {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{HostAlias, Pod, PodSpec};

    use super::*;

    #[test]
    fn hosts_file_cases() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.spec = Some(PodSpec {
            host_aliases: Some(vec![HostAlias {
                ip: "10.1.2.3".into(),
                hostnames: Some(vec!["a".into(), "b".into()]),
            }]),
            ..Default::default()
        });
        let text = hosts_file(&pod, &["10.88.77.5".to_string()]);
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"), "{text}");
        assert!(text.contains("10.88.77.5\tweb\n"), "{text}");
        assert!(text.ends_with("# Entries added by HostAliases.\n10.1.2.3\ta\tb\n"), "{text}");
    }
}

#[cfg(test)]
mod sub_path_tests {
    use super::*;

    #[test]
    fn sub_path_expressions_expand_and_are_checked_as_the_kubelets() {
        let env: Vec<(String, String)> = [("POD", "web-0"), ("EMPTY", ""), ("UP", ".."), ("ABS", "/etc")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let cases = [
            ("logs/$(POD)", Ok("logs/web-0".to_string())),
            ("$(POD)/$$(POD)", Ok("web-0/$(POD)".to_string())),
            ("$(NOPE)/$(EMPTY)", Err("missing value for EMPTY, NOPE".to_string())),
            ("$(ABS)/x", Err("error SubPath `/etc/x` must not be an absolute path".to_string())),
            ("a/$(UP)/b", Err("unable to provision SubPath `a/../b`: must not contain '..'".to_string())),
        ];
        for (expr, want) in cases {
            assert_eq!(expand_sub_path(expr, &env), want, "{expr}");
        }
    }
}
