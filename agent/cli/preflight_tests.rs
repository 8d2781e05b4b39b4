use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::paths::*;
use super::runtime::*;
use super::stop_signal::*;
use super::*;
use crate::cri::{CriError, RuntimeInfo, api};
use crate::source::{ManifestProblem, ManifestSet, ProblemKind};

fn pass(name: &'static str, detail: &str) -> Check {
    Check::pass(name, detail)
}
fn warn(name: &'static str, detail: &str) -> Check {
    Check::warn(name, detail)
}
fn fail(name: &'static str, detail: &str) -> Check {
    Check::fail(name, detail)
}
fn failed(e: &str) -> CallError {
    CallError::Failed(e.to_string())
}

const ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

#[test]
fn endpoint_cases() {
    let socket = Path::new("/run/containerd/containerd.sock");
    let info = RuntimeInfo { name: "containerd".into(), version: "2.1.9".into(), api_version: "v1".into() };
    let refused = failed("connection refused");
    let cases = [
        (
            "answers: name, version, CRI api version and endpoint",
            PathState::Socket,
            Ok(info),
            pass(CRI_ENDPOINT, "containerd 2.1.9 (CRI v1) at unix:///run/containerd/containerd.sock"),
        ),
        (
            "no socket file: names the path and what to do",
            PathState::Missing,
            Err(refused.clone()),
            fail(
                CRI_ENDPOINT,
                "no socket at /run/containerd/containerd.sock (unix:///run/containerd/containerd.sock): is \
                 containerd running, and does --container-runtime-endpoint name its socket?",
            ),
        ),
        (
            "a regular file at the path",
            PathState::NotASocket,
            Err(refused.clone()),
            fail(
                CRI_ENDPOINT,
                "/run/containerd/containerd.sock is not a socket; --container-runtime-endpoint must name the \
                 runtime's socket",
            ),
        ),
        (
            "a stale socket file",
            PathState::Socket,
            Err(refused),
            fail(
                CRI_ENDPOINT,
                "nothing answers on /run/containerd/containerd.sock (connection refused); is containerd \
                 running? (a stopped runtime leaves its socket file behind)",
            ),
        ),
        (
            "hung runtime",
            PathState::Socket,
            Err(CallError::TimedOut),
            fail(
                CRI_ENDPOINT,
                "unix:///run/containerd/containerd.sock did not answer Version within 5s; is the runtime hung? \
                 (see its log)",
            ),
        ),
        (
            "CRI plugin disabled",
            PathState::Socket,
            Err(CallError::Unimplemented),
            fail(
                CRI_ENDPOINT,
                "unix:///run/containerd/containerd.sock does not serve the CRI v1 runtime service; is the \
                 runtime's CRI plugin disabled?",
            ),
        ),
    ];
    for (name, state, version, want) in cases {
        assert_eq!(endpoint_check(ENDPOINT, socket, &state, &version), want, "{name}");
    }
}

fn status(conditions: &[(&str, bool, &str, &str)]) -> api::StatusResponse {
    api::StatusResponse {
        status: Some(api::RuntimeStatus {
            conditions: conditions
                .iter()
                .map(|(t, s, r, m)| api::RuntimeCondition {
                    r#type: t.to_string(),
                    status: *s,
                    reason: r.to_string(),
                    message: m.to_string(),
                })
                .collect(),
        }),
        ..Default::default()
    }
}

