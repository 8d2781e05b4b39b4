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
fn a_hung_agent_is_restarted_by_the_watchdog_and_no_container_with_it() {
    let g = Guest::fresh();
    g.manifest("burstable", BURSTABLE);
    let before = instances(&g.running("burstable"));
    let main_pid = g.ok("systemctl show -p MainPID --value crilet");
    // The unit's 60 s watchdog, shortened for the test (the agent pings at half of whatever
    // WATCHDOG_USEC systemd gives it); the abort's wait too. `systemctl restart` returns once
    // the new agent sent READY=1 (Type=notify): a plain restart keeps every container.
    g.ok("mkdir -p /run/systemd/system/crilet.service.d && printf '[Service]\\nWatchdogSec=10s\\nTimeoutAbortSec=5s\\n' >/run/systemd/system/crilet.service.d/watchdog.conf && systemctl daemon-reload && systemctl restart crilet");
    assert_ne!(g.ok("systemctl show -p MainPID --value crilet"), main_pid, "a new agent runs");
    assert_eq!(instances(&g.running("burstable")), before, "the same instances after `systemctl restart`");
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

/// Pods under the cgroupfs driver on cgroup v2 (the agent's own cgroups, runc's container
/// cgroups inside them): see [`pods_under`].
#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn pods_under_the_cgroupfs_driver_on_cgroup_v2() {
    let g = Guest::fresh();
    assert_eq!(g.ok("stat -fc %T /sys/fs/cgroup"), "cgroup2fs", "the guest must run cgroup v2");
    pods_under(&g, Driver::Cgroupfs);
}

/// Pods under the systemd cgroup driver (containerd's `SystemdCgroup = true`): the kubelet's
/// slices, made, resized and stopped through systemd; see [`pods_under`].
#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn pods_under_the_systemd_cgroup_driver() {
    let g = Guest::fresh();
    g.ok(&driver_switch(true));
    let check = g.ok("crilet preflight --cgroup-driver systemd | grep cgroup-driver || true");
    assert!(check.starts_with("PASS"), "preflight's cgroup-driver check on a systemd node: {check}");
    // containerd 2.1 reports its driver (CRI RuntimeConfig): the agent follows it, as the kubelet
    // does, even without the flag.
    let check = g.ok("crilet preflight | grep cgroup-driver || true");
    assert!(check.starts_with("PASS") && check.contains("systemd (from CRI RuntimeConfig)"), "{check}");
    pods_under(&g, Driver::Systemd);
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Driver {
    Cgroupfs,
    Systemd,
}

impl Driver {
    /// The QoS parents: kubepods, burstable, besteffort.
    fn qos(self) -> [&'static str; 3] {
        match self {
            Driver::Cgroupfs => ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"],
            Driver::Systemd => [
                "/kubepods.slice",
                "/kubepods.slice/kubepods-burstable.slice",
                "/kubepods.slice/kubepods-besteffort.slice",
            ],
        }
    }

    /// A pod's cgroup under its QoS parent (`qos` "" for Guaranteed), as the kubelet names it.
    fn pod(self, qos: &str, uid: &str) -> String {
        match (self, qos) {
            (Driver::Cgroupfs, "") => format!("/kubepods/pod{uid}"),
            (Driver::Cgroupfs, q) => format!("/kubepods/{q}/pod{uid}"),
            (Driver::Systemd, "") => format!("/kubepods.slice/kubepods-pod{}.slice", uid.replace('-', "_")),
            (Driver::Systemd, q) => {
                format!("/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{}.slice", uid.replace('-', "_"))
            }
        }
    }

    /// A container's cgroup in its pod's (runc: a directory, or a scope of the pod's slice).
    fn container(self, pod: &str, id: &str) -> String {
        match self {
            Driver::Cgroupfs => format!("{pod}/{id}"),
            Driver::Systemd => format!("{pod}/cri-containerd-{id}.scope"),
        }
    }
}

/// The unit of a slice's cgroup path (its last part).
fn unit(cgroup: &str) -> &str {
    cgroup.rsplit('/').next().unwrap_or(cgroup)
}

