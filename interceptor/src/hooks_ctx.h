/* hooks_ctx.c: the context hooks, their context table and the primary
 * contexts' retain counts, which ctx_after_fork forgets. */
#ifndef TESSERA_HOOKS_CTX_H
#define TESSERA_HOOKS_CTX_H

#pragma GCC visibility push(hidden)

int ctx_init(void); /* maps the context table; 0 on success */
void ctx_after_fork(void);

#pragma GCC visibility pop

#endif
