#!/usr/bin/env bash
# Runs every libtessera test against the fake drivers (build/fake) and ends
# with "N passed, M failed". Part of the run uses the ASan+UBSan build.
set -u
cd "$(dirname "$0")/.."
B=$PWD/build
T=$B/tests/tcuda
S=$B/tests/tshare
V=$B/tests/tview
LIB=$B/libtessera.so
SAN="$(${CC:-cc} -print-file-name=libasan.so) $B/libtessera-san.so"
export LD_LIBRARY_PATH=$B/fake
export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TESSERA_SM_WINDOW_US=20000
# SM shares are checked against what a busy machine cannot break (see tcuda.c); `make bench` checks ±5 points.
export TESSERA_SM_CHECK=ceiling
# contexts cost no device memory except in the context tests, so other tests can count exactly
export FAKE_CTX_BYTES=0
unset FAKE_NVML_FAIL TESSERA_CONTEXT_BYTES CUDA_VISIBLE_DEVICES CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
unset TESSERA_CLAIM_DIRS $(compgen -e | grep "^TESSERA_CLAIM_DIR_" || true) CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT CUDA_DEVICE_MEMORY_SHARED_CACHE \
      GPU_CORE_UTILIZATION_POLICY CUDA_TASK_PRIORITY LIBCUDA_LOG_LEVEL
WORK=$(mktemp -d)
# one simulated GPU for this run (jobs that measure SM time get one of their own, see bg)
export FAKE_GPU_STATE=$WORK/gpu.default
# no process is an MPS client unless a test makes it one (a daemon on the machine's default pipe directory
# would make every process its client)
export CUDA_MPS_PIPE_DIRECTORY=$WORK/no-mps CUDA_MPS_LOG_DIRECTORY=$WORK/no-mps-log
# the fake MPS control daemons this run starts are stopped by their pid
stop_mps_daemons() {
    local f p
    for f in "$WORK"/mps.*/pipe/nvidia-cuda-mps-control.pid; do
        p=$(cat "$f" 2>/dev/null) || continue
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = nvidia-cuda-mps ] && kill -KILL "$p" 2>/dev/null
    done
    return 0
}
trap 'stop_mps_daemons; rm -rf "$WORK"' EXIT
GPU0=GPU-7e55e7a0-1234-4567-89ab-cdef00000000
GPU1=GPU-7e55e7a0-1234-4567-89ab-cdef00000001
GiB=1073741824
pass=0
fail=0

# claim NAME LINE... : a claim directory whose limits file holds "version 1" and the lines
claim() {
    local d=$WORK/$1
    shift
    mkdir -p "$d"
    printf '%s\n' "version 1" "$@" >"$d/limits"
    echo "$d"
}

ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 25 | sed 's/^/    /'; }

# t NAME CMD... : passes when CMD exits 0
t() {
    local name=$1 out
    shift
    if out=$(timeout 120 "$@" 2>&1); then ok "$name"; else bad "$name" "$out"; fi
}

# tlog NAME PATTERN CMD... : passes when CMD exits 0 and its output contains PATTERN
tlog() {
    local name=$1 pat=$2 out
    shift 2
    if out=$(timeout 120 "$@" 2>&1) && grep -qF -- "$pat" <<<"$out"; then ok "$name"; else bad "$name" "$out
(expected a line containing: $pat)"; fi
}

