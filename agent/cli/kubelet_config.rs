//! The kubelet's own config file as `--config`: a `KubeletConfiguration`
//! (`kubelet.config.k8s.io/v1beta1`, kubeadm's `/var/lib/kubelet/config.yaml`) translated into
//! crilet's settings. Every key the file sets gets one verdict (`rule`): crilet **takes** it under
//! its own flag name, crilet **already behaves** that way (the value is what crilet does anyway,
//! or a zero that means the kubelet's default), or it is **ignored** and reported — never dropped
//! silently. The decoding is strict, as the kubelet's: an unknown key is an error naming it.
//!
//! Ignored security fields are sorted by which way they differ (see [`Impact`]): when the file
//! asks for *less* than crilet enforces (anonymous requests, `AlwaysAllow`, a read-only port),
//! crilet is stricter and says so (a warning). When it asks for protection crilet does not give
//! (`protectKernelDefaults`, a TLS policy), the
//! node would be weaker than its operator asked: `crilet preflight` FAILs and `crilet run`
//! refuses the file, since DESIGN.md has a security field refused or reported, never accepted
//! silently, and a weaker node that only logs it is accepting it.
//!
//! This module only decides; `agent/app/config.rs` reads the file and merges the settings under
//! the flags, `preflight` prints the report and `run` logs it.

mod types;

use std::fmt::Write as _;

use serde_yaml_ng::{Mapping, Value};
pub use types::KubeletConfiguration;

/// The only `apiVersion` of `kind: KubeletConfiguration` crilet reads.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The `kind` that marks a `--config` file as the kubelet's.
pub const KIND: &str = "KubeletConfiguration";

/// A KubeletConfiguration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KubeletConfigError {
    #[error("{file}: {KIND} apiVersion {api_version:?} is not supported; crilet reads {API_VERSION}")]
    ApiVersion { file: String, api_version: String },
    #[error("{file}: {KIND} field {field} is unknown (not in {API_VERSION}; the kubelet refuses it too)")]
    UnknownField { file: String, field: String },
    #[error("{file}: {KIND} field {field}: {message}")]
    Invalid { file: String, field: String, message: String },
}

/// How much an ignored field matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impact {
    /// A kubelet feature crilet does not have: the node behaves as crilet does without it.
    Behaviour,
    /// Security, and crilet is stricter than the file asks (it refuses anonymous requests, it
    /// authorizes by SubjectAccessReview, it serves nothing unauthenticated).
    Stricter,
    /// Security, and the node would be weaker than the file asks: refused.
    Weaker,
}

/// A field crilet takes, under its own flag's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The kubelet's field path (`staticPodPath`, `authentication.x509.clientCAFile`).
    pub field: String,
    /// crilet's flag, without `--` (`pod-manifest-path`).
    pub flag: &'static str,
}

/// A field the file sets that crilet does not honour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// The kubelet's field path (`evictionHard`, `authorization.mode`).
    pub field: String,
    /// The value as the file has it, on one line.
    pub value: String,
    pub impact: Impact,
    /// What the node does instead.
    pub why: &'static str,
}

/// What crilet makes of a KubeletConfiguration: what it takes and what it ignores.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub taken: Vec<Taken>,
    pub ignored: Vec<Ignored>,
}

impl Report {
    /// The ignored fields that would leave the node weaker than the file asks (`run` refuses).
    pub fn weaker(&self) -> impl Iterator<Item = &Ignored> {
        self.ignored.iter().filter(|i| i.impact == Impact::Weaker)
    }
}

/// A KubeletConfiguration translated: crilet's own config keys (kebab-case, as its own format
/// writes them) and the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Translation {
    pub settings: Mapping,
    pub report: Report,
}

/// True when the document is a `kind: KubeletConfiguration` (of any apiVersion).
pub fn is_kubelet_configuration(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some(KIND)
}

