//! `crilet run`'s settings: its flags, the same from `--config` (YAML: crilet's own keys, or the
//! kubelet's `KubeletConfiguration`, translated by `crilet::cli::kubelet_config`), and what they
//! resolve to (defaults, the node's name and IP, the cluster settings).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use crilet::cli::kubelet_config;
use serde::Deserialize;

/// `crilet run` settings; every flag can also come from `--config` (same names, YAML).
#[derive(Args, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub(crate) struct RunArgs {
    /// CRI runtime endpoint [default: unix:///run/containerd/containerd.sock]
    #[arg(long)]
    pub(crate) container_runtime_endpoint: Option<String>,
    /// CRI image endpoint [default: the runtime endpoint]
    #[arg(long)]
    pub(crate) image_service_endpoint: Option<String>,
    /// Directory of Pod manifests [default: /etc/crilet/manifests]
    #[arg(long)]
    pub(crate) pod_manifest_path: Option<PathBuf>,
    /// Agent state directory [default: /var/lib/crilet]
    #[arg(long)]
    pub(crate) root_dir: Option<PathBuf>,
    /// Container logs directory [default: /var/log/pods]
    #[arg(long)]
    pub(crate) pod_logs_dir: Option<PathBuf>,
    /// Where the kubelet's legacy per-container log symlinks go; "" for none
    /// [default: /var/log/containers]
    #[arg(long)]
    pub(crate) container_logs_dir: Option<String>,
    /// The agent's control socket [default: /run/crilet/crilet.sock]
    #[arg(long)]
    pub(crate) control_socket: Option<PathBuf>,
    /// Node name [default: --hostname-override, else the hostname]
    #[arg(long)]
    pub(crate) node_name: Option<String>,
    /// The kubelet's flag (kubeadm writes it when the node's name is not its hostname): the
    /// node's name and its hostname (label kubernetes.io/hostname, Hostname address) [default:
    /// the hostname]
    #[arg(long)]
    pub(crate) hostname_override: Option<String>,
    /// Rotate a container's log file once it reaches this size (a quantity) [default: 10Mi]
    #[arg(long)]
    pub(crate) container_log_max_size: Option<String>,
    /// Log files kept per container, the current one included (2 or more) [default: 5]
    #[arg(long)]
    pub(crate) container_log_max_files: Option<i64>,
    /// How often container logs are checked for rotation (e.g. 10s, 500ms) [default: 10s]
    #[arg(long)]
    pub(crate) container_log_monitor_interval: Option<String>,
    /// Serve Prometheus /metrics and /healthz over plain HTTP on HOST:PORT (use a loopback
    /// address); empty for none [default: none]
    #[arg(long)]
    pub(crate) metrics_bind_address: Option<String>,
    /// Join the cluster this kubeconfig names, as node --node-name; without it, static pods
    /// only [default: none]
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The Node's InternalIP; the kubelet API binds to it [default: the host's first
    /// non-loopback address]
    #[arg(long)]
    pub(crate) node_ip: Option<String>,
    /// Labels added to the Node, k=v,k2=v2 [default: none]
    #[arg(long)]
    pub(crate) node_labels: Option<String>,
    /// The Node's pods capacity; admission refuses more (OutOfpods) [default: 110]
    #[arg(long)]
    pub(crate) max_pods: Option<u32>,
    /// The kubelet API's port (TLS) [default: 10250]
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// The kubelet API's serving certificate (PEM) [default: none; then the CSR-issued one with
    /// --rotate-server-certificates, else a self-signed one made in --cert-dir]
    #[arg(long)]
    pub(crate) tls_cert_file: Option<PathBuf>,
    /// The kubelet API's serving key (PEM) [default: none]
    #[arg(long)]
    pub(crate) tls_private_key_file: Option<PathBuf>,
    /// CA for client certificates on the kubelet API [default: none]
    #[arg(long)]
    pub(crate) client_ca_file: Option<PathBuf>,
    /// How often running API pods' ConfigMap, Secret and downward-API volumes are refreshed
    /// (the kubelet's sync frequency) [default: 1m]
    #[arg(long)]
    pub(crate) sync_frequency: Option<String>,
    /// API requests a second the node makes for pods, statuses and mirror pods (the heartbeat
    /// is not limited); 0 for no limit [default: 50]
    #[arg(long)]
    pub(crate) kube_api_qps: Option<u32>,
    /// API requests the node may make at once above --kube-api-qps [default: 100]
    #[arg(long)]
    pub(crate) kube_api_burst: Option<u32>,
    /// Events a second the node sends; 0 for no limit [default: 50]
    #[arg(long)]
    pub(crate) event_qps: Option<u32>,
    /// Events the node may send at once above --event-qps [default: 100]
    #[arg(long)]
    pub(crate) event_burst: Option<u32>,
    /// Graceful node shutdown: how long the node's shutdown waits for its pods to stop, held off
    /// with a systemd-logind delay lock (the kubelet's shutdownGracePeriod); 0s for off
    /// [default: 0s]
    #[arg(long)]
    pub(crate) shutdown_grace_period: Option<String>,
    /// The part of --shutdown-grace-period kept for pods of system-critical priority, which stop
    /// after the others (the kubelet's shutdownGracePeriodCriticalPods) [default: 0s]
    #[arg(long)]
    pub(crate) shutdown_grace_period_critical_pods: Option<String>,
    /// The cgroup driver pods' cgroups are made with, cgroupfs or systemd (the runtime's must
    /// be the same); a runtime that reports its own through CRI RuntimeConfig is followed
    /// instead, as the kubelet does [default: cgroupfs]
    #[arg(long)]
    pub(crate) cgroup_driver: Option<String>,
    /// Run every container that names no seccomp profile (pod or container seccompProfile)
    /// with the runtime's default profile, RuntimeDefault, instead of unconfined (the kubelet's
    /// seccompDefault) [default: false]
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub(crate) seccomp_default: Option<bool>,
    /// TLS bootstrapping: a kubeconfig (a bootstrap token) to ask the cluster for the node's
    /// client certificate with when --kubeconfig is missing or its certificate unusable; the
    /// certificate goes to --cert-dir and --kubeconfig is written for it [default: none]
    #[arg(long)]
    pub(crate) bootstrap_kubeconfig: Option<PathBuf>,
    /// Where the node's certificates are kept (kubelet-client-current.pem,
    /// kubelet-server-current.pem, the self-signed kubelet.crt and kubelet.key)
    /// [default: <root-dir>/pki]
    #[arg(long)]
    pub(crate) cert_dir: Option<PathBuf>,
    /// Renew the client certificate by CSR before it expires, without a restart (the kubelet's
    /// rotateCertificates) [default: true with --bootstrap-kubeconfig, as kubeadm sets it;
    /// false otherwise, the kubelet's flag default]
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub(crate) rotate_certificates: Option<bool>,
    /// Ask the cluster for the kubelet API's serving certificate by a kubelet-serving CSR (SANs:
    /// the Node's addresses) and renew it before it expires; the cluster does not approve these
    /// by itself (the kubelet's serverTLSBootstrap) [default: false]
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub(crate) rotate_server_certificates: Option<bool>,
    /// DNS server IPs of the cluster, comma-separated or repeated: pods with dnsPolicy
    /// ClusterFirst resolve through them (without any, ClusterFirst falls back to Default, with
    /// a MissingClusterDNS event) [default: none]
    #[arg(long, value_delimiter = ',')]
    pub(crate) cluster_dns: Option<Vec<String>>,
    /// The cluster's domain: ClusterFirst pods search <namespace>.svc.<domain>, svc.<domain> and
    /// <domain> before the host's search domains [default: none]
    #[arg(long)]
    pub(crate) cluster_domain: Option<String>,
    /// The resolver file pods' DNS is based on (dnsPolicy Default, and the host's search
    /// domains); "" for none: Default pods resolve through the node (127.0.0.1)
    /// [default: /etc/resolv.conf]
    #[arg(long)]
    pub(crate) resolv_conf: Option<String>,
    /// Sysctls pods may set beyond the safe set, comma-separated or repeated; a pattern may end
    /// in * (kernel.msg*, net.core.*). Only namespaced sysctls (kernel.shm*, kernel.msg*,
    /// kernel.sem, fs.mqueue.*, net.*) can be allowed [default: none]
    #[arg(long, value_delimiter = ',')]
    pub(crate) allowed_unsafe_sysctls: Option<Vec<String>>,
    /// Image filesystem usage (percent) at or over which unused images are removed; 100 turns
    /// image garbage collection off (with no --image-maximum-gc-age) [default: 85]
    #[arg(long)]
    pub(crate) image_gc_high_threshold: Option<i64>,
    /// The usage (percent) image garbage collection brings the image filesystem down to; less
    /// than --image-gc-high-threshold [default: 80]
    #[arg(long)]
    pub(crate) image_gc_low_threshold: Option<i64>,
    /// An image first seen less than this long ago is never removed (the kubelet's
    /// imageMinimumGCAge) [default: 2m]
    #[arg(long)]
    pub(crate) minimum_image_ttl_duration: Option<String>,
    /// An image unused for longer than this is removed whatever the usage; 0s for never
    /// [default: 0s]
    #[arg(long)]
    pub(crate) image_maximum_gc_age: Option<String>,
    /// Hard eviction thresholds, signal<quantity or signal<percent%, comma-separated (signals:
    /// memory.available, nodefs.available, nodefs.inodesFree, imagefs.available,
    /// imagefs.inodesFree, pid.available); a pod is evicted at once when one is met. Given, it
    /// replaces the whole default set [default:
    /// memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%]
    #[arg(long)]
    pub(crate) eviction_hard: Option<String>,
    /// Soft eviction thresholds, as --eviction-hard; each acts only once met for its
    /// --eviction-soft-grace-period [default: none]
    #[arg(long)]
    pub(crate) eviction_soft: Option<String>,
    /// How long each soft threshold must be met before it evicts, signal=duration,
    /// comma-separated (e.g. memory.available=1m30s) [default: none]
    #[arg(long)]
    pub(crate) eviction_soft_grace_period: Option<String>,
    /// How much more than its threshold must be available again before a met threshold is
    /// resolved, signal=quantity or signal=percent%, comma-separated [default: none]
    #[arg(long)]
    pub(crate) eviction_minimum_reclaim: Option<String>,
    /// The most grace (seconds) a pod evicted for a soft threshold gets (its own, if shorter);
    /// a hard threshold gives 1 s [default: 0]
    #[arg(long)]
    pub(crate) eviction_max_pod_grace_period: Option<i64>,
    /// How long a pressure condition stays after its threshold was last met (e.g. 5m, 30s)
    /// [default: 5m]
    #[arg(long)]
    pub(crate) eviction_pressure_transition_period: Option<String>,
    /// How often the disk use of every pod's emptyDir volumes is measured again for
    /// `/stats/summary` (the kubelet's flag); 0s turns volume stats off [default: 1m]
    #[arg(long)]
    pub(crate) volume_stats_agg_period: Option<String>,
    /// A YAML file holding the same settings (flags win), or the kubelet's KubeletConfiguration
    /// (kubelet.config.k8s.io/v1beta1); `crilet preflight` lists what crilet takes from it and
    /// what it ignores
    #[arg(long)]
    #[serde(skip)]
    pub(crate) config: Option<PathBuf>,
}