# bg NAME CMD... / collect: run SM tests side by side (they mostly sleep). A share is wall-clock time, so a
# measurement that misses is taken again alone, at most twice (a VM's stolen CPU or a neighbour's burst shows
# up as idle GPU time); every attempt's share is printed, and the bound itself never changes.
declare -a BG_NAMES=() BG_PIDS=() BG_CMDS=()
# quiet: waits (at most ~30 s) until the fake GPU, driven without the library, is kept busy >= 97 % of the
# time, i.e. until this machine gives a process its CPU again; a retry measured sooner would measure the VM.
quiet() {
    local k base
    for k in $(seq 1 30); do
        base=$(env -u LD_PRELOAD FAKE_GPU_STATE="$WORK/gpu.quiet" "$S" sm -1 0.3 kernel 2>/dev/null | grep -o 'share=[0-9.]*' | cut -d= -f2)
        awk -v b="${base:-0}" 'BEGIN { exit !(b >= 97) }' && return 0
        sleep 1
    done
    echo "    (the machine stayed busy: last unlimited baseline share=${base:-none})"
}
bg() {
    local name=$1
    shift
    FAKE_GPU_STATE=$WORK/gpu.$name timeout 60 "$@" >"$WORK/bg.$name" 2>&1 &
    BG_NAMES+=("$name")
    BG_PIDS+=($!)
    BG_CMDS+=("$(printf '%q ' "$@")")
}
collect() {
    local i n attempt tried
    for i in "${!BG_PIDS[@]}"; do
        n=${BG_NAMES[$i]}
        if wait "${BG_PIDS[$i]}"; then
            ok "$n ($(grep -o 'share=[0-9.]*' "$WORK/bg.$n"))"
            continue
        fi
        tried="$(grep -o 'share=[0-9.]*' "$WORK/bg.$n")"
        for attempt in 2 3; do
            quiet
            if eval "FAKE_GPU_STATE=$WORK/gpu.$n timeout 60 ${BG_CMDS[$i]}" >"$WORK/bg.$n" 2>&1; then break; fi
            tried="$tried, $(grep -o 'share=[0-9.]*' "$WORK/bg.$n")"
            attempt=fail
        done
        if [ "$attempt" != fail ]; then
            ok "$n ($(grep -o 'share=[0-9.]*' "$WORK/bg.$n"); attempt $attempt after $tried)"
        else
            bad "$n" "attempts: $tried
$(cat "$WORK/bg.$n")"
        fi
    done
    BG_NAMES=()
    BG_PIDS=()
    BG_CMDS=()
}
share_of() { grep -o 'share=[0-9.]*' "$WORK/bg.$1" | cut -d= -f2; }

# group NAME MAXES CMD...: runs the commands (each one string) at once on one simulated GPU; the share each
# prints must stay at or below its maximum (MAXES: one number for all, or one per command, comma-separated).
# Retried like the SM jobs.
group() {
    local name=$1 maxes=$2 attempt i shares
    shift 2
    for attempt in 1 2 3; do
        [ "$attempt" = 1 ] || quiet
        rm -f "$WORK/gpu.$name"
        local -a pids=()
        i=0
        for cmd in "$@"; do
            i=$((i + 1))
            FAKE_GPU_STATE=$WORK/gpu.$name timeout 60 bash -c "$cmd" >"$WORK/grp.$name.$i" 2>&1 &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p"; done
        shares=$(for j in $(seq 1 $i); do grep -o 'share=[0-9.]*' "$WORK/grp.$name.$j" | head -1 | cut -d= -f2; done | tr '\n' ' ')
        if awk -v s="$shares" -v m="$maxes" 'BEGIN { n = split(s, a, " "); k = split(m, b, ","); if (n < 2) exit 1
                for (i = 1; i <= n; i++) if (a[i] > b[k == 1 ? 1 : i]) exit 1 }'; then
            ok "$name (shares $shares; at most $maxes)"
            return
        fi
    done
    bad "$name" "shares: $shares (each must be at most $maxes)
$(cat "$WORK"/grp."$name".* 2>/dev/null)"
}

# contention NAME CORES... [graph]: claims with these shares on one simulated GPU, each with its part of a
# 50 ms frame in a view like the one the node daemon writes; each gets no more than its share + 5 and not
# less than half of it.
contention() {
    local name=$1 kind=kernel c i=0 cum=0 attempt
    shift
    local -a cores=() slots=() dirs=()
    for c in "$@"; do [ "$c" = graph ] && kind=graph || cores+=("$c"); done
    for c in "${cores[@]}"; do
        i=$((i + 1)); slots+=("$i:$((cum * 500)):$(((cum + c) * 500))"); cum=$((cum + c))
    done
    "$V" "$WORK/view.$name" 50000 0 "${slots[@]}"
    for attempt in 1 2 3; do
        [ "$attempt" = 1 ] || quiet
        rm -f "$WORK/gpu.$name"
        local -a pids=()
        i=0
        for c in "${cores[@]}"; do
            i=$((i + 1))
            dirs[$i]=$(claim "$name.$i" "gpu $GPU0 cores $c slot $i view $WORK/view.$name")
            env TESSERA_CLAIM_DIRS="${dirs[$i]}" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.$name" \
                timeout 60 "$S" sm "$c" 1 "$kind" >"$WORK/ct.$name.$i" 2>&1 &
            pids+=($!)
        done
        local failed=0
        for p in "${pids[@]}"; do wait "$p" || failed=1; done
        [ $failed = 0 ] && break
    done
    local shares
    shares=$(cat "$WORK"/ct."$name".* | grep -o 'share=[0-9.]*' | cut -d= -f2 | tr '\n' ' ')
    if [ $failed = 0 ]; then ok "$name (shares $shares)"; else bad "$name" "$(cat "$WORK"/ct."$name".*)"; fi
}

