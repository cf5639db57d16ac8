#!/usr/bin/env bash
# Runs the CUDA kernels (kernels/src/cuda/*.cu) on the CPU under a small execution
# emulator (emu.h: one std::thread per CUDA thread, real barriers for __syncthreads and
# warp shuffles, blocks one at a time) and checks them against naive C++ references.
# A check of indexing and synchronisation without a GPU; not of performance, and not a
# substitute for engine/tests/cuda_vs_cpu.rs on a real GPU. Needs g++ with C++20.
# Takes a few minutes (thousands of threads per launch).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../src/cuda"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/*.h "$here"/test_*.cpp "$work"/
for f in moe_expert mla_decode indexer gather; do
    { echo '#include "emu.h"'; cat "$src/common.cuh" "$src/$f.cu"; } |
        sed 's/extern __shared__ float sq\[\];/float* sq = (float*)g_dyn_smem.data();/' > "$work/$f.cpp"
done
{ echo '#include "emu.h"'; cat "$src/copy.cu"; } > "$work/copy_only.cpp"
status=0
for t in test_gc test_moe test_idx test_mla; do
    g++ -std=c++20 -O1 -Wno-unknown-pragmas -pthread -I"$work" "$work/$t.cpp" -o "$work/$t"
    "$work/$t" || status=1
done
[ $status -eq 0 ] && echo "emulated kernels: all ok" || echo "emulated kernels: FAILURES"
exit $status
