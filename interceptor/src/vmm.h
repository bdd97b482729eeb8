/* vmm.c: device memory made with cuMemCreate (the path of PyTorch's expandable
 * segments, NCCL and CUDA IPC over shareable handles). Its bytes stay charged
 * while a reference (the creating handle, cuMemRetainAllocationHandle) or a
 * mapping (cuMemMap) remains, which is when the driver frees them; host-located
 * and imported allocations are never charged. vmm_after_fork forgets the
 * parent's handles. */
#ifndef TESSERA_VMM_H
#define TESSERA_VMM_H

#pragma GCC visibility push(hidden)

void vmm_after_fork(void);

#pragma GCC visibility pop

#endif
