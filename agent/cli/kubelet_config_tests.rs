use super::*;

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn translate_yaml(body: &str) -> Result<Translation, KubeletConfigError> {
    let doc: Value = serde_yaml_ng::from_str(&format!("{HEAD}{body}")).expect("test YAML");
    translate("/var/lib/kubelet/config.yaml", &doc)
}

/// `crilet key: value` lines of the settings, sorted, without the healthz default.
fn settings(t: &Translation) -> Vec<String> {
    let mut out: Vec<String> = t
        .settings
        .iter()
        .filter(|(k, v)| {
            !(k.as_str() == Some("metrics-bind-address") && v.as_str() == Some("127.0.0.1:10248"))
        })
        .map(|(k, v)| format!("{}: {}", show(k), show(v)))
        .collect();
    out.sort();
    out
}

/// An ignored field as the tables write it: (field, value, impact).
type IgnoredRow = (String, String, Impact);

fn ignored(t: &Translation) -> Vec<IgnoredRow> {
    t.report.ignored.iter().map(|i| (i.field.clone(), i.value.clone(), i.impact)).collect()
}

fn ig(field: &str, value: &str, impact: Impact) -> IgnoredRow {
    (field.into(), value.into(), impact)
}

#[test]
fn translate_cases() {
    use Impact::{Behaviour, Stricter, Weaker};
    let cases: Vec<(&str, &str, Vec<&str>, Vec<IgnoredRow>)> = vec![
        (
            "fields crilet implements are taken under its flag names; durations stay Go durations",
            "staticPodPath: /etc/kubernetes/manifests\npodLogsDir: /srv/pods\nsyncFrequency: 1m0s\n\
             maxPods: 50\nport: 10250\ncgroupDriver: systemd\nshutdownGracePeriod: 30s\n\
             shutdownGracePeriodCriticalPods: 10s\ncontainerLogMaxSize: 5Mi\ncontainerLogMaxFiles: 3\n\
             containerLogMonitorInterval: 5s\nkubeAPIQPS: 20\nkubeAPIBurst: 40\neventRecordQPS: 0\neventBurst: 7\n\
             tlsCertFile: /pki/kubelet.crt\ntlsPrivateKeyFile: /pki/kubelet.key\nserverTLSBootstrap: true\n\
             imageServiceEndpoint: unix:///run/img.sock\n\
             clusterDNS: [10.96.0.10, fd00::a]\nclusterDomain: cluster.local\n\
             allowedUnsafeSysctls: [kernel.msg*, net.core.somaxconn]\n\
             resolvConf: /run/systemd/resolve/resolv.conf\n\
             authentication:\n  x509:\n    clientCAFile: /pki/ca.crt\n",
            vec![
                "allowed-unsafe-sysctls: [kernel.msg*, net.core.somaxconn]",
                "cgroup-driver: systemd",
                "client-ca-file: /pki/ca.crt",
                "cluster-dns: [10.96.0.10, fd00::a]",
                "cluster-domain: cluster.local",
                "container-log-max-files: 3",
                "container-log-max-size: 5Mi",
                "container-log-monitor-interval: 5s",
                "event-burst: 7",
                "event-qps: 0",
                "image-service-endpoint: unix:///run/img.sock",
                "kube-api-burst: 40",
                "kube-api-qps: 20",
                "max-pods: 50",
                "pod-logs-dir: /srv/pods",
                "pod-manifest-path: /etc/kubernetes/manifests",
                "port: 10250",
                "resolv-conf: /run/systemd/resolve/resolv.conf",
                "rotate-server-certificates: true",
                "shutdown-grace-period-critical-pods: 10s",
                "shutdown-grace-period: 30s",
                "sync-frequency: 1m0s",
                "tls-cert-file: /pki/kubelet.crt",
                "tls-private-key-file: /pki/kubelet.key",
            ],
            vec![],
        ),
        (
            "Go zero values are the kubelet's defaults: nothing taken, nothing ignored",
            "syncFrequency: 0s\nmaxPods: 0\nstaticPodPath: \"\"\nevictionHard: {}\nclusterDNS: []\n\
             memorySwap: {}\ncrashLoopBackOff: {}\nimageMinimumGCAge: 0s\n",
            vec![],
            vec![],
        ),
        (
            "what crilet does anyway is honoured: webhook authn and authz, their cache TTLs, 2m is 2m0s",
            "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n    cacheTTL: 2m0s\n\
             authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 5m\n    cacheUnauthorizedTTL: 30s\n\
             enableServer: true\ncgroupsPerQOS: true\nenforceNodeAllocatable: [pods]\nfailSwapOn: false\n\
             nodeStatusUpdateFrequency: 10s\nnodeLeaseDurationSeconds: 40\n\
             fileCheckFrequency: 20s\n",
            vec![],
            vec![],
        ),
        (
            "fields crilet does not implement are ignored with their value",
            "imageGCHighThresholdPercent: 90\nfailSwapOn: true\ncgroupsPerQOS: false\n\
             enforceNodeAllocatable: [pods, kube-reserved]\nstaticPodURL: http://example.com/pods\n\
             featureGates:\n  NodeSwap: true\nnodeStatusUpdateFrequency: 4s\n",
            vec!["image-gc-high-threshold: 90"],
            vec![
                ig("failSwapOn", "true", Behaviour),
                ig("cgroupsPerQOS", "false", Behaviour),
                ig("enforceNodeAllocatable", "[pods, kube-reserved]", Behaviour),
                ig("staticPodURL", "http://example.com/pods", Behaviour),
                ig("featureGates", "{NodeSwap: true}", Behaviour),
                ig("nodeStatusUpdateFrequency", "4s", Behaviour),
            ],
        ),
        (
            "the eviction fields are taken, their maps in the flags' syntax",
            "evictionHard:\n  memory.available: 200Mi\n  nodefs.available: 10%\n\
             evictionSoft:\n  memory.available: 300Mi\nevictionSoftGracePeriod:\n  memory.available: 1m\n\
             evictionMinimumReclaim:\n  memory.available: 50Mi\nevictionPressureTransitionPeriod: 30s\n\
             evictionMaxPodGracePeriod: 20\nmergeDefaultEvictionSettings: false\n",
            vec![
                "eviction-hard: memory.available<200Mi,nodefs.available<10%",
                "eviction-max-pod-grace-period: 20",
                "eviction-minimum-reclaim: memory.available=50Mi",
                "eviction-pressure-transition-period: 30s",
                "eviction-soft-grace-period: memory.available=1m",
                "eviction-soft: memory.available<300Mi",
            ],
            vec![],
        ),
        (
            "seccompDefault is taken (crilet enforces it)",
            "seccompDefault: true\n",
            vec!["seccomp-default: true"],
            vec![],
        ),
        (
            "seccompDefault: false is taken too",
            "seccompDefault: false\n",
            vec!["seccomp-default: false"],
            vec![],
        ),
        (
            "resolvConf \"\" is a setting of its own (no host resolver), taken",
            "resolvConf: \"\"\nclusterDNS: []\nclusterDomain: \"\"\n",
            vec!["resolv-conf: "],
            vec![],
        ),
        (
            "a zero that is a setting of its own is taken (imageGC 0: always collect)",
            "imageGCHighThresholdPercent: 0\n",
            vec!["image-gc-high-threshold: 0"],
            vec![],
        ),
        (
            "security the file relaxes: crilet is stricter",
            "authentication:\n  anonymous:\n    enabled: true\nauthorization:\n  mode: AlwaysAllow\nreadOnlyPort: 10255\n",
            vec![],
            vec![
                ig("authentication.anonymous.enabled", "true", Stricter),
                ig("authorization.mode", "AlwaysAllow", Stricter),
                ig("readOnlyPort", "10255", Stricter),
            ],
        ),
        (
            "security the file asks for and crilet does not give: weaker",
            "protectKernelDefaults: true\n\
             tlsMinVersion: VersionTLS13\nauthentication:\n  webhook:\n    enabled: false\n",
            vec![],
            vec![
                ig("protectKernelDefaults", "true", Weaker),
                ig("tlsMinVersion", "VersionTLS13", Weaker),
                ig("authentication.webhook.enabled", "false", Weaker),
            ],
        ),
    ];
    for (name, body, want_settings, want_ignored) in cases {
        let t = translate_yaml(body).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(settings(&t), want_settings, "{name}");
        assert_eq!(ignored(&t), want_ignored, "{name}");
        assert_eq!(t.report.taken.len(), want_settings.len(), "{name}: one taken entry per setting");
    }
}

