//! `VolumeManager` against a fake API: what is read when and what lands on disk. The fake API
//! and its fixtures are shared with the env tests of `crate::pod` (`pod/env_tests.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapProjection, ConfigMapVolumeSource,
    Container, DownwardAPIProjection, DownwardAPIVolumeFile, EnvFromSource, EnvVar, EnvVarSource, KeyToPath,
    ObjectFieldSelector, Pod, PodSpec, ProjectedVolumeSource, ResourceFieldSelector, Secret, SecretEnvSource,
    SecretKeySelector, SecretVolumeSource, ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

use super::*;

/// An in-memory API server: objects by (namespace, name), tokens numbered per request, every
/// call recorded.
#[derive(Default)]
pub(crate) struct FakeApi {
    config_maps: Mutex<BTreeMap<(String, String), ConfigMap>>,
    secrets: Mutex<BTreeMap<(String, String), Secret>>,
    /// Lifetime of issued tokens, seconds.
    token_ttl: Mutex<i64>,
    pub(crate) fail: Mutex<Option<String>>,
    calls: Mutex<Vec<String>>,
    /// The service variables of namespace `prod`, with links on (the master service's only
    /// when off).
    pub(crate) services: Mutex<Vec<(String, String)>>,
}

impl FakeApi {
    pub(crate) fn new() -> Arc<Self> {
        let f = Self::default();
        *f.token_ttl.lock().expect("lock") = 3607;
        Arc::new(f)
    }

    pub(crate) fn put_cm(&self, name: &str, data: &[(&str, &str)]) {
        let cm = ConfigMap {
            data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        };
        self.config_maps.lock().expect("lock").insert(("prod".into(), name.into()), cm);
    }

    pub(crate) fn put_secret(&self, name: &str, data: &[(&str, &str)]) {
        let s = Secret {
            data: Some(
                data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect(),
            ),
            ..Default::default()
        };
        self.secrets.lock().expect("lock").insert(("prod".into(), name.into()), s);
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }

    fn record(&self, call: String) -> Result<(), String> {
        self.calls.lock().expect("lock").push(call);
        match self.fail.lock().expect("lock").clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl ApiObjects for FakeApi {
    fn config_map<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConfigMap>, String>> {
        Box::pin(async move {
            self.record(format!("cm {ns}/{name}"))?;
            Ok(self.config_maps.lock().expect("lock").get(&(ns.into(), name.into())).cloned())
        })
    }

    fn secret<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<Option<Secret>, String>> {
        Box::pin(async move {
            self.record(format!("secret {ns}/{name}"))?;
            Ok(self.secrets.lock().expect("lock").get(&(ns.into(), name.into())).cloned())
        })
    }

    fn service_account_token<'a>(
        &'a self,
        r: &'a PodTokenRequest,
    ) -> BoxFuture<'a, Result<IssuedToken, String>> {
        Box::pin(async move {
            let call = format!(
                "token {}/{} aud={:?} exp={} pod={}/{}",
                r.namespace, r.service_account, r.audience, r.expiration_seconds, r.pod_name, r.pod_uid
            );
            self.record(call)?;
            let n = self.calls.lock().expect("lock").len();
            let ttl = *self.token_ttl.lock().expect("lock");
            let expires_at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(ttl);
            Ok(IssuedToken { token: format!("jwt-{n}"), expires_at })
        })
    }

    fn service_env<'a>(
        &'a self,
        _namespace: &'a str,
        links: bool,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, String>> {
        Box::pin(async move {
            let all = self.services.lock().expect("lock").clone();
            Ok(all.into_iter().filter(|(k, _)| links || k.starts_with("KUBERNETES_")).collect())
        })
    }
}

pub(crate) fn node(root: &Path) -> NodeConfig {
    NodeConfig {
        root_dir: root.to_path_buf(),
        pod_logs_dir: root.join("logs"),
        container_logs_dir: None,
        node_name: "n1".into(),
        host_ip: Some("10.0.0.1".into()),
        dns: crate::dns::DnsSettings::default(),
        cgroup_driver: Default::default(),
        seccomp_default: false,
    }
}

