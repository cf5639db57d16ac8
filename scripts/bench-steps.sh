#!/usr/bin/env bash
# The server's steps read back from the public vLLM runs' token times
# (tests/fixtures/bench/, `validate bench`'s step table), beside twin's: per run, the
# kinds of step with at least MIN measured steps (default 8), as a markdown table; then
# the read-back decode steps each priced exactly at its own batch, and the front end the
# token times allow (PRICED=1 prints that second table instead).
# docs/measured/bench-h100-*-steps.md holds its output with the date and commit.
#   scripts/bench-steps.sh [TWIN]    (default: target/release/twin)
set -euo pipefail
cd "$(dirname "$0")/.."
TWIN=${1:-target/release/twin}
if [[ -n "${PRICED:-}" ]]; then
  echo "| run | decode steps priced | mean abs error | twin's total | commonest batch: measured / twin ms | front end the token times allow |"
  echo "| --- | ---: | ---: | ---: | --- | --- |"
else
  echo "| run | step (prompts finished + requests decoded) | measured steps | measured p50 ms | twin steps | twin p50 ms | error |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
fi
for f in llama31-70b-h100-tp8-c10 llama31-70b-h100-tp8-c25 llama31-70b-h100-tp8-c50 \
  llama31-70b-h100-tp8-c200 gpt-oss-120b-h100-tp8-c10 gpt-oss-120b-h100-tp8-c50 \
  gpt-oss-120b-h100-tp8-c200; do
  case $f in *llama*) sc=h100-llama-3.1-70b-tp8 ;; *) sc=h100-gpt-oss-120b-tp8 ;; esac
  file=tests/fixtures/bench/$f.json
  [ -f "$file" ] || file=$file.gz
  "$TWIN" validate bench "$file" --scenario "$sc" --json |
    MIN=${MIN:-8} RUN=$f PRICED=${PRICED:-} python3 -c '
import json, os, sys
v = json.load(sys.stdin)["steps"]
if os.environ["PRICED"]:
    d, fe = v["decode_steps_priced"], v["front_end"]
    k = d["kinds"][0]
    if fe is None:
        f = "no bound from below"
    elif fe["lower_ms"] <= fe["upper_ms"]:
        f = "%.1f-%.1f ms" % (fe["lower_ms"], fe["upper_ms"])
    else:
        f = "none constant (at least %.1f, at most %.1f ms)" % (fe["lower_ms"], fe["upper_ms"])
    print("| %s | %d | %.1f%% | %+.1f%% | %s: %.2f / %.2f | %s |" % (os.environ["RUN"], d["steps"],
          100 * d["mape"], 100 * d["bias"], k["kind"], k["measured_ms_mean"], k["twin_ms_mean"], f))
    sys.exit(0)
for k in v["kinds"]:
    if k["measured_steps"] < int(os.environ["MIN"]):
        continue
    t = k["twin_ms_p50"]
    err = "%+.1f%%" % (100 * (t / k["measured_ms_p50"] - 1)) if k["twin_steps"] else "-"
    tt = "%.2f" % t if k["twin_steps"] else "-"
    print("| %s | %s | %d | %.2f | %d | %s | %s |" % (os.environ["RUN"], k["kind"],
          k["measured_steps"], k["measured_ms_p50"], k["twin_steps"], tt, err))
'
done
