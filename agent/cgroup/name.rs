//! Cgroup names as the kubelet writes them (`pkg/kubelet/cm/cgroup_manager_linux.go`): a
//! driver-neutral name (`["kubepods", "burstable", "pod<uid>"]`) and its two spellings, the
//! cgroupfs path (`/kubepods/burstable/pod<uid>`) and systemd's slices
//! (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`). Pure.

use super::CgroupDriver;

/// The kubelet's root of every pod cgroup (`--cgroup-root=/` with `--cgroups-per-qos`).
pub const KUBEPODS: &str = "kubepods";
const SLICE: &str = ".slice";
/// The prefix containerd gives a container's scope under the systemd driver
/// (`<pod slice>:cri-containerd:<id>` in the OCI spec's `cgroupsPath`).
const SCOPE_PREFIX: &str = "cri-containerd";

/// A pod's QoS class, which picks its parent cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Directly under `kubepods`.
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    /// From `status.qosClass`'s spelling; anything else is BestEffort, as the pod's class is
    /// when it asks for nothing.
    pub fn from_class(class: &str) -> Self {
        match class {
            "Guaranteed" => Qos::Guaranteed,
            "Burstable" => Qos::Burstable,
            _ => Qos::BestEffort,
        }
    }

    pub const ALL: [Qos; 3] = [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort];

    /// The QoS cgroup pods of this class live in (`qosContainersInfo`): Guaranteed pods sit in
    /// `kubepods` itself.
    pub fn parent(self) -> CgroupName {
        let root = CgroupName::new(&[KUBEPODS]);
        match self {
            Qos::Guaranteed => root,
            Qos::Burstable => root.child("burstable"),
            Qos::BestEffort => root.child("besteffort"),
        }
    }
}

/// A driver-neutral cgroup name: its components from the root (the kubelet's `CgroupName`).
/// Components hold no `/` and no `_` (the kubelet forbids `_` so that the systemd spelling,
/// which turns `-` into `_`, can be read back).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CgroupName(Vec<String>);

impl CgroupName {
    pub fn new(components: &[&str]) -> Self {
        CgroupName(Vec::new()).children(components)
    }

    /// This name with `component` appended (`NewCgroupName(base, component)`).
    pub fn child(&self, component: &str) -> Self {
        self.children(&[component])
    }

    fn children(&self, components: &[&str]) -> Self {
        let mut out = self.0.clone();
        for c in components {
            debug_assert!(!c.contains(['/', '_']), "invalid character in cgroup name component {c:?}");
            out.push((*c).to_string());
        }
        CgroupName(out)
    }

    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// The cgroupfs spelling (`ToCgroupfs`): `/kubepods/burstable/pod<uid>`.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The systemd slice's unit name: the components joined by `-`, each with its `-` turned
    /// into `_` (`kubepods-burstable-pod1234_abcd.slice`); the root is `-.slice`.
    pub fn slice_unit(&self) -> String {
        if self.0.is_empty() {
            return "-.slice".into();
        }
        let escaped: Vec<String> = self.0.iter().map(|p| p.replace('-', "_")).collect();
        format!("{}{SLICE}", escaped.join("-"))
    }

