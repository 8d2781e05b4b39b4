#!/usr/bin/env bash
# hack/chaos.sh — the full crash-safety run: crilet SIGKILLed at random points, many times.
#
# Usage: hack/chaos.sh [KILLS] [SEED]    (as root; defaults: 60 kills, a random seed)
# Sets the environment up (hack/setup.sh, the runtime it runs now or CRILET_RUNTIME), then runs
# tests/chaos.rs with CRILET_CHAOS_KILLS=KILLS (the suite, hack/test.sh, runs 12). The seed is
# printed; pass it again to replay a run. The environment is left up (hack/teardown.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
require_root

KILLS="${1:-60}"
bash "$HACK_DIR/setup.sh"
set -a
# shellcheck disable=SC1090
. "$ENV_FILE"
set +a
cd "$REPO_ROOT"
CRILET_CHAOS_KILLS="$KILLS" ${2:+CRILET_CHAOS_SEED="$2"} cargo test --test chaos -- --nocapture