impl RunArgs {
    /// Flags over the config file over the defaults.
    pub(crate) fn resolve(mut self) -> anyhow::Result<Settings> {
        let mut kubelet_config = None;
        if let Some(path) = self.config.clone() {
            let (file, report) = read_config(&path)?;
            kubelet_config = report;
            self.container_runtime_endpoint =
                self.container_runtime_endpoint.or(file.container_runtime_endpoint);
            self.image_service_endpoint = self.image_service_endpoint.or(file.image_service_endpoint);
            self.pod_manifest_path = self.pod_manifest_path.or(file.pod_manifest_path);
            self.root_dir = self.root_dir.or(file.root_dir);
            self.pod_logs_dir = self.pod_logs_dir.or(file.pod_logs_dir);
            self.container_logs_dir = self.container_logs_dir.or(file.container_logs_dir);
            self.control_socket = self.control_socket.or(file.control_socket);
            self.node_name = self.node_name.or(file.node_name);
            self.hostname_override = self.hostname_override.or(file.hostname_override);
            self.metrics_bind_address = self.metrics_bind_address.or(file.metrics_bind_address);
            self.container_log_max_size = self.container_log_max_size.or(file.container_log_max_size);
            self.container_log_max_files = self.container_log_max_files.or(file.container_log_max_files);
            self.container_log_monitor_interval =
                self.container_log_monitor_interval.or(file.container_log_monitor_interval);
            self.kubeconfig = self.kubeconfig.or(file.kubeconfig);
            self.node_ip = self.node_ip.or(file.node_ip);
            self.node_labels = self.node_labels.or(file.node_labels);
            self.max_pods = self.max_pods.or(file.max_pods);
            self.port = self.port.or(file.port);
            self.tls_cert_file = self.tls_cert_file.or(file.tls_cert_file);
            self.tls_private_key_file = self.tls_private_key_file.or(file.tls_private_key_file);
            self.client_ca_file = self.client_ca_file.or(file.client_ca_file);
            self.sync_frequency = self.sync_frequency.or(file.sync_frequency);
            self.kube_api_qps = self.kube_api_qps.or(file.kube_api_qps);
            self.kube_api_burst = self.kube_api_burst.or(file.kube_api_burst);
            self.event_qps = self.event_qps.or(file.event_qps);
            self.event_burst = self.event_burst.or(file.event_burst);
            self.shutdown_grace_period = self.shutdown_grace_period.or(file.shutdown_grace_period);
            self.shutdown_grace_period_critical_pods =
                self.shutdown_grace_period_critical_pods.or(file.shutdown_grace_period_critical_pods);
            self.cgroup_driver = self.cgroup_driver.or(file.cgroup_driver);
            self.seccomp_default = self.seccomp_default.or(file.seccomp_default);
            self.bootstrap_kubeconfig = self.bootstrap_kubeconfig.or(file.bootstrap_kubeconfig);
            self.cert_dir = self.cert_dir.or(file.cert_dir);
            self.rotate_certificates = self.rotate_certificates.or(file.rotate_certificates);
            self.rotate_server_certificates =
                self.rotate_server_certificates.or(file.rotate_server_certificates);
            self.cluster_dns = self.cluster_dns.or(file.cluster_dns);
            self.cluster_domain = self.cluster_domain.or(file.cluster_domain);
            self.resolv_conf = self.resolv_conf.or(file.resolv_conf);
            self.allowed_unsafe_sysctls = self.allowed_unsafe_sysctls.or(file.allowed_unsafe_sysctls);
            self.image_gc_high_threshold = self.image_gc_high_threshold.or(file.image_gc_high_threshold);
            self.image_gc_low_threshold = self.image_gc_low_threshold.or(file.image_gc_low_threshold);
            self.minimum_image_ttl_duration =
                self.minimum_image_ttl_duration.or(file.minimum_image_ttl_duration);
            self.image_maximum_gc_age = self.image_maximum_gc_age.or(file.image_maximum_gc_age);
            self.eviction_hard = self.eviction_hard.or(file.eviction_hard);
            self.eviction_soft = self.eviction_soft.or(file.eviction_soft);
            self.eviction_soft_grace_period =
                self.eviction_soft_grace_period.or(file.eviction_soft_grace_period);
            self.eviction_minimum_reclaim = self.eviction_minimum_reclaim.or(file.eviction_minimum_reclaim);
            self.eviction_max_pod_grace_period =
                self.eviction_max_pod_grace_period.or(file.eviction_max_pod_grace_period);
            self.eviction_pressure_transition_period =
                self.eviction_pressure_transition_period.or(file.eviction_pressure_transition_period);
            self.volume_stats_agg_period = self.volume_stats_agg_period.or(file.volume_stats_agg_period);
        }
        let runtime = self
            .container_runtime_endpoint
            .unwrap_or_else(|| "unix:///run/containerd/containerd.sock".into());
        // The kubelet lower-cases an override as it does the hostname.
        let hostname = match self.hostname_override.filter(|h| !h.is_empty()) {
            Some(h) => h.to_lowercase(),
            None => crilet::node::default_node_name().context("reading the hostname for --node-name")?,
        };
        let node_name = self.node_name.unwrap_or_else(|| hostname.clone());
        let root_dir: PathBuf = self.root_dir.clone().unwrap_or_else(|| "/var/lib/crilet".into());
        let node_ip = match self.node_ip.filter(|ip| !ip.is_empty()) {
            Some(ip) => {
                ip.parse::<std::net::IpAddr>()
                    .with_context(|| format!("--node-ip {ip:?} is not an IP address"))?;
                Some(ip)
            }
            None => None,
        };
        let sysctls = crilet::sysctl::Allowlist::for_host(&self.allowed_unsafe_sysctls.unwrap_or_default())?;
        let dns = dns_settings(self.cluster_dns, self.cluster_domain, self.resolv_conf)?;
        let cgroup_driver = match self.cgroup_driver.as_deref().filter(|d| !d.is_empty()) {
            Some(d) => Some(
                d.parse::<crilet::cgroup::CgroupDriver>()
                    .map_err(|e| anyhow::anyhow!("--cgroup-driver: {e}"))?,
            ),
            None => None,
        };
        let sync_text = self.sync_frequency.as_deref().unwrap_or("1m");
        let sync_frequency =
            crilet::logrotate::plan::parse_go_duration(sync_text).filter(|d| !d.is_zero()).with_context(
                || format!("--sync-frequency {sync_text:?} is not a positive duration (e.g. 1m, 10s)"),
            )?;
        let image_gc = image_gc_policy(
            self.image_gc_high_threshold,
            self.image_gc_low_threshold,
            self.minimum_image_ttl_duration.as_deref(),
            self.image_maximum_gc_age.as_deref(),
        )?;
        let agg_text = self.volume_stats_agg_period.as_deref().unwrap_or("1m");
        let volume_stats_agg_period =
            crilet::logrotate::plan::parse_go_duration(agg_text).with_context(|| {
                format!(
                    "--volume-stats-agg-period {agg_text:?} is not a duration (e.g. 1m, 0s to turn it off)"
                )
            })?;
        let shutdown = shutdown_periods(
            self.shutdown_grace_period.as_deref(),
            self.shutdown_grace_period_critical_pods.as_deref(),
        )?;
        let eviction = crilet::eviction::config(
            &crilet::eviction::threshold::Flags {
                hard: self.eviction_hard.as_deref(),
                soft: self.eviction_soft.as_deref(),
                soft_grace_period: self.eviction_soft_grace_period.as_deref(),
                minimum_reclaim: self.eviction_minimum_reclaim.as_deref(),
            },
            self.eviction_max_pod_grace_period,
            self.eviction_pressure_transition_period.as_deref(),
        )
        .map_err(anyhow::Error::msg)?;
        let rotate_server = self.rotate_server_certificates.unwrap_or(false);
        if rotate_server && (self.tls_cert_file.is_some() || self.tls_private_key_file.is_some()) {
            // As the kubelet, whose certificate manager then answers every handshake.
            tracing::warn!(
                "--rotate-server-certificates is on: --tls-cert-file/--tls-private-key-file are not served"
            );
        }
        let cluster = match self.kubeconfig.filter(|p| !p.as_os_str().is_empty()) {
            None => None,
            Some(kubeconfig) => {
                let node_ip = node_ip
                    .clone()
                    .or_else(host_ip)
                    .context("--node-ip: no non-loopback address found on this host; give the Node's IP")?;
                Some(ClusterSettings {
                    config: crilet::cluster::ClusterConfig {
                        kubeconfig,
                        node_name: node_name.clone(),
                        hostname,
                        node_ip,
                        node_labels: crilet::cluster::parse_labels(
                            self.node_labels.as_deref().unwrap_or(""),
                        )?,
                        max_pods: self.max_pods.unwrap_or(110),
                        port: self.port.unwrap_or(10250),
                        root_dir: root_dir.clone(),
                        api_limit: limit(
                            "--kube-api-qps",
                            self.kube_api_qps,
                            "--kube-api-burst",
                            self.kube_api_burst,
                        )?,
                        event_limit: limit("--event-qps", self.event_qps, "--event-burst", self.event_burst)?,
                        rotate_certificates: self.rotate_certificates.unwrap_or(
                            self.bootstrap_kubeconfig.as_ref().is_some_and(|p| !p.as_os_str().is_empty()),
                        ),
                        bootstrap_kubeconfig: self.bootstrap_kubeconfig.filter(|p| !p.as_os_str().is_empty()),
                        cert_dir: self.cert_dir.clone().unwrap_or_else(|| root_dir.join("pki")),
                        sysctls: sysctls.clone(),
                    },
                    sync_frequency,
                    serving: crilet::cluster::serving_cert::source(
                        self.tls_cert_file.as_deref(),
                        self.tls_private_key_file.as_deref(),
                        rotate_server,
                    )
                    .map_err(anyhow::Error::msg)?,
                    client_ca_file: self.client_ca_file,
                })
            }
        };
        Ok(Settings {
            image_gc,
            volume_stats_agg_period,
            dns,
            sysctls,
            kubelet_config,
            cluster,
            shutdown,
            eviction,
            cgroup_driver,
            seccomp_default: self.seccomp_default.unwrap_or(false),
            node_ip,
            image_endpoint: self.image_service_endpoint.unwrap_or_else(|| runtime.clone()),
            runtime_endpoint: runtime,
            manifest_dir: self.pod_manifest_path.unwrap_or_else(|| "/etc/crilet/manifests".into()),
            root_dir,
            pod_logs_dir: self.pod_logs_dir.unwrap_or_else(|| "/var/log/pods".into()),
            container_logs_dir: match self.container_logs_dir {
                Some(p) if p.is_empty() => None,
                Some(p) => Some(p.into()),
                None => Some("/var/log/containers".into()),
            },
            control_socket: self.control_socket.unwrap_or_else(|| "/run/crilet/crilet.sock".into()),
            node_name,
            metrics_bind_address: self.metrics_bind_address.filter(|a| !a.is_empty()),
            log_rotation: crilet::logrotate::Policy::parse(
                self.container_log_max_size.as_deref(),
                self.container_log_max_files,
                self.container_log_monitor_interval.as_deref(),
            )?,
        })
    }
}

