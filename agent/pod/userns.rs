//! User namespaces for `hostUsers: false` pods (KEP-127), as the kubelet's user namespace
//! manager gives them: each such pod gets its own block of 65536 host IDs, mapped to IDs 0-65535
//! inside, the same block for UIDs and GIDs. The block is kept in the pod's directory (file
//! `userns`, the kubelet's name and JSON form), so it survives agent restarts, and is free again
//! once that directory is removed with the pod. The blocks are carved from the `kubelet` user's
//! range in /etc/subuid when there is one, else from every ID from 65536 up (the kubelet's
//! default); host IDs below the first block are never handed out.

use std::io::{Error, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::cri::api;
use crate::podspec::spec;

/// IDs per pod: the kubelet's default (`userNamespaces.idsPerPod`).
pub const IDS_PER_POD: u32 = 65536;
/// The file in the pod's directory that holds its block.
const FILE: &str = "userns";
/// The user whose /etc/subuid range the blocks come from, as for the kubelet.
const KUBELET_USER: &str = "kubelet";

/// Allocations scan the pod directories and write one file: one at a time in this process.
static ALLOCATING: Mutex<()> = Mutex::new(());

/// Whether the pod asks for its own user namespace.
pub fn wanted(pod: &Pod) -> bool {
    spec(pod).host_users == Some(false)
}

/// The kubelet's file: one UID and one GID mapping, equal, with container ID 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Mappings {
    #[serde(rename = "uidMappings")]
    uids: Vec<IdMap>,
    #[serde(rename = "gidMappings")]
    gids: Vec<IdMap>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct IdMap {
    #[serde(rename = "hostId")]
    host_id: u32,
    #[serde(rename = "containerId")]
    container_id: u32,
    length: u32,
}

/// The host IDs blocks may be taken from: `first` and `len` are multiples of [`IDS_PER_POD`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub first: u32,
    pub len: u32,
}

impl IdRange {
    /// The kubelet's default: every ID from 65536 up.
    pub const DEFAULT: IdRange = IdRange { first: IDS_PER_POD, len: u32::MAX - IDS_PER_POD + 1 };

    /// The range for `user` in a subuid file's text (`name:first:count` lines), checked as the
    /// kubelet checks it; `Ok(None)` when the user has no line.
    pub fn from_subuid(text: &str, user: &str) -> Result<Option<IdRange>, String> {
        let Some(line) = text.lines().map(str::trim).find(|l| l.split(':').next() == Some(user)) else {
            return Ok(None);
        };
        let parts: Vec<&str> = line.split(':').collect();
        let [_, first, len] = parts[..] else {
            return Err(format!("subuid line {line:?}: expected name:first:count"));
        };
        let first: u32 = first.parse().map_err(|e| format!("subuid line {line:?}: first ID: {e}"))?;
        let len: u32 = len.parse().map_err(|e| format!("subuid line {line:?}: count: {e}"))?;
        if !first.is_multiple_of(IDS_PER_POD) || first < IDS_PER_POD {
            return Err(format!(
                "subuid line {line:?}: the first ID must be a multiple of {IDS_PER_POD}, at least {IDS_PER_POD}"
            ));
        }
        if !len.is_multiple_of(IDS_PER_POD) || len == 0 {
            return Err(format!(
                "subuid line {line:?}: the count must be a non-zero multiple of {IDS_PER_POD}"
            ));
        }
        Ok(Some(IdRange { first, len }))
    }

    /// The node's range: the `kubelet` user's line of /etc/subuid, else the default.
    fn of_node() -> std::io::Result<IdRange> {
        let text = match std::fs::read_to_string("/etc/subuid") {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(IdRange::DEFAULT),
            Err(e) => return Err(Error::new(e.kind(), format!("reading /etc/subuid: {e}"))),
        };
        match IdRange::from_subuid(&text, KUBELET_USER) {
            Ok(r) => Ok(r.unwrap_or(IdRange::DEFAULT)),
            Err(e) => Err(Error::other(format!("/etc/subuid: {e}"))),
        }
    }

    fn blocks(&self) -> u32 {
        self.len / IDS_PER_POD
    }
}

/// The lowest block of `range` that no host ID in `used` starts; `None` when all are taken.
pub fn first_free(range: IdRange, used: &[u32]) -> Option<u32> {
    (0..range.blocks()).map(|i| range.first + i * IDS_PER_POD).find(|id| !used.contains(id))
}

