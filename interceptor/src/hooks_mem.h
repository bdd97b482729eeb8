/* hooks_mem.c: the memory hooks and their allocation tables (device pointers,
 * arrays), which mem_after_fork replaces with empty ones. */
#ifndef TESSERA_HOOKS_MEM_H
#define TESSERA_HOOKS_MEM_H

#pragma GCC visibility push(hidden)

int mem_init(void); /* maps the tables; 0 on success */
void mem_after_fork(void);

#pragma GCC visibility pop

#endif
