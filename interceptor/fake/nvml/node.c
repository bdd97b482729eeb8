/* The GPUs the fake drives: a SimulatedNode file (FAKE_NVML_NODE, sim.tessera.dev/v1, the format
 * dra_driver/backends/sim_node.py reads, checked the same way) or, without one, FAKE_GPU_COUNT plain GPUs
 * of FAKE_GPU_MEM_MB each (the interception library's tests). Products and their MIG profiles come from the
 * generated fake_products.h, i.e. from dra_driver/core/profiles.py. */

struct admin_instance {
    const struct fake_profile *prof;
    unsigned start;
};

enum nvlink_kind { NVLINK_NONE, NVLINK_SWITCH, NVLINK_BRIDGE };

struct gpu_desc {
    char uuid[NVML_UUID_LEN];
    char name[NVML_NAME_LEN];
    const struct fake_product *prod; /* NULL: a plain GPU without MIG (no node file) */
    uint64_t mem_bytes;
    unsigned pci_bus;
    int mig_enabled, healthy;
    unsigned nadmin;
    struct admin_instance admin[FAKE_MAX_ADMIN];
    /* topology: what the fake shows in its sysfs tree and through NVML's NVLink and fabric calls */
    char pcie_root[16]; /* "pci0000:15"; empty: not known, no sysfs entry */
    long numa_node;     /* -1: no NUMA node */
    enum nvlink_kind nvlink;
    unsigned bridge_first, bridge_count; /* NVLINK_BRIDGE: the GPUs of the entry, bridged to each other */
    int has_fabric;
    unsigned char cluster_uuid[16];
    unsigned clique_id;
};

struct node_desc {
    int from_file;
    unsigned ngpu;
    struct gpu_desc gpu[FAKE_MAXDEV];
    char driver_version[80];
    int cuda_version; /* 12040 for "12.4" */
    long host_memory_gib; /* what the fake's /proc/meminfo says: MemTotal */
};

#define DEFAULT_DRIVER_VERSION "550.54.15"
#define DEFAULT_CUDA_DRIVER_VERSION "12.4"
#define DEFAULT_HOST_MEMORY_GIB 2048L /* dra_driver/backends/sim_node.py DEFAULT_HOST_MEMORY_GIB */
#define MAX_HOST_MEMORY_GIB (1L << 20)

static const char *const NODE_REQUIRED[] = { "apiVersion", "kind", "gpus", NULL };
static const char *const NODE_OPTIONAL[] = { "nodeName",          "seed",          "driverVersion",
                                             "cudaDriverVersion", "hostMemoryGiB", NULL };
static const char *const GPU_REQUIRED[] = { "product", NULL };
static const char *const GPU_OPTIONAL[] = { "count",    "migEnabled", "uuid",   "healthy", "instances",
                                            "numaNode", "pcieRoot",   "nvlink", "fabric",  NULL };
static const char *const INSTANCE_REQUIRED[] = { "profile", "start", NULL };
static const char *const FABRIC_REQUIRED[] = { "clusterUuid", "cliqueId", NULL };
static const char *const NONE[] = { NULL };

static const struct fake_profile *profile_by_id(const struct fake_product *p, unsigned id)
{
    for (unsigned i = 0; p && i < p->nprofiles; i++)
        if (p->profiles[i].id == id)
            return &p->profiles[i];
    return NULL;
}

static int has_start(const struct fake_profile *pr, long start)
{
    for (unsigned i = 0; i < pr->nstarts; i++)
        if ((long)pr->starts[i] == start)
            return 1;
    return 0;
}

static int same_folded(const char *a, const char *b)
{
    while (isspace((unsigned char)*a))
        a++;
    size_t n = strlen(a);
    while (n && isspace((unsigned char)a[n - 1]))
        n--;
    return strlen(b) == n && !strncasecmp(a, b, n);
}

static const struct fake_product *find_product(const char *name)
{
    for (size_t i = 0; i < FAKE_NPRODUCTS; i++)
        if (same_folded(name, fake_products[i].key) || same_folded(name, fake_products[i].product_name))
            return &fake_products[i];
    return NULL;
}