/// Translates a `kind: KubeletConfiguration` document read from `file` (named in errors).
pub fn translate(file: &str, doc: &Value) -> Result<Translation, KubeletConfigError> {
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    if api_version != API_VERSION {
        return Err(KubeletConfigError::ApiVersion { file: file.into(), api_version: api_version.into() });
    }
    decode(file, doc)?;
    let mut leaves = Vec::new();
    walk("", doc, &mut leaves);
    let mut out = Translation::default();
    let mut healthz: (Option<&Value>, Option<&Value>) = (None, None);
    for (field, value) in leaves {
        if is_zero(value) && !ZERO_MEANS_SOMETHING.contains(&field.as_str()) {
            continue; // the kubelet's default, as a Go zero value (kubeadm writes `0s` for many)
        }
        match rule(&field, value) {
            Rule::Take(flag) => {
                out.settings.insert(flag.into(), value.clone());
                out.report.taken.push(Taken { field, flag });
            }
            Rule::TakeMap(flag, sep) => {
                // `{memory.available: 100Mi}` is the flag's `memory.available<100Mi`.
                let entries: Vec<String> = value
                    .as_mapping()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{}{sep}{}", show(k), show(v)))
                    .collect();
                out.settings.insert(flag.into(), Value::String(entries.join(",")));
                out.report.taken.push(Taken { field, flag });
            }
            Rule::Healthz => {
                match field.as_str() {
                    "healthzBindAddress" => healthz.0 = Some(value),
                    _ => healthz.1 = Some(value),
                }
                out.report.taken.push(Taken { field, flag: "metrics-bind-address" });
            }
            Rule::Same(values, _, _) if values.iter().any(|v| same(value, v)) => {}
            Rule::Same(_, impact, why) | Rule::Ignore(impact, why) => {
                out.report.ignored.push(Ignored { field, value: show(value), impact, why });
            }
            Rule::NoEffect => {}
        }
    }
    out.settings.insert("metrics-bind-address".into(), healthz_address(healthz).into());
    Ok(out)
}

/// The kubelet's healthz endpoint (`healthzBindAddress:healthzPort`, 127.0.0.1:10248 unless the
/// file says otherwise; port 0 turns it off) is crilet's `--metrics-bind-address`, which serves
/// `/healthz` (and `/metrics`) over plain HTTP: kubeadm waits on that address.
fn healthz_address((address, port): (Option<&Value>, Option<&Value>)) -> String {
    let port = port.and_then(Value::as_i64).unwrap_or(10248);
    if port == 0 {
        return String::new();
    }
    let address = address.and_then(Value::as_str).unwrap_or("127.0.0.1");
    if address.contains(':') { format!("[{address}]:{port}") } else { format!("{address}:{port}") }
}

/// Strict decoding into the v1beta1 type: unknown keys and ill-typed values are errors naming
/// the field's path.
fn decode(file: &str, doc: &Value) -> Result<(), KubeletConfigError> {
    let Err(e) = serde_path_to_error::deserialize::<_, KubeletConfiguration>(doc.clone()) else {
        return Ok(());
    };
    let path = e.path().to_string();
    let message = e.into_inner().to_string();
    // serde lists every expected field after the unknown one; the name is what helps.
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or_default();
        // The path already ends with the unknown key (serde_path_to_error records it).
        let field = match path.as_str() {
            "." | "" => name.to_string(),
            p if p == name || p.ends_with(&format!(".{name}")) => path.clone(),
            p => format!("{p}.{name}"),
        };
        return Err(KubeletConfigError::UnknownField { file: file.into(), field });
    }
    Err(KubeletConfigError::Invalid { file: file.into(), field: path, message })
}

/// The structs of v1beta1 whose keys are fields of their own; every other value (maps such as
/// `evictionHard`, lists) is one leaf.
const STRUCTS: &[&str] = &[
    "authentication",
    "authentication.x509",
    "authentication.webhook",
    "authentication.anonymous",
    "authorization",
    "authorization.webhook",
    "memorySwap",
    "crashLoopBackOff",
    "logging",
    "logging.options",
    "logging.options.text",
    "logging.options.json",
    "tracing",
    "userNamespaces",
];

/// The leaves the document sets, with their dotted paths, in the file's order.
fn walk<'a>(prefix: &str, value: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    let Some(map) = value.as_mapping() else { return };
    for (key, value) in map {
        let Some(key) = key.as_str() else { continue };
        let path = if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") };
        if path == "apiVersion" || path == "kind" {
            continue;
        }
        if STRUCTS.contains(&path.as_str()) && value.is_mapping() {
            walk(&path, value, out);
        } else {
            out.push((path, value));
        }
    }
}

