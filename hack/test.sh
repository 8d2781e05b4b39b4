#!/usr/bin/env bash
# hack/test.sh — run crilet's whole test suite against real containerds (what CI runs).
#
# Usage: hack/test.sh [TEST-FILTER/ARGS...]    (as root)
# Two legs, each set up by hack/setup.sh (packages, private containerd, registry, images):
#   containerd 2.1 (Debian sid's, CRI events): unit tests, the systemd unit check, the real
#       control plane of hack/cluster.sh with OpenKruise on it (hack/kruise.sh), every
#       integration test in tests/ (tests/cluster.rs joins crilet to that control plane,
#       tests/kruise.rs drives it with Kruise's controllers), then the CRI conformance run
#       (hack/critest.sh);
#   containerd 2.3 (built from its Go module, beside the 2.1 environment: the first containerd
#       that honours CRI stop signals): the stop-signal test, then critest on it; a short leg;
#   guest (hack/guest.sh: a QEMU guest with systemd as PID 1, cgroup v2 and containerd 2.1):
#       crilet.service installed by hack/install.sh, pods' cgroups and the QoS parents in the
#       unified tree under both cgroup drivers, the orphan sweep, the service's restart and
#       watchdog (tests/guest.rs), AppArmor profiles enforced (tests/guest_apparmor.rs), the
#       chaos replay on each driver (hack/guest.sh test), the Debian package of hack/deb.sh
#       (tests/guest_package.rs), API pods under both drivers with the guest joined to
#       hack/cluster.sh's control plane, and under each driver /stats/summary and
#       /metrics/resource checked against the pod's cgroup v2 files and a BestEffort pod
#       evicted under memory.available pressure (tests/guest_cluster.rs), `kubeadm join` of a node
#       running crilet from its package (tests/guest_kubeadm.rs), then graceful
#       node shutdown on `systemctl poweroff` (tests/guest_shutdown.rs); it runs in the
#       background beside critest and the 2.3 leg when the 2.1 leg runs too;
#   containerd 1.6 (bookworm's, relist): the lifecycle, probe, status, termination,
#       runtime-restart, runtime-fault, restart-rule, resize and in-place update tests.
# ARGS go to the test binaries of every leg, e.g. `hack/test.sh e2e_sidecar` runs only tests
# whose name contains e2e_sidecar (and skips critest). CRILET_TEST_LEGS="2.1" (or "2.3", "guest", "1.6")
# runs one leg (2.3 sets up the 2.1 environment first if none runs). The run always ends with hack/teardown.sh (not --all: images stay for the next
# run), also when a step fails or the run is interrupted, and hack/verify-clean.sh then checks
# that no process, cgroup, socket, mount, interface or rule of the project is left. Exits
# non-zero if any step failed or something was left; a failing teardown is reported but does
# not change the status.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

check_prerequisites
# 2.3 runs beside the 2.1 environment, so it comes before the 1.6 leg switches that away.
LEGS="${CRILET_TEST_LEGS:-2.1 2.3 guest 1.6}"
# The suite's chaos run replays a seed that passed (a gate should not depend on a new random
# schedule each time); hack/chaos.sh draws a new one. Override with CRILET_CHAOS_SEED.
export CRILET_CHAOS_SEED="${CRILET_CHAOS_SEED:-392422939885647967}"
# The tests that must pass on the relist leg too.
RELIST_TESTS=(--test lifecycle --test probes --test status --test termination --test runtime_restart
    --test runtime_faults --test log_rotation --test metrics --test restart_rules --test resize
    --test inplace)

cleanup() {
    local status=$?
    if [ -n "$GUEST_LEG_PID" ]; then
        kill -TERM -- "-$GUEST_LEG_PID" 2>/dev/null || true
        wait "$GUEST_LEG_PID" 2>/dev/null || true
    fi
    if ! bash "$HACK_DIR/teardown.sh"; then
        warn "teardown failed (exit status of the run is unchanged: $status)"
    elif ! bash "$HACK_DIR/verify-clean.sh"; then
        warn "teardown left something of the project on the machine (see above)"
        [ "$status" != 0 ] || status=1
    fi
    exit "$status"
}
trap cleanup EXIT
# An interrupted run still tears down (EXIT trap) and reports the usual 128+N.
trap 'exit 130' INT
trap 'exit 143' TERM