#[test]
fn condition_cases() {
    let cases = [
        (
            "both true",
            Ok(status(&[("RuntimeReady", true, "", ""), ("NetworkReady", true, "", "")])),
            [pass(RUNTIME_READY, "RuntimeReady=true"), pass(NETWORK_READY, "NetworkReady=true")],
        ),
        (
            "network not ready: reason and message",
            Ok(status(&[
                ("RuntimeReady", true, "", ""),
                ("NetworkReady", false, "NetworkPluginNotReady", "cni plugin not initialized"),
            ])),
            [
                pass(RUNTIME_READY, "RuntimeReady=true"),
                fail(NETWORK_READY, "NetworkReady=false: NetworkPluginNotReady: cni plugin not initialized"),
            ],
        ),
        (
            "condition missing",
            Ok(status(&[("NetworkReady", true, "", "")])),
            [
                fail(RUNTIME_READY, "the runtime does not report RuntimeReady; the agent waits for it"),
                pass(NETWORK_READY, "NetworkReady=true"),
            ],
        ),
        (
            "Status failed: the first fails, the second is skipped",
            Err(CallError::TimedOut),
            [
                fail(RUNTIME_READY, "CRI Status failed: no answer within 5s"),
                Check::skip(NETWORK_READY, "skipped: the runtime's Status call failed"),
            ],
        ),
    ];
    for (name, answer, want) in cases {
        assert_eq!(condition_checks(&answer), want, "{name}");
    }
}

#[test]
fn events_cases() {
    let cases = [
        (EventsProbe::Opened, Verdict::Pass),
        (EventsProbe::Accepted, Verdict::Pass),
        (EventsProbe::Unimplemented, Verdict::Warn),
        (EventsProbe::Failed("boom".into()), Verdict::Warn),
    ];
    for (probe, want) in cases {
        let check = events_check(&probe);
        assert_eq!((check.name, check.verdict), (CRI_EVENTS, want), "{probe:?}");
        match want {
            Verdict::Pass => assert!(check.detail.starts_with("events"), "{probe:?}: {}", check.detail),
            _ => assert!(check.detail.contains("the agent relists every 1 s"), "{probe:?}: {}", check.detail),
        }
    }
    assert_eq!(
        events_check(&EventsProbe::Unimplemented).detail,
        "no CRI event stream; the agent relists every 1 s"
    );
}

#[test]
fn runtime_hints_cases() {
    let info = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let cases = [
        ("no info (not verbose, or not containerd)", info(&[]), RuntimeHints::default()),
        (
            "containerd 1.6/1.7: sandboxImage and the default runtime's options",
            info(&[(
                "config",
                r#"{"sandboxImage":"registry.k8s.io/pause:3.6","containerd":{"defaultRuntimeName":"runc",
                   "runtimes":{"runc":{"options":{"SystemdCgroup":true}},"kata":{"options":{"SystemdCgroup":false}}}}}"#,
            )]),
            RuntimeHints {
                sandbox_image: Some("registry.k8s.io/pause:3.6".into()),
                systemd_cgroup: Some(true),
            },
        ),
        (
            "a pinnedImages.sandbox key (containerd 2.x's config name) in any info entry",
            info(&[
                (
                    "config",
                    r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"options":{"SystemdCgroup":false}}}}}"#,
                ),
                ("imageConfig", r#"{"pinnedImages":{"sandbox":"localhost:5099/pause:3.10"}}"#),
            ]),
            RuntimeHints {
                sandbox_image: Some("localhost:5099/pause:3.10".into()),
                systemd_cgroup: Some(false),
            },
        ),
        (
            "a default runtime without options, garbage values and empty images say nothing",
            info(&[
                (
                    "config",
                    r#"{"sandboxImage":"","containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{}}}}"#,
                ),
                ("golang", "go1.23"),
            ]),
            RuntimeHints::default(),
        ),
    ];
    for (name, info, want) in cases {
        assert_eq!(runtime_hints(&info), want, "{name}");
    }
}

#[test]
fn cgroup_version_cases() {
    let host = CgroupHost::default();
    let cases = [
        ("v2", CgroupHost { v2: true, ..host }, Verdict::Pass, "v2"),
        ("hybrid", CgroupHost { v1_controllers: true, hybrid: true, ..host }, Verdict::Pass, "v1 (hybrid"),
        ("v1", CgroupHost { v1_controllers: true, ..host }, Verdict::Pass, "v1"),
        ("nothing mounted", host, Verdict::Fail, "no cgroup hierarchy"),
    ];
    for (name, host, verdict, prefix) in cases {
        let c = cgroup_version_check(&host);
        assert_eq!((c.name, c.verdict), (CGROUPS, verdict), "{name}");
        assert!(c.detail.starts_with(prefix), "{name}: {}", c.detail);
    }
}