/// Fields whose zero is not the kubelet's default but a setting of its own (`healthzPort: 0` is
/// off, `kubeAPIQPS: 0` no limit, `imageGCHighThresholdPercent: 0` collect always, `resolvConf:
/// ""` no host resolver).
const ZERO_MEANS_SOMETHING: &[&str] = &[
    "eventRecordQPS",
    "kubeAPIQPS",
    "containerLogMaxFiles",
    "healthzPort",
    "registryPullQPS",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "oomScoreAdj",
    "podPidsLimit",
    "nodeStatusMaxImages",
    "containerLogMaxWorkers",
    "maxParallelImagePulls",
    "memoryThrottlingFactor",
    "userNamespaces.idsPerPod",
    "resolvConf",
];

/// A Go zero value: null, `""`, `0`, `0s`, `[]`, `{}`. (`false` is not: many of the kubelet's
/// booleans are pointers whose `false` is a choice; the rules name those that default to it.)
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty() || s == "0" || duration(s).is_some_and(|d| d.is_zero()),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    }
}

fn duration(s: &str) -> Option<std::time::Duration> {
    crate::logrotate::plan::parse_go_duration(s)
}

/// True when `v` is `want`: the same text, or the same duration (`2m` is `2m0s`).
fn same(v: &Value, want: &str) -> bool {
    let text = show(v);
    text == want || matches!((duration(&text), duration(want)), (Some(a), Some(b)) if a == b)
}

/// A value on one line: scalars as written, lists as `[a, b]`, maps as `{k: v, k2: v2}`.
fn show(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(s) => format!("[{}]", s.iter().map(show).collect::<Vec<_>>().join(", ")),
        Value::Mapping(m) => {
            let mut out = String::from("{");
            for (i, (k, v)) in m.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(out, "{sep}{}: {}", show(k), show(v));
            }
            out.push('}');
            out
        }
        Value::Tagged(t) => show(&t.value),
    }
}

