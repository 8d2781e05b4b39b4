//! AppArmor enforced, on a node whose kernel has it: `hack/guest.sh`'s guest (Debian's kernel,
//! the `apparmor` package, containerd 2.1). Each container prints the label it runs under
//! (`/proc/self/attr/current`) and whether it may write to /tmp: RuntimeDefault and no profile at
//! all give containerd's default profile, Unconfined and a privileged container asking for
//! RuntimeDefault give none, a Localhost profile the test loads (field or deprecated annotation)
//! confines the container and denies the write; a Localhost profile that is not loaded is the
//! runtime's CreateContainerError naming it.
//!
//! Ignored by a plain `cargo test`: it needs `hack/guest.sh up` (hack/test.sh's guest leg).

mod common;

use common::guest::{Guest, SLOW};

const PROFILE: &str = "crilet-test-deny-tmp";
const MISSING: &str = "crilet-test-not-loaded";

/// A container printing its AppArmor label and whether a write to /tmp works, then sleeping.
fn container(name: &str, security: &str) -> String {
    format!(
        "  - name: {name}\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    securityContext: {security}\n    \
         command: [sh, -c, 'echo \"label=$(cat /proc/self/attr/current)\"; if echo x >/tmp/probe; then echo write=ok; else echo write=denied; fi; exec sleep 3600']\n"
    )
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn apparmor_profiles_are_enforced_by_the_runtime() {
    let g = Guest::fresh();
    assert_eq!(g.ok("cat /sys/module/apparmor/parameters/enabled"), "Y", "the guest's kernel has AppArmor");
    // A profile denying writes to /tmp; signals and the rest allowed, so the runtime can stop it.
    g.ok(&format!(
        "printf 'profile {PROFILE} flags=(attach_disconnected,mediate_deleted) {{\\n  file,\\n  network,\\n  capability,\\n  signal,\\n  unix,\\n  ptrace,\\n  deny /tmp/** w,\\n}}\\n' >/run/{PROFILE} && apparmor_parser -r /run/{PROFILE} && grep -q '^{PROFILE} ' /sys/kernel/security/apparmor/profiles"
    ));
    let mut yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: aa-profiles, namespace: default}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  securityContext: {appArmorProfile: {type: RuntimeDefault}}\n  containers:\n"
        .to_string();
    yaml += &container("dflt", "{}");
    yaml += &container("unconf", "{appArmorProfile: {type: Unconfined}}");
    yaml += &container(
        "local",
        &format!("{{appArmorProfile: {{type: Localhost, localhostProfile: {PROFILE}}}}}"),
    );
    yaml += &container("priv", "{privileged: true}");
    g.manifest("aa-profiles", &yaml);
    // No profile asked at all: the kubelet sends none, and the runtime applies its default. (The
    // annotation's container sits in a pod with no pod-level field: a field it inherits must
    // agree with it, as the API server checks.)
    let mut unset = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: aa-unset\n  namespace: default\n  annotations:\n    \
         container.apparmor.security.beta.kubernetes.io/legacy: localhost/{PROFILE}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n"
    );
    unset += &container("plain", "{}");
    unset += &container("legacy", "{}");
    g.manifest("aa-unset", &unset);
    let missing = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: aa-missing, namespace: default}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n{}",
        container("gone", &format!("{{appArmorProfile: {{type: Localhost, localhostProfile: {MISSING}}}}}"))
    );
    g.manifest("aa-missing", &missing);

    g.running("aa-profiles");
    g.running("aa-unset");
    let default = "label=cri-containerd.apparmor.d (enforce)";
    let confined = format!("label={PROFILE} (enforce)");
    for (pod, c, label, write) in [
        ("aa-profiles", "dflt", default, "write=ok"),
        ("aa-profiles", "unconf", "label=unconfined", "write=ok"),
        ("aa-profiles", "local", confined.as_str(), "write=denied"),
        ("aa-unset", "legacy", confined.as_str(), "write=denied"),
        ("aa-profiles", "priv", "label=unconfined", "write=ok"),
        ("aa-unset", "plain", default, "write=ok"),
    ] {
        let log = g.wait(
            &format!("{pod}/{c}'s log"),
            SLOW,
            &format!("crilet logs {pod} -c {c} | grep -q write= && crilet logs {pod} -c {c}"),
        );
        assert!(
            log.contains(label) && log.contains(write),
            "{pod}/{c}: want {label:?} and {write}, got:\n{log}"
        );
    }

    let pod = g.wait_pod("aa-missing", "a CreateContainerError", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerError"
    });
    let message =
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(MISSING), "the runtime's error names the profile: {message}");

    g.ok("rm -f /etc/crilet/manifests/aa-*.yaml");
    g.wait("the test's pods gone", SLOW, "[ \"$(crilet get pods -o json | grep -c '\"uid\"')\" = 0 ]");
    g.ok(&format!("apparmor_parser -R /run/{PROFILE} && rm -f /run/{PROFILE}"));
}
