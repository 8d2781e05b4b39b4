//! Image garbage collection, as the kubelet's image manager does it: every 5 minutes the
//! images the runtime holds are compared with the containers it has, and when the image
//! filesystem is at or over `--image-gc-high-threshold` the unused ones are removed, least
//! recently used first, until it is down to `--image-gc-low-threshold` (`policy` decides,
//! this loop asks the runtime and removes). Images unused for longer than
//! `--image-maximum-gc-age` go whatever the usage.

pub mod policy;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

pub use policy::Policy;

use crate::cri::{CriClient, api};
use crate::registry::Registry;

/// The kubelet's ImageGCPeriod.
pub const PERIOD: Duration = Duration::from_secs(300);

/// The kubelet's event reasons (on the Node).
pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";
pub const IMAGE_GC_FAILED: &str = "ImageGCFailed";
pub const INVALID_DISK_CAPACITY: &str = "InvalidDiskCapacity";

/// Image garbage collection, shared by its loop ([`ImageGc::run`]) and the eviction manager's
/// disk reclaim ([`ImageGc::delete_unused`]): one record of when each image was first seen and
/// last used, one collection at a time.
#[derive(Clone)]
pub struct ImageGc {
    collector: Arc<tokio::sync::Mutex<Collector>>,
}

impl ImageGc {
    pub fn new(cri: CriClient, registry: Registry, policy: Policy) -> ImageGc {
        let c =
            Collector { cri, registry, policy, records: policy::Records::default(), began: Instant::now() };
        ImageGc { collector: Arc::new(tokio::sync::Mutex::new(c)) }
    }

