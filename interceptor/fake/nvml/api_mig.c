/* MIG entry points: mode, profiles, placements, GPU and compute instances, MIG device handles
 * (#included by fake_nvml.c; the rules are in mig.c, the persistence in state.c). */

/* A change to one GPU's MIG state under the state lock; `ok` says whether `gpu` is a MIG-capable GPU. */
#define MUTATE(ok, gpu_index, expr)                                      \
    do {                                                                 \
        int fd_;                                                         \
        nvmlReturn_t rc_ = ready(0);                                     \
        if (rc_)                                                         \
            return rc_;                                                  \
        if ((rc_ = state_begin(&fd_)))                                   \
            return rc_;                                                  \
        if (!(ok))                                                       \
            return state_end(fd_, NVML_ERROR_INVALID_ARGUMENT);          \
        struct gpu_rec *g_ = &g_st.gpu[gpu_index];                       \
        (void)g_;                                                        \
        return state_end(fd_, (expr));                                   \
    } while (0)

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *current, unsigned *pending)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc || !gpu_of(d) || !current || !pending)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *current = g_st.gpu[d->gpu].mig_current;
    *pending = g_st.gpu[d->gpu].mig_pending;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t d, unsigned mode, nvmlReturn_t *status)
{
    LOCKED;
    nvmlReturn_t ignored;
    MUTATE(gpu_of(d), d->gpu, mig_set_mode(gpu_of(d), g_, mode, status ? status : &ignored));
}

static nvmlReturn_t gi_profile(nvmlDevice_t d, unsigned index, const struct fake_profile **out)
{
    nvmlReturn_t rc = ready(0);
    if (rc || !gpu_of(d))
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (index >= 0x12) /* NVML_GPU_INSTANCE_PROFILE_COUNT */
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = mig_capable(d) ? profile_by_index(gpu_of(d)->prod, index) : NULL;
    return *out ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned index, nvmlGpuInstanceProfileInfo_t *info)
{
    LOCKED;
    const struct fake_profile *p;
    nvmlReturn_t rc = info ? gi_profile(d, index, &p) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc)
        return rc;
    *info = (nvmlGpuInstanceProfileInfo_t){
        .id = p->id, .sliceCount = p->compute_slices, .instanceCount = p->max_instances,
        .multiprocessorCount = p->sms, .copyEngineCount = p->ce, .decoderCount = p->dec,
        .encoderCount = p->enc, .jpegCount = p->jpeg, .ofaCount = p->ofa, .memorySizeMB = p->memory_mib,
    };
    return NVML_SUCCESS;
}

/* what pynvml's nvmlDeviceGetGpuInstanceProfileInfo(h, index, version=2) calls; v3 is answered too */
API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned index, void *info)
{
    LOCKED;
    const struct fake_profile *p;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned version = *(unsigned *)info;
    if (version != nvmlGpuInstanceProfileInfo_v2 && version != nvmlGpuInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t rc = gi_profile(d, index, &p);
    if (rc)
        return rc;
    char name[NVML_NAME_LEN];
    snprintf(name, sizeof name, "MIG %s", p->name);
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t *v = info;
        *v = (nvmlGpuInstanceProfileInfo_v2_t){
            .version = version, .id = p->id, .sliceCount = p->compute_slices, .instanceCount = p->max_instances,
            .multiprocessorCount = p->sms, .copyEngineCount = p->ce, .decoderCount = p->dec,
            .encoderCount = p->enc, .jpegCount = p->jpeg, .ofaCount = p->ofa, .memorySizeMB = p->memory_mib,
        };
        memcpy(v->name, name, sizeof name);
    } else {
        nvmlGpuInstanceProfileInfo_v3_t *v = info;
        *v = (nvmlGpuInstanceProfileInfo_v3_t){
            .version = version, .id = p->id, .sliceCount = p->compute_slices, .instanceCount = p->max_instances,
            .multiprocessorCount = p->sms, .copyEngineCount = p->ce, .decoderCount = p->dec,
            .encoderCount = p->enc, .jpegCount = p->jpeg, .ofaCount = p->ofa, .memorySizeMB = p->memory_mib,
        };
        memcpy(v->name, name, sizeof name);
    }
    return NVML_SUCCESS;
}

