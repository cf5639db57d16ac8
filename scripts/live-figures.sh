#!/usr/bin/env bash
# The README's live-run figures on this machine: four live runs of the embedded CPU
# scenarios -- Poisson and AgentX-like, each light and near saturation -- each preceded
# by a fresh quick calibration of the live engine's own ops (measured independently of
# the run, never fitted to it) and followed by its validation; then one more
# calibration, against which every run is validated again (how much the profile alone
# moves the errors).
#
# Each case runs twice, back to back with the same seed (NAME and NAME-b): how far the
# second lands from the first (throughput, TTFT p90, TPOT p90, mean step time by step
# class; `live/examples/run_distance.rs`) is the machine's noise floor, printed beside
# the model's errors. In situ: a profile is fitted from the first case's own op trace
# (`twin calibrate fit-trace`) and the other three cases are validated with it. On a
# GPU (DEVICE=cuda:N) untraced runs are measured and the first case is run once more
# with its op trace (`--trace-ops`, call times from CUDA events) to train on.
#
#   cargo build --release && cargo build --release -p live --example run_distance
#   scripts/live-figures.sh
#   OUT=dir QUIET=1.5 CORES=1 DURATION=20 scripts/live-figures.sh
#   DEVICE=cuda:0 POISSON_LIGHT=10 POISSON_HIGH=40 AGENTX_HIGH=32 scripts/live-figures.sh
#
# The machine may be shared: before each measurement the script waits (up to WAIT
# seconds) for the 1-minute load average to fall below QUIET, and every run records the
# load at its start and end (run.json). CORES: cores of the rank and of the calibration
# (default: all). Loads: POISSON_LIGHT/POISSON_HIGH requests per second,
# AGENTX_LIGHT/AGENTX_HIGH concurrent sessions. REVALIDATE=1 with the OUT of an earlier
# run validates its runs again with the current binary, without measuring.
#
# Beside each step MAPE: `drift`, what the machine's own drift costs (its pace in 5 s
# windows, `twin validate live`'s `pace:` line), and `paced`, the step MAPE with each
# window's pace taken out.
set -eu
TWIN=${TWIN:-target/release/twin}
DISTANCE=${DISTANCE:-target/release/examples/run_distance}
OUT=${OUT:-runs/figures-$(date +%Y%m%d-%H%M%S)}
QUIET=${QUIET:-1.5}
WAIT=${WAIT:-1800}
DURATION=${DURATION:-120}
CORES=${CORES:-$(nproc)}
DEVICE=${DEVICE:-cpu}
# Where the ranks run: a CPU's cores, or a GPU.
if [ "$DEVICE" = cpu ]; then on=(--device cpu --cores "$CORES"); else on=(--device "$DEVICE"); fi
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
    "$TWIN" calibrate "${on[@]}" --plan live --model cpu-live-moe --quick --out "$1" \
        > "$1.txt"
}

run() { # name scenario set...
    local name=$1 scenario=$2
    shift 2
    wait_quiet
    calibrate "$OUT/$name-profile"
    "$TWIN" live "$scenario" "${on[@]}" --duration "$DURATION" "$@" --out "$OUT/$name"
    # The same run again at once: the noise floor.
    "$TWIN" live "$scenario" "${on[@]}" --duration "$DURATION" "$@" --out "$OUT/$name-b"
}

validate() { # name profile suffix: the run (text and JSON) against a profile
    "$TWIN" validate live "$OUT/$1" --profile "$2" | tee "$OUT/$1$3.txt"
    "$TWIN" validate live "$OUT/$1" --profile "$2" --json > "$OUT/$1$3.json"
}

cases=(poisson-light poisson-high agentx-light agentx-high)
if [ -z "${REVALIDATE:-}" ]; then
    run poisson-light cpu-live-poisson --set workload.open_loop.rate_per_s="$POISSON_LIGHT"
    run poisson-high cpu-live-poisson --set workload.open_loop.rate_per_s="$POISSON_HIGH"
    run agentx-light cpu-live-agentx --set workload.agentx.sessions="$AGENTX_LIGHT"
    run agentx-high cpu-live-agentx --set workload.agentx.sessions="$AGENTX_HIGH"
    calibrate "$OUT/after-profile"
    # In situ: a profile fitted from the first case's own trace (on a GPU, from a traced
    # run of it); the other cases validated with it (trained on one run, checked on others).
    train="$OUT/poisson-light"
    if [ "$DEVICE" != cpu ]; then
        train="$OUT/poisson-light-traced"
        "$TWIN" live cpu-live-poisson "${on[@]}" --duration "$DURATION" --trace-ops \
            --set workload.open_loop.rate_per_s="$POISSON_LIGHT" --out "$train"
    fi
    "$TWIN" calibrate fit-trace "$train/trace.json.gz" --out "$OUT/insitu-profile.toml" \
        > "$OUT/insitu-profile.txt"