/// `--config`'s settings: crilet's own format, or a `KubeletConfiguration` translated into it,
/// with the report of what crilet took from that file and what it ignores.
fn read_config(path: &Path) -> anyhow::Result<(RunArgs, Option<kubelet_config::Report>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
    let parsing = || format!("parsing config {}", path.display());
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).with_context(parsing)?;
    if !kubelet_config::is_kubelet_configuration(&doc) {
        return Ok((serde_yaml_ng::from_str(&text).with_context(parsing)?, None));
    }
    let t = kubelet_config::translate(&path.display().to_string(), &doc)?;
    let file = serde_yaml_ng::from_value(serde_yaml_ng::Value::Mapping(t.settings))
        .with_context(|| format!("{}: a KubeletConfiguration value crilet cannot take", path.display()))?;
    Ok((file, Some(t.report)))
}

/// `--cluster-dns`, `--cluster-domain` and `--resolv-conf` (the node's IPs are added once
/// known). An address that is not an IP is refused (the kubelet logs and skips it; a node with
/// less cluster DNS than its operator gave would be silently wrong).
pub(crate) fn dns_settings(
    cluster_dns: Option<Vec<String>>,
    cluster_domain: Option<String>,
    resolv_conf: Option<String>,
) -> anyhow::Result<crilet::dns::DnsSettings> {
    let mut servers = Vec::new();
    for ip in cluster_dns.unwrap_or_default().iter().map(|ip| ip.trim()).filter(|ip| !ip.is_empty()) {
        servers.push(ip.parse().with_context(|| format!("--cluster-dns {ip:?} is not an IP address"))?);
    }
    Ok(crilet::dns::DnsSettings {
        cluster_dns: servers,
        cluster_domain: cluster_domain.unwrap_or_default(),
        resolv_conf: match resolv_conf {
            Some(p) if p.is_empty() => None,
            Some(p) => Some(p.into()),
            None => Some("/etc/resolv.conf".into()),
        },
        node_ips: Vec::new(),
    })
}

