/* A GPU's PCIe link (#included by fake_nvml.c): its generation and width (FAKE_PCIE_GEN, default 4, and
 * FAKE_PCIE_WIDTH, default 16; FAKE_PCIE_GEN=0: a GPU whose NVML answers NOT_SUPPORTED, as vGPU guests and
 * MIG devices do) and its throughput over NVML's 20 ms window, from the page moves the fake libcuda writes
 * into the FAKE_GPU_MEM file (uvm_state.h). No file, or one of another version: an idle link. */
#include <fcntl.h>
#include <sys/file.h>

#include "../uvm_state.h"

#define PCIE_WINDOW_NS 20000000ull /* nvmlDeviceGetPcieThroughput counts bytes over 20 ms */
#define NVML_PCIE_UTIL_TX_BYTES 0
#define NVML_PCIE_UTIL_RX_BYTES 1

/* MB/s one lane carries each way, per generation (after line coding) */
static const unsigned LANE_MBPS[] = { 0, 250, 500, 985, 1969, 3938, 7563 };

static unsigned env_unsigned(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

/* The link's generation and width; NOT_SUPPORTED for a MIG device or where FAKE_PCIE_GEN says so. */
static nvmlReturn_t link_of(nvmlDevice_t d, unsigned *gen, unsigned *width)
{
    nvmlReturn_t rc = ready(0);
    if (rc)
        return rc;
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    if (!gpu_of(d))
        return NVML_ERROR_INVALID_ARGUMENT;
    *gen = env_unsigned("FAKE_PCIE_GEN", 4);
    *width = env_unsigned("FAKE_PCIE_WIDTH", 16);
    if (!*gen || *gen >= sizeof LANE_MBPS / sizeof LANE_MBPS[0] || !*width || *width > 32)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned *gen)
{
    LOCKED;
    unsigned width;
    if (!gen)
        return NVML_ERROR_INVALID_ARGUMENT;
    return link_of(d, gen, &width);
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned *width)
{
    LOCKED;
    unsigned gen;
    if (!width)
        return NVML_ERROR_INVALID_ARGUMENT;
    return link_of(d, &gen, width);
}

/* Bytes of GPU `dev`'s spans that fall into [from, to), each span's bytes spread evenly over it. */
static double link_bytes(const struct uvm_dev *u, int rx, uint64_t from, uint64_t to)
{
    double bytes = 0;
    uint64_t n = u->spans < UVM_SPANS ? u->spans : UVM_SPANS;
    for (uint64_t i = 0; i < n; i++) {
        const struct uvm_span *s = &u->span[i];
        uint64_t lo = s->start_ns > from ? s->start_ns : from, hi = s->end_ns < to ? s->end_ns : to;
        if (hi <= lo || s->end_ns <= s->start_ns)
            continue;
        bytes += (double)(rx ? s->rx : s->tx) * (double)(hi - lo) / (double)(s->end_ns - s->start_ns);
    }
    return bytes;
}

API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, unsigned counter, unsigned *value)
{
    LOCKED;
    unsigned gen, width;
    if (!value || (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES))
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = link_of(d, &gen, &width);
    if (rc)
        return rc;
    *value = 0;
    const char *path = getenv("FAKE_GPU_MEM");
    int fd = path && *path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return NVML_SUCCESS;
    static struct uvm_file f; /* under the call's lock */
    flock(fd, LOCK_SH);
    ssize_t got = pread(fd, &f, sizeof f, 0);
    flock(fd, LOCK_UN);
    close(fd);
    if (got != (ssize_t)sizeof f || f.magic != UVM_MAGIC || f.version != UVM_VERSION || d->gpu >= UVM_DEVS)
        return NVML_SUCCESS;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    double kbps = link_bytes(&f.dev[d->gpu], counter == NVML_PCIE_UTIL_RX_BYTES, now - PCIE_WINDOW_NS, now) /
                  1000.0 / ((double)PCIE_WINDOW_NS / 1e9);
    /* the fake pages each process at its own rate: what the link carries is at most its bandwidth */
    double cap = (double)LANE_MBPS[gen] * width * 1000.0;
    *value = (unsigned)(kbps < cap ? kbps : cap);
    return NVML_SUCCESS;
}