#[test]
fn cgroup_driver_cases() {
    use crate::cgroup::CgroupDriver::{Cgroupfs, Systemd};
    let unimpl = || Err(CallError::Unimplemented);
    let cases = [
        (
            "runtime says cgroupfs",
            None,
            Ok(Some(Cgroupfs)),
            None,
            true,
            Verdict::Pass,
            "cgroupfs (from CRI RuntimeConfig)",
        ),
        (
            "runtime says systemd: the agent follows it",
            None,
            Ok(Some(Systemd)),
            Some(true),
            true,
            Verdict::Pass,
            "systemd (from CRI RuntimeConfig), which the agent follows",
        ),
        (
            "runtime says systemd over a cgroupfs flag: followed, the flag named",
            Some(Cgroupfs),
            Ok(Some(Systemd)),
            None,
            true,
            Verdict::Pass,
            "systemd (from CRI RuntimeConfig), which the agent follows as the kubelet does; --cgroup-driver cgroupfs is not used",
        ),
        (
            "runtime says systemd without systemd as PID 1",
            None,
            Ok(Some(Systemd)),
            None,
            false,
            Verdict::Fail,
            "the runtime reports the systemd cgroup driver (CRI RuntimeConfig), but PID 1 is not systemd",
        ),
        (
            "containerd 1.6/2.1 with SystemdCgroup = true and --cgroup-driver systemd",
            Some(Systemd),
            unimpl(),
            Some(true),
            true,
            Verdict::Pass,
            "systemd, as the runtime's config (SystemdCgroup = true); the runtime does not implement CRI RuntimeConfig, \
             so the agent trusts --cgroup-driver, as the kubelet does",
        ),
        (
            "SystemdCgroup = true, agent on the default: both named",
            None,
            unimpl(),
            Some(true),
            true,
            Verdict::Fail,
            "the agent uses the cgroupfs cgroup driver (the default (--cgroup-driver not given)), the runtime the systemd \
             one (its config: SystemdCgroup = true)",
        ),
        (
            "SystemdCgroup = false, agent on systemd",
            Some(Systemd),
            unimpl(),
            Some(false),
            true,
            Verdict::Fail,
            "the agent uses the systemd cgroup driver (--cgroup-driver), the runtime the cgroupfs one",
        ),
        (
            "unimplemented, config says cgroupfs",
            None,
            unimpl(),
            Some(false),
            true,
            Verdict::Pass,
            "cgroupfs, as the runtime's config (SystemdCgroup = false)",
        ),
        (
            "unknown on a systemd host",
            None,
            unimpl(),
            None,
            true,
            Verdict::Warn,
            "cannot tell the runtime's cgroup driver (the runtime does not implement CRI RuntimeConfig",
        ),
        (
            "unknown without systemd",
            None,
            unimpl(),
            None,
            false,
            Verdict::Pass,
            "cgroupfs (PID 1 is not systemd",
        ),
        (
            "--cgroup-driver systemd without systemd",
            Some(Systemd),
            unimpl(),
            None,
            false,
            Verdict::Fail,
            "the agent would use the systemd cgroup driver (--cgroup-driver), but PID 1 is not systemd",
        ),
        (
            "no Linux section, systemd host",
            None,
            Ok(None),
            None,
            true,
            Verdict::Warn,
            "cannot tell the runtime's cgroup driver (its RuntimeConfig has no Linux section",
        ),
        (
            "RuntimeConfig fails: run would stop",
            None,
            Err(CallError::TimedOut),
            None,
            true,
            Verdict::Fail,
            "asking the runtime for its cgroup driver (RuntimeConfig): no answer within",
        ),
    ];
    for (name, flag, reported, config, systemd_booted, verdict, prefix) in cases {
        let c = cgroup_driver_check(flag, &reported, config, systemd_booted);
        assert_eq!((c.name, c.verdict), (CGROUP_DRIVER, verdict), "{name}: {}", c.detail);
        assert!(c.detail.starts_with(prefix), "{name}: {}", c.detail);
    }
}

