//! The Debian package of `hack/deb.sh` on a node with systemd as PID 1 (`hack/guest.sh`'s
//! guest): `apt-get install` enables the unit and starts nothing; an upgrade with pods running
//! restarts the agent and no container; `remove` stops the agent and leaves the pods, the config
//! and the state; `purge` removes the config and the state.
//!
//! The package holds the binary under test (the test profile's, stripped: a release build would
//! add twenty minutes to the suite; the package's contents and scripts are the same).

mod common;

use common::guest::{Guest, SLOW, instances};

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: packaged, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, "3600"]
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 2
"#;

fn apt(g: &Guest, args: &str) -> String {
    g.ok(&format!("DEBIAN_FRONTEND=noninteractive apt-get {args} 2>&1"))
}

/// Whether the container `id` still runs in the guest's containerd.
fn runs(g: &Guest, id: &str) -> bool {
    let tasks = g.ok("ctr -n k8s.io tasks ls");
    tasks.lines().any(|l| l.starts_with(id) && l.contains("RUNNING"))
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn the_package_installs_upgrades_removes_and_purges_without_touching_pods() {
    let g = Guest::fresh();
    let version = env!("CARGO_PKG_VERSION").replace('-', "~");
    let first = g.package(&format!("{version}+guest1"));
    let second = g.package(&format!("{version}+guest2"));

    g.uninstall_dev_copy();

    // A fresh install: enabled, not started; the config a conffile.
    apt(&g, &format!("install -y {first}"));
    assert_eq!(g.ok("systemctl is-enabled crilet"), "enabled");
    assert_eq!(g.sh("systemctl is-active crilet").status.code(), Some(3), "installed, not started");
    assert!(g.ok("dpkg-query -W -f='${Conffiles}' crilet").contains("/etc/crilet/config.yaml"));
    assert!(g.ok("systemctl cat crilet").contains("ExecStart=/usr/bin/crilet run"));

    g.manifest("packaged", POD);
    g.ok("systemctl start crilet");
    let before = instances(&g.running("packaged"));
    let pid = g.ok("systemctl show -p MainPID --value crilet");

    // An upgrade with the pod running: a new agent, the same container, still ready.
    apt(&g, &format!("install -y {second}"));
    assert_eq!(g.ok("dpkg-query -W -f='${Version}' crilet"), format!("{version}+guest2"));
    assert_ne!(g.ok("systemctl show -p MainPID --value crilet"), pid, "the upgrade restarted the agent");
    assert_eq!(instances(&g.running("packaged")), before, "no container restarted by the upgrade");

    // remove: the agent stops, the pod keeps running, config and state stay.
    apt(&g, "remove -y crilet");
    let (_, id, _) = before[0].clone();
    let id = id.trim_start_matches("containerd://").to_string();
    assert!(runs(&g, &id), "the pod's container still runs after remove");
    assert_ne!(g.sh("systemctl is-active crilet").status.code(), Some(0), "removed: no agent");
    g.ok("test -f /etc/crilet/config.yaml && test -d /var/lib/crilet && test -f /etc/crilet/manifests/packaged.yaml");

    // Installed again, the agent adopts the pod as it is.
    apt(&g, &format!("install -y {second}"));
    g.ok("systemctl start crilet");
    assert_eq!(instances(&g.running("packaged")), before, "the reinstalled agent adopts the pod");

    // purge: config and state gone (the pod first, as an operator would).
    g.ok("rm -f /etc/crilet/manifests/packaged.yaml");
    g.wait("the pod to be removed", SLOW, &format!("! ctr -n k8s.io tasks ls | grep -q '^{id}'"));
    apt(&g, "purge -y crilet");
    g.ok("test ! -e /etc/crilet && test ! -e /var/lib/crilet && test ! -e /usr/bin/crilet");
    assert_ne!(g.sh("systemctl cat crilet").status.code(), Some(0), "no unit left after purge");
}
