/* The file FAKE_GPU_MEM names, shared by every process of a test: each GPU's device memory (uvm.c, in the
 * fake libcuda) and what its PCIe link carried, which the fake libnvidia-ml reads to answer
 * nvmlDeviceGetPcieThroughput (nvml/pcie.c) as a real GPU's counters would count the driver's page moves.
 * Written under an exclusive flock of the file, read under a shared one; a file of another size, magic or
 * version is not used (uvm.c starts it afresh, the NVML side reads no traffic from it). */
#ifndef TESSERA_FAKE_UVM_STATE_H
#define TESSERA_FAKE_UVM_STATE_H

#include <stdint.h>

#define UVM_MAGIC 0x4d56554b454b4146ull /* "FAKEKUVM" */
#define UVM_VERSION 2                   /* 2: the link spans */
#define UVM_DEVS 16                     /* FAKE_MAXDEV */
#define UVM_SPANS 32                    /* transfers remembered per GPU (adjacent ones are merged) */

/* bytes that crossed the link over [start_ns, end_ns) of CLOCK_MONOTONIC, spread evenly over it: rx to the
 * GPU (pages migrated to the device, reads of host memory), tx from it (pages evicted) */
struct uvm_span {
    uint64_t start_ns, end_ns, rx, tx;
};

struct uvm_dev {
    uint64_t used;    /* device bytes in use: plain allocations and resident managed pages */
    uint64_t managed; /* of them, managed pages */
    uint64_t debt;    /* managed bytes evicted by another process, still counted by their owners */
    uint64_t spans;   /* spans written so far: the newest is span[(spans - 1) % UVM_SPANS] */
    struct uvm_span span[UVM_SPANS];
};

struct uvm_file {
    uint64_t magic;
    uint64_t version;
    struct uvm_dev dev[UVM_DEVS];
};

#endif