/* Every placement of the profile, whether MIG is on and whatever is taken (as the real call answers). */
API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned profile_id,
                                                               nvmlGpuInstancePlacement_t *placements, unsigned *count)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    const struct gpu_desc *g = mig_capable(d);
    if (rc || !gpu_of(d) || !count)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (!g)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct fake_profile *p = profile_by_id(g->prod, profile_id);
    if (!p)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; placements && i < p->nstarts; i++)
        placements[i] = (nvmlGpuInstancePlacement_t){ .start = p->starts[i], .size = p->memory_slices };
    *count = p->nstarts;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t d, unsigned profile_id, unsigned *count)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    const struct gpu_desc *g = mig_capable(d);
    if (rc || !gpu_of(d) || !count)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (!g || g_st.gpu[d->gpu].mig_current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct fake_profile *p = profile_by_id(g->prod, profile_id);
    if (!p)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* how many more could be created, one after another, at the lowest free placements */
    struct gpu_rec trial = g_st.gpu[d->gpu];
    unsigned n = 0, id;
    for (unsigned i = 0; i < p->nstarts; i++)
        n += mig_create_gi(g, &trial, profile_id, p->starts[i], &id) == NVML_SUCCESS;
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned profile_id,
                                                          const nvmlGpuInstancePlacement_t *placement,
                                                          nvmlGpuInstance_t *gi)
{
    LOCKED;
    const struct gpu_desc *g = gpu_of(d);
    const struct fake_profile *p = g ? profile_by_id(g->prod, profile_id) : NULL;
    if (g && p && placement && placement->size != p->memory_slices)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned id = 0;
    nvmlReturn_t rc;
    {
        int fd;
        if ((rc = ready(0)) || (rc = state_begin(&fd)))
            return rc;
        rc = g && placement && gi ? mig_create_gi(g, &g_st.gpu[d->gpu], profile_id, placement->start, &id)
                                  : NVML_ERROR_INVALID_ARGUMENT;
        rc = state_end(fd, rc);
    }
    if (rc == NVML_SUCCESS)
        *gi = &g_gih[d->gpu][id];
    return rc;
}

API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned profile_id, nvmlGpuInstance_t *gi)
{
    LOCKED;
    const struct gpu_desc *g = gpu_of(d);
    const struct fake_profile *p = g ? profile_by_id(g->prod, profile_id) : NULL;
    unsigned id = 0;
    int fd;
    nvmlReturn_t rc;
    if ((rc = ready(0)) || (rc = state_begin(&fd)))
        return rc;
    rc = g && gi ? (p ? NVML_ERROR_INSUFFICIENT_RESOURCES : NVML_ERROR_INVALID_ARGUMENT) : NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; p && gi && i < p->nstarts && rc == NVML_ERROR_INSUFFICIENT_RESOURCES; i++)
        rc = mig_create_gi(g, &g_st.gpu[d->gpu], profile_id, p->starts[i], &id);
    rc = state_end(fd, rc);
    if (rc == NVML_SUCCESS)
        *gi = &g_gih[d->gpu][id];
    return rc;
}

API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi)
{
    LOCKED;
    MUTATE(gi_of(gi), gi->gpu, mig_destroy_gi(g_, gi->gi));
}

API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned profile_id, nvmlGpuInstance_t *out, unsigned *count)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    const struct gpu_desc *g = mig_capable(d);
    if (rc || !gpu_of(d) || !count)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (!g || g_st.gpu[d->gpu].mig_current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!profile_by_id(g->prod, profile_id))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned k = 0; k < FAKE_NGI; k++)
        if (g_st.gpu[d->gpu].gi[k].used && g_st.gpu[d->gpu].gi[k].profile == profile_id) {
            if (out)
                out[n] = &g_gih[d->gpu][k];
            n++;
        }
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned id, nvmlGpuInstance_t *gi)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc || !gpu_of(d) || !gi)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(d) || g_st.gpu[d->gpu].mig_current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    if (id >= FAKE_NGI || !g_st.gpu[d->gpu].gi[id].used)
        return NVML_ERROR_NOT_FOUND;
    *gi = &g_gih[d->gpu][id];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *info)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    const struct gi_rec *gi = rc ? NULL : gi_of(h);
    if (rc || !gi || !info)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    const struct fake_profile *p = profile_by_id(g_node.gpu[h->gpu].prod, gi->profile);
    *info = (nvmlGpuInstanceInfo_t){
        .device = &g_dev[h->gpu], .id = h->gi, .profileId = gi->profile,
        .placement = { .start = gi->start, .size = p ? p->memory_slices : 0 },
    };
    return NVML_SUCCESS;
}

static nvmlReturn_t gi_ci_profile(nvmlGpuInstance_t h, unsigned index, unsigned eng,
                                  nvmlComputeInstanceProfileInfo_v3_t *out)
{
    nvmlReturn_t rc = ready(1);
    const struct gi_rec *gi = rc ? NULL : gi_of(h);
    if (rc || !gi)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct fake_product *prod = g_node.gpu[h->gpu].prod;
    return ci_profile(prod, profile_by_id(prod, gi->profile), index, out);
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t h, unsigned index, unsigned eng,
                                                              nvmlComputeInstanceProfileInfo_t *info)
{
    LOCKED;
    nvmlComputeInstanceProfileInfo_v3_t v;
    nvmlReturn_t rc = info ? gi_ci_profile(h, index, eng, &v) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc)
        return rc;
    *info = (nvmlComputeInstanceProfileInfo_t){
        .id = v.id, .sliceCount = v.sliceCount, .instanceCount = v.instanceCount,
        .multiprocessorCount = v.multiprocessorCount, .sharedCopyEngineCount = v.sharedCopyEngineCount,
        .sharedDecoderCount = v.sharedDecoderCount, .sharedEncoderCount = v.sharedEncoderCount,
        .sharedJpegCount = v.sharedJpegCount, .sharedOfaCount = v.sharedOfaCount,
    };
    return NVML_SUCCESS;
}

