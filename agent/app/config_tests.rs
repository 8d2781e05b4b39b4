use std::time::Duration;

use super::*;

const KUBELET: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// `RunArgs` with `--config` naming a file holding `yaml`, and a node name (no hostname read).
fn args_with(dir: &tempfile::TempDir, yaml: &str) -> RunArgs {
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).expect("write config");
    RunArgs { config: Some(path), node_name: Some("node-a".into()), ..RunArgs::default() }
}

#[test]
fn kubelet_configuration_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = format!(
        "{KUBELET}staticPodPath: /etc/kubernetes/manifests\ncontainerRuntimeEndpoint: unix:///run/k.sock\n\
         cgroupDriver: systemd\nshutdownGracePeriod: 1m0s\nshutdownGracePeriodCriticalPods: 20s\n\
         podLogsDir: /srv/pod-logs\ncontainerLogMaxFiles: 3\nhealthzPort: 10300\nrotateCertificates: true\n\
         clusterDomain: cluster.local\nclusterDNS: [10.96.0.10]\nresolvConf: \"\"\n"
    );
    let s = args_with(&dir, &yaml).resolve().expect("resolves");
    assert_eq!(s.manifest_dir, PathBuf::from("/etc/kubernetes/manifests"));
    assert_eq!(s.runtime_endpoint, "unix:///run/k.sock");
    assert_eq!(s.image_endpoint, "unix:///run/k.sock", "the image endpoint follows the runtime's");
    assert_eq!(s.cgroup_driver, Some(crilet::cgroup::CgroupDriver::Systemd));
    assert_eq!(s.shutdown, Some((Duration::from_secs(60), Duration::from_secs(20))));
    assert_eq!(s.pod_logs_dir, PathBuf::from("/srv/pod-logs"));
    assert_eq!(s.metrics_bind_address.as_deref(), Some("127.0.0.1:10300"));
    let report = s.kubelet_config.expect("a KubeletConfiguration report");
    assert!(report.taken.iter().any(|t| t.field == "rotateCertificates" && t.flag == "rotate-certificates"));
    assert!(report.ignored.is_empty(), "{:?}", report.ignored);
    assert_eq!(s.dns.cluster_dns, ["10.96.0.10".parse::<std::net::IpAddr>().expect("ip")]);
    assert_eq!(s.dns.cluster_domain, "cluster.local");
    assert_eq!(s.dns.resolv_conf, None, "resolvConf \"\": no host resolver");
}

#[test]
fn flags_win_over_a_kubelet_configuration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml =
        format!("{KUBELET}staticPodPath: /etc/kubernetes/manifests\ncgroupDriver: systemd\nhealthzPort: 0\n");
    let mut args = args_with(&dir, &yaml);
    args.pod_manifest_path = Some("/srv/manifests".into());
    args.cgroup_driver = Some("cgroupfs".into());
    let s = args.resolve().expect("resolves");
    assert_eq!(s.manifest_dir, PathBuf::from("/srv/manifests"));
    assert_eq!(s.cgroup_driver, Some(crilet::cgroup::CgroupDriver::Cgroupfs));
    assert_eq!(s.metrics_bind_address, None, "healthzPort 0: no healthz endpoint");
}

#[test]
fn config_file_errors() {
    let cases = [
        ("an unknown kubelet field is named", format!("{KUBELET}maxPod: 10\n"), "field maxPod is unknown"),
        (
            "another apiVersion is named",
            "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n".to_string(),
            "apiVersion \"kubelet.config.k8s.io/v1\" is not supported",
        ),
        (
            "a value crilet cannot take names the file",
            format!("{KUBELET}maxPods: -1\n"),
            "a KubeletConfiguration value crilet cannot take",
        ),
        (
            "crilet's own format still refuses unknown keys",
            "max-pod: 3\n".to_string(),
            "unknown field `max-pod`",
        ),
    ];
    for (name, yaml, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = match args_with(&dir, &yaml).resolve() {
            Ok(_) => panic!("{name}: resolved"),
            Err(e) => format!("{e:#}"),
        };
        assert!(err.contains(want), "{name}: {err}");
        assert!(err.contains("config.yaml"), "{name}: the file is named: {err}");
    }
}

#[test]
fn crilets_own_format_still_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s =
        args_with(&dir, "pod-manifest-path: /srv/m\ncgroup-driver: systemd\n").resolve().expect("resolves");
    assert_eq!(s.manifest_dir, PathBuf::from("/srv/m"));
    assert!(s.kubelet_config.is_none());
    assert_eq!(s.metrics_bind_address, None, "crilet's own format keeps crilet's defaults");
}

