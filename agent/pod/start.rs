//! Starting things: the sandbox, and one container (image, restart count, mounts, create,
//! start, postStart). Failures come back as the waiting reason the kubelet would show (R7.10).

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

use super::backoff::Backoff;
use super::context::{StartContext, now_ns};
use super::hash::container_hash;
use super::hooks::run_handler;
use super::spec::{
    self, Kind, RuntimeValues, container_config_with_env, empty_dir, pod_dir, pod_log_dir,
    restart_count_from_logs, sandbox_config,
};
use crate::cri::api;
use crate::model::{ContainerState, DesiredPod, ObservedPod};
use crate::node::NodeConfig;
use crate::status::StartError;
use crate::timeline::{Step, StepKind};

mod image;
mod mounts;

use image::pulled_image_present;
pub use image::{ImagesSeen, ensure_image, look_up_images};
pub use mounts::hosts_file;
use mounts::{MountWork, prepare_mounts};

fn err(reason: &str, message: impl Into<String>) -> StartError {
    StartError { reason: reason.to_string(), message: message.into() }
}

/// Creates the sandbox (R1.1): log directory first, then `RunPodSandbox`, then its status for
/// the pod IPs. Returns (sandbox ID, pod IPs).
pub async fn create_sandbox(
    ctx: &StartContext,
    d: &DesiredPod,
    attempt: u32,
) -> Result<(String, Option<crate::model::ObservedSandbox>), StartError> {
    let (log_dir, pod_dir) = (pod_log_dir(&ctx.node, d), pod_dir(&ctx.node, &d.uid));
    crate::blocking(move || {
        mkdir(&log_dir, 0o755)?;
        mkdir(&pod_dir, 0o750)
    })
    .await
    .map_err(|e| err("CreatePodSandboxError", e.to_string()))?;
    prepare_volumes(ctx, d).await?;
    // The kubelet forms the resolver with each sandbox config; its warnings (no cluster DNS,
    // limits exceeded) are events on the pod, recorded here where the resolver takes effect.
    let dns = crate::dns::pod_dns(&ctx.node.dns, &d.pod, &d.key.namespace).await.map_err(|e| {
        let e = crate::error_chain(&e);
        ctx.exec.rec.warning(
            &d.key,
            None,
            "FailedCreatePodSandBox",
            format!("Failed to create pod sandbox: {e}"),
        );
        err("CreatePodSandboxError", e)
    })?;
    for w in dns.warnings {
        ctx.exec.rec.warning(&d.key, None, w.reason, w.message);
    }
    let mut config = sandbox_config(&ctx.node, d, attempt, dns.config);
    if let Err(e) = add_user_namespace(ctx, d, &mut config).await {
        ctx.exec.rec.warning(
            &d.key,
            None,
            "FailedCreatePodSandBox",
            format!("Failed to create pod sandbox: {}", e.message),
        );
        return Err(e);
    }
    let handler = d.pod.spec.as_ref().and_then(|s| s.runtime_class_name.clone()).unwrap_or_default();
    ctx.runtime_uids.claim(&d.uid);
    let id = ctx.exec.cri.run_sandbox(config, &handler).await.map_err(|e| {
        ctx.exec.rec.warning(
            &d.key,
            None,
            "FailedCreatePodSandBox",
            format!("Failed to create pod sandbox: {e}"),
        );
        err("CreatePodSandboxError", e.to_string())
    })?;
    // Its IPs; the sync also follows the pod from this status (`publish_started`).
    let status = ctx.exec.cri.sandbox_status(&id).await.ok();
    Ok((id, status))
}

/// `hostUsers: false` (KEP-127): the pod's own user namespace in its sandbox config, with the
/// block of host IDs its directory holds (allocated on first use), once the runtime handler
/// reports user namespace support; otherwise the kubelet's refusal. Every sandbox config the
/// agent forms for the pod (creation, pulls, container creates) goes through here.
pub async fn add_user_namespace(
    ctx: &StartContext,
    d: &DesiredPod,
    config: &mut api::PodSandboxConfig,
) -> Result<(), StartError> {
    if !super::userns::wanted(&d.pod) {
        return Ok(());
    }
    let handler = d.pod.spec.as_ref().and_then(|s| s.runtime_class_name.clone()).unwrap_or_default();
    let handlers = ctx.exec.cri.runtime_handlers().await.map_err(|e| {
        err("CreatePodSandboxError", format!("{}: {e}", super::userns::unsupported_message(&handler)))
    })?;
    if !super::userns::handler_supports(&handlers, &handler) {
        return Err(err("CreatePodSandboxError", super::userns::unsupported_message(&handler)));
    }
    let dir = pod_dir(&ctx.node, &d.uid);
    let host_id = crate::blocking(move || super::userns::block_of(&dir))
        .await
        .map_err(|e| err("CreatePodSandboxError", format!("user namespace: {e}")))?;
    super::userns::apply_to_sandbox(config, &super::userns::namespace(host_id));
    Ok(())
}

