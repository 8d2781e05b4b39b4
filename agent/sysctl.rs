//! Which sysctls a pod may set, as the kubelet decides it (`pkg/kubelet/sysctl`): the safe set
//! (the entries the running kernel namespaces), plus what `--allowed-unsafe-sysctls` allows; a
//! namespaced sysctl is still refused when the pod shares that namespace with the host, since
//! setting it would change the node. A refusal has the kubelet's reason, `SysctlForbidden`.
//!
//! Used by both pod sources: API pods are failed at admission (`cluster::admit`), static pods
//! get a manifest error (`source`). Pure apart from [`Allowlist::for_host`] reading the kernel
//! version (uname, no I/O).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// The kubelet's admission reason for a refused sysctl.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// Longest sysctl name or pattern (the API's `SysctlMaxLength`).
const MAX_LEN: usize = 253;

/// The kubelet's safe sysctls, each with the kernel (major, minor) that namespaced it, when that
/// is later than any kernel Kubernetes runs on.
const SAFE: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", None),
    ("net.ipv4.tcp_wmem", None),
];

/// The kernel namespace a sysctl belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn name(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }
}

/// The namespace `name` (dot form) belongs to; `None` for a node-level sysctl. Upstream's
/// table (component-helpers' `namespace.go`) knows only IPC and net: `kernel.hostname` and
/// `kernel.domainname`, though the UTS namespace holds them, are not known to be namespaced
/// there, so the kubelet never allows them; neither does crilet.
pub fn namespace_of(name: &str) -> Option<Namespace> {
    if name == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    let prefixes = [
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ];
    prefixes.iter().find(|(p, _)| name.starts_with(p)).map(|(_, ns)| *ns)
}

/// The kubelet's name normalisation: `/` may stand for `.`. When the first separator is a `/`
/// (`net/ipv4/conf/eno2.100/rp_filter`) the two swap, so a `.` inside a segment (a VLAN
/// interface) survives: `net.ipv4.conf.eno2/100.rp_filter`.
pub fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// An `--allowed-unsafe-sysctls` entry the kubelet would refuse to start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error(
        "--allowed-unsafe-sysctls: {0:?} is not a sysctl pattern (segments of a-z, 0-9, - and _ separated by . or /, an optional trailing *, at most 253 characters)"
    )]
    Syntax(String),
    #[error(
        "--allowed-unsafe-sysctls: {0:?} is not known to be namespaced (only kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.* and net.* are): a node-level sysctl is never allowed to a pod"
    )]
    NotNamespaced(String),
}

/// The sysctls a pod may set on this node: exact names and prefixes (patterns ending in `*`),
/// each with its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowlist {
    names: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Default for Allowlist {
    /// The kubelet's default: the safe set for this host's kernel, nothing unsafe.
    fn default() -> Self {
        Self::for_host(&[]).expect("an empty unsafe list is always valid")
    }
}

impl Allowlist {
    /// The safe set for this host's kernel plus the `unsafe_patterns` (`--allowed-unsafe-sysctls`).
    pub fn for_host(unsafe_patterns: &[String]) -> Result<Self, AllowlistError> {
        Self::new(unsafe_patterns, host_kernel())
    }