#[test]
fn serving_certificate_source_cases() {
    use crilet::cluster::serving_cert::Source;
    let files = Source::Files { cert: "/pki/kubelet.crt".into(), key: "/pki/kubelet.key".into() };
    let cases = [
        ("no TLS settings: self-signed", "", Source::SelfSigned),
        ("serverTLSBootstrap: by CSR", "serverTLSBootstrap: true\n", Source::Csr),
        ("serverTLSBootstrap false is the default", "serverTLSBootstrap: false\n", Source::SelfSigned),
        ("the files", "tlsCertFile: /pki/kubelet.crt\ntlsPrivateKeyFile: /pki/kubelet.key\n", files),
        (
            "serverTLSBootstrap wins over the files, as the kubelet's",
            "tlsCertFile: /pki/kubelet.crt\ntlsPrivateKeyFile: /pki/kubelet.key\nserverTLSBootstrap: true\n",
            Source::Csr,
        ),
    ];
    for (name, fields, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args = args_with(&dir, &format!("{KUBELET}{fields}"));
        args.kubeconfig = Some(dir.path().join("kubeconfig"));
        args.node_ip = Some("10.0.0.5".into());
        let s = args.resolve().expect("resolves");
        assert_eq!(s.cluster.expect("cluster mode").serving, want, "{name}");
    }
}

#[test]
fn dns_flags() {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
    let strings = |l: &[&str]| Some(l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let d = dns_settings(None, None, None).expect("defaults");
    assert_eq!(
        d,
        crilet::dns::DnsSettings::default(),
        "the kubelet's defaults: /etc/resolv.conf, no cluster DNS"
    );
    let d = dns_settings(
        strings(&["10.96.0.10", " fd00::a", ""]),
        Some("cluster.local".into()),
        Some("/r".into()),
    )
    .expect("parses");
    assert_eq!(d.cluster_dns, [ip("10.96.0.10"), ip("fd00::a")]);
    assert_eq!(d.resolv_conf, Some(PathBuf::from("/r")));
    let err = format!("{:#}", dns_settings(strings(&["10.96.0.300"]), None, None).expect_err("not an IP"));
    assert!(err.contains("--cluster-dns \"10.96.0.300\" is not an IP address"), "{err}");
}

#[test]
fn cluster_dns_flag_takes_commas_and_repeats() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }
    let cli =
        Cli::try_parse_from(["crilet", "--cluster-dns", "10.96.0.10,10.96.0.11", "--cluster-dns=fd00::a"])
            .expect("parses");
    assert_eq!(cli.run.cluster_dns, Some(vec!["10.96.0.10".into(), "10.96.0.11".into(), "fd00::a".into()]));
    let own = "cluster-dns: [10.96.0.10]\ncluster-domain: cluster.local\nresolv-conf: /run/r.conf\n";
    let dir = tempfile::tempdir().expect("tempdir");
    let s = args_with(&dir, own).resolve().expect("crilet's own format takes the DNS keys");
    assert_eq!(s.dns.cluster_domain, "cluster.local");
    assert_eq!(s.dns.resolv_conf, Some(PathBuf::from("/run/r.conf")));
}

