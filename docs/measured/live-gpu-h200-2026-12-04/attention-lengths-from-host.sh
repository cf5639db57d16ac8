#!/usr/bin/env bash
# Short check after the attention split-KV grid is sized from host-known lengths.
set -u
T=.gpu/twin; O=/tmp/s; mkdir -p $O
export TWIN_KERNEL_CACHE=$PWD/.gpu/kernel-cache TWIN_REQUIRE_GPU=1
timeout 40 .gpu/cuda_vs_cpu --test-threads=1 2>&1 | grep -E "^test |test result"
run() { timeout 45 $T live cpu-live-poisson --device cuda:0 --duration 20 --set workload.open_loop.rate_per_s=20 "$@" 2>&1 | grep -E "^run:|req/s|TTFT"; }
run --out $O/u
timeout 30 $T calibrate --device cuda:0 --plan live --model cpu-live-moe --quick --out $O/p > /dev/null 2>&1
timeout 20 $T validate live $O/u --profile $O/p/profile.toml | sed -n '3,14p;/throughput (tok\/s processed)/p;/TTFT p90/p;/TPOT p90/p'
run --out $O/t --trace-ops
.gpu/run_distance $O/u $O/t | head -5
timeout 30 $T calibrate fit-trace $O/t/trace.json.gz --out $O/i.toml > /dev/null 2>&1
timeout 20 $T validate live $O/u --profile $O/i.toml | sed -n '3,14p;/throughput (tok\/s processed)/p;/TTFT p90/p;/TPOT p90/p'
