#!/usr/bin/env bash
# GPU check for a lent GPU machine (no Rust toolchain there).
#
# Build beforehand, on a machine with Rust and NVRTC (.nvrtc, see engine/README.md):
#   cargo build --release --bin twin
#   cargo test --release --no-run -p engine --test cuda_vs_cpu
#   cargo build --release -p live --example run_distance -p engine --example launch_costs
#   TWIN_KERNEL_CACHE=$PWD/kernel-cache TWIN_REQUIRE_NVRTC=1 \
#     LD_LIBRARY_PATH=$PWD/.nvrtc/nvidia/cuda_nvrtc/lib \
#     cargo test --release -p kernels --test nvrtc_compile
# and carry target/release/twin, target/release/deps/cuda_vs_cpu-*, the two examples and
# kernel-cache/ (strip the binaries first: with debug info they exceed 64 MB together;
# stripped about 19 + 2 + 1 + 1 MB; or pass their paths in TWIN, CUDA_TEST, DISTANCE and
# LAUNCH; 2026-12-04 they travelled in an ignored .gpu/ folder named in `carry`)
# (CUBINs for sm_90 and sm_100). libnvrtc itself (about 100 MB) need not travel: the
# engine loads the cached CUBINs when NVRTC is absent; when NVRTC is present (on the
# loader path or in .nvrtc/) it compiles, and the NVRTC test runs there as well.
#
# Then, from the repository root on the GPU machine:
#   OUT=/some/dir scripts/gpu-check.sh
#
# Steps: (1) NVRTC compiles every kernel for sm_90 and sm_100 (if that test binary and
# libnvrtc are present); (2) every CUDA kernel
# against its CPU twin, and the live engine's serving device against the CPU one
# (TWIN_REQUIRE_GPU=1: a missing GPU fails); (3) live runs of cpu-live-moe on cuda:0:
# the live plan's calibration, two untraced runs back to back (their distance is the
# noise floor; run_distance, if it travelled as DISTANCE) and the first one's
# validation; a traced run at the same load (--trace-ops: call times from CUDA events;
# its distance from the first is what tracing costs); a traced run at another load, a
# profile fitted in situ from its trace (calibrate fit-trace), and the untraced run
# validated with it (trained on one run, checked on another); (4) a quick calibration
# on cuda:0 into $OUT/profile-h200; (5) achieved
# figures against the roofline. Each step has its own time limit (the lent machine's
# minutes are few), most valuable first. Exit status is non-zero when any step fails
# (goals missed are reported, not failed: they are performance targets, not
# correctness). DURATION: seconds per live run (default 20); RATE and TRACED_RATE:
# requests per second of the untraced and traced runs (default 20 and 10).
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if [ -d "$PWD/.nvrtc/nvidia/cuda_nvrtc/lib" ]; then
    export LD_LIBRARY_PATH="$PWD/.nvrtc/nvidia/cuda_nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export TWIN_REQUIRE_GPU=1
[ -d "$PWD/kernel-cache" ] && export TWIN_KERNEL_CACHE=${TWIN_KERNEL_CACHE:-$PWD/kernel-cache}
status=0

# Newest executable test binary named $1-<hash> under target/{release,debug}/deps.
find_test() {
    ls -t target/release/deps/"$1"-* target/debug/deps/"$1"-* 2>/dev/null |
        grep -v '\.d$' | while read -r f; do [ -x "$f" ] && echo "$f" && break; done
}

step() { echo; echo "=== $*"; }

step "nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || status=1

# The NVRTC test runs when its binary travelled (it skips, saying why, without libnvrtc).
bin=$(find_test nvrtc_compile)
if [ -n "$bin" ]; then step "test nvrtc_compile"; "$bin" --nocapture || status=1; fi

step "test cuda_vs_cpu"
bin=${CUDA_TEST:-$(find_test cuda_vs_cpu)}
if [ -z "$bin" ]; then
    echo "FAIL: no test binary cuda_vs_cpu-* under target/*/deps"; status=1
else
    timeout 180 "$bin" --test-threads=1 --nocapture || status=1
fi

