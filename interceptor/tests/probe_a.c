/* An interposer like many others: wraps probe() and finds the next one with
 * dlsym(RTLD_NEXT). libtessera's dlsym hook must keep that working. */
#define _GNU_SOURCE
#include <dlfcn.h>

__attribute__((visibility("default"))) int probe(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "probe");
    return next && next != probe ? next() + 1 : -1000;
}
