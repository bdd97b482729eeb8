# Memory oversubscription (docs/gpu-sharing.md, "Oversubscription"), sourced by run.sh: one simulated GPU
# of 1 GiB whose memory every process of a test shares (FAKE_GPU_MEM), with managed memory paged between
# host and device at 20 GB/s (fake/uvm.c). A claim that opted in has a limits file of version 3: its limit
# (memory) and what the device holds for it (resident).
echo "== memory oversubscription: managed memory past what the device holds for a claim, its neighbours unharmed"
O=$B/tests/toversub
OV_LIMIT=$((1536 * 1048576)) # 1.5 times the GPU
OV_HELD=$((256 * 1048576))
OV_CHUNK=$((64 * 1048576))

# oclaim NAME LIMIT RESIDENT: the directory of a claim that opted in
oclaim() {
    local d=$WORK/$1
    mkdir -p "$d"
    printf '%s\n' "version 3" "gpu $GPU0 memory $2 cores 0 priority 1 resident $3" >"$d/limits"
    echo "$d"
}

# ovenv NAME: the environment of test NAME's shared 1 GiB GPU (for env)
ovenv() {
    echo "FAKE_GPU_MEM_MB=1024 FAKE_GPU_MEM=$WORK/mem.$1 FAKE_GPU_STATE=$WORK/gpu.$1 FAKE_PAGE_MBPS=20000"
}

C=$(oclaim ov_paths $OV_LIMIT $OV_HELD)
tlog oversub_each_allocation_path "cuMemAllocAsync: out of memory: the device memory held for this claim" \
    env $(ovenv ov_paths) TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$O" paths $OV_LIMIT $OV_HELD
C=$(oclaim ov_san_paths $OV_LIMIT $OV_HELD)
t san_oversub_each_allocation_path env $(ovenv ov_san_paths) TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$SAN" "$O" paths $OV_LIMIT $OV_HELD
C=$(oclaim ov_ctx $OV_LIMIT $OV_HELD)
t oversub_context_memory_is_held_on_the_device env $(ovenv ov_ctx) FAKE_CTX_BYTES=$((64 * 1048576)) FAKE_NVML_FAIL=1 \
    TESSERA_CONTEXT_BYTES=$((64 * 1048576)) TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$O" ctx $OV_HELD $((64 * 1048576))

# Two opted-in claims of 1.5 times the GPU on it at once, each reading all of its memory four times, and a
# claim that did not opt in arriving while they hold all of it and have filled the device with managed
# pages: all three finish,
# the opted-in ones hold no more device memory than promised, their limits hold, the neighbour gets all of
# its memory as device memory and reads it without paging.
oversub_pair() {
    local name=oversub_two_claims_of_1.5x_and_a_neighbour ca cb cn pa pb rn ra rb
    ca=$(oclaim ov_a $OV_LIMIT $OV_HELD)
    cb=$(oclaim ov_b $OV_LIMIT $OV_HELD)
    cn=$(claim ov_n "gpu $GPU0 memory $OV_HELD")
    env $(ovenv ov_pair) TESSERA_CLAIM_DIRS="$ca" LD_PRELOAD="$LIB" timeout 60 "$O" work $OV_LIMIT $OV_HELD $OV_CHUNK 3 "$WORK/ov.ready.a" "$WORK/ov.done" >"$WORK/ov.a" 2>&1 &
    pa=$!
    env $(ovenv ov_pair) TESSERA_CLAIM_DIRS="$cb" LD_PRELOAD="$LIB" timeout 60 "$O" work $OV_LIMIT $OV_HELD $OV_CHUNK 3 "$WORK/ov.ready.b" "$WORK/ov.done" >"$WORK/ov.b" 2>&1 &
    pb=$!
    env $(ovenv ov_pair) TESSERA_CLAIM_DIRS="$cn" LD_PRELOAD="$LIB" timeout 60 "$O" neighbour $OV_HELD $OV_CHUNK "$WORK/ov.ready.a" "$WORK/ov.ready.b" "$WORK/ov.done" >"$WORK/ov.n" 2>&1
    rn=$?
    touch "$WORK/ov.done" # the workers never wait for a neighbour that failed
    wait $pa
    ra=$?
    wait $pb
    rb=$?
    if [ $ra = 0 ] && [ $rb = 0 ] && [ $rn = 0 ]; then
        ok "$name ($(grep -h '^work:\|^neighbour:' "$WORK"/ov.a "$WORK"/ov.b "$WORK"/ov.n | tr '\n' ';'))"
    else
        bad "$name" "$(cat "$WORK"/ov.a "$WORK"/ov.b "$WORK"/ov.n)"
    fi
}
oversub_pair
