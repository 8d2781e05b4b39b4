//! The host's mount table as mount propagation needs it: which mount holds a path and whether
//! that mount is shared or a slave (`/proc/self/mountinfo`), and making `--root-dir` a shared
//! mount as the kubelet does (`setupDataDirs` → `MakeRShared`). The parsing is pure and
//! table-tested; the function that touches the host says so.

use std::path::{Path, PathBuf};

/// The API server's words (`validateMountPropagation`) for a bidirectional mount in a container
/// that is not privileged; static pods' validation and the container's mounts use them too.
pub const BIDIRECTIONAL_UNPRIVILEGED: &str =
    "Bidirectional mount propagation is available only to privileged containers";

/// The file the kernel describes this process's mounts in.
pub const SELF_MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of mountinfo: where the mount is, and its propagation (the optional fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount point, unescaped.
    pub mount_point: PathBuf,
    /// The path inside the mounted file system that is mounted there (`/` for a whole one).
    pub root: PathBuf,
    /// `shared:N`: mounts and unmounts under it propagate to and from its peers.
    pub shared: bool,
    /// `master:N`: it receives propagation from a peer group (a slave mount).
    pub slave: bool,
}

impl MountEntry {
    /// How the mount propagates, in mountinfo's words (`shared`, `slave`, both, or `private`).
    pub fn propagation(&self) -> &'static str {
        match (self.shared, self.slave) {
            (true, true) => "shared and slave",
            (true, false) => "shared",
            (false, true) => "slave",
            (false, false) => "private",
        }
    }
}

/// The mounts in `text` (mountinfo's format; malformed lines are skipped).
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let (root, mount_point) = (fields.get(3)?, fields.get(4)?);
            // The optional fields run from the 7th to the "-" separator.
            let optional = fields.get(6..)?.iter().take_while(|f| **f != "-");
            let (mut shared, mut slave) = (false, false);
            for f in optional {
                shared |= f.starts_with("shared:");
                slave |= f.starts_with("master:");
            }
            Some(MountEntry {
                mount_point: PathBuf::from(unescape(mount_point)),
                root: PathBuf::from(unescape(root)),
                shared,
                slave,
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as 3-digit octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that holds `path` (absolute, symlinks already resolved): the last entry whose
/// mount point is `path` or one of its ancestors, as the kubelet's `findMountInfo` finds it (a
/// later mount on the same point, or above it, hides an earlier one).
pub fn holding<'a>(mounts: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    mounts.iter().rev().find(|m| path.starts_with(&m.mount_point))
}

/// The mount points at or below `dir`, as the mount table lists them.
pub fn at_or_below(mounts: &[MountEntry], dir: &Path) -> Vec<PathBuf> {
    mounts.iter().filter(|m| m.mount_point.starts_with(dir)).map(|m| m.mount_point.clone()).collect()
}

/// Removes the tree at `dir` unless something is mounted at or below it, which is left in place
/// and returned as the error: a removal never crosses into a mount, as the kubelet's
/// `RemoveAllOneFilesystem` never does. A privileged `Bidirectional` container may have mounted
/// anything into its emptyDir, even host directories, and the host keeps those mounts after
/// the container is gone (upstream leaves unmounting them to the container). Blocks on the disk.
pub fn remove_tree_unless_mounted(dir: &Path) -> Result<(), String> {
    let table =
        std::fs::read_to_string(SELF_MOUNTINFO).map_err(|e| format!("reading {SELF_MOUNTINFO}: {e}"))?;
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounted = at_or_below(&parse(&table), &real);
    if !mounted.is_empty() {
        let list: Vec<String> = mounted.iter().map(|p| p.display().to_string()).collect();
        return Err(format!("{} still has mounts at or below it: {}", dir.display(), list.join(", ")));
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("removing {}: {e}", dir.display())),
        _ => Ok(()),
    }
}

/// Why a mount with this propagation cannot take its source from `path`, or `None` when it
/// can: containerd's rule (`ensureShared` / `ensureSharedOrSlave`), checked by crilet first so
/// the message can name the volume. `bidirectional` needs a shared mount; host-to-container a
/// shared or a slave one.
pub fn propagation_problem(mounts: &[MountEntry], path: &Path, bidirectional: bool) -> Option<String> {
    let Some(m) = holding(mounts, path) else {
        return Some(format!("no mount holds {} in {SELF_MOUNTINFO}", path.display()));
    };
    let ok = if bidirectional { m.shared } else { m.shared || m.slave };
    let need = if bidirectional { "a shared mount" } else { "a shared or slave mount" };
    (!ok).then(|| {
        format!(
            "{} is on mount {}, which is {}, not {need} (make it shared on the host: mount --make-rshared {})",
            path.display(),
            m.mount_point.display(),
            m.propagation(),
            m.mount_point.display()
        )
    })
}

/// The file [`make_rshared`] leaves in the directory it bind-mounted, so that uninstalling crilet
/// and `hack/teardown.sh` unmount that bind and never a mount an administrator made there.
pub const BIND_RECORD: &str = "rshared-bind";

/// What [`make_rshared`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RShared {
    /// `dir` was already on a shared mount: nothing to do.
    Already,
    /// `dir` was bind-mounted onto itself and made rshared.
    BindMounted,
}

