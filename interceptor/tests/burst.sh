# Guarantee and ceiling on one simulated H100 (docs/gpu-sharing.md): claims of 30 % (ceiling 100 or 50) and
# 70 %, arbitrated by the node daemon's own burst arbiter (kubelet_plugin/host_parts/vgpu/arbiter.py, run alone),
# 2.65 ms kernels. Sourced by bench/bench.sh and tests/run.sh; needs B, WORK, GPU0, BURST_SECS (seconds, a
# fraction too) and PY (a python that imports the repository). Prints the burst lines, each ending in ok or
# FAIL, and counts the FAILs in burst_fails; tests/run.sh measures a missed line again alone.
burst_fails=0
BURST_KUS=2650
BURST_TRIES=${BURST_TRIES:-10} # a small claim's first kernels: the median of this many (and of one less)
burst_plus() { awk -v s="$BURST_SECS" -v n="$1" 'BEGIN { print s + n }'; } # BURST_SECS + N seconds
BURST_ROOT=$(cd "$B/../.." && pwd)

# burst_claim NAME SLOT CORES CEILING: a claim directory whose limits file puts it in slot SLOT of the view
burst_claim() {
    local d=$WORK/$1.c$2 view=$WORK/$1.view
    mkdir -p "$d"
    rm -f "$d/region"
    if [ "$4" -gt "$3" ]; then
        printf 'version 2\ngpu %s cores %s ceiling %s slot %s view %s\n' "$GPU0" "$3" "$4" "$2" "$view"
    else
        printf 'version 1\ngpu %s cores %s slot %s view %s\n' "$GPU0" "$3" "$2" "$view"
    fi >"$d/limits"
    echo "$d"
}

# burst_start NAME SECONDS CEILING: the two claims (30 % with that ceiling, 70 %) and the arbiter watching
# them, already past the time it watches a GPU before it calls a claim idle; sets BURST_ARB (its pid)
burst_start() {
    local name=$1 secs=$2 ceiling=$3 i
    rm -f "$WORK/$name.view" "$WORK/gpu.$name"
    burst_claim "$name" 1 30 "$ceiling" >/dev/null
    burst_claim "$name" 2 70 0 >/dev/null
    (cd "$BURST_ROOT" && exec "$PY" -m kubelet_plugin.host_parts.vgpu.arbiter --view "$WORK/$name.view" --gpu "$GPU0" \
        --claim "1:30:$ceiling:$WORK/$name.c1" --claim "2:70:0:$WORK/$name.c2" --seconds "$secs") \
        >"$WORK/$name.arbiter" 2>&1 &
    BURST_ARB=$!
    for i in $(seq 1 100); do [ -s "$WORK/$name.view" ] && break; sleep 0.1; done
    sleep 0.3
}

# burst_run NAME SLOT ARGS...: tshare ARGS in claim SLOT of NAME's GPU (background; output in NAME.SLOT.out)
BURST_PIDS=()
burst_run() {
    local name=$1 slot=$2
    shift 2
    FAKE_GPU_STATE=$WORK/gpu.$name TESSERA_CLAIM_DIRS=$WORK/$name.c$slot LD_PRELOAD=$B/libtessera.so \
        "$B/tests/tshare" "$@" >"$WORK/$name.$slot.out" 2>&1 &
    BURST_PIDS+=($!)
}

# burst_stop: waits for the claims' programs, then stops the arbiter (by its pid)
burst_stop() {
    local p
    for p in "${BURST_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    BURST_PIDS=()
    kill "$BURST_ARB" 2>/dev/null || true
    wait "$BURST_ARB" 2>/dev/null || true # (killed: not an error under set -e)
}
burst_value() { grep -o "$2=[-0-9.]*" "$WORK/$1" | head -1 | cut -d= -f2; }
# burst_check VALUE LOW HIGH: ok or FAIL
burst_check() {
    if awk -v v="${1:-x}" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v ~ /^-?[0-9.]+$/ && v >= lo && v <= hi) }'; then
        echo ok
    else
        echo FAIL
    fi
}
# burst_say VERDICT LINE: prints the line, counts a FAIL
burst_say() {
    [ "$1" = ok ] || burst_fails=$((burst_fails + 1))
    echo "$2"
}