pub(crate) fn allocatable() -> ResourceList {
    BTreeMap::from([("cpu".into(), Q("4".into())), ("memory".into(), Q("8Gi".into()))])
}

pub(crate) fn cm_volume(name: &str, cm: &str, optional: Option<bool>) -> Volume {
    Volume {
        name: name.into(),
        config_map: Some(ConfigMapVolumeSource { name: cm.into(), optional, ..Default::default() }),
        ..Default::default()
    }
}

pub(crate) fn kube_api_access() -> Volume {
    Volume {
        name: "kube-api-access-abcde".into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o644),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(3607),
                        audience: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.namespace".into(),
                                api_version: None,
                            }),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
        }),
        ..Default::default()
    }
}

pub(crate) fn pod(volumes: Vec<Volume>) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("prod".into());
    p.metadata.uid = Some("uid-1".into());
    p.spec = Some(PodSpec {
        service_account_name: Some("builder".into()),
        volumes: Some(volumes),
        containers: vec![Container { name: "app".into(), ..Default::default() }],
        ..Default::default()
    });
    p
}

pub(crate) fn manager(api: &Arc<FakeApi>, root: &Path, reread: Duration) -> VolumeManager {
    VolumeManager::new(api.clone(), &node(root), allocatable(), reread)
}

pub(crate) fn dir_of(root: &Path, kind: &str, vol: &str) -> PathBuf {
    root.join("pods/uid-1/volumes").join(kind).join(vol)
}

pub(crate) fn read(p: PathBuf) -> String {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn host_paths_follow_the_kubelet_layout() {
    let n = node(Path::new("/var/lib/crilet"));
    let secret =
        Volume { name: "s".into(), secret: Some(SecretVolumeSource::default()), ..Default::default() };
    let downward = Volume { name: "d".into(), downward_api: Some(Default::default()), ..Default::default() };
    let empty = Volume { name: "e".into(), empty_dir: Some(Default::default()), ..Default::default() };
    let base = "/var/lib/crilet/pods/u/volumes";
    let cases = [
        (cm_volume("cfg", "x", None), Some(format!("{base}/kubernetes.io~configmap/cfg"))),
        (secret, Some(format!("{base}/kubernetes.io~secret/s"))),
        (downward, Some(format!("{base}/kubernetes.io~downward-api/d"))),
        (kube_api_access(), Some(format!("{base}/kubernetes.io~projected/kube-api-access-abcde"))),
        (empty, None),
    ];
    for (vol, want) in cases {
        assert_eq!(host_path(&n, "u", &vol), want.map(PathBuf::from), "{}", vol.name);
    }
}

#[tokio::test]
async fn prepare_writes_the_volumes_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let api = FakeApi::new();
    api.put_cm("app-config", &[("app.conf", "v1")]);
    api.put_cm("kube-root-ca.crt", &[("ca.crt", "PEM")]);
    let vm = manager(&api, tmp.path(), Duration::from_secs(30));
    let p = pod(vec![cm_volume("cfg", "app-config", None), kube_api_access()]);
    vm.prepare(&p).await.expect("prepare");
    let cfg = dir_of(tmp.path(), "kubernetes.io~configmap", "cfg");
    let sa = dir_of(tmp.path(), "kubernetes.io~projected", "kube-api-access-abcde");
    assert_eq!(read(cfg.join("app.conf")), "v1");
    assert_eq!(read(sa.join("ca.crt")), "PEM");
    assert_eq!(read(sa.join("namespace")), "prod");
    assert!(read(sa.join("token")).starts_with("jwt-"));
    assert_eq!(
        api.calls(),
        [
            "cm prod/app-config",
            "cm prod/kube-root-ca.crt",
            "token prod/builder aud=None exp=3607 pod=web/uid-1",
        ]
    );
    // Set up already: the next container start reads nothing.
    vm.prepare(&p).await.expect("prepare again");
    assert!(api.calls().is_empty());
    // An agent restarted with the volumes on disk leaves them to resync too.
    let restarted = manager(&api, tmp.path(), Duration::from_secs(30));
    restarted.prepare(&p).await.expect("prepare after restart");
    assert!(api.calls().is_empty());
}

