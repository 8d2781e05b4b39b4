//! The env lists `spec::resolve_env` builds, with the objects they name read through a
//! `VolumeManager` over the volumes' fake API.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector, Pod, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

use super::spec::{RuntimeValues, resolve_env};
use crate::model::{DesiredPod, PodKey};
use crate::volumes::tests::{
    EnvResult, FakeApi, cm_key, env_from_cm, env_from_secret, from, kv, manager, node, plain, pod, res,
    secret_key,
};
use crate::volumes::{ResourceList, VolumeManager};

fn desired(p: Pod) -> DesiredPod {
    DesiredPod {
        key: PodKey::new("prod", "web"),
        uid: "uid-1".into(),
        pod: Arc::new(p),
        source: crate::model::PodSource::File(PathBuf::new()),
        doc: 0,
        warnings: Vec::new(),
    }
}

#[tokio::test]
async fn env_cases() {
    let api = FakeApi::new();
    api.put_cm("app", &[("MODE", "prod"), ("LEVEL", "3")]);
    api.put_cm("extra", &[("MODE", "override")]);
    api.put_secret("db", &[("PASSWORD", "hunter2"), ("USER", "admin")]);
    let resources = ResourceRequirements {
        requests: Some(BTreeMap::from([("cpu".into(), Q("250m".into()))])),
        limits: Some(BTreeMap::from([("memory".into(), Q("512Mi".into()))])),
        ..Default::default()
    };
    let base = Container { name: "app".into(), resources: Some(resources), ..Default::default() };
    let with = |env_from: Vec<EnvFromSource>, env: Vec<EnvVar>| Container {
        env_from: Some(env_from),
        env: Some(env),
        ..base.clone()
    };
    // (name, container, env or the CreateContainerConfigError text)
    let cases: Vec<(&str, Container, EnvResult)> = vec![
        (
            "envFrom keys sorted, env after",
            with(vec![env_from_cm("app", None, None)], vec![plain("X", "$(MODE)-$(LEVEL)")]),
            Ok(kv(&[("LEVEL", "3"), ("MODE", "prod"), ("X", "prod-3")])),
        ),
        (
            "prefix",
            with(vec![env_from_cm("app", Some("APP_"), None)], vec![]),
            Ok(kv(&[("APP_LEVEL", "3"), ("APP_MODE", "prod")])),
        ),
        (
            "a later source wins; env wins over both",
            with(
                vec![env_from_cm("app", None, None), env_from_cm("extra", None, None)],
                vec![plain("LEVEL", "9")],
            ),
            Ok(kv(&[("MODE", "override"), ("LEVEL", "9")])),
        ),
        (
            "secret envFrom",
            with(vec![env_from_secret("db", Some("DB_"), None)], vec![]),
            Ok(kv(&[("DB_PASSWORD", "hunter2"), ("DB_USER", "admin")])),
        ),
        (
            "missing optional envFrom: skipped",
            with(
                vec![env_from_cm("nope", None, Some(true)), env_from_secret("nope", None, Some(true))],
                vec![],
            ),
            Ok(vec![]),
        ),
        (
            "missing envFrom configmap",
            with(vec![env_from_cm("nope", None, None)], vec![]),
            Err("configmap \"nope\" not found"),
        ),
        (
            "missing envFrom secret",
            with(vec![env_from_secret("nope", None, None)], vec![]),
            Err("secret \"nope\" not found"),
        ),
        (
            "key refs",
            with(
                vec![],
                vec![from("M", cm_key("app", "MODE", None)), from("P", secret_key("db", "PASSWORD", None))],
            ),
            Ok(kv(&[("M", "prod"), ("P", "hunter2")])),
        ),
        (
            "missing key",
            with(vec![], vec![from("M", cm_key("app", "NOPE", None))]),
            Err("couldn't find key NOPE in ConfigMap prod/app"),
        ),
        (
            "missing secret key",
            with(vec![], vec![from("P", secret_key("db", "NOPE", None))]),
            Err("couldn't find key NOPE in Secret prod/db"),
        ),
        (
            "missing configmap",
            with(vec![], vec![from("M", cm_key("gone", "K", None))]),
            Err("configmap \"gone\" not found"),
        ),
        (
            "missing secret",
            with(vec![], vec![from("M", secret_key("gone", "K", None))]),
            Err("secret \"gone\" not found"),
        ),
        (
            "optional and missing: not set, an envFrom value stays",
            with(
                vec![env_from_cm("app", None, None)],
                vec![
                    from("MODE", cm_key("app", "NOPE", Some(true))),
                    from("Q", secret_key("gone", "K", Some(true))),
                ],
            ),
            Ok(kv(&[("LEVEL", "3"), ("MODE", "prod")])),
        ),
        (
            "resourceFieldRef",
            with(
                vec![],
                vec![
                    from("CPU", res("requests.cpu", Some("1m"))),
                    from("MEM", res("limits.memory", Some("1Mi"))),
                    from("CPU_LIMIT", res("limits.cpu", None)),
                ],
            ),
            Ok(kv(&[("CPU", "250"), ("MEM", "512"), ("CPU_LIMIT", "4")])),
        ),
        (
            "a label by fieldRef",
            with(
                vec![],
                vec![from(
                    "APP",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.labels['app']".into(),
                            api_version: None,
                        }),
                        ..Default::default()
                    },
                )],
            ),
            Ok(kv(&[("APP", "web")])),
        ),
    ];
    let mut p = pod(vec![]);
    p.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    let tmp = tempfile::tempdir().expect("tempdir");
    let n = node(tmp.path());
    let vm = manager(&api, tmp.path(), Duration::from_secs(30));
    for (name, c, want) in cases {
        let mut p = p.clone();
        if let Some(s) = p.spec.as_mut() {
            s.containers = vec![c.clone()];
        }
        let sources = vm.env_sources(&p, &c).await.expect(name);
        let got =
            resolve_env(&n, &desired(p), &c, &RuntimeValues::default(), Some(&sources)).map_err(|e| e.reason);
        assert_eq!(got, want.map_err(str::to_string), "{name}");
    }
}

