//! The kubelet's image garbage collection policy, pure (its `realImageGCManager`): which images
//! it tracks, when each was first seen and last used, and which of them to remove, in which
//! order. The loop in `mod.rs` feeds it the runtime's answers and a clock reading.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// `--image-gc-high-threshold`, `--image-gc-low-threshold`, `--minimum-image-ttl-duration`
/// and `--image-maximum-gc-age`, validated as the kubelet validates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Image filesystem usage (percent) at or above which images are removed.
    pub high_percent: u8,
    /// The usage (percent) removal brings the filesystem down to.
    pub low_percent: u8,
    /// An image first seen less than this long ago is never removed (it may be about to run).
    pub min_age: Duration,
    /// An image unused for longer than this is removed whatever the usage; `None` is off.
    pub max_age: Option<Duration>,
}

impl Default for Policy {
    /// The kubelet's defaults: 85 %, 80 %, 2 min, no maximum age.
    fn default() -> Self {
        Policy { high_percent: 85, low_percent: 80, min_age: Duration::from_secs(120), max_age: None }
    }
}

impl Policy {
    /// The policy from the flags' values, refused as the kubelet refuses them; errors name the flag.
    pub fn new(high: i64, low: i64, min_age: Duration, max_age: Duration) -> Result<Policy, String> {
        let percent = |flag: &str, v: i64| {
            u8::try_from(v)
                .ok()
                .filter(|p| *p <= 100)
                .ok_or_else(|| format!("{flag} {v} is not a percentage in 0..=100"))
        };
        let high_percent = percent("--image-gc-high-threshold", high)?;
        let low_percent = percent("--image-gc-low-threshold", low)?;
        // The kubelet's validation wants the low threshold strictly under the high one.
        if low_percent >= high_percent {
            return Err(format!(
                "--image-gc-low-threshold {low_percent} must be less than --image-gc-high-threshold {high_percent}"
            ));
        }
        if !max_age.is_zero() && max_age <= min_age {
            // The kubelet's validation: imageMaximumGCAge must exceed imageMinimumGCAge.
            return Err(format!(
                "--image-maximum-gc-age {max_age:?} must be longer than --minimum-image-ttl-duration {min_age:?}"
            ));
        }
        Ok(Policy { high_percent, low_percent, min_age, max_age: (!max_age.is_zero()).then_some(max_age) })
    }

    /// A high threshold of 100 and no maximum age turn image garbage collection off (the
    /// kubelet's rule).
    pub fn enabled(&self) -> bool {
        self.high_percent < 100 || self.max_age.is_some()
    }

    /// Bytes to free on a filesystem of `capacity` with `available` free: enough to reach the
    /// low threshold once usage is at or over the high one; `None` below it. The kubelet's
    /// integer arithmetic.
    pub fn bytes_to_free(&self, capacity: u64, available: u64) -> Option<u64> {
        if capacity == 0 {
            return None;
        }
        let available = available.min(capacity);
        let usage = 100 - (u128::from(available) * 100 / u128::from(capacity)) as u64;
        if usage < u64::from(self.high_percent) {
            return None;
        }
        let target = u128::from(capacity) * u128::from(100 - self.low_percent) / 100;
        Some((target as u64).saturating_sub(available))
    }
}

/// One image as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    pub size: u64,
    /// CRI `pinned` (the runtime's sandbox image, for one).
    pub pinned: bool,
}

/// What the policy remembers of one image (in memory, as the kubelet: a restart sees every
/// image anew, first detected at the restart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    first_detected: Instant,
    /// Never seen in use since first detected: `None`, older than any use.
    last_used: Option<Instant>,
    size: u64,
    pinned: bool,
}

/// An image that may be removed, with what ordered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub size: u64,
    first_detected: Instant,
    last_used: Option<Instant>,
}

/// The images the policy tracks (the kubelet's `imageRecords`).
#[derive(Debug, Default)]
pub struct Records {
    images: HashMap<String, Record>,
}

impl Records {
    /// The kubelet's `detectImages` at `now`: new images are first detected now, images in use
    /// (by any container the runtime has, running or not) are last used now, sizes and pins
    /// follow the runtime, and images gone from it are forgotten.
    pub fn detect(&mut self, listed: &[Listed], in_use: &HashSet<String>, now: Instant) {
        let current: HashSet<&str> = listed.iter().map(|i| i.id.as_str()).collect();
        self.images.retain(|id, _| current.contains(id.as_str()));
        for image in listed {
            let r = self.images.entry(image.id.clone()).or_insert(Record {
                first_detected: now,
                last_used: None,
                size: image.size,
                pinned: image.pinned,
            });
            if in_use.contains(&image.id) {
                r.last_used = Some(now);
            }
            r.size = image.size;
            r.pinned = image.pinned;
        }
    }

    /// The images that may go, least recently used first, then first detected first (the
    /// kubelet's `imagesInEvictionOrder`): never one in use, never a pinned one, never one of
    /// `protected` (the runtime's sandbox image, by ID). Ties keep ID order, so the order is
    /// stable.
    pub fn eviction_order(&self, in_use: &HashSet<String>, protected: &HashSet<String>) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = self
            .images
            .iter()
            .filter(|(id, r)| !in_use.contains(*id) && !protected.contains(*id) && !r.pinned)
            .map(|(id, r)| Candidate {
                id: id.clone(),
                size: r.size,
                first_detected: r.first_detected,
                last_used: r.last_used,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.last_used, a.first_detected, &a.id).cmp(&(b.last_used, b.first_detected, &b.id))
        });
        out
    }

    /// Forgets a removed image.
    pub fn forget(&mut self, id: &str) {
        self.images.remove(id);
    }

    #[cfg(test)]
    fn ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.images.keys().map(String::as_str).collect();
        ids.sort();
        ids
    }
}

/// The kubelet's `freeOldImages`: with a maximum age, and once the agent has collected for
/// longer than it (`began`), the candidates unused for longer than the maximum age (never
/// used counts as unused since forever). Returns (to remove now, the rest in order).
pub fn too_old(
    candidates: Vec<Candidate>,
    policy: &Policy,
    now: Instant,
    began: Instant,
) -> (Vec<Candidate>, Vec<Candidate>) {
    let Some(max) = policy.max_age else { return (Vec::new(), candidates) };
    if now.saturating_duration_since(began) <= max {
        return (Vec::new(), candidates);
    }
    candidates
        .into_iter()
        .partition(|c| c.last_used.is_none_or(|used| now.saturating_duration_since(used) > max))
}

/// The kubelet's `freeSpace` choice: the candidates old enough to go (first detected at least
/// the minimum age ago), in order. The caller removes them one by one until it has freed what
/// it wanted (a failed removal frees nothing, and the next is tried).
pub fn removable_for_space(candidates: Vec<Candidate>, policy: &Policy, now: Instant) -> Vec<Candidate> {
    candidates
        .into_iter()
        .filter(|c| now.saturating_duration_since(c.first_detected) >= policy.min_age)
        .collect()
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