/* what pynvml's nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, eng, version=2) calls */
API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t h, unsigned index, unsigned eng,
                                                               void *info)
{
    LOCKED;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned version = *(unsigned *)info;
    if (version != nvmlComputeInstanceProfileInfo_v2 && version != nvmlComputeInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlComputeInstanceProfileInfo_v3_t v;
    nvmlReturn_t rc = gi_ci_profile(h, index, eng, &v);
    if (rc)
        return rc;
    v.version = version;
    /* v2 is v3 without the trailing `capabilities` */
    memcpy(info, &v, version == nvmlComputeInstanceProfileInfo_v2 ? sizeof(nvmlComputeInstanceProfileInfo_v2_t)
                                                                   : sizeof v);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t h, unsigned profile_id,
                                                      nvmlComputeInstance_t *ci)
{
    LOCKED;
    unsigned id = 0, gpu = 0, gi_id = 0;
    int fd;
    nvmlReturn_t rc;
    if ((rc = ready(0)) || (rc = state_begin(&fd)))
        return rc;
    if (gi_of(h) && ci) {
        gpu = h->gpu;
        gi_id = h->gi;
        rc = mig_create_ci(&g_node.gpu[gpu], &g_st.gpu[gpu], gi_id, profile_id, NULL, &id);
    } else {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    }
    rc = state_end(fd, rc);
    if (rc == NVML_SUCCESS)
        *ci = &g_cih[gpu][gi_id][id];
    return rc;
}

API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci)
{
    LOCKED;
    MUTATE(ci_of(ci), ci->gpu, mig_destroy_ci(g_, ci->gi, ci->ci));
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t h, unsigned profile_id,
                                                    nvmlComputeInstance_t *out, unsigned *count)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    const struct gi_rec *gi = rc ? NULL : gi_of(h);
    if (rc || !gi || !count)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (profile_id >= CI_NPROFILES)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned c = 0; c < FAKE_NCI; c++)
        if (gi->ci[c].used && gi->ci[c].profile == profile_id) {
            if (out)
                out[n] = &g_cih[h->gpu][h->gi][c];
            n++;
        }
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t h, unsigned id, nvmlComputeInstance_t *ci)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    const struct gi_rec *gi = rc ? NULL : gi_of(h);
    if (rc || !gi || !ci)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (id >= FAKE_NCI || !gi->ci[id].used)
        return NVML_ERROR_NOT_FOUND;
    *ci = &g_cih[h->gpu][h->gi][id];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    const struct ci_rec *ci = rc ? NULL : ci_of(h);
    if (rc || !ci || !info)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *info = (nvmlComputeInstanceInfo_t){
        .device = &g_dev[h->gpu], .gpuInstance = &g_gih[h->gpu][h->gi], .id = h->ci, .profileId = ci->profile,
        .placement = { .start = 0, .size = CI_SLICES[ci->profile] },
    };
    return NVML_SUCCESS;
}

/* 0 unless MIG mode is on; then the GPU's compute slices (7 on A100/H100/H200, 4 on A30) */
API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *count)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    const struct gpu_desc *g = gpu_of(d);
    if (rc || !g || !count)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned i = 0; mig_capable(d) && g_st.gpu[d->gpu].mig_current && i < g->prod->nprofiles; i++)
        n = g->prod->profiles[i].compute_slices > n ? g->prod->profiles[i].compute_slices : n;
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned index, nvmlDevice_t *mig)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc || !gpu_of(d) || !mig || index >= FAKE_MAX_MIG_DEVICES)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(d) || g_st.gpu[d->gpu].mig_current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned gi, ci;
    if (!mig_device_at(&g_st.gpu[d->gpu], index, &gi, &ci))
        return NVML_ERROR_NOT_FOUND;
    *mig = &g_mig[d->gpu][gi][ci];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned *is_mig)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc || !is_mig || (!gpu_of(d) && !mig_of(d)))
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = mig_of(d) != NULL;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent)
{
    LOCKED;
    nvmlReturn_t rc = ready(1);
    if (rc || !mig_of(d) || !parent)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *parent = &g_dev[d->gpu];
    return NVML_SUCCESS;
}

/* the GPU and compute instance ids of a MIG device handle (either pointer may be NULL) */
static nvmlReturn_t mig_ids(nvmlDevice_t d, unsigned *gi, unsigned *ci)
{
    nvmlReturn_t rc = ready(1);
    if (rc || !mig_of(d) || (!gi && !ci))
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if (gi)
        *gi = d->gi;
    if (ci)
        *ci = d->ci;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned *id)
{
    LOCKED;
    return id ? mig_ids(d, id, NULL) : NVML_ERROR_INVALID_ARGUMENT;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned *id)
{
    LOCKED;
    return id ? mig_ids(d, NULL, id) : NVML_ERROR_INVALID_ARGUMENT;
}
