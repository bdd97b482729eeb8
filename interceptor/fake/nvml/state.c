/* The MIG state shared by every process that uses the same node, kept across restarts: a versioned YAML
 * file (FAKE_NVML_STATE; without it the state lives in the process), replaced atomically (temp, fsync,
 * rename, fsync of the directory) under an flock on `<file>.lock`, and re-read by any call that finds it
 * changed. FAKE_NVML_PROC names a directory where the fake keeps what the kernel driver shows in /proc:
 * `devices` (the nvidia-caps and nvidia-uvm majors), `meminfo` (MemTotal: the node file's hostMemoryGiB),
 * and `driver/nvidia/capabilities/gpu<minor>/mig/gi<id>/[ci<id>/]access` (DeviceFileMinor of each instance's
 * /dev/nvidia-caps node). */
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>

#define STATE_API_VERSION "fake.tessera.dev/v1"
#define STATE_KIND "FakeNvmlState"
/* /proc/driver/nvidia-caps/mig-minors: config 1, monitor 2, then per GPU 15 GPU instances x (access + 8 CIs) */
#define CAP_MINORS_PER_GI (1 + FAKE_NCI)
#define CAP_MINORS_PER_GPU (FAKE_NGI * CAP_MINORS_PER_GI)
#define CAPS_MAJOR 237
#define UVM_MAJOR 510

static struct node_desc g_node;
static struct mig_state g_st;
static struct {
    char path[PATH_MAX], lock[PATH_MAX], proc[PATH_MAX];
    int known;
    struct stat seen; /* the file the state was last read from */
} g_sf;

