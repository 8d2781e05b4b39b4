#!/usr/bin/env bash
# hack/fuzz.sh — fuzz the manifest parser and validator for a bounded time (cargo-fuzz/libFuzzer).
#
# Usage: hack/fuzz.sh [SECONDS]          (default 60)
#   Runs the `manifest` target of fuzz/ (crilet::source::parse_manifest on one file's text, as
#   YAML and as JSON) for SECONDS, seeded with tests/manifest_corpus/ and the corpus kept from
#   earlier runs (fuzz/corpus/manifest, not committed). Installs cargo-fuzz when it is missing
#   (`cargo install cargo-fuzz` from crates.io) and needs a nightly toolchain (rustup).
# Environment:
#   CRILET_FUZZ_JOBS     parallel fuzzing processes (default 1)
#   CRILET_FUZZ_MAX_LEN  longest input in bytes (default 65536: long enough for nesting bombs)
# A crash, hang (>10 s for one input) or out-of-memory (>2 GiB) is copied into
# tests/manifest_corpus/ as fuzz-<kind>-<hash>.yaml, and the script exits 1: fix it, then add
# the file's expected problem to tests/manifest_corpus/expected.txt (the corpus test fails
# until every file there has its line).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
FUZZ_DIR="$REPO_ROOT/fuzz"
CORPUS_DIR="$REPO_ROOT/tests/manifest_corpus"
seconds="${1:-60}"
case "$seconds" in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    '' | *[!0-9]*) echo "usage: hack/fuzz.sh [SECONDS]" >&2; exit 2 ;;
esac
jobs="${CRILET_FUZZ_JOBS:-1}"
max_len="${CRILET_FUZZ_MAX_LEN:-65536}"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: installing a nightly toolchain (cargo-fuzz needs one)" >&2
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

cd "$FUZZ_DIR"
# Same dependency versions as the agent itself: start from its lock file.
[ -f Cargo.lock ] || cp "$REPO_ROOT/Cargo.lock" Cargo.lock
mkdir -p corpus/manifest artifacts/manifest
before="$(find artifacts/manifest -type f | sort)"

# With several jobs libFuzzer writes each one's output to fuzz/fuzz-N.log.
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
status=0
cargo +nightly fuzz run manifest corpus/manifest "$CORPUS_DIR" -- \
    -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -dict="$FUZZ_DIR/manifest.dict" -print_final_stats=1 "${parallel[@]}" || status=$?

found=0
while IFS= read -r artifact; do
    [ -n "$artifact" ] || continue
    if printf '%s\n' "$before" | grep -qxF "$artifact"; then continue; fi
    name="$(basename "$artifact")"          # crash-<sha1>, timeout-<sha1>, oom-<sha1>, ...
    kind="${name%%-*}"
    dest="$CORPUS_DIR/fuzz-$kind-$(printf '%s' "${name#*-}" | cut -c1-12).yaml"
    cp "$artifact" "$dest"
    chmod 0644 "$dest"
    echo "fuzz.sh: $kind found; input copied to ${dest#"$REPO_ROOT"/}" >&2
    found=1
done < <(find artifacts/manifest -type f | sort)

if [ "$found" = 1 ]; then
    echo "fuzz.sh: reproduce with: cd fuzz && cargo +nightly fuzz run manifest ARTIFACT" >&2
    echo "fuzz.sh: fix it, then give each new file its line in tests/manifest_corpus/expected.txt" >&2
    exit 1
fi
if [ "$status" != 0 ]; then
    echo "fuzz.sh: cargo fuzz failed (exit $status) without leaving an input behind" >&2
    exit "$status"
fi
echo "fuzz.sh: no crash, hang or out-of-memory in ${seconds}s" >&2