# bucketpair NAME A B: two claims on one GPU without a schedule (short kernels), each within its ceiling.
bucketpair() {
    local name=$1 a=$2 b=$3 attempt failed
    local ca cb
    ca=$(claim "$name.a" "gpu $GPU0 cores $a")
    cb=$(claim "$name.b" "gpu $GPU0 cores $b")
    for attempt in 1 2 3; do
        [ "$attempt" = 1 ] || quiet
        rm -f "$WORK/gpu.$name" "$ca/region" "$cb/region"
        env TESSERA_CLAIM_DIRS="$ca" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.$name" timeout 60 "$S" sm "$a" 1 kernel >"$WORK/bp.$name.a" 2>&1 &
        local pa=$!
        env TESSERA_CLAIM_DIRS="$cb" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.$name" timeout 60 "$S" sm "$b" 1 kernel >"$WORK/bp.$name.b" 2>&1
        local rb=$?
        wait $pa && [ $rb = 0 ] && failed=0 && break
        failed=1
    done
    if [ "$failed" = 0 ]; then ok "$name ($(cat "$WORK"/bp."$name".* | grep -o 'share=[0-9.]*' | tr '\n' ' '))"; else bad "$name" "$(cat "$WORK"/bp."$name".*)"; fi
}

P() { env LD_PRELOAD="$LIB" "$@"; }
S() { env LD_PRELOAD="$SAN" "$@"; }

# exported_hooks LIB: diff of what LIB exports against the hooks listed in src/hooks.h plus dlsym (empty = same)
exported_hooks() {
    diff <( (sed -n '/^#define CUDA_HOOKS/,/^#define CUDA_USED/p; /^#define NVML_HOOKS/,/^#define NVML_USED/p' src/hooks.h |
                 grep -v USED | grep -o 'X([A-Za-z0-9_]*)' | sed 's/^X(//; s/)$//'
             echo dlsym) | sort) \
         <(nm -D --defined-only "$1" | awk '{ print $NF }' | sort)
}

echo "== exports: the hooks and dlsym, nothing else"
for lib in "$LIB" "$B/libtessera-san.so"; do
    if out=$(exported_hooks "$lib" 2>&1); then ok "exports_are_the_hooks_$(basename "$lib" .so)"; else bad "exports_are_the_hooks_$(basename "$lib" .so)" "$out"; fi
done

