/* MPS client checks against the fake driver and the fake nvidia-cuda-mps-control (tests/run.sh starts the
 * daemon and sets CUDA_MPS_* as a container would see them). Each subcommand is one check (exit 0 = pass).
 *   tmps init <CUresult>             what cuInit returns; when it fails, contexts cannot be made either
 *   tmps view <count> <uuid of 0>    an MPS client sees its daemon's GPUs (the daemon's CUDA_VISIBLE_DEVICES)
 *   tmps hold <seconds>              an MPS client that stays connected for a while (prints "ready")
 *   tmps pinned <limit>              CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: the driver refuses memory past the
 *                                    client's limit (CUDA_ERROR_OUT_OF_MEMORY); free shows what it leaves
 *   tmps layered <mps> <claim> <dir> libtessera preloaded in an MPS client: whichever limit is lower refuses,
 *                                    and the claim's region counts exactly what the driver holds */
#define _GNU_SOURCE
#include <string.h>

#include "regionutil.h"
#include "testutil.h"

CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGetUuid(CUuuid *, CUdevice);

static int t_init(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: init <CUresult>");
    CUresult want = atoi(argv[0]);
    CUresult rc = cuInit(0);
    CHECK(rc == want, "cuInit returned %d, expected %d", rc, want);
    CUcontext c;
    rc = cuCtxCreate_v2(&c, 0, 0);
    CHECK(want == CUDA_SUCCESS ? rc == CUDA_SUCCESS : rc == want, "context creation after cuInit %d: %d", want, rc);
    printf("init=%d\n", want);
    return 0;
}

static int t_view(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: view <count> <uuid of device 0>");
    CHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
    int n = -1;
    CHECK(cuDeviceGetCount(&n) == CUDA_SUCCESS && n == atoi(argv[0]), "device count %d, expected %s", n, argv[0]);
    CUuuid u;
    CHECK(cuDeviceGetUuid(&u, 0) == CUDA_SUCCESS, "uuid");
    const unsigned char *b = (const unsigned char *)u.bytes;
    char text[64];
    snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    CHECK(!strcmp(text, argv[1]), "device 0 is %s, expected %s", text, argv[1]);
    return 0;
}

static int t_hold(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: hold <seconds>");
    ctx_on(0);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    usleep((useconds_t)(atof(argv[0]) * 1e6));
    return 0;
}

static int t_pinned(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: pinned <limit bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f == limit && t == 81920 * MiB,
          "view: free %zu (expected the limit %llu), total %zu (expected the GPU's)", f, (unsigned long long)limit, t);
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc_v2(&a, limit / 2) == CUDA_SUCCESS, "half the limit");
    CHECK(cuMemAlloc_v2(&b, limit - limit / 2 + 1) == CUDA_ERROR_OUT_OF_MEMORY, "one byte past the limit");
    CHECK(cuMemAlloc_v2(&b, limit - limit / 2) == CUDA_SUCCESS, "exactly up to the limit");
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f == 0, "full: free %zu", f);
    CHECK(cuMemAlloc_v2(&c, 1) == CUDA_ERROR_OUT_OF_MEMORY, "full");
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS && cuMemAlloc_v2(&c, limit / 2) == CUDA_SUCCESS, "freed memory is usable");
    return 0;
}

static int t_layered(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: layered <mps limit> <claim limit> <claim dir>");
    uint64_t mps = strtoull(argv[0], NULL, 0), claim = strtoull(argv[1], NULL, 0);
    uint64_t lower = mps < claim ? mps : claim;
    ctx_on(0);
    struct tr_region *r = map_region(argv[2]);
    CUdeviceptr a, b;
    CHECK(cuMemAlloc_v2(&a, lower) == CUDA_SUCCESS, "up to the lower limit");
    CHECK(cuMemAlloc_v2(&b, MiB) == CUDA_ERROR_OUT_OF_MEMORY, "past the lower limit");
    CHECK(claim_total(r, 0) == lower && fakeUsedBytes(0) == lower,
          "after a refused allocation the claim counts %llu and the driver holds %llu, expected %llu",
          (unsigned long long)claim_total(r, 0), (unsigned long long)fakeUsedBytes(0), (unsigned long long)lower);
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS && claim_total(r, 0) == 0 && fakeUsedBytes(0) == 0, "all given back");
    CHECK(cuMemAlloc_v2(&a, lower) == CUDA_SUCCESS, "the whole limit again");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_cmd cmds[] = {
        { "init", t_init }, { "view", t_view }, { "hold", t_hold }, { "pinned", t_pinned }, { "layered", t_layered },
    };
    return run_test("tmps", cmds, sizeof cmds / sizeof cmds[0], argc, argv);
}
