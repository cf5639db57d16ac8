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
#   scripts/gpu-check.sh            # results under out/gpu-check-<date>-<gpu>/
#   OUT=/some/dir scripts/gpu-check.sh
#
# One run on a lent GPU (on the H100 of 2026-12-05: 55 s without the live runs, 128 s
# with them), most valuable first, each step under its own time limit: (1) the
# libraries: cuBLASLt as the dynamic loader finds it (a CUDA 13 machine's
# libcublasLt.so.13 is linked under the name cudarc opens, said); (2) NVRTC compiles
# every kernel for sm_90 and sm_100 (if that test binary and libnvrtc are present);
# (3) every CUDA kernel against its CPU twin, and the live engine's serving device
# against the CPU one (TWIN_REQUIRE_GPU=1: a missing GPU fails); (4) kernel tables
# measured through production libraries (`twin calibrate --tables-out`, cuBLASLt GEMMs
# in BF16 and FP8, FP8 with the activations' quantization) for a DeepSeek-like MoE
# (deepseek-v3) and a dense GQA model (llama-3.1-8b), each compared shape by shape with
# the shipped vLLM and TensorRT-LLM tables of this GPU (DIR/compare-*.csv, median ratio
# per format; goal: within 15%), laid over vLLM's shipped tables (`--base vllm`: what is
# not measured prices as vLLM's tables do), and `forward --engine DIR` against `--engine
# vllm` on each model's decode and prefill step, the whole step and its dense GEMMs (goal:
# within 10%; the 2026-12-05 run was without --base); (5) a quick calibration of twin's own kernels and their fractions of the
# roofline (printed; not a price: such a profile is refused by forward, simulate and
# plan); (6) with LIVE=1 (the default) and time left, live runs of cpu-live-moe on
# cuda:0: the live plan's calibration, a run and its validation (the live engine's own
# runs are priced with its own profile), then a second run (the noise floor, with
# run_distance if it travelled as DISTANCE), a traced run and an in-situ fit; (7) launch
# costs, if that example travelled and time is left.
# HARDWARE: twin's name of the GPU (default from nvidia-smi: h100, h200, b200, ...).
# BUDGET_S: seconds after which the optional steps are skipped (default 420). Exit
# status is non-zero when any step fails (goals missed are reported, not failed: they
# are performance targets, not correctness). DURATION: seconds per live run (default
# 20); RATE and TRACED_RATE: requests per second of the untraced and traced runs
# (default 20 and 10).
# With the `device` tool: carry the binaries in an ignored .gpu/ and kernel-cache/, run
#   OUT=/tmp/g TWIN=.gpu/twin CUDA_TEST=.gpu/cuda_vs_cpu LAUNCH=.gpu/launch_costs \
#     DISTANCE=.gpu/run_distance scripts/gpu-check.sh
# and bring /tmp/g back as one archive (the tool returns at most 8 files).
set -u
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "${HARDWARE:-}" ]; then
    for h in gb300 gb200 b300 b200 h200 h100 h800 h20 a100 l40s l4; do
        case "$(echo "$GPU_NAME" | tr 'A-Z' 'a-z')" in *"$h"*) HARDWARE=$h; break ;; esac
    done
fi
HARDWARE=${HARDWARE:-h200}
OUT=${OUT:-$PWD/out/gpu-check-$(date -u +%F)-$HARDWARE}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-420}
# Whether time is left for an optional step (bash's SECONDS: since the script began).
time_left() { [ "$SECONDS" -lt "$BUDGET_S" ] || { echo "(skipped: ${SECONDS}s of the ${BUDGET_S}s budget used)"; false; }; }
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

# cuBLASLt (for --tables-out) is opened by cudarc as libcublasLt.so or libcublasLt.so.12;
# a CUDA 13 machine may hold only libcublasLt.so.13 (the toolkit's lib64, or PyTorch's
# nvidia wheels): such a library is linked under the unversioned name in a folder put
# first on the loader path (said below).
step "libraries"
if ! ldconfig -p 2>/dev/null | grep -qE 'libcublasLt\.so(\.12)? '; then
    lt=$( (ls /usr/local/cuda/lib64/libcublasLt.so* /usr/local/cuda-*/lib64/libcublasLt.so* \
        /usr/lib/x86_64-linux-gnu/libcublasLt.so* 2>/dev/null;
        find / -xdev -name 'libcublasLt.so*' 2>/dev/null) | grep -v '\.py' | head -1)
    if [ -n "$lt" ]; then
        mkdir -p "$OUT/.lib"
        ln -sf "$lt" "$OUT/.lib/libcublasLt.so"
        ln -sf "$(ls "$(dirname "$lt")"/libcublas.so* 2>/dev/null | head -1)" "$OUT/.lib/libcublas.so" 2>/dev/null
        export LD_LIBRARY_PATH="$OUT/.lib:$(dirname "$lt")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "cuBLASLt: $lt (linked as $OUT/.lib/libcublasLt.so)"
    else
        echo "cuBLASLt: not found on this machine (the tables step will fail)"
    fi
else
    ldconfig -p | grep -E 'libcublasLt' | head -3
