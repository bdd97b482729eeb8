/* init.c: start-up (constructor, or the first hook or dlsym call) and the
 * after-fork order. */
#ifndef TESSERA_INIT_H
#define TESSERA_INIT_H

#pragma GCC visibility push(hidden)

void ensure_init(void);

#pragma GCC visibility pop

#endif
