/* Configuration, read once at initialisation: the limits files of the claim
 * directories named in TESSERA_CLAIM_DIRS, then HAMi-core's variables as a
 * fallback. Bad input is logged with the fix and ignored (no limit). The node
 * renders the limits file, and names the files and variables, in
 * dra_driver/libtessera/ (limits_file.py, names.py). */

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"
#include "region.h"
#include "util.h"

#define MAX_LIMITS 64
#define MAX_ORDINALS 16

#define POLICY_DEFAULT 0
#define POLICY_FORCE 1
#define POLICY_DISABLE 2

struct limit_entry {
    char uuid[TR_UUID_LEN];
    uint64_t memory; /* bytes, 0 = unlimited */
    uint32_t cores;  /* percent, 0 or 100 = unlimited */
    int32_t priority; /* 0 high, 1 (default) normal */
    uint64_t context; /* bytes charged per context when they cannot be measured */
    int has_context;
    int claim;
    char view[PATH_CAP]; /* the node's read-only view of this GPU; "" none */
    uint32_t slot;       /* this claim's slot in the view's schedule; 0 none */
    uint32_t ceiling;    /* the SM share it may burst to in idle time (version 2); 0 none */
    int has_resident;    /* opted into oversubscription (version 3) */
    uint64_t resident;   /* then: the bytes of memory the device holds for the claim */
};

static struct {
    int nclaims;
    char claim_dir[MAX_CLAIMS][PATH_CAP];
    int nlimits;
    struct limit_entry lim[MAX_LIMITS];
    /* HAMi-core fallback, by CUDA ordinal; 0 = unset */
    uint64_t env_mem_all, env_mem[MAX_ORDINALS];
    uint32_t env_sm_all, env_sm[MAX_ORDINALS];
    int env_priority;
    uint64_t env_context; /* TESSERA_CONTEXT_BYTES */
    char shared_cache[PATH_CAP];
    int policy;
    uint64_t window_ns;
} g_cfg;

static const char *policy_name(int p)
{
    return p == POLICY_FORCE ? "force" : p == POLICY_DISABLE ? "disable" : "default";
}

static int parse_policy(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "default"))
        return POLICY_DEFAULT;
    if (!strcmp(s, "force"))
        return POLICY_FORCE;
    if (!strcmp(s, "disable"))
        return POLICY_DISABLE;
    return -1;
}

/* Splits a line into at most `max` whitespace-separated words, in place. */
static int split_words(char *line, char **w, int max)
{
    int n = 0;
    char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            *p++ = '\0';
        if (!*p)
            break;
        if (n == max)
            return max + 1;
        w[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
    }
    return n;
}