echo "== layout and memory accounting"
t layout_static "$B/tests/tlayout"
C=$(claim lim "gpu $GPU0 memory 1g cores 0 priority 0")
t limit_exact_and_views env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" limit $GiB
t layout_region_file_written_by_library "$B/tests/tlayout" "$C/region"
C=$(claim paths "gpu $GPU0 memory $GiB")
t every_allocation_path env FAKE_PITCH=1024 TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" paths $GiB
C=$(claim procaddr "gpu $GPU0 memory $GiB")
t dlsym_and_cuGetProcAddress_paths env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" procaddr $GiB
C=$(claim ipc "gpu $GPU0 memory $GiB")
t ipc_import_not_double_counted env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" ipc $GiB
C=$(claim fork "gpu $GPU0 memory $GiB")
t forked_child_gets_own_slot env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" fork $GiB
C=$(claim nvml "gpu $GPU0 memory $GiB")
t nvml_memory_and_process_view env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" nvml $GiB 0
C=$(claim uuid "gpu $GPU1 memory 512m")
t limit_follows_uuid_not_ordinal_0 env FAKE_GPU_REVERSE=1 TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" device 0 536870912
t limit_follows_uuid_not_ordinal_1 env FAKE_GPU_REVERSE=1 TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" device 1 85899345920
C1=$(claim two_a "gpu $GPU0 memory 1g")
C2=$(claim two_b "gpu $GPU1 memory 2g")
t two_claims_one_container_gpu0 env TESSERA_CLAIM_DIRS="$C1:$C2" LD_PRELOAD="$LIB" "$T" device 0 $GiB
t two_claims_one_container_gpu1 env TESSERA_CLAIM_DIRS="$C1:$C2" LD_PRELOAD="$LIB" "$T" device 1 $((2 * GiB))
# What the plugin's CDI edits produce: one variable per claim (the list form holds only the last claim).
t per_claim_variables_gpu0 env TESSERA_CLAIM_DIRS="$C2" TESSERA_CLAIM_DIR_two_a="$C1" TESSERA_CLAIM_DIR_two_b="$C2" LD_PRELOAD="$LIB" "$T" device 0 $GiB
t per_claim_variables_gpu1 env TESSERA_CLAIM_DIRS="$C2" TESSERA_CLAIM_DIR_two_a="$C1" TESSERA_CLAIM_DIR_two_b="$C2" LD_PRELOAD="$LIB" "$T" device 1 $((2 * GiB))
t hami_env_fallback_all env CUDA_DEVICE_MEMORY_LIMIT=512m CUDA_DEVICE_MEMORY_LIMIT_1=256m LD_PRELOAD="$LIB" "$T" device 0 536870912
t hami_env_fallback_indexed env CUDA_DEVICE_MEMORY_LIMIT=512m CUDA_DEVICE_MEMORY_LIMIT_1=256m LD_PRELOAD="$LIB" "$T" device 1 268435456
mkdir -p "$WORK/hami"
t hami_shared_cache_across_processes env CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/hami/region" LD_PRELOAD="$LIB" "$T" kill $GiB
CTXB=$((300 * 1048576))
C=$(claim ctx "gpu $GPU0 memory $GiB")
t context_memory_charged_and_credited env FAKE_CTX_BYTES=$CTXB TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" ctx $GiB $CTXB "$C"
C=$(claim ctxdef_env "gpu $GPU0 memory $GiB")
t context_default_from_env_when_unmeasurable env FAKE_NVML_FAIL=1 TESSERA_CONTEXT_BYTES=100m FAKE_CTX_BYTES=$CTXB TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" ctxdefault 104857600 $CTXB "$C"
C=$(claim ctxdef_file "gpu $GPU0 memory $GiB context 64m")
t context_default_from_limits_file env FAKE_NVML_FAIL=1 TESSERA_CONTEXT_BYTES=100m FAKE_CTX_BYTES=$CTXB TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" ctxdefault 67108864 $CTXB "$C"
C=$(claim ctxdef_none "gpu $GPU0 memory $GiB")
t context_default_is_zero env FAKE_NVML_FAIL=1 FAKE_CTX_BYTES=$CTXB TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" ctxdefault 0 $CTXB "$C"
C=$(claim legacy "gpu $GPU0 memory $GiB")
t legacy_v1_entry_points env FAKE_PITCH=1024 TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" legacy $GiB
t unconfigured_is_pass_through env LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))

echo "== bad input: a clear log line, then no limit"
tlog garbage_env_memory "ignoring CUDA_DEVICE_MEMORY_LIMIT='banana'" env CUDA_DEVICE_MEMORY_LIMIT=banana CUDA_DEVICE_SM_LIMIT=999 LIBCUDA_LOG_LEVEL=loud TESSERA_CLAIM_DIRS=relative/dir LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
tlog garbage_env_sm "ignoring CUDA_DEVICE_SM_LIMIT='999'" env CUDA_DEVICE_SM_LIMIT=999 LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
tlog garbage_env_claim_dirs "ignoring an entry of TESSERA_CLAIM_DIRS" env TESSERA_CLAIM_DIRS=relative/dir LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
C=$(claim badsize "gpu $GPU0 memory lots")
tlog corrupt_limits_value "limits:2: memory 'lots' is not a byte count" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
mkdir -p "$WORK/badver" && printf 'version 7\ngpu %s memory 1g\n' "$GPU0" >"$WORK/badver/limits"
tlog corrupt_limits_version "expected 'version 1'" env TESSERA_CLAIM_DIRS="$WORK/badver" LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
C=$(claim badkey "gpu $GPU0 memory 1g colour blue")
tlog corrupt_limits_key "unknown key 'colour'" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
tlog garbage_env_context_bytes "ignoring TESSERA_CONTEXT_BYTES='lots'" env TESSERA_CONTEXT_BYTES=lots LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
C=$(claim badctx "gpu $GPU0 memory 1g context huge")
tlog corrupt_limits_context "limits:2: context 'huge' is not a byte count" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))
tlog missing_claim_dir "cannot open" env TESSERA_CLAIM_DIRS=/nonexistent/claim LD_PRELOAD="$LIB" "$T" unlimited $((10 * GiB))