    /// The safe set for `kernel` (unknown: only the entries every kernel has, as the kubelet
    /// when it cannot read the version) plus the `unsafe_patterns`.
    pub fn new(unsafe_patterns: &[String], kernel: Option<(u32, u32)>) -> Result<Self, AllowlistError> {
        let mut list = Self { names: BTreeMap::new(), prefixes: BTreeMap::new() };
        for (name, since) in SAFE {
            if since.is_none_or(|since| kernel.is_some_and(|k| k >= since)) {
                list.add(name)?;
            }
        }
        for pattern in unsafe_patterns.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
            list.add(pattern)?;
        }
        Ok(list)
    }

    fn add(&mut self, pattern: &str) -> Result<(), AllowlistError> {
        if !valid_pattern(pattern) {
            return Err(AllowlistError::Syntax(pattern.to_string()));
        }
        let pattern = normalize(pattern);
        let (table, name) = match pattern.strip_suffix('*') {
            Some(prefix) => (&mut self.prefixes, prefix),
            None => (&mut self.names, pattern.as_str()),
        };
        let ns = namespace_of(name).ok_or_else(|| AllowlistError::NotNamespaced(pattern.clone()))?;
        table.insert(name.to_string(), ns);
        Ok(())
    }

    /// Why `name` may not be set by a pod with these host namespaces, as the kubelet words it
    /// (`"kernel.msgmax" not allowlisted`); `None` when it may.
    pub fn refusal(&self, name: &str, host_network: bool, host_ipc: bool) -> Option<String> {
        let name = normalize(name);
        let ns = self
            .names
            .get(&name)
            .or_else(|| self.prefixes.iter().find(|(p, _)| name.starts_with(p.as_str())).map(|(_, ns)| ns));
        let Some(ns) = ns else {
            return Some(format!("{name:?} not allowlisted"));
        };
        let shared = match ns {
            Namespace::Ipc => host_ipc,
            Namespace::Net => host_network,
        };
        shared.then(|| format!("{name:?} not allowed with host {} enabled", ns.name()))
    }

    /// The kubelet's sysctl admission of `pod`: the index of the first refused sysctl and the
    /// message (`forbidden sysctl: ...`), or `None` when every sysctl may be set.
    pub fn admit(&self, pod: &Pod) -> Option<(usize, String)> {
        let spec = pod.spec.as_ref()?;
        let sysctls = spec.security_context.as_ref()?.sysctls.as_deref()?;
        let (host_network, host_ipc) = (spec.host_network == Some(true), spec.host_ipc == Some(true));
        sysctls.iter().enumerate().find_map(|(i, s)| {
            self.refusal(&s.name, host_network, host_ipc).map(|why| (i, format!("forbidden sysctl: {why}")))
        })
    }
}

/// The API's sysctl pattern syntax (`IsValidSysctlPattern`): segments separated by `.` or `/`,
/// the last one may end in `*`.
fn valid_pattern(p: &str) -> bool {
    if p.is_empty() || p.len() > MAX_LEN {
        return false;
    }
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let segments: Vec<&str> = p.split(['.', '/']).collect();
    let (last, inner) = segments.split_last().expect("split yields at least one segment");
    let segment_ok = |s: &str| {
        let b = s.as_bytes();
        !b.is_empty()
            && alnum(b[0])
            && alnum(b[b.len() - 1])
            && b.iter().all(|&c| alnum(c) || c == b'-' || c == b'_')
    };
    let last_ok = match last.strip_suffix('*') {
        Some("") => true,
        Some(head) => {
            head.bytes().next().is_some_and(alnum) && head.bytes().all(|c| alnum(c) || c == b'-' || c == b'_')
        }
        None => segment_ok(last),
    };
    inner.iter().all(|s| segment_ok(s)) && last_ok
}

/// The running kernel's (major, minor), from uname; `None` when it cannot be read.
fn host_kernel() -> Option<(u32, u32)> {
    let uts = nix::sys::utsname::uname().ok()?;
    parse_kernel(uts.release().to_str()?)
}