    /// Runs image garbage collection every [`PERIOD`], the first at once, until cancelled. A
    /// failure is logged; a second in a row is also an `ImageGCFailed` event (the kubelet's
    /// rule: the first may be the stats not being ready yet).
    pub async fn run(self, cancel: CancellationToken) {
        let (policy, registry) = {
            let c = self.collector.lock().await;
            (c.policy, c.registry.clone())
        };
        if !policy.enabled() {
            info!(
                "image garbage collection is off (--image-gc-high-threshold 100, no --image-maximum-gc-age)"
            );
            cancel.cancelled().await;
            return;
        }
        let mut failed_before = false;
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.collector.lock().await.collect().await {
                Ok(()) => failed_before = false,
                Err(e) if failed_before => {
                    error!(error = %e, "image garbage collection failed again");
                    warning(&registry, IMAGE_GC_FAILED, e);
                }
                Err(e) => {
                    warn!(error = %e, "image garbage collection failed once");
                    failed_before = true;
                }
            }
        }
    }

    /// The kubelet's `DeleteUnusedImages`, what its eviction manager reclaims disk with before
    /// it evicts a pod: every image no container uses, not pinned, not the sandbox image and
    /// past the minimum age, whatever the thresholds (also with garbage collection off).
    /// The bytes freed.
    pub async fn delete_unused(&self) -> Result<u64, String> {
        let mut c = self.collector.lock().await;
        let now = Instant::now();
        let candidates = c.candidates(now).await?;
        let policy = c.policy;
        let mut freed = 0u64;
        let mut errors = Vec::new();
        for image in policy::removable_for_space(candidates, &policy, now) {
            info!(image = %image.id, size = image.size, "removing an unused image: the node is under disk pressure");
            match c.remove(&image.id).await {
                Ok(()) => freed += image.size,
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() { Ok(freed) } else { Err(errors.join("; ")) }
    }
}

/// [`ImageGc::run`] on its own (the agent hands the same `ImageGc` to the eviction manager).
pub async fn run(cri: CriClient, registry: Registry, policy: Policy, cancel: CancellationToken) {
    ImageGc::new(cri, registry, policy).run(cancel).await
}

/// A `Warning` event about the node, also logged.
fn warning(registry: &Registry, reason: &str, message: String) {
    warn!(reason, "{message}");
    registry.record_node("Warning", reason, message);
}

struct Collector {
    cri: CriClient,
    registry: Registry,
    policy: Policy,
    records: policy::Records,
    began: Instant,
}

/// The image filesystem's size and free bytes (as statvfs gives them to unprivileged users).
fn fs_space(mountpoint: &str) -> std::io::Result<(u64, u64)> {
    let s = nix::sys::statvfs::statvfs(mountpoint).map_err(std::io::Error::from)?;
    let frag = s.fragment_size();
    Ok((s.blocks() * frag, s.blocks_available() * frag))
}

/// The runtime's sandbox image reference, from its verbose `Status` info (containerd 2.x
/// `pinnedImages.sandbox`, 1.x `sandboxImage`).
pub fn sandbox_image(info: &std::collections::HashMap<String, String>) -> Option<String> {
    let mut keys: Vec<&String> = info.keys().collect();
    keys.sort();
    keys.into_iter().find_map(|k| {
        let v: serde_json::Value = serde_json::from_str(&info[k]).ok()?;
        let image = v.get("sandboxImage").or_else(|| v.pointer("/pinnedImages/sandbox"))?;
        image.as_str().filter(|i| !i.is_empty()).map(str::to_string)
    })
}

impl Collector {
    /// One round: the kubelet's `GarbageCollect`.
    async fn collect(&mut self) -> Result<(), String> {
        let now = Instant::now();
        let candidates = self.candidates(now).await?;
        let (old, candidates) = policy::too_old(candidates, &self.policy, now, self.began);
        let mut errors = Vec::new();
        for image in old {
            info!(image = %image.id, size = image.size, "removing an image unused for longer than --image-maximum-gc-age");
            if let Err(e) = self.remove(&image.id).await {
                errors.push(e);
            }
        }
        if !errors.is_empty() {
            return Err(format!(
                "wanted to free images older than {:?}, encountered errors in image deletion: {}",
                self.policy.max_age.unwrap_or_default(),
                errors.join("; ")
            ));
        }
        if self.policy.high_percent >= 100 {
            return Ok(());
        }
        let fs = self.cri.image_fs_info().await.map_err(|e| crate::error_chain(&e))?;
        let Some(fs) = fs.into_iter().find(|f| !f.mountpoint.is_empty()) else {
            return Err("the runtime reports no image filesystem (CRI ImageFsInfo)".into());
        };
        let mountpoint = fs.mountpoint.clone();
        let (capacity, available) = crate::blocking(move || fs_space(&mountpoint))
            .await
            .map_err(|e| format!("statvfs of the image filesystem {}: {e}", fs.mountpoint))?;
        if capacity == 0 {
            let message = "invalid capacity 0 on image filesystem".to_string();
            warning(&self.registry, INVALID_DISK_CAPACITY, message.clone());
            return Err(message);
        }
        let Some(wanted) = self.policy.bytes_to_free(capacity, available) else {
            debug!(capacity, available, "image filesystem under the high threshold");
            return Ok(());
        };
        info!(
            mountpoint = %fs.mountpoint, capacity, available, high = self.policy.high_percent,
            low = self.policy.low_percent, wanted,
            "image filesystem usage is over the high threshold; removing unused images down to the low threshold"
        );
        let mut freed = 0u64;
        for image in policy::removable_for_space(candidates, &self.policy, now) {
            if freed >= wanted {
                break;
            }
            info!(image = %image.id, size = image.size, "removing an unused image to free space");
            match self.remove(&image.id).await {
                Ok(()) => freed += image.size,
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(format!(
                "wanted to free {wanted} bytes, but freed {freed} bytes space with errors in image deletion: {}",
                errors.join("; ")
            ));
        }
        if freed < wanted {
            // The kubelet's message, word for word: people and alerts search for it.
            let message = format!(
                "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free."
            );
            warning(&self.registry, FREE_DISK_SPACE_FAILED, message.clone());
            return Err(message);
        }
        Ok(())
    }

    /// The images that may go, least recently used first: the runtime's images and containers
    /// listed, the records brought up to date (the kubelet's `detectImages`).
    async fn candidates(&mut self, now: Instant) -> Result<Vec<policy::Candidate>, String> {
        let images = self.cri.images().await.map_err(|e| crate::error_chain(&e))?;
        let (_, containers) = self.cri.list_all(None).await.map_err(|e| crate::error_chain(&e))?;
        // Any container the runtime has, running or not, holds its image (as the kubelet).
        let in_use: HashSet<String> = containers.iter().map(|c| c.image_ref.clone()).collect();
        let protected = self.protected(&images).await;
        let listed: Vec<policy::Listed> = images
            .iter()
            .map(|i| policy::Listed { id: i.id.clone(), size: i.size, pinned: i.pinned })
            .collect();
        self.records.detect(&listed, &in_use, now);
        let candidates = self.records.eviction_order(&in_use, &protected);
        Ok(candidates)
    }

    async fn remove(&mut self, id: &str) -> Result<(), String> {
        match self.cri.remove_image(id).await {
            Ok(()) => {
                self.records.forget(id);
                Ok(())
            }
            Err(e) => Err(crate::error_chain(&e)),
        }
    }

    /// The IDs of the runtime's sandbox image (which its CRI `pinned` also protects on
    /// containerd 2.x; named here too so that a runtime that does not pin it keeps it).
    async fn protected(&self, images: &[api::Image]) -> HashSet<String> {
        let info = match self.cri.runtime_status(true, Duration::from_secs(10)).await {
            Ok(s) => s.info,
            Err(e) => {
                debug!(error = %e, "CRI Status failed; only pinned images are kept as the sandbox image");
                return HashSet::new();
            }
        };
        let Some(pause) = sandbox_image(&info) else { return HashSet::new() };
        images
            .iter()
            .filter(|i| i.id == pause || i.repo_tags.contains(&pause) || i.repo_digests.contains(&pause))
            .map(|i| i.id.clone())
            .collect()
    }
}
