#!/bin/sh
# The mutation score of agentstore against the harness alone
# (chaos/mutants/README.md, "cargo-mutants: mutants nobody hand-picked").
#
# cargo-mutants mutates agentstore's recovery, projection, scan/repair,
# framing, log, durability, checkpoint and blob code, rebuilds, and runs
# chaos/tests/harness_alone.rs and no other test: a mutant is caught only
# if `agentchaos run` (every nemesis) fails the campaign.
#
# Usage: chaos/mutants/score.sh [--full] [--shard K/N] [more cargo-mutants flags]
# --full: the unsampled campaign (AGENTCHAOS_HARNESS_ALONE=full, every plan
# of every restart; minutes per mutant) for the survivors of a sampled run:
#   chaos/mutants/score.sh --full --iterate   (re-tests only what was missed)
# Output ($MUTANTS_OUT, default target/mutants-score): mutants.out/{caught,missed,timeout,unviable}.txt
# (--file selects the mutated files, all in agentstore; --test-package the
# tests, filtered to the harness test by --test. The baseline is skipped:
# cargo-mutants 27 runs it on the mutated package's own tests, which have no
# harness_alone; CI runs harness_alone unmutated on every commit.)
# The whole set takes hours on a 2-core machine; shard it (--shard 1/12 ≈ 36 mutants).
set -eu
cd "$(dirname "$0")/../.."
timeout=300
if [ "${1:-}" = "--full" ]; then
    shift
    export AGENTCHAOS_HARNESS_ALONE=full
    timeout=1800
fi
if ! command -v cargo-mutants >/dev/null 2>&1; then
    cargo install --locked cargo-mutants@27.1.0
fi
# One build directory for every mutant and every run: the dependencies
# are compiled once (cargo-mutants builds in a copy of the tree). Build
# nothing else in it: cargo's fingerprints of the workspace's crates do not
# include the tree's path, so a build of another copy can leave a mutated
# artifact that looks fresh.
export CARGO_TARGET_DIR="$PWD/target/mutants-build"
exec cargo mutants \
    --file store/src/recovery.rs \
    --file store/src/projection.rs \
    --file store/src/scan.rs \
    --file store/src/repair.rs \
    --file store/src/framing.rs \
    --file store/src/log.rs \
    --file store/src/durability.rs \
    --file store/src/checkpoint.rs \
    --file store/src/blob.rs \
    --test-package agentchaos \
    --baseline=skip --timeout "$timeout" --build-timeout 1200 \
    --profile mutants \
    --output "${MUTANTS_OUT:-target/mutants-score}" \
    "$@" \
    --cargo-arg=--test=harness_alone
