/* cuGetProcAddress of the fake driver: like the real one, a base name
 * ("cuStreamBeginCapture") resolves to the newest version of the entry point
 * that the caller's CUDA version knows, and with the per-thread-stream flag to
 * its _ptsz variant where one exists. Entry points are looked up by name in
 * this library itself (never through a preloaded interposer). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fake.h"

#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* Entry points whose version does not follow the "_v2 since CUDA 3.2" rule: the symbol a caller of at least
 * `since` gets for `base`. Newest first. */
static const struct {
    const char *base;
    int since;
    const char *symbol;
} g_versions[] = {
    { "cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3" },
    { "cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2" },
    { "cuStreamGetCaptureInfo", 0, "cuStreamGetCaptureInfo" },
    { "cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2" },
    { "cuStreamBeginCapture", 0, "cuStreamBeginCapture" },
    { "cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags" },
    { "cuGraphInstantiate", 11000, "cuGraphInstantiate_v2" },
    { "cuGraphInstantiate", 0, "cuGraphInstantiate" },
    { "cuStreamBeginCaptureToGraph", 12030, "cuStreamBeginCaptureToGraph" },
};

static void *g_self;
static pthread_once_t g_self_once = PTHREAD_ONCE_INIT;

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);

static void self_once(void)
{
    Dl_info info;
    /* a static function: its address is ours even when a preloaded library interposes cu* symbols */
    if (dladdr((void *)&self_once, &info) && info.dli_fname)
        g_self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

static void *own(const char *name)
{
    pthread_once(&g_self_once, self_once);
    if (!g_self || strncmp(name, "cu", 2))
        return NULL;
    return dlsym(g_self, name);
}

/* The symbol name for base at version ver, or NULL when the caller's version is too old. */
static const char *versioned(const char *base, int ver, char *buf, size_t cap, int *known)
{
    *known = 0;
    for (size_t i = 0; i < sizeof g_versions / sizeof g_versions[0]; i++) {
        if (strcmp(g_versions[i].base, base))
            continue;
        *known = 1;
        if (ver >= g_versions[i].since)
            return g_versions[i].symbol;
    }
    if (*known)
        return NULL;
    snprintf(buf, cap, "%s_v2", base);
    if (ver >= 3020 && own(buf))
        return buf;
    return base;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags)
{
    char buf[160], pt[176];
    int known;
    if (!symbol || !pfn || strlen(symbol) > 100)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const char *name = versioned(symbol, ver, buf, sizeof buf, &known);
    if (!name)
        return CUDA_ERROR_NOT_FOUND;
    void *f = NULL;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        snprintf(pt, sizeof pt, "%s_ptsz", name);
        f = own(pt);
    }
    if (!f)
        f = own(name);
    *pfn = f;
    return f ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags, int *status)
{
    CUresult rc = cuGetProcAddress(symbol, pfn, ver, flags);
    if (status)
        *status = rc == CUDA_SUCCESS ? 0 : 1;
    return rc;
}
