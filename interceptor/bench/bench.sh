#!/usr/bin/env bash
# Prints the cost libtessera adds to cuLaunchKernel (no SM limit) and to a
# cuMemAlloc+cuMemFree pair (memory limit set): callgrind instructions per call
# and wall ns per call, hooked vs calling the fake driver directly.
set -eu
cd "$(dirname "$0")/.."
B=$PWD/build
export LD_LIBRARY_PATH=$B/fake
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/claim"
printf 'version 1\ngpu GPU-7e55e7a0-1234-4567-89ab-cdef00000000 memory 64g cores 0\n' >"$WORK/claim/limits"
export TESSERA_CLAIM_DIRS=$WORK/claim

# ir PRELOAD KIND N: total instructions of a run
ir() {
    local out=$WORK/cg.$RANDOM
    env LD_PRELOAD="$1" valgrind --tool=callgrind --callgrind-out-file="$out" "$B/bench/bench" "$2" "$3" >/dev/null 2>&1
    awk '/^summary:/ { print $2 }' "$out"
}
# per_call PRELOAD KIND: (Ir(N) - Ir(0)) / N
per_call() {
    local n=20000 a b
    a=$(ir "$1" "$2" 0)
    b=$(ir "$1" "$2" $n)
    awk -v a="$a" -v b="$b" -v n=$n 'BEGIN { printf "%.1f", (b - a) / n }'
}
ns() { env LD_PRELOAD="$1" "$B/bench/bench" "$2" "$3" | awk '{ print $2 }'; }

echo "libtessera microbenchmark (fake driver; callgrind instruction counts are exact, ns are this machine's)"
if command -v valgrind >/dev/null; then
    d=$(per_call "" launch)
    h=$(per_call "$B/libtessera.so" launch)
    echo "cuLaunchKernel, no SM limit:   direct $d instr/call, hooked $h instr/call, added $(awk -v a="$d" -v b="$h" 'BEGIN { printf "%.1f", b - a }')"
    d=$(per_call "" alloc)
    h=$(per_call "$B/libtessera.so" alloc)
    echo "cuMemAlloc+cuMemFree, limited: direct $d instr/pair, hooked $h instr/pair, added $(awk -v a="$d" -v b="$h" 'BEGIN { printf "%.1f", b - a }')"
else
    echo "valgrind not found: instruction counts skipped"
fi
for i in 1 2 3; do
    echo "run $i: cuLaunchKernel direct $(ns "" launch 5000000) ns, hooked $(ns "$B/libtessera.so" launch 5000000) ns;" \
        "alloc+free direct $(ns "" alloc 300000) ns, hooked $(ns "$B/libtessera.so" alloc 300000) ns"
done
