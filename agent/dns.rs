//! Pod DNS, as the kubelet forms it (`pkg/kubelet/network/dns`): the resolver configuration a
//! pod's sandbox gets from its `dnsPolicy`, its `dnsConfig`, the node's `--cluster-dns`,
//! `--cluster-domain` and the host's resolver file (`--resolv-conf`). [`form`] is pure and
//! returns the warnings the kubelet would record as events; the caller records them (the pod
//! worker, at sandbox creation). Reading the host's file ([`read_host`]) blocks: it runs on the
//! blocking pool, once per use, as the kubelet reads it for every sandbox config it makes.

use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig};

use crate::cri::api;

/// The kubelet's limits on a pod's resolver (`pkg/apis/core/validation`): glibc reads at most 3
/// nameservers; the search line holds at most 32 domains and 2048 characters.
pub const MAX_NAMESERVERS: usize = 3;
pub const MAX_SEARCH_PATHS: usize = 32;
pub const MAX_SEARCH_LINE_CHARS: usize = 2048;
/// A longer search path makes some resolvers (glibc 2.28) abort: the kubelet drops it.
const MAX_SEARCH_PATH_CHARS: usize = 253;
/// The most of the host's resolver file the kubelet reads.
const MAX_RESOLV_CONF_BYTES: u64 = 10 << 20;
/// The options a ClusterFirst pod gets (the kubelet's `defaultDNSOptions`).
const CLUSTER_OPTIONS: &[&str] = &["ndots:5"];

/// The node's DNS settings: `--cluster-dns`, `--cluster-domain`, `--resolv-conf`.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsSettings {
    /// The cluster DNS servers ClusterFirst pods use; empty: ClusterFirst falls back to Default.
    pub cluster_dns: Vec<IpAddr>,
    /// The cluster's domain (`cluster.local`); empty: no cluster search domains.
    pub cluster_domain: String,
    /// The host's resolver file, the base of every pod's; `None` (`--resolv-conf ""`): none,
    /// and Default pods resolve through the node itself (127.0.0.1 / ::1).
    pub resolv_conf: Option<PathBuf>,
    /// The node's IPs, for the loopback nameserver of that last case.
    pub node_ips: Vec<IpAddr>,
}

impl Default for DnsSettings {
    /// The kubelet's defaults: no cluster DNS, no domain, `/etc/resolv.conf`.
    fn default() -> Self {
        Self {
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: Some("/etc/resolv.conf".into()),
            node_ips: Vec::new(),
        }
    }
}

/// Name servers, search domains and options of the host's resolver file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostDns {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

/// The host's resolver file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("reading the host's resolver file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing the host's resolver file {path}: {message}")]
    Parse { path: String, message: String },
}

impl HostDns {
    /// Parses resolv.conf text as the kubelet does (`parseResolvConf`): `nameserver` lines
    /// accumulate; the last `search` line wins, without `.` and trailing dots (so a domain
    /// counts once against the limits); `options` accumulate, a later one replacing an earlier
    /// one of the same name. A `nameserver` line with no address is an error, as upstream.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut dns = HostDns::default();
        let mut empty_nameservers = 0;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => match words.next() {
                    Some(ns) => dns.servers.push(ns.to_string()),
                    None => empty_nameservers += 1,
                },
                Some("search") => {
                    dns.searches =
                        words.filter(|s| *s != ".").map(|s| s.trim_end_matches('.').to_string()).collect();
                }
                Some("options") => {
                    for o in words {
                        set_option(&mut dns.options, o.to_string());
                    }
                }
                _ => {}
            }
        }
        if empty_nameservers > 0 {
            return Err(format!("{empty_nameservers} nameserver line(s) with no address"));
        }
        Ok(dns)
    }
}

/// Reads and parses the host's resolver file (none when `--resolv-conf` is empty). Blocks: call
/// it on the blocking pool.
pub fn read_host(settings: &DnsSettings) -> Result<HostDns, DnsError> {
    use std::io::Read;
    let Some(path) = settings.resolv_conf.as_deref() else { return Ok(HostDns::default()) };
    let shown = || path.display().to_string();
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_RESOLV_CONF_BYTES).read_to_string(&mut text))
        .map_err(|source| DnsError::Read { path: shown(), source })?;
    HostDns::parse(&text).map_err(|message| DnsError::Parse { path: shown(), message })
}

