# Sourced by tests/run.sh (its helpers and variables): the fake nvidia-cuda-mps-control and the fake libcuda
# as an MPS client. Each daemon has its pipe and log directories under $WORK/mps.<name>.
echo "== MPS: the fake control daemon's command interface, and MPS clients"
MPSCTL=$B/fake/nvidia-cuda-mps-control
TM=$B/tests/tmps

# mpsenv NAME: the variables that point a process at daemon NAME's pipe and log directories
mpsenv() { echo "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps.$1/pipe CUDA_MPS_LOG_DIRECTORY=$WORK/mps.$1/log"; }
# ask NAME COMMAND...: the daemon's answers to these commands (one per argument)
ask() {
    local n=$1
    shift
    printf '%s\n' "$@" | env $(mpsenv "$n") timeout 30 "$MPSCTL"
}
mps_pid() { cat "$WORK/mps.$1/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null; }
# gone PID SECONDS: waits until the process has exited (a zombie counts as exited)
gone() {
    local i
    for i in $(seq 1 $(($2 * 20))); do
        [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = "" ] && return 0
        [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ] && return 0
        sleep 0.05
    done
    return 1
}
# expect NAME WANT CMD...: passes when CMD's output (CMD may be a function) is exactly WANT
expect() {
    local name=$1 want=$2 out
    shift 2
    out=$("$@" 2>&1)
    if [ "$out" = "$want" ]; then ok "$name"; else bad "$name" "got:
$out
expected:
$want"; fi
}
# wait_ready FILE: until a holding client printed "ready"
wait_ready() {
    local i
    for i in $(seq 1 100); do grep -q ready "$1" 2>/dev/null && return 0; sleep 0.05; done
    return 1
}

t mps_daemon_starts env $(mpsenv a) CUDA_VISIBLE_DEVICES="$GPU1" "$MPSCTL" -d
if [ -S "$WORK/mps.a/pipe/control" ] && [ -f "$WORK/mps.a/log/control.log" ] && kill -0 "$(mps_pid a)" 2>/dev/null; then
    ok mps_daemon_files_control_socket_pid_file_control_log
else
    bad mps_daemon_files_control_socket_pid_file_control_log "$(ls -la "$WORK/mps.a"/* 2>&1)"
fi
out=$(env $(mpsenv a) "$MPSCTL" -d 2>&1)
if [ $? != 0 ] && grep -q "An instance of this daemon is already running" <<<"$out"; then ok mps_second_daemon_on_one_pipe_dir_refused; else bad mps_second_daemon_on_one_pipe_dir_refused "$out"; fi
expect mps_command_answers "100.0
30.0
30.0
1G
512M
Unrecognized command: bogus" ask a get_default_active_thread_percentage "set_default_active_thread_percentage 30" \
    get_default_active_thread_percentage "set_default_device_pinned_mem_limit 0 1536M" "get_default_device_pinned_mem_limit 0" \
    "set_default_device_pinned_mem_limit $GPU1 512M" "get_default_device_pinned_mem_limit 0" get_server_list bogus
expect mps_bad_values_refused "Invalid active thread percentage '0': expected a number above 0 and at most 100
Invalid memory limit '1.5G': expected an integer followed by M or G
Invalid device '7'" ask a "set_default_active_thread_percentage 0" "set_default_device_pinned_mem_limit 0 1.5G" \
    "get_default_device_pinned_mem_limit 7"
t mps_client_sees_the_daemons_gpu env $(mpsenv a) "$TM" view 1 "$GPU1"
# the server started for the first client took the defaults set above: 30 % and 512 MiB per client
t mps_server_default_pinned_limit env $(mpsenv a) "$TM" pinned 536870912
t mps_client_cannot_raise_the_servers_limit env $(mpsenv a) CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2G "$TM" pinned 536870912
t mps_client_lowers_its_own_limit env $(mpsenv a) CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="$GPU1=256MB" "$TM" pinned 268435456
env $(mpsenv a) "$TM" hold 3 >"$WORK/mps.hold" 2>&1 &
holder=$!
wait_ready "$WORK/mps.hold"
server=$(ask a get_server_list)
hpid=$(awk '/ready/ { print $2 }' "$WORK/mps.hold")
expect mps_client_and_server_lists "$hpid
$GPU1 $hpid
ACTIVE
30.0" ask a "get_client_list $server" "get_device_client_list $server" "get_server_status $server" \
    "get_active_thread_percentage $server"
if grep -q "Client {PID: $hpid, Context ID: 0} connected (active threads 30.0)" "$WORK/mps.a/log/server.log"; then ok mps_server_log_names_the_client; else bad mps_server_log_names_the_client "$(cat "$WORK/mps.a/log/server.log")"; fi
# quit waits for the clients, then stops the servers and removes the socket
ask a quit >/dev/null
sleep 0.5
if kill -0 "$(mps_pid a)" 2>/dev/null; then ok mps_quit_waits_for_clients; else bad mps_quit_waits_for_clients "the daemon exited with a client connected"; fi
dpid=$(mps_pid a)
wait $holder
if gone "$dpid" 5 && [ ! -e "$WORK/mps.a/pipe/control" ] && ! kill -0 "$server" 2>/dev/null; then ok mps_quit_removes_socket_and_servers; else bad mps_quit_removes_socket_and_servers "$(ls -la "$WORK/mps.a/pipe"; cat "$WORK/mps.a/log/control.log")"; fi
t mps_no_daemon_no_socket_runs_without_mps env $(mpsenv a) "$TM" init 0
t mps_no_daemon_no_socket_sees_every_gpu env $(mpsenv a) "$TM" view 2 "$GPU0"
# a daemon that died leaves its socket: clients fail in cuInit
env $(mpsenv b) "$MPSCTL" -d
kill -KILL "$(mps_pid b)"
gone "$(mps_pid b)" 5
tlog mps_dead_daemon_cuinit_fails_805 "Connection refused" env $(mpsenv b) "$TM" init 805
# a restarted daemon takes over the leftover socket
t mps_daemon_restarts_over_leftovers env $(mpsenv b) "$MPSCTL" -d
t mps_restarted_daemon_serves env $(mpsenv b) "$TM" init 0
# quit -t: servers and clients are stopped when the timeout passes
env $(mpsenv b) "$TM" hold 10 >"$WORK/mps.hold2" 2>&1 &
holder=$!
wait_ready "$WORK/mps.hold2"
dpid=$(mps_pid b)
ask b "quit -t 1" >/dev/null
if gone "$dpid" 4; then ok mps_quit_timeout_forces; else bad mps_quit_timeout_forces "still running"; fi
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# SM shares: a server's clients run concurrently, each at its active thread percentage; no time slicing
# between them (switches=0 or 1: the first switch hands the idle GPU over), time slicing against others
env $(mpsenv c) FAKE_GPU_COUNT=1 "$MPSCTL" -d
mps_pair() {
    local name=$1 a=$2 b=$3 attempt failed=1 sw
    for attempt in 1 2 3; do
        [ "$attempt" = 1 ] || quiet
        rm -f "$WORK/gpu.$name"
        env $(mpsenv c) CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$a" FAKE_GPU_STATE="$WORK/gpu.$name" timeout 60 "$S" sm "$a" 1 kernel >"$WORK/mp.$name.a" 2>&1 &
        local pa=$!
        env $(mpsenv c) CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$b" FAKE_GPU_STATE="$WORK/gpu.$name" timeout 60 "$S" sm "$b" 1 kernel >"$WORK/mp.$name.b" 2>&1
        local rb=$?
        wait $pa && [ $rb = 0 ] || continue
        sw=$(cat "$WORK"/mp."$name".* | grep -o 'switches=[0-9]*' | cut -d= -f2 | sort -n | tail -1)
        [ "${sw:-9}" -le 1 ] && failed=0 && break
    done
    if [ "$failed" = 0 ]; then ok "$name ($(cat "$WORK"/mp."$name".* | grep -o 'share=[0-9.]* gpu=[0-9.]* switches=[0-9]*' | tr '\n' ' '))"; else bad "$name" "$(cat "$WORK"/mp."$name".*)"; fi
}
mps_pair mps_clients_30_70_concurrent 30 70
mps_pair mps_clients_50_50_concurrent 50 50
bg mps_client_alone_at_30 env $(mpsenv c) CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 "$S" sm 30 1 kernel
collect
group mps_client_time_sliced_against_a_plain_process 55 \
    "CUDA_MPS_PIPE_DIRECTORY=$WORK/mps.c/pipe $S sm -1 1 kernel 2650" "$S sm -1 1 kernel 2650"

# libtessera preloaded in an MPS client: its accounting stays exact whichever limit refuses first
env $(mpsenv d) "$MPSCTL" -d
C=$(claim mps_lib "gpu $GPU0 memory 1g")
t mps_client_with_library_limit_exact env $(mpsenv d) TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$T" limit $GiB
C=$(claim mps_lower "gpu $GPU0 memory 1g")
t mps_pinned_limit_below_the_claims env $(mpsenv d) CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=512M TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$TM" layered 536870912 $GiB "$C"
C=$(claim mps_higher "gpu $GPU0 memory 512m")
t mps_claim_limit_below_the_pinned_limit env $(mpsenv d) CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G TESSERA_CLAIM_DIRS="$C" LD_PRELOAD="$LIB" "$TM" layered $GiB 536870912 "$C"

# one server at a time: a client of another user waits until the running server's clients are gone
if [ "$(id -u)" = 0 ]; then
    chmod 755 "$WORK" "$WORK/mps.d" "$WORK/mps.d/pipe"
    env $(mpsenv d) "$TM" hold 1.5 >"$WORK/mps.hold3" 2>&1 &
    holder=$!
    wait_ready "$WORK/mps.hold3"
    t0=$(date +%s%N)
    env $(mpsenv d) FAKE_GPU_STATE="$WORK/gpu.nobody" setpriv --reuid=65534 --regid=65534 --clear-groups "$TM" init 0 >"$WORK/mps.nobody" 2>&1
    rc=$?
    waited=$((($(date +%s%N) - t0) / 1000000))
    wait $holder
    if [ $rc = 0 ] && [ $waited -ge 800 ] && grep -q "Starting new server [0-9]* for user 65534" "$WORK/mps.d/log/control.log"; then
        ok "mps_other_user_waits_for_the_running_server (${waited} ms)"
    else
        bad mps_other_user_waits_for_the_running_server "rc=$rc waited=${waited}ms $(cat "$WORK/mps.nobody"; tail -5 "$WORK/mps.d/log/control.log")"
    fi
fi
for n in c d; do ask "$n" "quit -t 2" >/dev/null; done
