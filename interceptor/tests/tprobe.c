/* Checks dlsym(RTLD_NEXT) from another library and from the program. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int probe(void);

int main(void)
{
    int v = probe();
    if (v != 43) {
        fprintf(stderr, "FAIL tprobe: probe() = %d, want 43 (RTLD_NEXT from a library)\n", v);
        return 1;
    }
    /* from the program itself: the next definition is libprobe_a's */
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "probe");
    if (!next || next() != 43) {
        fprintf(stderr, "FAIL tprobe: RTLD_NEXT from the program\n");
        return 1;
    }
    void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    void *p = m ? m(16) : NULL;
    if (!p) {
        fprintf(stderr, "FAIL tprobe: RTLD_NEXT malloc\n");
        return 1;
    }
    free(p);
    if (dlsym(RTLD_DEFAULT, "strlen") != (void *)strlen && dlsym(RTLD_DEFAULT, "strlen") == NULL) {
        fprintf(stderr, "FAIL tprobe: RTLD_DEFAULT\n");
        return 1;
    }
    printf("rtld_next ok\n");
    return 0;
}
