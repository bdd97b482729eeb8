/* Device records: one per GPU UUID seen by this process, holding its limits
 * and its place in a claim's region. CUDA ordinals and NVML handles map to
 * records; the maps are filled once per device under g_dev_mutex. */
#include <pthread.h>
#include <string.h>

#include "config.h"
#include "devices.h"
#include "hooks.h"
#include "util.h"

static struct dev_rec g_recs[MAX_RECS];
static int g_nrecs;
static pthread_mutex_t g_dev_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_cuda_map[MAX_RECS];   /* CUdevice -> record index + 1 */
static struct {
    nvmlDevice_t h;
    int rec;
} g_nvml_map[MAX_RECS];
static int g_nnvml;
static int g_acct;                 /* anything configured at all; set once at start-up */

int devices_init(void)
{
    g_acct = cfg_acct_any();
    return g_acct;
}

int acct_on(void)
{
    return g_acct;
}

static struct dev_rec *rec_create_locked(const char *uuid, int ordinal)
{
    for (int i = 0; i < g_nrecs; i++)
        if (!strcmp(g_recs[i].uuid, uuid))
            return &g_recs[i];
    if (g_nrecs == MAX_RECS)
        return NULL;
    struct dev_rec *d = &g_recs[g_nrecs];
    memset(d, 0, sizeof *d);
    str_copy(d->uuid, sizeof d->uuid, uuid);
    d->g = -1;
    struct gpu_limits lim;
    int claim = cfg_lookup(uuid, ordinal, &lim);
    if (claim >= 0) {
        struct region_handle *h = region_of_claim(claim);
        if (h) {
            d->g = region_gpu_slot(h, uuid, lim.memory, lim.cores, lim.priority);
            if (d->g >= 0)
                d->rh = h;
        }
        d->limit = lim.memory;
        d->res_g = -1;
        if (lim.spill && d->rh) {
            /* the claim's device-held bytes get an entry of their own in its region (its layout unchanged) */
            char held[TR_UUID_LEN];
            fmt_s(held, sizeof held, "%s" TR_HELD_SUFFIX, uuid);
            d->res_g = region_gpu_slot(d->rh, held, lim.resident, 0, 1);
            d->spill = d->res_g >= 0;
            d->resident = lim.resident;
            if (!d->spill) {
                /* no place to count them: keep the claim within what the device holds for it */
                d->limit = lim.resident;
                tlog(LOG_WARN, "%s: the claim's region has no room to count its device memory; limiting it to "
                     "%llu bytes, without oversubscription", uuid, (unsigned long long)lim.resident);
            }
        }
        d->cores = lim.cores >= 100 ? 0 : lim.cores;
        d->priority = lim.priority;
        d->ctx_default = lim.context;
        d->sm_limited = d->rh && cfg_sm_applies(d->cores, lim.priority);
        d->cap_ns = (int64_t)(cfg_window_ns() * d->cores / 100);
        d->stamps = d->rh && lim.priority == 0 && cfg_priority_applies();
        d->view = d->rh && lim.priority != 0 && lim.view[0] && cfg_priority_applies() ? view_open(lim.view) : NULL;
        d->slot = d->view ? lim.slot : 0;
        d->ceiling = d->sm_limited ? lim.ceiling : 0;
        d->watched = d->sm_limited || d->stamps || d->view;
        tlog(LOG_INFO, "%s (ordinal %d): memory limit %llu bytes, cores %u%%, priority %d, policy %s, SM limiter %s, "
             "priority %s, %s", uuid, ordinal, (unsigned long long)lim.memory, d->cores, (int)lim.priority,
             cfg_policy_name(), d->sm_limited ? "on" : "off",
             d->stamps ? "high (stamps its work)" : d->view ? "normal (held behind high)" : "not arbitrated",
             d->rh ? "accounted" : "NOT accounted");
        if (d->spill)
            tlog(LOG_INFO, "%s: memory oversubscription: %llu of the limit held on the device, the rest served "
                 "from managed memory (cuMemAlloc)", uuid, (unsigned long long)d->resident);
    }
    __atomic_store_n(&g_nrecs, g_nrecs + 1, __ATOMIC_RELEASE);
    return d;
}

