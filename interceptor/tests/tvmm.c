/* Device memory shared between processes, as NCCL and CUDA IPC do it, with
 * each process in a claim of its own (the importer's claim directory is passed
 * on the command line and put in the importer's environment):
 *   tvmm cumem <limit> <importer-claim-dir>   cuMemCreate/Map/export, another
 *        process imports and maps; references and mappings keep bytes charged
 *        to the creator only, exactly until the driver frees them; host memory
 *        from cuMemCreate is never charged;
 *   tvmm ipc <limit> <importer-claim-dir>     legacy IPC handles, likewise. */
#define _GNU_SOURCE
#include <string.h>

#include "testutil.h"

static uint64_t used_view(void)
{
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS, "meminfo");
    return t - f;
}

static pid_t spawn_in_claim(const char *claim_dir, char *const argv[])
{
    pid_t p = fork();
    if (p == 0) {
        setenv("TESSERA_CLAIM_DIRS", claim_dir, 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return p;
}

static CUmemAllocationProp prop_at(int type, int id)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = 1; /* pinned */
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location.type = type;
    p.location.id = id;
    return p;
}

static int t_cumem(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: cumem <limit> <importer-claim-dir>");
    uint64_t limit = strtoull(argv[0], NULL, 0), size = 256 * MiB;
    ctx_on(0);
    CUmemAllocationProp dev = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAllocationProp host = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
    CUmemAllocationProp numa = prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    CUmemGenericAllocationHandle h, hh, hn, again;
    CHECK(cuMemCreate(&hh, 64 * MiB, &host, 0) == CUDA_SUCCESS, "host cuMemCreate");
    CHECK(cuMemCreate(&hn, 64 * MiB, &numa, 0) == CUDA_SUCCESS, "host-NUMA cuMemCreate");
    CHECK(used_view() == 0, "host memory is not device memory: %llu", (unsigned long long)used_view());
    CHECK(cuMemCreate(&h, size, &dev, 0) == CUDA_SUCCESS && used_view() == size, "device cuMemCreate charged");
    CUmemGenericAllocationHandle big;
    CHECK(cuMemCreate(&big, limit - size + 1, &dev, 0) == CUDA_ERROR_OUT_OF_MEMORY, "past the limit");
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0) == CUDA_SUCCESS, "reserve");
    CHECK(cuMemMap(va, size, 0, h, 0) == CUDA_SUCCESS, "map");
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CHECK(cuMemSetAccess(va, size, &acc, 1) == CUDA_SUCCESS, "access");
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS && fd >= 0,
          "export");
    char fds[16], sz[32];
    snprintf(fds, sizeof fds, "%d", fd);
    snprintf(sz, sizeof sz, "%llu", (unsigned long long)size);
    char *args[] = { "tvmm", "cumem_import", fds, sz, NULL };
    CHECK(wait_ok(spawn_in_claim(argv[1], args)), "the importer in another claim");
    CHECK(used_view() == size, "the creator still pays once");
    /* NCCL's pattern: retain the handle behind an address, then release the extra reference */
    CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va) == CUDA_SUCCESS && again == h, "retain");
    CHECK(cuMemRelease(again) == CUDA_SUCCESS && used_view() == size, "releasing a retained reference frees nothing");
    CHECK(cuMemRelease(h) == CUDA_SUCCESS && used_view() == size, "still mapped: still allocated");
    CHECK(cuMemUnmap(va, size) == CUDA_SUCCESS && used_view() == 0, "last mapping gone: given back");
    CHECK(cuMemRelease(hh) == CUDA_SUCCESS && cuMemRelease(hn) == CUDA_SUCCESS && used_view() == 0, "host releases");
    /* unmapped first, released last */
    CHECK(cuMemCreate(&h, size, &dev, 0) == CUDA_SUCCESS && cuMemMap(va, size, 0, h, 0) == CUDA_SUCCESS, "again");
    CHECK(cuMemUnmap(va, size) == CUDA_SUCCESS && used_view() == size, "unmapped but referenced");
    CHECK(cuMemRelease(h) == CUDA_SUCCESS && used_view() == 0, "released: given back");
    CHECK(fakeUsedBytes(0) == 0, "the driver freed it too");
    return 0;
}

static int t_cumem_import(int argc, char **argv)
{
    CHECK(argc >= 2, "usage");
    int fd = atoi(argv[0]);
    uint64_t size = strtoull(argv[1], NULL, 0);
    ctx_on(0);
    CUmemGenericAllocationHandle h;
    CHECK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
              CUDA_SUCCESS, "import");
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0) == CUDA_SUCCESS && cuMemMap(va, size, 0, h, 0) == CUDA_SUCCESS,
          "map the import");
    CHECK(used_view() == 0, "the importer's claim pays nothing: %llu", (unsigned long long)used_view());
    CHECK(cuMemUnmap(va, size) == CUDA_SUCCESS && cuMemRelease(h) == CUDA_SUCCESS && used_view() == 0, "unmap+release");
    return 0;
}

static int t_ipc(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: ipc <limit> <importer-claim-dir>");
    uint64_t size = 128 * MiB;
    ctx_on(0);
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, size) == CUDA_SUCCESS && used_view() == size, "alloc");
    CUipcMemHandle ih;
    CHECK(cuIpcGetMemHandle(&ih, p) == CUDA_SUCCESS, "handle");
    char hex[2 * sizeof ih.reserved + 1];
    for (size_t i = 0; i < sizeof ih.reserved; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)ih.reserved[i]);
    char *args[] = { "tvmm", "ipc_import", hex, NULL };
    CHECK(wait_ok(spawn_in_claim(argv[1], args)), "the importer in another claim");
    CHECK(used_view() == size, "the exporter still pays once");
    CHECK(cuMemFree_v2(p) == CUDA_SUCCESS && used_view() == 0, "freed");
    return 0;
}

static int t_ipc_import(int argc, char **argv)
{
    CHECK(argc >= 1, "usage");
    CUipcMemHandle ih;
    memset(&ih, 0, sizeof ih);
    for (size_t i = 0; i < sizeof ih.reserved && argv[0][2 * i]; i++) {
        unsigned v;
        CHECK(sscanf(argv[0] + 2 * i, "%2x", &v) == 1, "hex");
        ih.reserved[i] = (char)v;
    }
    ctx_on(0);
    CUdeviceptr p;
    CHECK(cuIpcOpenMemHandle_v2(&p, ih, 1) == CUDA_SUCCESS, "open");
    CHECK(used_view() == 0, "the importer's claim pays nothing");
    CHECK(cuIpcCloseMemHandle(p) == CUDA_SUCCESS && used_view() == 0, "close");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_cmd cmds[] = { { "cumem", t_cumem }, { "cumem_import", t_cumem_import }, { "ipc", t_ipc }, { "ipc_import", t_ipc_import } };
    return run_test("tvmm", cmds, sizeof cmds / sizeof cmds[0], argc, argv);
}
