/* Device entry points: identity, PCI, memory, processes (#included by fake_nvml.c). */

/* the fake CUDA driver's bytes on this device, when it is loaded in this process */
static uint64_t cuda_used(unsigned index)
{
    uint64_t (*f)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "fakeUsedBytesPhys");
    return f ? f((int)index) : 0;
}

/* the GPU instance profile a MIG device handle belongs to */
static const struct fake_profile *mig_profile(nvmlDevice_t d)
{
    if (!mig_of(d))
        return NULL;
    return profile_by_id(g_node.gpu[d->gpu].prod, g_st.gpu[d->gpu].gi[d->gi].profile);
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    if (rc || !n)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *n = g_node.ngpu;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCount(unsigned *n) { return nvmlDeviceGetCount_v2(n); }

/* Test hook: GPU `i` has fallen off the bus while a file `lost-<its UUID>` lies next to the state file (a
 * test creates and removes it from outside, as the kernel would lose and regain the GPU); its handle lookups
 * then fail with GPU_IS_LOST, as the real NVML's do. */
static int is_lost(unsigned i)
{
    char marker[PATH_MAX];
    const char *slash = strrchr(g_sf.path, '/');
    if (!slash || strf(marker, sizeof marker, "%.*s/lost-%s", (int)(slash - g_sf.path), g_sf.path,
                       g_node.gpu[i].uuid))
        return 0;
    return access(marker, F_OK) == 0;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    if (rc || i >= g_node.ngpu || !d)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (is_lost(i))
        return NVML_ERROR_GPU_IS_LOST;
    *d = &g_dev[i];
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }

/* GPU-… or MIG-… */
API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc || !uuid || !d)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < g_node.ngpu; i++) {
        if (!strcmp(uuid, g_node.gpu[i].uuid)) {
            if (is_lost(i))
                return NVML_ERROR_GPU_IS_LOST;
            *d = &g_dev[i];
            return NVML_SUCCESS;
        }
        for (unsigned k = 0; k < FAKE_NGI; k++)
            for (unsigned c = 0; g_st.gpu[i].gi[k].used && c < FAKE_NCI; c++)
                if (g_st.gpu[i].gi[k].ci[c].used && !strcmp(uuid, g_st.gpu[i].gi[k].ci[c].uuid)) {
                    *d = &g_mig[i][k][c];
                    return NVML_SUCCESS;
                }
    }
    /* the plain GPUs keep their old answer, which the interception library's tests know */
    return g_node.from_file ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT;
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    if (rc || !gpu_of(d) || !i)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *i = d->gpu;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned *minor)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    if (rc || !gpu_of(d) || !minor)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *minor = d->gpu; /* /dev/nvidia<minor>: in NVML order on this node */
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned len)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc)
        return rc;
    const struct ci_rec *mig = mig_of(d);
    if (mig)
        return copy_text(buf, len, mig->uuid);
    return gpu_of(d) ? copy_text(buf, len, gpu_of(d)->uuid) : NVML_ERROR_INVALID_ARGUMENT;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned len)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc)
        return rc;
    const struct fake_profile *p = mig_profile(d);
    if (p) {
        char name[NVML_NAME_LEN + 32];
        snprintf(name, sizeof name, "%s MIG %s", g_node.gpu[d->gpu].name, p->name);
        return copy_text(buf, len, name);
    }
    return gpu_of(d) ? copy_text(buf, len, gpu_of(d)->name) : NVML_ERROR_INVALID_ARGUMENT;
}

API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, int *brand)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    if (rc || !gpu_of(d) || !brand)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *brand = NVML_BRAND_NVIDIA; /* what the real H100 answered ("Nvidia") */
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned *arch)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    const struct gpu_desc *g = gpu_of(d);
    if (rc || !g || !arch)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *arch = g->prod ? g->prod->architecture : 9;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    const struct gpu_desc *g = gpu_of(d);
    if (rc || !g || !major || !minor)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *major = g->prod ? (int)g->prod->cc_major : 9;
    *minor = g->prod ? (int)g->prod->cc_minor : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t d, unsigned *cores)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc || !cores)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    const struct fake_profile *p = mig_profile(d);
    const struct gpu_desc *g = p ? &g_node.gpu[d->gpu] : gpu_of(d);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned per_sm = g->prod ? g->prod->cores_per_sm : 128;
    *cores = (p ? p->sms : g->prod ? g->prod->sms : 132) * per_sm;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    const struct gpu_desc *g = gpu_of(d);
    if (rc || !g || !pci)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->bus = g->pci_bus;
    pci->pciDeviceId = ((g->prod ? g->prod->pci_device : 0x2330u) << 16) | 0x10de;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0, pci->bus, 0);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0, pci->bus, 0);
    return NVML_SUCCESS;
}

/* total, used and free of a GPU (or MIG device); `reserved` only on the plain GPUs */
static nvmlReturn_t memory(nvmlDevice_t d, uint64_t *total, uint64_t *used, uint64_t *reserved)
{
    nvmlReturn_t rc = ready(1);
    if (rc)
        return rc;
    const struct fake_profile *p = mig_profile(d);
    const struct gpu_desc *g = gpu_of(d);
    if (p) {
        *total = (uint64_t)p->memory_mib << 20;
        *used = *reserved = 0;
    } else if (g) {
        *total = g->mem_bytes;
        *used = (g_node.from_file ? 0 : 1ull << 30) + cuda_used(d->gpu);
        *reserved = g_node.from_file ? 0 : 256ull << 20;
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    LOCKED;
    uint64_t total, used, reserved;
    nvmlReturn_t rc = m ? memory(d, &total, &used, &reserved) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc)
        return rc;
    m->total = total;
    m->used = used;
    m->free = total > used ? total - used : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    LOCKED;
    uint64_t total, used, reserved;
    /* the plain GPUs accept any version, as the interception library's tests pass 2 */
    if (m && g_node.from_file && m->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t rc = m ? memory(d, &total, &used, &reserved) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc)
        return rc;
    m->total = total;
    m->reserved = reserved;
    m->used = used;
    m->free = total > used + reserved ? total - used - reserved : 0;
    return NVML_SUCCESS;
}

/* The plain GPUs show one foreign process holding 1 GiB; a node's GPUs run nothing. */
#define HOST_PROCS(name, type)                                                \
    API nvmlReturn_t name(nvmlDevice_t d, unsigned *count, type *infos)       \
    {                                                                         \
        LOCKED;                                                               \
        nvmlReturn_t rc = ready(0);                                           \
        if (rc || !gpu_of(d) || !count)                                       \
            return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;                     \
        unsigned n = g_node.from_file ? 0 : 1;                                \
        if (n && (!infos || *count < n)) {                                    \
            *count = n;                                                       \
            return NVML_ERROR_INSUFFICIENT_SIZE;                              \
        }                                                                     \
        if (n) {                                                              \
            memset(infos, 0, sizeof *infos);                                  \
            infos[0].pid = 4242;                                              \
            infos[0].usedGpuMemory = 1ull << 30;                              \
        }                                                                     \
        *count = n;                                                           \
        return NVML_SUCCESS;                                                  \
    }
HOST_PROCS(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
HOST_PROCS(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t)
HOST_PROCS(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
