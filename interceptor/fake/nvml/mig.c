/* The MIG model: MIG mode, GPU instances at placements, compute instances, checked and numbered the way the
 * driver does it. Pure: operates on a `struct mig_state`; state.c persists it.
 *
 * - MIG mode: Hopper and newer switch at once (the GPU is idle: the fake runs no work); Ampere only records
 *   the pending mode, which a GPU reset (fakeNvmlResetGpu) applies. Disabling with GPU instances: IN_USE.
 * - GPU instance ids are the driver's partition ids: each memory size has its own range (8 slices: 0,
 *   4: 1-2, 2: 3-6, 1: 7-14 on an 8-slice GPU) and a new instance takes the lowest free id of its range, so
 *   the id depends on what exists, not on the placement. Compute instance ids: lowest free from 0.
 * - An occupied or overlapping placement, a profile at its maximum: INSUFFICIENT_RESOURCES; a start that is
 *   not a placement of the profile: INVALID_ARGUMENT; destroying a GPU instance with compute instances:
 *   IN_USE. */
#include <sys/random.h>

struct ci_rec {
    unsigned char used;
    unsigned profile;
    char uuid[48];
};

struct gi_rec {
    unsigned char used;
    unsigned profile, start;
    struct ci_rec ci[FAKE_NCI];
};

struct gpu_rec {
    unsigned mig_current, mig_pending;
    struct gi_rec gi[FAKE_NGI];
};

struct mig_state {
    struct gpu_rec gpu[FAKE_MAXDEV];
};

/* compute slices of NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by index (the profile id equals the index) */
static const unsigned CI_SLICES[] = { 1, 2, 3, 4, 7, 8, 6 };
#define CI_NPROFILES (sizeof CI_SLICES / sizeof CI_SLICES[0])

static int toggles_without_reset(const struct fake_product *p)
{
    return p->architecture >= 9; /* NVML_DEVICE_ARCH_HOPPER */
}

static const struct fake_profile *profile_by_index(const struct fake_product *p, unsigned index)
{
    for (unsigned i = 0; p && i < p->nprofiles; i++)
        if (p->profiles[i].index == index)
            return &p->profiles[i];
    return NULL;
}

static int gpu_has_instances(const struct gpu_rec *g)
{
    for (unsigned i = 0; i < FAKE_NGI; i++)
        if (g->gi[i].used)
            return 1;
    return 0;
}

static unsigned gi_ci_count(const struct gi_rec *gi)
{
    unsigned n = 0;
    for (unsigned c = 0; c < FAKE_NCI; c++)
        n += gi->ci[c].used;
    return n;
}

