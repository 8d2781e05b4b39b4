//! `VolumeManager`: sets up the API-backed volumes of pods, keeps their contents current, and
//! reads the objects their env names.
//!
//! Per pod it caches what the API returned: ConfigMaps and Secrets (read again at most every
//! re-read period) and tokens (requested again at 80 % of their lifetime or after 24 h). A
//! volume is rewritten only when its files would change. Secret volumes are written to disk
//! under `--root-dir`, not to a tmpfs as the kubelet does: they survive a reboot there until the
//! pod is removed, so the root directory must be protected like the node's credentials.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Volume};
use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;

use super::atomic_writer::{self, Payload};
use super::env::{self, EnvSources};
use super::projection::{Fetched, ResourceList, volume_payload};
use super::token::{self, CachedToken};
use super::{ApiObjects, PodTokenRequest, host_path, is_set_up};
use crate::node::{NodeConfig, pod_dir};

/// How often ConfigMaps and Secrets of a running pod's volumes are read again: the kubelet's
/// default sync period (1 min), the delay upstream documents for an update to reach a volume.
pub const DEFAULT_REREAD_PERIOD: Duration = Duration::from_secs(60);

/// The lifetime asked for when a `serviceAccountToken` projection gives none (the API's
/// default; the `kube-api-access-*` volume the API server adds asks for 3607 s itself).
const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// Sets up and refreshes the `configMap`, `secret`, `downwardAPI` and `projected` volumes of
/// pods; shared by every pod worker (`Arc<VolumeManager>`).
pub struct VolumeManager {
    api: Arc<dyn ApiObjects>,
    node: NodeConfig,
    allocatable: RwLock<ResourceList>,
    reread: Duration,
    pods: Mutex<HashMap<String, Arc<AsyncMutex<PodVolumes>>>>,
}

/// What one pod's volumes were last built from.
#[derive(Default)]
struct PodVolumes {
    /// When the ConfigMaps and Secrets were last all read.
    read_at: Option<Instant>,
    config_maps: BTreeMap<String, Option<ConfigMap>>,
    secrets: BTreeMap<String, Option<Secret>>,
    tokens: BTreeMap<PodTokenRequest, CachedToken>,
    /// Volume name → fingerprint of the payload last written (or found on disk).
    written: BTreeMap<String, u64>,
}

/// Which volumes a pass covers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Only volumes never written (neither by this process nor by an earlier agent).
    SetUp,
    /// Every volume, with the objects and tokens that are due read again.
    Resync,
}

fn fingerprint(p: &Payload) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    p.hash(&mut h);
    h.finish()
}

fn is_api_volume(v: &Volume) -> bool {
    super::plugin_dir(v).is_some()
}

impl VolumeManager {
    /// The registry credentials of the pod's `imagePullSecrets` that apply to `image`, in the
    /// order to try them. A secret that cannot be read is skipped with a warning, as the
    /// kubelet does ("Unable to retrieve some image pull secrets").
    pub async fn pull_credentials(&self, pod: &Pod, image: &str) -> Vec<super::pull_secrets::Credential> {
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let names = pod.spec.as_ref().and_then(|s| s.image_pull_secrets.clone()).unwrap_or_default();
        let mut secrets = Vec::new();
        for r in names {
            match self.api.secret(&ns, &r.name).await {
                Ok(Some(s)) => secrets.push(s),
                Ok(None) => {
                    tracing::warn!(secret = %r.name, "image pull secret not found; pulling without it")
                }
                Err(e) => {
                    tracing::warn!(secret = %r.name, error = %e, "image pull secret unreadable; pulling without it")
                }
            }
        }
        super::pull_secrets::credentials(&secrets, image)
    }

