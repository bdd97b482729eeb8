#!/usr/bin/env bash
# Prints the cost libtessera adds to cuLaunchKernel (no SM limit) and to a
# cuMemAlloc+cuMemFree pair (memory limit set): callgrind instructions per call
# and wall ns per call, hooked vs calling the fake driver directly; then the SM
# limiter's accuracy on the fake driver (busy fraction vs the share, ±5 points), GPU sharing
# and its calibration against the H100, and MPS clients (fake control daemon) beside the H100's figures.
# SMOKE=1 (make bench-interceptor SMOKE=1; `make test` runs it): every line once, from runs far too short to
# mean anything, so the benchmark cannot rot unseen (tests/integration/test_bench_smoke.py).
set -eu
SMOKE=${SMOKE:-}
# sizes: callgrind calls, timed runs and their calls, seconds of an SM-accuracy run, of a sharing run, of a burst run
if [ -n "$SMOKE" ]; then
    CG_CALLS=200 NS_RUNS=1 LAUNCHES=20000 ALLOCS=2000 SM_SECS=0.2 SECS=0.3 BURST_SECS=0.3
    export BURST_TRIES=2
    echo "SMOKE=1: every line once, from tiny runs; the figures below mean nothing"
else
    CG_CALLS=20000 NS_RUNS=3 LAUNCHES=5000000 ALLOCS=300000 SM_SECS=1 SECS=4 BURST_SECS=4
fi
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
    local n=$CG_CALLS a b
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
for i in $(seq 1 "$NS_RUNS"); do
    echo "run $i: cuLaunchKernel direct $(ns "" launch $LAUNCHES) ns, hooked $(ns "$B/libtessera.so" launch $LAUNCHES) ns;" \
        "alloc+free direct $(ns "" alloc $ALLOCS) ns, hooked $(ns "$B/libtessera.so" alloc $ALLOCS) ns"
done

