#!/usr/bin/env bash
# Prints the cost libtessera adds to cuLaunchKernel (no SM limit) and to a
# cuMemAlloc+cuMemFree pair (memory limit set): callgrind instructions per call
# and wall ns per call, hooked vs calling the fake driver directly; then the SM
# limiter's accuracy on the fake driver (busy fraction vs the share, ±5 points).
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

echo "SM limiter accuracy (fake driver, 1 s per run, 20 ms window; target within 5 points)"
export TESSERA_SM_WINDOW_US=20000 FAKE_CTX_BYTES=0
GPU0=GPU-7e55e7a0-1234-4567-89ab-cdef00000000
misses=0
# share_run NAME CORES KIND: one measured run in a claim of its own (each run alone on the machine)
share_run() {
    mkdir -p "$WORK/$1"
    printf 'version 1\ngpu %s memory 0 cores %s\n' "$GPU0" "$2" >"$WORK/$1/limits"
    TESSERA_CLAIM_DIRS=$WORK/$1 LD_PRELOAD=$B/libtessera.so "$B/tests/tcuda" sm -1 1 "$3" | grep -o 'share=[0-9.]*' | cut -d= -f2
}
verdict() { awk -v s="$1" -v e="$2" 'BEGIN { if (s >= e - 5 && s <= e + 5) print "ok"; else print "MISS" }'; }
for s in 10 30 50 70 90; do
    got=$(share_run "sm$s" "$s" kernel)
    v=$(verdict "$got" "$s"); [ "$v" = ok ] || misses=$((misses + 1))
    echo "  cores $s: busy $got % ($v)"
done
got=$(share_run smg 50 graph)
v=$(verdict "$got" 50); [ "$v" = ok ] || misses=$((misses + 1))
echo "  cores 50, graph launches: busy $got % ($v)"
mkdir -p "$WORK/a" "$WORK/b"
printf 'version 1\ngpu %s cores 30\n' "$GPU0" >"$WORK/a/limits"
printf 'version 1\ngpu %s cores 70\n' "$GPU0" >"$WORK/b/limits"
TESSERA_CLAIM_DIRS=$WORK/a LD_PRELOAD=$B/libtessera.so "$B/tests/tcuda" sm -1 1 kernel >"$WORK/a.out" &
TESSERA_CLAIM_DIRS=$WORK/b LD_PRELOAD=$B/libtessera.so "$B/tests/tcuda" sm -1 1 graph >"$WORK/b.out"
wait
a=$(grep -o 'share=[0-9.]*' "$WORK/a.out" | cut -d= -f2)
b=$(grep -o 'share=[0-9.]*' "$WORK/b.out" | cut -d= -f2)
va=$(verdict "$a" 30); vb=$(verdict "$b" 70)
[ "$va" = ok ] || misses=$((misses + 1)); [ "$vb" = ok ] || misses=$((misses + 1))
echo "  two claims on one GPU, 30 and 70: busy $a % ($va) and $b % ($vb)"
got=$(env -u LD_PRELOAD "$B/tests/tcuda" sm -1 1 kernel | grep -o 'share=[0-9.]*' | cut -d= -f2)
echo "  without the library (what this machine allows): busy $got %"
echo "SM accuracy: $misses of 8 outside 5 points"