#[tokio::test]
async fn prepare_errors_are_failed_mount_texts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let api = FakeApi::new();
    let vm = manager(&api, tmp.path(), Duration::from_secs(30));
    let cases = [
        (
            "missing configmap",
            vec![cm_volume("cfg", "app-config", None)],
            Err("MountVolume.SetUp failed for volume \"cfg\" : configmap \"app-config\" not found"),
        ),
        (
            "missing optional configmap: an empty volume",
            vec![cm_volume("opt", "app-config", Some(true))],
            Ok(()),
        ),
        (
            "missing root CA",
            vec![kube_api_access()],
            Err(
                "MountVolume.SetUp failed for volume \"kube-api-access-abcde\" : configmap \"kube-root-ca.crt\" not found",
            ),
        ),
    ];
    for (name, vols, want) in cases {
        assert_eq!(vm.prepare(&pod(vols)).await, want.map_err(str::to_string), "{name}");
    }
    assert!(!dir_of(tmp.path(), "kubernetes.io~configmap", "cfg").join("..data").exists());
    assert!(dir_of(tmp.path(), "kubernetes.io~configmap", "opt").join("..data").exists());
    // The API is unreachable: its error, and the volume is tried again next time.
    *api.fail.lock().expect("lock") = Some("connection refused".into());
    let err = vm.prepare(&pod(vec![cm_volume("cfg", "app-config", None)])).await;
    assert_eq!(err, Err("MountVolume.SetUp failed for volume \"cfg\" : connection refused".into()));
    *api.fail.lock().expect("lock") = None;
    api.put_cm("app-config", &[("k", "v")]);
    vm.prepare(&pod(vec![cm_volume("cfg", "app-config", None)])).await.expect("created meanwhile");
    assert_eq!(read(dir_of(tmp.path(), "kubernetes.io~configmap", "cfg").join("k")), "v");
}

#[tokio::test]
async fn resync_rereads_only_when_due() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let api = FakeApi::new();
    api.put_cm("app-config", &[("app.conf", "v1")]);
    api.put_cm("kube-root-ca.crt", &[("ca.crt", "PEM")]);
    let vm = manager(&api, tmp.path(), Duration::from_secs(30));
    let mut p = pod(vec![cm_volume("cfg", "app-config", None), kube_api_access()]);
    vm.prepare(&p).await.expect("prepare");
    api.calls();
    let cfg = dir_of(tmp.path(), "kubernetes.io~configmap", "cfg");
    let version = || std::fs::read_link(cfg.join("..data")).expect("..data");
    let v1 = version();

    api.put_cm("app-config", &[("app.conf", "v2")]);
    vm.backdate_reads("uid-1", Duration::from_secs(10)).await;
    vm.resync(&p).await.expect("resync");
    assert!(api.calls().is_empty(), "not due yet: nothing read");
    assert_eq!(read(cfg.join("app.conf")), "v1");

    vm.backdate_reads("uid-1", Duration::from_secs(25)).await;
    vm.resync(&p).await.expect("resync");
    assert_eq!(api.calls(), ["cm prod/app-config", "cm prod/kube-root-ca.crt"], "token still fresh");
    assert_eq!(read(cfg.join("app.conf")), "v2");
    let v2 = version();
    assert_ne!(v1, v2);

    // Unchanged contents: read again, nothing written.
    vm.backdate_reads("uid-1", Duration::from_secs(30)).await;
    vm.resync(&p).await.expect("resync");
    assert_eq!(api.calls().len(), 2);
    assert_eq!(version(), v2);

    // Downward API files follow the pod's metadata at once, without reading anything.
    let mut info = Volume {
        name: "info".into(),
        downward_api: Some(k8s_openapi::api::core::v1::DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "labels".into(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.labels".into(),
                    api_version: None,
                }),
                ..Default::default()
            }]),
            default_mode: None,
        }),
        ..Default::default()
    };
    p.spec.as_mut().and_then(|s| s.volumes.as_mut()).expect("volumes").push(info.clone());
    vm.prepare(&p).await.expect("prepare the new volume");
    p.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    vm.resync(&p).await.expect("resync");
    assert!(api.calls().is_empty());
    info.name = "info".into();
    assert_eq!(read(dir_of(tmp.path(), "kubernetes.io~downward-api", "info").join("labels")), "app=\"web\"");

    // A configmap deleted later: the error, and the old files stay.
    api.config_maps.lock().expect("lock").remove(&("prod".into(), "app-config".into()));
    vm.backdate_reads("uid-1", Duration::from_secs(30)).await;
    let err = vm.resync(&p).await;
    assert_eq!(
        err,
        Err("MountVolume.SetUp failed for volume \"cfg\" : configmap \"app-config\" not found".into())
    );
    assert_eq!(read(cfg.join("app.conf")), "v2");
}

