//! `crilet preflight`: checks a node before `crilet run` starts on it, against the same settings
//! (`main` resolves the flags, `--config` and the defaults with `run`'s own code and hands them
//! over as a [`Config`]). One line per check — PASS, WARN, FAIL, or SKIP when an earlier failure
//! makes a check meaningless — then a summary; `main` exits non-zero when anything FAILs.
//!
//! This file holds the report and the order of the checks; `runtime` checks the container
//! runtime (CRI) and the host's cgroups, `paths` the directories and the control socket. Every
//! verdict is a pure function of what was observed (the `*_check` functions, table-tested in
//! `preflight_tests.rs`); the I/O that gathers the observations is in the `checks` and `probe_*`
//! functions, each bounded by a timeout so preflight never hangs. Rules the agent enforces come
//! from the agent's own code: the manifest directory is read by `source::load_dir`, exactly as
//! `run` reads it.

mod paths;
mod runtime;
mod stop_signal;

use std::path::PathBuf;
use std::time::Duration;

use super::tabwriter;

/// Deadline of each CRI call.
const CRI_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `GetContainerEvents` is given to be refused. containerd sends the stream's headers
/// only with its first event, so an accepted stream looks like a call that has not answered yet;
/// a runtime without the call refuses it at once.
const EVENTS_WAIT: Duration = Duration::from_secs(1);
/// Deadline of each filesystem check (a hung mount must not hang preflight).
const LOCAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest path a Unix socket address holds (`sun_path` is 108 bytes, NUL included).
const MAX_SOCKET_PATH: usize = 107;

const CONFIG: &str = "config";
const KUBELET_CONFIG: &str = "kubelet-config";
const CRI_ENDPOINT: &str = "cri-endpoint";
const RUNTIME_READY: &str = "runtime-ready";
const NETWORK_READY: &str = "network-ready";
const CRI_EVENTS: &str = "cri-events";
const CGROUPS: &str = "cgroups";
const CGROUP_DRIVER: &str = "cgroup-driver";
const PAUSE_IMAGE: &str = "pause-image";
const STOP_SIGNALS: &str = "stop-signals";
const MANIFEST_DIR: &str = "manifest-dir";
const ROOT_DIR: &str = "root-dir";
const POD_LOGS_DIR: &str = "pod-logs-dir";
const CONTAINER_LOGS_DIR: &str = "container-logs-dir";
const CONTROL_SOCKET: &str = "control-socket";
const API_SERVER: &str = "api-server";
const POD_DNS: &str = "pod-dns";

/// The settings `crilet run` would use, already resolved (flags over `--config` over defaults).
#[derive(Debug, Clone)]
pub struct Config {
    pub runtime_endpoint: String,
    pub image_endpoint: String,
    pub manifest_dir: PathBuf,
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// `None` when the legacy `/var/log/containers` symlinks are turned off.
    pub container_logs_dir: Option<PathBuf>,
    pub control_socket: PathBuf,
    pub node_name: String,
    /// The sysctls pods may set (static pods setting others are manifest errors).
    pub sysctls: crate::sysctl::Allowlist,
    /// The `--config` file the settings were read from, if any.
    pub config_file: Option<PathBuf>,
    /// What crilet took from and ignored in `--config`, when that file is the kubelet's
    /// `KubeletConfiguration`.
    pub kubelet_config: Option<super::kubelet_config::Report>,
    /// Cluster mode: the `--kubeconfig`, if any.
    pub kubeconfig: Option<PathBuf>,
    /// `--cgroup-driver`, if given.
    pub cgroup_driver: Option<crate::cgroup::CgroupDriver>,
    /// `--cluster-dns`, `--cluster-domain`, `--resolv-conf`.
    pub dns: crate::dns::DnsSettings,
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
    /// Not run: an earlier check failed in a way that makes this one meaningless.
    Skip,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub verdict: Verdict,
    /// Short, stable name (`cri-endpoint`, `manifest-dir`, ...).
    pub name: &'static str,
    pub detail: String,
}