#[test]
fn static_pods_cannot_name_api_objects() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let n = node(tmp.path());
    let cases = [
        (
            "envFrom",
            Container {
                name: "c".into(),
                env_from: Some(vec![env_from_cm("app", None, None)]),
                ..Default::default()
            },
            "couldn't get configMap prod/app, no kubeClient defined",
        ),
        (
            "secretKeyRef",
            Container {
                name: "c".into(),
                env: Some(vec![from("P", secret_key("db", "K", Some(true)))]),
                ..Default::default()
            },
            "couldn't get secret prod/db, no kubeClient defined",
        ),
    ];
    for (name, c, want) in cases {
        let got =
            resolve_env(&n, &desired(pod(vec![])), &c, &RuntimeValues::default(), None).map_err(|e| e.reason);
        assert_eq!(got, Err(want.to_string()), "{name}");
    }
}

#[tokio::test]
async fn service_variables_come_after_the_containers_own_and_expand_in_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let n = node(tmp.path());
    let api = FakeApi::new();
    *api.services.lock().expect("lock") = vec![
        ("DB_SERVICE_HOST".into(), "10.0.0.7".into()),
        ("KUBERNETES_SERVICE_HOST".into(), "10.0.0.1".into()),
    ];
    let vm = VolumeManager::new(api.clone(), &n, ResourceList::new(), Duration::from_secs(60));
    let c = Container {
        name: "app".into(),
        env: Some(vec![
            EnvVar {
                name: "URL".into(),
                value: Some("http://$(DB_SERVICE_HOST):5432".into()),
                ..Default::default()
            },
            EnvVar {
                name: "KUBERNETES_SERVICE_HOST".into(),
                value: Some("mine".into()),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let kv = |v: &[(&str, &str)]| v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    for (links, want) in [
        (
            None,
            kv(&[
                ("URL", "http://10.0.0.7:5432"),
                ("KUBERNETES_SERVICE_HOST", "mine"),
                ("DB_SERVICE_HOST", "10.0.0.7"),
            ]),
        ),
        // enableServiceLinks: false keeps only the master service's variables.
        (Some(false), kv(&[("URL", "http://$(DB_SERVICE_HOST):5432"), ("KUBERNETES_SERVICE_HOST", "mine")])),
    ] {
        let mut p = pod(vec![]);
        if let Some(s) = p.spec.as_mut() {
            s.containers = vec![c.clone()];
            s.enable_service_links = links;
        }
        let sources = vm.env_sources(&p, &c).await.expect("sources");
        let got = resolve_env(&n, &desired(p), &c, &RuntimeValues::default(), Some(&sources)).expect("env");
        assert_eq!(got, want, "enableServiceLinks {links:?}");
    }
}
