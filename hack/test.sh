#!/usr/bin/env bash
# hack/test.sh — run crilet's whole test suite against a real containerd (what CI runs).
#
# Usage: hack/test.sh [TEST-FILTER/ARGS...]    (as root)
# Runs hack/setup.sh (packages, private containerd, registry, images), exports the variables
# of /run/crilet-dev/env (the integration tests read them), runs
#   cargo test --workspace -- --test-threads=2 [ARGS...]
# and always finishes with hack/teardown.sh (not --all: images stay for the next run), also
# when setup or the tests fail or the run is interrupted. Exits with cargo's status
# (or setup's, if setup failed). A teardown problem is reported but does not change it.
# Example: hack/test.sh e2e_sidecar      (only tests whose name contains e2e_sidecar)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

require_root

cleanup() {
    local status=$?
    if ! bash "$HACK_DIR/teardown.sh"; then
        warn "teardown failed (exit status of the run is unchanged: $status)"
    fi
    exit "$status"
}
trap cleanup EXIT
# An interrupted run still tears down (EXIT trap) and reports the usual 128+N.
trap 'exit 130' INT
trap 'exit 143' TERM

bash "$HACK_DIR/setup.sh"

set -a
# shellcheck disable=SC1090
. "$ENV_FILE"
set +a

cd "$REPO_ROOT"
bash "$HACK_DIR/verify-unit.sh"
status=0
cargo test --workspace -- --test-threads=2 "$@" || status=$?
exit "$status"
