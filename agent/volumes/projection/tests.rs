//! Tables of volume payloads: what each source and mode rule gives.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection, DownwardAPIVolumeSource,
    ObjectFieldSelector, PodSpec, ResourceRequirements, SecretProjection, SecretVolumeSource,
    ServiceAccountTokenProjection, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

use super::*;

/// A table row: name, volume source, the object as read, the files or the error.
type Case<S, O> =
    (&'static str, S, Result<Option<O>, String>, Result<Vec<(String, String, u32)>, &'static str>);

fn files(p: &Payload) -> Vec<(String, String, u32)> {
    p.iter().map(|(k, f)| (k.clone(), String::from_utf8_lossy(&f.data).into_owned(), f.mode)).collect()
}

fn want(v: &[(&str, &str, u32)]) -> Vec<(String, String, u32)> {
    v.iter().map(|(k, d, m)| (k.to_string(), d.to_string(), *m)).collect()
}

fn cm(data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    }
}

fn secret(data: &[(&str, &str)]) -> Secret {
    Secret {
        data: Some(data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    }
}

fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
    KeyToPath { key: key.into(), path: path.into(), mode }
}

fn pod() -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("prod".into());
    p.metadata.uid = Some("u-1".into());
    p.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into()), ("tier".into(), "a\"b".into())]));
    p.metadata.annotations = Some(BTreeMap::from([("note".into(), "line1\nline2".into())]));
    let resources = ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Q("250m".into())),
            ("memory".into(), Q("64Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("cpu".into(), Q("1500m".into()))])),
        ..Default::default()
    };
    p.spec = Some(PodSpec {
        containers: vec![Container { name: "app".into(), resources: Some(resources), ..Default::default() }],
        init_containers: Some(vec![Container { name: "init".into(), ..Default::default() }]),
        ..Default::default()
    });
    p
}

fn node() -> ResourceList {
    BTreeMap::from([
        ("cpu".into(), Q("4".into())),
        ("memory".into(), Q("8Gi".into())),
        ("ephemeral-storage".into(), Q("100G".into())),
    ])
}

fn cm_volume(src: ConfigMapVolumeSource) -> Volume {
    Volume { name: "cfg".into(), config_map: Some(src), ..Default::default() }
}

#[test]
fn config_map_volumes() {
    let app = cm(&[("a.conf", "A"), ("b.conf", "B")]);
    let mut with_binary = app.clone();
    with_binary.binary_data = Some(BTreeMap::from([("blob".into(), ByteString(vec![0, 1]))]));
    let src = |items: Option<Vec<KeyToPath>>, mode: Option<i32>, optional: Option<bool>| {
        ConfigMapVolumeSource { name: "app".into(), items, default_mode: mode, optional }
    };
    // (name, source, the object as read, files or the error)
    let cases: Vec<Case<ConfigMapVolumeSource, ConfigMap>> = vec![
        (
            "all keys, default mode 0644",
            src(None, None, None),
            Ok(Some(app.clone())),
            Ok(want(&[("a.conf", "A", 0o644), ("b.conf", "B", 0o644)])),
        ),
        (
            "defaultMode applies to every key",
            src(None, Some(0o400), None),
            Ok(Some(app.clone())),
            Ok(want(&[("a.conf", "A", 0o400), ("b.conf", "B", 0o400)])),
        ),
        (
            "binaryData too",
            src(None, None, None),
            Ok(Some(with_binary)),
            Ok(vec![
                ("a.conf".into(), "A".into(), 0o644),
                ("b.conf".into(), "B".into(), 0o644),
                ("blob".into(), "\u{0}\u{1}".into(), 0o644),
            ]),
        ),
        (
            "items pick keys, paths and modes",
            src(
                Some(vec![item("a.conf", "etc/app.conf", Some(0o600)), item("b.conf", "b", None)]),
                Some(0o440),
                None,
            ),
            Ok(Some(app.clone())),
            Ok(want(&[("b", "B", 0o440), ("etc/app.conf", "A", 0o600)])),
        ),
        (
            "missing item key",
            src(Some(vec![item("nope", "x", None)]), None, None),
            Ok(Some(app.clone())),
            Err("configmap references non-existent config key: nope"),
        ),
        (
            "missing item key, optional: skipped",
            src(Some(vec![item("nope", "x", None), item("a.conf", "a", None)]), None, Some(true)),
            Ok(Some(app.clone())),
            Ok(want(&[("a", "A", 0o644)])),
        ),
        ("missing object", src(None, None, None), Ok(None), Err("configmap \"app\" not found")),
        ("missing object, optional: empty", src(None, None, Some(true)), Ok(None), Ok(vec![])),
        (
            "read failed: the error, even when optional",
            src(None, None, Some(true)),
            Err("connection refused".into()),
            Err("connection refused"),
        ),
    ];
    for (name, source, object, expected) in cases {
        let fetched = Fetched { config_maps: BTreeMap::from([("app".into(), object)]), ..Default::default() };
        let got = volume_payload(&cm_volume(source), &pod(), &fetched, &node()).expect("an API volume");
        match expected {
            Ok(w) => assert_eq!(files(&got.expect(name)), w, "{name}"),
            Err(w) => assert_eq!(got.expect_err(name), w, "{name}"),
        }
    }
}