#[tokio::test]
async fn tokens_are_requested_again_near_expiry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let api = FakeApi::new();
    api.put_cm("kube-root-ca.crt", &[("ca.crt", "PEM")]);
    let vm = manager(&api, tmp.path(), Duration::from_secs(3600));
    let p = pod(vec![kube_api_access()]);
    let token = || read(dir_of(tmp.path(), "kubernetes.io~projected", "kube-api-access-abcde").join("token"));

    // A token that expires as it arrives: due at every resync.
    *api.token_ttl.lock().expect("lock") = 0;
    vm.prepare(&p).await.expect("prepare");
    let first = token();
    api.calls();
    vm.resync(&p).await.expect("resync");
    assert_eq!(api.calls(), ["token prod/builder aud=None exp=3607 pod=web/uid-1"]);
    assert_ne!(token(), first, "the new token is written");

    // A long-lived one is reused.
    *api.token_ttl.lock().expect("lock") = 3607;
    vm.resync(&p).await.expect("resync");
    api.calls();
    let kept = token();
    vm.resync(&p).await.expect("resync");
    assert!(api.calls().is_empty());
    assert_eq!(token(), kept);

    // Once forgotten, a failed request has no token to fall back on.
    vm.forget("uid-1");
    *api.fail.lock().expect("lock") = Some("serviceaccounts \"builder\" not found".into());
    let err = vm.resync(&p).await.expect_err("no token cached, none issued");
    assert!(err.contains("failed to fetch token: serviceaccounts \"builder\" not found"), "{err}");
    assert_eq!(token(), kept, "the files stay");
}

#[tokio::test]
async fn resync_leaves_removed_pods_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let api = FakeApi::new();
    api.put_cm("app-config", &[("a", "1")]);
    let vm = manager(&api, tmp.path(), Duration::from_secs(30));
    let p = pod(vec![cm_volume("cfg", "app-config", None)]);
    vm.resync(&p).await.expect("never started here");
    assert!(!tmp.path().join("pods/uid-1").exists());
    assert!(api.calls().is_empty());
    vm.prepare(&p).await.expect("prepare");
    std::fs::remove_dir_all(tmp.path().join("pods/uid-1")).expect("cleanup");
    vm.forget("uid-1");
    vm.resync(&p).await.expect("removed");
    assert!(!tmp.path().join("pods/uid-1").exists());
}

#[test]
fn sub_paths_follow_the_writers_links_only_inside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("vol");
    std::fs::create_dir(&dir).expect("dir");
    let payload = atomic_writer::Payload::from([(
        "app.conf".to_string(),
        atomic_writer::FileProjection { data: b"x".to_vec(), mode: 0o644 },
    )]);
    atomic_writer::write(&dir, &payload).expect("write");
    std::os::unix::fs::symlink("/etc", dir.join("evil")).expect("link");
    let real = sub_path_in_volume(&dir, "app.conf").expect("through ..data");
    assert_eq!(std::fs::read_to_string(&real).expect("read"), "x");
    assert!(real.starts_with(std::fs::canonicalize(&dir).expect("canonical")));
    assert!(sub_path_in_volume(&dir, "evil").is_err(), "out of the volume");
    assert!(sub_path_in_volume(&dir, "../x").is_err());
    assert_eq!(sub_path_in_volume(&dir, "new").expect("created"), dir.join("new"));
}