fi

# Validations (REVALIDATE=1 redoes only these, with the current binary, on the runs and
# profiles already in OUT).
for name in "${cases[@]}"; do
    "$DISTANCE" "$OUT/$name" "$OUT/$name-b" | tee "$OUT/$name-noise.txt"
    "$DISTANCE" "$OUT/$name" "$OUT/$name-b" --json > "$OUT/$name-noise.json"
    validate "$name" "$OUT/$name-profile/profile.toml" ""
    # The second run against the same profile: its pace beside the first's.
    validate "$name-b" "$OUT/$name-profile/profile.toml" "" > /dev/null
    validate "$name" "$OUT/after-profile/profile.toml" -after > /dev/null
done
for name in poisson-high agentx-light agentx-high; do
    validate "$name" "$OUT/insitu-profile.toml" -insitu
done

val() { grep -m1 "^  \"$2\"" "$1" | sed 's/.*: *//; s/,$//'; }
# A key of the `pace` object (one level down).
paceval() { grep -m1 "^    \"$2\"" "$1" | sed 's/.*: *//; s/,$//'; }
# The `pace.windows` array of a validation, one number per line.
windows() { awk '/"windows": \[/ { on = 1; next } on && /\]/ { exit } on { gsub(/[ ,]/, ""); print }' "$1"; }
# Pearson correlation of two runs' window paces (over the shorter run's windows).
pace_corr() {
    paste <(windows "$1") <(windows "$2") | awk -F'\t' '$1 != "" && $2 != "" {
        n++; sx += $1; sy += $2; sxx += $1 * $1; syy += $2 * $2; sxy += $1 * $2 }
        END { d = sqrt((n * sxx - sx * sx) * (n * syy - sy * sy))
              if (n < 3 || d == 0) print "-"; else printf "%+.2f (%d windows)", (n * sxy - sx * sy) / d, n }'
}
pct() { awk -v x="$1" 'BEGIN { if (x == "" || x == "null") print "-"; else printf "%+.1f%%", 100 * x }'; }
abspct() { awk -v x="$1" 'BEGIN { if (x == "" || x == "null") print "-"; else printf "%.1f%%", 100 * (x < 0 ? -x : x) }'; }
table() { # title suffix names...
    local title=$1 suffix=$2
    shift 2
    echo
    echo "profile: $title (noise: the same run again, measured against measured)"
    printf "%-14s %10s %10s %10s %10s %10s %10s   %10s %10s %10s %10s\n" run step_mape drift paced throughput \
        ttft_p90 tpot_p90 noise_step noise_tput noise_ttft noise_tpot
    for name in "$@"; do
        f="$OUT/$name$suffix.json" n="$OUT/$name-noise.json"
        printf "%-14s %10s %10s %10s %10s %10s %10s   %10s %10s %10s %10s\n" "$name" \
            "$(abspct "$(val "$f" step_mape)")" "$(abspct "$(paceval "$f" drift_mape)")" \
            "$(abspct "$(paceval "$f" step_mape_paced)")" "$(pct "$(val "$f" throughput_error)")" \
            "$(pct "$(val "$f" ttft_p90_error)")" "$(pct "$(val "$f" tpot_p90_error)")" \
            "$(abspct "$(val "$n" step_distance)")" "$(pct "$(val "$n" throughput_distance)")" \
            "$(pct "$(val "$n" ttft_p90_distance)")" "$(pct "$(val "$n" tpot_p90_distance)")"
    done
}
table "the run's own calibration" "" poisson-light poisson-high agentx-light agentx-high
table "one calibration after all runs" "-after" poisson-light poisson-high agentx-light agentx-high
table "fitted in situ from poisson-light's trace" "-insitu" poisson-high agentx-light agentx-high

echo
echo "pace, the same seed twice: correlation of the two runs' window paces (near 0: the machine drifted;"
echo "near 1: the load moved them, i.e. the model's prices of its batches), the run's own calibration"
for name in "${cases[@]}"; do
    printf "%-14s %s\n" "$name" "$(pace_corr "$OUT/$name.json" "$OUT/$name-b.json")"
done
