//! `crilet run`: the agent wired together from its rooms (the runtime client, the PLEG, the
//! pod supervisor, the servers, cluster mode), every long-lived loop owned by `tasks`, and its
//! orderly stop.

use std::time::Duration;

use anyhow::Context;
use crilet::cgroup::CgroupDriver;
use crilet::cri::CriClient;
use crilet::pleg::{self, Wakers};
use crilet::pod::context::WorkerContext;
use crilet::pod::spec::NodeConfig;
use crilet::pod::supervisor::Supervisor;
use crilet::registry::Registry;
use crilet::source;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::config::{RunArgs, host_ip};

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

/// The cgroup driver the agent uses: the runtime's, when it names one through CRI
/// `RuntimeConfig`, else `--cgroup-driver` (the kubelet's `getCgroupDriverFromCRI`: three tries
/// two seconds apart; a runtime without the call leaves the flag in force; any other failure
/// stops the start).
async fn cgroup_driver(cri: &CriClient, flag: Option<CgroupDriver>) -> anyhow::Result<CgroupDriver> {
    use crilet::cgroup::driver::{RuntimeAnswer, resolve};
    let mut answer = RuntimeAnswer::Failed("not asked".into());
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        answer = match cri.cgroup_driver(Duration::from_secs(5)).await {
            Ok(Some(d)) => RuntimeAnswer::Reported(d),
            Ok(None) => RuntimeAnswer::NoLinuxSection,
            Err(e) if e.is_unimplemented() => RuntimeAnswer::Unimplemented,
            Err(e) => {
                answer = RuntimeAnswer::Failed(crilet::error_chain(&e));
                continue;
            }
        };
        break;
    }
    let resolved = resolve(flag, &answer).map_err(anyhow::Error::msg)?;
    if let Some(asked) = resolved.overridden {
        warn!(
            flag = %asked,
            driver = %resolved.driver,
            "--cgroup-driver {asked} is not used: the runtime reports the {} cgroup driver through CRI RuntimeConfig, \
             and the kubelet follows the runtime's",
            resolved.driver
        );
    }
    let why = match answer {
        RuntimeAnswer::Unimplemented => "the runtime does not implement CRI RuntimeConfig",
        RuntimeAnswer::NoLinuxSection => "the runtime's RuntimeConfig has no Linux section",
        _ => "the runtime reports it",
    };
    info!(driver = %resolved.driver, from = resolved.source, why, "cgroup driver");
    Ok(resolved.driver)
}

/// A `KubeletConfiguration` as `--config`: what crilet takes from it, and a warning per field it
/// ignores, never silently. A field that would leave the node weaker than the file asks (see
/// `crilet::cli::kubelet_config::Impact::Weaker`) stops the agent before it starts.
fn log_kubelet_config(report: &crilet::cli::kubelet_config::Report) -> anyhow::Result<()> {
    use crilet::cli::kubelet_config::Impact;
    for t in &report.taken {
        info!(field = %t.field, flag = t.flag, "KubeletConfiguration: taken");
    }
    for i in &report.ignored {
        let security = match i.impact {
            Impact::Behaviour => "no",
            Impact::Stricter => "crilet is stricter",
            Impact::Weaker => "the node would be weaker than asked",
        };
        warn!(field = %i.field, value = %i.value, security, why = i.why, "KubeletConfiguration: field ignored");
    }
    let weaker: Vec<&str> = report.weaker().map(|i| i.field.as_str()).collect();
    if !weaker.is_empty() {
        anyhow::bail!(
            "--config asks for security crilet does not enforce ({}); remove or unset them to run a node \
             that is only as strict as crilet is (`crilet preflight --config FILE` says why)",
            weaker.join(", ")
        );
    }
    Ok(())
}

/// The kubelet API's serving certificate (see `crilet::cluster::serving_cert`); with
/// `--rotate-server-certificates`, its rotation loop is started in `tasks` with `client` (the
/// node's unthrottled one).
async fn serving_slot(
    c: &super::config::ClusterSettings,
    tasks: &crilet::tasks::Tasks,
    client: kube::Client,
    cancel: CancellationToken,
) -> anyhow::Result<crilet::cluster::cert_slot::CertSlot> {
    use crilet::cluster::serving_cert::{self, Source};
    let cfg = &c.config;
    let sans = serving_cert::node_sans(&cfg.hostname, &cfg.node_ip);
    match &c.serving {
        Source::Files { cert, key } => Ok(crilet::kubelet_api::load_pair(cert, key)?),
        Source::SelfSigned => {
            let (dir, host) = (cfg.cert_dir.clone(), cfg.hostname.clone());
            let made = tokio::task::spawn_blocking(move || {
                serving_cert::self_signed(&dir, &host, &sans, std::time::SystemTime::now())
            });
            Ok(made.await.context("making the self-signed serving certificate")??)
        }
        Source::Csr => {
            let slot = serving_cert::csr_slot(&cfg.cert_dir).await?;
            let rotation = crilet::cluster::rotation::Rotation {
                kind: crilet::cluster::certificate::Kind::Serving,
                slot: slot.clone(),
                client,
                node_name: cfg.node_name.clone(),
                sans,
                cert_dir: cfg.cert_dir.clone(),
                bootstrap_kubeconfig: None,
            };
            tasks.spawn("serving certificate rotation", crilet::cluster::rotation::run(rotation, cancel));
            Ok(slot)
        }
    }
}