/// The resolver of `d`'s sandbox, formed again for the CRI calls that carry the sandbox's config
/// (pulls, container creates), as the kubelet does for each sync; the warnings were recorded
/// when the sandbox was made. A host file that cannot be used is the kubelet's
/// `ConfigPodSandboxError`.
pub async fn sandbox_dns(node: &NodeConfig, d: &DesiredPod) -> Result<api::DnsConfig, StartError> {
    match crate::dns::pod_dns(&node.dns, &d.pod, &d.key.namespace).await {
        Ok(dns) => Ok(dns.config),
        Err(e) => Err(err("ConfigPodSandboxError", crate::error_chain(&e))),
    }
}

/// The config of `d`'s existing sandbox (attempt `attempt`) for a sync's pulls and container
/// creates: [`sandbox_dns`], then [`sandbox_config`] with [`add_user_namespace`].
pub async fn existing_sandbox_config(
    ctx: &StartContext,
    d: &DesiredPod,
    attempt: u32,
) -> Result<api::PodSandboxConfig, StartError> {
    let dns = sandbox_dns(&ctx.node, d).await?;
    let mut config = sandbox_config(&ctx.node, d, attempt, dns);
    add_user_namespace(ctx, d, &mut config).await?;
    Ok(config)
}

/// The reason of [`create_sandbox`]'s error when a volume could not be set up: the worker
/// retries it on the kubelet's volume back-off, not the sync's.
pub const FAILED_MOUNT: &str = "FailedMount";

/// The pod's configMap, secret, downwardAPI and projected volumes are written before anything
/// uses them (the kubelet waits for its volumes before the sandbox). A failure is a FailedMount
/// event, and a `FAILED_MOUNT` error.
async fn prepare_volumes(ctx: &StartContext, d: &DesiredPod) -> Result<(), StartError> {
    let Some(vm) = &ctx.volumes else { return Ok(()) };
    vm.prepare(&d.pod).await.map_err(|msg| {
        ctx.exec.rec.warning(&d.key, None, "FailedMount", msg.clone());
        err(FAILED_MOUNT, msg)
    })
}

/// The ConfigMaps and Secrets the container's env names, read before its config is built.
async fn env_sources(
    ctx: &StartContext,
    d: &DesiredPod,
    c: &Container,
) -> Result<Option<crate::volumes::EnvSources>, StartError> {
    let Some(vm) = &ctx.volumes else { return Ok(None) };
    vm.env_sources(&d.pod, c).await.map(Some).map_err(|msg| {
        ctx.exec.rec.warning(&d.key, Some(&c.name), "Failed", format!("Error: {msg}"));
        err("CreateContainerConfigError", msg)
    })
}

/// `path` and its parents, `path` with `mode`; the error names the path. Blocks on the disk.
fn mkdir(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(path)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)))
        .map_err(|e| std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display())))
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