#[test]
fn secret_volumes() {
    let s = secret(&[("user", "admin"), ("pass", "hunter2")]);
    let src = |items: Option<Vec<KeyToPath>>, mode: Option<i32>, optional: Option<bool>| SecretVolumeSource {
        secret_name: Some("db".into()),
        items,
        default_mode: mode,
        optional,
    };
    let cases: Vec<Case<SecretVolumeSource, Secret>> = vec![
        (
            "all keys",
            src(None, None, None),
            Ok(Some(s.clone())),
            Ok(want(&[("pass", "hunter2", 0o644), ("user", "admin", 0o644)])),
        ),
        (
            "items with modes",
            src(Some(vec![item("pass", "p/w", Some(0o400))]), Some(0o440), None),
            Ok(Some(s.clone())),
            Ok(want(&[("p/w", "hunter2", 0o400)])),
        ),
        (
            "missing key",
            src(Some(vec![item("token", "t", None)]), None, None),
            Ok(Some(s.clone())),
            Err("references non-existent secret key: token"),
        ),
        (
            "missing key, optional",
            src(Some(vec![item("token", "t", None)]), None, Some(true)),
            Ok(Some(s.clone())),
            Ok(vec![]),
        ),
        ("missing secret", src(None, None, None), Ok(None), Err("secret \"db\" not found")),
        ("missing secret, optional", src(None, None, Some(true)), Ok(None), Ok(vec![])),
    ];
    for (name, source, object, expected) in cases {
        let fetched = Fetched { secrets: BTreeMap::from([("db".into(), object)]), ..Default::default() };
        let vol = Volume { name: "db".into(), secret: Some(source), ..Default::default() };
        let got = volume_payload(&vol, &pod(), &fetched, &node()).expect("an API volume");
        match expected {
            Ok(w) => assert_eq!(files(&got.expect(name)), w, "{name}"),
            Err(w) => assert_eq!(got.expect_err(name), w, "{name}"),
        }
    }
}

fn field(path: &str, field_path: &str) -> DownwardAPIVolumeFile {
    DownwardAPIVolumeFile {
        path: path.into(),
        field_ref: Some(ObjectFieldSelector {
            field_path: field_path.into(),
            api_version: Some("v1".into()),
        }),
        ..Default::default()
    }
}

fn resource(path: &str, container: &str, res: &str, divisor: Option<&str>) -> DownwardAPIVolumeFile {
    DownwardAPIVolumeFile {
        path: path.into(),
        resource_field_ref: Some(ResourceFieldSelector {
            container_name: Some(container.into()),
            resource: res.into(),
            divisor: divisor.map(|d| Q(d.into())),
        }),
        ..Default::default()
    }
}