/// The long-lived loops `run_agent` waits for when the agent stops (see [`crilet::tasks`]).
const RELIST: &str = "relist";
const CONTROL_API: &str = "control API";

pub(crate) async fn run_agent(args: RunArgs) -> anyhow::Result<()> {
    let s = args.resolve()?;
    if let Some(report) = &s.kubelet_config {
        log_kubelet_config(report)?;
    }
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
    let cgroup_driver = cgroup_driver(&cri, s.cgroup_driver).await?;

    let host_ip = s.node_ip.clone().or_else(host_ip);
    let mut dns = s.dns.clone();
    dns.node_ips = host_ip.iter().filter_map(|ip| ip.parse().ok()).collect();
    // The kubelet's CheckLimitsForResolvConf, once at start: each pod's resolver is formed from
    // the file again when its sandbox is made.
    let checked = dns.clone();
    if let Ok(Some(problem)) = crilet::blocking(move || Ok(crilet::dns::check_host(&checked))).await {
        warn!(problem, "the host's resolver file: pods built on it will not get all of it");
    }
    info!(cluster_dns = ?dns.cluster_dns, cluster_domain = %dns.cluster_domain, resolv_conf = ?dns.resolv_conf, "pod DNS");
    let node = NodeConfig {
        root_dir: s.root_dir.clone(),
        pod_logs_dir: s.pod_logs_dir.clone(),
        container_logs_dir: s.container_logs_dir.clone(),
        node_name: s.node_name.clone(),
        host_ip,
        dns,
        cgroup_driver,
        seccomp_default: s.seccomp_default,
    };
    // What the node's pods hold: admission and resizes count from the same ledger.
    let ledger = crilet::ledger::Ledger::default();
    // Cluster mode: the API-backed volumes, env and pull secrets of pods.
    let volumes = match (&link, &s.cluster) {
        (Some(link), Some(c)) => {
            let (objects, services) = crilet::volumes::KubeObjects::new(link.client.clone());
            tasks.spawn("service watch", services);
            let objects = std::sync::Arc::new(objects);
            let volumes = crilet::volumes::VolumeManager::new(
                objects,
                &node,
                crilet::cluster::allocatable(&c.config),
                c.sync_frequency,
            );
            Some(std::sync::Arc::new(volumes))
        }
        _ => None,
    };
    let ctx = WorkerContext::new(
        std::sync::Arc::new(cri.clone()),
        node,
        registry.clone(),
        ledger.clone(),
        metrics.clone(),
        volumes.clone(),
    );
    let stats = crilet::stats::Collector::new(
        cri.clone(),
        ctx.cgroups.clone(),
        registry.clone(),
        s.node_name.clone(),
        s.root_dir.clone(),
        s.pod_logs_dir.clone(),
        s.volume_stats_agg_period,
    );
    let configz = s.configz(cgroup_driver);
    let pleg_state = std::sync::Arc::new(pleg::PlegState::new(metrics.clone()));
    {
        let info = crilet::api::RuntimeInfo {
            name: runtime.name.clone(),
            version: runtime.version.clone(),
            api_version: runtime.api_version.clone(),
            pleg: pleg_state.clone(),
            node_name: s.node_name.clone(),
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
    // The QoS parents exist with their values before any pod's cgroup (the kubelet's node
    // allocatable cgroup and QoS container manager); under systemd a failure is the first pod's
    // to report again.
    let (cpu_milli, memory) = crilet::node::capacity();
    let node_allocatable =
        crilet::cgroup::NodeAllocatable { cpu_milli, memory, pids: crilet::node::max_pids() };
    if let Err(e) = ctx.cgroups.ensure_qos(&crilet::cgroup::qos::values(node_allocatable, 0)).await {
        error!(error = %e, "making the QoS cgroups failed");
    }
    tasks.spawn(
        "QoS cgroups",
        crilet::pod::cgroups::keep_qos(ctx.cgroups.clone(), ledger.clone(), node_allocatable, cancel.clone()),
    );
    tasks.spawn(
        "pod cgroup sweep",
        crilet::pod::cgroups::sweep_periodically(ctx.exec.cri.clone(), ctx.cgroups.clone(), cancel.clone()),
    );
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
        s.sysctls.clone(),
        Duration::from_secs(20),
        cancel.clone(),
    );
    let Some((manifests, manifest_watch)) = manifests.await else { return Ok(()) };
    tasks.spawn("manifest watch", manifest_watch);
    let initial = manifests.borrow().clone();
    info!(dir = %s.manifest_dir.display(), pods = initial.pods.len(), problems = initial.problems.len(), "manifests loaded");
    // Node-pressure eviction: the manager reads the signals every 10 s, publishes the
    // pressure conditions (the Node's status and admission follow them) and has the supervisor
    // evict pods. Under disk pressure, unused images go first (`DiskReclaim`, the same image
    // garbage collection as its own loop below).
    let image_gc = crilet::images::ImageGc::new(cri.clone(), registry.clone(), s.image_gc);
    let (pressure_tx, pressure) = tokio::sync::watch::channel(crilet::eviction::Pressure::new());
    let (evict_tx, evict_rx) = tokio::sync::mpsc::channel(1);
    let eviction = crilet::eviction::Manager {
        config: s.eviction.clone(),
        signals: crilet::eviction::host::HostSignals {
            cgroups: ctx.cgroups.clone(),
            root_dir: s.root_dir.clone(),
            cri: Some(cri.clone()),
        },
        reclaim: DiskReclaim(image_gc.clone()),
        registry: registry.clone(),
        recorder: ctx.exec.rec.clone(),
        node: ctx.node.clone(),
        evict: evict_tx,
        pressure: pressure_tx,
    };
    tasks.spawn("eviction manager", eviction.run(cancel.clone()));
    let mut sup = Supervisor::new(ctx, wakers, cancel.clone()).with_evictions(evict_rx);
    // Graceful node shutdown: logind's signal stops the pods through the supervisor; the Node
    // is not ready meanwhile.
    let (shutting_down_tx, shutting_down) = tokio::sync::watch::channel(false);
    if let Some((grace, critical)) = s.shutdown {
        let (requests, requested) = tokio::sync::mpsc::channel(1);
        sup = sup.with_shutdown(requested);
        tasks.spawn(
            "graceful node shutdown",
            crilet::systemd::logind::run(grace, critical, requests, shutting_down_tx, cancel.clone()),
        );
    }
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
            // The runtime's KEP-3619 support, for the Node's status.features and the admission
            // of Strict pods (the kubelet reads it from the same CRI Status answer).
            let groups_policy = match cri.runtime_status(false, Duration::from_secs(10)).await {
                Ok(s) => s.features.is_some_and(|f| f.supplemental_groups_policy),
                Err(e) => {
                    warn!(error = %e, "CRI Status failed; supplementalGroupsPolicy: Strict pods will be refused");
                    false
                }
            };
            let api_client = link.client.clone();
            let api_heartbeat = link.heartbeat.clone();
            let (merged, gone) = crilet::cluster::start(
                &tasks,
                link,
                &c.config,
                volumes.clone().map(|v| (v, c.sync_frequency)),
                cri.clone(),
                format!("{}://{}", runtime.name, runtime.version),
                groups_policy,
                runtime_uids,
                registry.clone(),
                ledger.clone(),
                manifests,
                shutting_down,
                pressure,
                cancel.clone(),
            );
            sup = sup.with_api_pods(gone);
            let serving = serving_slot(c, &tasks, api_heartbeat, cancel.clone()).await?;
            let ip: std::net::IpAddr = c.config.node_ip.parse().context("--node-ip for the kubelet API")?;
            let cfg = crilet::kubelet_api::Config {
                bind: std::net::SocketAddr::new(ip, c.config.port),
                serving,
                client_ca_file: c.client_ca_file.clone(),
                node_name: c.config.node_name.clone(),
                configz,
            };
            // The stats the kubelet API serves keep the runtime's numbers and the disks' warm.
            tasks.spawn("stats housekeeping", stats.clone().housekeeping(cancel.child_token()));
            let server =
                crilet::kubelet_api::bind(cfg, api_client.clone(), registry.clone(), cri.clone(), stats)
                    .await?;
            info!(address = %format!("{ip}:{}", c.config.port), "serving the kubelet API (TLS)");
            tasks.spawn("kubelet API server", server.serve(cancel.child_token()));
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
    // Image garbage collection starts once the first syncs are done, so the images the node's
    // pods run from are in use when it first looks (the kubelet starts it before its pods).
    tasks.spawn("image garbage collection", image_gc.run(cancel.clone()));
    info!("first sync done; agent ready");
    sup.run(manifests).await;
    tasks.ended(RELIST).await;
    tasks.ended(CONTROL_API).await;
    crilet::profile::write();
    Ok(())
}

/// The eviction manager's disk reclaim: unused images, as the kubelet's `DeleteUnusedImages`.
/// The eviction manager's node-level disk reclaim: image garbage collection's
/// `DeleteUnusedImages` (the kubelet also deletes every dead container first; crilet's pods keep
/// their newest dead instance, see README).
struct DiskReclaim(crilet::images::ImageGc);

impl crilet::eviction::Reclaim for DiskReclaim {
    async fn free_disk(&self) {
        match self.0.delete_unused().await {
            Ok(freed) => info!(freed, "disk pressure: unused images removed"),
            Err(e) => warn!(error = %e, "disk pressure: removing unused images failed"),
        }
    }
}