/// A rate limit from its two flags (the kubelet's defaults, 50 and 100, where unset). A burst
/// of 0 would let nothing through: refused.
pub(crate) fn limit(
    qps_flag: &str,
    qps: Option<u32>,
    burst_flag: &str,
    burst: Option<u32>,
) -> anyhow::Result<crilet::cluster::throttle::Limit> {
    let default = crilet::cluster::throttle::Limit::KUBELET_DEFAULT;
    let limit = crilet::cluster::throttle::Limit {
        qps: qps.unwrap_or(default.qps),
        burst: burst.unwrap_or(default.burst),
    };
    if limit.qps > 0 && limit.burst == 0 {
        anyhow::bail!("{burst_flag} 0 with {qps_flag} {}: the burst must be 1 or more", limit.qps);
    }
    Ok(limit)
}

/// `--shutdown-grace-period` and `--shutdown-grace-period-critical-pods` (Go durations, 0s where
/// unset): `None` when graceful node shutdown is off. The critical pods' part cannot exceed the
/// whole (the kubelet's configuration validation).
pub(crate) fn shutdown_periods(
    grace: Option<&str>,
    critical: Option<&str>,
) -> anyhow::Result<Option<(Duration, Duration)>> {
    let parse = |flag: &str, text: Option<&str>| {
        let text = text.unwrap_or("0s");
        crilet::logrotate::plan::parse_go_duration(text)
            .with_context(|| format!("{flag} {text:?} is not a duration (e.g. 30s, 2m)"))
    };
    let grace = parse("--shutdown-grace-period", grace)?;
    let critical = parse("--shutdown-grace-period-critical-pods", critical)?;
    if critical > grace {
        anyhow::bail!(
            "--shutdown-grace-period-critical-pods {critical:?} is longer than --shutdown-grace-period {grace:?}"
        );
    }
    Ok((!grace.is_zero()).then_some((grace, critical)))
}

