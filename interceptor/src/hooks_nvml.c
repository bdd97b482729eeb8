/* NVML view: memory info shows the claim's limit as the total and the claim's
 * bytes as used; the process list shows the claim's live processes (pids as
 * the processes themselves saw them) instead of the host's. */

#define NEED_NVML(fn)                                  \
    do {                                               \
        if (!lib_ready(&g_nvml, 1) || !r_##fn)         \
            return NVML_ERROR_NOT_SUPPORTED;           \
    } while (0)

static struct dev_rec *nvml_dev(nvmlDevice_t h)
{
    if (!g_acct || t_in_hook)
        return NULL;
    return rec_for_nvml(h);
}

HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem)
{
    NEED_NVML(nvmlDeviceGetMemoryInfo);
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo(dev, mem);
    struct dev_rec *d;
    if (rc != NVML_SUCCESS || !mem || !(d = nvml_dev(dev)))
        return rc;
    uint64_t t, f, u;
    acct_view(d, mem->total, mem->total, &t, &f, &u);
    mem->total = t;
    mem->free = f;
    mem->used = u;
    return rc;
}

HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem)
{
    NEED_NVML(nvmlDeviceGetMemoryInfo_v2);
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo_v2(dev, mem);
    struct dev_rec *d;
    if (rc != NVML_SUCCESS || !mem || !(d = nvml_dev(dev)))
        return rc;
    uint64_t t, f, u;
    acct_view(d, mem->total, mem->total, &t, &f, &u);
    mem->total = t;
    mem->reserved = 0;
    mem->free = f;
    mem->used = u;
    return rc;
}

/* Fills pids/bytes of the claim's processes using this GPU. Returns how many there are. */
static unsigned claim_procs(struct dev_rec *d, unsigned cap, unsigned *pids, uint64_t *bytes)
{
    struct tr_region *r = d->rh->r;
    unsigned n = 0;
    uint32_t hi = __atomic_load_n(&r->proc_high, __ATOMIC_ACQUIRE);
    if (hi > TR_MAX_PROCS)
        hi = TR_MAX_PROCS;
    for (uint32_t i = 0; i < hi; i++) {
        struct tr_proc *p = &r->procs[i];
        if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != 1)
            continue;
        uint64_t u = __atomic_load_n(&p->used[d->g], __ATOMIC_RELAXED);
        if (!u || !slot_alive(d->rh, (int)i))
            continue;
        if (n < cap) {
            pids[n] = (unsigned)p->pid;
            bytes[n] = u;
        }
        n++;
    }
    return n;
}

#define PROCS_HOOK(name, type, extra_fields)                                              \
    HOOK nvmlReturn_t name(nvmlDevice_t dev, unsigned *count, type *infos)                \
    {                                                                                     \
        NEED_NVML(name);                                                                  \
        struct dev_rec *d = count ? nvml_dev(dev) : NULL;                                 \
        if (!d)                                                                           \
            return r_##name(dev, count, infos);                                           \
        unsigned pids[64];                                                                \
        uint64_t bytes[64];                                                               \
        unsigned n = claim_procs(d, 64, pids, bytes);                                     \
        if (n > 64)                                                                       \
            n = 64;                                                                       \
        if (!infos || *count < n) {                                                       \
            *count = n;                                                                   \
            return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;                       \
        }                                                                                 \
        for (unsigned i = 0; i < n; i++) {                                                \
            memset(&infos[i], 0, sizeof infos[i]);                                        \
            infos[i].pid = pids[i];                                                       \
            infos[i].usedGpuMemory = bytes[i];                                            \
            extra_fields;                                                                 \
        }                                                                                 \
        *count = n;                                                                       \
        return NVML_SUCCESS;                                                              \
    }

PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, (void)0)
PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t, (infos[i].gpuInstanceId = 0xFFFFFFFFu, infos[i].computeInstanceId = 0xFFFFFFFFu))
PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, (infos[i].gpuInstanceId = 0xFFFFFFFFu, infos[i].computeInstanceId = 0xFFFFFFFFu))