impl Check {
    fn new(verdict: Verdict, name: &'static str, detail: impl Into<String>) -> Self {
        Self { verdict, name, detail: detail.into() }
    }
    fn pass(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(Verdict::Pass, name, detail)
    }
    fn warn(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(Verdict::Warn, name, detail)
    }
    fn fail(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(Verdict::Fail, name, detail)
    }
    fn skip(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(Verdict::Skip, name, detail)
    }
}

/// Every check, in the order they are printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    /// The report when the settings themselves cannot be resolved (an unreadable `--config`).
    pub fn config_error(error: &str) -> Self {
        Self { checks: vec![Check::fail(CONFIG, error)] }
    }

    /// True when no check failed (warnings do not count).
    pub fn passed(&self) -> bool {
        !self.checks.iter().any(|c| c.verdict == Verdict::Fail)
    }

    /// Aligned `VERDICT  name  detail` lines and the summary line.
    pub fn render(&self) -> String {
        let mut table = String::new();
        for c in &self.checks {
            // The detail is the last cell; a tab or newline in an error message would break it.
            let detail = c.detail.replace(['\t', '\n'], " ");
            table.push_str(&format!("{}\t{}\t{}\n", c.verdict.label(), c.name, detail));
        }
        let mut out = tabwriter::align(&table, tabwriter::DESCRIBE);
        let count = |v: Verdict| self.checks.iter().filter(|c| c.verdict == v).count();
        out.push_str(&format!(
            "preflight: {} passed, {} warnings, {} failures",
            count(Verdict::Pass),
            count(Verdict::Warn),
            count(Verdict::Fail)
        ));
        if count(Verdict::Skip) > 0 {
            out.push_str(&format!(", {} skipped", count(Verdict::Skip)));
        }
        out.push('\n');
        out
    }
}

/// Runs every check against `cfg`. Never panics and never waits longer than the timeouts above.
pub async fn run(cfg: &Config) -> Report {
    let mut checks = Vec::new();
    if let Some(path) = &cfg.config_file {
        checks.push(Check::pass(CONFIG, format!("{} read", path.display())));
    }
    if let Some(report) = &cfg.kubelet_config {
        checks.extend(kubelet_config_checks(report));
    }
    checks.extend(runtime::checks(cfg).await);
    checks.extend(paths::checks(cfg).await);
    let (dns, cluster) = (cfg.dns.clone(), cfg.kubeconfig.is_some());
    checks.push(
        crate::blocking(move || Ok(pod_dns_check(&dns, cluster)))
            .await
            .unwrap_or_else(|e| Check::fail(POD_DNS, format!("checking the host's resolver file: {e}"))),
    );
    if let Some(kubeconfig) = &cfg.kubeconfig {
        checks.push(api_server_check(kubeconfig, &cfg.node_name).await);
    }
    Report { checks }
}

/// The pods' DNS settings, and the host's resolver file every pod's is formed from (read as a
/// sandbox's is; blocks). Unusable, it fails every sandbox: FAIL. Over the kubelet's limits (its
/// `CheckLimitsForResolvConf`), or a cluster node without `--cluster-dns` (its ClusterFirst
/// pods fall back to the host's resolver): WARN.
pub(crate) fn pod_dns_check(dns: &crate::dns::DnsSettings, cluster: bool) -> Check {
    let host = match &dns.resolv_conf {
        None => "no host resolver file (Default pods resolve through the node)".to_string(),
        Some(path) => match crate::dns::read_host(dns) {
            Ok(h) => format!(
                "{}: {} nameserver(s), {} search domain(s)",
                path.display(),
                h.servers.len(),
                h.searches.len()
            ),
            Err(e) => {
                return Check::fail(
                    POD_DNS,
                    format!("{}: every pod's sandbox would fail", crate::error_chain(&e)),
                );
            }
        },
    };
    if let Some(problem) = crate::dns::check_host(dns) {
        return Check::warn(POD_DNS, problem);
    }
    let cluster_dns: Vec<String> = dns.cluster_dns.iter().map(ToString::to_string).collect();
    match (cluster_dns.is_empty(), cluster) {
        (true, true) => Check::warn(
            POD_DNS,
            format!(
                "{host}; no --cluster-dns: ClusterFirst pods fall back to the host's resolver (MissingClusterDNS)"
            ),
        ),
        (true, false) => {
            Check::pass(POD_DNS, format!("{host}; no cluster DNS: ClusterFirst pods use the host's resolver"))
        }
        (false, _) => Check::pass(
            POD_DNS,
            format!(
                "{host}; ClusterFirst pods: {} (domain {:?})",
                cluster_dns.join(", "),
                dns.cluster_domain
            ),
        ),
    }
}

