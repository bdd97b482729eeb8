/* The real driver entry points, resolved once, and the map from a real entry
 * point to our hook (used by dlsym and cuGetProcAddress: whatever name or
 * version the caller asked for, the driver's answer identifies the function). */

#define HOOK __attribute__((visibility("default")))

/* hooked driver API */
HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags, int *status);
HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size);
HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem);
HOOK CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags);
HOOK CUresult cuMemFree_v2(CUdeviceptr dptr);
HOOK CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s);
HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s);
HOOK CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s);
HOOK CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s);
HOOK CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s);
HOOK CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags);
HOOK CUresult cuMemRelease(CUmemGenericAllocationHandle h);
HOOK CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d);
HOOK CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d);
HOOK CUresult cuArrayDestroy(CUarray a);
HOOK CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels);
HOOK CUresult cuMipmappedArrayDestroy(CUmipmappedArray a);
HOOK CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b);
HOOK CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
/* the v1 ABI (32-bit sizes), still exported for old binaries */
HOOK CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int size);
HOOK CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width, unsigned int height, unsigned elem);
HOOK CUresult cuMemFree(CUdeviceptr_v1 dptr);
HOOK CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b);
HOOK CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
HOOK CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d);
HOOK CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d);
/* contexts */
HOOK CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice dev);
HOOK CUresult cuCtxCreate_v3(CUcontext *c, void *params, int nparams, unsigned flags, CUdevice dev);
HOOK CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned flags, CUdevice dev);
HOOK CUresult cuCtxDestroy_v2(CUcontext c);
HOOK CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxReset(CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
#define LAUNCH_PARAMS CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                      unsigned shmem, CUstream s, void **params, void **extra
HOOK CUresult cuLaunchKernel(LAUNCH_PARAMS);
HOOK CUresult cuLaunchKernel_ptsz(LAUNCH_PARAMS);
HOOK CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra);
HOOK CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra);
HOOK CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shmem, CUstream s, void **params);
HOOK CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params);
HOOK CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
HOOK CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);

/* driver API we call but do not hook */
CUresult cuCtxGetDevice(CUdevice *dev);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuEventCreate(CUevent *ev, unsigned flags);
CUresult cuEventDestroy_v2(CUevent ev);
CUresult cuEventRecord(CUevent ev, CUstream s);
CUresult cuEventRecord_ptsz(CUevent ev, CUstream s);
CUresult cuEventQuery(CUevent ev);
CUresult cuEventSynchronize(CUevent ev);
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end);

/* NVML */
HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem);
HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem);
HOOK nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_v1_t *infos);
HOOK nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_t *infos);
HOOK nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned len);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned *index);


#define CUDA_HOOKS(X)                                                                                       \
    X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged)  \
    X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)                   \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemCreate) X(cuMemRelease) \
    X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMipmappedArrayCreate)                   \
    X(cuMipmappedArrayDestroy) X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2) X(cuLaunchKernel)                  \
    X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel)        \
    X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch) X(cuGraphLaunch_ptsz) X(cuMemAlloc) X(cuMemAllocPitch)  \
    X(cuMemFree) X(cuMemGetInfo) X(cuDeviceTotalMem) X(cuArrayCreate) X(cuArray3DCreate) X(cuCtxCreate_v2)    \
    X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDestroy_v2) X(cuDevicePrimaryCtxRetain)                        \
    X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxReset)                   \
    X(cuDevicePrimaryCtxReset_v2)
#define CUDA_USED(X)                                                                                        \
    X(cuCtxGetDevice) X(cuCtxGetCurrent) X(cuDeviceGetUuid) X(cuEventCreate) X(cuEventDestroy_v2)           \
    X(cuEventRecord) X(cuEventRecord_ptsz) X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime)
#define NVML_HOOKS(X)                                                                                       \
    X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetComputeRunningProcesses)        \
    X(nvmlDeviceGetComputeRunningProcesses_v2) X(nvmlDeviceGetComputeRunningProcesses_v3)
#define NVML_USED(X) X(nvmlDeviceGetUUID) X(nvmlDeviceGetIndex) X(nvmlInit_v2) X(nvmlDeviceGetHandleByUUID)

#define DECLARE_REAL(n) static __typeof__(&n) r_##n;
CUDA_HOOKS(DECLARE_REAL)
CUDA_USED(DECLARE_REAL)
NVML_HOOKS(DECLARE_REAL)
NVML_USED(DECLARE_REAL)

struct hook_ent {
    const char *name;
    void **real;
    void *hook;
};
#define HOOK_ENT(n) { #n, (void **)&r_##n, (void *)&n },
#define USED_ENT(n) { #n, (void **)&r_##n, NULL },
static const struct hook_ent g_cuda_syms[] = { CUDA_HOOKS(HOOK_ENT) CUDA_USED(USED_ENT) };
static const struct hook_ent g_nvml_syms[] = { NVML_HOOKS(HOOK_ENT) NVML_USED(USED_ENT) };
#define NSYMS(a) (sizeof(a) / sizeof((a)[0]))