/// The kubelet's cgroups on cgroup v2 under one driver, through a pod's life:
/// - the QoS parents: `kubepods` at the node's shares and memory, `besteffort` at the minimum,
///   `burstable` following its pods' cpu requests and back when they go;
/// - a Guaranteed pod right under kubepods, limited as a whole (every container has limits, so
///   the pod has their sum); a Burstable pod whose sidecar has no limits unlimited as a whole,
///   its app limited;
/// - a restart of the agent keeps every container, and sweeps an old pod cgroup no sandbox
///   carries, leaving a young one, one outside kubepods and the live pods' alone;
/// - a resize in place (the pod's and the container's limits, the same instance), then a new
///   image: that container alone restarts, in the same pod cgroup;
/// - the pods gone, their cgroups (and slices) go.
fn pods_under(g: &Guest, driver: Driver) {
    let systemd = driver == Driver::Systemd;
    let cpus: i64 = g.ok("nproc").parse().expect("nproc");
    let mem_kib: i64 = g.ok("awk '/^MemTotal:/ {print $2}' /proc/meminfo").parse().expect("MemTotal");
    // The kubelet's shares as cgroup v2 weight (runc's conversion).
    let weight = |shares: i64| 1 + ((shares - 2) * 9999) / 262_142;
    let weight_is = |cg: &str, want: i64| format!("[ \"$(cat /sys/fs/cgroup{cg}/cpu.weight)\" = {want} ]");
    let [root, burstable_qos, besteffort_qos] = driver.qos();

    g.wait("kubepods at the node's cpus", SLOW, &weight_is(root, weight(cpus * 1024)));
    let max: i64 = g.cgroup_file(root, "memory.max").parse().expect("kubepods memory.max");
    assert!(
        (mem_kib * 1024 - max).abs() < 1 << 20,
        "{driver:?}: kubepods memory.max {max} for MemTotal {mem_kib} kB"
    );
    assert_eq!(g.cgroup_file(besteffort_qos, "cpu.weight"), "1", "{driver:?}: {besteffort_qos}");
    g.wait("burstable at the minimum", SLOW, &weight_is(burstable_qos, 1));
    // kubepods holds the node's process IDs (the lesser of pid_max and threads-max); the
    // QoS classes below it have no limit of their own.
    let pids: i64 = g
        .ok("cat /proc/sys/kernel/pid_max /proc/sys/kernel/threads-max | sort -n | head -1")
        .parse()
        .expect("pid limit");
    assert_eq!(g.cgroup_file(root, "pids.max"), pids.to_string(), "{driver:?}: kubepods pids.max");
    assert_eq!(g.cgroup_file(burstable_qos, "pids.max"), "max", "{driver:?}: {burstable_qos} pids.max");
    if systemd {
        let tasks = g.ok("systemctl show -p TasksMax --value kubepods.slice");
        assert_eq!(tasks, pids.to_string(), "kubepods.slice TasksMax");
    }

    g.manifest("guaranteed", GUARANTEED);
    g.manifest("burstable", BURSTABLE);
    let guaranteed = g.running("guaranteed");
    let burstable = g.running("burstable");
    let live = guaranteed["metadata"]["uid"].as_str().expect("uid").to_string();
    let guaranteed_cg = driver.pod("", &live);
    let burstable_cg = driver.pod("burstable", burstable["metadata"]["uid"].as_str().expect("uid"));
    if systemd {
        // Units systemd knows and runs.
        for cg in [&guaranteed_cg, &burstable_cg] {
            assert_eq!(g.ok(&format!("systemctl is-active {}", unit(cg))), "active", "{cg}");
        }
    }

    // Guaranteed: 500m a 100 ms period, 64Mi; 512 shares as weight 1 + 510 * 9999 / 262142.
    let pod = &guaranteed_cg;
    assert_eq!(g.cgroup_file(pod, "cpu.max"), "50000 100000", "{pod}");
    assert_eq!(g.cgroup_file(pod, "memory.max"), (64 << 20).to_string(), "{pod}");
    assert_eq!(g.cgroup_file(pod, "cpu.weight"), "20", "{pod}");
    if systemd {
        assert_eq!(
            g.ok(&format!("systemctl show -p CPUWeight --value {}", unit(pod))),
            "20",
            "the unit's CPUWeight"
        );
    }
    let app = driver.container(pod, &container_id(&guaranteed, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (64 << 20).to_string(), "{app}");
    assert_eq!(g.cgroup_file(&app, "cpu.max"), "50000 100000", "{app}");

    // Burstable, its sidecar unlimited: no pod-level limit; 100m requested in all: 102 shares.
    let pod = &burstable_cg;
    assert_eq!(g.cgroup_file(pod, "cpu.max"), "max 100000", "{pod}");
    assert_eq!(g.cgroup_file(pod, "memory.max"), "max", "{pod}");
    assert_eq!(g.cgroup_file(pod, "cpu.weight"), weight(102).to_string(), "{pod}: 100m as cpu.weight");
    let app = driver.container(pod, &container_id(&burstable, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (48 << 20).to_string(), "{app}");
    assert_eq!(g.cgroup_file(&app, "cpu.max"), "25000 100000", "{app}");
    // The burstable QoS parent follows its pod's requests.
    g.wait("burstable at its pod's requests", SLOW, &weight_is(burstable_qos, weight(102)));
    if systemd {
        let unit_weight = |u: &str| g.ok(&format!("systemctl show -p CPUWeight --value {u}"));
        assert_eq!(unit_weight("kubepods-burstable.slice"), weight(102).to_string());
        assert_eq!(unit_weight("kubepods.slice"), weight(cpus * 1024).to_string());
    }

    // The agent restarted: every container kept, the old orphan swept (made old by touch; a
    // unit systemd runs under the systemd driver, as a pod's slice is), the rest left alone.
    let (orphan, young) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
    let orphan_cg = format!("/sys/fs/cgroup{}", driver.pod("besteffort", &orphan));
    let young_cg = format!("/sys/fs/cgroup{}", driver.pod("burstable", &young));
    let foreign = format!("/sys/fs/cgroup/crilet-test-foreign/pod{orphan}");
    let make = if systemd {
        format!("systemctl start {} {}", unit(&orphan_cg), unit(&young_cg))
    } else {
        format!("mkdir -p {orphan_cg} {young_cg}")
    };
    g.ok(&format!("{make} && mkdir -p {foreign} && touch -d 2020-01-01 {orphan_cg} {foreign}"));
    let before = [instances(&guaranteed), instances(&burstable)];
    let main_pid = g.ok("systemctl show -p MainPID --value crilet");
    // `systemctl restart` returns once the new agent sent READY=1 (Type=notify).
    g.ok("systemctl restart crilet");
    assert_ne!(g.ok("systemctl show -p MainPID --value crilet"), main_pid, "a new agent runs");
    g.wait("the orphan swept", SLOW, &format!("! test -d {orphan_cg}"));
    if systemd {
        let state = g.ok(&format!("systemctl is-active {} || true", unit(&orphan_cg)));
        assert_ne!(state, "active", "the orphan's slice stopped");
    }
    for kept in [&young_cg, &foreign, &format!("/sys/fs/cgroup{guaranteed_cg}")] {
        g.ok(&format!("test -d {kept}"));
    }
    let after = [instances(&g.running("guaranteed")), instances(&g.running("burstable"))];
    assert_eq!(after, before, "{driver:?}: the same instances, restart counts too, after the restart");
    g.ok(&format!("rmdir {foreign} /sys/fs/cgroup/crilet-test-foreign"));
    if systemd {
        g.ok(&format!("systemctl stop {}", unit(&young_cg)));
    } else {
        g.ok(&format!("rmdir {young_cg}"));
    }

    // Resized in place: the pod's cgroup (the slice's unit properties too) and the container's
    // follow, the same instance.
    let resized_spec = GUARANTEED.replace("{cpu: 500m, memory: 64Mi}", "{cpu: 300m, memory: 96Mi}");
    g.manifest("guaranteed", &resized_spec);
    let pod = &guaranteed_cg;
    g.wait(
        "the pod's cgroup resized",
        SLOW,
        &format!(
            "[ \"$(cat /sys/fs/cgroup{pod}/memory.max)\" = {} ] && [ \"$(cat /sys/fs/cgroup{pod}/cpu.max)\" = '30000 100000' ]",
            96 << 20
        ),
    );
    if systemd {
        assert_eq!(
            g.ok(&format!("systemctl show -p MemoryMax --value {}", unit(pod))),
            (96 << 20).to_string()
        );
    }
    let app_id = container_id(&guaranteed, "app");
    let app = driver.container(pod, &app_id);
    g.wait(
        "the container's limit resized",
        SLOW,
        &format!("[ \"$(cat /sys/fs/cgroup{app}/memory.max)\" = {} ]", 96 << 20),
    );
    let resized = g.running("guaranteed");
    assert_eq!(resized["metadata"]["uid"], guaranteed["metadata"]["uid"], "the same pod");
    assert_eq!(instances(&resized), instances(&guaranteed), "{driver:?}: resized without a restart");

    // A new image: a new instance of the app, running and ready, in the same pod and cgroup.
    let image = g.env.get("CRILET_IMAGE_BUSYBOX").replace("busybox:1.36", "web:v1");
    g.manifest("guaranteed", &resized_spec.replace("${CRILET_IMAGE_BUSYBOX}", &image));
    let updated = g.wait_pod("guaranteed", "the app restarted on the new image", |p| {
        let status = &p["status"]["containerStatuses"][0];
        status["image"].as_str().is_some_and(|i| i.ends_with("web:v1"))
            && status["ready"] == true
            && container_id(p, "app") != app_id
    });
    assert_eq!(updated["metadata"]["uid"], guaranteed["metadata"]["uid"], "updated in place, the same pod");
    let app = driver.container(pod, &container_id(&updated, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (96 << 20).to_string(), "{app}");
    if systemd {
        assert_eq!(g.ok(&format!("systemctl is-active {}", unit(pod))), "active");
    }

    // The pods gone: their cgroups (and slices) too, and burstable back at the minimum.
    g.ok("rm -f /etc/crilet/manifests/*");
    let mut gone =
        format!("! test -e /sys/fs/cgroup{guaranteed_cg} && ! test -e /sys/fs/cgroup{burstable_cg}");
    if systemd {
        for cg in [&guaranteed_cg, &burstable_cg] {
            gone.push_str(&format!(" && ! systemctl is-active --quiet {}", unit(cg)));
        }
    }
    g.wait("the pods' cgroups to be removed", SLOW, &gone);
    g.wait("burstable back at the minimum", SLOW, &weight_is(burstable_qos, 1));
}