#[test]
fn pause_image_cases() {
    let image = "localhost:5099/pause:3.10";
    let id = "sha256:699e66a8c95899a55fd54acfcb8788ed664310ff56178037ef098c2eeeaee6b1";
    let named = |present| PauseProbe::Named { image: image.to_string(), present };
    let cases = [
        (
            "named and present",
            named(Ok(Some(id.to_string()))),
            pass(PAUSE_IMAGE, "localhost:5099/pause:3.10 present (699e66a8c958)"),
        ),
        (
            "named and absent",
            named(Ok(None)),
            warn(PAUSE_IMAGE, "localhost:5099/pause:3.10 not present; will be pulled on the first pod"),
        ),
        (
            "image service broken",
            named(Err(failed("unavailable"))),
            fail(
                PAUSE_IMAGE,
                "CRI ImageStatus of localhost:5099/pause:3.10 at unix:///img.sock failed: unavailable",
            ),
        ),
        (
            "not named, pinned (containerd 2.x)",
            PauseProbe::Pinned(Ok(vec![image.to_string()])),
            pass(PAUSE_IMAGE, "localhost:5099/pause:3.10 present (pinned by the runtime)"),
        ),
        (
            "not named, nothing pinned",
            PauseProbe::Pinned(Ok(vec![])),
            warn(
                PAUSE_IMAGE,
                "no pinned sandbox image (the runtime does not name its pause image, and pins it only once \
                 present); will be pulled on the first pod",
            ),
        ),
        (
            "ListImages failed",
            PauseProbe::Pinned(Err(CallError::TimedOut)),
            fail(PAUSE_IMAGE, "CRI ListImages at unix:///img.sock failed: no answer within 5s"),
        ),
    ];
    for (name, probe, want) in cases {
        assert_eq!(pause_image_check(&probe, "unix:///img.sock"), want, "{name}");
    }
}

#[test]
fn image_names() {
    let image = |tags: &[&str], digests: &[&str]| api::Image {
        id: "sha256:abc".into(),
        repo_tags: tags.iter().map(|t| t.to_string()).collect(),
        repo_digests: digests.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    };
    assert_eq!(image_name(&image(&["pause:3.10", "pause:latest"], &["pause@sha256:1"])), "pause:3.10");
    assert_eq!(image_name(&image(&[], &["pause@sha256:1"])), "pause@sha256:1");
    assert_eq!(image_name(&image(&[], &[])), "sha256:abc");
}

#[test]
fn manifest_dir_cases() {
    let dir = Path::new("/etc/crilet/manifests");
    let file = dir.join("web.yaml");
    let set = |problems: Vec<ManifestProblem>| ManifestSet {
        pods: Default::default(),
        problems,
        ..Default::default()
    };
    let cases = [
        (
            "missing: FAIL with the path",
            ManifestDirProbe::Missing,
            fail(
                MANIFEST_DIR,
                "/etc/crilet/manifests does not exist; create it (mode 0755) or set --pod-manifest-path",
            ),
        ),
        (
            "refused directory (load_dir's own verdict): FAIL",
            ManifestDirProbe::Read {
                mode: 0o777,
                set: set(vec![ManifestProblem::file(ProblemKind::Error, dir, "writable by group or others")]),
            },
            fail(MANIFEST_DIR, "/etc/crilet/manifests: writable by group or others"),
        ),
        (
            "a bad manifest: WARN with the first problem",
            ManifestDirProbe::Read {
                mode: 0o755,
                set: set(vec![
                    ManifestProblem::file(ProblemKind::Warning, &file, "ignored field"),
                    ManifestProblem::doc(
                        ProblemKind::Error,
                        &file,
                        0,
                        Some("metadata.name".into()),
                        "bad".into(),
                    ),
                ]),
            },
            warn(
                MANIFEST_DIR,
                "/etc/crilet/manifests (mode 0755, 0 pods); 1 manifest problem(s), first: \
                 /etc/crilet/manifests/web.yaml: document 0: metadata.name: bad",
            ),
        ),
        (
            "only warnings: PASS",
            ManifestDirProbe::Read {
                mode: 0o700,
                set: set(vec![ManifestProblem::file(ProblemKind::Warning, &file, "ignored field")]),
            },
            pass(MANIFEST_DIR, "/etc/crilet/manifests (mode 0700, 0 pods)"),
        ),
    ];
    for (name, probe, want) in cases {
        assert_eq!(manifest_dir_check(dir, &probe), want, "{name}");
    }
}

