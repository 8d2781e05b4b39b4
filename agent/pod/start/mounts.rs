//! A container's mounts: volumes, subPaths (expanded and never through a symlink), hostPath
//! checks, mount propagation, `/etc/hosts`, and the termination message file.

use super::*;

use crate::mountinfo::BIDIRECTIONAL_UNPRIVILEGED;

/// A volume mount's `mountPropagation` as CRI's propagation, as the kubelet's
/// `translateMountPropagation` maps it: unset and `None` are private (rprivate),
/// `HostToContainer` rslave, `Bidirectional` rshared. Anything else is the kubelet's error; a
/// bidirectional mount of an unprivileged container is refused with the API server's words
/// (validation refuses it first for every pod; this keeps it refused whatever let it through).
pub(super) fn translate_propagation(
    mode: Option<&str>,
    privileged: bool,
) -> Result<api::MountPropagation, String> {
    use api::MountPropagation as P;
    match mode {
        None | Some("None") => Ok(P::PropagationPrivate),
        Some("HostToContainer") => Ok(P::PropagationHostToContainer),
        Some("Bidirectional") if privileged => Ok(P::PropagationBidirectional),
        Some("Bidirectional") => Err(BIDIRECTIONAL_UNPRIVILEGED.to_string()),
        Some(other) => Err(format!("invalid MountPropagation mode: {other:?}")),
    }
}