cd "$REPO_ROOT"
failed=()
# step NAME CMD... — run one step, remember it if it fails, go on with the next.
step() {
    local name="$1" t0=$SECONDS
    shift
    log "== $name"
    if "$@"; then
        log "== $name: ok ($((SECONDS - t0)) s)"
    else
        warn "== $name: FAILED ($((SECONDS - t0)) s)"
        failed+=("$name")
    fi
}

# test_binary NAME — the path of the built test binary of tests/NAME.rs (built if need be).
test_binary() {
    cargo test --no-run --test "$1" --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("executable") and m.get("target", {}).get("name") == sys.argv[1]:
        print(m["executable"])' "$1" | grep .
}

# leg RUNTIME — set the environment up on that containerd and export its variables.
leg() {
    CRILET_RUNTIME="$1" bash "$HACK_DIR/setup.sh"
    set -a
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    set +a
    log "testing on containerd $CRILET_RUNTIME_VERSION"
}

# guest_leg [ARGS...] — the guest leg (see the header), its steps recorded in `failed`.
guest_leg() {
    # A node as production runs them: systemd as PID 1 and cgroup v2, in the QEMU guest
    # of hack/guest.sh (its image built once, cached under /var/lib/crilet-dev/guest).
    # It needs the test images of the main environment (set up first when run alone).
    [ -s "$MAIN_ENV_FILE" ] || leg 2.1
    if step "guest up (hack/guest.sh)" bash "$HACK_DIR/guest.sh" up; then
        step "tests in the guest (systemd, cgroup v2)" \
            cargo test --no-fail-fast --test guest -- --ignored --test-threads=1 "$@"
        # AppArmor enforced by the guest's kernel and containerd (this host's kernel has none).
        step "AppArmor in the guest" \
            cargo test --no-fail-fast --test guest_apparmor -- --ignored "$@"
        # The suite's chaos replay (its seed), shorter, on each driver in the guest.
        if [ "$#" -eq 0 ] && chaos="$(test_binary chaos)"; then
            for driver in systemd cgroupfs; do
                step "chaos replay in the guest ($driver)" env CRILET_CHAOS_KILLS=3 \
                    bash "$HACK_DIR/guest.sh" test "$driver" "$chaos" --test-threads=1
            done
        fi
        # The guest joins the control plane of the 2.1 leg (started here when this leg
        # runs alone) through its one forward to the host's API server.
        if step "control plane for the guest (hack/cluster.sh)" bash "$HACK_DIR/cluster.sh"; then
            step "cluster mode in the guest" \
                cargo test --no-fail-fast --test guest_cluster -- --ignored --test-threads=1 "$@"
        fi
        step "the Debian package in the guest" \
            cargo test --no-fail-fast --test guest_package -- --ignored "$@"
        # A node as kubeadm joins it: the package, its kubeadm drop-in, `kubeadm join`.
        step "kubeadm join in the guest" \
            cargo test --no-fail-fast --test guest_kubeadm -- --ignored "$@"
        # Powers the guest off: last.
        step "graceful node shutdown in the guest" \
            cargo test --no-fail-fast --test guest_shutdown -- --ignored "$@"
    fi
    step "guest down" bash "$HACK_DIR/guest.sh" down
}