/* FNV-1a, then splitmix64's finalizer so that similar texts give unrelated bits */
static uint64_t hash64(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

/* A stable UUID for a text (not the simulated backend's uuid5: only explicit `uuid:` fields agree) */
static void uuid_of(const char *prefix, const char *text, char *out, size_t len)
{
    uint64_t a = hash64(text, 0xcbf29ce484222325ull), b = hash64(text, a ^ 0x9e3779b97f4a7c15ull);
    snprintf(out, len, "%s-%08x-%04x-%04x-%04x-%012llx", prefix, (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffff,
             (unsigned)a & 0xffff, (unsigned)(b >> 48), (unsigned long long)(b & 0xffffffffffffull));
}

/* "12.4" → 12040, as nvmlSystemGetCudaDriverVersion answers */
static int parse_cuda_version(const char *text, int *out)
{
    unsigned major, minor;
    char tail;
    if (sscanf(text, "%u.%u%c", &major, &minor, &tail) != 2 || minor > 99)
        return fail("cudaDriverVersion: expected MAJOR.MINOR (e.g. 12.4), got '%s'", text);
    *out = (int)(major * 1000 + minor * 10);
    return 0;
}

static int decode_instance(yaml_document_t *d, yaml_node_t *n, const char *where, const struct fake_product *prod,
                           struct admin_instance *out)
{
    char path[256];
    if (y_expect(n, Y_MAP, where) || y_check_fields(d, n, where, INSTANCE_REQUIRED, NONE))
        return -1;
    yaml_node_t *ref = y_get(d, n, "profile");
    enum ytype t = y_type(ref);
    const struct fake_profile *prof = NULL;
    if (t == Y_STR) {
        for (unsigned i = 0; i < prod->nprofiles && !prof; i++)
            if (!strcmp(prod->profiles[i].name, y_text(ref)))
                prof = &prod->profiles[i];
    } else if (t == Y_INT) {
        long id;
        if (y_long(d, n, "profile", where, -1, &id))
            return -1;
        prof = id >= 0 ? profile_by_id(prod, (unsigned)id) : NULL;
    } else {
        return fail("%s.profile: expected a profile name (e.g. 1g.10gb) or a profile id", where);
    }
    if (!prof) {
        char known[256] = "";
        for (unsigned i = 0; i < prod->nprofiles; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     prod->profiles[i].name);
        return fail("%s.profile: '%s' is not a MIG profile of %s (%s)", where, y_text(ref), prod->key, known);
    }
    long start;
    if (y_long(d, n, "start", where, -1, &start))
        return -1;
    if (!has_start(prof, start)) {
        char valid[64] = "";
        for (unsigned i = 0; i < prof->nstarts; i++)
            snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%u", i ? ", " : "", prof->starts[i]);
        return fail("%s: %ld is not a placement of %s; valid starts: [%s]", field(path, sizeof path, where, "start"),
                    start, prof->name, valid);
    }
    out->prof = prof;
    out->start = (unsigned)start;
    return 0;
}

static int check_admin_layout(const struct gpu_desc *g, const char *where)
{
    unsigned used = 0;
    for (unsigned i = 0; i < g->nadmin; i++) {
        const struct admin_instance *a = &g->admin[i];
        unsigned slices = ((1u << a->prof->memory_slices) - 1) << a->start, count = 0;
        if (used & slices)
            return fail("%s: instance %s at %u overlaps another instance", where, a->prof->name, a->start);
        used |= slices;
        for (unsigned j = 0; j < g->nadmin; j++)
            count += g->admin[j].prof == a->prof;
        if (count > a->prof->max_instances)
            return fail("%s: more than %u instances of %s", where, a->prof->max_instances, a->prof->name);
    }
    return 0;
}

/* `pci0000:15`, as resource.kubernetes.io/pcieRoot spells a root complex */
static int is_pcie_root(const char *s)
{
    if (strlen(s) != 10 || strncmp(s, "pci", 3) || s[7] != ':')
        return 0;
    for (unsigned i = 3; i < 10; i++)
        if (i != 7 && !strchr("0123456789abcdef", s[i]))
            return 0;
    return 1;
}

/* a UUID in its canonical text (lowercase, dashes at 8, 13, 18, 23) into its 16 bytes */
static int parse_uuid(const char *s, unsigned char out[16])
{
    if (strlen(s) != 36)
        return -1;
    for (unsigned i = 0, k = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return -1;
            continue;
        }
        const char *hex = "0123456789abcdef", *h = s[i] ? strchr(hex, s[i]) : NULL;
        if (!h)
            return -1;
        out[k / 2] = (unsigned char)(k % 2 ? out[k / 2] | (h - hex) : (h - hex) << 4);
        k++;
    }
    return 0;
}

static int decode_fabric(yaml_document_t *d, yaml_node_t *n, const char *where, struct gpu_desc *g)
{
    char path[256];
    const char *cluster;
    long clique;
    if (y_expect(n, Y_MAP, where) || y_check_fields(d, n, where, FABRIC_REQUIRED, NONE) ||
        y_str(d, n, "clusterUuid", where, "", &cluster))
        return -1;
    if (parse_uuid(cluster, g->cluster_uuid))
        return fail("%s: '%s' is not a UUID (lowercase, with dashes)", field(path, sizeof path, where, "clusterUuid"),
                    cluster);
    if (y_long(d, n, "cliqueId", where, -1, &clique))
        return -1;
    if (clique < 0 || clique > 0xffffffffl)
        return fail("%s: expected 0..4294967295, got %ld", field(path, sizeof path, where, "cliqueId"), clique);
    g->clique_id = (unsigned)clique;
    g->has_fabric = 1;
    return 0;
}

/* numaNode, pcieRoot, nvlink, fabric: the same for every GPU of the entry */
static int decode_topology(yaml_document_t *d, yaml_node_t *n, const char *where, long count, struct gpu_desc *g)
{
    char path[256];
    const char *root, *nvlink;
    if (y_str(d, n, "pcieRoot", where, "", &root))
        return -1;
    if (y_get(d, n, "pcieRoot") && !is_pcie_root(root))
        return fail("%s: '%s' is not a PCIe root complex like pci0000:15", field(path, sizeof path, where, "pcieRoot"),
                    root);
    snprintf(g->pcie_root, sizeof g->pcie_root, "%s", root);
    if (y_long(d, n, "numaNode", where, -1, &g->numa_node))
        return -1;
    if (y_get(d, n, "numaNode") && (g->numa_node < 0 || g->numa_node > 1023))
        return fail("%s: expected 0..1023 (leave it out for no NUMA node), got %ld",
                    field(path, sizeof path, where, "numaNode"), g->numa_node);
    if (y_str(d, n, "nvlink", where, "", &nvlink))
        return -1;
    if (!strcmp(nvlink, "switch"))
        g->nvlink = NVLINK_SWITCH;
    else if (!strcmp(nvlink, "bridge"))
        g->nvlink = NVLINK_BRIDGE;
    else if (*nvlink)
        return fail("%s: '%s' is not one of switch, bridge", field(path, sizeof path, where, "nvlink"), nvlink);
    if (g->nvlink == NVLINK_BRIDGE && count < 2)
        return fail("%s: bridge joins the GPUs of this entry; give it count 2 or more",
                    field(path, sizeof path, where, "nvlink"));
    yaml_node_t *fabric = y_get(d, n, "fabric");
    if (fabric && decode_fabric(d, fabric, field(path, sizeof path, where, "fabric"), g))
        return -1;
    if (fabric && g->nvlink != NVLINK_SWITCH)
        return fail("%s: a GPU fabric needs nvlink: switch", field(path, sizeof path, where, "fabric"));
    return 0;
}

/* One `gpus[i]` entry: `count` GPUs appended to the node */
static int decode_gpus(yaml_document_t *d, yaml_node_t *n, const char *where, const char *seed,
                       struct node_desc *node)
{
    char path[256];
    const char *product, *uuid;
    long count;
    int mig, healthy;
    if (y_expect(n, Y_MAP, where) || y_check_fields(d, n, where, GPU_REQUIRED, GPU_OPTIONAL) ||
        y_str(d, n, "product", where, "", &product))
        return -1;
    const struct fake_product *prod = find_product(product);
    if (!prod) {
        char known[256] = "";
        for (size_t i = 0; i < FAKE_NPRODUCTS; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", fake_products[i].key);
        return fail("%s.product: unknown GPU product '%s': use one of %s (or the NVML product name)", where, product,
                    known);
    }
    if (y_long(d, n, "count", where, 1, &count))
        return -1;
    if (count < 1)
        return fail("%s.count: must be at least 1, got %ld", where, count);
    if (y_bool(d, n, "migEnabled", where, 0, &mig))
        return -1;
    if (mig && !prod->memory_slices)
        return fail("%s.migEnabled: %s cannot do MIG; remove the field", where, prod->key);
    if (y_str(d, n, "uuid", where, "", &uuid))
        return -1;
    if (*uuid && count != 1)
        return fail("%s.uuid: only allowed with count 1 (list such GPUs one by one)", where);
    if (*uuid && strncmp(uuid, "GPU-", 4))
        return fail("%s.uuid: must start with 'GPU-', got '%s'", where, uuid);
    if (y_bool(d, n, "healthy", where, 1, &healthy))
        return -1;
    struct gpu_desc tmpl = { .prod = prod, .mig_enabled = mig, .healthy = healthy };
    yaml_node_t *list = y_get(d, n, "instances");
    if (list) {
        if (y_expect(list, Y_SEQ, field(path, sizeof path, where, "instances")))
            return -1;
        yaml_node_item_t *it = list->data.sequence.items.start;
        if (it < list->data.sequence.items.top && !mig)
            return fail("%s.instances: MIG instances need migEnabled: true", where);
        for (unsigned k = 0; it < list->data.sequence.items.top; it++, k++) {
            if (tmpl.nadmin == FAKE_MAX_ADMIN)
                return fail("%s.instances: the fake holds at most %d per GPU", where, FAKE_MAX_ADMIN);
            snprintf(path, sizeof path, "%s.instances[%u]", where, k);
            if (decode_instance(d, yaml_document_get_node(d, *it), path, prod, &tmpl.admin[tmpl.nadmin++]))
                return -1;
        }
        if (check_admin_layout(&tmpl, field(path, sizeof path, where, "instances")))
            return -1;
    }
    if (decode_topology(d, n, where, count, &tmpl))
        return -1;
    tmpl.bridge_first = node->ngpu;
    tmpl.bridge_count = (unsigned)count;
    for (long c = 0; c < count; c++) {
        if (node->ngpu == FAKE_MAXDEV)
            return fail("gpus: the fake drives at most %d GPUs", FAKE_MAXDEV);
        unsigned index = node->ngpu;
        struct gpu_desc *g = &node->gpu[index];
        *g = tmpl;
        char text[320];
        snprintf(text, sizeof text, "%s/gpu/%u", seed, index);
        if (*uuid)
            snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
        else
            uuid_of("GPU", text, g->uuid, sizeof g->uuid);
        for (unsigned j = 0; j < index; j++)
            if (!strcmp(node->gpu[j].uuid, g->uuid))
                return fail("%s.uuid: %s is used by two GPUs", where, g->uuid);
        snprintf(g->name, sizeof g->name, "%s", prod->product_name);
        g->mem_bytes = (uint64_t)prod->memory_mib << 20;
        /* the buses of an 8-GPU HGX board, then any */
        static const unsigned buses[] = { 0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb };
        g->pci_bus = index < 8 ? buses[index] : 0xe0 + index;
        node->ngpu++;
    }
    return 0;
}

static const char *stem_of(const char *path, char *buf, size_t len)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(buf, len, "%s", base);
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf)
        *dot = 0;
    return buf;
}