#[test]
fn downward_api_volumes() {
    let cases: Vec<(&str, Vec<DownwardAPIVolumeFile>, Result<Vec<_>, &str>)> = vec![
        (
            "metadata fields",
            vec![
                field("name", "metadata.name"),
                field("ns", "metadata.namespace"),
                field("uid", "metadata.uid"),
            ],
            Ok(want(&[("name", "web", 0o644), ("ns", "prod", 0o644), ("uid", "u-1", 0o644)])),
        ),
        (
            "labels: sorted key=\"quoted\" lines",
            vec![field("labels", "metadata.labels")],
            Ok(want(&[("labels", "app=\"web\"\ntier=\"a\\\"b\"", 0o644)])),
        ),
        (
            "annotations: escapes",
            vec![field("annotations", "metadata.annotations")],
            Ok(want(&[("annotations", "note=\"line1\\nline2\"", 0o644)])),
        ),
        (
            "one label; a missing one is empty",
            vec![field("app", "metadata.labels['app']"), field("none", "metadata.labels['x']")],
            Ok(want(&[("app", "web", 0o644), ("none", "", 0o644)])),
        ),
        (
            "item mode",
            vec![DownwardAPIVolumeFile { mode: Some(0o400), ..field("n", "metadata.name") }],
            Ok(want(&[("n", "web", 0o400)])),
        ),
        (
            "cpu request in millicores",
            vec![resource("cpu", "app", "requests.cpu", Some("1m"))],
            Ok(want(&[("cpu", "250", 0o644)])),
        ),
        (
            "cpu limit rounds up to cores",
            vec![resource("cpu", "app", "limits.cpu", None)],
            Ok(want(&[("cpu", "2", 0o644)])),
        ),
        (
            "unset memory limit: node allocatable",
            vec![resource("mem", "app", "limits.memory", Some("1Mi"))],
            Ok(want(&[("mem", "8192", 0o644)])),
        ),
        (
            "memory request",
            vec![resource("mem", "app", "requests.memory", Some("1Mi"))],
            Ok(want(&[("mem", "64", 0o644)])),
        ),
        (
            "init container, limits from the node",
            vec![resource("disk", "init", "limits.ephemeral-storage", Some("1G"))],
            Ok(want(&[("disk", "100", 0o644)])),
        ),
        (
            "unset request is 0",
            vec![resource("r", "init", "requests.cpu", None)],
            Ok(want(&[("r", "0", 0o644)])),
        ),
        (
            "unknown container",
            vec![resource("x", "nope", "limits.cpu", None)],
            Err("container nope not found"),
        ),
        (
            "unsupported resource",
            vec![resource("x", "app", "limits.gpu", None)],
            Err("unsupported container resource : limits.gpu"),
        ),
        ("unsupported field", vec![field("x", "spec.nodeName")], Err("unsupported fieldPath: spec.nodeName")),
        (
            "errors are aggregated",
            vec![field("x", "spec.nodeName"), field("y", "status.podIP")],
            Err("[unsupported fieldPath: spec.nodeName, unsupported fieldPath: status.podIP]"),
        ),
    ];
    for (name, items, expected) in cases {
        let vol = Volume {
            name: "info".into(),
            downward_api: Some(DownwardAPIVolumeSource { items: Some(items), default_mode: None }),
            ..Default::default()
        };
        let got = volume_payload(&vol, &pod(), &Fetched::default(), &node()).expect("an API volume");
        match expected {
            Ok(w) => assert_eq!(files(&got.expect(name)), w, "{name}"),
            Err(w) => assert_eq!(got.expect_err(name), w, "{name}"),
        }
    }
}

/// The volume the API server's ServiceAccount admission adds to every pod.
fn kube_api_access(default_mode: Option<i32>) -> Volume {
    Volume {
        name: "kube-api-access-x".into(),
        projected: Some(ProjectedVolumeSource {
            default_mode,
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
                        items: Some(vec![item("ca.crt", "ca.crt", None)]),
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![field("namespace", "metadata.namespace")]),
                    }),
                    ..Default::default()
                },
            ]),
        }),
        ..Default::default()
    }
}

