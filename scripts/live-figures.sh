#!/usr/bin/env bash
# The README's live-run figures on this machine: four live runs of the embedded CPU
# scenarios -- Poisson and AgentX-like, each light and near saturation -- each preceded
# by a fresh quick calibration of the live engine's own ops (measured independently of
# the run, never fitted to it) and followed by its validation; then one more
# calibration, against which every run is validated again (how much the profile alone
# moves the errors: the machine's noise floor).
#
#   scripts/live-figures.sh                 # after `cargo build --release`
#   OUT=dir QUIET=1.5 CORES=1 scripts/live-figures.sh
#
# The machine may be shared: before each measurement the script waits (up to WAIT
# seconds) for the 1-minute load average to fall below QUIET, and every run records the
# load at its start and end (run.json). CORES: cores of the rank and of the calibration
# (default: all). Loads: POISSON_LIGHT/POISSON_HIGH requests per second,
# AGENTX_LIGHT/AGENTX_HIGH concurrent sessions.
set -eu
TWIN=${TWIN:-target/release/twin}
OUT=${OUT:-runs/figures-$(date +%Y%m%d-%H%M%S)}
QUIET=${QUIET:-1.5}
WAIT=${WAIT:-1800}
DURATION=${DURATION:-120}
CORES=${CORES:-$(nproc)}
POISSON_LIGHT=${POISSON_LIGHT:-1.0}
POISSON_HIGH=${POISSON_HIGH:-2.5}
AGENTX_LIGHT=${AGENTX_LIGHT:-4}
AGENTX_HIGH=${AGENTX_HIGH:-12}
mkdir -p "$OUT"

wait_quiet() {
    local waited=0
    while awk -v q="$QUIET" '{ exit !($1 >= q) }' /proc/loadavg && [ "$waited" -lt "$WAIT" ]; do
        sleep 10
        waited=$((waited + 10))
    done
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (waited ${waited} s)"
}

calibrate() { # dir
    "$TWIN" calibrate --device cpu --cores "$CORES" --plan live --model cpu-live-moe --quick --out "$1" \
        > "$1.txt"
}

run() { # name scenario set...
    local name=$1 scenario=$2
    shift 2
    wait_quiet
    calibrate "$OUT/$name-profile"
    "$TWIN" live "$scenario" --cores "$CORES" --duration "$DURATION" "$@" --out "$OUT/$name"
    "$TWIN" validate live "$OUT/$name" --profile "$OUT/$name-profile/profile.toml" | tee "$OUT/$name.txt"
    "$TWIN" validate live "$OUT/$name" --profile "$OUT/$name-profile/profile.toml" --json > "$OUT/$name.json"
}
run poisson-light cpu-live-poisson --set workload.open_loop.rate_per_s="$POISSON_LIGHT"
run poisson-high cpu-live-poisson --set workload.open_loop.rate_per_s="$POISSON_HIGH"
run agentx-light cpu-live-agentx --set workload.agentx.sessions="$AGENTX_LIGHT"
run agentx-high cpu-live-agentx --set workload.agentx.sessions="$AGENTX_HIGH"
calibrate "$OUT/after-profile"
for name in poisson-light poisson-high agentx-light agentx-high; do
    "$TWIN" validate live "$OUT/$name" --profile "$OUT/after-profile/profile.toml" --json > "$OUT/$name-after.json"
done

val() { grep -m1 "^  \"$2\"" "$1" | sed 's/.*: *//; s/,$//'; }
for suffix in "" "-after"; do
    echo
    echo "profile: ${suffix:-the run's own}"
    printf "%-14s %10s %12s %10s %10s\n" run step_mape throughput ttft_p90 tpot_p90
    for name in poisson-light poisson-high agentx-light agentx-high; do
        f="$OUT/$name$suffix.json"
        printf "%-14s %10s %12s %10s %10s\n" "$name" "$(val "$f" step_mape)" "$(val "$f" throughput_error)" \
            "$(val "$f" ttft_p90_error)" "$(val "$f" tpot_p90_error)"
    done
done