struct dev_rec *rec_for_cuda(CUdevice dev)
{
    if (dev < 0 || dev >= MAX_RECS)
        return NULL;
    int idx = __atomic_load_n(&g_cuda_map[dev], __ATOMIC_ACQUIRE);
    if (!idx) {
        CUuuid u;
        if (!r_cuDeviceGetUuid || r_cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS)
            return NULL;
        char uuid[48];
        uuid_format((const unsigned char *)u.bytes, uuid);
        pthread_mutex_lock(&g_dev_mutex);
        struct dev_rec *d = rec_create_locked(uuid, dev);
        if (d)
            __atomic_store_n(&g_cuda_map[dev], (int)(d - g_recs) + 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&g_dev_mutex);
        idx = d ? (int)(d - g_recs) + 1 : 0;
        if (!idx)
            return NULL;
    }
    struct dev_rec *d = &g_recs[idx - 1];
    return d->rh ? d : NULL;
}

struct dev_rec *rec_current(void)
{
    CUdevice dev;
    if (!r_cuCtxGetDevice || r_cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return NULL;
    return rec_for_cuda(dev);
}

static struct dev_rec *rec_for_nvml(nvmlDevice_t h)
{
    int n = __atomic_load_n(&g_nnvml, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_nvml_map[i].h == h)
            return g_recs[g_nvml_map[i].rec].rh ? &g_recs[g_nvml_map[i].rec] : NULL;
    char uuid[96];
    unsigned idx = 0;
    if (!r_nvmlDeviceGetUUID || r_nvmlDeviceGetUUID(h, uuid, sizeof uuid) != NVML_SUCCESS)
        return NULL;
    if (!r_nvmlDeviceGetIndex || r_nvmlDeviceGetIndex(h, &idx) != NVML_SUCCESS)
        idx = (unsigned)-1;
    pthread_mutex_lock(&g_dev_mutex);
    struct dev_rec *d = rec_create_locked(uuid, (int)idx);
    if (d && g_nnvml < MAX_RECS) {
        g_nvml_map[g_nnvml].h = h;
        g_nvml_map[g_nnvml].rec = (int)(d - g_recs);
        __atomic_store_n(&g_nnvml, g_nnvml + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_dev_mutex);
    return d && d->rh ? d : NULL;
}

void acct_view(struct dev_rec *d, uint64_t real_total, uint64_t real_free, uint64_t *total, uint64_t *free_b,
               uint64_t *used)
{
    region_refresh(d->rh);
    uint64_t u = region_used(d->rh, d->g);
    uint64_t t = d->limit && d->limit < real_total ? d->limit : real_total;
    uint64_t f = u < t ? t - u : 0;
    if (f > real_free)
        f = real_free;
    if (d->spill) {
        /* oversubscribed: the whole limit, host-backed past what the device holds, is the claim's GPU */
        t = d->limit;
        f = u < t ? t - u : 0;
    }
    if (d->limit && region_closed(d->rh))
        f = 0; /* failed closed: nothing more can be had, whatever this process gave back */
    *total = t;
    *free_b = f;
    *used = u < t ? u : t;
}

struct dev_rec *acct_current(void)
{
    if (!g_acct || t_in_hook)
        return NULL;
    return rec_current();
}

struct dev_rec *acct_cuda(CUdevice dev)
{
    if (!g_acct || t_in_hook)
        return NULL;
    return rec_for_cuda(dev);
}

struct dev_rec *acct_nvml(nvmlDevice_t h)
{
    if (!g_acct || t_in_hook)
        return NULL;
    return rec_for_nvml(h);
}

unsigned rec_index(const struct dev_rec *d)
{
    return (unsigned)(d - g_recs);
}

struct dev_rec *rec_at(unsigned i)
{
    i &= ~REC_HELD;
    return i < (unsigned)MAX_RECS && g_recs[i].rh ? &g_recs[i] : NULL;
}

void rec_release(unsigned rec, uint64_t size)
{
    struct dev_rec *d = rec_at(rec);
    if (!d)
        return;
    acct_release(d, size);
    if ((rec & REC_HELD) && d->spill)
        acct_release_held(d, size);
}

/* A forked child starts with no records: they point at the parent's region
 * slots, which region_after_fork has dropped. */
void devices_after_fork(void)
{
    pthread_mutex_init(&g_dev_mutex, NULL);
    memset(g_cuda_map, 0, sizeof g_cuda_map);
    g_nnvml = 0;
    g_nrecs = 0;
}