static int decode_node(yaml_document_t *d, const char *path, struct node_desc *node)
{
    yaml_node_t *root = yaml_document_get_root_node(d);
    const char *api, *kind, *name, *seed, *cuda, *driver;
    char stem[256];
    if (y_expect(root, Y_MAP, "node file") || y_check_fields(d, root, "", NODE_REQUIRED, NODE_OPTIONAL))
        return -1;
    y_str(d, root, "apiVersion", "", "", &api);
    if (y_type(y_get(d, root, "apiVersion")) != Y_STR || strcmp(api, FAKE_SIM_API_VERSION))
        return fail("apiVersion: expected '%s', got '%s'", FAKE_SIM_API_VERSION, y_text(y_get(d, root, "apiVersion")));
    y_str(d, root, "kind", "", "", &kind);
    if (y_type(y_get(d, root, "kind")) != Y_STR || strcmp(kind, FAKE_SIM_NODE_KIND))
        return fail("kind: expected '%s', got '%s'", FAKE_SIM_NODE_KIND, y_text(y_get(d, root, "kind")));
    if (y_str(d, root, "nodeName", "", stem_of(path, stem, sizeof stem), &name) ||
        y_str(d, root, "seed", "", name, &seed) ||
        y_str(d, root, "driverVersion", "", DEFAULT_DRIVER_VERSION, &driver) ||
        y_str(d, root, "cudaDriverVersion", "", DEFAULT_CUDA_DRIVER_VERSION, &cuda))
        return -1;
    snprintf(node->driver_version, sizeof node->driver_version, "%s", driver);
    if (parse_cuda_version(cuda, &node->cuda_version))
        return -1;
    if (y_long(d, root, "hostMemoryGiB", "", DEFAULT_HOST_MEMORY_GIB, &node->host_memory_gib))
        return -1;
    if (node->host_memory_gib < 1 || node->host_memory_gib > MAX_HOST_MEMORY_GIB)
        return fail("hostMemoryGiB: expected 1..%ld (GiB), got %ld", MAX_HOST_MEMORY_GIB, node->host_memory_gib);
    yaml_node_t *gpus = y_get(d, root, "gpus");
    if (y_expect(gpus, Y_SEQ, "gpus"))
        return -1;
    unsigned k = 0;
    for (yaml_node_item_t *it = gpus->data.sequence.items.start; it < gpus->data.sequence.items.top; it++, k++) {
        char where[32];
        snprintf(where, sizeof where, "gpus[%u]", k);
        if (decode_gpus(d, yaml_document_get_node(d, *it), where, seed, node))
            return -1;
    }
    if (!node->ngpu)
        return fail("gpus: list at least one GPU");
    node->from_file = 1;
    return 0;
}