static unsigned gi_cap_minor(unsigned gpu, unsigned gi)
{
    return 3 + gpu * CAP_MINORS_PER_GPU + gi * CAP_MINORS_PER_GI;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static const char *const STATE_FIELDS[] = { "apiVersion", "kind", "gpus", NULL };
static const char *const STATE_GPU_FIELDS[] = { "uuid", "migCurrent", "migPending", "gpuInstances", NULL };
static const char *const STATE_GI_FIELDS[] = { "id", "profileId", "start", "size", "computeInstances", NULL };
static const char *const STATE_CI_FIELDS[] = { "id", "profileId", "uuid", NULL };

static int decode_ci(yaml_document_t *d, yaml_node_t *n, const char *where, struct gi_rec *gi)
{
    long id, profile;
    const char *uuid;
    if (y_expect(n, Y_MAP, where) || y_check_fields(d, n, where, STATE_CI_FIELDS, NONE) ||
        y_long(d, n, "id", where, 0, &id) || y_long(d, n, "profileId", where, 0, &profile) ||
        y_str(d, n, "uuid", where, "", &uuid))
        return -1;
    if (id < 0 || id >= FAKE_NCI || gi->ci[id].used || profile < 0 || profile >= (long)CI_NPROFILES)
        return fail("%s: compute instance %ld (profile %ld) is out of range or listed twice", where, id, profile);
    gi->ci[id] = (struct ci_rec){ .used = 1, .profile = (unsigned)profile };
    snprintf(gi->ci[id].uuid, sizeof gi->ci[id].uuid, "%s", uuid);
    return 0;
}

static int decode_gi(yaml_document_t *d, yaml_node_t *n, const char *where, const struct gpu_desc *desc,
                     struct gpu_rec *g)
{
    long id, profile, start, size;
    char path[256];
    if (y_expect(n, Y_MAP, where) || y_check_fields(d, n, where, STATE_GI_FIELDS, NONE) ||
        y_long(d, n, "id", where, 0, &id) || y_long(d, n, "profileId", where, 0, &profile) ||
        y_long(d, n, "start", where, 0, &start) || y_long(d, n, "size", where, 0, &size))
        return -1;
    const struct fake_profile *p = profile >= 0 ? profile_by_id(desc->prod, (unsigned)profile) : NULL;
    if (id < 0 || id >= FAKE_NGI || g->gi[id].used || !p || !has_start(p, start) || size != (long)p->memory_slices)
        return fail("%s: GPU instance %ld (profile %ld at %ld:%ld) does not fit a %s", where, id, profile, start, size,
                    desc->prod ? desc->prod->key : "GPU without MIG");
    g->gi[id] = (struct gi_rec){ .used = 1, .profile = (unsigned)profile, .start = (unsigned)start };
    yaml_node_t *cis = y_get(d, n, "computeInstances");
    if (y_expect(cis, Y_SEQ, field(path, sizeof path, where, "computeInstances")))
        return -1;
    unsigned k = 0;
    for (yaml_node_item_t *it = cis->data.sequence.items.start; it < cis->data.sequence.items.top; it++, k++) {
        snprintf(path, sizeof path, "%s.computeInstances[%u]", where, k);
        if (decode_ci(d, yaml_document_get_node(d, *it), path, &g->gi[id]))
            return -1;
    }
    return 0;
}

/* `seen[i]`: whether GPU i of the node is in the file (GPUs added to the node file since start afresh) */
static int decode_state(yaml_document_t *d, struct mig_state *st, int *seen)
{
    yaml_node_t *root = yaml_document_get_root_node(d);
    const char *api, *kind;
    if (y_expect(root, Y_MAP, "state") || y_check_fields(d, root, "", STATE_FIELDS, NONE) ||
        y_str(d, root, "apiVersion", "", "", &api) || y_str(d, root, "kind", "", "", &kind))
        return -1;
    if (strcmp(api, STATE_API_VERSION) || strcmp(kind, STATE_KIND))
        return fail("expected apiVersion %s, kind %s; got %s, %s", STATE_API_VERSION, STATE_KIND, api, kind);
    yaml_node_t *gpus = y_get(d, root, "gpus");
    if (y_expect(gpus, Y_SEQ, "gpus"))
        return -1;
    unsigned k = 0;
    for (yaml_node_item_t *it = gpus->data.sequence.items.start; it < gpus->data.sequence.items.top; it++, k++) {
        char where[32], path[64];
        snprintf(where, sizeof where, "gpus[%u]", k);
        yaml_node_t *n = yaml_document_get_node(d, *it);
        const char *uuid;
        long current, pending;
        if (y_expect(n, Y_MAP, where) || y_check_fields(d, n, where, STATE_GPU_FIELDS, NONE) ||
            y_str(d, n, "uuid", where, "", &uuid) || y_long(d, n, "migCurrent", where, 0, &current) ||
            y_long(d, n, "migPending", where, 0, &pending))
            return -1;
        unsigned i = 0;
        while (i < g_node.ngpu && strcmp(g_node.gpu[i].uuid, uuid))
            i++;
        if (i == g_node.ngpu)
            return fail("%s: GPU %s is not in the node file; use the node file this state was made for", where, uuid);
        if (seen[i]++)
            return fail("%s: GPU %s is listed twice", where, uuid);
        st->gpu[i].mig_current = current == 1;
        st->gpu[i].mig_pending = pending == 1;
        yaml_node_t *gis = y_get(d, n, "gpuInstances");
        if (y_expect(gis, Y_SEQ, field(path, sizeof path, where, "gpuInstances")))
            return -1;
        unsigned j = 0;
        for (yaml_node_item_t *g = gis->data.sequence.items.start; g < gis->data.sequence.items.top; g++, j++) {
            snprintf(path, sizeof path, "%s.gpuInstances[%u]", where, j);
            if (decode_gi(d, yaml_document_get_node(d, *g), path, &g_node.gpu[i], &st->gpu[i]))
                return -1;
        }
    }
    return 0;
}

/* 0: read (st complete, missing GPUs initial); 1: no file; -1: error in g_err */
static int read_state_file(struct mig_state *st, struct stat *seen_stat)
{
    int fd = open(g_sf.path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 1 : fail("cannot read %s: %s", g_sf.path, strerror(errno));
    fstat(fd, seen_stat);
    close(fd); /* libyaml reads by path: a rename in between only gives a newer complete file */
    yaml_document_t doc;
    int seen[FAKE_MAXDEV] = { 0 };
    memset(st, 0, sizeof *st);
    if (y_load(g_sf.path, &doc))
        return -1;
    int rc = decode_state(&doc, st, seen);
    yaml_document_delete(&doc);
    if (rc)
        return -1;
    for (unsigned i = 0; i < g_node.ngpu; i++)
        if (!seen[i])
            initial_gpu(&g_node.gpu[i], &st->gpu[i]);
    return 0;
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* temp → fsync → rename → fsync(dir): a reader sees the old or the new file, never half of one */
static int replace_file(const char *path, const char *data, size_t len, int durable)
{
    char tmp[PATH_MAX + 32], dir[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail("cannot write %s: %s", tmp, strerror(errno));
    if (write_all(fd, data, len) || (durable && fsync(fd))) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return fail("cannot write %s: %s", tmp, strerror(e));
    }
    close(fd);
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return fail("cannot rename %s: %s", tmp, strerror(e));
    }
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (durable) {
        if (slash)
            *slash = 0;
        int dfd = open(slash ? (*dir ? dir : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

struct text {
    char buf[64 * 1024];
    size_t len;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len = t->len + (size_t)n < sizeof t->buf ? t->len + (size_t)n : sizeof t->buf - 1;
}

static int write_state_file(void)
{
    static struct text t;
    t.len = 0;
    put(&t, "# MIG state of the fake libnvidia-ml (interceptor/fake/nvml/state.c); delete to start afresh\n");
    put(&t, "apiVersion: %s\nkind: %s\ngpus:\n", STATE_API_VERSION, STATE_KIND);
    for (unsigned i = 0; i < g_node.ngpu; i++) {
        const struct gpu_rec *g = &g_st.gpu[i];
        put(&t, "- uuid: \"%s\"\n  migCurrent: %u\n  migPending: %u\n  gpuInstances:", g_node.gpu[i].uuid,
            g->mig_current, g->mig_pending);
        put(&t, gpu_has_instances(g) ? "\n" : " []\n");
        for (unsigned k = 0; k < FAKE_NGI; k++) {
            const struct gi_rec *gi = &g->gi[k];
            const struct fake_profile *p = gi->used ? profile_by_id(g_node.gpu[i].prod, gi->profile) : NULL;
            if (!p)
                continue;
            put(&t, "  - {id: %u, profileId: %u, start: %u, size: %u, computeInstances: [", k, gi->profile, gi->start,
                p->memory_slices);
            for (unsigned c = 0, n = 0; c < FAKE_NCI; c++)
                if (gi->ci[c].used)
                    put(&t, "%s{id: %u, profileId: %u, uuid: \"%s\"}", n++ ? ", " : "", c, gi->ci[c].profile,
                        gi->ci[c].uuid);
            put(&t, "]}\n");
        }
    }
    if (replace_file(g_sf.path, t.buf, t.len, 1))
        return -1;
    if (stat(g_sf.path, &g_sf.seen) == 0)
        g_sf.known = 1;
    return 0;
}

static void mkdirs(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
}

static void write_if_changed(const char *path, const char *text)
{
    char old[256] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, old, sizeof old - 1);
        old[n > 0 ? n : 0] = 0;
        close(fd);
        if (!strcmp(old, text))
            return;
    }
    replace_file(path, text, strlen(text), 0);
}

static void write_access(const char *dir, unsigned minor)
{
    char path[PATH_MAX + 16], text[128];
    mkdirs(dir);
    if (strf(path, sizeof path, "%s/access", dir))
        return;
    snprintf(text, sizeof text, "DeviceFileMinor: %u\nDeviceFileMode: 292\nDeviceFileModify: 1\n", minor);
    write_if_changed(path, text);
}

static void remove_access(const char *dir)
{
    char path[PATH_MAX + 16];
    if (strf(path, sizeof path, "%s/access", dir))
        return;
    unlink(path);
    rmdir(dir);
}

/* What /proc shows for the current state */
static void sync_proc(void)
{
    if (!*g_sf.proc)
        return;
    char dir[PATH_MAX + 128], ci_dir[PATH_MAX + 160];
    mkdirs(g_sf.proc);
    snprintf(dir, sizeof dir, "%s/devices", g_sf.proc);
    char devices[256];
    snprintf(devices, sizeof devices,
             "Character devices:\n  1 mem\n195 nvidia-frontend\n%d nvidia-caps\n%d nvidia-uvm\n\n"
             "Block devices:\n  7 loop\n",
             CAPS_MAJOR, UVM_MAJOR);
    write_if_changed(dir, devices);
    /* the host's memory, which backs memoryOversubscription (dra_driver/backends/meminfo.py reads it) */
    snprintf(dir, sizeof dir, "%s/meminfo", g_sf.proc);
    char meminfo[128];
    snprintf(meminfo, sizeof meminfo, "MemTotal:       %ld kB\nMemFree:        %ld kB\n", g_node.host_memory_gib << 20,
             g_node.host_memory_gib << 20);
    write_if_changed(dir, meminfo);
    snprintf(dir, sizeof dir, "%s/driver/nvidia/capabilities/mig", g_sf.proc);
    char config[PATH_MAX + 160];
    snprintf(config, sizeof config, "%s/config", dir);
    write_access(config, 1);
    snprintf(config, sizeof config, "%s/monitor", dir);
    write_access(config, 2);
    for (unsigned i = 0; i < g_node.ngpu; i++) {
        for (unsigned k = 0; g_node.gpu[i].prod && g_node.gpu[i].prod->memory_slices && k < FAKE_NGI; k++) {
            const struct gi_rec *gi = &g_st.gpu[i].gi[k];
            snprintf(dir, sizeof dir, "%s/driver/nvidia/capabilities/gpu%u/mig/gi%u", g_sf.proc, i, k);
            for (unsigned c = 0; c < FAKE_NCI; c++) {
                snprintf(ci_dir, sizeof ci_dir, "%s/ci%u", dir, c);
                if (gi->used && gi->ci[c].used)
                    write_access(ci_dir, gi_cap_minor(i, k) + 1 + c);
                else
                    remove_access(ci_dir);
            }
            if (gi->used)
                write_access(dir, gi_cap_minor(i, k));
            else
                remove_access(dir);
        }
    }
}

static void state_error(void)
{
    fprintf(stderr, "fake libnvidia-ml: MIG state %s: %s\n", g_sf.path, g_err);
}

/* Before a read: the latest state any process wrote. */
static nvmlReturn_t state_refresh(void)
{
    struct stat now;
    if (!*g_sf.path || (g_sf.known && stat(g_sf.path, &now) == 0 && same_file(&now, &g_sf.seen)))
        return NVML_SUCCESS;
    struct mig_state st;
    int rc = read_state_file(&st, &g_sf.seen);
    if (rc < 0) {
        state_error();
        return NVML_ERROR_UNKNOWN;
    }
    if (rc == 1)
        for (unsigned i = 0; i < g_node.ngpu; i++)
            initial_gpu(&g_node.gpu[i], &st.gpu[i]);
    g_st = st;
    g_sf.known = rc == 0;
    return NVML_SUCCESS;
}

/* A change: lock, re-read, then `state_end` writes (on success) and unlocks. */
static nvmlReturn_t state_begin(int *lock_fd)
{
    *lock_fd = -1;
    if (!*g_sf.path)
        return NVML_SUCCESS;
    *lock_fd = open(g_sf.lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*lock_fd < 0 || flock(*lock_fd, LOCK_EX)) {
        fail("cannot lock %s: %s", g_sf.lock, strerror(errno));
        state_error();
        if (*lock_fd >= 0)
            close(*lock_fd);
        return NVML_ERROR_UNKNOWN;
    }
    g_sf.known = 0;
    nvmlReturn_t rc = state_refresh();
    if (rc != NVML_SUCCESS)
        close(*lock_fd);
    return rc;
}

static nvmlReturn_t state_end(int lock_fd, nvmlReturn_t rc)
{
    if (rc == NVML_SUCCESS && *g_sf.path && write_state_file()) {
        state_error();
        rc = NVML_ERROR_UNKNOWN;
    }
    if (rc == NVML_SUCCESS)
        sync_proc();
    else
        g_sf.known = 0; /* a failed change may have left the memory copy half-changed: read it again */
    if (lock_fd >= 0)
        close(lock_fd);
    return rc;
}

static void env_path(const char *name, char *out, size_t len)
{
    const char *v = getenv(name);
    snprintf(out, len, "%s", v ? v : "");
}

/* At nvmlInit with a node file: the paths, and the state (created from the node file when there is none). */
static nvmlReturn_t state_open(void)
{
    env_path("FAKE_NVML_STATE", g_sf.path, sizeof g_sf.path);
    env_path("FAKE_NVML_PROC", g_sf.proc, sizeof g_sf.proc);
    if (strf(g_sf.lock, sizeof g_sf.lock, "%s.lock", g_sf.path)) {
        fail("the path is too long");
        state_error();
        return NVML_ERROR_UNKNOWN;
    }
    g_sf.known = 0;
    memset(&g_st, 0, sizeof g_st);
    for (unsigned i = 0; i < g_node.ngpu; i++)
        initial_gpu(&g_node.gpu[i], &g_st.gpu[i]);
    if (!*g_sf.path) {
        sync_proc();
        return NVML_SUCCESS;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", g_sf.path);
    if (strrchr(dir, '/') && strrchr(dir, '/') != dir) {
        *strrchr(dir, '/') = 0;
        mkdirs(dir);
    }
    int fd; /* written at once, so that every process of the node finds the same state */
    nvmlReturn_t rc = state_begin(&fd);
    return rc == NVML_SUCCESS ? state_end(fd, NVML_SUCCESS) : rc;
}