    /// `allocatable` is the node's (the default of unset limits in the downward API); `reread`
    /// how often a running pod's ConfigMaps and Secrets are read again ([`DEFAULT_REREAD_PERIOD`]).
    pub fn new(
        api: Arc<dyn ApiObjects>,
        node: &NodeConfig,
        allocatable: ResourceList,
        reread: Duration,
    ) -> Self {
        Self {
            api,
            node: node.clone(),
            allocatable: RwLock::new(allocatable),
            reread,
            pods: Mutex::new(HashMap::new()),
        }
    }

    /// Replaces the node's allocatable (when the node's capacity changes).
    pub fn set_allocatable(&self, allocatable: ResourceList) {
        if let Ok(mut a) = self.allocatable.write() {
            *a = allocatable;
        }
    }

    fn allocatable(&self) -> ResourceList {
        self.allocatable.read().map(|a| a.clone()).unwrap_or_default()
    }

    /// Where the volume lives on the host (see [`super::host_path`]).
    pub fn host_path(node: &NodeConfig, uid: &str, volume: &Volume) -> Option<PathBuf> {
        host_path(node, uid, volume)
    }

    fn state(&self, uid: &str) -> Arc<AsyncMutex<PodVolumes>> {
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        pods.entry(uid.to_string()).or_default().clone()
    }

    /// Writes every API-backed volume of `pod` that has not been written yet (the kubelet's
    /// volume set-up before a pod's sandbox and containers). Volumes already there, from this
    /// agent or an earlier one, are left to [`Self::resync`]. The error is the first failed
    /// volume's `FailedMount` text: `MountVolume.SetUp failed for volume "cfg" : configmap
    /// "app-config" not found`.
    pub async fn prepare(&self, pod: &Pod) -> Result<(), String> {
        self.pass(pod, Pass::SetUp).await
    }

    /// Brings the volumes of a running pod up to date: requests tokens that are due, reads
    /// ConfigMaps and Secrets again when the re-read period has passed, rebuilds the downward
    /// API files from `pod`, and rewrites what changed. Cheap when nothing is due (no API call,
    /// no file read). A pod whose directory does not exist (not started here, or removed) is
    /// left alone. Errors as for [`Self::prepare`]; a volume that fails keeps its old files.
    pub async fn resync(&self, pod: &Pod) -> Result<(), String> {
        self.pass(pod, Pass::Resync).await
    }

    /// Drops what is cached for a removed pod.
    pub fn forget(&self, uid: &str) {
        self.pods.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
    }

