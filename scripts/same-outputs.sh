#!/usr/bin/env bash
# Records what a twin binary prints for a fixed set of commands (every shipped
# scenario's `simulate --json`, the README's and guides' main commands, a plan, a sweep,
# kernel and forward steps, validation of the public runs, and error cases), so that a
# refactor can show its outputs are byte-identical: run it on the binary before and on
# the binary after, into two folders, and compare them.
#
#   scripts/same-outputs.sh target/release/twin /tmp/before    # on the old commit
#   scripts/same-outputs.sh target/release/twin /tmp/after     # on the new one
#   scripts/same-outputs.sh --compare /tmp/before /tmp/after
#
# Each command's stdout, stderr and exit status go to N.out and N.err; `cmds` lists
# them. About 10 s on 2 cores with a release build. Run from the repository root.
set -euo pipefail
if [[ ${1:-} == --compare ]]; then
  a=$2 b=$3 differ=0
  while read -r line; do
    n=${line%%:*}
    for ext in out err; do
      if ! cmp -s "$a/$n.$ext" "$b/$n.$ext"; then
        echo "differs ($ext): $line"
        differ=1
      fi
    done
  done <"$a/cmds"
  [[ $differ == 0 ]] && echo "same outputs: $(wc -l <"$a/cmds") commands"
  exit $differ
fi
twin=$1 out=$2
mkdir -p "$out"
: >"$out/cmds"
i=0
run() {
  i=$((i + 1))
  rc=0
  "$twin" "$@" >"$out/$i.out" 2>"$out/$i.err" || rc=$?
  echo "rc=$rc" >>"$out/$i.err"
  echo "$i: $*" >>"$out/cmds"
}
for s in scenarios/*.toml; do
  run simulate "$(basename "$s" .toml)" --json --duration 60
done
run simulate
run simulate h100-llama-3.1-70b-tp8 --bench 'vllm --num-prompts 20 --max-concurrency 4 --random-input-len 2047 --random-output-len 32 --ignore-eos'
run simulate h100-llama-3.1-70b-tp8 --engine sglang --bench 'vllm --num-prompts 20 --max-concurrency 1 --random-prefix-len 500 --random-input-len 100 --random-output-len 4'
run simulate h100-gpt-oss-120b-tp8 --set workload=trace-replay --trace examples/traces/azure-code-2023-100.csv --set duration_s=200 --set warmup_s=0
run simulate gb300-nvl72-v4.1-flash-agentx --decode-deps 16,32 --duration 40
run simulate gb300-nvl72-v4.1-flash-agentx --cohort 4 --duration 40 --json
run simulate h100-gpt-oss-120b-chat --band 3 --duration 60
run simulate h100-gpt-oss-120b-chat --seeds 2 --duration 60
run simulate h100-gpt-oss-120b-chat --duration 60 --set tco.usd_per_kwh=0.2 --tco hyperscaler-tco --json
run cost
run cost h100-gpt-oss-120b-chat --set tco.usd_per_kwh=0.2
run cost h100-gpt-oss-120b-chat --set tco.usd_per_kwh=0.2 --tco neocloud-tco
run plan h100-gpt-oss-120b-chat --space examples/plan-space-h100-node.toml --duration 60 --set warmup_s=10
run plan --space examples/plan-space-small.toml --duration 30 --set warmup_s=10 --slo ttft_p90_ms=500 --slo tpot_p90_ms=20
run plan h100-gpt-oss-120b-chat --space examples/plan-space-h100-node.toml --duration 30 --set cost.moe.mem_eff=0.8 --set tco.usd_per_kwh=0.2 --tco neocloud-tco
run sweep --batches 16,64 --deps 8,16
run forward --hardware h100 --model llama-3.1-70b --tp 8 --batch-per-rank 40 --context 2100 --engine vllm
run forward --hardware h800 --model deepseek-v3 --phase prefill --dep 32 --batch-per-rank 4 --new-tokens 4096 --set model.moe.balanced=true --set cost.comm_sms=24 --set cost.deepep_release=20250227 --in-situ-layer
run forward --hardware mi300x --set hardware.kernels_from=a100
run kernel gemm --hardware h100 --m 1024 --n 4096 --k 16384 --dtype bf16 --engine trtllm
run validate bench tests/fixtures/bench/llama31-70b-h100-tp8-c10.json.gz --scenario h100-llama-3.1-70b-tp8
run validate runs h100-public-bench
run validate runs aic-silicon-train --filter engine=trtllm --filter gpu=h100
run model show gpt-oss-120b
run simulate nosuch
run simulate h100-gpt-oss-120b-chat --set serving.decode.dep=x
run simulate h100-gpt-oss-120b-chat --trace /nonexistent
run simulate h100-gpt-oss-120b-chat --set serving.decode.dep=x --set hardware.foo=1
echo "$i commands recorded in $out"
