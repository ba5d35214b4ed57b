#!/bin/sh
# Trials per second through adapters against in-process agentstore, measured
# side by side in one run (the ratios hold on a noisy machine; the absolute
# figures do not), under `--nemesis points` and under the default nemeses.
#
# Usage, from the repository root after `cargo build --release`:
#   benches/adapter_speed.sh [TRIALS]            # default 40 trials per nemesis
#   BEFORE=/path/to/other/target/release BEFORE_ROOT=/path/to/other/checkout \
#       benches/adapter_speed.sh
#       also runs another build's agentchaos, and the kits of another
#       checkout (BEFORE_ROOT, default: this one), each before this one's
#
# Stores: agentstore in-process, the Rust reference adapter
# (`agentchaos reference-adapter`), the Python kit's hello store, the Node
# kit's hello store, LangGraph's SqliteSaver through the Python kit and
# LangGraph.js's SqliteSaver through the Node kit (each skipped, saying so,
# when its runtime, kit or package is missing). Under the defaults the
# power-loss nemesis runs on one crash point and one state: trials/s counts
# the trials only.
# Prints a Markdown table: store, nemeses, build, trials/s, ratio to the
# in-process runs of the same build and nemeses (the mean of the run before
# the store's and the one after), adapter processes spawned / forked.
set -eu

TRIALS=${1:-40}
B=${BIN:-target/release}
SCENARIO=${SCENARIO:-scenarios/deploy-and-notify.json}
K=chaos/adapters/python
N=chaos/adapters/node
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

builds="after=$B=."
if [ -n "${BEFORE:-}" ]; then
    builds="before=$BEFORE=${BEFORE_ROOT:-.} $builds"
fi

stores="in-process|"
stores="$stores
rust adapter|$B/agentchaos reference-adapter"
if PYTHONPATH=$K python3 -c 'import agentchaos_adapter' 2>/dev/null; then
    stores="$stores
python hello|env PYTHONPATH=$K python3 $K/examples/hello_store.py"
else
    echo "adapter_speed: the Python kit does not import (pip install ./$K): skipped" >&2
fi
if command -v node >/dev/null && [ -d "$N/node_modules" ]; then
    stores="$stores
node hello|node $N/examples/hello_store.mjs"
else
    echo "adapter_speed: no node or no $N/node_modules (npm ci --prefix $N): skipped" >&2
fi
LG=chaos/adapters/langgraph
if PYTHONPATH=$K python3 -c 'import agentchaos_adapter, langgraph.checkpoint.sqlite' 2>/dev/null; then
    stores="$stores
langgraph|env PYTHONPATH=$K python3 $LG/adapter.py"
else
    echo "adapter_speed: LangGraph does not import (pip install -r $LG/requirements.txt): skipped" >&2
fi
LGJS=chaos/adapters/langgraphjs
if command -v node >/dev/null && [ -d "$LGJS/node_modules" ]; then
    stores="$stores
langgraph.js|node $LGJS/adapter.mjs"
else
    echo "adapter_speed: no node or no $LGJS/node_modules (npm ci --prefix $LGJS): skipped" >&2
fi

# run BUILD_DIR NEMESES ADAPTER_LINE JSON: one campaign, its JSON report.
run() {
    nem=$2
    if [ "$nem" = defaults ]; then
        set -- "$1" "" "$3" "$4" --powerloss-points 1 --powerloss-states 1
    else
        set -- "$1" "--nemesis $nem" "$3" "$4"
    fi
    bin=$1 nemflag=$2 adapter=$3 json=$4
    shift 4
    # shellcheck disable=SC2086
    if [ -z "$adapter" ]; then
        "$bin/agentchaos" run --quiet --scenario "$SCENARIO" --trials "$TRIALS" \
            --restarts none $nemflag --json "$json" "$@" >/dev/null || true
    else
        "$bin/agentchaos" run --quiet --scenario "$SCENARIO" --trials "$TRIALS" \
            --restarts none $nemflag --adapter "$adapter" --json "$json" "$@" >/dev/null || true
    fi
}

field() {
    python3 -c 'import json,sys
r=json.load(open(sys.argv[1]))
p=r["adapter_processes"]
print("%s %d/%d" % (r["trials_per_second"] or 0, p["spawned"], p["forked"]))' "$1"
}

echo "| store | nemeses | build | trials/s | of in-process | spawned / forked |"
echo "|---|---|---|---|---|---|"
for nem in points defaults; do
    for build in $builds; do
        name=${build%%=*} rest=${build#*=}
        dir=${rest%%=*} root=${rest#*=}
        run "$dir" "$nem" "" "$OUT/base0.json"
        set -- $(field "$OUT/base0.json")
        echo "| in-process | $nem | $name | $(printf %.1f "$1") | 100 % | - |"
        prev=$1
        echo "$stores" | while IFS='|' read -r store line; do
            [ -z "$line" ] && continue
            line=$(echo "$line" | sed -e "s#$B/#$dir/#g" -e "s#chaos/adapters/#$root/chaos/adapters/#g")
            run "$dir" "$nem" "$line" "$OUT/store.json"
            set -- $(field "$OUT/store.json")
            rate=$1 procs=$2
            run "$dir" "$nem" "" "$OUT/base.json"
            set -- $(field "$OUT/base.json")
            ratio=$(python3 -c "import sys; a,b,c=map(float,sys.argv[1:]); r=100*a/((b+c)/2) if b+c else None; print('-' if r is None else ('%.1f %%' if r < 10 else '%.0f %%') % r)" "$rate" "$prev" "$1")
            echo "| $store | $nem | $name | $(printf %.1f "$rate") | $ratio | $procs |"
            prev=$1
        done
    done
done