fn parse_kernel(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(unsafe_patterns: &[&str]) -> Allowlist {
        let patterns: Vec<String> = unsafe_patterns.iter().map(|s| s.to_string()).collect();
        Allowlist::new(&patterns, Some((6, 1))).expect("valid patterns")
    }

    #[test]
    fn the_safe_set_follows_the_kernel() {
        let new = Allowlist::new(&[], Some((6, 1))).unwrap();
        for (name, _) in SAFE {
            assert_eq!(new.refusal(name, false, false), None, "{name} on 6.1");
        }
        let old = Allowlist::new(&[], Some((4, 4))).unwrap();
        assert_eq!(old.refusal("net.ipv4.ip_local_reserved_ports", false, false), None);
        for name in ["net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout"] {
            assert_eq!(old.refusal(name, false, false), Some(format!("{name:?} not allowlisted")), "4.4");
        }
        let unknown = Allowlist::new(&[], None).unwrap();
        assert!(unknown.refusal("net.ipv4.ip_local_reserved_ports", false, false).is_some());
        assert_eq!(unknown.refusal("kernel.shm_rmid_forced", false, false), None);
        assert_eq!(parse_kernel("6.1.0-28-amd64"), Some((6, 1)));
        assert_eq!(parse_kernel("5.15.167.4-microsoft-standard-WSL2"), Some((5, 15)));
        assert_eq!(parse_kernel("weird"), None);
    }

    /// (unsafe patterns, sysctl, hostNetwork, hostIPC, refusal)
    type Case<'a> = (&'a [&'a str], &'a str, bool, bool, Option<&'a str>);

    #[test]
    fn refusals_as_the_kubelet() {
        let cases: &[Case] = &[
            (&[], "kernel.shm_rmid_forced", false, false, None),
            (&[], "kernel/shm_rmid_forced", false, false, None),
            (&[], "kernel.msgmax", false, false, Some(r#""kernel.msgmax" not allowlisted"#)),
            (&["kernel.msg*"], "kernel.msgmax", false, false, None),
            (
                &["kernel.msg*"],
                "kernel.msgmax",
                false,
                true,
                Some(r#""kernel.msgmax" not allowed with host ipc enabled"#),
            ),
            (&["kernel.msg*"], "kernel.msgmax", true, false, None),
            (&["kernel.sem"], "kernel.sem", false, false, None),
            (&["kernel.sem"], "kernel.semx", false, false, Some(r#""kernel.semx" not allowlisted"#)),
            (
                &[],
                "net.ipv4.ip_local_port_range",
                true,
                false,
                Some(r#""net.ipv4.ip_local_port_range" not allowed with host net enabled"#),
            ),
            (
                &[],
                "kernel.shm_rmid_forced",
                false,
                true,
                Some(r#""kernel.shm_rmid_forced" not allowed with host ipc enabled"#),
            ),
            (&["net.core.*"], "net.core.somaxconn", false, false, None),
            (&["net.core.*"], "net/core/somaxconn", false, false, None),
            (
                &["net.core.*"],
                "net.core.somaxconn",
                true,
                false,
                Some(r#""net.core.somaxconn" not allowed with host net enabled"#),
            ),
            (&["net.*"], "net/ipv4/conf/eno2.100/rp_filter", false, false, None),
            (&["net.*"], "kernel.hostname", false, false, Some(r#""kernel.hostname" not allowlisted"#)),
            (&["net.*"], "vm.swappiness", false, false, Some(r#""vm.swappiness" not allowlisted"#)),
        ];
        for (patterns, name, net, ipc, want) in cases {
            let got = list(patterns).refusal(name, *net, *ipc);
            assert_eq!(got.as_deref(), *want, "{patterns:?} {name} net={net} ipc={ipc}");
        }
    }

    #[test]
    fn unsafe_patterns_are_checked_as_the_kubelet_checks_them() {
        let bad = |p: &str| Allowlist::new(&[p.to_string()], Some((6, 1))).unwrap_err();
        for p in [
            "vm.swappiness",
            "kernel.panic*",
            "*",
            "fs.*",
            "kernel.*",
            "kernel.hostname",
            "kernel.domainname",
        ] {
            assert_eq!(bad(p), AllowlistError::NotNamespaced(normalize(p)), "{p}");
        }
        for p in ["Net.core", "net..core", "net.*.x", "net.core.*x", "-net.x", "net.x-", &"a".repeat(254)] {
            assert_eq!(bad(p), AllowlistError::Syntax(p.to_string()), "{p}");
        }
        for p in ["kernel.msg*", "net.*", "fs.mqueue.*", "net/ipv4/*", "kernel.sem", " net.core.somaxconn "] {
            assert!(Allowlist::new(&[p.to_string()], None).is_ok(), "{p}");
        }
    }

    #[test]
    fn names_normalise_as_upstream() {
        for (given, want) in [
            ("kernel.shm_rmid_forced", "kernel.shm_rmid_forced"),
            ("kernel/shm_rmid_forced", "kernel.shm_rmid_forced"),
            ("net/ipv4/conf/eno2.100/rp_filter", "net.ipv4.conf.eno2/100.rp_filter"),
            ("net.ipv4.conf.eno2/100.rp_filter", "net.ipv4.conf.eno2/100.rp_filter"),
            ("", ""),
        ] {
            assert_eq!(normalize(given), want, "{given}");
        }
    }

    #[test]
    fn admission_names_the_first_refused_sysctl() {
        let pod: Pod = serde_yaml_ng::from_str(
            "spec: {containers: [{name: c, image: i}], securityContext: {sysctls: [{name: kernel.shm_rmid_forced, value: '1'}, {name: kernel.msgmax, value: '9000'}]}}",
        )
        .unwrap();
        assert_eq!(
            list(&[]).admit(&pod),
            Some((1, r#"forbidden sysctl: "kernel.msgmax" not allowlisted"#.into()))
        );
        assert_eq!(list(&["kernel.msg*"]).admit(&pod), None);
        let plain: Pod = serde_yaml_ng::from_str("spec: {containers: [{name: c, image: i}]}").unwrap();
        assert_eq!(list(&[]).admit(&plain), None);
    }
}