echo "== a hostile claim directory: the library never crashes or hangs, and fails closed (never N x the limit)"
C=$(claim region_garbage "gpu $GPU0 memory 1g")
head -c 4096 /dev/urandom >"$C/region"
tlog corrupt_region_size_fails_closed "wrong size" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" closed $GiB
C=$(claim region_magic "gpu $GPU0 memory 1g")
head -c 150640 /dev/urandom >"$C/region"
tlog corrupt_region_magic_fails_closed "bad magic" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" closed $GiB
C=$(claim region_link "gpu $GPU0 memory 1g")
ln -s "$WORK/elsewhere.region" "$C/region"
tlog symlinked_region_fails_closed "symbolic link" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" closed $GiB
[ ! -e "$WORK/elsewhere.region" ] && ok symlinked_region_target_not_created || bad symlinked_region_target_not_created
C=$(claim region_dir "gpu $GPU0 memory 1g")
mkdir "$C/region"
tlog region_is_a_directory "not a regular file" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" closed $GiB
C=$(claim region_truncated "gpu $GPU0 memory 1g")
out=$(timeout 60 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" truncate $GiB "$C" 2>&1)
if [ $? = 0 ] && [ "$(grep -c "failing closed" <<<"$out")" = 1 ]; then ok "region_truncated_while_running (one log line)"; else bad region_truncated_while_running "$out"; fi
# grab4 NAME DAMAGE: four processes of a 1 GiB claim take what they can; the region is damaged before they start
# (garbage) or once they filled the claim (truncated); what they hold together never passes the limit
# (falling back to a limit per process, they held 4 GiB).
grab4() {
    local name=$1 damage=$2 i total=0 h
    local c
    c=$(claim "$name" "gpu $GPU0 memory 1g")
    [ "$damage" = garbage ] && head -c 150640 /dev/urandom >"$c/region"
    rm -f "$WORK/grab.$name".*
    local -a pids=()
    for i in 1 2 3 4; do
        env TESSERA_CLAIM_DIRS="$c" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.$name" timeout 60 "$T" grab $GiB 3 >"$WORK/grab.$name.$i" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 1 100); do [ "$(cat "$WORK/grab.$name".* | grep -c '^ready')" = 4 ] && break; sleep 0.1; done
    [ "$damage" = truncated ] && truncate -s 0 "$c/region"
    for p in "${pids[@]}"; do wait "$p"; done
    for i in 1 2 3 4; do
        h=$(grep -o 'held=[0-9]*' "$WORK/grab.$name.$i" | cut -d= -f2)
        total=$((total + ${h:-999999999999}))
    done
    if [ "$total" -le $GiB ] && [ "$(cat "$WORK/grab.$name".* | grep -c 'failing closed')" = 4 ]; then
        ok "$name (4 processes hold $total bytes of a $GiB-byte claim)"
    else
        bad "$name" "4 processes hold $total bytes of a $GiB-byte claim
$(cat "$WORK/grab.$name".*)"
    fi
}
grab4 corrupt_region_4_procs_hold_at_most_the_limit garbage
grab4 truncated_region_4_procs_hold_at_most_the_limit truncated
# two processes of a 30 % claim whose region is garbage: no shared bucket any more, yet together they keep to
# the claim's share (each in the first 30 % of every frame), where a bucket each gave them 30 % each
C=$(claim region_sm "gpu $GPU0 cores 30")
head -c 150640 /dev/urandom >"$C/region"
for attempt in 1 2 3; do
    [ "$attempt" = 1 ] || quiet
    rm -f "$WORK/gpu.region_sm"
    env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.region_sm" timeout 60 "$S" sm -1 1 kernel >"$WORK/rsm.1" 2>&1 &
    p1=$!
    env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.region_sm" timeout 60 "$S" sm -1 1 kernel >"$WORK/rsm.2" 2>&1
    wait $p1
    shares=$(cat "$WORK"/rsm.* | grep -o 'share=[0-9.]*' | cut -d= -f2 | tr '\n' ' ')
    awk -v s="$shares" 'BEGIN { n = split(s, a, " "); if (n != 2) exit 1; t = a[1] + a[2]
        exit !(t <= 35 && a[1] >= 5 && a[2] >= 5) }' && break