static int uuid_valid(const char *u)
{
    size_t n = str_len(u);
    if (n < 5 || n >= TR_UUID_LEN)
        return 0;
    if (strncmp(u, "GPU-", 4) && strncmp(u, "MIG-", 4))
        return 0;
    for (size_t i = 4; i < n; i++) {
        char c = u[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-' || c == '/'))
            return 0;
    }
    return 1;
}

/* Parses one limits file into `out` (up to `cap` entries). Returns the number
 * of entries, or -1 after logging the first error (then nothing is used). */
static int parse_limits(const char *path, char *text, int claim, struct limit_entry *out, int cap,
                        int *policy, int *loglevel)
{
    int n = 0, lineno = 0, seen_version = 0; /* 1..3 once read: 2 adds `ceiling`, 3 `resident` */
    char *save = text;
    while (save) {
        char *line = save;
        char *nl = strchr(line, '\n');
        if (nl) {
            *nl = '\0';
            save = nl + 1;
        } else {
            save = NULL;
        }
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *w[20]; /* gpu, uuid and up to 8 key-value pairs, with room to spare */
        int nw = split_words(line, w, 19);
        if (nw == 0)
            continue;
        if (nw > 19) {
            tlog(LOG_ERROR, "%s:%d: too many words; ignoring this limits file", path, lineno);
            return -1;
        }
        if (!seen_version) {
            if (nw != 2 || strcmp(w[0], "version") || w[1][0] < '1' || w[1][0] > '3' || w[1][1]) {
                tlog(LOG_ERROR, "%s:%d: expected 'version 1', 'version 2' or 'version 3' as the first line; ignoring this limits file", path, lineno);
                return -1;
            }
            seen_version = w[1][0] - '0';
            continue;
        }
        if (!strcmp(w[0], "policy")) {
            int p = nw == 2 ? parse_policy(w[1]) : -1;
            if (p < 0) {
                tlog(LOG_ERROR, "%s:%d: policy must be default, force or disable; ignoring this limits file", path, lineno);
                return -1;
            }
            *policy = p;
        } else if (!strcmp(w[0], "loglevel")) {
            long v;
            if (nw != 2 || parse_int_range(w[1], 0, 4, &v)) {
                tlog(LOG_ERROR, "%s:%d: loglevel must be 0..4; ignoring this limits file", path, lineno);
                return -1;
            }
            *loglevel = (int)v;
        } else if (!strcmp(w[0], "gpu")) {
            if (nw < 2 || !uuid_valid(w[1])) {
                tlog(LOG_ERROR, "%s:%d: 'gpu' needs a GPU UUID like GPU-0f3a…; ignoring this limits file", path, lineno);
                return -1;
            }
            if (n == cap) {
                tlog(LOG_ERROR, "%s:%d: more than %d gpu lines; ignoring this limits file", path, lineno, cap);
                return -1;
            }
            struct limit_entry e;
            memset(&e, 0, sizeof e);
            str_copy(e.uuid, sizeof e.uuid, w[1]);
            e.claim = claim;
            e.priority = 1;
            if ((nw - 2) % 2) {
                tlog(LOG_ERROR, "%s:%d: expected 'key value' pairs after the UUID; ignoring this limits file", path, lineno);
                return -1;
            }
            for (int i = 2; i < nw; i += 2) {
                long v;
                if (!strcmp(w[i], "memory")) {
                    if (parse_size(w[i + 1], &e.memory)) {
                        tlog(LOG_ERROR, "%s:%d: memory '%s' is not a byte count; ignoring this limits file", path, lineno, w[i + 1]);
                        return -1;
                    }
                } else if (!strcmp(w[i], "cores")) {
                    if (parse_int_range(w[i + 1], 0, 100, &v)) {
                        tlog(LOG_ERROR, "%s:%d: cores '%s' must be 0..100; ignoring this limits file", path, lineno, w[i + 1]);
                        return -1;
                    }
                    e.cores = (uint32_t)v;
                } else if (!strcmp(w[i], "priority")) {
                    if (parse_int_range(w[i + 1], -1000, 1000, &v)) {
                        tlog(LOG_ERROR, "%s:%d: priority '%s' must be an integer; ignoring this limits file", path, lineno, w[i + 1]);
                        return -1;
                    }
                    e.priority = (int32_t)v;
                } else if (!strcmp(w[i], "context")) {
                    if (parse_size(w[i + 1], &e.context)) {
                        tlog(LOG_ERROR, "%s:%d: context '%s' is not a byte count; ignoring this limits file", path, lineno, w[i + 1]);
                        return -1;
                    }
                    e.has_context = 1;
                } else if (!strcmp(w[i], "view")) {
                    if (w[i + 1][0] != '/' || str_len(w[i + 1]) >= PATH_CAP) {
                        tlog(LOG_ERROR, "%s:%d: view '%s' must be an absolute path under %d bytes; ignoring this limits file", path, lineno, w[i + 1], PATH_CAP);
                        return -1;
                    }
                    str_copy(e.view, sizeof e.view, w[i + 1]);
                } else if (!strcmp(w[i], "slot")) {
                    if (parse_int_range(w[i + 1], 1, 65535, &v)) {
                        tlog(LOG_ERROR, "%s:%d: slot '%s' must be 1..65535; ignoring this limits file", path, lineno, w[i + 1]);
                        return -1;
                    }
                    e.slot = (uint32_t)v;
                } else if (!strcmp(w[i], "ceiling") && seen_version >= 2) {
                    if (parse_int_range(w[i + 1], 1, 100, &v)) {
                        tlog(LOG_ERROR, "%s:%d: ceiling '%s' must be 1..100; ignoring this limits file", path, lineno, w[i + 1]);
                        return -1;
                    }
                    e.ceiling = (uint32_t)v;
                } else if (!strcmp(w[i], "resident") && seen_version >= 3) {
                    if (parse_size(w[i + 1], &e.resident)) {
                        tlog(LOG_ERROR, "%s:%d: resident '%s' is not a byte count; ignoring this limits file", path, lineno, w[i + 1]);
                        return -1;
                    }
                    e.has_resident = 1;
                } else {
                    tlog(LOG_ERROR, "%s:%d: unknown key '%s' (memory, cores, priority, context, view, slot, ceiling from version 2, resident from version 3); ignoring this limits file", path, lineno, w[i]);
                    return -1;
                }
            }
            if (e.has_resident && (!e.memory || e.resident > e.memory)) {
                tlog(LOG_ERROR, "%s:%d: resident must be at most memory (the claim's whole limit); ignoring this limits file", path, lineno);
                return -1;
            }
            out[n++] = e;
        } else {
            tlog(LOG_ERROR, "%s:%d: unknown line '%s' (version, policy, loglevel, gpu); ignoring this limits file", path, lineno, w[0]);
            return -1;
        }
    }
    if (!seen_version) {
        tlog(LOG_ERROR, "%s: empty; expected 'version 1'; ignoring this limits file", path);
        return -1;
    }
    return n;
}

/* The stated maximum size of a limits file (the plugin writes a few hundred bytes;
 * MAX_LIMITS_BYTES in dra_driver/libtessera/limits_file.py). */
#define LIMITS_MAX 65536

/* Reads the whole limits file into text (NUL-terminated); -1 with one log line when it is not a regular file,
 * is larger than LIMITS_MAX or cannot be read. Never blocks on a FIFO or follows a link. */
static int read_limits_file(const char *path, char *text, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        tlog(LOG_ERROR, "%s: cannot open (errno %d); no limits from this claim", path, errno);
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (st.st_size > LIMITS_MAX)
        why = "larger than 65536 bytes";
    *len = 0;
    while (!why) {
        ssize_t r = read(fd, text + *len, LIMITS_MAX + 1 - *len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            why = "read failed";
        else if (r == 0)
            break;
        else if ((*len += (size_t)r) > LIMITS_MAX)
            why = "larger than 65536 bytes"; /* it grew while read */
    }
    close(fd);
    if (why) {
        tlog(LOG_ERROR, "%s: %s; ignoring this limits file", path, why);
        return -1;
    }
    text[*len] = '\0';
    return 0;
}

static void load_limits_file(int claim)
{
    static char text[LIMITS_MAX + 2];
    char path[PATH_CAP + 16];
    fmt_s(path, sizeof path, "%s/limits", g_cfg.claim_dir[claim]);
    size_t len;
    if (read_limits_file(path, text, &len))
        return;
    if (memchr(text, '\0', len)) {
        tlog(LOG_ERROR, "%s: contains NUL bytes; ignoring this limits file", path);
        return;
    }
    int policy = g_cfg.policy, loglevel = log_level();
    struct limit_entry tmp[MAX_LIMITS];
    int n = parse_limits(path, text, claim, tmp, MAX_LIMITS - g_cfg.nlimits, &policy, &loglevel);
    if (n < 0)
        return;
    g_cfg.policy = policy;
    log_set_level(loglevel);
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < g_cfg.nlimits; j++)
            if (!strcmp(g_cfg.lim[j].uuid, tmp[i].uuid))
                dup = 1;
        if (dup) {
            tlog(LOG_WARN, "%s: %s is already limited by an earlier claim; the first claim's limits apply", path, tmp[i].uuid);
            continue;
        }
        g_cfg.lim[g_cfg.nlimits++] = tmp[i];
    }
}