/// One field's verdict.
enum Rule {
    /// crilet takes it as this setting (its flag's name).
    Take(&'static str),
    /// `healthzBindAddress` / `healthzPort`: together, `--metrics-bind-address`.
    Healthz,
    /// Taken under this flag's name, a map written as the flag's `key<sep>value,...`.
    TakeMap(&'static str, char),
    /// crilet behaves as any of these values; any other is ignored.
    Same(&'static [&'static str], Impact, &'static str),
    /// Not implemented: any value set is ignored.
    Ignore(Impact, &'static str),
    /// Has no effect on any node (deprecated upstream), or crilet meets every value of it.
    NoEffect,
}

const NOT_IMPLEMENTED: &str = "not implemented by crilet";
const NO_HANDLER: &str = "crilet's kubelet API does not serve this endpoint";
const NUMA: &str = "crilet has no CPU, memory or topology manager: containers share every CPU and NUMA node";
const RESERVED: &str =
    "node allocatable reservations are not implemented: the Node's allocatable is its capacity";

/// The verdict on `field` set to `value`. Any field not named here is ignored as not
/// implemented, so a field added to v1beta1 later is reported, not dropped.
fn rule(field: &str, value: &Value) -> Rule {
    use Impact::{Behaviour, Stricter, Weaker};
    match field {
        "staticPodPath" => Rule::Take("pod-manifest-path"),
        "podLogsDir" => Rule::Take("pod-logs-dir"),
        "syncFrequency" => Rule::Take("sync-frequency"),
        "port" => Rule::Take("port"),
        "tlsCertFile" => Rule::Take("tls-cert-file"),
        "tlsPrivateKeyFile" => Rule::Take("tls-private-key-file"),
        "authentication.x509.clientCAFile" => Rule::Take("client-ca-file"),
        "eventRecordQPS" => Rule::Take("event-qps"),
        "eventBurst" => Rule::Take("event-burst"),
        "kubeAPIQPS" => Rule::Take("kube-api-qps"),
        "kubeAPIBurst" => Rule::Take("kube-api-burst"),
        "maxPods" => Rule::Take("max-pods"),
        "cgroupDriver" => Rule::Take("cgroup-driver"),
        "containerLogMaxSize" => Rule::Take("container-log-max-size"),
        "containerLogMaxFiles" => Rule::Take("container-log-max-files"),
        "containerLogMonitorInterval" => Rule::Take("container-log-monitor-interval"),
        "shutdownGracePeriod" => Rule::Take("shutdown-grace-period"),
        "shutdownGracePeriodCriticalPods" => Rule::Take("shutdown-grace-period-critical-pods"),
        "containerRuntimeEndpoint" => Rule::Take("container-runtime-endpoint"),
        "imageServiceEndpoint" => Rule::Take("image-service-endpoint"),
        "healthzBindAddress" | "healthzPort" => Rule::Healthz,

        // The kubelet API's authentication and authorization (kubelet_api::auth): client
        // certificates, bearer tokens by TokenReview (answers cached 2m), no anonymous requests,
        // every request authorized by SubjectAccessReview (5m / 30s caches).
        "enableServer" => {
            Rule::Same(&["true"], Behaviour, "crilet serves the kubelet API whenever it joins a cluster")
        }
        "authentication.anonymous.enabled" => {
            Rule::Same(&["false"], Stricter, "crilet refuses anonymous requests to the kubelet API (401)")
        }
        "authentication.webhook.enabled" => Rule::Same(
            &["true"],
            Weaker,
            "crilet always authenticates bearer tokens by TokenReview; it cannot refuse them",
        ),
        "authentication.webhook.cacheTTL" => {
            Rule::Same(&["2m"], Behaviour, "crilet caches a token's review for 2m")
        }
        "authorization.mode" => Rule::Same(
            &["Webhook"],
            Stricter,
            "crilet authorizes every kubelet API request by SubjectAccessReview (mode Webhook)",
        ),
        "authorization.webhook.cacheAuthorizedTTL" => {
            Rule::Same(&["5m"], Behaviour, "crilet caches an allowed review for 5m")
        }
        "authorization.webhook.cacheUnauthorizedTTL" => {
            Rule::Same(&["30s"], Behaviour, "crilet caches a denied review for 30s")
        }
        "readOnlyPort" => {
            Rule::Ignore(Stricter, "crilet has no read-only port: nothing is served without authentication")
        }
        "enableDebuggingHandlers" => {
            Rule::Same(&["true"], Behaviour, "crilet always serves logs, exec, attach and port-forward")
        }
        "enableSystemLogHandler"
        | "enableSystemLogQuery"
        | "enableProfilingHandler"
        | "enableDebugFlagsHandler"
        | "enableContentionProfiling" => Rule::Same(&["false"], Behaviour, NO_HANDLER),
        "address" => Rule::Ignore(Behaviour, "crilet binds the kubelet API to --node-ip"),
        "tlsMinVersion" if value.as_str() == Some("VersionTLS13") => Rule::Ignore(
            Weaker,
            "crilet's kubelet API accepts TLS 1.2 and 1.3 (rustls' defaults); it cannot require 1.3",
        ),
        "tlsMinVersion" => Rule::Ignore(Stricter, "crilet's kubelet API accepts TLS 1.2 and 1.3 only"),
        "tlsCipherSuites" | "tlsCurvePreferences" => Rule::Ignore(
            Weaker,
            "crilet's kubelet API uses rustls' default cipher suites and curves, not this list",
        ),

        // Pods' security.
        "seccompDefault" => Rule::Take("seccomp-default"),
        "protectKernelDefaults" => Rule::Same(
            &["false"],
            Weaker,
            "crilet does not check the kernel's tunables against the kubelet's expectations",
        ),
        "allowedUnsafeSysctls" => Rule::Take("allowed-unsafe-sysctls"),
        "imagePullCredentialsVerificationPolicy" => Rule::Same(
            &["NeverVerify"],
            Weaker,
            "crilet lets any pod use an image already on the node without checking its pull credentials",
        ),
        "preloadedImagesVerificationAllowlist" => Rule::Ignore(Behaviour, NOT_IMPLEMENTED),

        // Certificates: client and serving certificate rotation are crilet's (`cluster::rotation`).
        "rotateCertificates" => Rule::Take("rotate-certificates"),
        "serverTLSBootstrap" => Rule::Take("rotate-server-certificates"),

        // The node object and its heartbeat (cluster::node_sync).
        "nodeStatusUpdateFrequency" => {
            Rule::Same(&["10s"], Behaviour, "crilet checks the Node's status every 10s")
        }
        "nodeStatusReportFrequency" => {
            Rule::Same(&["5m"], Behaviour, "crilet reports an unchanged Node status every 5m")
        }
        "nodeLeaseDurationSeconds" => {
            Rule::Same(&["40"], Behaviour, "crilet's Lease lasts 40s, renewed every 10s")
        }
        "registerNode" => Rule::Same(&["true"], Behaviour, "crilet always registers its Node"),
        "registerWithTaints" => Rule::Ignore(Behaviour, "crilet registers its Node without taints"),
        "providerID" => Rule::Ignore(Behaviour, "crilet sets no providerID on its Node"),
        "nodeStatusMaxImages" => Rule::Ignore(Behaviour, NOT_IMPLEMENTED),

        // DNS.
        "clusterDNS" => Rule::Take("cluster-dns"),
        "clusterDomain" => Rule::Take("cluster-domain"),
        "resolvConf" => Rule::Take("resolv-conf"),

        // Cgroups and node resources (cgroup, ledger).
        "cgroupsPerQOS" => Rule::Same(&["true"], Behaviour, "crilet always makes the kubepods QoS cgroups"),
        "enforceNodeAllocatable" => {
            Rule::Same(&["[pods]"], Behaviour, "crilet enforces no system-reserved or kube-reserved cgroup")
        }
        "cpuCFSQuota" => Rule::Same(&["true"], Behaviour, "crilet always sets CFS quotas from CPU limits"),
        "failSwapOn" => {
            Rule::Same(&["false"], Behaviour, "crilet does not check for swap; it starts with swap on")
        }
        "failCgroupV1" => Rule::Same(&["false"], Behaviour, "crilet runs on cgroup v1 as on v2"),
        "enableControllerAttachDetach" => {
            Rule::Same(&["true"], Behaviour, "crilet attaches and detaches no volume itself")
        }
        "makeIPTablesUtilChains" => Rule::Same(&["false"], Behaviour, "crilet makes no iptables chains"),
        "systemReserved"
        | "kubeReserved"
        | "reservedSystemCPUs"
        | "systemReservedCgroup"
        | "kubeReservedCgroup"
        | "reservedMemory" => Rule::Ignore(Behaviour, RESERVED),
        "cpuManagerPolicy"
        | "cpuManagerPolicyOptions"
        | "cpuManagerReconcilePeriod"
        | "memoryManagerPolicy"
        | "topologyManagerPolicy"
        | "topologyManagerScope"
        | "topologyManagerPolicyOptions" => Rule::Ignore(Behaviour, NUMA),
        // Node-pressure eviction (eviction).
        "evictionHard" => Rule::TakeMap("eviction-hard", '<'),
        "evictionSoft" => Rule::TakeMap("eviction-soft", '<'),
        "evictionSoftGracePeriod" => Rule::TakeMap("eviction-soft-grace-period", '='),
        "evictionMinimumReclaim" => Rule::TakeMap("eviction-minimum-reclaim", '='),
        "evictionPressureTransitionPeriod" => Rule::Take("eviction-pressure-transition-period"),
        "evictionMaxPodGracePeriod" => Rule::Take("eviction-max-pod-grace-period"),
        "mergeDefaultEvictionSettings" => Rule::Same(
            &["false"],
            Behaviour,
            "crilet's evictionHard replaces the default thresholds whole; it does not merge them",
        ),
        "kernelMemcgNotification" => Rule::Same(
            &["false"],
            Behaviour,
            "crilet reads the memory signal every 10s, without memcg notifications",
        ),
        "imageMinimumGCAge" => Rule::Take("minimum-image-ttl-duration"),
        "imageMaximumGCAge" => Rule::Take("image-maximum-gc-age"),
        "volumeStatsAggPeriod" => Rule::Take("volume-stats-agg-period"),
        "imageGCHighThresholdPercent" => Rule::Take("image-gc-high-threshold"),
        "imageGCLowThresholdPercent" => Rule::Take("image-gc-low-threshold"),
        "logging.format" => {
            Rule::Same(&["text"], Behaviour, "crilet logs text to stderr, filtered by RUST_LOG")
        }
        f if f.starts_with("logging.") => {
            Rule::Ignore(Behaviour, "crilet's log is set with RUST_LOG, not the kubelet's logging options")
        }
        "featureGates" => Rule::Ignore(Behaviour, "crilet has no feature gates"),

        // Deprecated upstream with no effect on any kubelet; or met by every value: crilet
        // sees manifest changes at once (inotify), and reads no URL source to poll.
        "streamingConnectionIdleTimeout"
        | "iptablesMasqueradeBit"
        | "iptablesDropBit"
        | "fileCheckFrequency"
        | "httpCheckFrequency" => Rule::NoEffect,

        _ => Rule::Ignore(Behaviour, NOT_IMPLEMENTED),
    }
}

#[cfg(test)]
#[path = "kubelet_config_tests.rs"]
mod tests;