/// The probe reads the directory with the agent's own `load_dir`, so its permission rule applies.
#[test]
fn manifest_dir_probe_uses_the_agents_rules() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("manifests");
    assert_eq!(
        manifest_dir_check(&dir, &probe_manifest_dir(&dir, "node", &crate::sysctl::Allowlist::default()))
            .verdict,
        Verdict::Fail
    );

    fs::create_dir(&dir).expect("mkdir");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: busybox\n";
    fs::write(dir.join("web.yaml"), pod).expect("write");
    fs::set_permissions(dir.join("web.yaml"), fs::Permissions::from_mode(0o644)).expect("chmod");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    let ok =
        manifest_dir_check(&dir, &probe_manifest_dir(&dir, "node", &crate::sysctl::Allowlist::default()));
    assert_eq!(ok, pass(MANIFEST_DIR, &format!("{} (mode 0755, 1 pod)", dir.display())));

    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).expect("chmod");
    let bad =
        manifest_dir_check(&dir, &probe_manifest_dir(&dir, "node", &crate::sysctl::Allowlist::default()));
    assert_eq!(bad.verdict, Verdict::Fail, "{}", bad.detail);
    assert!(bad.detail.starts_with(&dir.display().to_string()), "{}", bad.detail);
    assert!(bad.detail.contains("writable by group or others"), "{}", bad.detail);
}

#[test]
fn writable_dir_cases() {
    let path = Path::new("/var/lib/crilet");
    let cases = [
        (DirProbe::Writable, pass(ROOT_DIR, "/var/lib/crilet (writable)")),
        (
            DirProbe::NotWritable("Read-only file system".into()),
            fail(ROOT_DIR, "/var/lib/crilet is not writable: Read-only file system"),
        ),
        (DirProbe::NotADir, fail(ROOT_DIR, "/var/lib/crilet exists and is not a directory")),
        (
            DirProbe::Missing { ancestor: "/var/lib".into(), creatable: true },
            warn(ROOT_DIR, "/var/lib/crilet does not exist; will be created (in /var/lib)"),
        ),
        (
            DirProbe::Missing { ancestor: "/var/lib".into(), creatable: false },
            fail(
                ROOT_DIR,
                "/var/lib/crilet does not exist and cannot be created: /var/lib is not a writable directory",
            ),
        ),
    ];
    for (probe, want) in cases {
        assert_eq!(writable_dir_check(ROOT_DIR, path, &probe), want, "{probe:?}");
    }
}

#[test]
fn dir_probe_finds_the_nearest_existing_ancestor() {
    let tmp = tempfile::tempdir().expect("tempdir");
    assert_eq!(probe_dir(tmp.path()), DirProbe::Writable);
    assert_eq!(
        probe_dir(&tmp.path().join("a/b/c")),
        DirProbe::Missing { ancestor: tmp.path().to_path_buf(), creatable: true }
    );
    let file = tmp.path().join("file");
    fs::write(&file, "").expect("write");
    assert_eq!(probe_dir(&file), DirProbe::NotADir);
    assert_eq!(probe_dir(&file.join("sub")), DirProbe::Missing { ancestor: file, creatable: false });
}