/// Why `host` cannot be the source of a mount with `propagation`, if it cannot: containerd
/// refuses a host-to-container mount whose source is not on a shared or slave mount, and a
/// bidirectional one not on a shared mount; crilet checks first so the error names the volume.
/// A source under `--root-dir` (emptyDir, configMap and the other volumes crilet makes) is
/// first put on a shared mount, as the kubelet keeps its root dir rshared. Blocks on the host's
/// mount table.
fn check_propagation_source(
    node: &NodeConfig,
    host: &Path,
    propagation: api::MountPropagation,
) -> Result<(), String> {
    if propagation == api::MountPropagation::PropagationPrivate {
        return Ok(());
    }
    // containerd resolves the source's symlinks before it looks.
    let real = std::fs::canonicalize(host).map_err(|e| format!("{}: {e}", host.display()))?;
    let root = std::fs::canonicalize(&node.root_dir).unwrap_or_else(|_| node.root_dir.clone());
    if real.starts_with(&root) {
        let done = crate::mountinfo::make_rshared(&root)
            .map_err(|e| format!("making the root dir {} a shared mount: {e}", root.display()))?;
        if done == crate::mountinfo::RShared::BindMounted {
            tracing::info!(dir = %root.display(), "bind-mounted the root dir onto itself with shared propagation");
        }
    }
    let table = std::fs::read_to_string(crate::mountinfo::SELF_MOUNTINFO)
        .map_err(|e| format!("reading {}: {e}", crate::mountinfo::SELF_MOUNTINFO))?;
    let bidirectional = propagation == api::MountPropagation::PropagationBidirectional;
    match crate::mountinfo::propagation_problem(&crate::mountinfo::parse(&table), &real, bidirectional) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// A mount's `subPathExpr` with `$(VAR)` taken from the container's environment, refused as
/// the kubelet refuses it: a variable without a value, an absolute path, a `..` step.
pub(super) fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, String> {
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let value = |n: &str| {
        let v = env.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
        if v.is_none() {
            missing.borrow_mut().insert(n.to_string());
        }
        Some(v.unwrap_or_default())
    };
    let sub = crate::expand::expand(expr, &value);
    let missing = missing.into_inner();
    if !missing.is_empty() {
        return Err(format!("missing value for {}", missing.into_iter().collect::<Vec<_>>().join(", ")));
    }
    if sub.starts_with('/') {
        return Err(format!("error SubPath `{sub}` must not be an absolute path"));
    }
    if sub.split('/').any(|part| part == "..") {
        return Err(format!("unable to provision SubPath `{sub}`: must not contain '..'"));
    }
    Ok(sub)
}

/// What [`prepare_mounts`] works from, owned: it runs on the blocking pool.
pub(super) struct MountWork {
    pub node: NodeConfig,
    pub desired: DesiredPod,
    pub container: Container,
    pub pod_ips: Vec<String>,
    /// The container's environment, for `subPathExpr`.
    pub env: Vec<(String, String)>,
}

/// Host paths for the container's volume mounts (emptyDir created on first use), plus the
/// termination-message file (R1.12). The error is a `CreateContainerConfigError`'s message.
/// Blocks on the disk (the subPaths, hostPaths and files it makes).
pub(super) fn prepare_mounts(work: &MountWork) -> Result<(Vec<api::Mount>, Option<PathBuf>), String> {
    let (node, d, c, env) = (&work.node, &work.desired, &work.container, &work.env);
    let volumes = d.pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    let mut mounts = Vec::new();
    let privileged = c.security_context.as_ref().and_then(|sc| sc.privileged) == Some(true);
    for vm in c.volume_mounts.iter().flatten() {
        let mode = vm.mount_propagation.as_deref();
        let propagation = translate_propagation(mode, privileged)
            .map_err(|m| format!("volume {:?} mountPropagation: {m}", vm.name))?;
        let Some(vol) = volumes.iter().find(|v| v.name == vm.name) else {
            return Err(format!("volume {:?} not found", vm.name));
        };
        let api_volume = crate::volumes::host_path(node, &d.uid, vol);
        let mut host: PathBuf = if let Some(hp) = &vol.host_path {
            let p = PathBuf::from(&hp.path);
            prepare_host_path(&p, hp.type_.as_deref().unwrap_or(""))
                .map_err(|m| format!("hostPath volume {:?}: {m}", vol.name))?;
            p
        } else if let Some(p) = api_volume.clone() {
            // Written by `VolumeManager::prepare` before the sandbox.
            if !crate::volumes::is_set_up(&p) {
                return Err(format!("volume {:?} is not set up", vol.name));
            }
            p
        } else {
            let p = empty_dir(node, &d.uid, &vol.name);
            // World-writable like the kubelet's emptyDir, so non-root containers can use it.
            mkdir(&p, 0o777).map_err(|e| format!("emptyDir {:?}: {e}", vol.name))?;
            p
        };
        let expanded = match vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
            Some(expr) => Some(expand_sub_path(expr, env)?),
            None => None,
        };
        if let Some(sub) = expanded.as_deref().or(vm.sub_path.as_deref()).filter(|s| !s.is_empty()) {
            let resolved = match api_volume {
                Some(_) => crate::volumes::sub_path_in_volume(&host, sub),
                None => crate::volumes::sub_path_in(&host, sub),
            };
            host = resolved.map_err(|e| format!("volume {:?} subPath {sub:?}: {e}", vol.name))?;
        }
        check_propagation_source(node, &host, propagation).map_err(|m| {
            format!("volume {:?} mountPropagation {}: {m}", vol.name, mode.unwrap_or_default())
        })?;
        mounts.push(api::Mount {
            container_path: vm.mount_path.clone(),
            host_path: host.display().to_string(),
            // The kubelet mounts these volume types read-only whatever the mount says.
            readonly: vm.read_only == Some(true) || api_volume.is_some(),
            propagation: propagation as i32,
            ..Default::default()
        });
    }
    // The kubelet-managed /etc/hosts (pod IP, hostname, hostAliases), unless the container
    // mounts its own.
    if !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
        let dir = pod_dir(node, &d.uid);
        mkdir(&dir, 0o750).map_err(|e| e.to_string())?;
        let hosts = dir.join("etc-hosts");
        let text = hosts_file(&d.pod, &work.pod_ips);
        std::fs::write(&hosts, text)
            .and_then(|_| std::fs::set_permissions(&hosts, std::fs::Permissions::from_mode(0o644)))
            .map_err(|e| format!("writing /etc/hosts ({}): {e}", hosts.display()))?;
        mounts.push(api::Mount {
            container_path: "/etc/hosts".into(),
            host_path: hosts.display().to_string(),
            readonly: false,
            ..Default::default()
        });
    }
    let mut termination_file = None;
    let tpath = c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
    if !tpath.is_empty() {
        let dir = pod_dir(node, &d.uid).join("containers").join(&c.name);
        mkdir(&dir, 0o750).map_err(|e| format!("termination message dir: {e}"))?;
        let file = dir.join(format!("{:08x}", fastrand::u32(..)));
        std::fs::write(&file, b"")
            .and_then(|_| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)))
            .map_err(|e| format!("termination message file {}: {e}", file.display()))?;
        mounts.push(api::Mount {
            container_path: tpath,
            host_path: file.display().to_string(),
            readonly: false,
            ..Default::default()
        });
        termination_file = Some(file);
    }
    Ok((mounts, termination_file))
}

