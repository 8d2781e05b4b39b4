//! The `crilet` binary: `crilet run` is the node agent; `crilet preflight` checks the node with
//! the same settings; every other subcommand is a client of its control socket (or reads the
//! log files).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use crilet::cri::CriClient;
use crilet::pleg::{self, Wakers};
use crilet::pod::context::PodContext;
use crilet::pod::spec::{HostDns, NodeConfig};
use crilet::pod::supervisor::Supervisor;
use crilet::registry::Registry;
use crilet::source;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

#[derive(Parser)]
#[command(
    name = "crilet",
    version,
    about = "A kubelet-faithful node agent for static pods on containerd (CRI)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node agent.
    Run(RunArgs),
    /// Check the node before running the agent (same flags as `run`); exits 1 if a check fails.
    Preflight(RunArgs),
    /// Check manifest files or directories as the agent would, without an agent; exits 1 on
    /// an error.
    Validate(crilet::cli::validate::ValidateArgs),
    #[command(flatten)]
    Client(crilet::cli::CliCommand),
}

/// `crilet run` settings; every flag can also come from `--config` (same names, YAML).
#[derive(Args, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
struct RunArgs {
    /// CRI runtime endpoint [default: unix:///run/containerd/containerd.sock]
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    /// CRI image endpoint [default: the runtime endpoint]
    #[arg(long)]
    image_service_endpoint: Option<String>,
    /// Directory of Pod manifests [default: /etc/crilet/manifests]
    #[arg(long)]
    pod_manifest_path: Option<PathBuf>,
    /// Agent state directory [default: /var/lib/crilet]
    #[arg(long)]
    root_dir: Option<PathBuf>,
    /// Container logs directory [default: /var/log/pods]
    #[arg(long)]
    pod_logs_dir: Option<PathBuf>,
    /// Where the kubelet's legacy per-container log symlinks go; "" for none
    /// [default: /var/log/containers]
    #[arg(long)]
    container_logs_dir: Option<String>,
    /// The agent's control socket [default: /run/crilet/crilet.sock]
    #[arg(long)]
    control_socket: Option<PathBuf>,
    /// Node name [default: the hostname]
    #[arg(long)]
    node_name: Option<String>,
    /// Rotate a container's log file once it reaches this size (a quantity) [default: 10Mi]
    #[arg(long)]
    container_log_max_size: Option<String>,
    /// Log files kept per container, the current one included (2 or more) [default: 5]
    #[arg(long)]
    container_log_max_files: Option<i64>,
    /// How often container logs are checked for rotation (e.g. 10s, 500ms) [default: 10s]
    #[arg(long)]
    container_log_monitor_interval: Option<String>,
    /// Serve Prometheus /metrics and /healthz over plain HTTP on HOST:PORT (use a loopback
    /// address); empty for none [default: none]
    #[arg(long)]
    metrics_bind_address: Option<String>,
    /// Join the cluster this kubeconfig names, as node --node-name; without it, static pods
    /// only [default: none]
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The Node's InternalIP; the kubelet API binds to it [default: the host's first
    /// non-loopback address]
    #[arg(long)]
    node_ip: Option<String>,
    /// Labels added to the Node, k=v,k2=v2 [default: none]
    #[arg(long)]
    node_labels: Option<String>,
    /// The Node's pods capacity; admission refuses more (OutOfpods) [default: 110]
    #[arg(long)]
    max_pods: Option<u32>,
    /// The kubelet API's port (TLS) [default: 10250]
    #[arg(long)]
    port: Option<u16>,
    /// The kubelet API's serving certificate (PEM) [default: none]
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// The kubelet API's serving key (PEM) [default: none]
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// CA for client certificates on the kubelet API [default: none]
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// How often running API pods' ConfigMap, Secret and downward-API volumes are refreshed
    /// (the kubelet's sync frequency) [default: 1m]
    #[arg(long)]
    sync_frequency: Option<String>,
    /// API requests a second the node makes for pods, statuses and mirror pods (the heartbeat
    /// is not limited); 0 for no limit [default: 50]
    #[arg(long)]
    kube_api_qps: Option<u32>,
    /// API requests the node may make at once above --kube-api-qps [default: 100]
    #[arg(long)]
    kube_api_burst: Option<u32>,
    /// Events a second the node sends; 0 for no limit [default: 50]
    #[arg(long)]
    event_qps: Option<u32>,
    /// Events the node may send at once above --event-qps [default: 100]
    #[arg(long)]
    event_burst: Option<u32>,
    /// A YAML file holding the same settings (flags win)
    #[arg(long)]
    #[serde(skip)]
    config: Option<PathBuf>,
}