/// A warning the kubelet records as an event on the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub reason: &'static str,
    pub message: String,
}

/// A pod's resolver configuration and the warnings forming it raised.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodDns {
    pub config: api::DnsConfig,
    pub warnings: Vec<Warning>,
}

/// The pod's DNS config, formed from the host file on the blocking pool (see [`read_host`]).
pub async fn pod_dns(settings: &DnsSettings, pod: &Pod, namespace: &str) -> Result<PodDns, DnsError> {
    let host = match &settings.resolv_conf {
        None => HostDns::default(),
        Some(path) => {
            let s = settings.clone();
            tokio::task::spawn_blocking(move || read_host(&s)).await.unwrap_or_else(|e| {
                Err(DnsError::Read {
                    path: path.display().to_string(),
                    source: std::io::Error::other(format!("blocking file work did not finish: {e}")),
                })
            })?
        }
    };
    Ok(form(settings, &host, pod, namespace))
}

/// How a pod's resolver is based (the kubelet's `podDNSType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Cluster,
    Host,
    None,
}

/// The kubelet's `getPodDNSType`: a hostNetwork pod with ClusterFirst gets the host's resolver
/// unless it asks ClusterFirstWithHostNet; an unknown policy (validation refuses it) counts as
/// ClusterFirst, as upstream.
fn base(pod: &Pod) -> Base {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network) == Some(true);
    match spec.and_then(|s| s.dns_policy.as_deref()).unwrap_or("ClusterFirst") {
        "None" => Base::None,
        "Default" => Base::Host,
        "ClusterFirst" if host_network => Base::Host,
        _ => Base::Cluster,
    }
}

/// The pod's resolver, as the kubelet's `GetPodDNS` forms it from the host's resolver `host`.
pub fn form(settings: &DnsSettings, host: &HostDns, pod: &Pod, namespace: &str) -> PodDns {
    let mut warnings = Vec::new();
    let mut base = base(pod);
    if base == Base::Cluster && settings.cluster_dns.is_empty() {
        warnings.push(Warning {
            reason: "MissingClusterDNS",
            message: format!(
                "pod: {:?}. kubelet does not have ClusterDNS IP configured and cannot create Pod using \
                 \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                pod_name(pod, namespace)
            ),
        });
        base = Base::Host;
    }
    let mut config = match base {
        Base::None => api::DnsConfig::default(),
        Base::Cluster => api::DnsConfig {
            servers: settings.cluster_dns.iter().map(IpAddr::to_string).collect(),
            searches: cluster_searches(&settings.cluster_domain, namespace, &host.searches),
            options: CLUSTER_OPTIONS.iter().map(|o| o.to_string()).collect(),
        },
        Base::Host if settings.resolv_conf.is_none() => api::DnsConfig {
            // No host resolver: the node itself, which is what a resolver does with no
            // nameserver, and a search line of just the root.
            servers: loopback_servers(&settings.node_ips),
            searches: vec![".".into()],
            options: host.options.clone(),
        },
        Base::Host => api::DnsConfig {
            servers: host.servers.clone(),
            searches: host.searches.clone(),
            options: host.options.clone(),
        },
    };
    if let Some(extra) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        merge(&mut config, extra);
    }
    fit_limits(&mut config, &mut warnings);
    PodDns { config, warnings }
}

/// The kubelet's `format.Pod`: `name_namespace(uid)`.
fn pod_name(pod: &Pod, namespace: &str) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    format!("{name}_{namespace}({})", pod.metadata.uid.as_deref().unwrap_or_default())
}

/// `<ns>.svc.<domain>`, `svc.<domain>`, `<domain>`, then the host's, each once; the host's alone
/// when there is no cluster domain.
fn cluster_searches(domain: &str, namespace: &str, host: &[String]) -> Vec<String> {
    if domain.is_empty() {
        return host.to_vec();
    }
    let mut out = Vec::new();
    let cluster = [format!("{namespace}.svc.{domain}"), format!("svc.{domain}"), domain.to_string()];
    for s in cluster.into_iter().chain(host.iter().cloned()) {
        push_once(&mut out, s);
    }
    out
}

/// One loopback nameserver per node IP, of its family; 127.0.0.1 when the node has none.
fn loopback_servers(node_ips: &[IpAddr]) -> Vec<String> {
    let mut servers: Vec<String> =
        node_ips.iter().map(|ip| if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.to_string()).collect();
    if servers.is_empty() {
        servers.push("127.0.0.1".into());
    }
    servers
}

