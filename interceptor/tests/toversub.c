/* toversub: memory oversubscription against the fake driver's shared device memory and paging
 * (FAKE_GPU_MEM, fake/uvm.c); run by tests/run.sh, which sets up the claims.
 *
 *   work LIMIT RESIDENT CHUNK PASSES [READY DONE]
 *       an opted-in claim: allocates its whole LIMIT with cuMemAlloc, of which at most RESIDENT is device
 *       memory and the rest managed memory with advice; one byte more is refused; it reads all of it once,
 *       creates the file READY, reads it PASSES times more (paging), prints what that cost, and frees it
 *       once the file DONE exists
 *   neighbour BYTES CHUNK READY... DONE
 *       a claim that did not opt in: once every READY file exists (the others hold their memory and have
 *       filled the device with managed pages) allocates BYTES, all device memory, reads it without paging,
 *       and creates DONE
 *   paths LIMIT RESIDENT               what each allocation path does once the claim's device memory is used
 *   ctx RESIDENT CTX_BYTES             a context's memory is part of what the device holds for the claim */
#include <dlfcn.h>

#include "testutil.h"

CUresult cuMemAdvise(CUdeviceptr, size_t, int, CUdevice);
CUresult fakeMemTouch(CUdeviceptr, size_t);
CUresult fakeMemInfo(CUdeviceptr, int *, uint64_t *, unsigned *);
void fakeMemStats(uint64_t *, uint64_t *, uint64_t *, uint64_t *);

#define MAX_CHUNKS 4096
#define ADVICE ((1u << CU_MEM_ADVISE_SET_PREFERRED_LOCATION) | (1u << CU_MEM_ADVISE_SET_ACCESSED_BY))

static uint64_t arg(char **argv, int i)
{
    return strtoull(argv[i], NULL, 10);
}

static void wait_for(const char *path)
{
    for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++)
        usleep(1000);
    CHECK(access(path, F_OK) == 0, "waited a minute for %s", path);
}

static void create(const char *path)
{
    FILE *f = fopen(path, "w");
    CHECK(f && fclose(f) == 0, "create %s", path);
}

static void touch_all(const CUdeviceptr *p, uint64_t n, uint64_t chunk)
{
    for (uint64_t i = 0; i < n; i++)
        CHECK(fakeMemTouch(p[i], chunk) == CUDA_SUCCESS, "touch");
}

/* What nvidia-smi shows for GPU 0 (NVML by dlopen, no CUDA): total and used. */
static void nvml_view(uint64_t *total, uint64_t *used)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(h, "dlopen nvml");
    nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *) = (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *) = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    CHECK(init && byidx && mem, "nvml symbols");
    nvmlDevice_t d;
    nvmlMemory_t m;
    CHECK(init() == NVML_SUCCESS && byidx(0, &d) == NVML_SUCCESS && mem(d, &m) == NVML_SUCCESS, "nvml meminfo");
    *total = m.total;
    *used = m.used;
}

static void stats(const char *who, uint64_t t0)
{
    uint64_t migrated, evicted, remote, paging_ns;
    fakeMemStats(&migrated, &evicted, &remote, &paging_ns);
    printf("%s: %.3f s, moved to the device %llu MiB, evicted %llu MiB, read from host %llu MiB, paging %.3f s\n",
           who, (double)(now_ns() - t0) / 1e9, (unsigned long long)(migrated >> 20),
           (unsigned long long)(evicted >> 20), (unsigned long long)(remote >> 20), (double)paging_ns / 1e9);
}

