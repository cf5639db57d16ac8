#!/usr/bin/env bash
# Writes scenarios/runs/h100-public-bench.jsonl: the eleven public H100 benchmark runs
# of tests/fixtures/bench (their README: sources, licence) as twin.run.v1 records, with
# the deployments their files do not hold: vLLM 0.15.0 (the clients' log lines are
# vLLM 0.15.0's), Llama-3.1-70B-Instruct in BF16 and gpt-oss-120b as released (MXFP4
# experts), one TP8 instance on 8 x H100 SXM; the four SGLang runs on one warm server,
# each after the earlier ones (docs/measured/bench-h100-2026-12-04-held.md).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TWIN:-target/release/twin}
B=tests/fixtures/bench
M=scenarios/runs/models
OUT=scenarios/runs/h100-public-bench.jsonl.gz
parts=$(mktemp -d scenarios/runs/.parts.XXXX)
trap 'rm -rf "$parts"' EXIT
imp() { "$T" runs import "$@" --gpu h100 --tp 8 --force; }
imp $B/llama31-70b-h100-tp8-c*.json* --engine vllm@0.15.0 --model $M/Llama-3.1-70B/config.json \
  --weights bf16 --out "$parts/1.jsonl"
imp $B/gpt-oss-120b-h100-tp8-c*.json.gz --engine vllm@0.15.0 --model $M/gpt-oss-120b/config.json \
  --weights bf16+mxfp4 --out "$parts/2.jsonl"
s=$B/sglang-llama31-70b-h100-tp8-in
after=()
for L in 1024 2048 4096 8192; do
  imp "$s$L-c100.jsonl.gz" "${after[@]}" --engine sglang --model $M/Llama-3.1-70B/config.json \
    --weights bf16 --out "$parts/3-$L.jsonl"
  after+=(--after "$s$L-c100.jsonl.gz")
done
"$T" runs import "$parts"/*.jsonl --out "$OUT" --force \
  --title "the eleven public 8 x H100 runs of tests/fixtures/bench, by scripts/runs-h100-public.sh"