/// A block read back from a pod's file, checked as the kubelet checks it.
fn parse(text: &str) -> Result<u32, String> {
    let m: Mappings =
        serde_json::from_str(text).map_err(|e| format!("invalid user namespace mappings file: {e}"))?;
    let ([u], [g]) = (&m.uids[..], &m.gids[..]) else {
        return Err("invalid user namespace mappings file: one UID and one GID mapping expected".into());
    };
    if u != g {
        return Err("invalid user namespace mappings file: the UID and GID mappings differ".into());
    }
    if u.container_id != 0
        || u.length != IDS_PER_POD
        || !u.host_id.is_multiple_of(IDS_PER_POD)
        || u.host_id == 0
    {
        return Err(format!(
            "invalid user namespace mappings file: expected {IDS_PER_POD} IDs from container ID 0 at a multiple of {IDS_PER_POD}, found {u:?}"
        ));
    }
    Ok(u.host_id)
}

fn read_block(file: &Path) -> std::io::Result<Option<u32>> {
    match std::fs::read_to_string(file) {
        Ok(text) => parse(&text).map(Some).map_err(|e| Error::other(format!("{}: {e}", file.display()))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::new(e.kind(), format!("reading {}: {e}", file.display()))),
    }
}

/// The blocks the pods under `pods_dir` hold, except `except`'s. A file that cannot be read
/// fails the allocation: handing its block to another pod could share it.
fn used_blocks(pods_dir: &Path, except: &str) -> std::io::Result<Vec<u32>> {
    let entries = match std::fs::read_dir(pods_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::new(e.kind(), format!("reading {}: {e}", pods_dir.display()))),
    };
    let mut used = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_name() == except {
            continue;
        }
        used.extend(read_block(&entry.path().join(FILE))?);
    }
    Ok(used)
}

/// Writes the file with `checkpoint` (durable: a crash leaves either no block or the whole one).
fn write_block(pod_dir: &Path, host_id: u32) -> std::io::Result<()> {
    let map = IdMap { host_id, container_id: 0, length: IDS_PER_POD };
    crate::checkpoint::write_json(&pod_dir.join(FILE), &Mappings { uids: vec![map], gids: vec![map] })
        .map_err(|e| Error::other(crate::error_chain(&e)))
}

/// The pod's block: the one its directory holds, else a new one written there. Blocks on the
/// disk; `pod_dir` exists (the sandbox's start made it).
pub fn block_of(pod_dir: &Path) -> std::io::Result<u32> {
    let file = pod_dir.join(FILE);
    if let Some(id) = read_block(&file)? {
        return Ok(id);
    }
    let _guard = ALLOCATING.lock().unwrap_or_else(|p| p.into_inner());
    // Read again under the lock: another sync of the same pod may have just written it.
    if let Some(id) = read_block(&file)? {
        return Ok(id);
    }
    let pods_dir: PathBuf = pod_dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let uid = pod_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let used = used_blocks(&pods_dir, uid)?;
    let range = IdRange::of_node()?;
    let id = first_free(range, &used).ok_or_else(|| {
        Error::other(format!(
            "could not find an empty slot to allocate a user namespace ({} blocks of {IDS_PER_POD} IDs from {}, all in use)",
            range.blocks(),
            range.first
        ))
    })?;
    write_block(pod_dir, id)?;
    Ok(id)
}

/// The CRI user namespace of a pod holding the block at `host_id`: its own (mode POD), the same
/// mapping for UIDs and GIDs.
pub fn namespace(host_id: u32) -> api::UserNamespace {
    let m = api::IdMapping { host_id, container_id: 0, length: IDS_PER_POD };
    api::UserNamespace { mode: api::NamespaceMode::Pod as i32, uids: vec![m], gids: vec![m] }
}

/// The kubelet's refusal when the runtime handler does not report user namespace support.
pub fn unsupported_message(handler: &str) -> String {
    if handler.is_empty() {
        "can't set `spec.hostUsers: false`, runtime does not support user namespaces".into()
    } else {
        format!(
            "can't set `spec.hostUsers: false`, RuntimeClass handler {handler:?} does not support user namespaces"
        )
    }
}

/// Whether `handler` is among the runtime's handlers with `user_namespaces` set (the kubelet's
/// `HandlerSupportsUserNamespaces`: an unknown handler does not).
pub fn handler_supports(handlers: &[api::RuntimeHandler], handler: &str) -> bool {
    handlers
        .iter()
        .find(|h| h.name == handler)
        .is_some_and(|h| h.features.as_ref().is_some_and(|f| f.user_namespaces))
}

