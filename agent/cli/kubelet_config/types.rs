//! The kubelet's `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`, Kubernetes v1.36),
//! every field, written from the API's field list (`k8s.io/kubelet/config/v1beta1`). It exists
//! to decode a file as strictly as the kubelet does: an unknown key or a value of the wrong type
//! is an error naming it. What crilet takes and what it ignores is decided on the document's own
//! keys (`super::rules`), so a field is reported only when the file sets it.

// The fields are decoded to check the file, not read one by one: `super::rules` walks the keys
// the file sets.
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// A Go duration (`metav1.Duration`: `30s`, `1m0s`, `1h2m3.5s`), kept as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoDuration(pub String);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match crate::logrotate::plan::parse_go_duration(&text) {
            Some(_) => Ok(GoDuration(text)),
            None => Err(serde::de::Error::custom(format!("{text:?} is not a duration (e.g. 30s, 1m0s)"))),
        }
    }
}

type Map = BTreeMap<String, String>;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,
    pub enable_server: Option<bool>,
    pub static_pod_path: String,
    pub pod_logs_dir: String,
    pub sync_frequency: Option<GoDuration>,
    pub file_check_frequency: Option<GoDuration>,
    pub http_check_frequency: Option<GoDuration>,
    #[serde(rename = "staticPodURL")]
    pub static_pod_url: String,
    #[serde(rename = "staticPodURLHeader")]
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    pub address: String,
    pub port: Option<i32>,
    pub read_only_port: Option<i32>,
    pub tls_cert_file: String,
    pub tls_private_key_file: String,
    pub tls_cipher_suites: Vec<String>,
    pub tls_curve_preferences: Vec<i32>,
    pub tls_min_version: String,
    pub rotate_certificates: Option<bool>,
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: Option<bool>,
    pub authentication: KubeletAuthentication,
    pub authorization: KubeletAuthorization,
    #[serde(rename = "registryPullQPS")]
    pub registry_pull_qps: Option<i32>,
    pub registry_burst: Option<i32>,
    pub image_pull_credentials_verification_policy: String,
    pub preloaded_images_verification_allowlist: Vec<String>,
    #[serde(rename = "eventRecordQPS")]
    pub event_record_qps: Option<i32>,
    pub event_burst: Option<i32>,
    pub enable_debugging_handlers: Option<bool>,
    pub enable_contention_profiling: Option<bool>,
    pub healthz_port: Option<i32>,
    pub healthz_bind_address: String,
    #[serde(rename = "oomScoreAdj")]
    pub oom_score_adj: Option<i32>,
    pub cluster_domain: String,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    pub streaming_connection_idle_timeout: Option<GoDuration>,
    pub node_status_update_frequency: Option<GoDuration>,
    pub node_status_report_frequency: Option<GoDuration>,
    pub node_lease_duration_seconds: Option<i32>,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Option<GoDuration>,
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: Option<GoDuration>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i32>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i32>,
    pub volume_stats_agg_period: Option<GoDuration>,
    pub kubelet_cgroups: String,
    pub system_cgroups: String,
    pub cgroup_root: String,
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: Option<bool>,
    pub cgroup_driver: String,
    #[serde(rename = "cpuManagerPolicy")]
    pub cpu_manager_policy: String,
    #[serde(rename = "singleProcessOOMKill")]
    pub single_process_oom_kill: Option<bool>,
    pub cpu_manager_policy_options: Map,
    pub cpu_manager_reconcile_period: Option<GoDuration>,
    pub dra_manager_reconcile_period: Option<GoDuration>,
    pub memory_manager_policy: String,
    pub topology_manager_policy: String,
    pub topology_manager_scope: String,
    pub topology_manager_policy_options: Map,
    pub qos_reserved: Map,
    pub runtime_request_timeout: Option<GoDuration>,
    pub hairpin_mode: String,
    pub max_pods: Option<i32>,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: String,
    pub pod_pids_limit: Option<i64>,
    pub resolv_conf: Option<String>,
    pub run_once: Option<bool>,
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: Option<bool>,
    #[serde(rename = "cpuCFSQuotaPeriod")]
    pub cpu_cfs_quota_period: Option<GoDuration>,
    pub node_status_max_images: Option<i32>,
    pub max_open_files: Option<i64>,
    pub content_type: String,
    #[serde(rename = "kubeAPIQPS")]
    pub kube_api_qps: Option<i32>,
    #[serde(rename = "kubeAPIBurst")]
    pub kube_api_burst: Option<i32>,
    pub serialize_image_pulls: Option<bool>,
    pub max_parallel_image_pulls: Option<i32>,
    pub eviction_hard: Map,
    pub eviction_soft: Map,
    pub eviction_soft_grace_period: Map,
    pub eviction_pressure_transition_period: Option<GoDuration>,
    pub eviction_max_pod_grace_period: Option<i32>,
    pub eviction_minimum_reclaim: Map,
    pub merge_default_eviction_settings: Option<bool>,
    pub pods_per_core: Option<i32>,
    pub enable_controller_attach_detach: Option<bool>,
    pub protect_kernel_defaults: Option<bool>,
    #[serde(rename = "makeIPTablesUtilChains")]
    pub make_iptables_util_chains: Option<bool>,
    pub iptables_masquerade_bit: Option<i32>,
    pub iptables_drop_bit: Option<i32>,
    pub feature_gates: BTreeMap<String, bool>,
    pub fail_swap_on: Option<bool>,
    pub memory_swap: MemorySwapConfiguration,
    pub container_log_max_size: String,
    pub container_log_max_files: Option<i32>,
    pub container_log_max_workers: Option<i32>,
    pub container_log_monitor_interval: Option<GoDuration>,
    pub config_map_and_secret_change_detection_strategy: String,
    pub system_reserved: Map,
    pub kube_reserved: Map,
    #[serde(rename = "reservedSystemCPUs")]
    pub reserved_system_cpus: String,
    pub show_hidden_metrics_for_version: String,
    pub system_reserved_cgroup: String,
    pub kube_reserved_cgroup: String,
    pub enforce_node_allocatable: Vec<String>,
    pub allowed_unsafe_sysctls: Vec<String>,
    pub volume_plugin_dir: String,
    #[serde(rename = "providerID")]
    pub provider_id: String,
    pub kernel_memcg_notification: Option<bool>,
    pub logging: LoggingConfiguration,
    pub enable_system_log_handler: Option<bool>,
    pub enable_system_log_query: Option<bool>,
    pub shutdown_grace_period: Option<GoDuration>,
    pub shutdown_grace_period_critical_pods: Option<GoDuration>,
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
    pub crash_loop_back_off: CrashLoopBackOffConfig,
    pub reserved_memory: Vec<MemoryReservation>,
    pub enable_profiling_handler: Option<bool>,
    pub enable_debug_flags_handler: Option<bool>,
    pub seccomp_default: Option<bool>,
    pub memory_throttling_factor: Option<f64>,
    pub memory_reservation_policy: String,
    pub register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    pub register_node: Option<bool>,
    pub tracing: Option<TracingConfiguration>,
    pub local_storage_capacity_isolation: Option<bool>,
    pub container_runtime_endpoint: String,
    pub image_service_endpoint: String,
    #[serde(rename = "failCgroupV1")]
    pub fail_cgroup_v1: Option<bool>,
    pub user_namespaces: Option<UserNamespaces>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthentication {
    pub x509: KubeletX509Authentication,
    pub webhook: KubeletWebhookAuthentication,
    pub anonymous: KubeletAnonymousAuthentication,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletX509Authentication {
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthentication {
    pub enabled: Option<bool>,
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: Option<GoDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAnonymousAuthentication {
    pub enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthorization {
    /// `AlwaysAllow` or `Webhook`.
    pub mode: String,
    pub webhook: KubeletWebhookAuthorization,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthorization {
    #[serde(rename = "cacheAuthorizedTTL")]
    pub cache_authorized_ttl: Option<GoDuration>,
    #[serde(rename = "cacheUnauthorizedTTL")]
    pub cache_unauthorized_ttl: Option<GoDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemorySwapConfiguration {
    /// `""`, `NoSwap` or `LimitedSwap`.
    pub swap_behavior: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CrashLoopBackOffConfig {
    pub max_container_restart_period: Option<GoDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShutdownGracePeriodByPodPriority {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryReservation {
    pub numa_node: i32,
    pub limits: Map,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct UserNamespaces {
    pub ids_per_pod: Option<i64>,
}

/// `k8s.io/component-base/tracing/api/v1.TracingConfiguration`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TracingConfiguration {
    pub endpoint: Option<String>,
    pub sampling_rate_per_million: Option<i32>,
}

/// `k8s.io/component-base/logs/api/v1.LoggingConfiguration` (kubeadm writes it with zeros).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfiguration {
    pub format: String,
    /// A duration, or nanoseconds as a number (`flushFrequency: 0`, as kubeadm writes it).
    pub flush_frequency: Option<serde_yaml_ng::Value>,
    pub verbosity: Option<u32>,
    pub vmodule: Vec<VModuleItem>,
    pub options: FormatOptions,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VModuleItem {
    pub file_pattern: String,
    pub verbosity: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FormatOptions {
    pub text: StreamOptions,
    pub json: StreamOptions,
}

/// `text` and `json` options alike.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StreamOptions {
    pub split_stream: Option<bool>,
    /// A quantity (`"0"`, `64Ki`).
    pub info_buffer_size: Option<serde_yaml_ng::Value>,
}