/// The image garbage collection flags, validated as the kubelet validates them.
pub(crate) fn image_gc_policy(
    high: Option<i64>,
    low: Option<i64>,
    min_age: Option<&str>,
    max_age: Option<&str>,
) -> anyhow::Result<crilet::images::Policy> {
    let parse = |flag: &str, text: &str| {
        crilet::logrotate::plan::parse_go_duration(text)
            .with_context(|| format!("{flag} {text:?} is not a duration (e.g. 2m, 0s)"))
    };
    let min_age = parse("--minimum-image-ttl-duration", min_age.unwrap_or("2m"))?;
    let max_age = parse("--image-maximum-gc-age", max_age.unwrap_or("0s"))?;
    crilet::images::Policy::new(high.unwrap_or(85), low.unwrap_or(80), min_age, max_age)
        .map_err(anyhow::Error::msg)
}

/// Cluster mode's settings (`--kubeconfig` given).
pub(crate) struct ClusterSettings {
    pub(crate) config: crilet::cluster::ClusterConfig,
    /// How often API volumes are refreshed.
    pub(crate) sync_frequency: Duration,
    /// Where the kubelet API's serving certificate comes from.
    pub(crate) serving: crilet::cluster::serving_cert::Source,
    pub(crate) client_ca_file: Option<PathBuf>,
}