/// The sandbox's and every container's namespace options carry the pod's user namespace, and
/// each mount the same ID mapping (an idmapped mount: files the pod's root writes are root's
/// on the host, as without a user namespace).
pub fn apply_to_sandbox(config: &mut api::PodSandboxConfig, ns: &api::UserNamespace) {
    let sc = config.linux.get_or_insert_default().security_context.get_or_insert_default();
    sc.namespace_options.get_or_insert_default().userns_options = Some(ns.clone());
}

/// The user namespace a sandbox config carries, if its own (mode POD).
pub fn of_sandbox(config: &api::PodSandboxConfig) -> Option<&api::UserNamespace> {
    let ns = config.linux.as_ref()?.security_context.as_ref()?.namespace_options.as_ref()?;
    ns.userns_options.as_ref().filter(|u| u.mode == api::NamespaceMode::Pod as i32)
}

/// See [`apply_to_sandbox`].
pub fn apply_to_container(config: &mut api::ContainerConfig, ns: &api::UserNamespace) {
    let sc = config.linux.get_or_insert_default().security_context.get_or_insert_default();
    sc.namespace_options.get_or_insert_default().userns_options = Some(ns.clone());
    for m in &mut config.mounts {
        m.uid_mappings = ns.uids.clone();
        m.gid_mappings = ns.gids.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Name, file text, the range or a substring of the error.
    type SubuidCase<'a> = (&'a str, &'a str, Result<Option<IdRange>, &'a str>);

    #[test]
    fn subuid_ranges() {
        let cases: &[SubuidCase] = &[
            ("no file content", "", Ok(None)),
            ("another user", "kube:65536:65536\n", Ok(None)),
            (
                "kubelet's line",
                "root:100000:65536\nkubelet:131072:655360\n",
                Ok(Some(IdRange { first: 131072, len: 655360 })),
            ),
            ("first not aligned", "kubelet:100000:65536", Err("multiple of 65536")),
            ("first below one block", "kubelet:0:65536", Err("at least 65536")),
            ("count not aligned", "kubelet:65536:1000", Err("count must be")),
            ("garbage", "kubelet:x:65536", Err("first ID")),
            ("too few fields", "kubelet:65536", Err("expected name:first:count")),
        ];
        for (name, text, want) in cases {
            let got = IdRange::from_subuid(text, "kubelet");
            match (want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(w, g, "{name}"),
                (Err(w), Err(g)) => assert!(g.contains(w), "{name}: {g}"),
                _ => panic!("{name}: got {got:?}"),
            }
        }
    }

    #[test]
    fn free_blocks() {
        let small = IdRange { first: 65536, len: 3 * 65536 };
        let cases: &[(&str, IdRange, &[u32], Option<u32>)] = &[
            ("none used", small, &[], Some(65536)),
            ("first used", small, &[65536], Some(131072)),
            ("a hole", small, &[65536, 196608], Some(131072)),
            ("all used", small, &[65536, 131072, 196608], None),
            ("default range, none used", IdRange::DEFAULT, &[], Some(65536)),
            ("default range, first used", IdRange::DEFAULT, &[65536], Some(131072)),
        ];
        for (name, range, used, want) in cases {
            assert_eq!(first_free(*range, used), *want, "{name}");
        }
        assert_eq!(IdRange::DEFAULT.blocks(), 65535, "the default range holds every block but the first");
    }

    #[test]
    fn mapping_files() {
        let cases: &[(&str, &str, Result<u32, &str>)] = &[
            (
                "the kubelet's form",
                r#"{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#,
                Ok(131072),
            ),
            (
                "uid and gid differ",
                r#"{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":196608,"containerId":0,"length":65536}]}"#,
                Err("differ"),
            ),
            (
                "root not mapped",
                r#"{"uidMappings":[{"hostId":131072,"containerId":1,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":1,"length":65536}]}"#,
                Err("container ID 0"),
            ),
            (
                "host root",
                r#"{"uidMappings":[{"hostId":0,"containerId":0,"length":65536}],"gidMappings":[{"hostId":0,"containerId":0,"length":65536}]}"#,
                Err("container ID 0"),
            ),
            ("two mappings", r#"{"uidMappings":[],"gidMappings":[]}"#, Err("one UID and one GID")),
            ("not json", "{", Err("invalid user namespace mappings file")),
        ];
        for (name, text, want) in cases {
            match (want, parse(text)) {
                (Ok(w), Ok(g)) => assert_eq!(*w, g, "{name}"),
                (Err(w), Err(g)) => assert!(g.contains(w), "{name}: {g}"),
                (_, got) => panic!("{name}: got {got:?}"),
            }
        }
    }
}