impl RunArgs {
    /// Flags over the config file over the defaults.
    fn resolve(mut self) -> anyhow::Result<Settings> {
        if let Some(path) = self.config.clone() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading config {}", path.display()))?;
            let file: RunArgs = serde_yaml_ng::from_str(&text)
                .with_context(|| format!("parsing config {}", path.display()))?;
            self.container_runtime_endpoint =
                self.container_runtime_endpoint.or(file.container_runtime_endpoint);
            self.image_service_endpoint = self.image_service_endpoint.or(file.image_service_endpoint);
            self.pod_manifest_path = self.pod_manifest_path.or(file.pod_manifest_path);
            self.root_dir = self.root_dir.or(file.root_dir);
            self.pod_logs_dir = self.pod_logs_dir.or(file.pod_logs_dir);
            self.container_logs_dir = self.container_logs_dir.or(file.container_logs_dir);
            self.control_socket = self.control_socket.or(file.control_socket);
            self.node_name = self.node_name.or(file.node_name);
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
        }
        let runtime = self
            .container_runtime_endpoint
            .unwrap_or_else(|| "unix:///run/containerd/containerd.sock".into());
        let node_name = match self.node_name {
            Some(n) => n,
            None => crilet::node::default_node_name().context("reading the hostname for --node-name")?,
        };
        let root_dir: PathBuf = self.root_dir.clone().unwrap_or_else(|| "/var/lib/crilet".into());
        let node_ip = match self.node_ip.filter(|ip| !ip.is_empty()) {
            Some(ip) => {
                ip.parse::<std::net::IpAddr>()
                    .with_context(|| format!("--node-ip {ip:?} is not an IP address"))?;
                Some(ip)
            }
            None => None,
        };
        let sync_text = self.sync_frequency.as_deref().unwrap_or("1m");
        let sync_frequency =
            crilet::logrotate::plan::parse_go_duration(sync_text).filter(|d| !d.is_zero()).with_context(
                || format!("--sync-frequency {sync_text:?} is not a positive duration (e.g. 1m, 10s)"),
            )?;
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
                    },
                    sync_frequency,
                    tls_cert_file: self.tls_cert_file,
                    tls_private_key_file: self.tls_private_key_file,
                    client_ca_file: self.client_ca_file,
                })
            }
        };
        Ok(Settings {
            cluster,
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

/// A rate limit from its two flags (the kubelet's defaults, 50 and 100, where unset). A burst
/// of 0 would let nothing through: refused.
fn limit(
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

/// Cluster mode's settings (`--kubeconfig` given).
struct ClusterSettings {
    config: crilet::cluster::ClusterConfig,
    /// How often API volumes are refreshed.
    sync_frequency: Duration,
    tls_cert_file: Option<PathBuf>,
    tls_private_key_file: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
}

struct Settings {
    cluster: Option<ClusterSettings>,
    /// `--node-ip`, if given (the pods' hostIP; the Node's InternalIP).
    node_ip: Option<String>,
    runtime_endpoint: String,
    image_endpoint: String,
    manifest_dir: PathBuf,
    root_dir: PathBuf,
    pod_logs_dir: PathBuf,
    container_logs_dir: Option<PathBuf>,
    control_socket: PathBuf,
    node_name: String,
    /// `HOST:PORT` of /metrics and /healthz, if any.
    metrics_bind_address: Option<String>,
    log_rotation: crilet::logrotate::Policy,
}

/// The node's primary IPv4 address: the first non-loopback address of an interface that is up
/// and is not a container bridge or veth.
fn host_ip() -> Option<String> {
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

/// Waits until the runtime answers `Version` and reports ready, saying clearly what is wrong.
async fn wait_for_runtime(
    cri: &CriClient,
    endpoint: &str,
    cancel: &CancellationToken,
) -> Option<crilet::cri::RuntimeInfo> {
    let mut delay = Duration::from_millis(500);
    loop {
        match cri.version().await {
            Ok(v) => match cri.check_ready().await {
                Ok(()) => {
                    info!(runtime = %v.name, version = %v.version, api = %v.api_version, endpoint, "container runtime is ready");
                    return Some(v);
                }
                Err(e) => warn!(error = %e, "container runtime is not ready yet; waiting"),
            },
            Err(e) => {
                warn!(endpoint, error = %e, "container runtime is not reachable; waiting (is containerd running?)")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// The long-lived loops `run_agent` waits for when the agent stops (see [`crilet::tasks`]).
const RELIST: &str = "relist";
const CONTROL_API: &str = "control API";

async fn run_agent(args: RunArgs) -> anyhow::Result<()> {
    let s = args.resolve()?;
    let cancel = CancellationToken::new();
    let service = crilet::systemd::Notifier::from_env();
    let registry = Registry::default();
    let tasks = crilet::tasks::Tasks::start(registry.clone(), cancel.clone());
    {
        let cancel = cancel.clone();
        let service = service.clone();
        tasks.spawn("signal handler", async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) =
                (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
            else {
                return;
            };
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            info!("stopping the agent; containers keep running");
            service.stopping();
            cancel.cancel();
        });
    }
    std::fs::create_dir_all(&s.root_dir).with_context(|| format!("creating {}", s.root_dir.display()))?;
    std::fs::create_dir_all(&s.pod_logs_dir)
        .with_context(|| format!("creating {}", s.pod_logs_dir.display()))?;

    // Bound before anything else waits, so a bad address stops the agent at once; /healthz
    // answers (500) while the runtime is awaited.
    // The agent's one set of metrics, handed to everything that records.
    let metrics = std::sync::Arc::new(crilet::metrics::Metrics::new());
    if let Some(address) = &s.metrics_bind_address {
        let listener = crilet::metrics::server::bind(address)?;
        tasks.spawn(
            "metrics server",
            crilet::metrics::server::serve(listener, registry.clone(), metrics.clone(), cancel.clone()),
        );
    }
    // A kubeconfig that cannot work stops the agent before anything runs; an API server that
    // is not there yet does not.
    let link = match &s.cluster {
        Some(c) => Some(crilet::cluster::connect(&c.config, &registry).await?),
        None => None,
    };
    let cri = CriClient::new(&s.runtime_endpoint, &s.image_endpoint)
        .context("configuring the CRI client")?
        .with_status_cache()
        .with_observer(metrics.clone());
    service.starting("waiting for the runtime");
    let Some(runtime) = wait_for_runtime(&cri, &s.runtime_endpoint, &cancel).await else { return Ok(()) };

    let host_dns =
        std::fs::read_to_string("/etc/resolv.conf").map(|t| HostDns::parse(&t)).unwrap_or_default();
    let node = NodeConfig {
        root_dir: s.root_dir.clone(),
        pod_logs_dir: s.pod_logs_dir.clone(),
        container_logs_dir: s.container_logs_dir.clone(),
        node_name: s.node_name.clone(),
        host_ip: s.node_ip.clone().or_else(host_ip),
        host_dns,
    };
    // What the node's pods hold: admission and resizes count from the same ledger.
    let ledger = crilet::ledger::Ledger::default();
    let ctx = match (&link, &s.cluster) {
        (Some(link), Some(c)) => {
            let objects = std::sync::Arc::new(crilet::volumes::KubeObjects::new(link.client.clone()));
            let volumes = crilet::volumes::VolumeManager::new(
                objects,
                &node,
                crilet::cluster::allocatable(&c.config),
                c.sync_frequency,
            );
            PodContext::new_with_volumes(
                cri.clone(),
                node,
                registry.clone(),
                ledger.clone(),
                metrics.clone(),
                std::sync::Arc::new(volumes),
            )
        }
        _ => PodContext::new(cri.clone(), node, registry.clone(), ledger.clone(), metrics.clone()),
    };
    let ctx_volumes = ctx.volumes.clone();
    let pleg_state = std::sync::Arc::new(pleg::PlegState::new(metrics.clone()));
    {
        let info = crilet::api::RuntimeInfo {
            name: runtime.name.clone(),
            version: runtime.version.clone(),
            api_version: runtime.api_version.clone(),
            pleg: pleg_state.clone(),
        };
        let path = s.control_socket.clone();
        let registry = registry.clone();
        let cancel = cancel.clone();
        tasks.spawn(CONTROL_API, async move {
            if let Err(e) = crilet::api::serve(path, registry, info, cancel.clone()).await {
                error!("control API: {e:#}");
                cancel.cancel();
            }
        });
    }

    let wakers = Wakers::default();
    tasks.spawn(
        RELIST,
        pleg::run(
            cri.clone(),
            wakers.clone(),
            pleg_state.clone(),
            registry.clone(),
            ctx.runtime_uids.clone(),
            cancel.clone(),
        ),
    );
    tasks.spawn("pod cgroup sweep", crilet::pod::cgroups::sweep_periodically(cri.clone(), cancel.clone()));
    tasks.spawn(
        "log rotation",
        crilet::logrotate::run(cri.clone(), s.pod_logs_dir.clone(), s.log_rotation, cancel.clone()),
    );
    tasks.spawn(
        "runtime event stream",
        pleg::follow_events(cri.clone(), wakers.clone(), pleg_state.clone(), cancel.clone()),
    );

    // The first scan runs on a thread of its own, never on a runtime worker, and waits a bounded
    // time for each file: a bad file is reported and never holds up the others.
    service.starting("loading manifests");
    let manifests = source::watch_dir(
        s.manifest_dir.clone(),
        s.node_name.clone(),
        Duration::from_secs(20),
        cancel.clone(),
    );
    let Some(manifests) = manifests.await else { return Ok(()) };
    let initial = manifests.borrow().clone();
    info!(dir = %s.manifest_dir.display(), pods = initial.pods.len(), problems = initial.problems.len(), "manifests loaded");
    let mut sup = Supervisor::new(ctx, wakers, cancel.clone());
    let manifests = match (&s.cluster, link) {
        (Some(c), Some(link)) => {
            let runtime_uids = match cri.list_all(Some((crilet::model::keys::MANAGED_BY, "crilet"))).await {
                Ok((sandboxes, _)) => sandboxes
                    .iter()
                    .filter_map(|sb| sb.labels.get(crilet::model::keys::POD_UID).cloned())
                    .collect(),
                Err(e) => {
                    warn!(error = %e, "listing the runtime's pods for cluster mode failed");
                    Default::default()
                }
            };
            let api_client = link.client.clone();
            let (merged, gone) = crilet::cluster::start(
                &tasks,
                link,
                &c.config,
                ctx_volumes.clone().map(|v| (v, c.sync_frequency)),
                cri.clone(),
                format!("{}://{}", runtime.name, runtime.version),
                runtime_uids,
                registry.clone(),
                ledger.clone(),
                manifests,
                cancel.clone(),
            );
            sup = sup.with_api_pods(gone);
            match (&c.tls_cert_file, &c.tls_private_key_file) {
                (Some(cert), Some(key)) => {
                    let ip: std::net::IpAddr =
                        c.config.node_ip.parse().context("--node-ip for the kubelet API")?;
                    let cfg = crilet::kubelet_api::Config {
                        bind: std::net::SocketAddr::new(ip, c.config.port),
                        cert_file: cert.clone(),
                        key_file: key.clone(),
                        client_ca_file: c.client_ca_file.clone(),
                        node_name: c.config.node_name.clone(),
                    };
                    let server =
                        crilet::kubelet_api::bind(cfg, api_client.clone(), registry.clone(), cri.clone())
                            .await?;
                    info!(address = %format!("{ip}:{}", c.config.port), "serving the kubelet API (TLS)");
                    tasks.spawn("kubelet API server", server.serve(cancel.child_token()));
                }
                _ => warn!(
                    "no --tls-cert-file/--tls-private-key-file: the kubelet API (kubectl logs) is not served"
                ),
            }
            merged
        }
        _ => manifests,
    };
    sup.learn_carried(&initial).await;
    sup.apply(&initial);
    service.starting(&crilet::systemd::first_sync(initial.pods.len()));
    sup.reap_orphans(&initial, &s.manifest_dir).await;
    sup.wait_first_syncs(Duration::from_secs(60)).await;
    // Type=notify: ready once the first sync of every pod is done; then STATUS and the watchdog.
    service.ready();
    let view = crilet::systemd::NodeView {
        registry: registry.clone(),
        runtime: format!("{} {}", runtime.name, runtime.version),
        pleg: pleg_state,
    };
    // Without systemd there is nothing to report, and the loop returns at once.
    if service.reports() {
        tasks.spawn("systemd notifier", service.report(view, cancel.clone()));
    }
    info!("first sync done; agent ready");
    sup.run(manifests).await;
    tasks.ended(RELIST).await;
    tasks.ended(CONTROL_API).await;
    crilet::profile::write();
    Ok(())
}

/// `crilet preflight`: the node checks against the settings `run` would use; the exit code.
async fn preflight(args: RunArgs) -> i32 {
    let config_file = args.config.clone();
    let report = match args.resolve() {
        Ok(s) => {
            crilet::cli::preflight::run(&crilet::cli::preflight::Config {
                runtime_endpoint: s.runtime_endpoint,
                image_endpoint: s.image_endpoint,
                manifest_dir: s.manifest_dir,
                root_dir: s.root_dir,
                pod_logs_dir: s.pod_logs_dir,
                container_logs_dir: s.container_logs_dir,
                control_socket: s.control_socket,
                kubeconfig: s.cluster.as_ref().map(|c| c.config.kubeconfig.clone()),
                node_name: s.node_name,
                config_file,
            })
            .await
        }
        Err(e) => crilet::cli::preflight::Report::config_error(&format!("{e:#}")),
    };
    print!("{}", report.render());
    let _ = std::io::Write::flush(&mut std::io::stdout());
    if report.passed() { 0 } else { 1 }
}

/// jemalloc, not glibc's malloc: less memory held at rest (see Cargo.toml).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() {
    {
        use tracing_subscriber::prelude::*;
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,h2=warn,tower=warn,hyper=warn".into());
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter);
        // CRILET_PROFILE=FILE: the span-level profile (the agent's own spans only, never events).
        let profile = crilet::profile::layer().map(|l| {
            l.with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.is_span() && m.target().starts_with("crilet")
            }))
        });
        tracing_subscriber::registry().with(log).with(profile).init();
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_agent(args).await,
        Command::Preflight(args) => std::process::exit(preflight(args).await),
        Command::Validate(args) => std::process::exit(crilet::cli::validate::run(&args)),
        Command::Client(cmd) => {
            if let Err(e) = crilet::cli::run(cmd).await {
                crilet::cli::print_error(&e);
                std::process::exit(1);
            }
            Ok(())
        }
    };
    if let Err(e) = result {
        error!("{e:#}");
        eprintln!("crilet: {e:#}");
        std::process::exit(1);
    }
}