fi

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

# (3) Kernel tables through production libraries, compared with the shipped ones.
BATCHES=${BATCHES:-1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192}
step_ms() { sed -n 's/^ *"step_ms": *\([0-9.e+-]*\),*$/\1/p' "$1" | head -1; }
dense_ms() { sed -n '/"breakdown_ms"/,/}/s/^ *"dense": *\([0-9.e+-]*\),*$/\1/p' "$1" | head -1; }
forward_pair() { # model label dir flags...: the step with the measured tables and with vLLM's
    local model=$1 label=$2 dir=$3
    shift 3
    # Tables against tables: --physics-only leaves out the terms fitted to measured
    # runs, which would price `--engine vllm` and not the measured folder.
    timeout 60 "$TWIN" forward --hardware "$HARDWARE" --model "$model" "$@" --engine "$dir" \
        --physics-only --allow-slow-profile --json > "$dir/forward-$label-measured.json" || status=1
    timeout 60 "$TWIN" forward --hardware "$HARDWARE" --model "$model" "$@" --engine vllm \
        --physics-only --json > "$dir/forward-$label-vllm.json" || status=1
    local a b c d
    a=$(step_ms "$dir/forward-$label-measured.json"); b=$(step_ms "$dir/forward-$label-vllm.json")
    c=$(dense_ms "$dir/forward-$label-measured.json"); d=$(dense_ms "$dir/forward-$label-vllm.json")
    awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v m="$model" -v l="$label" 'BEGIN {
        if (a > 0 && b > 0) printf "%-14s %-8s step: measured tables %9.3f ms, vllm tables %9.3f ms: %+.1f%% (goal within 10%%; what the measured tables lack is priced by twin, and the engines schedule differently)\n", m, l, a, b, 100 * (a / b - 1)
        else print m " " l ": no step time"
        if (c > 0 && d > 0) printf "%-14s %-8s dense GEMMs (what was measured): %9.3f ms against %9.3f ms: %+.1f%%\n", m, l, c, d, 100 * (c / d - 1) }'
}
# DeepSeek-V3's FP8 weights need 16 ranks on an 80 GB GPU (8 on 141 GB and more).
case "$HARDWARE" in h100|h800|a100) DS_DEP=16 DS_BATCH=32 ;; *) DS_DEP=8 DS_BATCH=64 ;; esac
if [ -x "$TWIN" ]; then
    for model in deepseek-v3 llama-3.1-8b; do
        dir="$OUT/tables-$model"
        step "calibrate --tables-out $dir ($model on $HARDWARE: cuBLASLt GEMMs, BF16 and FP8)"
        rm -rf "$dir"
        time timeout 150 "$TWIN" calibrate --device cuda:0 --tables-out "$dir" --hardware "$HARDWARE" \
            --model "$model" --batches "$BATCHES" --quick --compare vllm,trtllm --base vllm || status=1
    done
    step "forward --engine <measured tables> against --engine vllm"
    d="$OUT/tables-deepseek-v3"
    [ -f "$d/kernel-tables.toml" ] && {
        forward_pair deepseek-v3 decode "$d" --phase decode --dep "$DS_DEP" --batch-per-rank "$DS_BATCH" --context 4096
        forward_pair deepseek-v3 prefill "$d" --phase prefill --dep "$DS_DEP" --batch-per-rank 1 --new-tokens 4096
    }
    d="$OUT/tables-llama-3.1-8b"
    [ -f "$d/kernel-tables.toml" ] && {
        forward_pair llama-3.1-8b decode "$d" --phase decode --tp 1 --batch-per-rank 64 --context 4096
        forward_pair llama-3.1-8b prefill "$d" --phase prefill --tp 1 --batch-per-rank 1 --new-tokens 4096
    }
fi

step "twin calibrate --device cuda:0 --quick (twin's own kernels, for their roofline fractions)"
if [ ! -x "$TWIN" ]; then
    echo "FAIL: $TWIN not found"; status=1
elif time_left; then
    time timeout 200 "$TWIN" calibrate --device cuda:0 --quick --out "$OUT/profile-$HARDWARE" || status=1
fi