static void env_size(const char *name, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v)
        return;
    if (parse_size(v, out))
        tlog(LOG_WARN, "ignoring %s='%s': expected bytes with an optional k/m/g/t suffix, like 3000m", name, v);
}

static void env_percent(const char *name, uint32_t *out)
{
    const char *v = getenv(name);
    long p;
    if (!v)
        return;
    if (parse_int_range(v, 0, 100, &p))
        tlog(LOG_WARN, "ignoring %s='%s': expected a percentage 0..100", name, v);
    else
        *out = (uint32_t)p;
}

static void cfg_add_claim_dir(const char *p, size_t n, const char *source)
{
    if (n == 0 || n >= PATH_CAP - 16 || p[0] != '/' || g_cfg.nclaims >= MAX_CLAIMS) {
        tlog(LOG_WARN, "ignoring an entry of %s: each must be an absolute path under %d bytes, at most %d",
             source, PATH_CAP - 16, MAX_CLAIMS);
        return;
    }
    for (int c = 0; c < g_cfg.nclaims; c++)
        if (strncmp(g_cfg.claim_dir[c], p, n) == 0 && g_cfg.claim_dir[c][n] == '\0')
            return;
    memcpy(g_cfg.claim_dir[g_cfg.nclaims], p, n);
    g_cfg.claim_dir[g_cfg.nclaims][n] = '\0';
    g_cfg.nclaims++;
}