    /// The systemd spelling as a cgroupfs path (`ToSystemd`): every slice above it expanded,
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice`.
    pub fn to_systemd(&self) -> String {
        expand_slice(&self.slice_unit()).unwrap_or_else(|| "/".into())
    }

    /// The parent's name (the root's parent is the root).
    pub fn parent(&self) -> Self {
        let mut out = self.0.clone();
        out.pop();
        CgroupName(out)
    }

    /// The name a cgroupfs path spells (`ParseCgroupfsToCgroupName`).
    pub fn parse_cgroupfs(path: &str) -> Self {
        CgroupName(path.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect())
    }

    /// The name a systemd slice (or its expanded path) spells (`ParseSystemdToCgroupName`).
    pub fn parse_systemd(path: &str) -> Self {
        let base = path.rsplit('/').next().unwrap_or(path);
        let base = base.strip_suffix(SLICE).unwrap_or(base);
        if base.is_empty() || base == "-" {
            return CgroupName(Vec::new());
        }
        CgroupName(base.split('-').map(|p| p.replace('_', "-")).collect())
    }
}

/// libcontainer's `ExpandSlice`: `test-a-b.slice` is `/test.slice/test-a.slice/test-a-b.slice`,
/// `-.slice` the root. `None` for a name systemd would refuse (no `.slice` suffix, a `/`, an
/// empty component as in `a--b.slice` or `-a.slice`).
pub fn expand_slice(slice: &str) -> Option<String> {
    let name = slice.strip_suffix(SLICE)?;
    if slice.contains('/') || name.is_empty() {
        return None;
    }
    if name == "-" {
        return Some("/".into());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for component in name.split('-') {
        if component.is_empty() {
            return None;
        }
        path.push('/');
        path.push_str(&prefix);
        path.push_str(component);
        path.push_str(SLICE);
        prefix.push_str(component);
        prefix.push('-');
    }
    Some(path)
}

/// The name of pod `uid`'s cgroup (`GetPodContainerName`): `pod<uid>` under its QoS parent.
pub fn pod(qos: Qos, uid: &str) -> CgroupName {
    qos.parent().child(&format!("pod{uid}"))
}

/// The pod UID a pod cgroup's directory name carries, under either driver: `pod<uid>`
/// (cgroupfs) or `kubepods[-<qos>]-pod<uid with _>.slice` (systemd). `None` for anything else.
pub fn pod_uid_of(dir_name: &str, driver: CgroupDriver) -> Option<String> {
    let last = match driver {
        CgroupDriver::Cgroupfs => dir_name.to_string(),
        CgroupDriver::Systemd => {
            if !dir_name.ends_with(SLICE) {
                return None;
            }
            let name = CgroupName::parse_systemd(dir_name);
            if name.components().first().map(String::as_str) != Some(KUBEPODS) {
                return None;
            }
            name.components().last()?.clone()
        }
    };
    let uid = last.strip_prefix("pod")?;
    let plausible =
        !uid.is_empty() && uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    plausible.then(|| uid.to_string())
}

impl CgroupDriver {
    /// The cgroup's path below a hierarchy's root under this driver (the kubelet's `Name`,
    /// "always a valid cgroupfs path, even when systemd driver is in use"). It is also what the
    /// kubelet hands the runtime as a sandbox's `cgroup_parent`: containerd keeps the last
    /// element of a `.slice` path as the systemd parent, and uses any other path as it is.
    pub fn path(self, name: &CgroupName) -> String {
        match self {
            CgroupDriver::Cgroupfs => name.to_cgroupfs(),
            CgroupDriver::Systemd => name.to_systemd(),
        }
    }

    /// The path of container `id` of the pod cgroup `pod`: the runtime's layout, `<pod>/<id>`
    /// under cgroupfs (containerd joins the parent and the ID) and
    /// `<pod slice>/cri-containerd-<id>.scope` under systemd (containerd's
    /// `<slice>:cri-containerd:<id>`, which runc's systemd driver makes a transient scope of).
    pub fn container_path(self, pod: &CgroupName, id: &str) -> String {
        let parent = self.path(pod);
        match self {
            CgroupDriver::Cgroupfs => format!("{}/{id}", parent.trim_end_matches('/')),
            CgroupDriver::Systemd => format!("{parent}/{SCOPE_PREFIX}-{id}.scope"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6b1c2d3e-0000-4000-8000-000000000001";
    const UID_: &str = "6b1c2d3e_0000_4000_8000_000000000001";

    /// cgroup_manager_linux_test.go's TestCgroupNameToSystemd and
    /// TestCgroupNameToSystemdBasename, and the ToSystemd doc comment's example.
    #[test]
    fn the_kubelets_examples() {
        let n = CgroupName::new;
        for (name, systemd) in [
            (n(&[]), "/"),
            (n(&["Burstable"]), "/Burstable.slice"),
            (n(&["Burstable", "pod-123"]), "/Burstable.slice/Burstable-pod_123.slice"),
            (
                n(&["BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"]),
                "/BestEffort.slice/BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
            ),
            (n(&["kubepods"]), "/kubepods.slice"),
            (
                n(&["kubepods", "burstable", "pod1234-abcd-5678-efgh"]),
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice",
            ),
        ] {
            assert_eq!(name.to_systemd(), systemd, "{name:?}");
            assert_eq!(CgroupName::parse_systemd(systemd), name, "{systemd}");
        }
        for (name, base) in [
            (n(&["system"]), "system.slice"),
            (n(&["system", "Burstable"]), "system-Burstable.slice"),
            (n(&["Burstable", "pod-123"]), "Burstable-pod_123.slice"),
            (n(&["test", "a", "b"]), "test-a-b.slice"),
            (n(&["test", "a", "b", "Burstable"]), "test-a-b-Burstable.slice"),
            (n(&["Burstable"]), "Burstable.slice"),
            (
                n(&["BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"]),
                "BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
            ),
        ] {
            assert_eq!(name.slice_unit(), base, "{name:?}");
            assert_eq!(name.to_systemd().rsplit('/').next(), Some(base), "{name:?}");
        }
        for (name, cgroupfs) in [
            (n(&[]), "/"),
            (n(&["kubepods", "burstable", "pod1234-abcd"]), "/kubepods/burstable/pod1234-abcd"),
        ] {
            assert_eq!(name.to_cgroupfs(), cgroupfs);
            assert_eq!(CgroupName::parse_cgroupfs(cgroupfs), name);
        }
    }

    #[test]
    fn expand_slice_as_libcontainer() {
        for (slice, want) in [
            ("-.slice", Some("/")),
            ("test.slice", Some("/test.slice")),
            ("test-a.slice", Some("/test.slice/test-a.slice")),
            ("test-a-b.slice", Some("/test.slice/test-a.slice/test-a-b.slice")),
            ("test-waldo.slice", Some("/test.slice/test-waldo.slice")),
            ("test--a.slice", None),
            ("-test.slice", None),
            ("test-.slice", None),
            ("test", None),
            (".slice", None),
            ("a/b.slice", None),
        ] {
            assert_eq!(expand_slice(slice).as_deref(), want, "{slice}");
        }
    }

    /// Every QoS class under both drivers: the path below a hierarchy's root (also the CRI
    /// `cgroup_parent`), the slice unit, and a container's cgroup.
    #[test]
    fn pod_cgroups_by_qos_and_driver() {
        use CgroupDriver::{Cgroupfs, Systemd};
        let cases = [
            (Qos::Guaranteed, Cgroupfs, format!("/kubepods/pod{UID}"), format!("/kubepods/pod{UID}/c1")),
            (
                Qos::Burstable,
                Cgroupfs,
                format!("/kubepods/burstable/pod{UID}"),
                format!("/kubepods/burstable/pod{UID}/c1"),
            ),
            (
                Qos::BestEffort,
                Cgroupfs,
                format!("/kubepods/besteffort/pod{UID}"),
                format!("/kubepods/besteffort/pod{UID}/c1"),
            ),
            (
                Qos::Guaranteed,
                Systemd,
                format!("/kubepods.slice/kubepods-pod{UID_}.slice"),
                format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-c1.scope"),
            ),
            (
                Qos::Burstable,
                Systemd,
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"),
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-c1.scope"
                ),
            ),
            (
                Qos::BestEffort,
                Systemd,
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"),
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-c1.scope"
                ),
            ),
        ];
        for (qos, driver, path, container) in cases {
            let name = pod(qos, UID);
            assert_eq!(driver.path(&name), path, "{qos:?} {driver:?}");
            assert_eq!(driver.container_path(&name, "c1"), container, "{qos:?} {driver:?}");
            let dir = path.rsplit('/').next().unwrap_or_default();
            assert_eq!(pod_uid_of(dir, driver).as_deref(), Some(UID), "{dir}");
        }
        for (qos, unit) in [
            (Qos::Guaranteed, format!("kubepods-pod{UID_}.slice")),
            (Qos::Burstable, format!("kubepods-burstable-pod{UID_}.slice")),
            (Qos::BestEffort, format!("kubepods-besteffort-pod{UID_}.slice")),
        ] {
            assert_eq!(pod(qos, UID).slice_unit(), unit);
            assert_eq!(CgroupName::parse_systemd(&unit), pod(qos, UID), "{unit}");
        }
        assert_eq!(Qos::Burstable.parent().slice_unit(), "kubepods-burstable.slice");
        assert_eq!(Qos::Guaranteed.parent().slice_unit(), "kubepods.slice");
        assert_eq!(Qos::Guaranteed.parent().parent().slice_unit(), "-.slice");
    }

    #[test]
    fn pod_uids_from_directory_names() {
        use CgroupDriver::{Cgroupfs, Systemd};
        for (name, driver, want) in [
            ("podabc", Cgroupfs, Some("abc")),
            ("pod", Cgroupfs, None),
            ("besteffort", Cgroupfs, None),
            ("pod../x", Cgroupfs, None),
            ("pod a", Cgroupfs, None),
            ("kubepods-burstable-poda_b.slice", Systemd, Some("a-b")),
            ("kubepods-poda_b.slice", Systemd, Some("a-b")),
            ("kubepods-besteffort.slice", Systemd, None),
            ("kubepods-burstable-poda_b.slice", Cgroupfs, None),
            ("system-poda.slice", Systemd, None),
            ("kubepods-poda.scope", Systemd, None),
            ("poda", Systemd, None),
        ] {
            assert_eq!(pod_uid_of(name, driver).as_deref(), want, "{name} {driver:?}");
        }
    }
}