pub(crate) struct Settings {
    /// Image garbage collection (`--image-gc-*`, `--minimum-image-ttl-duration`,
    /// `--image-maximum-gc-age`).
    pub(crate) image_gc: crilet::images::Policy,
    /// `--volume-stats-agg-period`: how often emptyDir volumes are measured; zero for never.
    pub(crate) volume_stats_agg_period: Duration,
    /// The pods' DNS settings (`--cluster-dns`, `--cluster-domain`, `--resolv-conf`).
    pub(crate) dns: crilet::dns::DnsSettings,
    /// The sysctls pods may set: the safe set and `--allowed-unsafe-sysctls`.
    pub(crate) sysctls: crilet::sysctl::Allowlist,
    /// What crilet took from and ignored in `--config`, when it is a `KubeletConfiguration`.
    pub(crate) kubelet_config: Option<kubelet_config::Report>,
    pub(crate) cluster: Option<ClusterSettings>,
    /// Graceful node shutdown's period and its critical pods' part, when it is on.
    pub(crate) shutdown: Option<(Duration, Duration)>,
    /// Node-pressure eviction's thresholds and periods.
    pub(crate) eviction: crilet::eviction::Config,
    /// `--node-ip`, if given (the pods' hostIP; the Node's InternalIP).
    pub(crate) node_ip: Option<String>,
    pub(crate) runtime_endpoint: String,
    pub(crate) image_endpoint: String,
    pub(crate) manifest_dir: PathBuf,
    pub(crate) root_dir: PathBuf,
    pub(crate) pod_logs_dir: PathBuf,
    pub(crate) container_logs_dir: Option<PathBuf>,
    pub(crate) control_socket: PathBuf,
    pub(crate) node_name: String,
    /// `HOST:PORT` of /metrics and /healthz, if any.
    pub(crate) metrics_bind_address: Option<String>,
    pub(crate) log_rotation: crilet::logrotate::Policy,
    /// `--cgroup-driver`, if given (`None`: cgroupfs unless the runtime names its own).
    pub(crate) cgroup_driver: Option<crilet::cgroup::CgroupDriver>,
    /// `--seccomp-default`: RuntimeDefault for containers that name no seccomp profile.
    pub(crate) seccomp_default: bool,
}