/// hostPath `type` checks as the kubelet does them (create the *OrCreate kinds). Blocks on the
/// disk.
pub(super) fn prepare_host_path(p: &Path, kind: &str) -> Result<(), String> {
    let meta = std::fs::metadata(p);
    use std::os::unix::fs::FileTypeExt;
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if meta.is_err() {
                mkdir(p, 0o755).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        "FileOrCreate" => {
            if meta.is_err() {
                std::fs::OpenOptions::new().create(true).append(true).open(p).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        "Directory" if meta.as_ref().is_ok_and(|m| m.is_dir()) => Ok(()),
        "File" if meta.as_ref().is_ok_and(|m| m.is_file()) => Ok(()),
        "Socket" if meta.as_ref().is_ok_and(|m| m.file_type().is_socket()) => Ok(()),
        "CharDevice" if meta.as_ref().is_ok_and(|m| m.file_type().is_char_device()) => Ok(()),
        "BlockDevice" if meta.as_ref().is_ok_and(|m| m.file_type().is_block_device()) => Ok(()),
        other => Err(format!("{} is not a {other}", p.display())),
    }
}

/// The pod's /etc/hosts as the kubelet writes it: the node's file for host-network pods, else
/// the standard local entries and the pod's own IP and hostname; then the hostAliases. Reads
/// the node's file from the disk for a host-network pod.
pub fn hosts_file(pod: &k8s_openapi::api::core::v1::Pod, pod_ips: &[String]) -> String {
    let spec = pod.spec.as_ref();
    let mut out = String::from("# Kubernetes-managed hosts file.\n");
    if spec.and_then(|s| s.host_network) == Some(true) {
        out = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    } else {
        out.push_str("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n");
        let host = super::spec::hostname(pod);
        let fqdn = match spec.and_then(|s| s.subdomain.as_deref()) {
            Some(sub) if !sub.is_empty() => {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                format!("{host}.{sub}.{ns}.svc.cluster.local\t{host}")
            }
            _ => host,
        };
        for ip in pod_ips {
            out.push_str(&format!("{ip}\t{fqdn}\n"));
        }
    }
    let aliases = spec.and_then(|s| s.host_aliases.as_ref()).filter(|a| !a.is_empty());
    if let Some(aliases) = aliases {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_propagation_maps_as_the_kubelets() {
        use api::MountPropagation as P;
        let cases = [
            (None, false, Ok(P::PropagationPrivate)),
            (Some("None"), false, Ok(P::PropagationPrivate)),
            (Some("HostToContainer"), false, Ok(P::PropagationHostToContainer)),
            (Some("Bidirectional"), true, Ok(P::PropagationBidirectional)),
            (Some("Bidirectional"), false, Err(BIDIRECTIONAL_UNPRIVILEGED.to_string())),
            (Some("rshared"), true, Err("invalid MountPropagation mode: \"rshared\"".to_string())),
        ];
        for (mode, privileged, want) in cases {
            assert_eq!(translate_propagation(mode, privileged), want, "{mode:?} privileged={privileged}");
        }
    }

    #[test]
    fn sub_path_expressions_expand_and_are_checked_as_the_kubelets() {
        let env: Vec<(String, String)> = [("POD", "web-0"), ("EMPTY", ""), ("UP", ".."), ("ABS", "/etc")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let cases = [
            ("logs/$(POD)", Ok("logs/web-0".to_string())),
            ("$(POD)/$$(POD)", Ok("web-0/$(POD)".to_string())),
            ("$(NOPE)/$(EMPTY)", Err("missing value for EMPTY, NOPE".to_string())),
            ("$(ABS)/x", Err("error SubPath `/etc/x` must not be an absolute path".to_string())),
            ("a/$(UP)/b", Err("unable to provision SubPath `a/../b`: must not contain '..'".to_string())),
        ];
        for (expr, want) in cases {
            assert_eq!(expand_sub_path(expr, &env), want, "{expr}");
        }
    }
}