echo "SM limiter accuracy (fake driver, $SM_SECS s per run, 20 ms window; target within 5 points)"
export TESSERA_SM_WINDOW_US=20000 FAKE_CTX_BYTES=0
GPU0=GPU-7e55e7a0-1234-4567-89ab-cdef00000000
S=$B/tests/tshare
misses=0
share_of() { grep -o 'share=[0-9.]*' "$1" | head -1 | cut -d= -f2; }
gpu_of() { grep -o 'gpu=[0-9.]*' "$1" | head -1 | cut -d= -f2; }
# share_run NAME CORES KIND: one measured run in a claim (and on a simulated GPU) of its own
share_run() {
    mkdir -p "$WORK/$1"
    printf 'version 1\ngpu %s memory 0 cores %s\n' "$GPU0" "$2" >"$WORK/$1/limits"
    FAKE_GPU_STATE=$WORK/gpu.$1 TESSERA_CLAIM_DIRS=$WORK/$1 LD_PRELOAD=$B/libtessera.so "$S" sm -1 "$SM_SECS" "$3" >"$WORK/$1.out"
    share_of "$WORK/$1.out"
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
got=$(FAKE_GPU_STATE=$WORK/gpu.base env -u LD_PRELOAD "$S" sm -1 "$SM_SECS" kernel | grep -o 'share=[0-9.]*' | cut -d= -f2)
echo "  without the library (what this machine allows): busy $got %"
echo "SM accuracy: $misses of 6 outside 5 points"

# GPU sharing: several claims on ONE simulated GPU that time-slices like the real H100 (2.09 ms slices),
# each running the H100 figure's workload (a 4096² fp32 matmul is a 2.65 ms kernel), 4 s per run, the
# plugin's default 50 ms window and frame.
export TESSERA_SM_WINDOW_US=50000
KUS=2650
# together NAME CMD...: runs the commands at once on one simulated GPU; leaves $WORK/NAME.<i>.out
together() {
    local name=$1 i=0
    shift
    rm -f "$WORK/gpu.$name"
    for cmd in "$@"; do
        i=$((i + 1))
        FAKE_GPU_STATE=$WORK/gpu.$name bash -c "$cmd" >"$WORK/$name.$i.out" 2>&1 &
    done
    wait
}
shares() { local name=$1 n=$2 out="" i; for i in $(seq 1 "$n"); do out="$out$(share_of "$WORK/$name.$i.out") % / "; done; echo "${out% / }"; }
gpu_busy() { gpu_of "$WORK/$1.1.out"; }
# tdclaims NAME CORES...: commands for claims with these shares, each in its part of the frame (the schedule
# the node daemon writes in the GPU's view)
tdclaims() {
    local name=$1 i=0 cum=0 c
    shift
    local -a slots=() cmds=()
    for c in "$@"; do i=$((i + 1)); slots+=("$i:$((cum * 500)):$(((cum + c) * 500))"); cum=$((cum + c)); done
    "$B/tests/tview" "$WORK/view.$name" 50000 0 "${slots[@]}"
    i=0
    for c in "$@"; do
        i=$((i + 1))
        mkdir -p "$WORK/$name.c$i"
        printf 'version 1\ngpu %s cores %s slot %s view %s\n' "$GPU0" "$c" "$i" "$WORK/view.$name" >"$WORK/$name.c$i/limits"
        cmds+=("TESSERA_CLAIM_DIRS=$WORK/$name.c$i LD_PRELOAD=$B/libtessera.so $S sm -1 $SECS ${KIND:-kernel} $KUS")
    done
    together "$name" "${cmds[@]}"
}
ok_shares() { # NAME CORES...: every share within 5 points; shares summing to 100 keep the GPU >= 90 % busy
    local name=$1 i=0 c sum=0 bad=0
    shift
    for c in "$@"; do
        i=$((i + 1)); sum=$((sum + c))
        [ "$(verdict "$(share_of "$WORK/$name.$i.out")" "$c")" = ok ] || bad=1
    done
    [ "$sum" -eq 100 ] && ! awk -v g="$(gpu_busy "$name")" 'BEGIN { exit !(g >= 90) }' && bad=1
    [ $bad = 0 ] && echo ok || echo MISS
}
echo "GPU sharing on one simulated H100 (time-sliced; $SECS s runs, 2.65 ms kernels; target: each share within 5 points, shares summing to 100 keep the GPU >= 90 % busy)"
sharing_misses=0
for spec in "30 70" "50 50" "20 30 50"; do
    name=td_${spec// /_}
    tdclaims "$name" $spec
    v=$(ok_shares "$name" $spec); [ "$v" = ok ] || sharing_misses=$((sharing_misses + 1))
    echo "contention ${spec// /:} -> $(shares "$name" $(echo $spec | wc -w))   (GPU busy $(gpu_busy "$name") %, $v)"
done
KIND=graph tdclaims td_graph 50
v=$(verdict "$(share_of "$WORK/td_graph.1.out")" 50); [ "$v" = ok ] || sharing_misses=$((sharing_misses + 1))
echo "graph replay cores 50 -> $(shares td_graph 1)   ($v)"
echo "GPU sharing: $sharing_misses of 4 outside the targets"
echo "Guarantee and ceiling (burst) on the same GPU: the node daemon's arbiter, claims of 30 % (ceiling 100 or 50) and 70 %"
PY=${PYTHON:-python3}
source tests/burst.sh
burst_lines
echo "burst: $burst_fails of 5 outside the targets"
echo "Calibration: the same GPU reproduces the real H100 (shared/facts/real-gpu-h100.md) under the previous limiter"
echo "(a token bucket charged each kernel's event-to-event time, reproduced without the library by tshare legacy):"
together cal_none "$S sm -1 $SECS kernel $KUS" "$S sm -1 $SECS kernel $KUS"
echo "  two processes, no library -> $(shares cal_none 2)   (H100: 48.3 % / 47.3 %)"
together cal_3070 "$S legacy 30 $SECS $KUS 50" "$S legacy 70 $SECS $KUS 50"
echo "  previous limiter, contention 30:70 -> $(shares cal_3070 2)   (H100: 16.6 % / 57.8 %)"
together cal_5050 "$S legacy 50 $SECS $KUS 50" "$S legacy 50 $SECS $KUS 50"
echo "  previous limiter, contention 50:50 -> $(shares cal_5050 2)   (H100: 33.7 % / 33.8 %)"
together cal_2020 "$S legacy 20 $SECS $KUS 50" "$S legacy 20 $SECS $KUS 50"
echo "  previous limiter, contention 20:20 -> $(shares cal_2020 2)   (H100: 19.8 % / 19.9 %)"
echo "Without a schedule (HAMi variables only, no node daemon), the token bucket with solo-time estimates:"
for spec in "30 70"; do
    i=0; cmds=()
    for c in $spec; do
        i=$((i + 1)); mkdir -p "$WORK/bk.c$i"; printf 'version 1\ngpu %s cores %s\n' "$GPU0" "$c" >"$WORK/bk.c$i/limits"
        cmds+=("TESSERA_CLAIM_DIRS=$WORK/bk.c$i LD_PRELOAD=$B/libtessera.so $S sm -1 $SECS kernel $KUS")
    done
    together bk "${cmds[@]}"
    echo "  bucket contention 30:70, 2.65 ms kernels -> $(shares bk 2)"
    rm -f "$WORK"/bk.c*/region
    together bk5 "${cmds[@]//$KUS/500}"
    echo "  bucket contention 30:70, 0.5 ms kernels -> $(shares bk5 2)"
done
echo "MPS calibration (fake nvidia-cuda-mps-control; clients run concurrently at rates calibrated on the H100's"
echo "4096² matmul, shared/facts/real-gpu-h100.md; target: each share within 5 points of the H100's):"
export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps/pipe CUDA_MPS_LOG_DIRECTORY=$WORK/mps/log
trap 'echo quit | "$B/fake/nvidia-cuda-mps-control" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
"$B/fake/nvidia-cuda-mps-control" -d
mps_misses=0
for p in 30 50 100; do
    together "mps_solo_$p" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$p $S sm -1 $SECS kernel $KUS"
    h100=$(case $p in 30) echo 24.8;; 50) echo 42.4;; *) echo 100.8;; esac)
    v=$(verdict "$(share_of "$WORK/mps_solo_$p.1.out")" "$h100"); [ "$v" = ok ] || mps_misses=$((mps_misses + 1))
    echo "  one client at $p % -> $(shares "mps_solo_$p" 1)   (H100: $h100 %, $v)"
done
for spec in "30 70 22.6 54.0" "50 50 38.4 38.4" "100 100 55.6 55.9"; do
    set -- $spec
    together "mps_$1_$2" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$1 $S sm -1 $SECS kernel $KUS" \
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$2 $S sm -1 $SECS kernel $KUS"
    v=ok
    [ "$(verdict "$(share_of "$WORK/mps_$1_$2.1.out")" "$3")" = ok ] || v=MISS
    [ "$(verdict "$(share_of "$WORK/mps_$1_$2.2.out")" "$4")" = ok ] || v=MISS
    [ "$v" = ok ] || mps_misses=$((mps_misses + 1))
    echo "  clients $1:$2 -> $(shares "mps_$1_$2" 2)   (GPU busy $(gpu_busy "mps_$1_$2") %; H100: $3 % / $4 %, $v)"
done
echo "MPS calibration: $mps_misses of 6 outside the targets"
echo "  an MPS client beside a process without MPS (time-sliced) -> $(together mps_mixed "$S sm -1 $SECS kernel $KUS" \
    "CUDA_MPS_PIPE_DIRECTORY=$WORK/none $S sm -1 $SECS kernel $KUS"; shares mps_mixed 2)"
