/* Where the node's GPUs sit (#included by fake_nvml.c): the PCI part as the kernel shows it in sysfs
 * (FAKE_NVML_SYS: bus/pci/devices/<bus id> linked into devices/<root complex>/…, numa_node), which Tessera's
 * NVML backend reads as the upstream deviceattribute helpers do; NVLinks and the GPU fabric through NVML.
 * An HGX GPU's 18 links all end at NVSwitches; a bridged GPU has 4 links to each GPU of its entry. */

#define SWITCH_LINKS 18
#define BRIDGE_LINKS 4
#define NVLINK_TYPE_GPU 0
#define NVLINK_TYPE_SWITCH 2
#define FABRIC_STATE_COMPLETED 3

typedef struct {
    unsigned version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned cliqueId, state, healthMask;
} nvmlGpuFabricInfo_v2_t;
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(nvmlGpuFabricInfo_v2_t, 2)
_Static_assert(nvmlGpuFabricInfo_v2 == 0x02000024, "fabric info v2 layout");

/* The sysfs entries of the GPUs whose root complex the node file names (the others have none, like a
 * container without /sys). Written at nvmlInit; nothing there changes while the node runs. */
static void sync_sys(void)
{
    const char *sys = getenv("FAKE_NVML_SYS");
    if (!sys || !*sys)
        return;
    for (unsigned i = 0; i < g_node.ngpu; i++) {
        const struct gpu_desc *g = &g_node.gpu[i];
        if (!*g->pcie_root)
            continue;
        char bdf[16], port[16], rel[96], dir[PATH_MAX], link[PATH_MAX + 32], numa[32];
        snprintf(bdf, sizeof bdf, "0000:%02x:00.0", g->pci_bus);
        /* a root port on the root bus, then the GPU (the switch's ports left out: only the root counts) */
        snprintf(port, sizeof port, "%.4s:%.2s:01.0", g->pcie_root + 3, g->pcie_root + 8);
        snprintf(rel, sizeof rel, "%s/%s/%s", g->pcie_root, port, bdf);
        snprintf(dir, sizeof dir, "%s/devices/%s", sys, rel);
        mkdirs(dir);
        snprintf(link, sizeof link, "%s/numa_node", dir);
        snprintf(numa, sizeof numa, "%ld\n", g->numa_node);
        write_if_changed(link, numa);
        snprintf(dir, sizeof dir, "%s/bus/pci/devices", sys);
        mkdirs(dir);
        snprintf(link, sizeof link, "%s/%s", dir, bdf);
        char target[128];
        snprintf(target, sizeof target, "../../../devices/%s", rel);
        unlink(link);
        if (symlink(target, link))
            fprintf(stderr, "fake libnvidia-ml: %s: %s\n", link, strerror(errno));
    }
}

static unsigned nvlink_count(const struct gpu_desc *g)
{
    if (g->nvlink == NVLINK_SWITCH)
        return SWITCH_LINKS;
    return g->nvlink == NVLINK_BRIDGE ? BRIDGE_LINKS * (g->bridge_count - 1) : 0;
}

/* The link's GPU, checked: NotSupported without NVLink, InvalidArgument past its last link */
static nvmlReturn_t nvlink_of(nvmlDevice_t d, unsigned link, const struct gpu_desc **out)
{
    nvmlReturn_t rc = ready(0);
    const struct gpu_desc *g = gpu_of(d);
    if (rc || !g)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (!nvlink_count(g))
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= nvlink_count(g))
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = g;
    return NVML_SUCCESS;
}

/* the GPU a bridge link ends at: links 0-3 the entry's first other GPU, 4-7 the next, ... */
static const struct gpu_desc *bridge_peer(const struct gpu_desc *g, unsigned self, unsigned link)
{
    unsigned k = link / BRIDGE_LINKS, peer = g->bridge_first + k;
    return &g_node.gpu[peer >= self ? peer + 1 : peer];
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned link, unsigned *active)
{
    LOCKED;
    const struct gpu_desc *g;
    nvmlReturn_t rc = nvlink_of(d, link, &g);
    if (rc || !active)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *active = 1;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned link, unsigned *type)
{
    LOCKED;
    const struct gpu_desc *g;
    nvmlReturn_t rc = nvlink_of(d, link, &g);
    if (rc || !type)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *type = g->nvlink == NVLINK_SWITCH ? NVLINK_TYPE_SWITCH : NVLINK_TYPE_GPU;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned link, nvmlPciInfo_t *pci)
{
    LOCKED;
    const struct gpu_desc *g;
    nvmlReturn_t rc = nvlink_of(d, link, &g);
    if (rc || !pci)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    /* four NVSwitches at buses c0-c3, as on an HGX H100 board */
    pci->bus = g->nvlink == NVLINK_SWITCH ? 0xc0 + link % 4 : bridge_peer(g, d->gpu, link)->pci_bus;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0, pci->bus, 0);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0, pci->bus, 0);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfo_v2_t *info)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    const struct gpu_desc *g = gpu_of(d);
    if (rc || !g || !info)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuFabricInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!g->has_fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, g->cluster_uuid, sizeof info->clusterUuid);
    info->status = NVML_SUCCESS;
    info->cliqueId = g->clique_id;
    info->state = FABRIC_STATE_COMPLETED;
    info->healthMask = 0;
    return NVML_SUCCESS;
}
