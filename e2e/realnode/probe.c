/* cudaprobe: what a container on a real e2e node received, and how far its CUDA allocations go.
 * Linked against libcuda.so.1 (the fake driver, found through LD_LIBRARY_PATH in the driver mount); in a vgpu
 * container libtessera.so is preloaded in front of it.
 *
 *   cudaprobe fill                 allocate on every limited GPU (all GPUs when no limits file names one)
 *                                  until out of memory, print the report, wait for SIGTERM
 *   cudaprobe hold MIB             allocate MIB MiB on the first limited GPU, print, wait
 *   cudaprobe fill-after MIB       wait until the claim shows MIB MiB used (by other containers), then fill
 *   cudaprobe report               no CUDA calls: environment, devices, mounts, libraries; wait
 *
 * The report is one line, "TESSERA-PROBE {json}", on stdout. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "tessera_cuda.h"

CUresult cuInit(unsigned);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetUuid(CUuuid *, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);

#define MIB (1ull << 20)
#define MAX_GPUS 16
#define MAX_LIMITED 32

extern char **environ;
static volatile sig_atomic_t g_stop;
static char g_limited[MAX_LIMITED][80];
static int g_nlimited;

static void on_term(int sig) { (void)sig; g_stop = 1; }

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void uuid_string(const CUuuid *u, char *out, size_t n)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* The GPU UUIDs named by the limits files of the claim directories the environment points at. */
static void read_limited(void)
{
    const char *dirs = getenv("TESSERA_CLAIM_DIRS");
    if (!dirs)
        return;
    char *copy = strdup(dirs), *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char path[4096], line[512], uuid[80];
        snprintf(path, sizeof path, "%s/limits", d);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "gpu %79s", uuid) == 1 && g_nlimited < MAX_LIMITED)
                snprintf(g_limited[g_nlimited++], sizeof g_limited[0], "%s", uuid);
        fclose(f);
    }
    free(copy);
}

static int is_limited(const char *uuid)
{
    for (int i = 0; i < g_nlimited; i++)
        if (!strcmp(g_limited[i], uuid))
            return 1;
    return 0;
}

static void print_env(void)
{
    printf("\"env\":{");
    int first = 1;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - *e), *e);
        printf("%s", first ? "" : ",");
        json_str(key);
        putchar(':');
        json_str(eq + 1);
        first = 0;
    }
    printf("}");
}

static void print_dev_dir(const char *dir, const char *prefix, int *first)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) || !S_ISCHR(st.st_mode))
            continue;
        printf("%s{\"path\":", *first ? "" : ",");
        json_str(path);
        printf(",\"major\":%u,\"minor\":%u}", major(st.st_rdev), minor(st.st_rdev));
        *first = 0;
    }
    closedir(d);
}

static void print_devices(void)
{
    int first = 1;
    printf("\"deviceNodes\":[");
    print_dev_dir("/dev", "nvidia", &first);
    print_dev_dir("/dev/nvidia-caps", "nvidia-cap", &first);
    printf("]");
}

/* Every file-backed shared object mapped into this process: shows what was preloaded and which libcuda. */
static void print_libraries(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096], seen[64][512];
    int n = 0;
    printf("\"libraries\":[");
    while (f && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path || !strstr(path, ".so"))
            continue;
        path[strcspn(path, "\n")] = 0;
        int dup = 0;
        for (int i = 0; i < n && !dup; i++)
            dup = !strcmp(seen[i], path);
        if (dup || n == 64)
            continue;
        snprintf(seen[n], sizeof seen[0], "%s", path);
        printf("%s", n ? "," : "");
        json_str(path);
        n++;
    }
    if (f)
        fclose(f);
    printf("]");
}

/* Mount points with their options (field 6 of mountinfo), for the CDI mounts. */
static void print_mounts(void)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[4096];
    int first = 1;
    printf("\"mounts\":[");
    while (f && fgets(line, sizeof line, f)) {
        char point[2048], opts[512];
        if (sscanf(line, "%*s %*s %*s %*s %2047s %511s", point, opts) != 2)
            continue;
        printf("%s{\"path\":", first ? "" : ",");
        json_str(point);
        printf(",\"options\":");
        json_str(opts);
        printf("}");
        first = 0;
    }
    if (f)
        fclose(f);
    printf("]");
}

