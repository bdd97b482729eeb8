/* hooks_launch.c: the launch hooks. */
#ifndef TESSERA_HOOKS_LAUNCH_H
#define TESSERA_HOOKS_LAUNCH_H

#pragma GCC visibility push(hidden)

/* Set once at start-up: whether some GPU may have an SM limit (the fast path tests only this). */
void launch_init(int sm_any);

#pragma GCC visibility pop

#endif