static int load_node_file(const char *path, struct node_desc *node)
{
    yaml_document_t doc;
    memset(node, 0, sizeof *node);
    if (y_load(path, &doc))
        return -1;
    int rc = decode_node(&doc, path, node);
    yaml_document_delete(&doc);
    return rc;
}

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

/* No node file: the plain GPUs the interception library's tests expect */
static void plain_node(struct node_desc *node)
{
    memset(node, 0, sizeof *node);
    node->host_memory_gib = DEFAULT_HOST_MEMORY_GIB;
    node->ngpu = (unsigned)env_u64("FAKE_GPU_COUNT", 2);
    if (node->ngpu > FAKE_MAXDEV)
        node->ngpu = FAKE_MAXDEV;
    uint64_t mem = env_u64("FAKE_GPU_MEM_MB", 81920) << 20;
    for (unsigned i = 0; i < node->ngpu; i++) {
        struct gpu_desc *g = &node->gpu[i];
        snprintf(g->uuid, sizeof g->uuid, "GPU-7e55e7a0-1234-4567-89ab-cdef000000%02x", i);
        snprintf(g->name, sizeof g->name, "Fake H100 80GB");
        g->mem_bytes = mem;
        g->pci_bus = 0x18 + 0x10 * i;
        g->healthy = 1;
        g->numa_node = -1;
    }
    snprintf(node->driver_version, sizeof node->driver_version, "%s", DEFAULT_DRIVER_VERSION);
    node->cuda_version = 12040;
}
