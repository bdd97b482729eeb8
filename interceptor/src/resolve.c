/* The real driver entry points (the list is hooks.h), resolved once, and the
 * map from a real entry point to our hook (used by dlsym and cuGetProcAddress:
 * whatever name or version the caller asked for, the driver's answer
 * identifies the function). Its state is written once and survives fork. */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "hooks.h"
#include "init.h"
#include "util.h"

#define DEFINE_REAL(n) __typeof__(&n) r_##n;
CUDA_HOOKS(DEFINE_REAL)
CUDA_USED(DEFINE_REAL)
NVML_HOOKS(DEFINE_REAL)
NVML_USED(DEFINE_REAL)

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

int cuda_ready(void)
{
    return lib_ready(&g_cuda, 1);
}

int nvml_ready(void)
{
    return lib_ready(&g_nvml, 1);
}

static void *hook_for(const struct driver_lib *l, void *real)
{
    for (size_t i = 0; i < l->nsyms; i++)
        if (l->syms[i].hook && __atomic_load_n(l->syms[i].real, __ATOMIC_RELAXED) == real)
            return l->syms[i].hook;
    return real;
}

void *cuda_hook_for(void *real)
{
    return hook_for(&g_cuda, real);
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

void resolve_init(void)
{
    real_dlsym();
}