static int work(int argc, char **argv)
{
    CHECK(argc == 4 || argc == 6, "work LIMIT RESIDENT CHUNK PASSES [READY DONE]");
    uint64_t limit = arg(argv, 0), resident = arg(argv, 1), chunk = arg(argv, 2), passes = arg(argv, 3);
    ctx_on(0);
    size_t free_b = 0, total = 0;
    CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS, "meminfo");
    CHECK(total == limit && free_b == limit, "the claim sees its whole limit: total %zu free %zu", total, free_b);
    size_t dev_total = 0;
    CHECK(cuDeviceTotalMem_v2(&dev_total, 0) == CUDA_SUCCESS && dev_total == limit, "device total %zu", dev_total);
    static CUdeviceptr p[MAX_CHUNKS];
    uint64_t n = limit / chunk, held = 0, spilled = 0;
    CHECK(n <= MAX_CHUNKS && n * chunk == limit, "chunks");
    for (uint64_t i = 0; i < n; i++) {
        CHECK(cuMemAlloc_v2(&p[i], chunk) == CUDA_SUCCESS, "chunk %llu of %llu", (unsigned long long)i,
              (unsigned long long)n);
        int managed;
        uint64_t on_device;
        unsigned advice;
        fakeMemInfo(p[i], &managed, &on_device, &advice);
        if (managed) {
            CHECK((advice & ADVICE) == ADVICE, "managed chunk %llu has advice %#x", (unsigned long long)i, advice);
            spilled += chunk;
        } else {
            held += chunk;
        }
    }
    CHECK(held <= resident, "device memory held %llu, more than the claim's %llu", (unsigned long long)held,
          (unsigned long long)resident);
    CHECK(spilled >= limit - resident, "spilled %llu", (unsigned long long)spilled);
    CUdeviceptr extra;
    CHECK(cuMemAlloc_v2(&extra, MiB) == CUDA_ERROR_OUT_OF_MEMORY, "the limit still holds");
    CHECK(cuMemAllocManaged(&extra, MiB, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_OUT_OF_MEMORY, "managed too");
    CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && free_b == 0 && total == limit, "full: %zu", free_b);
    uint64_t nv_total, nv_used;
    nvml_view(&nv_total, &nv_used);
    CHECK(nv_total == limit && nv_used == limit, "nvidia-smi shows %llu of %llu", (unsigned long long)nv_used,
          (unsigned long long)nv_total);
    touch_all(p, n, chunk);
    if (argc == 6)
        create(argv[4]);
    uint64_t t0 = now_ns();
    for (uint64_t k = 0; k < passes; k++)
        touch_all(p, n, chunk);
    printf("held %llu MiB, spilled %llu MiB\n", (unsigned long long)(held >> 20), (unsigned long long)(spilled >> 20));
    stats("work", t0);
    if (argc == 6)
        wait_for(argv[5]);
    for (uint64_t i = 0; i < n; i++)
        CHECK(cuMemFree_v2(p[i]) == CUDA_SUCCESS, "free");
    CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && free_b == limit, "all given back: %zu", free_b);
    printf("work done\n");
    return 0;
}

static int neighbour(int argc, char **argv)
{
    CHECK(argc >= 4, "neighbour BYTES CHUNK READY... DONE");
    uint64_t bytes = arg(argv, 0), chunk = arg(argv, 1);
    ctx_on(0);
    for (int i = 2; i < argc - 1; i++)
        wait_for(argv[i]);
    static CUdeviceptr p[MAX_CHUNKS];
    uint64_t n = bytes / chunk;
    CHECK(n <= MAX_CHUNKS, "chunks");
    for (uint64_t i = 0; i < n; i++) {
        CHECK(cuMemAlloc_v2(&p[i], chunk) == CUDA_SUCCESS, "the neighbour's chunk %llu: its memory was promised",
              (unsigned long long)i);
        int managed;
        uint64_t on_device;
        unsigned advice;
        fakeMemInfo(p[i], &managed, &on_device, &advice);
        CHECK(!managed, "a claim that did not opt in got managed memory");
    }
    uint64_t t0 = now_ns();
    for (int k = 0; k < 3; k++)
        touch_all(p, n, chunk);
    uint64_t migrated, evicted, remote, paging_ns;
    fakeMemStats(&migrated, &evicted, &remote, &paging_ns);
    CHECK(migrated == 0 && remote == 0, "the neighbour's reads paged: %llu moved, %llu remote",
          (unsigned long long)migrated, (unsigned long long)remote);
    stats("neighbour", t0);
    for (uint64_t i = 0; i < n; i++)
        CHECK(cuMemFree_v2(p[i]) == CUDA_SUCCESS, "free");
    create(argv[argc - 1]);
    printf("neighbour done\n");
    return 0;
}