done
if awk -v s="$shares" 'BEGIN { n = split(s, a, " "); exit !(n == 2 && a[1] + a[2] <= 35 && a[1] >= 5 && a[2] >= 5) }'; then
    ok "corrupt_region_2_procs_keep_the_claims_sm_share (shares $shares; together at most 35)"
else
    bad corrupt_region_2_procs_keep_the_claims_sm_share "shares: $shares (together at most 35)
$(cat "$WORK"/rsm.*)"
fi
C=$(claim region_locked "gpu $GPU0 memory 1g")
env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" hold 0 >/dev/null 2>&1 &
holder=$!
sleep 0.5
: >"$WORK/holdlock.out"
"$T" holdlock "$C/region" 30 >"$WORK/holdlock.out" 2>&1 &
locker=$!
for _ in $(seq 1 50); do grep -q ready "$WORK/holdlock.out" && break; sleep 0.1; done
tlog region_lock_held_forever_fails_closed "held too long" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" closed $GiB
kill $locker $holder 2>/dev/null; wait $locker $holder 2>/dev/null
C=$(claim limits_fifo "gpu $GPU0 memory 1g")
rm "$C/limits" && mkfifo "$C/limits"
tlog limits_fifo_no_hang_hami_fallback "not a regular file" env CUDA_DEVICE_MEMORY_LIMIT_0=512m TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" device 0 536870912
C=$(claim limits_long)
{ echo "version 1"; for i in $(seq 1 400); do echo "# a comment line of some length to push the gpu line past 16 KiB......"; done; echo "gpu $GPU0 memory 107374182400 cores 0"; } >"$C/limits"
sed -i 's/memory 107374182400/memory 1073741824/' "$C/limits"
t limits_file_past_16k_read_whole env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" limit $GiB
C=$(claim limits_huge)
{ echo "version 1"; head -c 70000 /dev/zero | tr '\0' '#'; echo; echo "gpu $GPU0 memory 1g"; } >"$C/limits"
tlog limits_file_over_64k_refused "larger than 65536 bytes" env CUDA_DEVICE_MEMORY_LIMIT_0=512m TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" device 0 536870912

echo "== many processes, dead processes"
C=$(claim stress "gpu $GPU0 memory $GiB")
t stress_4_procs_x_8_threads env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" stress $GiB 4 8 20000 "$C"
C=$(claim kill "gpu $GPU0 memory $GiB")
t sigkill_holder_and_mid_allocation env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" kill $GiB
t dlsym_rtld_next_still_works env LD_PRELOAD="$LIB" "$B/tests/tprobe"

echo "== stream capture (the fake follows the driver's rules; the limiter never breaks a capture)"
t capture_rules_of_the_fake_driver "$B/tests/tcapture" rules
C=$(claim cap50 "gpu $GPU0 cores 50")
t capture_and_replay_under_sm_limit_50 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$B/tests/tcapture" limited 1 50
C=$(claim cap_rt "gpu $GPU0 cores 50 priority 1")
t capture_with_priority_view env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$B/tests/tcapture" limited 0.3

echo "== device memory shared between processes (NCCL's cuMem* path, IPC handles) and host cuMemCreate"
CA=$(claim vmm_a "gpu $GPU0 memory 1g")
CB=$(claim vmm_b "gpu $GPU0 memory 1g")
t cumem_refs_mappings_import_and_host_memory env TESSERA_CLAIM_DIRS="$CA" LD_PRELOAD="$LIB" "$B/tests/tvmm" cumem $GiB "$CB"
CA=$(claim ipc_a "gpu $GPU0 memory 1g")
CB=$(claim ipc_b "gpu $GPU0 memory 1g")
t ipc_handles_across_claims env TESSERA_CLAIM_DIRS="$CA" LD_PRELOAD="$LIB" "$B/tests/tvmm" ipc $GiB "$CB"

source tests/oversub.sh

