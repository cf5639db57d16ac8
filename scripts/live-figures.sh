#!/usr/bin/env bash
# The README's live-run figures on this machine: a calibration of the live engine's own
# ops (measured first, independently of the runs), then four live runs of the embedded
# CPU scenarios -- Poisson and AgentX-like, each light and near saturation -- and their
# validations against twin's predictions.
#
#   scripts/live-figures.sh                 # after `cargo build --release`
#   OUT=dir QUIET=0.5 scripts/live-figures.sh
#
# The machine is shared: before each measurement the script waits (up to WAIT seconds)
# for the 1-minute load average to fall below QUIET, and every run records the load at
# its start and end (run.json). The rank runs on CORES pinned cores (default 1: on a
# shared 2-core machine a 2-thread rank loses its second thread whenever another
# process runs, halving an op's speed at random) and the calibration measures on as
# many. Loads: POISSON_LIGHT/POISSON_HIGH requests per second, AGENTX_LIGHT/AGENTX_HIGH
# concurrent sessions.
set -eu
TWIN=${TWIN:-target/release/twin}
OUT=${OUT:-runs/figures-$(date +%Y%m%d-%H%M%S)}
QUIET=${QUIET:-0.5}
WAIT=${WAIT:-1800}
DURATION=${DURATION:-120}
CORES=${CORES:-1}
POISSON_LIGHT=${POISSON_LIGHT:-0.3}
POISSON_HIGH=${POISSON_HIGH:-1.0}
AGENTX_LIGHT=${AGENTX_LIGHT:-1}
AGENTX_HIGH=${AGENTX_HIGH:-3}
mkdir -p "$OUT"

wait_quiet() {
    local waited=0
    while awk -v q="$QUIET" '{ exit !($1 >= q) }' /proc/loadavg && [ "$waited" -lt "$WAIT" ]; do
        sleep 10
        waited=$((waited + 10))
    done
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (waited ${waited} s)"
}

wait_quiet
"$TWIN" calibrate --device cpu --cores "$CORES" --plan live --model cpu-live-moe --quick --out "$OUT/profile" \
    | tee "$OUT/profile.txt"

run() { # name scenario set...
    local name=$1 scenario=$2
    shift 2
    wait_quiet
    "$TWIN" live "$scenario" --cores "$CORES" --duration "$DURATION" "$@" --out "$OUT/$name"
    "$TWIN" validate live "$OUT/$name" --profile "$OUT/profile/profile.toml" | tee "$OUT/$name.txt"
    "$TWIN" validate live "$OUT/$name" --profile "$OUT/profile/profile.toml" --json > "$OUT/$name.json"
}
run poisson-light cpu-live-poisson --set workload.open_loop.rate_per_s="$POISSON_LIGHT"
run poisson-high cpu-live-poisson --set workload.open_loop.rate_per_s="$POISSON_HIGH"
run agentx-light cpu-live-agentx --set workload.agentx.sessions="$AGENTX_LIGHT"
run agentx-high cpu-live-agentx --set workload.agentx.sessions="$AGENTX_HIGH"

echo
printf "%-14s %10s %12s %10s %10s\n" run step_mape throughput ttft_p90 tpot_p90
for name in poisson-light poisson-high agentx-light agentx-high; do
    f="$OUT/$name.json"
    val() { grep -m1 "^  \"$1\"" "$f" | sed 's/.*: *//; s/,$//'; }
    printf "%-14s %10s %12s %10s %10s\n" "$name" "$(val step_mape)" "$(val throughput_error)" \
        "$(val ttft_p90_error)" "$(val tpot_p90_error)"
done