#[test]
fn healthz_cases() {
    let cases = [
        ("absent: the kubelet's default, 127.0.0.1:10248", "", "127.0.0.1:10248"),
        ("port 0 turns it off", "healthzPort: 0\n", ""),
        ("address and port", "healthzBindAddress: 0.0.0.0\nhealthzPort: 10249\n", "0.0.0.0:10249"),
        ("an IPv6 address is bracketed", "healthzBindAddress: \"::1\"\n", "[::1]:10248"),
    ];
    for (name, body, want) in cases {
        let t = translate_yaml(body).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.settings.get("metrics-bind-address").and_then(Value::as_str), Some(want), "{name}");
    }
}

#[test]
fn error_cases() {
    let cases = [
        (
            "a typo at the top is an unknown field, named",
            format!("{HEAD}evictionHardd: {{}}\n"),
            "/var/lib/kubelet/config.yaml: KubeletConfiguration field evictionHardd is unknown (not in \
             kubelet.config.k8s.io/v1beta1; the kubelet refuses it too)",
        ),
        (
            "a nested unknown field is named with its path",
            format!("{HEAD}authentication:\n  webhook:\n    enable: true\n"),
            "/var/lib/kubelet/config.yaml: KubeletConfiguration field authentication.webhook.enable is unknown \
             (not in kubelet.config.k8s.io/v1beta1; the kubelet refuses it too)",
        ),
        (
            "another apiVersion of the kind is refused, named",
            "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n".to_string(),
            "/var/lib/kubelet/config.yaml: KubeletConfiguration apiVersion \"kubelet.config.k8s.io/v1alpha1\" is \
             not supported; crilet reads kubelet.config.k8s.io/v1beta1",
        ),
        (
            "a bad duration names the field",
            format!("{HEAD}syncFrequency: 10 seconds\n"),
            "/var/lib/kubelet/config.yaml: KubeletConfiguration field syncFrequency: \"10 seconds\" is not a \
             duration (e.g. 30s, 1m0s)",
        ),
        (
            "a number where a string belongs",
            format!("{HEAD}maxPods: many\n"),
            "/var/lib/kubelet/config.yaml: KubeletConfiguration field maxPods: invalid type: string \"many\", \
             expected i32",
        ),
    ];
    for (name, yaml, want) in cases {
        let doc: Value = serde_yaml_ng::from_str(&yaml).expect("test YAML");
        let err = translate("/var/lib/kubelet/config.yaml", &doc).expect_err(name);
        assert_eq!(err.to_string(), want, "{name}");
    }
}