#[test]
fn allowed_unsafe_sysctls_from_either_format_and_checked_at_start() {
    let allows = |s: &Settings, name: &str| s.sysctls.refusal(name, false, false).is_none();
    let dir = tempfile::tempdir().expect("tempdir");
    let own = args_with(&dir, "allowed-unsafe-sysctls: [kernel.msg*, net.core.somaxconn]\n")
        .resolve()
        .expect("own");
    assert!(allows(&own, "kernel.msgmax") && allows(&own, "net.core.somaxconn"));
    assert!(!allows(&own, "kernel.sem"), "only what is listed");
    let kubelet = args_with(&dir, &format!("{KUBELET}allowedUnsafeSysctls: [kernel.sem]\n"))
        .resolve()
        .expect("kubelet");
    assert!(allows(&kubelet, "kernel.sem") && !allows(&kubelet, "kernel.msgmax"));
    assert!(kubelet.kubelet_config.expect("report").ignored.is_empty(), "taken, not ignored");
    let none = args_with(&dir, "{}\n").resolve().expect("defaults");
    assert!(allows(&none, "kernel.shm_rmid_forced") && !allows(&none, "kernel.msgmax"), "the safe set only");
    let mut flag = args_with(&dir, "{}\n");
    flag.allowed_unsafe_sysctls = Some(vec!["vm.*".into()]);
    let err = format!("{:#}", flag.resolve().err().expect("a node-level pattern is refused"));
    assert!(err.contains(r#""vm.*" is not known to be namespaced"#), "{err}");
}

/// `/configz` gives back, under the kubelet's field names, what a `KubeletConfiguration` set.
#[test]
fn configz_names_the_settings_as_the_kubelet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = format!(
        "{KUBELET}staticPodPath: /etc/kubernetes/manifests\ncgroupDriver: systemd\nshutdownGracePeriod: 1m30s\n\
         shutdownGracePeriodCriticalPods: 500ms\nclusterDomain: cluster.local\nclusterDNS: [10.96.0.10]\nhealthzPort: 10300\n\
         imageGCHighThresholdPercent: 90\nevictionHard: {{memory.available: 100Mi, nodefs.available: 7%}}\n\
         evictionSoft: {{memory.available: 1Gi}}\nevictionSoftGracePeriod: {{memory.available: 1m30s}}\n"
    );
    let s = args_with(&dir, &yaml).resolve().expect("resolves");
    let z = s.configz(crilet::cgroup::CgroupDriver::Systemd);
    let k = &z["kubeletconfig"];
    for (field, want) in [
        ("staticPodPath", serde_json::json!("/etc/kubernetes/manifests")),
        ("cgroupDriver", serde_json::json!("systemd")),
        ("shutdownGracePeriod", serde_json::json!("1m30s")),
        ("shutdownGracePeriodCriticalPods", serde_json::json!("500ms")),
        ("clusterDNS", serde_json::json!(["10.96.0.10"])),
        ("healthzBindAddress", serde_json::json!("127.0.0.1")),
        ("healthzPort", serde_json::json!(10300)),
        ("enableServer", serde_json::json!(false)),
        ("imageGCHighThresholdPercent", serde_json::json!(90)),
        ("imageMinimumGCAge", serde_json::json!("2m0s")),
        ("evictionHard", serde_json::json!({"memory.available": "104857600", "nodefs.available": "7%"})),
        ("evictionSoft", serde_json::json!({"memory.available": "1073741824"})),
        ("evictionSoftGracePeriod", serde_json::json!({"memory.available": "1m30s"})),
        ("evictionPressureTransitionPeriod", serde_json::json!("5m0s")),
    ] {
        assert_eq!(k[field], want, "{field}: {z}");
    }
    for (d, want) in [(0, "0s"), (10_000, "10s"), (60_000, "1m0s"), (3_600_000, "1h0m0s"), (250, "250ms")] {
        assert_eq!(go_duration(Duration::from_millis(d)), want);
    }
}

#[test]
fn image_gc_flags_are_validated_as_the_kubelet_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    // (case, KubeletConfiguration fields, Ok(high, low, min age s, max age s) or the error's flag)
    type Want<'a> = Result<(u8, u8, u64, Option<u64>), &'a str>;
    let cases: [(&str, &str, Want); 6] = [
        ("the kubelet's defaults", "", Ok((85, 80, 120, None))),
        (
            "taken from the file (0s min age is the default, 2m)",
            "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 70\nimageMinimumGCAge: 0s\nimageMaximumGCAge: 1h\n",
            Ok((90, 70, 120, Some(3600))),
        ),
        ("high over 100", "imageGCHighThresholdPercent: 101\n", Err("--image-gc-high-threshold")),
        ("low not under high", "imageGCHighThresholdPercent: 80\n", Err("--image-gc-low-threshold")),
        ("a duration that is not one", "imageMinimumGCAge: soon\n", Err("imageMinimumGCAge")),
        ("max age not over min age", "imageMaximumGCAge: 1m\n", Err("--image-maximum-gc-age")),
    ];
    for (name, fields, want) in cases {
        let got = args_with(&dir, &format!("{KUBELET}{fields}")).resolve();
        match (got, want) {
            (Ok(s), Ok((high, low, min, max))) => {
                let p = s.image_gc;
                assert_eq!(
                    (p.high_percent, p.low_percent, p.min_age.as_secs(), p.max_age.map(|d| d.as_secs())),
                    (high, low, min, max),
                    "{name}"
                );
            }
            (Err(e), Err(flag)) => assert!(format!("{e:#}").contains(flag), "{name}: {e:#}"),
            (Ok(_), Err(flag)) => panic!("{name}: resolved, want an error naming {flag}"),
            (Err(e), Ok(_)) => panic!("{name}: {e:#}"),
        }
    }
}