TWIN=${TWIN:-target/release/twin}
step "live runs on cuda:0, their validation and an in-situ fit from a traced run"
DURATION=${DURATION:-20}
RATE=${RATE:-20}
TRACED_RATE=${TRACED_RATE:-10}
DISTANCE=${DISTANCE:-target/release/examples/run_distance}
if [ -x "$TWIN" ]; then
    live_run() { # dir rate [flags]
        local dir=$1 rate=$2
        shift 2
        rm -rf "$dir"
        timeout 90 "$TWIN" live cpu-live-poisson --device cuda:0 --duration "$DURATION" \
            --set workload.open_loop.rate_per_s="$rate" "$@" --out "$dir" || status=1
    }
    timeout 120 "$TWIN" calibrate --device cuda:0 --plan live --model cpu-live-moe --quick \
        --out "$OUT/profile-live-h200" || status=1
    live_run "$OUT/live-h200" "$RATE"
    live_run "$OUT/live-h200-b" "$RATE"
    if [ -x "$DISTANCE" ]; then
        "$DISTANCE" "$OUT/live-h200" "$OUT/live-h200-b" || status=1
    fi
    timeout 60 "$TWIN" validate live "$OUT/live-h200" --profile "$OUT/profile-live-h200/profile.toml" || status=1
    live_run "$OUT/live-h200-same-traced" "$RATE" --trace-ops
    if [ -x "$DISTANCE" ]; then
        "$DISTANCE" "$OUT/live-h200" "$OUT/live-h200-same-traced" || status=1
    fi
    live_run "$OUT/live-h200-traced" "$TRACED_RATE" --trace-ops
    timeout 60 "$TWIN" calibrate fit-trace "$OUT/live-h200-traced/trace.json.gz" \
        --out "$OUT/insitu-h200.toml" || status=1
    timeout 60 "$TWIN" validate live "$OUT/live-h200" --profile "$OUT/insitu-h200.toml" || status=1
    timeout 60 "$TWIN" validate live "$OUT/live-h200-traced" --profile "$OUT/insitu-h200.toml" || status=1
fi

# Launch costs (eager and CUDA graph), if the example travelled (LAUNCH; build it with
# `cargo build --release -p engine --example launch_costs`).
LAUNCH=${LAUNCH:-target/release/examples/launch_costs}
if [ -x "$LAUNCH" ]; then
    step "launch costs on cuda:0"
    timeout 60 "$LAUNCH" 0 || status=1
fi

step "twin calibrate --device cuda:0 --quick"
if [ ! -x "$TWIN" ]; then
    echo "FAIL: $TWIN not found"; status=1
else
    time timeout 200 "$TWIN" calibrate --device cuda:0 --quick --out "$OUT/profile-h200" || status=1
fi

CSV="$OUT/profile-h200/measurements.csv"
step "roofline (from $CSV)"
if [ -f "$CSV" ]; then
    # Columns: 1 op, 2 shape, 3 dtype, 4 median_s, 5 p10_s, 7 bytes, 8 flops,
    # 9 achieved_bytes_per_s, 10 achieved_flops_per_s (at the median).
    # H200 datasheet: HBM3e 4.8 TB/s, dense FP8 1979 TFLOP/s (context only; goals are
    # judged against the device's own measured peaks, as the cost model uses them).
    awk -F, 'NR > 1 {
        bw = $9 + 0; fl = $10 + 0
        # Reference peaks at the p10 time (as profile.toml does): bytes or flops / p10_s.
        if ($1 == "ref_stream_read" && $5 > 0 && $7 / $5 > ref_bw) ref_bw = $7 / $5
        if ($1 == "ref_gemm" && $5 > 0 && $8 / $5 > ref_fl) ref_fl = $8 / $5
        if ($1 == "moe_decode" && bw > moe_bw) { moe_bw = bw; moe_at = $3 " " $2 }
        if ($1 == "grouped_gemm" && $3 == "fp8" && fl > gg_fl) { gg_fl = fl; gg_at = $2 }
        if (($1 == "attn_dense" || $1 == "attn_sparse" || $1 == "attn_window") && bw > at_bw) { at_bw = bw; at_at = $1 " " $2 }
    }
    function share(x, ref, goal, what, at) {
        if (ref <= 0 || x <= 0) { printf "%-34s no data\n", what; return }
        s = x / ref
        printf "%-34s %6.1f%% (goal >= %d%%) %s  [%s]\n", what, 100 * s, 100 * goal, (s >= goal ? "MET" : "MISSED"), at
    }
    END {
        printf "measured stream read:   %8.1f GB/s (datasheet 4800 GB/s: %.0f%%)\n", ref_bw / 1e9, 100 * ref_bw / 4.8e12
        printf "measured reference GEMM: %7.1f TFLOP/s (cuBLAS f32)\n", ref_fl / 1e12
        share(moe_bw, ref_bw, 0.85, "MoE weight streaming / HBM read", moe_at)
        share(gg_fl, ref_fl, 0.70, "fp8 grouped GEMM / reference GEMM", gg_at)
        printf "%-34s %6.2f%% of datasheet dense FP8 (1979 TFLOP/s)\n", "fp8 grouped GEMM", 100 * gg_fl / 1979e12
        share(at_bw, ref_bw, 0.80, "attention decode / HBM read", at_at)
    }' "$CSV"
    [ -f "$OUT/profile-h200/profile.toml" ] && { step "profile.toml"; cat "$OUT/profile-h200/profile.toml"; }
else
    echo "FAIL: no measurements"; status=1
fi

echo
[ $status -eq 0 ] && echo "gpu-check: all steps ran" || echo "gpu-check: some steps FAILED"
exit $status