#[test]
fn kubeadm_config() {
    let doc: Value =
        serde_yaml_ng::from_str(include_str!("kubelet_config/kubeadm-v1.36.yaml")).expect("fixture");
    assert!(is_kubelet_configuration(&doc));
    let t = translate("config.yaml", &doc).expect("kubeadm's file translates");
    let taken: Vec<(&str, &str)> = t.report.taken.iter().map(|t| (t.field.as_str(), t.flag)).collect();
    assert_eq!(
        taken,
        [
            ("authentication.x509.clientCAFile", "client-ca-file"),
            ("cgroupDriver", "cgroup-driver"),
            ("clusterDNS", "cluster-dns"),
            ("clusterDomain", "cluster-domain"),
            ("containerRuntimeEndpoint", "container-runtime-endpoint"),
            ("healthzBindAddress", "metrics-bind-address"),
            ("healthzPort", "metrics-bind-address"),
            ("resolvConf", "resolv-conf"),
            ("rotateCertificates", "rotate-certificates"),
            ("staticPodPath", "pod-manifest-path"),
        ]
    );
    assert_eq!(ignored(&t), [], "kubeadm's file sets nothing crilet ignores");
    assert_eq!(t.report.weaker().count(), 0, "kubeadm's defaults ask for nothing crilet cannot give");
    assert_eq!(t.settings.get("metrics-bind-address").and_then(Value::as_str), Some("127.0.0.1:10248"));
    assert_eq!(t.settings.get("cgroup-driver").and_then(Value::as_str), Some("systemd"));
    assert_eq!(t.settings.get("rotate-certificates").and_then(Value::as_bool), Some(true));
}

#[test]
fn crilets_own_format_is_not_a_kubelet_configuration() {
    let own: Value = serde_yaml_ng::from_str("pod-manifest-path: /etc/crilet/manifests\n").expect("yaml");
    assert!(!is_kubelet_configuration(&own));
}
