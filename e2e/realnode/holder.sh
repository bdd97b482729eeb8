#!/usr/bin/env bash
# PID 1 of the real node's PID and mount namespaces, started by e2e/realnode/namespaces.py as
#   unshare --mount --propagation private --pid --fork --kill-child --mount-proc -- bash holder.sh ROOT INIT TUNABLE...
# containerd, its shims, the containers and the kubelet all run in these namespaces (entered with nsenter), so:
# - the mounts they make (overlay root file systems, projected volumes, shm) stay out of the machine's mount table
#   and vanish with the namespace;
# - when this process dies (its parent chain dies with the test run), the kernel kills every process of the node,
#   the shims that daemonised included;
# - the global paths they reach for regardless of configuration (/run: runc and netns defaults;
#   /var/lib: the device-plugin socket, the CNI result cache; /var/log/containers: the kubelet's log links) are
#   fresh tmpfs mounts private to the node;
# - the kernel tunables the kubelet sets at start (KERNEL_TUNABLES in config.py) are files of the node, bound over
#   /proc/sys, so the kubelet sets them without touching the machine everyone shares.
set -euo pipefail
root="$1"
init="$2"
shift 2

# Shared inside the node, as on a host whose init shares /: containerd refuses a HostToContainer volume (the
# chart's driver root) whose mount is private. New peer groups: nothing reaches the machine's mount table.
mount --make-rshared /

mount -t tmpfs -o mode=0755 tessera-node-run /run
mount -t tmpfs -o mode=0755 tessera-node-varlib /var/lib
mount -t tmpfs -o mode=0755 tessera-node-varlog /var/log
mkdir -p /var/log/containers
for tunable in "$@"; do
    shadow="${root}/sysctl/${tunable//\//.}"
    cat "/proc/sys/${tunable}" > "${shadow}"
    mount --bind "${shadow}" "/proc/sys/${tunable}"
done
echo ready > "${root}/namespaces.ready"
# The init reaps the orphans the shims leave (a plain `sleep` would collect zombies).
exec "${init}"