    /// Reads the ConfigMaps and Secrets `container`'s env names, for `pod::spec::resolve_env`.
    /// The error is the kubelet's `CreateContainerConfigError` text.
    pub async fn env_sources(&self, pod: &Pod, container: &Container) -> Result<EnvSources, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let links = pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true);
        env::fetch(&*self.api, namespace, links, container, self.allocatable()).await
    }

    /// Tests: makes the last read of a pod's objects `by` older (time passing, without sleeps).
    #[cfg(test)]
    pub(crate) async fn backdate_reads(&self, uid: &str, by: Duration) {
        let state = self.state(uid);
        let mut state = state.lock().await;
        state.read_at = state.read_at.and_then(|t| t.checked_sub(by));
    }

    async fn pass(&self, pod: &Pod, pass: Pass) -> Result<(), String> {
        let uid =
            pod.metadata.uid.as_deref().filter(|u| !u.is_empty()).ok_or("the pod has no metadata.uid")?;
        let volumes: Vec<&Volume> = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter(|v| is_api_volume(v))
            .collect();
        if volumes.is_empty() {
            return Ok(());
        }
        let pod_dir = pod_dir(&self.node, uid);
        if pass == Pass::Resync {
            let dir = pod_dir.clone();
            if !crate::blocking(move || Ok(dir.is_dir())).await.map_err(|e| e.to_string())? {
                return Ok(());
            }
        }
        // One pass at a time per pod: the atomic writer must not race itself on a directory.
        let state = self.state(uid);
        let mut state = state.lock().await;
        let todo: Vec<&Volume> = match pass {
            Pass::Resync => volumes,
            Pass::SetUp => {
                let unwritten: Vec<&Volume> =
                    volumes.into_iter().filter(|v| !state.written.contains_key(&v.name)).collect();
                if unwritten.is_empty() {
                    return Ok(());
                }
                // Which of them an earlier agent wrote: one look at the disk for all.
                let dirs: Vec<Option<PathBuf>> =
                    unwritten.iter().map(|v| host_path(&self.node, uid, v)).collect();
                let set_up = crate::blocking(move || {
                    Ok(dirs.iter().map(|d| d.as_deref().is_some_and(is_set_up)).collect::<Vec<_>>())
                })
                .await
                .map_err(|e| e.to_string())?;
                unwritten.into_iter().zip(set_up).filter(|(_, done)| !done).map(|(v, _)| v).collect()
            }
        };
        if todo.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let reread =
            pass == Pass::SetUp || state.read_at.is_none_or(|t| now.duration_since(t) >= self.reread);
        let fetched = self.fetch(pod, &todo, &mut state, reread).await;
        let all_read =
            fetched.config_maps.values().all(Result::is_ok) && fetched.secrets.values().all(Result::is_ok);
        if reread && all_read {
            state.read_at = Some(now);
        }
        let allocatable = self.allocatable();
        // Each volume in order: its payload's error, or what to write (none: written as it is).
        let mut jobs = Vec::new();
        for vol in todo {
            let Some(payload) = volume_payload(vol, pod, &fetched, &allocatable) else { continue };
            let job = payload.and_then(|payload| {
                let fingerprint = fingerprint(&payload);
                if state.written.get(&vol.name) == Some(&fingerprint) {
                    return Ok(None);
                }
                let dir = host_path(&self.node, uid, vol).ok_or("not an API-backed volume")?;
                Ok(Some(VolumeWrite { dir, payload, fingerprint }))
            });
            jobs.push((vol.name.clone(), job));
        }
        let set_up = pass == Pass::SetUp;
        // The writes of the pass together, on the blocking pool.
        let done = if jobs.iter().any(|(_, j)| matches!(j, Ok(Some(_)))) {
            crate::blocking(move || {
                let write = |job: Result<Option<VolumeWrite>, String>| match job? {
                    Some(w) => write_volume(&pod_dir, set_up, &w).map(|()| Some(w.fingerprint)),
                    None => Ok(None),
                };
                Ok(jobs.into_iter().map(|(name, job)| (name, write(job))).collect::<Vec<_>>())
            })
            .await
            .map_err(|e| e.to_string())?
        } else {
            jobs.into_iter().map(|(name, job)| (name, job.map(|_| None))).collect()
        };
        let mut errors = Vec::new();
        for (name, written) in done {
            match written {
                Ok(Some(fingerprint)) => {
                    state.written.insert(name, fingerprint);
                }
                Ok(None) => {}
                Err(e) => errors.push(format!("MountVolume.SetUp failed for volume {name:?} : {e}")),
            }
        }
        for e in errors.iter().skip(1) {
            tracing::warn!(pod_uid = %uid, error = %e, "volume set-up failed");
        }
        errors.into_iter().next().map_or(Ok(()), Err)
    }

    /// The objects and tokens `volumes` need: from the cache, or read when `reread` (or never
    /// read). A failed read leaves the cache as it was.
    async fn fetch(&self, pod: &Pod, volumes: &[&Volume], state: &mut PodVolumes, reread: bool) -> Fetched {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut cms = BTreeSet::new();
        let mut secrets = BTreeSet::new();
        let mut tokens = Vec::new();
        for v in volumes {
            cms.extend(v.config_map.as_ref().map(|c| c.name.clone()));
            secrets.extend(v.secret.as_ref().map(|s| s.secret_name.clone().unwrap_or_default()));
            for src in v.projected.as_ref().and_then(|p| p.sources.as_ref()).into_iter().flatten() {
                cms.extend(src.config_map.as_ref().map(|c| c.name.clone()));
                secrets.extend(src.secret.as_ref().map(|s| s.name.clone()));
                if let Some(t) = &src.service_account_token {
                    tokens.push((v.name.clone(), t.path.clone(), self.token_request(pod, t)));
                }
            }
        }
        let mut out = Fetched::default();
        for name in cms {
            let got = match state.config_maps.get(&name) {
                Some(cached) if !reread => Ok(cached.clone()),
                _ => self.api.config_map(namespace, &name).await,
            };
            if let Ok(cm) = &got {
                state.config_maps.insert(name.clone(), cm.clone());
            }
            out.config_maps.insert(name, got);
        }
        for name in secrets {
            let got = match state.secrets.get(&name) {
                Some(cached) if !reread => Ok(cached.clone()),
                _ => self.api.secret(namespace, &name).await,
            };
            if let Ok(s) = &got {
                state.secrets.insert(name.clone(), s.clone());
            }
            out.secrets.insert(name, got);
        }
        for (volume, path, request) in tokens {
            let token = self.token(state, request).await;
            out.tokens.insert((volume, path), token);
        }
        out
    }

    fn token_request(
        &self,
        pod: &Pod,
        t: &k8s_openapi::api::core::v1::ServiceAccountTokenProjection,
    ) -> PodTokenRequest {
        let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).filter(|s| !s.is_empty());
        PodTokenRequest {
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            service_account: sa.unwrap_or_else(|| "default".into()),
            audience: t.audience.clone().filter(|a| !a.is_empty()),
            expiration_seconds: t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }

    /// The cached token while it is fresh, else a new one (the cached one if the request fails
    /// and it is still valid).
    async fn token(&self, state: &mut PodVolumes, request: PodTokenRequest) -> Result<String, String> {
        let now = jiff::Timestamp::now();
        let cached = state.tokens.get(&request);
        if let Some(t) = cached.filter(|t| !token::needs_refresh(t, now, token::jitter())) {
            return Ok(t.issued.token.clone());
        }
        match self.api.service_account_token(&request).await {
            Ok(issued) => {
                let token = issued.token.clone();
                state.tokens.insert(request, CachedToken { issued, received_at: jiff::Timestamp::now() });
                Ok(token)
            }
            Err(e) => {
                let cached = state.tokens.get(&request);
                if cached.is_some_and(|t| !token::expired(t, now)) {
                    tracing::warn!(service_account = %request.service_account, error = %e, "token refresh failed; the current token stays");
                }
                token::after_failed_refresh(cached, now, &e)
            }
        }
    }
}