void cfg_load(void)
{
    memset(&g_cfg, 0, sizeof g_cfg);
    g_cfg.window_ns = 50000000ull;
    g_cfg.env_priority = 1;
    const char *v = getenv("LIBCUDA_LOG_LEVEL");
    long l;
    if (v) {
        if (parse_int_range(v, 0, 4, &l))
            tlog(LOG_WARN, "ignoring LIBCUDA_LOG_LEVEL='%s': expected 0..4", v);
        else
            log_set_level(l > 3 ? 3 : (int)l);
    }
    /* Each claim names its own TESSERA_CLAIM_DIR_<uid> so that two claims in one container never
     * overwrite each other's variable; TESSERA_CLAIM_DIRS is the list form for hand-made setups. */
    v = getenv("TESSERA_CLAIM_DIRS");
    if (v) {
        const char *p = v;
        while (*p) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : str_len(p);
            if (n > 0)
                cfg_add_claim_dir(p, n, "TESSERA_CLAIM_DIRS");
            if (!e)
                break;
            p = e + 1;
        }
    }
    for (char **ep = environ; ep && *ep; ep++) {
        static const char prefix[] = "TESSERA_CLAIM_DIR_";
        if (strncmp(*ep, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *eq = strchr(*ep, '=');
        if (eq && eq[1])
            cfg_add_claim_dir(eq + 1, str_len(eq + 1), "TESSERA_CLAIM_DIR_*");
    }
    v = getenv("GPU_CORE_UTILIZATION_POLICY");
    if (v) {
        int p = parse_policy(v);
        if (p < 0) {
            /* HAMi-core accepts upper case too */
            if (!strcasecmp(v, "default")) p = POLICY_DEFAULT;
            else if (!strcasecmp(v, "force")) p = POLICY_FORCE;
            else if (!strcasecmp(v, "disable")) p = POLICY_DISABLE;
        }
        if (p < 0)
            tlog(LOG_WARN, "ignoring GPU_CORE_UTILIZATION_POLICY='%s': expected default, force or disable", v);
        else
            g_cfg.policy = p;
    }
    for (int c = 0; c < g_cfg.nclaims; c++)
        load_limits_file(c);

    env_size("CUDA_DEVICE_MEMORY_LIMIT", &g_cfg.env_mem_all);
    env_percent("CUDA_DEVICE_SM_LIMIT", &g_cfg.env_sm_all);
    for (int i = 0; i < MAX_ORDINALS; i++) {
        char name[48];
        fmt_s(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
        env_size(name, &g_cfg.env_mem[i]);
        fmt_s(name, sizeof name, "CUDA_DEVICE_SM_LIMIT_%d", i);
        env_percent(name, &g_cfg.env_sm[i]);
    }
    v = getenv("CUDA_TASK_PRIORITY");
    if (v) {
        if (parse_int_range(v, -1000, 1000, &l))
            tlog(LOG_WARN, "ignoring CUDA_TASK_PRIORITY='%s': expected an integer", v);
        else
            g_cfg.env_priority = (int)l;
    }
    env_size("TESSERA_CONTEXT_BYTES", &g_cfg.env_context);
    v = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (v) {
        if (v[0] != '/' || str_len(v) >= PATH_CAP)
            tlog(LOG_WARN, "ignoring CUDA_DEVICE_MEMORY_SHARED_CACHE='%s': expected an absolute path", v);
        else
            str_copy(g_cfg.shared_cache, sizeof g_cfg.shared_cache, v);
    }
    v = getenv("TESSERA_SM_WINDOW_US");
    if (v) {
        if (parse_int_range(v, 1000, 10000000, &l))
            tlog(LOG_WARN, "ignoring TESSERA_SM_WINDOW_US='%s': expected 1000..10000000", v);
        else
            g_cfg.window_ns = (uint64_t)l * 1000ull;
    }
}

int cfg_lookup(const char *uuid, int ordinal, struct gpu_limits *out)
{
    memset(out, 0, sizeof *out);
    out->context = g_cfg.env_context;
    out->view = "";
    for (int i = 0; i < g_cfg.nlimits; i++) {
        const struct limit_entry *e = &g_cfg.lim[i];
        if (!strcasecmp(e->uuid, uuid)) {
            out->memory = e->memory;
            out->cores = e->cores;
            out->priority = e->priority;
            if (e->has_context)
                out->context = e->context;
            out->view = e->view;
            out->slot = e->slot;
            out->ceiling = e->ceiling > e->cores ? e->ceiling : 0;
            out->spill = e->has_resident;
            out->resident = e->resident;
            return e->claim;
        }
    }
    uint64_t m = g_cfg.env_mem_all;
    uint32_t c = g_cfg.env_sm_all;
    if (ordinal >= 0 && ordinal < MAX_ORDINALS) {
        if (g_cfg.env_mem[ordinal])
            m = g_cfg.env_mem[ordinal];
        if (g_cfg.env_sm[ordinal])
            c = g_cfg.env_sm[ordinal];
    }
    if (!m && !c && !g_cfg.shared_cache[0])
        return -1;
    out->memory = m;
    out->cores = c;
    out->priority = g_cfg.env_priority;
    return MAX_CLAIMS;
}

/* Never under `disable`; a high-priority (0) claim only under `force`. */
int cfg_sm_applies(uint32_t cores, int32_t prio)
{
    if (cores == 0 || cores >= 100 || g_cfg.policy == POLICY_DISABLE)
        return 0;
    return prio != 0 || g_cfg.policy == POLICY_FORCE;
}

/* The launch hooks' fast path tests only this. */
int cfg_sm_any(void)
{
    for (int i = 0; i < g_cfg.nlimits; i++)
        if (cfg_sm_applies(g_cfg.lim[i].cores, g_cfg.lim[i].priority))
            return 1;
    if (cfg_sm_applies(g_cfg.env_sm_all, g_cfg.env_priority))
        return 1;
    for (int i = 0; i < MAX_ORDINALS; i++)
        if (cfg_sm_applies(g_cfg.env_sm[i], g_cfg.env_priority))
            return 1;
    return 0;
}

int cfg_priority_applies(void)
{
    return g_cfg.policy != POLICY_DISABLE;
}

int cfg_watch_any(void)
{
    if (cfg_sm_any())
        return 1;
    if (!cfg_priority_applies())
        return 0;
    for (int i = 0; i < g_cfg.nlimits; i++)
        if (g_cfg.lim[i].priority == 0 || g_cfg.lim[i].view[0])
            return 1;
    return g_cfg.env_priority == 0 && cfg_acct_any();
}

int cfg_acct_any(void)
{
    if (g_cfg.nlimits > 0 || g_cfg.env_mem_all || g_cfg.shared_cache[0] || cfg_sm_any())
        return 1;
    for (int i = 0; i < MAX_ORDINALS; i++)
        if (g_cfg.env_mem[i])
            return 1;
    return 0;
}

int cfg_nclaims(void)
{
    return g_cfg.nclaims;
}

int cfg_nlimits(void)
{
    return g_cfg.nlimits;
}

const char *cfg_claim_dir(int claim)
{
    return g_cfg.claim_dir[claim];
}

const char *cfg_shared_cache(void)
{
    return g_cfg.shared_cache;
}

const char *cfg_policy_name(void)
{
    return policy_name(g_cfg.policy);
}

uint64_t cfg_window_ns(void)
{
    return g_cfg.window_ns;
}