#[test]
fn control_socket_cases() {
    let path = Path::new("/run/crilet/crilet.sock");
    let cases = [
        (SocketProbe::Free(DirProbe::Writable), Verdict::Pass, "/run/crilet/crilet.sock (free)"),
        (
            SocketProbe::Free(DirProbe::Missing { ancestor: "/run".into(), creatable: true }),
            Verdict::Pass,
            "/run/crilet/crilet.sock (free; its directory will be created)",
        ),
        (
            SocketProbe::Free(DirProbe::NotADir),
            Verdict::Fail,
            "cannot create /run/crilet/crilet.sock: /run/crilet exists and is not a directory",
        ),
        (
            SocketProbe::Live { mode: 0o600 },
            Verdict::Fail,
            "an agent already listens on /run/crilet/crilet.sock: stop it or choose another --control-socket",
        ),
        (
            SocketProbe::Live { mode: 0o666 },
            Verdict::Fail,
            "an agent already listens on /run/crilet/crilet.sock: stop it or choose another --control-socket \
             (and its mode 0666 lets group/others connect)",
        ),
        (
            SocketProbe::Stale { mode: 0o600 },
            Verdict::Pass,
            "/run/crilet/crilet.sock (stale socket of an earlier agent; will be replaced)",
        ),
        (
            SocketProbe::Stale { mode: 0o660 },
            Verdict::Warn,
            "stale socket /run/crilet/crilet.sock has mode 0660 (group/others can connect); the agent replaces \
             it with a 0600 one",
        ),
        (
            SocketProbe::NotASocket,
            Verdict::Fail,
            "/run/crilet/crilet.sock exists and is not a socket; the agent will not replace it",
        ),
        (
            SocketProbe::TooLong(120),
            Verdict::Fail,
            "/run/crilet/crilet.sock is 120 bytes long; a Unix socket path holds at most 107",
        ),
    ];
    for (probe, verdict, detail) in cases {
        assert_eq!(
            control_socket_check(path, &probe),
            Check::new(verdict, CONTROL_SOCKET, detail),
            "{probe:?}"
        );
    }
}

#[tokio::test]
async fn control_socket_probe_sees_live_and_stale_sockets() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("s.sock");
    assert_eq!(probe_control_socket(&path).await, SocketProbe::Free(DirProbe::Writable));
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(probe_control_socket(&path).await, SocketProbe::Live { mode: 0o600 });
    drop(listener);
    assert_eq!(probe_control_socket(&path).await, SocketProbe::Stale { mode: 0o600 });
    let long = tmp.path().join("x".repeat(120));
    assert!(matches!(probe_control_socket(&long).await, SocketProbe::TooLong(_)));
}

#[test]
fn report_renders_aligned_lines_and_a_summary() {
    let report = Report {
        checks: vec![
            pass(CRI_ENDPOINT, "containerd 2.1.9 (CRI v1) at unix:///run/c.sock"),
            warn(CRI_EVENTS, "no CRI event stream;\tthe agent relists\nevery 1 s"),
            fail(MANIFEST_DIR, "/m does not exist"),
            Check::skip(PAUSE_IMAGE, "skipped"),
        ],
    };
    let want = "\
PASS  cri-endpoint  containerd 2.1.9 (CRI v1) at unix:///run/c.sock
WARN  cri-events    no CRI event stream; the agent relists every 1 s
FAIL  manifest-dir  /m does not exist
SKIP  pause-image   skipped
preflight: 1 passed, 1 warnings, 1 failures, 1 skipped
";
    assert_eq!(report.render(), want);
    assert!(!report.passed());

    let ok = Report { checks: vec![pass(ROOT_DIR, "/r (writable)"), warn(POD_LOGS_DIR, "will be created")] };
    assert!(ok.passed(), "warnings do not fail preflight");
    assert!(ok.render().ends_with("preflight: 1 passed, 1 warnings, 0 failures\n"));

    let bad_config = Report::config_error("parsing config /etc/crilet/config.yaml: unknown field `foo`");
    assert!(!bad_config.passed());
    assert_eq!(
        bad_config.render(),
        "FAIL  config  parsing config /etc/crilet/config.yaml: unknown field `foo`\n\
         preflight: 0 passed, 0 warnings, 1 failures\n"
    );
}