static void print_claim_dirs(void)
{
    const char *dirs = getenv("TESSERA_CLAIM_DIRS");
    printf("\"claimDirs\":[");
    if (dirs) {
        char *copy = strdup(dirs), *save = NULL;
        int first = 1;
        for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
            printf("%s{\"path\":", first ? "" : ",");
            json_str(d);
            printf(",\"entries\":[");
            DIR *dd = opendir(d);
            struct dirent *e;
            int efirst = 1;
            while (dd && (e = readdir(dd))) {
                if (e->d_name[0] == '.')
                    continue;
                printf("%s", efirst ? "" : ",");
                json_str(e->d_name);
                efirst = 0;
            }
            if (dd)
                closedir(dd);
            printf("]}");
            first = 0;
        }
        free(copy);
    }
    printf("]");
}

struct gpu {
    char uuid[80];
    int limited;
    size_t total, free_before;
    unsigned long long allocated;
    int err;
};

static size_t used_now(void)
{
    size_t free_b = 0, total = 0;
    cuMemGetInfo_v2(&free_b, &total);
    return total - free_b;
}

/* Allocate until CUDA_ERROR_OUT_OF_MEMORY, halving the chunk down to 1 MiB: the total is exact to the MiB. */
static unsigned long long fill(void)
{
    unsigned long long got = 0;
    for (size_t chunk = 1024 * MIB; chunk >= MIB; chunk /= 2) {
        CUdeviceptr p;
        while (cuMemAlloc_v2(&p, chunk) == CUDA_SUCCESS)
            got += chunk;
    }
    return got;
}

static void wait_for_stop(void)
{
    while (!g_stop)
        pause();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "report";
    unsigned long long arg_mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    struct sigaction sa = { .sa_handler = on_term };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    read_limited();

    struct gpu gpus[MAX_GPUS] = { 0 };
    int count = 0, init_err = 0;
    unsigned long long waited_used = 0;
    if (strcmp(mode, "report")) {
        init_err = cuInit(0);
        if (!init_err)
            init_err = cuDeviceGetCount(&count);
        if (count > MAX_GPUS)
            count = MAX_GPUS;
        int held = 0;
        for (int i = 0; i < count; i++) {
            struct gpu *g = &gpus[i];
            CUdevice dev;
            CUuuid u;
            CUcontext ctx;
            if ((g->err = cuDeviceGet(&dev, i)) || (g->err = cuDeviceGetUuid(&u, dev)))
                continue;
            uuid_string(&u, g->uuid, sizeof g->uuid);
            g->limited = is_limited(g->uuid);
            int touch = g_nlimited ? g->limited : 1;
            if (!touch || (!strcmp(mode, "hold") && held))
                continue;
            if ((g->err = cuDevicePrimaryCtxRetain(&ctx, dev)) || (g->err = cuCtxSetCurrent(ctx)))
                continue;
            if (!strcmp(mode, "fill-after")) {
                time_t deadline = time(NULL) + 120;
                while (used_now() < arg_mib * MIB && time(NULL) < deadline && !g_stop)
                    usleep(50000);
                waited_used = used_now();
            }
            cuMemGetInfo_v2(&g->free_before, &g->total);
            if (!strcmp(mode, "hold")) {
                CUdeviceptr p;
                g->err = cuMemAlloc_v2(&p, arg_mib * MIB);
                g->allocated = g->err ? 0 : arg_mib * MIB;
                held = 1;
            } else {
                g->allocated = fill();
            }
        }
    }

    printf("TESSERA-PROBE {\"mode\":");
    json_str(mode);
    printf(",\"cuInit\":%d,\"waitedUsed\":%llu,\"gpus\":[", init_err, waited_used);
    for (int i = 0; i < count; i++) {
        printf("%s{\"ordinal\":%d,\"uuid\":", i ? "," : "", i);
        json_str(gpus[i].uuid);
        printf(",\"limited\":%s,\"total\":%zu,\"freeBefore\":%zu,\"allocated\":%llu,\"error\":%d}",
               gpus[i].limited ? "true" : "false", gpus[i].total, gpus[i].free_before, gpus[i].allocated,
               gpus[i].err);
    }
    printf("],");
    print_env();
    printf(",");
    print_devices();
    printf(",");
    print_libraries();
    printf(",");
    print_mounts();
    printf(",");
    print_claim_dirs();
    printf("}\n");
    fflush(stdout);
    wait_for_stop();
    return 0;
}