#[test]
fn projected_volumes() {
    let token = |r: Result<&str, &str>| {
        BTreeMap::from([(
            ("kube-api-access-x".to_string(), "token".to_string()),
            r.map(str::to_string).map_err(str::to_string),
        )])
    };
    let root_ca =
        |r: Result<Option<ConfigMap>, String>| BTreeMap::from([("kube-root-ca.crt".to_string(), r)]);
    let ca = cm(&[("ca.crt", "PEM")]);
    let cases: Vec<(&str, Volume, Fetched, Result<Vec<_>, &str>)> = vec![
        (
            "kube-api-access",
            kube_api_access(Some(0o644)),
            Fetched {
                config_maps: root_ca(Ok(Some(ca.clone()))),
                tokens: token(Ok("jwt")),
                ..Default::default()
            },
            Ok(want(&[("ca.crt", "PEM", 0o644), ("namespace", "prod", 0o644), ("token", "jwt", 0o644)])),
        ),
        (
            "defaultMode for all sources",
            kube_api_access(Some(0o440)),
            Fetched {
                config_maps: root_ca(Ok(Some(ca.clone()))),
                tokens: token(Ok("jwt")),
                ..Default::default()
            },
            Ok(want(&[("ca.crt", "PEM", 0o440), ("namespace", "prod", 0o440), ("token", "jwt", 0o440)])),
        ),
        (
            "no defaultMode: 0644",
            kube_api_access(None),
            Fetched {
                config_maps: root_ca(Ok(Some(ca.clone()))),
                tokens: token(Ok("jwt")),
                ..Default::default()
            },
            Ok(want(&[("ca.crt", "PEM", 0o644), ("namespace", "prod", 0o644), ("token", "jwt", 0o644)])),
        ),
        (
            "token failed",
            kube_api_access(None),
            Fetched {
                config_maps: root_ca(Ok(Some(ca.clone()))),
                tokens: token(Err("failed to fetch token: boom")),
                ..Default::default()
            },
            Err("failed to fetch token: boom"),
        ),
        (
            "token and configmap failed: aggregated",
            kube_api_access(None),
            Fetched {
                config_maps: root_ca(Ok(None)),
                tokens: token(Err("failed to fetch token: boom")),
                ..Default::default()
            },
            Err("[failed to fetch token: boom, configmap \"kube-root-ca.crt\" not found]"),
        ),
    ];
    for (name, vol, fetched, expected) in cases {
        let got = volume_payload(&vol, &pod(), &fetched, &node()).expect("an API volume");
        match expected {
            Ok(w) => assert_eq!(files(&got.expect(name)), w, "{name}"),
            Err(w) => assert_eq!(got.expect_err(name), w, "{name}"),
        }
    }
}

#[test]
fn projected_sources_override_in_order_and_keep_item_modes() {
    let vol = Volume {
        name: "all".into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o600),
            sources: Some(vec![
                VolumeProjection {
                    config_map: Some(ConfigMapProjection { name: "c".into(), items: None, optional: None }),
                    ..Default::default()
                },
                VolumeProjection {
                    secret: Some(SecretProjection {
                        name: "s".into(),
                        items: Some(vec![item("k", "shared", Some(0o400))]),
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    secret: Some(SecretProjection { name: "gone".into(), items: None, optional: Some(true) }),
                    ..Default::default()
                },
            ]),
        }),
        ..Default::default()
    };
    let fetched = Fetched {
        config_maps: BTreeMap::from([("c".into(), Ok(Some(cm(&[("shared", "from cm"), ("only", "cm")]))))]),
        secrets: BTreeMap::from([
            ("s".into(), Ok(Some(secret(&[("k", "from secret")])))),
            ("gone".into(), Ok(None)),
        ]),
        ..Default::default()
    };
    let got = volume_payload(&vol, &pod(), &fetched, &node()).expect("an API volume").expect("payload");
    assert_eq!(files(&got), want(&[("only", "cm", 0o600), ("shared", "from secret", 0o400)]));
}

#[test]
fn other_volumes_are_not_projected() {
    let vol = Volume { name: "e".into(), empty_dir: Some(Default::default()), ..Default::default() };
    assert!(volume_payload(&vol, &pod(), &Fetched::default(), &node()).is_none());
}

#[test]
fn go_quoting() {
    let cases = [
        ("plain", "\"plain\""),
        ("a\"b\\c", "\"a\\\"b\\\\c\""),
        ("tab\tnl\ncr\r", "\"tab\\tnl\\ncr\\r\""),
        ("\u{1}\u{7f}", "\"\\x01\\x7f\""),
        ("é ü 日本", "\"é ü 日本\""),
        ("nb\u{a0}sp", "\"nb\\u00a0sp\""),
        ("zw\u{200b}", "\"zw\\u200b\""),
        ("\u{f0000}", "\"\\U000f0000\""),
    ];
    for (input, want) in cases {
        assert_eq!(go_quote(input), want, "{input:?}");
    }
}
