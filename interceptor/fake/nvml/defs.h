/* The NVML types and constants the fake answers with, laid out as nvml.h lays them out (pynvml's ctypes
 * structures mirror the same layouts; tests/integration/test_fake_nvml.py compares the sizes). */
#pragma once

#include <stdint.h>

#include "tessera_cuda.h"

#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_RESET_REQUIRED 16
#define NVML_ERROR_IN_USE 19
#define NVML_ERROR_INSUFFICIENT_RESOURCES 23
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1
#define NVML_BRAND_NVIDIA 14
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0
#define NVML_NAME_LEN 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define NVML_UUID_LEN 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define NVML_STRUCT_VERSION(type, ver) ((unsigned)(sizeof(type) | ((unsigned)(ver) << 24)))

typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

typedef struct {
    unsigned start, size;
} nvmlGpuInstancePlacement_t;

typedef struct {
    unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_NAME_LEN];
} nvmlGpuInstanceProfileInfo_v2_t;

typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount;
    unsigned copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_NAME_LEN];
    unsigned capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;

typedef struct {
    nvmlDevice_t device;
    unsigned id, profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    unsigned start, size;
} nvmlComputeInstancePlacement_t;

typedef struct {
    unsigned id, sliceCount, instanceCount, multiprocessorCount;
    unsigned sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount;
    unsigned sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[NVML_NAME_LEN];
} nvmlComputeInstanceProfileInfo_v2_t;

typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount;
    unsigned sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[NVML_NAME_LEN];
    unsigned capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned id, profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it */
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(nvmlGpuInstanceProfileInfo_v2_t, 2)
#define nvmlGpuInstanceProfileInfo_v3 NVML_STRUCT_VERSION(nvmlGpuInstanceProfileInfo_v3_t, 3)
#define nvmlComputeInstanceProfileInfo_v2 NVML_STRUCT_VERSION(nvmlComputeInstanceProfileInfo_v2_t, 2)
#define nvmlComputeInstanceProfileInfo_v3 NVML_STRUCT_VERSION(nvmlComputeInstanceProfileInfo_v3_t, 3)
#define nvmlMemory_v2 NVML_STRUCT_VERSION(nvmlMemory_v2_t, 2)

/* the values pynvml 13 passes (nvmlGpuInstanceProfileInfo_v2 = 0x02000098, ...) */
_Static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098, "GI profile info v2 layout");
_Static_assert(nvmlGpuInstanceProfileInfo_v3 == 0x03000098, "GI profile info v3 layout");
_Static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088, "CI profile info v2 layout");
_Static_assert(nvmlComputeInstanceProfileInfo_v3 == 0x0300008c, "CI profile info v3 layout");
_Static_assert(nvmlMemory_v2 == 0x02000028, "memory v2 layout");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "PCI info v3 layout");

/* Limits of the MIG model: GPU instance ids 0..14 (8 memory slices: 1 + 2 + 4 + 8 partitions), compute
 * instance ids 0..7, at most 7 MIG devices (compute slices) per GPU. */
#define FAKE_MAXDEV 16
#define FAKE_NGI 15
#define FAKE_NCI 8
#define FAKE_MAX_MIG_DEVICES 7
#define FAKE_MAX_ADMIN 8