// ---- env ----

pub(crate) fn plain(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

pub(crate) fn from(name: &str, source: EnvVarSource) -> EnvVar {
    EnvVar { name: name.into(), value: None, value_from: Some(source) }
}

pub(crate) fn cm_key(cm: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        config_map_key_ref: Some(ConfigMapKeySelector { name: cm.into(), key: key.into(), optional }),
        ..Default::default()
    }
}

pub(crate) fn secret_key(s: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        secret_key_ref: Some(SecretKeySelector { name: s.into(), key: key.into(), optional }),
        ..Default::default()
    }
}

pub(crate) fn res(resource: &str, divisor: Option<&str>) -> EnvVarSource {
    EnvVarSource {
        resource_field_ref: Some(ResourceFieldSelector {
            container_name: None,
            resource: resource.into(),
            divisor: divisor.map(|d| Q(d.into())),
        }),
        ..Default::default()
    }
}

pub(crate) fn env_from_cm(name: &str, prefix: Option<&str>, optional: Option<bool>) -> EnvFromSource {
    EnvFromSource {
        config_map_ref: Some(ConfigMapEnvSource { name: name.into(), optional }),
        prefix: prefix.map(str::to_string),
        secret_ref: None,
    }
}

pub(crate) fn env_from_secret(name: &str, prefix: Option<&str>, optional: Option<bool>) -> EnvFromSource {
    EnvFromSource {
        secret_ref: Some(SecretEnvSource { name: name.into(), optional }),
        prefix: prefix.map(str::to_string),
        config_map_ref: None,
    }
}

pub(crate) fn kv(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The env list, or the `CreateContainerConfigError` text.
pub(crate) type EnvResult = Result<Vec<(String, String)>, &'static str>;

#[tokio::test]
async fn env_objects_are_read_once_each() {
    let api = FakeApi::new();
    api.put_cm("app", &[("A", "1")]);
    let c = Container {
        name: "app".into(),
        env_from: Some(vec![env_from_cm("app", None, None), env_from_secret("gone", None, Some(true))]),
        env: Some(vec![from("A2", cm_key("app", "A", None)), from("B", secret_key("gone", "B", Some(true)))]),
        ..Default::default()
    };
    let sources = env::fetch(&*api, "prod", true, &c, ResourceList::new()).await.expect("fetch");
    assert_eq!(api.calls(), ["cm prod/app", "secret prod/gone"]);
    assert!(sources.secrets.get("gone").is_some_and(Option::is_none));
    assert!(!format!("{sources:?}").contains('1'), "no values in Debug: {sources:?}");
    *api.fail.lock().expect("lock") = Some("etcdserver: request timed out".into());
    let err = env::fetch(&*api, "prod", true, &c, ResourceList::new()).await.expect_err("API down");
    assert_eq!(err, "etcdserver: request timed out");
}

#[test]
fn the_manager_is_shareable() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<VolumeManager>();
    shareable::<KubeObjects>();
}

#[test]
fn sub_paths_never_leave_the_volume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("vol");
    std::fs::create_dir(&root).expect("volume");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("outside");
    std::os::unix::fs::symlink(&outside, root.join("evil")).expect("symlink");
    std::fs::create_dir(root.join("ok")).expect("dir");
    // (name, subPath, Ok(path relative to the volume) or an error)
    let cases = [
        ("existing dir", "ok", Ok("ok")),
        ("created", "new/deeper", Ok("new/deeper")),
        ("through a symlink", "evil", Err(())),
        ("below a symlink", "evil/x", Err(())),
        ("dot dot", "ok/../..", Err(())),
        ("absolute", "/etc", Err(())),
    ];
    for (name, sub, want) in cases {
        let got = sub_path_in(&root, sub);
        match want {
            Ok(rel) => assert_eq!(got.expect(name), root.join(rel), "{name}"),
            Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
        }
    }
    assert!(!outside.join("x").exists(), "nothing was created through the symlink");
}