static int paths(int argc, char **argv)
{
    CHECK(argc == 2, "paths LIMIT RESIDENT");
    uint64_t limit = arg(argv, 0), resident = arg(argv, 1);
    ctx_on(0);
    CUdeviceptr held, more, a;
    int managed;
    uint64_t on_device;
    unsigned advice;
    CHECK(cuMemAlloc_v2(&held, resident) == CUDA_SUCCESS, "the device memory held for the claim");
    fakeMemInfo(held, &managed, &on_device, &advice);
    CHECK(!managed, "within what the device holds for it: device memory");
    /* paths that cannot be served from managed memory: out-of-memory, though the limit has room */
    CHECK(cuMemAllocAsync(&a, MiB, NULL) == CUDA_ERROR_OUT_OF_MEMORY, "async");
    CHECK(cuMemAllocFromPoolAsync(&a, MiB, NULL, NULL) == CUDA_ERROR_OUT_OF_MEMORY, "pool");
    size_t pitch;
    CHECK(cuMemAllocPitch_v2(&a, &pitch, 1024, 1024, 4) == CUDA_ERROR_OUT_OF_MEMORY, "pitch");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate");
    CUDA_ARRAY_DESCRIPTOR ad = { 256, 256, CU_AD_FORMAT_FLOAT, 1 };
    CUarray arr;
    CHECK(cuArrayCreate_v2(&arr, &ad) == CUDA_ERROR_OUT_OF_MEMORY, "array");
    /* cuMemAlloc spills */
    CHECK(cuMemAlloc_v2(&more, limit - resident) == CUDA_SUCCESS, "the rest of the limit");
    fakeMemInfo(more, &managed, &on_device, &advice);
    CHECK(managed && (advice & ADVICE) == ADVICE, "served from managed memory with advice");
    CHECK(cuMemAlloc_v2(&a, MiB) == CUDA_ERROR_OUT_OF_MEMORY, "past the limit");
    /* giving device memory back makes room for the paths that cannot spill, exactly */
    CHECK(cuMemFree_v2(held) == CUDA_SUCCESS, "free held");
    CHECK(cuMemAllocAsync(&a, resident, NULL) == CUDA_SUCCESS, "async within what the device holds");
    CHECK(cuMemFreeAsync(a, NULL) == CUDA_SUCCESS, "free async");
    CHECK(cuMemCreate(&h, resident, &prop, 0) == CUDA_SUCCESS, "cuMemCreate within it");
    CHECK(cuMemRelease(h) == CUDA_SUCCESS, "release");
    CHECK(cuMemFree_v2(more) == CUDA_SUCCESS, "free managed");
    size_t free_b, total;
    CHECK(cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && free_b == limit && total == limit,
          "every byte given back: free %zu of %zu", free_b, total);
    printf("paths done\n");
    return 0;
}

static int ctx(int argc, char **argv)
{
    CHECK(argc == 2, "ctx RESIDENT CTX_BYTES");
    uint64_t resident = arg(argv, 0), ctx_bytes = arg(argv, 1);
    CUcontext c;
    CUdeviceptr held, more;
    int managed;
    uint64_t on_device;
    unsigned advice;
    CHECK(cuInit(0) == CUDA_SUCCESS && cuCtxCreate_v2(&c, 0, 0) == CUDA_SUCCESS, "ctx");
    CHECK(cuMemAlloc_v2(&held, resident - ctx_bytes) == CUDA_SUCCESS, "what the context leaves");
    fakeMemInfo(held, &managed, &on_device, &advice);
    CHECK(!managed, "device memory");
    CHECK(cuMemAlloc_v2(&more, MiB) == CUDA_SUCCESS, "one MiB more");
    fakeMemInfo(more, &managed, &on_device, &advice);
    CHECK(managed, "past what the device holds, with the context counted: managed");
    CHECK(cuMemFree_v2(more) == CUDA_SUCCESS && cuMemFree_v2(held) == CUDA_SUCCESS, "free");
    /* the context's bytes leave what the device holds when it goes */
    CHECK(cuCtxDestroy_v2(c) == CUDA_SUCCESS && cuCtxCreate_v2(&c, 0, 0) == CUDA_SUCCESS, "again");
    CHECK(cuMemAlloc_v2(&held, resident - ctx_bytes) == CUDA_SUCCESS, "again");
    fakeMemInfo(held, &managed, &on_device, &advice);
    CHECK(!managed, "device memory again");
    printf("ctx done\n");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_cmd cmds[] = {
        { "work", work }, { "neighbour", neighbour }, { "paths", paths }, { "ctx", ctx }
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    return run_test("toversub", cmds, sizeof cmds / sizeof cmds[0], argc, argv);
}