static nvmlReturn_t mig_set_mode(const struct gpu_desc *d, struct gpu_rec *g, unsigned mode, nvmlReturn_t *status)
{
    if (!d->prod || !d->prod->memory_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    if (mode != NVML_DEVICE_MIG_ENABLE && mode != NVML_DEVICE_MIG_DISABLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mode == NVML_DEVICE_MIG_DISABLE && gpu_has_instances(g))
        return NVML_ERROR_IN_USE;
    g->mig_pending = mode;
    if (toggles_without_reset(d->prod))
        g->mig_current = mode;
    *status = g->mig_current == g->mig_pending ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED;
    return NVML_SUCCESS;
}

/* A GPU reset: the pending MIG mode takes effect; refused while instances exist. */
static nvmlReturn_t mig_reset(struct gpu_rec *g)
{
    if (gpu_has_instances(g))
        return NVML_ERROR_IN_USE;
    g->mig_current = g->mig_pending;
    return NVML_SUCCESS;
}

static int placement_overlaps(const struct gpu_desc *d, const struct gpu_rec *g, unsigned start, unsigned size)
{
    for (unsigned i = 0; i < FAKE_NGI; i++) {
        const struct gi_rec *gi = &g->gi[i];
        const struct fake_profile *p = gi->used ? profile_by_id(d->prod, gi->profile) : NULL;
        if (p && start < gi->start + p->memory_slices && gi->start < start + size)
            return 1;
    }
    return 0;
}

static nvmlReturn_t mig_create_gi(const struct gpu_desc *d, struct gpu_rec *g, unsigned profile_id, unsigned start,
                                  unsigned *id)
{
    const struct fake_profile *p = d->prod ? profile_by_id(d->prod, profile_id) : NULL;
    if (!d->prod || !d->prod->memory_slices || g->mig_current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!p || !has_start(p, start))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned count = 0;
    for (unsigned i = 0; i < FAKE_NGI; i++)
        count += g->gi[i].used && g->gi[i].profile == profile_id;
    if (count >= p->max_instances || placement_overlaps(d, g, start, p->memory_slices))
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned range = d->prod->memory_slices / p->memory_slices, first = range - 1;
    for (unsigned i = first; i < first + range && i < FAKE_NGI; i++) {
        if (!g->gi[i].used) {
            g->gi[i] = (struct gi_rec){ .used = 1, .profile = profile_id, .start = start };
            *id = i;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

static nvmlReturn_t mig_destroy_gi(struct gpu_rec *g, unsigned id)
{
    if (id >= FAKE_NGI || !g->gi[id].used)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gi_ci_count(&g->gi[id]))
        return NVML_ERROR_IN_USE;
    g->gi[id].used = 0;
    return NVML_SUCCESS;
}

/* The compute-instance profile `index` of a GPU instance of profile `gi`: NOT_SUPPORTED when it does not fit. */
static nvmlReturn_t ci_profile(const struct fake_product *prod, const struct fake_profile *gi, unsigned index,
                               nvmlComputeInstanceProfileInfo_v3_t *out)
{
    if (index >= CI_NPROFILES)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned slices = CI_SLICES[index];
    if (slices > gi->compute_slices || slices == 6 || slices == 8)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned sms = gi->sms;
    if (slices < gi->compute_slices) {
        /* the SMs of a GPU instance of that many compute slices (the plain, non-+me profile) */
        const struct fake_profile *same = profile_by_index(prod, index);
        sms = same ? same->sms : gi->sms * slices / gi->compute_slices;
    }
    *out = (nvmlComputeInstanceProfileInfo_v3_t){
        .id = index,
        .sliceCount = slices,
        .instanceCount = gi->compute_slices / slices,
        .multiprocessorCount = sms,
        .sharedCopyEngineCount = gi->ce,
        .sharedDecoderCount = gi->dec,
        .sharedEncoderCount = gi->enc,
        .sharedJpegCount = gi->jpeg,
        .sharedOfaCount = gi->ofa,
    };
    if (slices == gi->compute_slices)
        snprintf(out->name, sizeof out->name, "MIG %s", gi->name);
    else
        snprintf(out->name, sizeof out->name, "MIG %uc.%s", slices, gi->name);
    return NVML_SUCCESS;
}

static void random_mig_uuid(char *out, size_t len)
{
    unsigned char b[16] = { 0 };
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        memcpy(b, &t, sizeof t < sizeof b ? sizeof t : sizeof b);
        b[15] ^= (unsigned char)getpid();
    }
    snprintf(out, len, "MIG-%02x%02x%02x%02x-%02x%02x-4%x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6] & 0xf, b[7], (b[8] & 0x3f) | 0x80, b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* `uuid` NULL: a fresh random MIG UUID, as the driver makes one per compute instance. */
static nvmlReturn_t mig_create_ci(const struct gpu_desc *d, struct gpu_rec *g, unsigned gi_id, unsigned profile_id,
                                  const char *uuid, unsigned *id)
{
    if (gi_id >= FAKE_NGI || !g->gi[gi_id].used)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct gi_rec *gi = &g->gi[gi_id];
    const struct fake_profile *gp = profile_by_id(d->prod, gi->profile);
    nvmlComputeInstanceProfileInfo_v3_t info;
    nvmlReturn_t rc = gp ? ci_profile(d->prod, gp, profile_id, &info) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc == NVML_ERROR_NOT_SUPPORTED ? NVML_ERROR_INVALID_ARGUMENT : rc;
    unsigned used = 0, same = 0;
    for (unsigned c = 0; c < FAKE_NCI; c++) {
        if (gi->ci[c].used) {
            used += CI_SLICES[gi->ci[c].profile];
            same += gi->ci[c].profile == profile_id;
        }
    }
    if (used + info.sliceCount > gp->compute_slices || same >= info.instanceCount)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (unsigned c = 0; c < FAKE_NCI; c++) {
        if (!gi->ci[c].used) {
            gi->ci[c] = (struct ci_rec){ .used = 1, .profile = profile_id };
            if (uuid)
                snprintf(gi->ci[c].uuid, sizeof gi->ci[c].uuid, "%s", uuid);
            else
                random_mig_uuid(gi->ci[c].uuid, sizeof gi->ci[c].uuid);
            *id = c;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

static nvmlReturn_t mig_destroy_ci(struct gpu_rec *g, unsigned gi_id, unsigned ci_id)
{
    if (gi_id >= FAKE_NGI || ci_id >= FAKE_NCI || !g->gi[gi_id].used || !g->gi[gi_id].ci[ci_id].used)
        return NVML_ERROR_INVALID_ARGUMENT;
    g->gi[gi_id].ci[ci_id].used = 0;
    return NVML_SUCCESS;
}

/* The i-th MIG device (compute instance) of a GPU, ordered by GPU instance id then compute instance id. */
static int mig_device_at(const struct gpu_rec *g, unsigned index, unsigned *gi_id, unsigned *ci_id)
{
    unsigned n = 0;
    for (unsigned i = 0; i < FAKE_NGI; i++)
        for (unsigned c = 0; g->gi[i].used && c < FAKE_NCI; c++)
            if (g->gi[i].ci[c].used && n++ == index) {
                *gi_id = i;
                *ci_id = c;
                return 1;
            }
    return 0;
}

/* The state before anything ran: MIG mode and the administrator's instances from the node file, each with a
 * compute instance spanning it and a MIG UUID stable across restarts without a state file. */
static void initial_gpu(const struct gpu_desc *d, struct gpu_rec *g)
{
    memset(g, 0, sizeof *g);
    g->mig_current = g->mig_pending = d->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    for (unsigned i = 0; i < d->nadmin; i++) {
        const struct fake_profile *p = d->admin[i].prof;
        unsigned gi, ci;
        char text[160], uuid[48];
        if (mig_create_gi(d, g, p->id, d->admin[i].start, &gi) != NVML_SUCCESS)
            continue; /* the node file was checked: cannot happen */
        snprintf(text, sizeof text, "%s/mig/%u", d->uuid, d->admin[i].start);
        uuid_of("MIG", text, uuid, sizeof uuid);
        for (unsigned k = 0; k < CI_NPROFILES; k++)
            if (CI_SLICES[k] == p->compute_slices)
                mig_create_ci(d, g, gi, k, uuid, &ci);
    }
}