/// Makes `dir` a shared mount as the kubelet makes its root directory one (`MakeRShared`):
/// nothing when the mount holding it is already shared, otherwise `dir` is bind-mounted onto
/// itself (recursively, so mounts already below it stay visible; the kubelet's bind is not
/// recursive), the bind is made rshared and [`BIND_RECORD`] is written in it. The kubelet does
/// this at start; crilet does it when a pod first needs it (a volume under `--root-dir` with
/// HostToContainer or Bidirectional propagation), so a node whose pods never ask carries no
/// extra mount. The bind stays when the agent stops (a restarted agent must find the peer
/// group its running containers' mounts belong to). Serialised, so two pods never stack two
/// binds. Blocks on the host's mount table.
pub fn make_rshared(dir: &Path) -> Result<RShared, std::io::Error> {
    use nix::mount::{MsFlags, mount};
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = std::fs::canonicalize(dir)?;
    let text = std::fs::read_to_string(SELF_MOUNTINFO)?;
    if holding(&parse(&text), &dir).is_some_and(|m| m.shared) {
        return Ok(RShared::Already);
    }
    let none: Option<&str> = None;
    mount(Some(&dir), &dir, none, MsFlags::MS_BIND | MsFlags::MS_REC, none)
        .map_err(|e| std::io::Error::other(format!("bind-mounting {} onto itself: {e}", dir.display())))?;
    mount(none, &dir, none, MsFlags::MS_SHARED | MsFlags::MS_REC, none)
        .map_err(|e| std::io::Error::other(format!("making {} rshared: {e}", dir.display())))?;
    let record = "crilet bind-mounted this directory onto itself with shared propagation (the \
                  kubelet's MakeRShared); uninstalling crilet or hack/teardown.sh unmounts it\n";
    std::fs::write(dir.join(BIND_RECORD), record)?;
    Ok(RShared::BindMounted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:50 / /srv/shared rw shared:7 - tmpfs t rw
41 27 0:51 / /srv/slave rw master:7 - tmpfs t rw
42 27 0:52 / /srv/both rw shared:9 master:7 - tmpfs t rw
43 27 254:0 /var/lib/crilet /var/lib/crilet rw shared:12 - ext4 /dev/vda rw
44 27 0:53 / /srv/with\\040space rw shared:13 - tmpfs t rw
45 40 0:54 / /srv/shared/inner rw - tmpfs t rw
46 40 0:55 / /srv/shared/over rw - tmpfs t rw
47 40 0:56 / /srv/shared/over rw shared:14 - tmpfs t rw
bad line
";

    #[test]
    fn the_mount_holding_a_path_and_what_propagation_it_allows() {
        let mounts = parse(TABLE);
        let cases = [
            ("on the root, private", "/srv/other/dir", "/", "private"),
            ("shared mount", "/srv/shared/a/b", "/srv/shared", "shared"),
            ("a private mount inside a shared one", "/srv/shared/inner/x", "/srv/shared/inner", "private"),
            ("the last mount on a point wins", "/srv/shared/over", "/srv/shared/over", "shared"),
            ("a name prefix is not a parent", "/srv/sharedx", "/", "private"),
            ("slave", "/srv/slave", "/srv/slave", "slave"),
            ("both", "/srv/both/d", "/srv/both", "shared and slave"),
            ("a bind of a dir onto itself", "/var/lib/crilet/pods/u", "/var/lib/crilet", "shared"),
            ("escaped space", "/srv/with space/d", "/srv/with space", "shared"),
        ];
        for (name, path, mount_point, propagation) in cases {
            let m = holding(&mounts, Path::new(path)).unwrap_or_else(|| panic!("{name}: none"));
            assert_eq!(m.mount_point, Path::new(mount_point), "{name}");
            assert_eq!(m.propagation(), propagation, "{name}");
        }
        assert_eq!(mounts.len(), 9, "the malformed line is skipped");
        let below = at_or_below(&mounts, Path::new("/srv/shared"));
        assert_eq!(below.len(), 4, "{below:?}");
        assert!(at_or_below(&mounts, Path::new("/srv/sharedx")).is_empty());
        assert_eq!(mounts[4].root, Path::new("/var/lib/crilet"));
    }

    #[test]
    fn propagation_needs_shared_or_slave_as_containerd_checks() {
        let mounts = parse(TABLE);
        // (path, bidirectional, allowed)
        let cases = [
            ("/srv/shared/d", true, true),
            ("/srv/shared/d", false, true),
            ("/srv/slave/d", true, false),
            ("/srv/slave/d", false, true),
            ("/srv/both", true, true),
            ("/srv/other", false, false),
            ("/srv/other", true, false),
        ];
        for (path, bidirectional, allowed) in cases {
            let problem = propagation_problem(&mounts, Path::new(path), bidirectional);
            assert_eq!(problem.is_none(), allowed, "{path} bidirectional={bidirectional}: {problem:?}");
        }
        let why = propagation_problem(&mounts, Path::new("/srv/slave/d"), true).unwrap();
        assert_eq!(
            why,
            "/srv/slave/d is on mount /srv/slave, which is slave, not a shared mount \
             (make it shared on the host: mount --make-rshared /srv/slave)"
        );
    }
}