/// The node's primary IPv4 address: the first non-loopback address of an interface that is up
/// and is not a container bridge or veth.
pub(crate) fn host_ip() -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let name = a.interface_name.as_str();
        if name == "lo" || name.starts_with("veth") || name.starts_with("cni") || name.starts_with("crilet") {
            continue;
        }
        if !a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP) {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Some(sin.ip().to_string());
        }
    }
    None
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;

/// A duration as Go's `time.Duration` prints it in a `KubeletConfiguration` (`1m0s`, `10s`,
/// `1h0m0s`, `500ms`).
fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return if ms == 0 { "0s".into() } else { format!("{ms}ms") };
    }
    let (h, m) = (d.as_secs() / 3600, d.as_secs() / 60 % 60);
    let s = d.as_secs_f64() % 60.0;
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

impl Settings {
    /// The kubelet API's `/configz`: crilet's effective settings as the `KubeletConfiguration`
    /// fields they stand for (`cli::kubelet_config` maps the same names the other way), under
    /// `kubeletconfig` as the kubelet serves it. Only what crilet has a setting for is there.
    pub(crate) fn configz(&self, cgroup_driver: crilet::cgroup::CgroupDriver) -> serde_json::Value {
        use serde_json::{Value, json};
        let mut c = serde_json::Map::new();
        let mut set = |k: &str, v: Value| {
            c.insert(k.to_string(), v);
        };
        set("enableServer", json!(self.cluster.is_some()));
        set("staticPodPath", json!(self.manifest_dir));
        set("podLogsDir", json!(self.pod_logs_dir));
        set("containerRuntimeEndpoint", json!(self.runtime_endpoint));
        set("imageServiceEndpoint", json!(self.image_endpoint));
        set("cgroupDriver", json!(cgroup_driver.as_str()));
        set("seccompDefault", json!(self.seccomp_default));
        set("clusterDomain", json!(self.dns.cluster_domain));
        set("clusterDNS", json!(self.dns.cluster_dns.iter().map(ToString::to_string).collect::<Vec<_>>()));
        set(
            "resolvConf",
            json!(self.dns.resolv_conf.as_ref().map_or(String::new(), |p| p.display().to_string())),
        );
        set("containerLogMaxSize", json!(format!("{}Ki", self.log_rotation.max_size / 1024)));
        set("containerLogMaxFiles", json!(self.log_rotation.max_files));
        set("containerLogMonitorInterval", json!(go_duration(self.log_rotation.monitor_interval)));
        if let Some((grace, critical)) = self.shutdown {
            set("shutdownGracePeriod", json!(go_duration(grace)));
            set("shutdownGracePeriodCriticalPods", json!(go_duration(critical)));
        }
        let gc = &self.image_gc;
        set("imageGCHighThresholdPercent", json!(gc.high_percent));
        set("imageGCLowThresholdPercent", json!(gc.low_percent));
        set("imageMinimumGCAge", json!(go_duration(gc.min_age)));
        set("imageMaximumGCAge", json!(go_duration(gc.max_age.unwrap_or_default())));
        set("volumeStatsAggPeriod", json!(go_duration(self.volume_stats_agg_period)));
        // The eviction maps as the kubelet's configz writes them (signal: "100Mi" / "10%").
        let value = |v: crilet::eviction::threshold::Value| match v {
            crilet::eviction::threshold::Value::Amount(a) => a.to_string(),
            crilet::eviction::threshold::Value::Fraction(f) => format!("{}%", (f64::from(f) * 100.0).round()),
        };
        let (mut hard, mut soft, mut grace, mut reclaim) =
            (serde_json::Map::new(), serde_json::Map::new(), serde_json::Map::new(), serde_json::Map::new());
        for t in &self.eviction.thresholds {
            let signal = t.signal.as_str().to_string();
            if t.is_hard() {
                hard.insert(signal.clone(), json!(value(t.value)));
            } else {
                soft.insert(signal.clone(), json!(value(t.value)));
                grace.insert(signal.clone(), json!(go_duration(t.grace_period)));
            }
            if let Some(r) = t.min_reclaim {
                reclaim.insert(signal, json!(value(r)));
            }
        }
        set("evictionHard", Value::Object(hard));
        set("evictionSoft", Value::Object(soft));
        set("evictionSoftGracePeriod", Value::Object(grace));
        set("evictionMinimumReclaim", Value::Object(reclaim));
        set("evictionPressureTransitionPeriod", json!(go_duration(self.eviction.transition_period)));
        set("evictionMaxPodGracePeriod", json!(self.eviction.max_pod_grace_period.as_secs()));
        match self.metrics_bind_address.as_deref().and_then(|a| a.rsplit_once(':')) {
            Some((host, port)) => {
                set("healthzBindAddress", json!(host.trim_start_matches('[').trim_end_matches(']')));
                set("healthzPort", json!(port.parse::<u16>().unwrap_or(0)));
            }
            None => set("healthzPort", json!(0)),
        }
        if let Some(cl) = &self.cluster {
            let cfg = &cl.config;
            set("address", json!(cfg.node_ip));
            set("port", json!(cfg.port));
            set("maxPods", json!(cfg.max_pods));
            set("syncFrequency", json!(go_duration(cl.sync_frequency)));
            set("kubeAPIQPS", json!(cfg.api_limit.qps));
            set("kubeAPIBurst", json!(cfg.api_limit.burst));
            set("eventRecordQPS", json!(cfg.event_limit.qps));
            set("eventBurst", json!(cfg.event_limit.burst));
            set("rotateCertificates", json!(cfg.rotate_certificates));
            set(
                "serverTLSBootstrap",
                json!(matches!(cl.serving, crilet::cluster::serving_cert::Source::Csr)),
            );
            if let crilet::cluster::serving_cert::Source::Files { cert, key } = &cl.serving {
                set("tlsCertFile", json!(cert));
                set("tlsPrivateKeyFile", json!(key));
            }
            let ca = cl.client_ca_file.as_ref().map_or(String::new(), |p| p.display().to_string());
            set(
                "authentication",
                json!({
                    "x509": {"clientCAFile": ca},
                    "webhook": {"enabled": true, "cacheTTL": "2m0s"},
                    "anonymous": {"enabled": false}
                }),
            );
            set(
                "authorization",
                json!({"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}}),
            );
        }
        json!({ "kubeletconfig": Value::Object(c) })
    }
}