echo "== SM limiter, one claim per GPU (token bucket, simulated kernel time, 20 ms window)"
# Each job below has a simulated GPU of its own (bg gives each one its own FAKE_GPU_STATE). Runs that keep
# the GPU busy most of the time also keep a CPU busy launching; on 2 cores at most two share a group.
for s in 10 30 50 70 90; do
    C=$(claim "sm$s" "gpu $GPU0 memory 0 cores $s")
    bg "sm_share_$s" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm $s 1 kernel
    [ "$s" = 50 ] && collect
done
collect
C=$(claim sm_shared "gpu $GPU0 cores 40")
bg sm_shared_p1 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.shared40" "$S" sm -1 1 kernel
bg sm_shared_p2 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" FAKE_GPU_STATE="$WORK/gpu.shared40" "$S" sm -1 1 ex
collect
sum=$(awk -v a="$(share_of sm_shared_p1)" -v b="$(share_of sm_shared_p2)" 'BEGIN { print a + b }')
if awk -v s="$sum" 'BEGIN { exit !(s >= 20 && s <= 45) }'; then ok "sm_one_claim_two_processes_share_40 (sum $sum)"; else bad "sm_one_claim_two_processes_share_40" "sum $sum"; fi
C=$(claim sm_g "gpu $GPU0 cores 50")
bg sm_graph_launch_50 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 50 1 graph
C=$(claim sm_p "gpu $GPU0 cores 30")
bg sm_per_thread_stream_via_procaddr_30 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 30 1 ptsz
C=$(claim sm_x "gpu $GPU0 cores 60")
bg sm_launch_kernel_ex_60 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 60 1 ex
C=$(claim sm_none "gpu $GPU0 memory 1g cores 0")
collect
bg sm_no_limit_runs_free env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 100 1 kernel
C=$(claim sm_off "policy disable" "gpu $GPU0 cores 30")
bg sm_policy_disable env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 100 1 kernel
collect
bg sm_hami_env_sm_limit_20 env CUDA_DEVICE_SM_LIMIT=20 LD_PRELOAD="$LIB" "$S" sm 20 1 kernel
collect
# priority 0 (high) is not throttled under policy default, only under force; unset = 1 (normal)
C=$(claim sm_hi "gpu $GPU0 cores 30 priority 0")
bg sm_high_priority_not_throttled env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 100 1 kernel
bg sm_hami_task_priority_0 env CUDA_TASK_PRIORITY=0 CUDA_DEVICE_SM_LIMIT=20 LD_PRELOAD="$LIB" "$S" sm 100 1 kernel
collect
C=$(claim sm_hi_force "policy force" "gpu $GPU0 cores 30 priority 0")
bg sm_high_priority_force_30 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 30 1 kernel
C=$(claim sm_lo "gpu $GPU0 cores 30 priority 1")
bg sm_normal_priority_30 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" sm 30 1 kernel
bg sm_hami_task_priority_0_force env CUDA_TASK_PRIORITY=0 GPU_CORE_UTILIZATION_POLICY=force CUDA_DEVICE_SM_LIMIT=20 LD_PRELOAD="$LIB" "$S" sm 20 1 kernel
collect
C=$(claim ringexit "gpu $GPU0 cores 50")
t event_rings_freed_at_thread_exit env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" ringexit

echo "== a GPU shared by several claims (one simulated GPU, time-sliced like a real one)"
# The fake must reproduce what the real H100 did, or the checks below prove nothing: two processes without
# the library each get about half, and the previous limiter (charging waiting time) left a 30/70 pair far
# below its shares (H100: 16.6 / 57.8). A machine that steals CPU only lowers shares, so these are ceilings.
group fake_gpu_is_time_sliced_no_library 55 "$S sm -1 1 kernel 2650" "$S sm -1 1 kernel 2650"
group fake_reproduces_previous_limiter_30_70 24,62 "$S legacy 30 1.5 2650 50" "$S legacy 70 1.5 2650 50"
# Time division by the node's schedule (what the plugin writes): each claim within its share, clearly used.
contention contention_30_70 30 70
contention contention_50_50 50 50
contention contention_20_30_50 20 30 50
contention contention_graphs_40_60 40 60 graph
# Without a schedule (HAMi's variables, no node daemon): the bucket charges solo-time estimates; short
# kernels keep their share, never more.
bucketpair bucket_two_claims_30_70 30 70
# Priority: a high claim stamps its work; a normal claim waits while the GPU's view says to.
C=$(claim prio_hi "gpu $GPU0 cores 0 priority 0")
t high_priority_claim_stamps_its_work env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" stamped yes
C=$(claim prio_lo "gpu $GPU0 cores 0 priority 1")
t normal_priority_claim_does_not_stamp env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$S" stamped no
C=$(claim prio_held "gpu $GPU0 cores 0 priority 1 view $WORK/view.hold")
# the hold (600 ms from now) is written by the job itself, right before the program starts: a retry gets a
# hold of its own (one written once, before the first attempt, has long expired when a busy machine retries)
bg normal_priority_held_while_view_holds bash -c '"$1" "$2" 50000 600 && exec env TESSERA_CLAIM_DIRS="$3" LD_PRELOAD="$4" "$5" sm 45 1 kernel' \
    hold "$V" "$WORK/view.hold" "$C" "$LIB" "$S"