/// The kubelet's `appendDNSConfig`: nameservers and searches appended, each kept once; options
/// merged by name, the pod's winning (an option with no value is its name alone).
fn merge(config: &mut api::DnsConfig, extra: &PodDNSConfig) {
    let servers = std::mem::take(&mut config.servers);
    for s in servers.into_iter().chain(extra.nameservers.iter().flatten().cloned()) {
        push_once(&mut config.servers, s);
    }
    let searches = std::mem::take(&mut config.searches);
    for s in searches.into_iter().chain(extra.searches.iter().flatten().cloned()) {
        push_once(&mut config.searches, s);
    }
    for o in extra.options.iter().flatten() {
        let name = o.name.as_deref().unwrap_or_default();
        let option = match o.value.as_deref().filter(|v| !v.is_empty()) {
            Some(v) => format!("{name}:{v}"),
            None => name.to_string(),
        };
        set_option(&mut config.options, option);
    }
}

fn push_once(list: &mut Vec<String>, s: String) {
    if !list.contains(&s) {
        list.push(s);
    }
}

/// Sets `option` (`name` or `name:value`), replacing one of the same name where it stands.
/// (The kubelet goes through a Go map, so its order is random; crilet keeps the first's place.)
fn set_option(options: &mut Vec<String>, option: String) {
    let name = |o: &str| o.split(':').next().unwrap_or_default().to_string();
    let key = name(&option);
    match options.iter_mut().find(|o| name(o) == key) {
        Some(slot) => *slot = option,
        None => options.push(option),
    }
}

/// The kubelet's `formDNSConfigFitsLimits`: what exceeds the limits is dropped, with a
/// `DNSConfigForming` warning naming what is applied.
fn fit_limits(config: &mut api::DnsConfig, warnings: &mut Vec<Warning>) {
    if config.servers.len() > MAX_NAMESERVERS {
        config.servers.truncate(MAX_NAMESERVERS);
        warnings.push(Warning {
            reason: "DNSConfigForming",
            message: format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied \
                 nameserver line is: {}",
                config.servers.join(" ")
            ),
        });
    }
    let searches = &mut config.searches;
    let mut exceeded = searches.len() > MAX_SEARCH_PATHS;
    searches.truncate(MAX_SEARCH_PATHS);
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_PATH_CHARS);
    exceeded |= searches.len() != before;
    // The line is the domains joined by spaces; the last ones go until it fits.
    let mut line = searches.join(" ").len();
    while line > MAX_SEARCH_LINE_CHARS {
        let Some(last) = searches.pop() else { break };
        line = line.saturating_sub(last.len() + 1);
        exceeded = true;
    }
    if exceeded {
        warnings.push(Warning {
            reason: "DNSConfigForming",
            message: format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied \
                 search line is: {}",
                searches.join(" ")
            ),
        });
    }
}

/// The kubelet's `CheckLimitsForResolvConf`, run once at start: a problem with the host's file
/// that every pod built on it would inherit, as a message for the node's log.
pub fn check_host(settings: &DnsSettings) -> Option<String> {
    let path = settings.resolv_conf.as_deref()?;
    let host = match read_host(settings) {
        Ok(h) => h,
        Err(e) => return Some(crate::error_chain(&e)),
    };
    let limit = MAX_SEARCH_PATHS - if settings.cluster_domain.is_empty() { 0 } else { 3 };
    let path = path.display();
    if host.searches.len() > limit {
        Some(format!(
            "Resolv.conf file '{path}' contains search line consisting of more than {limit} domains!"
        ))
    } else if host.searches.iter().any(|s| s.len() > MAX_SEARCH_PATH_CHARS) {
        Some(format!(
            "Resolv.conf file '{path}' contains a search path which length is more than allowed \
             {MAX_SEARCH_PATH_CHARS} chars!"
        ))
    } else if host.searches.join(" ").len() > MAX_SEARCH_LINE_CHARS {
        Some(format!(
            "Resolv.conf file '{path}' contains search line which length is more than allowed \
             {MAX_SEARCH_LINE_CHARS} chars!"
        ))
    } else {
        None
    }
}

#[cfg(test)]
#[path = "dns_tests.rs"]
mod tests;