#[test]
fn cri_errors_map_to_call_errors() {
    let rpc = |code| CriError::Rpc { op: "Version", target: "x".into(), code, message: "m".into() };
    assert_eq!(CallError::from(rpc(tonic::Code::Unimplemented)), CallError::Unimplemented);
    assert_eq!(
        CallError::from(CriError::DeadlineExceeded {
            op: "Status",
            target: "x".into(),
            timeout: CRI_TIMEOUT
        }),
        CallError::TimedOut
    );
    assert_eq!(
        CallError::from(rpc(tonic::Code::Unavailable)),
        CallError::Failed("CRI Version for x failed: Unavailable: m".into())
    );
}

#[test]
fn stop_signal_verdicts() {
    let rt = |version: &str| RuntimeInfo {
        name: "containerd".into(),
        version: version.into(),
        api_version: "v1".into(),
    };
    let probe = |version: &str, reported: Result<Vec<Option<String>>, CallError>| {
        Ok(StopSignalProbe { runtime: rt(version), reported })
    };
    let cases: Vec<(&str, Result<StopSignalProbe, CallError>, Verdict, &str)> = vec![
        (
            "2.3 reports the signals: honoured",
            probe("v2.3.7", Ok(vec![Some("SIGTERM".into()), Some("SIGUSR1".into())])),
            Verdict::Pass,
            "containerd v2.3.7 reports each container's stop signal",
        ),
        (
            "2.1 reports none for its containers: ignored, whatever its version says",
            probe("2.1.9+unknown", Ok(vec![None, None])),
            Verdict::Warn,
            "containerd 2.1.9+unknown ignores lifecycle.stopSignal",
        ),
        (
            "a 2.3 version string but no signal reported: what it does wins",
            probe("v2.3.0", Ok(vec![None])),
            Verdict::Warn,
            "none of 1 containers asked reports a stop signal",
        ),
        (
            "no container, 2.1: by version",
            probe("2.1.9+unknown", Ok(vec![])),
            Verdict::Warn,
            "containerd 2.1.9+unknown ignores lifecycle.stopSignal",
        ),
        (
            "no container, 1.6: by version",
            probe("1.6.20~ds1", Ok(vec![])),
            Verdict::Warn,
            "ignores lifecycle.stopSignal",
        ),
        (
            "no container, 2.4: by version",
            probe("v2.4.0", Ok(vec![])),
            Verdict::Pass,
            "by its version: no container to confirm it",
        ),
        (
            "the list failed, 2.3: by version",
            probe("v2.3.7", Err(CallError::TimedOut)),
            Verdict::Pass,
            "by its version",
        ),
        ("Version failed", Err(CallError::TimedOut), Verdict::Warn, "cannot tell"),
    ];
    for (what, probe, verdict, detail) in cases {
        let c = stop_signal_check(&probe);
        assert_eq!(c.name, STOP_SIGNALS, "{what}");
        assert_eq!(c.verdict, verdict, "{what}: {}", c.detail);
        assert!(c.detail.contains(detail), "{what}: {}", c.detail);
    }
    let other = Ok(StopSignalProbe {
        runtime: RuntimeInfo { name: "cri-o".into(), version: "1.36.0".into(), api_version: "v1".into() },
        reported: Ok(vec![]),
    });
    let c = stop_signal_check(&other);
    assert_eq!((c.verdict, c.detail.contains("cannot tell")), (Verdict::Warn, true), "{}", c.detail);
}

