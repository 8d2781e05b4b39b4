//! API-backed volumes and env of cluster pods: `configMap`, `secret`, `downwardAPI` and
//! `projected` (with bound service account tokens) volumes, written by the kubelet's atomic
//! writer under `<root-dir>/pods/<uid>/volumes/kubernetes.io~<kind>/<name>`, and the ConfigMaps
//! and Secrets that `envFrom` / `valueFrom` name.
//!
//! What comes from the API server goes through [`ApiObjects`] ([`KubeObjects`] in the agent, a
//! fake in tests); [`VolumeManager`] reads it, caches it, refreshes tokens and contents and
//! writes the files. Mounting the directories into containers is `pod::start`'s; building the
//! env list is `pod::spec`'s (from the [`EnvSources`] fetched here). Static pods never get here:
//! their manifests cannot name API objects.

pub mod atomic_writer;
pub mod env;
mod kube_objects;
mod manager;
pub mod projection;
pub mod pull_secrets;
pub mod services;
pub mod token;

#[cfg(test)]
pub(crate) mod tests;

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Volume};

pub use self::env::EnvSources;
pub use self::kube_objects::KubeObjects;
pub use self::manager::{DEFAULT_REREAD_PERIOD, VolumeManager};
pub use self::projection::ResourceList;
use crate::node::{NodeConfig, pod_dir};

/// A bound service account token to ask the API server for (a `TokenRequest` on
/// `serviceaccounts/<service_account>/token` bound to the pod).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodTokenRequest {
    pub namespace: String,
    pub service_account: String,
    /// `None`: the API server's own audiences.
    pub audience: Option<String>,
    pub expiration_seconds: i64,
    pub pod_name: String,
    pub pod_uid: String,
}

/// A token the API server issued.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    /// `status.expirationTimestamp`.
    pub expires_at: jiff::Timestamp,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IssuedToken {{ expires_at: {} }}", self.expires_at)
    }
}

/// What the volumes and env of cluster pods read from the API server. Errors are the text the
/// kubelet would show (the API's `Status.message`, such as `serviceaccounts "x" not found`).
pub trait ApiObjects: Send + Sync {
    /// The ConfigMap, `None` when it does not exist.
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConfigMap>, String>>;
    /// The Secret, `None` when it does not exist.
    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, String>>;
    /// A new token for the pod's service account, bound to the pod.
    fn service_account_token<'a>(
        &'a self,
        request: &'a PodTokenRequest,
    ) -> BoxFuture<'a, Result<IssuedToken, String>>;
    /// The service environment variables of a pod in `namespace` ([`services::service_env`]).
    fn service_env<'a>(
        &'a self,
        namespace: &'a str,
        enable_service_links: bool,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, String>>;
}

/// The plugin directory name of an API-backed volume (`kubernetes.io~configmap`, ...).
pub fn plugin_dir(volume: &Volume) -> Option<&'static str> {
    if volume.config_map.is_some() {
        Some("kubernetes.io~configmap")
    } else if volume.secret.is_some() {
        Some("kubernetes.io~secret")
    } else if volume.downward_api.is_some() {
        Some("kubernetes.io~downward-api")
    } else if volume.projected.is_some() {
        Some("kubernetes.io~projected")
    } else {
        None
    }
}

/// Where an API-backed volume of pod `uid` lives on the host (`None` for other volume types):
/// `<root-dir>/pods/<uid>/volumes/kubernetes.io~<kind>/<name>`, as the kubelet lays it out.
pub fn host_path(node: &NodeConfig, uid: &str, volume: &Volume) -> Option<PathBuf> {
    Some(pod_dir(node, uid).join("volumes").join(plugin_dir(volume)?).join(&volume.name))
}

/// Whether the volume at `dir` has been written at least once (its `..data` link exists).
/// Blocks on the disk.
pub fn is_set_up(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(atomic_writer::DATA_DIR)).is_ok_and(|m| m.file_type().is_symlink())
}

/// `subPath` inside an API-backed volume. Its entries are the writer's links into `..data`, so
/// links are followed, as the kubelet does (it evaluates the symlinks, then requires the result
/// to stay inside the volume); a missing path is created as directories, never through a link.
/// Blocks on the disk (`pod::start` calls it on the blocking pool).
pub fn sub_path_in_volume(root: &Path, sub: &str) -> std::io::Result<PathBuf> {
    if Path::new(sub).components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(std::io::Error::other("must be a relative path without \"..\""));
    }
    match std::fs::canonicalize(root.join(sub)) {
        Ok(real) => {
            let base = std::fs::canonicalize(root)?;
            if real.starts_with(&base) {
                Ok(real)
            } else {
                Err(std::io::Error::other(format!(
                    "subpath {:?} not within volume path {:?}",
                    real.display().to_string(),
                    base.display().to_string()
                )))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => sub_path_in(root, sub),
        Err(e) => Err(e),
    }
}

/// `root/sub`, created as directories where missing, never through a symlink: a container can
/// put a symlink into a volume (`ln -s /etc data/x`), and a subPath through it would mount the
/// host's file system (the kubelet's CVE-2017-1002101). `sub` is relative without `..`
/// (validated with the manifest); each component is checked without following links. Blocks on
/// the disk.
pub fn sub_path_in(root: &Path, sub: &str) -> std::io::Result<PathBuf> {
    use std::path::Component;
    let mut cur = root.to_path_buf();
    for comp in Path::new(sub).components() {
        match comp {
            Component::Normal(name) => cur.push(name),
            Component::CurDir => continue,
            _ => return Err(std::io::Error::other("must be a relative path without \"..\"")),
        }
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(std::io::Error::other(format!(
                    "{} is a symlink; refusing to follow it",
                    cur.display()
                )));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&cur)?;
                std::fs::set_permissions(&cur, std::fs::Permissions::from_mode(0o777))?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(cur)
}