collect

echo "== guarantee and ceiling (burst): the node daemon's arbiter and two claims on one simulated GPU"
# the lines `make bench` prints, with shorter runs; a line that misses is measured again alone, at most
# twice, as the shares above are (a busy machine only lowers shares and delays starts; and the wake time has a
# tail of its own: about 1 in 20 runs on an idle machine passes 100 ms, docs/gpu-sharing.md)
PY=${PYTHON:-python3}
source tests/burst.sh
if (cd .. && "$PY" -c 'import kubelet_plugin.host_parts.vgpu.arbiter') 2>/dev/null; then
    BURST_SECS=2
    export TESSERA_SM_WINDOW_US=50000
    for row in "${BURST_ROWS[@]}"; do
        burst_fails=0
        "$row"
        for again in 1 2; do
            [ "$burst_fails" -gt 0 ] || break
            echo "  (measured again)"
            burst_fails=0
            "$row"
        done
        if [ "$burst_fails" -gt 0 ]; then fail=$((fail + 1)); else pass=$((pass + 1)); fi
    done
    burst_first_busy
    export TESSERA_SM_WINDOW_US=20000
else
    bad burst_lines "$PY cannot import the repository's arbiter: set PYTHON to the repository's virtual environment"
fi

source tests/mps.sh

echo "== the same under ASan + UBSan"
C=$(claim san_lim "gpu $GPU0 memory 1g")
t san_limit env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" limit $GiB
C=$(claim san_paths "gpu $GPU0 memory 1g")
t san_paths env FAKE_PITCH=1024 TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" paths $GiB
C=$(claim san_pa "gpu $GPU0 memory 1g")
t san_procaddr env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" procaddr $GiB
C=$(claim san_stress "gpu $GPU0 memory 1g")
t san_stress_4x8 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" stress $GiB 4 8 5000 "$C"
C=$(claim san_kill "gpu $GPU0 memory 1g")
t san_kill env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" kill $GiB
C=$(claim san_nvml "gpu $GPU0 memory 1g")
t san_nvml env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" nvml $GiB 0
C=$(claim san_ctx "gpu $GPU0 memory 1g")
t san_context_memory env FAKE_CTX_BYTES=$CTXB TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" ctx $GiB $CTXB "$C"
C=$(claim san_legacy "gpu $GPU0 memory 1g")
t san_legacy_v1 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" legacy $GiB
C=$(claim san_ring "gpu $GPU0 cores 50")
t san_event_rings_freed env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" ringexit
C=$(claim san_bad "gpu $GPU0 memory 1g colour blue")
tlog san_corrupt_limits "unknown key 'colour'" env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$T" unlimited $((10 * GiB))
t san_rtld_next env LD_PRELOAD="$SAN" "$B/tests/tprobe"
C=$(claim san_cap "gpu $GPU0 cores 50")
t san_capture_under_sm_limit env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$B/tests/tcapture" limited 0.3
CA=$(claim san_vmm_a "gpu $GPU0 memory 1g")
CB=$(claim san_vmm_b "gpu $GPU0 memory 1g")
t san_cumem env TESSERA_CLAIM_DIRS="$CA" LD_PRELOAD="$SAN" "$B/tests/tvmm" cumem $GiB "$CB"
C=$(claim san_sm "gpu $GPU0 cores 50")
bg san_sm_50 env TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$S" sm 50 1 kernel
collect

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