/// One volume's files to write into `dir`, and their fingerprint.
struct VolumeWrite {
    dir: PathBuf,
    payload: Payload,
    fingerprint: u64,
}

/// Writes one volume's payload, creating its directory. The pod's directory is created only on
/// set-up: a late resync must not bring a removed pod's directory back. Blocks on the disk.
fn write_volume(pod_dir: &Path, set_up: bool, w: &VolumeWrite) -> Result<(), String> {
    if !pod_dir.is_dir() {
        if !set_up {
            return Err(format!("{} is gone", pod_dir.display()));
        }
        std::fs::create_dir_all(pod_dir)
            .and_then(|()| std::fs::set_permissions(pod_dir, std::fs::Permissions::from_mode(0o750)))
            .map_err(|e| format!("creating {}: {e}", pod_dir.display()))?;
    }
    if !w.dir.is_dir() {
        // World-writable like the kubelet's emptyDir wrapper of these volumes, so non-root
        // containers can traverse it; the pod directory (0750) keeps other host users out.
        std::fs::create_dir_all(&w.dir)
            .and_then(|()| std::fs::set_permissions(&w.dir, std::fs::Permissions::from_mode(0o777)))
            .map_err(|e| format!("creating {}: {e}", w.dir.display()))?;
    }
    atomic_writer::write(&w.dir, &w.payload).map(|_| ()).map_err(|e| crate::error_chain(&e))
}
