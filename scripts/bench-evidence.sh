#!/usr/bin/env bash
# twin against the public `vllm bench serve` and SGLang `bench_serving` runs in
# tests/fixtures/bench/ (every point): TTFT p50, TPOT p50, ITL p50 (the median gap
# between tokens: a decode step, mostly) and throughput, measured and predicted, under three cost
# and scheduler settings. Prints a markdown table; docs/measured/bench-h100-*.md holds
# its output with the date and commit.
#   scripts/bench-evidence.sh [TWIN]    (default: target/release/twin)
#   KS="b" runs one setting; EXTRA="--set serving.frontend_s=0.02" adds options to all;
#   KS="d" reads each vLLM run's front end from another run of its deployment;
#   KS="e" prices each vLLM run with the front end and its API server's time per
#   streamed chunk fitted to the other six vLLM runs' figures (`calibrate --from-runs
#   h100-public-bench`, leaving that run out; FIT_TERMS sets the terms);
#   KS="f" is d with the host's time per launched kernel that a profiler trace of
#   another vLLM deployment reads (`calibrate --from-trace`, the B200 eager trace of
#   gpt-oss-120b in calibration/tests/data/traces) on every vLLM run, in place of
#   the Triton experts' host time a MoE layer that twin prices by default
#   (`launch.triton_moe_s` 0: both price the same floor of host-launched steps).
# The four SGLang runs served one server process in turn (the same
# server_info.random_seed) without flushing its radix cache, so each is replayed
# `--after` the shorter ones before it (the sweep's ascending order, assumed: the
# order of benchmaq's bench list; docs/measured/bench-h100-2026-12-04-held.md).
set -euo pipefail
cd "$(dirname "$0")/.."
TWIN=${1:-target/release/twin}
IN_SITU_OFF=(--set cost.in_situ.prefill.elementwise=1 --set cost.in_situ.prefill.gemm=1
  --set cost.in_situ.prefill.attention=1 --set cost.in_situ.prefill.moe=1
  --set cost.in_situ.decode.gemm=1 --set cost.in_situ.decode.attention=1
  --set cost.in_situ.decode.moe=1 --set cost.in_situ.kernel_floor_s=0)
declare -A SETTING=(
  [a]="--engine twin --set serving.scheduler=twin"
  [b]=""
  [c]="${IN_SITU_OFF[*]}"
  [d]=""
  [e]=""
  [f]=""
)
# Setting d: b, each vLLM run priced with the front end another run of its deployment's
# token times allow (`--front-end-from`: a calibration from the deployment's own runs,
# never the run's own); gpt-oss at 50 users has no other run that bounds it, and the
# SGLang files hold no send times: those keep b's.
# The host's time per launched kernel of the vLLM eager trace (setting f).
host_s() {
  "$TWIN" calibrate --from-trace calibration/tests/data/traces/vllm-b200-gpt-oss-120b-tp8-prefill.json.gz \
    --deployment "--hardware b200 --model gpt-oss-120b --tp 8 --dep 1 --phase prefill --requests 1 --new-tokens 888" \
    --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["in_situ_fit"]["host"]["eager_s"])'
}
front_end_source() {
  case $1 in
    llama31-70b-h100-tp8-c25) echo tests/fixtures/bench/llama31-70b-h100-tp8-c50.json ;;
    llama31-70b-h100-tp8-*) echo tests/fixtures/bench/llama31-70b-h100-tp8-c25.json.gz ;;
    gpt-oss-120b-h100-tp8-c10 | gpt-oss-120b-h100-tp8-c200)
      echo tests/fixtures/bench/gpt-oss-120b-h100-tp8-c50.json.gz ;;
  esac
}
echo "| run | setting | throughput | TTFT p50 ms (measured / twin / error) | TPOT p50 ms (measured / twin / error) | ITL p50 ms (measured / twin / error) |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
AFTER=()
VLLM_RUNS="llama31-70b-h100-tp8-c10 llama31-70b-h100-tp8-c25 llama31-70b-h100-tp8-c50
  llama31-70b-h100-tp8-c200 gpt-oss-120b-h100-tp8-c10 gpt-oss-120b-h100-tp8-c50
  gpt-oss-120b-h100-tp8-c200"
for f in llama31-70b-h100-tp8-c10 llama31-70b-h100-tp8-c25 llama31-70b-h100-tp8-c50 \
  llama31-70b-h100-tp8-c200 gpt-oss-120b-h100-tp8-c10 gpt-oss-120b-h100-tp8-c50 \
  gpt-oss-120b-h100-tp8-c200 sglang-llama31-70b-h100-tp8-in1024-c100 \
  sglang-llama31-70b-h100-tp8-in2048-c100 sglang-llama31-70b-h100-tp8-in4096-c100 \
  sglang-llama31-70b-h100-tp8-in8192-c100; do
  case $f in *llama*) sc=h100-llama-3.1-70b-tp8 ;; *) sc=h100-gpt-oss-120b-tp8 ;; esac
  file=tests/fixtures/bench/$f.json
  [ -f "$file" ] || file=$file.gz
  [ -f "$file" ] || file=tests/fixtures/bench/$f.jsonl.gz
  for k in ${KS:-a b c}; do
    FE=()
    src=$(front_end_source "$f")
    if [[ ($k == d || $k == f) && -n $src ]]; then FE=(--front-end-from "$src"); fi
    if [[ $k == f && $f != sglang-* ]]; then
      FE+=(--set "cost.launch.eager_s=$(host_s)" --set cost.launch.triton_moe_s=0)
    fi
    if [[ $k == e && $f != sglang-* ]]; then
      others=$(printf '%s\n' $VLLM_RUNS | grep -vx "$f" | paste -sd,)
      prof=$(mktemp --suffix=.toml)
      "$TWIN" calibrate --from-runs h100-public-bench --filter "id=$others" \
        --terms "${FIT_TERMS:-frontend_s,frontend_chunk_s}" --prior-scale 5 --out "$prof" >/dev/null 2>&1
      FE=(--profile "$prof")
    fi
    # shellcheck disable=SC2086
    "$TWIN" validate bench "$file" --scenario "$sc" "${AFTER[@]}" "${FE[@]}" ${SETTING[$k]} ${EXTRA:-} --json |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
m, p = d["measured"], d["predicted"]
e = lambda a, b: 100 * (b - a) / a
row = (sys.argv[1], sys.argv[2], e(m["token_throughput"], p["token_throughput"]),
       m["ttft_ms"]["p50"], p["ttft_ms"]["p50"], e(m["ttft_ms"]["p50"], p["ttft_ms"]["p50"]),
       m["tpot_ms"]["p50"], p["tpot_ms"]["p50"], e(m["tpot_ms"]["p50"], p["tpot_ms"]["p50"]),
       m["itl_ms"]["p50"], p["itl_ms"]["p50"], e(m["itl_ms"]["p50"], p["itl_ms"]["p50"]))
print("| %s | %s | %+.1f%% | %.0f / %.0f / %+.1f%% | %.2f / %.2f / %+.1f%% | %.2f / %.2f / %+.1f%% |" % row)
' "$f" "$k"
    if [[ ${FE[0]:-} == --profile ]]; then rm -f "${FE[1]}"; fi
  done
  case $f in sglang-*) AFTER+=(--after "$file") ;; esac
done
