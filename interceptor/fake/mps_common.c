/* Helpers the fake MPS control daemon and the fake libcuda's MPS client both use (mps.h). */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mps.h"

const char *mps_pipe_dir(void)
{
    const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && *d ? d : MPS_DEFAULT_PIPE_DIR;
}

const char *mps_log_dir(void)
{
    const char *d = getenv("CUDA_MPS_LOG_DIRECTORY");
    return d && *d ? d : MPS_DEFAULT_LOG_DIR;
}

void mps_gpu_uuid(int phys, char *out, size_t len)
{
    snprintf(out, len, "GPU-7e55e7a0-1234-4567-89ab-cdef%08x", (unsigned)phys & 0xffu);
}

/* the GPU one CUDA_VISIBLE_DEVICES entry names, or -1 */
static int entry_gpu(const char *e, size_t n, int count)
{
    if (n == 0)
        return -1;
    size_t digits = 0;
    while (digits < n && isdigit((unsigned char)e[digits]))
        digits++;
    if (digits == n) {
        long i = strtol(e, NULL, 10);
        return i < count ? (int)i : -1;
    }
    int found = -1;
    for (int g = 0; g < count; g++) {
        char u[64];
        mps_gpu_uuid(g, u, sizeof u);
        if (n <= strlen(u) && !strncmp(u, e, n)) {
            if (found >= 0)
                return -1; /* an ambiguous prefix names no GPU */
            found = g;
        }
    }
    return found;
}

int mps_visible(const char *spec, int count, int *out, int max)
{
    int n = 0;
    if (!spec) {
        for (int g = 0; g < count && n < max; g++)
            out[n++] = g;
        return n;
    }
    const char *p = spec;
    while (*p && n < max) {
        while (*p == ' ')
            p++;
        size_t len = strcspn(p, ",");
        size_t trimmed = len;
        while (trimmed && p[trimmed - 1] == ' ')
            trimmed--;
        int g = entry_gpu(p, trimmed, count);
        for (int k = 0; k < n && g >= 0; k++)
            if (out[k] == g)
                g = -1;
        if (g < 0)
            break;
        out[n++] = g;
        p += len;
        if (*p == ',')
            p++;
    }
    return n;
}

int64_t mps_parse_limit(const char *text, int env_form)
{
    char *end;
    if (!text || !isdigit((unsigned char)*text))
        return -1;
    unsigned long long v = strtoull(text, &end, 10);
    uint64_t unit;
    if (*end == 'M')
        unit = 1ull << 20;
    else if (*end == 'G')
        unit = 1ull << 30;
    else
        return -1;
    end++;
    if (env_form && *end == 'B')
        end++;
    if (*end || v > (1ull << 40))
        return -1;
    return (int64_t)(v * unit);
}

void mps_format_limit(uint64_t bytes, char *out, size_t len)
{
    if (bytes >= (1ull << 30))
        snprintf(out, len, "%lluG", (unsigned long long)(bytes >> 30));
    else
        snprintf(out, len, "%lluM", (unsigned long long)(bytes >> 20));
}