/// The container's log dir, made, and R1.14's restart count of the new instance: the newest
/// instance's plus one, else (none in the runtime) the count its logs go on from. Blocks on the
/// disk.
fn prepare_log_dir(log_dir: &Path, newest_restart_count: Option<u32>) -> std::io::Result<u32> {
    let restart_count = match newest_restart_count {
        Some(n) => n + 1,
        None => restart_count_from_logs(log_dir).unwrap_or(0),
    };
    mkdir(log_dir, 0o755)?;
    Ok(restart_count)
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
pub async fn start_container(ctx: &StartContext, req: &StartRequest<'_>) -> Result<String, StartError> {
    let d = req.desired;
    let c = req.spec;
    let name = Some(c.name.as_str());
    let image_ref = match pulled_image_present(&ctx.images, req.pulled_image).await {
        Some(id) => id,
        None => ensure_image(&ctx.images, d, c, req.sandbox_config, req.images_seen).await?,
    };
    verify_strict_groups(&*ctx.exec.cri, d).await.inspect_err(|e| {
        ctx.exec.rec.warning(&d.key, name, "Failed", format!("Error: {}", e.message));
    })?;
    verify_run_as_non_root(&*ctx.exec.cri, d, c, &image_ref).await.inspect_err(|e| {
        ctx.exec.rec.warning(&d.key, name, "Failed", format!("Error: {}", e.message));
    })?;
    let log_dir = pod_log_dir(&ctx.node, d).join(&c.name);
    let newest = req.observed.newest(&c.name).map(|o| o.restart_count);
    let dir = log_dir.clone();
    let restart_count = crate::blocking(move || prepare_log_dir(&dir, newest))
        .await
        .map_err(|e| err("CreateContainerConfigError", e.to_string()))?;
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
    let work = MountWork {
        node: ctx.node.clone(),
        desired: d.clone(),
        container: c.clone(),
        pod_ips: req.pod_ips.to_vec(),
        env: mount_env,
    };
    let (mounts, termination_file) =
        crate::blocking(move || prepare_mounts(&work).map_err(std::io::Error::other))
            .await
            .map_err(|e| err("CreateContainerConfigError", e.to_string()))?;
    let rv = RuntimeValues {
        pod_ips: req.pod_ips.to_vec(),
        image_ref,
        restart_count,
        termination_file,
        pid_target: pid_target(req),
    };
    let mut config = container_config_with_env(&ctx.node, d, c, req.kind, &rv, mounts, api_env.as_ref())
        .map_err(|e| {
            // The kubelet's text: the event and status already name the container.
            ctx.exec.rec.warning(&d.key, name, "Failed", format!("Error: {}", e.reason));
            err("CreateContainerConfigError", e.reason)
        })?;
    // The container joins the sandbox's user namespace; its mounts are idmapped with it.
    if let Some(ns) = super::userns::of_sandbox(req.sandbox_config) {
        super::userns::apply_to_container(&mut config, ns);
    } else if super::userns::wanted(&d.pod) {
        // Never a container of a hostUsers: false pod with the host's IDs.
        let msg = "hostUsers: false, but the sandbox config carries no user namespace".to_string();
        ctx.exec.rec.warning(&d.key, name, "Failed", format!("Error: {msg}"));
        return Err(err("CreateContainerConfigError", msg));
    }
    check_seccomp_profile(&config).await.inspect_err(|e| {
        ctx.exec.rec.warning(&d.key, name, "Failed", format!("Error: {}", e.message));
    })?;
    let wanted_signal = api::Signal::try_from(config.stop_signal).unwrap_or(api::Signal::RuntimeDefault);
    let id =
        ctx.exec.cri.create_container(req.sandbox_id, config, req.sandbox_config.clone()).await.map_err(
            |e| {
                ctx.exec.rec.warning(&d.key, name, "Failed", format!("Error: {e}"));
                err("CreateContainerError", e.to_string())
            },
        )?;
    ctx.exec.rec.normal(&d.key, name, "Created", format!("Created container: {}", c.name));
    super::stop_signal::report_if_ignored(&ctx.exec, d, c, &id, req.sandbox_id, wanted_signal).await;
    ctx.exec.rec.step(&d.key, name, Step::now(StepKind::Created, &id, format!("restart {restart_count}")));
    if let Err(e) = ctx.exec.cri.start_container(&id).await {
        ctx.exec.rec.warning(&d.key, name, "Failed", format!("Error: {e}"));
        return Err(err("RunContainerError", e.to_string()));
    }
    ctx.exec.rec.started(&d.key, &c.name, &id, restart_count);
    if let Some(link) = spec::legacy_log_symlink(&ctx.node, &d.key, &c.name, &id) {
        let target = log_dir.join(format!("{restart_count}.log"));
        if let Err(e) = crate::blocking(move || link_legacy_log(&link, &target)).await {
            tracing::warn!(error = %e, "cannot create the legacy log symlink");
        }
    }
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
        if let Err(msg) =
            run_handler(&*ctx.exec.cri, &id, c, hook, req.pod_ips.first().map(String::as_str)).await
        {
            tracing::warn!(pod = %d.key, container = %c.name, error = %msg, "postStart hook failed");
            ctx.exec.rec.warning(&d.key, name, "FailedPostStartHook", format!("PostStartHook failed: {msg}"));
            ctx.exec.rec.step(
                &d.key,
                name,
                Step::now(StepKind::Killing, &id, format!("postStart hook failed: {msg}")),
            );
            // R8.2: the container is killed through the normal path (preStop and grace).
            let grace = spec::termination_grace(&d.pod);
            super::terminate::kill_one(
                &ctx.exec,
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

/// A Localhost seccomp profile must be a file crilet can read before the container is created,
/// so a missing one is reported the same whatever the runtime: with containerd's words and the
/// reason the kubelet shows for it (`CreateContainerError`). Retried on each start attempt, so a
/// profile put in place later is picked up.
async fn check_seccomp_profile(config: &api::ContainerConfig) -> Result<(), StartError> {
    let profile =
        config.linux.as_ref().and_then(|l| l.security_context.as_ref()).and_then(|s| s.seccomp.as_ref());
    let Some(path) = profile.and_then(super::seccomp::localhost_file).map(Path::to_path_buf) else {
        return Ok(());
    };
    let shown = path.display().to_string();
    crate::blocking(move || {
        let file = std::fs::File::open(&path)?;
        if file.metadata()?.is_dir() {
            return Err(std::io::Error::other("is a directory"));
        }
        Ok(())
    })
    .await
    .map_err(|e| err("CreateContainerError", format!("cannot load seccomp profile {shown:?}: {e}")))
}

/// R1.13: `/var/log/containers/<pod>_<ns>_<container>-<id>.log` (`link`) → the CRI log file,
/// once it exists. Best effort: the caller logs a failure, never fatal. Blocks on the disk.
fn link_legacy_log(link: &Path, target: &Path) -> std::io::Result<()> {
    if !target.exists() {
        return Ok(());
    }
    link.parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            let _ = std::fs::remove_file(link);
            std::os::unix::fs::symlink(target, link)
        })
        .map_err(|e| std::io::Error::new(e.kind(), format!("linking {}: {e}", link.display())))
}

/// `supplementalGroupsPolicy: Strict` on a runtime that would apply Merge instead (containerd
/// 1.x) is an error, not a silent Merge. API pods are refused at admission already (the
/// kubelet's `SupplementalGroupsPolicyNotSupported`); this holds static pods to the same.
async fn verify_strict_groups(cri: &dyn crate::cri::Runtime, d: &DesiredPod) -> Result<(), StartError> {
    let psc = d.pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    if psc.and_then(|s| s.supplemental_groups_policy.as_deref()) != Some("Strict") {
        return Ok(());
    }
    match cri.supports_strict_groups().await {
        Ok(true) => Ok(()),
        Ok(false) => Err(err(
            "CreateContainerConfigError",
            "SupplementalGroupsPolicy=Strict is not supported in this node",
        )),
        Err(e) => Err(err("CreateContainerConfigError", e.to_string())),
    }
}

/// `runAsNonRoot` as the kubelet enforces it (`pod::security`), with the image's user read from
/// the runtime only when neither the container nor the pod names one; an image the runtime does
/// not report counts as root, as upstream's `getImageUser`.
async fn verify_run_as_non_root(
    cri: &dyn crate::cri::Runtime,
    d: &DesiredPod,
    c: &Container,
    image_ref: &str,
) -> Result<(), StartError> {
    let psc = d.pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let non_root = csc.and_then(|s| s.run_as_non_root).or(psc.and_then(|s| s.run_as_non_root)) == Some(true);
    let configured = csc.and_then(|s| s.run_as_user).or(psc.and_then(|s| s.run_as_user));
    let (uid, username) = if non_root && configured.is_none() {
        let img =
            cri.image_id(image_ref).await.map_err(|e| err("CreateContainerConfigError", e.to_string()))?;
        match img {
            Some(img) => (img.uid.map(|u| u.value).or(img.username.is_empty().then_some(0)), img.username),
            None => (Some(0), String::new()),
        }
    } else {
        (Some(0), String::new())
    };
    let id = (d.key.name.as_str(), d.key.namespace.as_str(), d.uid.as_str());
    crate::pod::security::verify_run_as_non_root(id, psc, c, (uid, &username))
        .map_err(|message| err("CreateContainerConfigError", message))
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