CSV="$OUT/profile-$HARDWARE/measurements.csv"
step "roofline (from $CSV)"
if [ -f "$CSV" ]; then
    # Columns: 1 op, 2 shape, 3 dtype, 4 median_s, 5 p10_s, 7 bytes, 8 flops,
    # 9 achieved_bytes_per_s, 10 achieved_flops_per_s (at the median).
    # The datasheet's HBM bandwidth and dense FP8 peak (context only; goals are
    # judged against the device's own measured peaks, as the cost model uses them).
    case "$HARDWARE" in
        h100) DS_BW=3350 DS_FP8=1979 ;; h200) DS_BW=4800 DS_FP8=1979 ;;
        b200) DS_BW=8000 DS_FP8=4500 ;; *) DS_BW=0 DS_FP8=0 ;;
    esac
    awk -F, -v ds_bw="$DS_BW" -v ds_fp8="$DS_FP8" 'NR > 1 {
        bw = $9 + 0; fl = $10 + 0
        # Reference peaks at the p10 time (as profile.toml does): bytes or flops / p10_s.
        if ($1 == "ref_stream_read" && $5 > 0 && $7 / $5 > ref_bw) ref_bw = $7 / $5
        if ($1 == "ref_gemm" && $5 > 0 && $8 / $5 > ref_fl) ref_fl = $8 / $5
        if ($1 == "moe_decode" && bw > moe_bw) { moe_bw = bw; moe_at = $3 " " $2 }
        if ($1 == "moe_decode" && bw > md[$3]) { md[$3] = bw; md_at[$3] = $2 }
        if ($1 == "grouped_gemm" && $3 == "fp8" && fl > gg_fl) { gg_fl = fl; gg_at = $2 }
        if (($1 == "attn_dense" || $1 == "attn_sparse" || $1 == "attn_window") && bw > at_bw) { at_bw = bw; at_at = $1 " " $2 }
    }
    function share(x, ref, goal, what, at) {
        if (ref <= 0 || x <= 0) { printf "%-34s no data\n", what; return }
        s = x / ref
        printf "%-34s %6.1f%% (goal >= %d%%) %s  [%s]\n", what, 100 * s, 100 * goal, (s >= goal ? "MET" : "MISSED"), at
    }
    END {
        printf "measured stream read:   %8.1f GB/s (datasheet %d GB/s: %.0f%%)\n", ref_bw / 1e9, ds_bw, (ds_bw > 0 ? 100 * ref_bw / (ds_bw * 1e9) : 0)
        printf "measured reference GEMM: %7.1f TFLOP/s (cuBLAS f32)\n", ref_fl / 1e12
        share(moe_bw, ref_bw, 0.85, "MoE weight streaming / HBM read", moe_at)
        for (d in md) share(md[d], ref_bw, 0.85, "  " d " experts / HBM read", md_at[d])
        share(gg_fl, ref_fl, 0.70, "fp8 grouped GEMM / reference GEMM", gg_at)
        printf "%-34s %6.2f%% of datasheet dense FP8 (%d TFLOP/s)\n", "fp8 grouped GEMM", (ds_fp8 > 0 ? 100 * gg_fl / (ds_fp8 * 1e12) : 0), ds_fp8
        share(at_bw, ref_bw, 0.80, "attention decode / HBM read", at_at)
    }' "$CSV"
    [ -f "$OUT/profile-$HARDWARE/profile.toml" ] && { step "profile.toml"; cat "$OUT/profile-$HARDWARE/profile.toml"; }
else
    echo "FAIL: no measurements"; status=1
fi

step "live runs on cuda:0, their validation and an in-situ fit from a traced run"
DURATION=${DURATION:-20}
RATE=${RATE:-20}
TRACED_RATE=${TRACED_RATE:-10}
DISTANCE=${DISTANCE:-target/release/examples/run_distance}
if [ -x "$TWIN" ] && [ "${LIVE:-1}" = 1 ] && time_left; then
    live_run() { # dir rate [flags]
        local dir=$1 rate=$2
        shift 2
        rm -rf "$dir"
        timeout 90 "$TWIN" live cpu-live-poisson --device cuda:0 --duration "$DURATION" \
            --set workload.open_loop.rate_per_s="$rate" "$@" --out "$dir" || status=1
    }
    timeout 120 "$TWIN" calibrate --device cuda:0 --plan live --model cpu-live-moe --quick \
        --out "$OUT/profile-live-$HARDWARE" || status=1
    live_run "$OUT/live-$HARDWARE" "$RATE"
    timeout 60 "$TWIN" validate live "$OUT/live-$HARDWARE" --profile "$OUT/profile-live-$HARDWARE/profile.toml" || status=1
    if time_left; then
        live_run "$OUT/live-$HARDWARE-b" "$RATE"
        if [ -x "$DISTANCE" ]; then
            "$DISTANCE" "$OUT/live-$HARDWARE" "$OUT/live-$HARDWARE-b" || status=1
        fi
    fi
    if time_left; then
        live_run "$OUT/live-$HARDWARE-traced" "$TRACED_RATE" --trace-ops
        timeout 60 "$TWIN" calibrate fit-trace "$OUT/live-$HARDWARE-traced/trace.json.gz" \
            --out "$OUT/insitu-$HARDWARE.toml" || status=1
        timeout 60 "$TWIN" validate live "$OUT/live-$HARDWARE" --profile "$OUT/insitu-$HARDWARE.toml" || status=1
    fi
fi

# Launch costs (eager and CUDA graph), if the example travelled (LAUNCH; build it with
# `cargo build --release -p engine --example launch_costs`).
LAUNCH=${LAUNCH:-target/release/examples/launch_costs}
if [ -x "$LAUNCH" ] && time_left; then
    step "launch costs on cuda:0"
    timeout 60 "$LAUNCH" 0 || status=1
fi

echo
echo "results under $OUT (${SECONDS}s); nvidia-smi: $GPU_NAME"
[ $status -eq 0 ] && echo "gpu-check: all steps ran" || echo "gpu-check: some steps FAILED"
exit $status
