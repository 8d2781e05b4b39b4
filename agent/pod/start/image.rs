//! A container's image: looked up for a sync's starts, pulled by its policy with the node-wide
//! back-off and the pod's pull secrets (R11), one pull at a time.

use super::*;
use crate::context::ImageContext;

/// What `ImageStatus` answered for each image, asked while the sandbox was being created.
pub type ImagesSeen = HashMap<String, Option<api::Image>>;

/// Asks the runtime for each image at once. Done beside `RunPodSandbox` for the containers the
/// same sync will start, so the sandbox's creation hides the lookups; an image whose lookup
/// failed is simply asked again at its start.
pub async fn look_up_images(ctx: &ImageContext, images: BTreeSet<String>) -> ImagesSeen {
    let lookups = images.into_iter().filter(|i| !i.is_empty()).map(|image| async move {
        let found = ctx.exec.cri.image_id(&image).await;
        found.ok().map(|img| (image, img))
    });
    futures::future::join_all(lookups).await.into_iter().flatten().collect()
}

/// Ensures the image per `imagePullPolicy` (R11.2, R7.11); returns the runtime's image ID.
/// `seen` is what `ImageStatus` answered for it moments ago, in this sync ([`look_up_images`]).
pub async fn ensure_image(
    ctx: &ImageContext,
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
            .exec
            .cri
            .image_id(&image)
            .await
            .map_err(|e| err("ImageInspectError", format!("Failed to inspect image \"{image}\": {e}")))?,
    };
    let name = Some(c.name.as_str());
    match (policy, present) {
        ("Never", Some(img)) | ("IfNotPresent", Some(img)) => {
            ctx.exec.rec.normal(
                &d.key,
                name,
                "Pulled",
                format!("Container image \"{image}\" already present on machine"),
            );
            return Ok(img.id);
        }
        ("Never", None) => {
            let msg = format!("Container image \"{image}\" is not present with pull policy of Never");
            ctx.exec.rec.warning(&d.key, name, "ErrImageNeverPull", msg.clone());
            return Err(err("ErrImageNeverPull", msg));
        }
        _ => {}
    }
    let key = format!("{}_{}", d.uid, image);
    let now = now_ns();
    if let Ok(mut b) = ctx.backoff.lock() {
        // Entries unused for 2 × max are gone (they no longer change any decision).
        b.gc(now);
        if b.backoff_since_update(&key, now).is_some() {
            let msg = format!("Back-off pulling image \"{image}\"");
            drop(b);
            ctx.exec.rec.normal(&d.key, name, "BackOff", msg.clone());
            return Err(err("ImagePullBackOff", msg));
        }
    }
    ctx.exec.rec.normal(&d.key, name, "Pulling", format!("Pulling image \"{image}\""));
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
            if let Ok(mut b) = ctx.backoff.lock() {
                b.reset(&key);
            }
            ctx.exec.rec.normal(
                &d.key,
                name,
                "Pulled",
                format!("Successfully pulled image \"{image}\" in {:.3}s", started.elapsed().as_secs_f64()),
            );
            let img = ctx
                .exec
                .cri
                .image_id(&image)
                .await
                .map_err(|e| err("ImageInspectError", e.to_string()))?
                .ok_or_else(|| err("ErrImagePull", format!("image \"{image}\" not present after pull")))?;
            Ok(img.id)
        }
        Err(e) => {
            if let Ok(mut b) = ctx.backoff.lock() {
                b.next(&key, now, now);
            }
            let msg = format!("Failed to pull image \"{image}\": {e}");
            ctx.exec.rec.warning(&d.key, name, "Failed", msg.clone());
            ctx.exec.rec.warning(&d.key, name, "Failed", "Error: ErrImagePull".into());
            Err(err("ErrImagePull", msg))
        }
    }
}

/// Pulls `image` with each matching credential in turn until one works (the kubelet's
/// keyring order), or without any when none matches.
pub(super) async fn pull_with_credentials(
    ctx: &ImageContext,
    image: &str,
    sandbox_config: &api::PodSandboxConfig,
    credentials: Vec<crate::volumes::pull_secrets::Credential>,
) -> Result<String, crate::cri::CriError> {
    if credentials.is_empty() {
        return ctx.exec.cri.pull_image(image, Some(sandbox_config.clone())).await;
    }
    let mut last = None;
    for c in credentials {
        // No server address: the credential was matched to the image's registry here, and
        // containerd drops one whose address is not a URL naming the host it dials.
        let _ = c.server;
        let auth = api::AuthConfig { username: c.username, password: c.password, ..Default::default() };
        match ctx.exec.cri.pull_image_with(image, Some(sandbox_config.clone()), Some(auth)).await {
            Ok(r) => return Ok(r),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e),
        None => ctx.exec.cri.pull_image(image, Some(sandbox_config.clone())).await,
    }
}

/// The image an in-place update pulled, if the runtime still has it (else the normal pull path).
pub(super) async fn pulled_image_present(ctx: &ImageContext, id: Option<&str>) -> Option<String> {
    let id = id.filter(|id| !id.is_empty())?;
    ctx.exec.cri.image_id(id).await.ok().flatten().map(|img| img.id)
}
