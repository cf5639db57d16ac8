#!/usr/bin/env bash
# Refits the shipped kernel-table profiles from AIConfigurator's measured per-op tables:
#   scripts/fetch-kernel-tables.sh AIC_GIT_DIR TABLES   # extract the tables (see there)
#   scripts/fit-kernel-tables.sh TABLES [TWIN]          # fit, write, report
# Writes scenarios/kernel-tables/<hardware>-<engine>-<version>.toml.gz, each set's report
# (held-out errors per op family and key) to docs/measured/kernel-tables/, and held-out
# rows as `twin validate` check rows to scenarios/published/kernel-tables-measured.csv.
set -euo pipefail
tables=${1:?usage: $0 TABLES_DIR [TWIN_BINARY]}
twin=${2:-target/release/twin}
out=scenarios/kernel-tables
notes=docs/measured/kernel-tables
checks=scenarios/published/kernel-tables-measured.csv
mkdir -p "$out" "$notes"
rm -f "$checks"
while read -r system hw engine version check; do
  name="$hw-$engine-$version"
  echo "== $name"
  "$twin" calibrate --from-tables "$tables" --system "$system" --engine "$engine" \
    --engine-version "$version" --out "$out/$name.toml.gz" \
    ${check:+--check-table "$checks"} > "$notes/$name.txt"
  sed -n 3,8p "$notes/$name.txt"
done < <(grep -v '^#' "$(dirname "$0")/kernel-table-sets.txt" | awk 'NF')
