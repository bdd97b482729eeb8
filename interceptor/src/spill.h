/* spill.c: an oversubscribed claim's allocations past the device memory held for it (docs/gpu-sharing.md,
 * "Oversubscription"): cuMemAlloc is served from managed memory the driver pages between host and device;
 * the other paths get out-of-memory with a log line naming the setting. */
#ifndef TESSERA_SPILL_H
#define TESSERA_SPILL_H

#include <stddef.h>

#include "devices.h"
#include "table.h"

#pragma GCC visibility push(hidden)

/* Serves `size` bytes from managed memory with advice to keep them on the current device and map them
 * there, counted toward the claim's limit (not toward what the device holds) and tracked in t. */
CUresult spill_alloc(struct dev_rec *d, struct tab *t, CUdeviceptr *dptr, size_t size);
/* The answer of an allocation path that cannot spill after alloc_reserve refused: out-of-memory, logged
 * once per process when it was the claim's device memory, not its limit, that was used up. */
CUresult spill_refused(struct dev_rec *d, const char *path);

#pragma GCC visibility pop

#endif
