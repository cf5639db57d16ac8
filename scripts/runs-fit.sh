#!/usr/bin/env bash
# Writes scenarios/runs/fitted.toml: the terms physics leaves open, fitted to the
# embedded AIConfigurator silicon set (aic-silicon-train) per engine and GPU family,
# which twin ships and prices every engine's steps with unless --physics-only.
# Which terms: those that improved the leave-one-model-out cross-validation over
# physics alone when this was last run (docs/measured/runs-aic-2026-12-05.md), per
# group the first of TERMS and OR_TERMS that did; the others stay at their priors.
# Checked afterwards on records the fit never saw: the eleven public H100 runs
# (h100-public-bench).
#
#   scripts/runs-fit.sh            # fit, write, then check on h100-public-bench
#   TERMS=a,b scripts/runs-fit.sh  # another term set
#
# About 20 to 40 minutes on 2 cores (one simulation a record and one per term, then
# every record again under each fold's terms); LINEARISED=FILE keeps the linearised
# records for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TWIN:-target/release/twin}
TERMS=${TERMS:-frontend_s,in_situ.decode.elementwise,in_situ.prefill.elementwise}
# A group whose fit of TERMS loses to physics alone tries this set next.
OR_TERMS=${OR_TERMS:-in_situ.decode.elementwise}
OUT=scenarios/runs/fitted.toml
lin=()
if [[ -n "${LINEARISED:-}" ]]; then lin=(--linearised "$LINEARISED"); fi
"$T" calibrate --from-runs aic-silicon-train --terms "$TERMS" --or-terms "$OR_TERMS" --only-improving "${lin[@]}" --out "$OUT"
echo "wrote $OUT; rebuild twin to ship it"
cargo build --release --quiet
"$T" validate runs h100-public-bench --profile "$OUT"
