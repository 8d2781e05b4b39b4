//! crilet on a node as production runs them: `hack/guest.sh`'s QEMU guest, with systemd 252 as
//! PID 1, cgroup v2, containerd 2.1 and bookworm's runc. Each test installs the binary under
//! test with `hack/install.sh` (the unit of `systemd/`), starts `crilet.service` through systemd
//! and looks at the guest over ssh: pod cgroups in the unified tree, the service's restart and
//! its watchdog.
//!
//! Ignored by a plain `cargo test`: they need `hack/guest.sh up`. hack/test.sh's guest leg runs
//! them with `--ignored --test-threads=1` (they share the one guest).

mod common;

use common::guest::{Guest, SLOW, container_id, driver_switch, instances};

const GUARANTEED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: guaranteed, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, "3600"]
    resources:
      limits: {cpu: 500m, memory: 64Mi}
"#;

const BURSTABLE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: burstable, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: side
    image: ${CRILET_IMAGE_BUSYBOX}
    restartPolicy: Always
    command: [sleep, "3600"]
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 250m, memory: 48Mi}
"#;

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn pods_get_their_cgroups_in_the_unified_tree() {
    let g = Guest::fresh();
    assert_eq!(g.ok("stat -fc %T /sys/fs/cgroup"), "cgroup2fs", "the guest must run cgroup v2");
    g.manifest("guaranteed", GUARANTEED);
    g.manifest("burstable", BURSTABLE);
    let guaranteed = g.running("guaranteed");
    let burstable = g.running("burstable");

    // A Guaranteed pod sits right under kubepods, limited as a whole (the kubelet's pod
    // container manager: every container has limits, so the pod has their sum).
    let uid = guaranteed["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod = format!("/kubepods/pod{uid}");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "50000 100000", "{pod}: 500m a 100 ms period");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), (64 << 20).to_string(), "{pod}: 64Mi");
    // The kubelet's weight for the pod's 512 shares (500m): 1 + (512 - 2) * 9999 / 262142.
    assert_eq!(g.cgroup_file(&pod, "cpu.weight"), "20", "{pod}: 500m as cpu.weight");
    let app = format!("{pod}/{}", container_id(&guaranteed, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (64 << 20).to_string(), "{app}");
    assert_eq!(g.cgroup_file(&app, "cpu.max"), "50000 100000", "{app}");

    // A Burstable pod whose sidecar has no limits: no pod-level limit (one container unlimited
    // leaves the pod unlimited), while the app's own cgroup has its limits.
    let uid = burstable["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod = format!("/kubepods/burstable/pod{uid}");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "max 100000", "{pod}");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), "max", "{pod}");
    // 100m requested in all: 102 shares, weight 1 + 100 * 9999 / 262142.
    assert_eq!(g.cgroup_file(&pod, "cpu.weight"), "4", "{pod}: 100m as cpu.weight");
    let app = format!("{pod}/{}", container_id(&burstable, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (48 << 20).to_string(), "{app}");
    assert_eq!(g.cgroup_file(&app, "cpu.max"), "25000 100000", "{app}");

    // Removing the manifests removes the pods and their cgroups.
    g.ok("rm -f /etc/crilet/manifests/guaranteed.yaml /etc/crilet/manifests/burstable.yaml");
    g.wait(
        "the pods' cgroups to be removed",
        SLOW,
        &format!(
            "! ls -d /sys/fs/cgroup/kubepods/pod{} {pod} 2>/dev/null",
            guaranteed["metadata"]["uid"].as_str().unwrap_or("")
        ),
    );
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn restarting_the_service_keeps_every_container() {
    let g = Guest::fresh();
    g.manifest("burstable", BURSTABLE);
    let before = instances(&g.running("burstable"));
    let main_pid = g.ok("systemctl show -p MainPID --value crilet");
    // `systemctl restart` returns once the new agent sent READY=1 (Type=notify).
    g.ok("systemctl restart crilet");
    assert_ne!(g.ok("systemctl show -p MainPID --value crilet"), main_pid, "a new agent runs");
    assert_eq!(g.ok("systemctl is-active crilet"), "active");
    let after = instances(&g.running("burstable"));
    assert_eq!(after, before, "the same instances with the same restart counts after the restart");
    g.ok("rm -f /etc/crilet/manifests/burstable.yaml");
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn a_hung_agent_is_restarted_by_the_watchdog_and_no_container_with_it() {
    let g = Guest::fresh();
    g.manifest("burstable", BURSTABLE);
    // The unit's 60 s watchdog, shortened for the test (the agent pings at half of whatever
    // WATCHDOG_USEC systemd gives it); the abort's wait too.
    g.ok("mkdir -p /run/systemd/system/crilet.service.d && printf '[Service]\\nWatchdogSec=10s\\nTimeoutAbortSec=5s\\n' >/run/systemd/system/crilet.service.d/watchdog.conf && systemctl daemon-reload && systemctl restart crilet");
    let before = instances(&g.running("burstable"));
    let restarts: u32 = g.ok("systemctl show -p NRestarts --value crilet").parse().expect("NRestarts");
    let pid = g.ok("systemctl show -p MainPID --value crilet");
    // Hung: its threads stop, pings stop; the watchdog fires 10 s after the last one.
    g.ok(&format!("kill -STOP {pid}"));
    g.wait(
        "systemd to restart the hung agent",
        SLOW,
        &format!(
            "[ \"$(systemctl show -p NRestarts --value crilet)\" -gt {restarts} ] && [ \"$(systemctl show -p MainPID --value crilet)\" != {pid} ] && systemctl is-active --quiet crilet"
        ),
    );
    let journal = g.ok("journalctl -u crilet --no-pager -n 200");
    assert!(journal.contains("Watchdog timeout"), "systemd's reason is the watchdog:\n{journal}");
    let after = instances(&g.running("burstable"));
    assert_eq!(after, before, "no container restarted with the agent");
    g.ok("rm -f /run/systemd/system/crilet.service.d/watchdog.conf /etc/crilet/manifests/burstable.yaml; systemctl daemon-reload");
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn the_systemd_cgroup_driver_gives_pods_the_kubelets_slices() {
    let g = Guest::fresh();
    g.ok(&driver_switch(true));
    let check = g.ok("crilet preflight --cgroup-driver systemd | grep cgroup-driver || true");
    assert!(check.starts_with("PASS"), "preflight's cgroup-driver check on a systemd node: {check}");
    // containerd 2.1 reports its driver (CRI RuntimeConfig): the agent follows it, as the kubelet
    // does, even without the flag.
    let check = g.ok("crilet preflight | grep cgroup-driver || true");
    assert!(check.starts_with("PASS") && check.contains("systemd (from CRI RuntimeConfig)"), "{check}");
    g.manifest("guaranteed", GUARANTEED);
    g.manifest("burstable", BURSTABLE);
    let guaranteed = g.running("guaranteed");
    let burstable = g.running("burstable");

    // The kubelet's slices: kubepods-pod<uid with _>.slice right under kubepods.slice for a
    // Guaranteed pod, made through systemd (a unit it knows and runs), limited as a whole.
    let uid = guaranteed["metadata"]["uid"].as_str().expect("uid").replace('-', "_");
    let slice = format!("kubepods-pod{uid}.slice");
    assert_eq!(g.ok(&format!("systemctl is-active {slice}")), "active", "{slice}");
    let pod = format!("/kubepods.slice/{slice}");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "50000 100000", "{pod}");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), (64 << 20).to_string(), "{pod}");
    assert_eq!(g.cgroup_file(&pod, "cpu.weight"), "20", "{pod}");
    assert_eq!(g.ok(&format!("systemctl show -p CPUWeight --value {slice}")), "20", "the unit's CPUWeight");
    // runc puts each container in a scope of the pod's slice.
    let app = format!("{pod}/cri-containerd-{}.scope", container_id(&guaranteed, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (64 << 20).to_string(), "{app}");

    let uid = burstable["metadata"]["uid"].as_str().expect("uid").replace('-', "_");
    let burstable_slice = format!("kubepods-burstable-pod{uid}.slice");
    assert_eq!(g.ok(&format!("systemctl is-active {burstable_slice}")), "active");
    let pod = format!("/kubepods.slice/kubepods-burstable.slice/{burstable_slice}");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "max 100000", "{pod}");
    let app = format!("{pod}/cri-containerd-{}.scope", container_id(&burstable, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (48 << 20).to_string(), "{app}");

    // A restart of the agent on this driver keeps every container too.
    let before = instances(&burstable);
    g.ok("systemctl restart crilet");
    assert_eq!(instances(&g.running("burstable")), before, "the same instances after the restart");

    // The pods gone, their slices are stopped and their cgroups removed.
    g.ok("rm -f /etc/crilet/manifests/*");
    g.wait(
        "the pods' slices to be stopped and removed",
        SLOW,
        &format!(
            "! systemctl is-active --quiet {slice} && ! systemctl is-active --quiet {burstable_slice} && ! ls -d /sys/fs/cgroup/kubepods.slice/{slice} {pod} 2>/dev/null"
        ),
    );
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn resize_and_image_updates_reach_the_systemd_slice_in_place() {
    let g = Guest::fresh();
    g.ok(&driver_switch(true));
    g.manifest("guaranteed", GUARANTEED);
    let before = g.running("guaranteed");
    let uid = before["metadata"]["uid"].as_str().expect("uid").to_string();
    let slice = format!("kubepods-pod{}.slice", uid.replace('-', "_"));
    let pod = format!("/kubepods.slice/{slice}");
    let app = container_id(&before, "app");

    // cpu and memory changed in the manifest: resized in place, the same container, the slice's
    // unit properties and its files both follow.
    g.manifest("guaranteed", &GUARANTEED.replace("{cpu: 500m, memory: 64Mi}", "{cpu: 300m, memory: 96Mi}"));
    g.wait(
        "the pod's slice resized",
        SLOW,
        &format!(
            "[ \"$(cat /sys/fs/cgroup{pod}/memory.max)\" = {} ] && [ \"$(cat /sys/fs/cgroup{pod}/cpu.max)\" = '30000 100000' ]",
            96 << 20
        ),
    );
    assert_eq!(g.ok(&format!("systemctl show -p MemoryMax --value {slice}")), (96 << 20).to_string());
    let scope = format!("{pod}/cri-containerd-{app}.scope");
    g.wait(
        "the container's limit resized",
        SLOW,
        &format!("[ \"$(cat /sys/fs/cgroup{scope}/memory.max)\" = {} ]", 96 << 20),
    );
    let resized = g.running("guaranteed");
    assert_eq!(resized["metadata"]["uid"], before["metadata"]["uid"], "the same pod");
    assert_eq!(instances(&resized), instances(&before), "resized without a restart");

    // A new image: that container restarts in the same pod and slice.
    let env = &g.env;
    let edited = GUARANTEED.replace("{cpu: 500m, memory: 64Mi}", "{cpu: 300m, memory: 96Mi}").replace(
        "${CRILET_IMAGE_BUSYBOX}",
        &env.get("CRILET_IMAGE_BUSYBOX").replace("busybox:1.36", "web:v1"),
    );
    g.manifest("guaranteed", &edited);
    // A new instance of the app, on the new image, running and ready.
    let updated = g.wait_pod("guaranteed", "the app restarted on the new image", |p| {
        let status = &p["status"]["containerStatuses"][0];
        status["image"].as_str().is_some_and(|i| i.ends_with("web:v1"))
            && status["ready"] == true
            && container_id(p, "app") != app
    });
    assert_ne!(container_id(&updated, "app"), app, "a new instance of the app");
    assert_eq!(updated["metadata"]["uid"], before["metadata"]["uid"], "updated in place, the same pod");
    let new_app = container_id(&updated, "app");
    let scope = format!("{pod}/cri-containerd-{new_app}.scope");
    assert_eq!(g.cgroup_file(&scope, "memory.max"), (96 << 20).to_string(), "{scope}");
    assert_eq!(g.ok(&format!("systemctl is-active {slice}")), "active");
    g.ok("rm -f /etc/crilet/manifests/*");
    g.wait("the slice stopped", SLOW, &format!("! systemctl is-active --quiet {slice}"));
}

/// The orphan sweep on cgroup v2 under each driver: an old pod cgroup (cgroupfs) or pod slice
/// (systemd) whose UID no sandbox carries is removed when the agent starts; a young one, one
/// outside `kubepods` and a live pod's are left alone.
#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn orphaned_pod_cgroups_and_slices_are_swept_under_both_drivers() {
    let g = Guest::fresh();
    for systemd in [false, true] {
        if systemd {
            g.ok(&driver_switch(true));
        }
        g.manifest("guaranteed", GUARANTEED);
        let before = g.running("guaranteed");
        let live = before["metadata"]["uid"].as_str().expect("uid").to_string();
        let (orphan, young) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
        let foreign = format!("/sys/fs/cgroup/crilet-test-foreign/pod{orphan}");
        let (orphan_cg, young_cg, live_cg, make) = if systemd {
            let slice = |uid: &str, qos: &str| format!("kubepods-{qos}pod{}.slice", uid.replace('-', "_"));
            let orphan_slice = slice(&orphan, "besteffort-");
            let young_slice = slice(&young, "burstable-");
            (
                format!("/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/{orphan_slice}"),
                format!("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/{young_slice}"),
                format!("/sys/fs/cgroup/kubepods.slice/{}", slice(&live, "")),
                // Units systemd runs, as a pod's slice is: the sweep must stop them.
                format!("systemctl start {orphan_slice} {young_slice}"),
            )
        } else {
            let (o, y) = (
                format!("/sys/fs/cgroup/kubepods/besteffort/pod{orphan}"),
                format!("/sys/fs/cgroup/kubepods/burstable/pod{young}"),
            );
            let make = format!("mkdir -p {o} {y}");
            (o, y, format!("/sys/fs/cgroup/kubepods/pod{live}"), make)
        };
        g.ok(&format!("{make} && mkdir -p {foreign} && touch -d 2020-01-01 {orphan_cg} {foreign}"));
        g.ok("systemctl restart crilet");
        g.wait("the orphan swept", SLOW, &format!("! test -d {orphan_cg}"));
        if systemd {
            let unit = orphan_cg.rsplit('/').next().expect("unit");
            assert_ne!(
                g.ok(&format!("systemctl is-active {unit} || true")),
                "active",
                "the orphan's slice stopped"
            );
        }
        for kept in [&young_cg, &foreign, &live_cg] {
            g.ok(&format!("test -d {kept}"));
        }
        assert_eq!(instances(&g.running("guaranteed")), instances(&before), "the live pod untouched");
        g.ok(&format!("rmdir {foreign} /sys/fs/cgroup/crilet-test-foreign"));
        if systemd {
            g.ok(&format!("systemctl stop {}", young_cg.rsplit('/').next().expect("unit")));
        } else {
            g.ok(&format!("rmdir {young_cg}"));
        }
        g.ok("rm -f /etc/crilet/manifests/*");
        g.wait("the pod gone", SLOW, &format!("! test -d {live_cg}"));
    }
}

/// Graceful node shutdown that logind cannot give: another drop-in keeps `InhibitDelayMaxSec`
/// below the grace period after crilet's own. The agent says so (an error naming both values)
/// and holds no lock, rather than holding one logind would cut short; its pods run on.
#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn a_shutdown_delay_logind_will_not_give_is_reported() {
    let g = Guest::fresh();
    let over = "/etc/systemd/logind.conf.d/zz-crilet-test.conf";
    g.ok(&format!(
        "mkdir -p /etc/systemd/logind.conf.d && printf '[Login]\\nInhibitDelayMaxSec=5\\n' >{over}"
    ));
    g.ok("mkdir -p /run/systemd/system/crilet.service.d && printf '[Service]\\nExecStart=\\nExecStart=/usr/local/bin/crilet run --config /etc/crilet/config.yaml --shutdown-grace-period 20s --shutdown-grace-period-critical-pods 8s\\n' >/run/systemd/system/crilet.service.d/shutdown.conf && systemctl daemon-reload && systemctl restart crilet");
    g.manifest("guaranteed", GUARANTEED);
    g.running("guaranteed");
    let said = g.wait(
        "the agent's report",
        SLOW,
        "journalctl -u crilet --no-pager -o cat | grep 'graceful node shutdown is off'",
    );
    // Cleaned up before asserting: the shutdown test that runs later needs logind as it was.
    g.ok(&format!("rm -f {over} && systemctl kill -s HUP systemd-logind"));
    assert!(said.contains("InhibitDelayMaxSec is 5s, less than the shutdown grace period 20s"), "{said}");
    let locks = g.ok("systemd-inhibit --list --no-legend --no-pager");
    assert!(!locks.lines().any(|l| l.contains("crilet")), "no lock of crilet's:\n{locks}");
    g.ok("rm -f /etc/crilet/manifests/*");
}

/// The QoS parents as the kubelet keeps them, on cgroup v2 under each driver: `kubepods` at the
/// node's shares and memory, `besteffort` at the minimum, and `burstable` following its pods'
/// cpu requests (250m of Burstable requests: cpu.weight 10) and back when they go.
#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn the_qos_parents_follow_the_node_and_its_burstable_pods() {
    let g = Guest::fresh();
    let cpus: i64 = g.ok("nproc").parse().expect("nproc");
    let mem_kib: i64 = g.ok("awk '/^MemTotal:/ {print $2}' /proc/meminfo").parse().expect("MemTotal");
    // The kubelet's shares of the node's cpus, as cgroup v2 weight (runc's linear conversion).
    let weight = |shares: i64| 1 + ((shares - 2) * 9999) / 262_142;
    let burstable_250m = BURSTABLE.replace("{cpu: 100m, memory: 32Mi}", "{cpu: 250m, memory: 32Mi}");
    for systemd in [false, true] {
        if systemd {
            g.ok(&driver_switch(true));
        }
        let (root, burstable, besteffort) = if systemd {
            (
                "/kubepods.slice",
                "/kubepods.slice/kubepods-burstable.slice",
                "/kubepods.slice/kubepods-besteffort.slice",
            )
        } else {
            ("/kubepods", "/kubepods/burstable", "/kubepods/besteffort")
        };
        let at = |cg: &str, want: i64| format!("[ \"$(cat /sys/fs/cgroup{cg}/cpu.weight)\" = {want} ]");
        g.wait("kubepods at the node's cpus", SLOW, &at(root, weight(cpus * 1024)));
        let max: i64 = g.cgroup_file(root, "memory.max").parse().expect("kubepods memory.max");
        assert!(
            (mem_kib * 1024 - max).abs() < 1 << 20,
            "kubepods memory.max {max} for MemTotal {mem_kib} kB"
        );
        assert_eq!(g.cgroup_file(besteffort, "cpu.weight"), "1");
        g.wait("burstable at the minimum", SLOW, &at(burstable, 1));
        // The sidecar asks for nothing; the app for 250m: 256 shares.
        g.manifest("burstable", &burstable_250m);
        g.running("burstable");
        g.wait("burstable at its pod's requests", SLOW, &at(burstable, weight(256)));
        if systemd {
            assert_eq!(
                g.ok("systemctl show -p CPUWeight --value kubepods-burstable.slice"),
                weight(256).to_string()
            );
            assert_eq!(
                g.ok("systemctl show -p CPUWeight --value kubepods.slice"),
                weight(cpus * 1024).to_string()
            );
        }
        g.ok("rm -f /etc/crilet/manifests/*");
        g.wait("burstable back at the minimum", SLOW, &at(burstable, 1));
    }
}