# One function a line; each says its line and counts a FAIL. BURST_ROWS: the lines with a target, in order.
burst_idle100() {
    local s v
    # the 30 % claim alone with work, ceiling 100: it takes the idle 70 %
    burst_start bi100 $(burst_plus 3) 100
    burst_run bi100 1 sm -1 "$BURST_SECS" kernel $BURST_KUS
    burst_stop
    s=$(burst_value bi100.1.out share)
    v=$(burst_check "$s" 90 100)
    burst_say $v "burst 30(limit 100):70 idle -> $s %   (target >= 90, $v)"
}
burst_busy() {
    local a b v
    # both with work: each its guarantee
    burst_start bb $(burst_plus 3) 100
    burst_run bb 1 sm -1 "$BURST_SECS" kernel $BURST_KUS
    burst_run bb 2 sm -1 "$BURST_SECS" kernel $BURST_KUS
    burst_stop
    a=$(burst_value bb.1.out share)
    b=$(burst_value bb.2.out share)
    v=ok
    [ "$(burst_check "$a" 25 35)" = ok ] && [ "$(burst_check "$b" 65 75)" = ok ] || v=FAIL
    burst_say $v "burst 30(limit 100):70 busy -> $a % / $b %   (target 30 ± 5 / 70 ± 5, $v)"
}
burst_idle50() {
    local s v
    # ceiling 50: it takes the idle time up to its ceiling
    burst_start bi50 $(burst_plus 3) 50
    burst_run bi50 1 sm -1 "$BURST_SECS" kernel $BURST_KUS
    burst_stop
    s=$(burst_value bi50.1.out share)
    v=$(burst_check "$s" 45 55)
    burst_say $v "burst 30(limit 50):70 idle -> $s %   (target 50 ± 5, $v)"
}
burst_wake() {
    local s v
    # the 70 % claim wakes beside the bursting 30 % claim: how long until it has its share of a frame back
    burst_start bw $(burst_plus 5) 100
    burst_run bw 1 sm -1 "$(burst_plus 1)" kernel $BURST_KUS
    burst_run bw 2 wake 1 "$BURST_SECS" $BURST_KUS 70
    burst_stop
    s=$(burst_value bw.2.out wake_ms)
    v=$(burst_check "$s" 0 100)
    burst_say $v "burst wake -> $s ms   (target <= 100, $v)"
}
burst_first_idle() {
    local s v
    # a small claim's first kernel, beside an idle and beside a busy 70 % claim (0.2 ms kernels)
    burst_start bf 6 100
    burst_run bf 1 first 200 "$BURST_TRIES"
    burst_stop
    s=$(burst_value bf.1.out first_ms)
    v=$(burst_check "$s" 0 5)
    burst_say $v "burst first-kernel idle-gpu -> $s ms   (target <= 5, $v; median of $BURST_TRIES, worst $(burst_value bf.1.out worst_ms) ms)"
}
burst_first_busy() {
    burst_start bfb $(burst_plus 3) 100
    burst_run bfb 2 sm -1 "$BURST_SECS" kernel $BURST_KUS
    sleep 0.5
    burst_run bfb 1 first 200 "$((BURST_TRIES - 1))"
    burst_stop
    echo "burst first-kernel busy-gpu -> $(burst_value bfb.1.out first_ms) ms   (measured, no target: the GPU time-slices the two; worst $(burst_value bfb.1.out worst_ms) ms)"
}
BURST_ROWS=(burst_idle100 burst_busy burst_idle50 burst_wake burst_first_idle)

# every line once (make bench)
burst_lines() {
    local row
    for row in "${BURST_ROWS[@]}"; do "$row"; done
    burst_first_busy
}