#[test]
fn kubelet_config_cases() {
    use crate::cli::kubelet_config::{Ignored, Impact, Report, Taken};
    let taken = |field: &str, flag| Taken { field: field.into(), flag };
    let ignored = |field: &str, value: &str, impact, why| Ignored {
        field: field.into(),
        value: value.into(),
        impact,
        why,
    };
    let cases = [
        (
            "nothing set: one line, nothing ignored",
            Report::default(),
            vec![pass(KUBELET_CONFIG, "KubeletConfiguration: takes nothing; 0 field(s) ignored")],
        ),
        (
            "taken fields with their flags, one line per ignored field by impact",
            Report {
                taken: vec![
                    taken("staticPodPath", "pod-manifest-path"),
                    taken("cgroupDriver", "cgroup-driver"),
                ],
                ignored: vec![
                    ignored("evictionHard", "{memory.available: 200Mi}", Impact::Behaviour, "no eviction"),
                    ignored("authorization.mode", "AlwaysAllow", Impact::Stricter, "SubjectAccessReview"),
                    ignored("protectKernelDefaults", "true", Impact::Weaker, "unchecked"),
                ],
            },
            vec![
                pass(
                    KUBELET_CONFIG,
                    "KubeletConfiguration: takes staticPodPath (--pod-manifest-path), cgroupDriver (--cgroup-driver); \
                     3 field(s) ignored",
                ),
                warn(KUBELET_CONFIG, "evictionHard: {memory.available: 200Mi} ignored: no eviction"),
                warn(
                    KUBELET_CONFIG,
                    "authorization.mode: AlwaysAllow ignored (security: crilet is stricter): SubjectAccessReview",
                ),
                fail(
                    KUBELET_CONFIG,
                    "protectKernelDefaults: true not enforced (security: the node would be weaker than asked; crilet \
                     run refuses it): unchecked",
                ),
            ],
        ),
    ];
    for (name, report, want) in cases {
        assert_eq!(kubelet_config_checks(&report), want, "{name}");
    }
}

#[test]
fn pod_dns_cases() {
    use crate::dns::DnsSettings;
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("resolv.conf");
    fs::write(&good, "nameserver 10.0.0.2\nsearch lan\n").expect("write");
    let bad = dir.path().join("bad.conf");
    fs::write(&bad, "nameserver\n").expect("write");
    let long = dir.path().join("long.conf");
    fs::write(&long, format!("search {}\n", (0..33).map(|i| format!("d{i}")).collect::<Vec<_>>().join(" ")))
        .expect("write");
    let file = |p: &Path| DnsSettings { resolv_conf: Some(p.to_path_buf()), ..DnsSettings::default() };
    let cluster_dns = DnsSettings {
        cluster_dns: vec!["10.96.0.10".parse().expect("ip")],
        cluster_domain: "cluster.local".into(),
        ..file(&good)
    };
    let g = good.display();
    // (what, settings, cluster mode, verdict, detail starts with)
    let cases = [
        (
            "a static node without cluster DNS",
            file(&good),
            false,
            Verdict::Pass,
            format!("{g}: 1 nameserver(s), 1 search domain(s); no cluster DNS"),
        ),
        (
            "a cluster node without cluster DNS",
            file(&good),
            true,
            Verdict::Warn,
            format!("{g}: 1 nameserver(s), 1 search domain(s); no --cluster-dns"),
        ),
        (
            "cluster DNS",
            cluster_dns,
            true,
            Verdict::Pass,
            format!(
                "{g}: 1 nameserver(s), 1 search domain(s); ClusterFirst pods: 10.96.0.10 (domain \"cluster.local\")"
            ),
        ),
        (
            "no host file",
            DnsSettings { resolv_conf: None, ..DnsSettings::default() },
            false,
            Verdict::Pass,
            "no host resolver file".into(),
        ),
        (
            "a missing file fails",
            file(&dir.path().join("nope")),
            false,
            Verdict::Fail,
            "reading the host's resolver file".into(),
        ),
        (
            "an unparsable file fails",
            file(&bad),
            false,
            Verdict::Fail,
            "parsing the host's resolver file".into(),
        ),
        ("a file over the limits warns", file(&long), false, Verdict::Warn, "Resolv.conf file".into()),
    ];
    for (what, settings, cluster, verdict, detail) in cases {
        let c = pod_dns_check(&settings, cluster);
        assert_eq!((c.verdict, c.name), (verdict, "pod-dns"), "{what}: {c:?}");
        assert!(c.detail.starts_with(&detail), "{what}: {}", c.detail);
    }
}