# The guest leg waits on QEMU (TCG) and leaves the host's own containerd mostly idle, so when
# the 2.1 leg runs too it goes on in the background from the end of the 2.1 tests, beside
# critest and the 2.3 leg (about 5 of its 12 minutes), and is joined where it stands in LEGS.
# Its output goes to GUEST_LEG_LOG, printed when it is joined; its own process group, so an
# interrupted run can stop all of it (cleanup).
GUEST_LEG_LOG="$LOG_DIR/test-guest-leg.log"
GUEST_LEG_FAILED="$LOG_DIR/test-guest-leg.failed"
GUEST_LEG_PID=""
GUEST_LEG_DONE=""
start_guest_leg() {
    mkdir -p "$LOG_DIR"
    rm -f "$GUEST_LEG_FAILED"
    log "== guest leg: started in the background (log $GUEST_LEG_LOG)"
    set -m
    (
        failed=()
        guest_leg "$@"
        printf '%s\n' "${failed[@]}" >"$GUEST_LEG_FAILED"
    ) </dev/null >"$GUEST_LEG_LOG" 2>&1 &
    GUEST_LEG_PID=$!
    set +m
}
join_guest_leg() {
    local rc=0 t0=$SECONDS
    wait "$GUEST_LEG_PID" || rc=$?
    GUEST_LEG_PID=""
    log "== guest leg joined (waited $((SECONDS - t0)) s); its output:"
    cat "$GUEST_LEG_LOG"
    if [ -f "$GUEST_LEG_FAILED" ]; then
        while IFS= read -r name; do [ -z "$name" ] || failed+=("$name"); done <"$GUEST_LEG_FAILED"
    else
        warn "== guest leg: ended without a result (exit status $rc)"
        failed+=("guest leg")
    fi
}

for runtime in $LEGS; do
    case "$runtime" in
        2.1)
            leg 2.1
            step "systemd unit" bash "$HACK_DIR/verify-unit.sh"
            # The real control plane the cluster-mode tests (tests/cluster.rs) join crilet to;
            # a cold machine builds it once (cached under /var/lib/crilet-dev/k8s).
            step "control plane (hack/cluster.sh)" bash "$HACK_DIR/cluster.sh"
            # OpenKruise v1.8.2 on it (tests/kruise.rs; each test starts a kruise-daemon for its
            # own node); a cold machine builds it once (cached under /var/lib/crilet-dev/kruise).
            step "OpenKruise (hack/kruise.sh)" bash "$HACK_DIR/kruise.sh"
            step "tests on containerd 2.1 (events)" cargo test --workspace --no-fail-fast -- --test-threads=2 "$@"
            # The benchmarks are no test, but they must build (dev profile: the test build's
            # artifacts, no release build).
            step "benchmarks build" cargo build --benches --profile dev
            case " $LEGS " in *" guest "*) [ -n "$GUEST_LEG_DONE" ] || start_guest_leg "$@" ;; esac
            if [ "$#" -eq 0 ]; then
                step "critest on containerd 2.1" bash "$HACK_DIR/critest.sh" --runtime 2.1
            fi
            ;;
        2.3)
            # Beside the main environment (set up first when this leg runs alone).
            [ -s "$MAIN_ENV_FILE" ] || leg 2.1
            step "containerd 2.3 beside the environment" env CRILET_RUNTIME=2.3 bash "$HACK_DIR/setup.sh"
            step "stop signals on containerd 2.3" env CRILET_ENV_FILE="$CRILET_RUN/env-2.3" \
                cargo test --no-fail-fast --test stop_signal -- --test-threads=2 "$@"
            if [ "$#" -eq 0 ]; then
                step "critest on containerd 2.3" bash "$HACK_DIR/critest.sh" --runtime 2.3
            fi
            step "containerd 2.3 teardown" env CRILET_RUNTIME=2.3 bash "$HACK_DIR/teardown.sh"
            ;;
        guest)
            if [ -n "$GUEST_LEG_PID" ]; then join_guest_leg; else guest_leg "$@"; fi
            GUEST_LEG_DONE=1
            ;;
        1.6)
            leg 1.6
            step "tests on containerd 1.6 (relist)" cargo test --no-fail-fast "${RELIST_TESTS[@]}" -- --test-threads=2 "$@"
            ;;
        *) die "unknown leg $runtime in CRILET_TEST_LEGS (2.1, 2.3, guest or 1.6)" ;;
    esac
done

if [ "${#failed[@]}" -gt 0 ]; then
    warn "failed: ${failed[*]}"
    exit 1
fi
log "all legs passed: $LEGS"