typedef void *(*dlsym_fn)(void *, const char *);
__attribute__((used)) static dlsym_fn g_real_dlsym;

/* A sanitizer runtime calls dlsym while it starts, before its shadow memory
 * exists: the dlsym path must not be instrumented. */
#define NO_ASAN __attribute__((no_sanitize_address))

NO_ASAN static dlsym_fn real_dlsym(void)
{
    dlsym_fn f = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&g_real_dlsym, f, __ATOMIC_RELEASE);
    }
    return f;
}

struct driver_lib {
    const char *soname;
    const struct hook_ent *syms;
    size_t nsyms;
    void *handle;
    int ready;
    pthread_once_t once;
};

static struct driver_lib g_cuda = { "libcuda.so.1", g_cuda_syms, NSYMS(g_cuda_syms), NULL, 0, PTHREAD_ONCE_INIT };
static struct driver_lib g_nvml = { "libnvidia-ml.so.1", g_nvml_syms, NSYMS(g_nvml_syms), NULL, 0, PTHREAD_ONCE_INIT };

static void resolve_lib(struct driver_lib *l)
{
    dlsym_fn rd = real_dlsym();
    for (size_t i = 0; i < l->nsyms; i++)
        __atomic_store_n(l->syms[i].real, rd ? rd(l->handle, l->syms[i].name) : NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&l->ready, 1, __ATOMIC_RELEASE);
}
static void resolve_cuda_once(void) { resolve_lib(&g_cuda); }
static void resolve_nvml_once(void) { resolve_lib(&g_nvml); }

static void ensure_init(void);

/* Resolves a driver library's entry points once it is loaded. With allow_load
 * the library is loaded if needed (a hook was called, so the program uses it). */
static int lib_ready(struct driver_lib *l, int allow_load)
{
    if (__atomic_load_n(&l->ready, __ATOMIC_ACQUIRE))
        return 1;
    ensure_init();
    void *h = dlopen(l->soname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h && allow_load)
        h = dlopen(l->soname, RTLD_LAZY);
    if (!h)
        return 0;
    __atomic_store_n(&l->handle, h, __ATOMIC_RELEASE);
    pthread_once(&l->once, l == &g_cuda ? resolve_cuda_once : resolve_nvml_once);
    return 1;
}

static void *hook_for(const struct driver_lib *l, void *real)
{
    for (size_t i = 0; i < l->nsyms; i++)
        if (l->syms[i].hook && __atomic_load_n(l->syms[i].real, __ATOMIC_RELAXED) == real)
            return l->syms[i].hook;
    return real;
}

/* dlsym(RTLD_NEXT) searches after the object that *called* dlsym, which glibc
 * finds from the return address. So for RTLD_NEXT the exported dlsym is a
 * stub that jumps to the real dlsym with the caller's return address still
 * on the stack; every other handle goes to tessera_dlsym (C, below). */
__attribute__((used, noinline, noclone)) NO_ASAN static void *tessera_dlsym_resolve(void)
{
    return (void *)real_dlsym();
}
__attribute__((used, noinline, noclone)) NO_ASAN static void *tessera_dlsym(void *handle, const char *name);

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        "dlsym:\n"
        "    cmpq $-1, %rdi\n"
        "    jne tessera_dlsym\n"
        "    movq g_real_dlsym(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"
        "    jmp *%rax\n"
        "1:  pushq %rdi\n"
        "    pushq %rsi\n"
        "    subq $8, %rsp\n"
        "    call tessera_dlsym_resolve\n"
        "    addq $8, %rsp\n"
        "    popq %rsi\n"
        "    popq %rdi\n"
        "    testq %rax, %rax\n"
        "    jz 2f\n"
        "    jmp *%rax\n"
        "2:  ret\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,%function\n"
        "dlsym:\n"
        "    cmn x0, #1\n"
        "    b.ne tessera_dlsym\n"
        "    adrp x16, g_real_dlsym\n"
        "    ldr x16, [x16, :lo12:g_real_dlsym]\n"
        "    cbz x16, 1f\n"
        "    br x16\n"
        "1:  stp x29, x30, [sp, #-32]!\n"
        "    mov x29, sp\n"
        "    stp x0, x1, [sp, #16]\n"
        "    bl tessera_dlsym_resolve\n"
        "    mov x16, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldp x29, x30, [sp], #32\n"
        "    cbz x16, 2f\n"
        "    br x16\n"
        "2:  mov x0, #0\n"
        "    ret\n"
        ".size dlsym, .-dlsym\n");
#else
#error "libtessera's dlsym stub supports x86_64 and aarch64"
#endif

static void *tessera_dlsym(void *handle, const char *name)
{
    dlsym_fn rd = real_dlsym();
    if (!rd)
        return NULL;
    void *p = rd(handle, name);
    if (!p || t_in_hook)
        return p;
    if (name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z') {
        if (lib_ready(&g_cuda, 0))
            return hook_for(&g_cuda, p);
    } else if (name[0] == 'n' && !strncmp(name, "nvml", 4)) {
        if (lib_ready(&g_nvml, 0))
            return hook_for(&g_nvml, p);
    }
    return p;
}
