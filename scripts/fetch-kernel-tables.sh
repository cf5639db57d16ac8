#!/usr/bin/env bash
# Extracts AIConfigurator's measured per-op tables (Apache-2.0, github ai-dynamo/aiconfigurator)
# for the GPUs and engines twin ships profiles of, from a local git copy of that repository,
# into OUT/<gpu>/<family>/<engine>/<version>/ (the layout `twin calibrate --from-tables` reads).
#
#   scripts/fetch-kernel-tables.sh AIC_GIT_DIR OUT [COMMIT]
#
# AIC_GIT_DIR: a clone (`git clone https://github.com/ai-dynamo/aiconfigurator`) or a bare copy.
# COMMIT defaults to the one the shipped profiles were fitted at.
set -euo pipefail
src=${1:?usage: $0 AIC_GIT_DIR OUT [COMMIT]}
out=${2:?usage: $0 AIC_GIT_DIR OUT [COMMIT]}
commit=${3:-095f58a51c4ca8e61b66ec108d86f223f8d559ce}
base=aic-core/src/aiconfigurator_core/systems/data
# gpu engine version, one set per line (scripts/kernel-table-sets.txt).
sets=$(grep -v '^#' "$(dirname "$0")/kernel-table-sets.txt" | awk 'NF { print $1, $3, $4 }')
mkdir -p "$out"
git -C "$src" show "$commit:LICENSE" > "$out/LICENSE"
n=0
while read -r gpu engine version; do
  for fam in gemm attention moe comm; do
    for dir in "$base/$gpu/$fam/$engine/$version" "$base/$gpu/$fam/nccl/2.29.2"; do
      [ "$fam" != comm ] && [ "${dir##*/nccl/}" != "$dir" ] && continue
      files=$(git -C "$src" ls-tree --name-only "$commit" "$dir/" 2>/dev/null || true)
      for f in $files; do
        rel=${f#"$base/"}
        mkdir -p "$out/$(dirname "$rel")"
        git -C "$src" show "$commit:$f" > "$out/$rel"
        n=$((n + 1))
      done
    done
  done
done <<< "$sets"
echo "$n files from ai-dynamo/aiconfigurator@$commit into $out"