/// A `KubeletConfiguration` as `--config`: one PASS line naming what crilet takes from it (the
/// kubelet's field and crilet's flag), then one line per field it ignores, with what the node
/// does instead. A node operator reads what would change if crilet replaced the kubelet. An
/// ignored field is a WARN, called out as security when it is; one that would leave the node
/// weaker than the file asks is a FAIL, as `crilet run` refuses it (see `kubelet_config`).
pub(crate) fn kubelet_config_checks(report: &super::kubelet_config::Report) -> Vec<Check> {
    use super::kubelet_config::Impact;
    let taken: Vec<String> = report.taken.iter().map(|t| format!("{} (--{})", t.field, t.flag)).collect();
    let taken = if taken.is_empty() { "nothing".to_string() } else { taken.join(", ") };
    let mut checks = vec![Check::pass(
        KUBELET_CONFIG,
        format!("KubeletConfiguration: takes {taken}; {} field(s) ignored", report.ignored.len()),
    )];
    for i in &report.ignored {
        let line = |what: &str| format!("{}: {} {what}: {}", i.field, i.value, i.why);
        checks.push(match i.impact {
            Impact::Behaviour => Check::warn(KUBELET_CONFIG, line("ignored")),
            Impact::Stricter => Check::warn(KUBELET_CONFIG, line("ignored (security: crilet is stricter)")),
            Impact::Weaker => Check::fail(
                KUBELET_CONFIG,
                line("not enforced (security: the node would be weaker than asked; crilet run refuses it)"),
            ),
        });
    }
    checks
}

/// Cluster mode: the kubeconfig loads and the API server accepts its credentials. An API server
/// that does not answer is a warning (the agent starts and retries), a wrong kubeconfig a FAIL.
async fn api_server_check(kubeconfig: &std::path::Path, node: &str) -> Check {
    use crate::cluster::connect::{self, Identity};
    let client = match connect::client(kubeconfig).await {
        Ok(c) => c,
        Err(e) => return Check::fail(API_SERVER, e.to_string()),
    };
    let who = tokio::time::timeout(CRI_TIMEOUT, connect::whoami(&client)).await;
    let file = kubeconfig.display();
    match who {
        Ok(Identity::User(user)) => api_identity_check(&user, node, &file.to_string()),
        Ok(Identity::Refused(reason)) => Check::fail(API_SERVER, format!("kubeconfig {file}: {reason}")),
        Ok(Identity::Unreachable(reason)) => Check::warn(
            API_SERVER,
            format!("unreachable ({reason}); the agent runs static pods and retries with back-off"),
        ),
        Err(_) => Check::warn(
            API_SERVER,
            format!("no answer within {}s; the agent runs static pods and retries", CRI_TIMEOUT.as_secs()),
        ),
    }
}

/// The verdict on the user the API server sees for the kubeconfig.
pub(crate) fn api_identity_check(user: &str, node: &str, file: &str) -> Check {
    let expected = format!("system:node:{node}");
    if user == expected {
        Check::pass(API_SERVER, format!("authenticated as {user} ({file})"))
    } else {
        Check::warn(
            API_SERVER,
            format!(
                "authenticated as {user}, not {expected}: the Node authorizer limits a node to its own objects"
            ),
        )
    }
}

/// A blocking probe on the blocking pool, given [`LOCAL_TIMEOUT`] at most.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    match tokio::time::timeout(LOCAL_TIMEOUT, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Err(_) => Err(format!("{what} took longer than {}s (a hung filesystem?)", LOCAL_TIMEOUT.as_secs())),
    }
}

/// A filesystem check whose probe and verdict run on the blocking pool.
async fn local(name: &'static str, f: impl FnOnce() -> Check + Send + 'static) -> Check {
    blocking(&format!("checking {name}"), f).await.unwrap_or_else(|e| Check::fail(name, e))
}

#[cfg(test)]
#[path = "preflight_tests.rs"]
mod tests;
