/*
 * A fake libnvidia-ml.so.1 for tests: the real pynvml loads it and sees the GPUs described by the
 * file named in $FAKE_NVML_CONFIG (read at every nvmlInitWithFlags). One "key=value" per line:
 *
 *   init_error=9                      nvmlInitWithFlags returns this code (9 = DRIVER_NOT_LOADED)
 *   driver_version=535.104.05         cuda_driver_version=12040      device_count=2
 *   gpu.<i>.name / .uuid / .bus_id    strings (bus_id like 00000000:3B:00.0)
 *   gpu.<i>.minor / .brand / .arch    unsigned integers (brand/arch are NVML enum values)
 *   gpu.<i>.memory=<bytes>            gpu.<i>.cc=<major>.<minor>
 *   gpu.<i>.mig_mode=-1|0|1           -1: MIG not supported (default), 0: disabled, 1: enabled
 *   gpu.<i>.mig_max=<n>               nvmlDeviceGetMaxMigDeviceCount
 *   gpu.<i>.addressing_mode=-1|0|1|2  -1: NOT_SUPPORTED (default), else nvmlDeviceGetAddressingMode's value
 *   gpu.<i>.fail=<symbol>:<code>      that call returns <code> for this GPU
 *   gpu.<i>.profile.<index>=<id>,<slices>,<sms>,<ce>,<dec>,<enc>,<jpeg>,<ofa>,<memMiB>
 *   gpu.<i>.mig.<slot>=<uuid>,<giId>,<ciId>,<profileIndex>,<placementStart>,<placementSize>,<ciSlices>
 *   gpu.<i>.mig.<slot>.fail=<symbol>:<code>
 *
 * Unset GPU fields get defaults (an A30 at minor <i>). fakeNvmlInitCount()/fakeNvmlShutdownCount()
 * let tests check that NVML was shut down after use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16
#define MAX_MIGS 8
#define MAX_PROFILES 18

#define OK 0
#define ERR_UNINITIALIZED 1
#define ERR_INVALID_ARGUMENT 2
#define ERR_NOT_SUPPORTED 3
#define ERR_NOT_FOUND 6
#define ERR_INSUFFICIENT_SIZE 7

typedef struct {
    int is_mig, gpu, slot, present;
    char name[96], uuid[96], bus_id[32];
    unsigned minor, brand, arch, mig_max;
    int mig_mode, cc_major, cc_minor, addressing_mode;
    unsigned long long memory;
    char fail_symbol[96];
    int fail_code;
    unsigned gi_id, ci_id, profile_index, placement_start, placement_size, ci_slices;
} fake_dev;

typedef struct {
    int valid;
    unsigned id, slices, sms, ce, dec, enc, jpeg, ofa;
    unsigned long long mem_mib;
} fake_profile;

typedef struct { int gpu, slot; } fake_instance;

typedef struct { unsigned start, size; } placement_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info_t;
typedef struct { unsigned long long total, free, used; } memory_t;
typedef struct {
    unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} gi_profile_info_v2_t;
typedef struct { void *device; unsigned id, profileId; placement_t placement; } gi_info_t;
typedef struct { void *device; void *gpuInstance; unsigned id, profileId; placement_t placement; } ci_info_t;

static fake_dev gpus[MAX_GPUS];
static fake_dev migs[MAX_GPUS][MAX_MIGS];
static fake_profile profiles[MAX_GPUS][MAX_PROFILES];
static fake_instance gis[MAX_GPUS][MAX_MIGS], cis[MAX_GPUS][MAX_MIGS];
static unsigned device_count;
static int initialized, init_error, cuda_driver_version;
static char driver_version[80];
static int init_calls, shutdown_calls;

int fakeNvmlInitCount(void) { return init_calls; }
int fakeNvmlShutdownCount(void) { return shutdown_calls; }

static void set_defaults(void) {
    memset(gpus, 0, sizeof gpus);
    memset(migs, 0, sizeof migs);
    memset(profiles, 0, sizeof profiles);
    device_count = 0;
    init_error = 0;
    cuda_driver_version = 12040;
    strcpy(driver_version, "535.104.05");
    for (int i = 0; i < MAX_GPUS; i++) {
        fake_dev *d = &gpus[i];
        d->gpu = i;
        d->present = 1;
        snprintf(d->name, sizeof d->name, "NVIDIA A30");
        snprintf(d->uuid, sizeof d->uuid, "GPU-00000000-0000-4000-8000-0000000000%02d", i);
        snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", 0x3B + i);
        d->minor = (unsigned)i;
        d->brand = 14;
        d->arch = 7;
        d->memory = 24ULL << 30;
        d->cc_major = 8;
        d->mig_mode = -1;
        d->addressing_mode = -1;
        for (int s = 0; s < MAX_MIGS; s++) {
            migs[i][s].is_mig = 1;
            migs[i][s].gpu = i;
            migs[i][s].slot = s;
            gis[i][s].gpu = cis[i][s].gpu = i;
            gis[i][s].slot = cis[i][s].slot = s;
        }
    }
}

static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static void parse_fail(fake_dev *d, const char *value) {
    const char *colon = strrchr(value, ':');
    if (!colon) return;
    size_t n = (size_t)(colon - value);
    if (n >= sizeof d->fail_symbol) n = sizeof d->fail_symbol - 1;
    memcpy(d->fail_symbol, value, n);
    d->fail_symbol[n] = 0;
    d->fail_code = atoi(colon + 1);
}

static void mig_before_config(void);
static void mig_after_config(void);
static void mig_apply_global(const char *key, const char *value);
static void mig_apply_key(int i, const char *field, const char *value);

static void apply_gpu_key(fake_dev *d, int i, const char *field, const char *value) {
    unsigned idx, slot;
    char rest[64];
    if (!strcmp(field, "name")) copy_str(d->name, sizeof d->name, value);
    else if (!strcmp(field, "uuid")) copy_str(d->uuid, sizeof d->uuid, value);
    else if (!strcmp(field, "bus_id")) copy_str(d->bus_id, sizeof d->bus_id, value);
    else if (!strcmp(field, "minor")) d->minor = (unsigned)strtoul(value, NULL, 10);
    else if (!strcmp(field, "brand")) d->brand = (unsigned)strtoul(value, NULL, 10);
    else if (!strcmp(field, "arch")) d->arch = (unsigned)strtoul(value, NULL, 0);
    else if (!strcmp(field, "memory")) d->memory = strtoull(value, NULL, 10);
    else if (!strcmp(field, "cc")) sscanf(value, "%d.%d", &d->cc_major, &d->cc_minor);
    else if (!strcmp(field, "mig_mode")) d->mig_mode = atoi(value);
    else if (!strcmp(field, "addressing_mode")) d->addressing_mode = atoi(value);
    else if (!strcmp(field, "mig_max")) d->mig_max = (unsigned)strtoul(value, NULL, 10);
    else if (!strcmp(field, "fail")) parse_fail(d, value);
    else if (sscanf(field, "profile.%u", &idx) == 1 && idx < MAX_PROFILES) {
        fake_profile *p = &profiles[i][idx];
        p->valid = sscanf(value, "%u,%u,%u,%u,%u,%u,%u,%u,%llu", &p->id, &p->slices, &p->sms, &p->ce, &p->dec,
                          &p->enc, &p->jpeg, &p->ofa, &p->mem_mib) == 9;
    } else if (sscanf(field, "mig.%u.%63s", &slot, rest) == 2 && slot < MAX_MIGS) {
        if (!strcmp(rest, "fail")) parse_fail(&migs[i][slot], value);
    } else if (sscanf(field, "mig.%u", &slot) == 1 && slot < MAX_MIGS) {
        fake_dev *m = &migs[i][slot];
        char uuid[96];
        if (sscanf(value, "%95[^,],%u,%u,%u,%u,%u,%u", uuid, &m->gi_id, &m->ci_id, &m->profile_index,
                   &m->placement_start, &m->placement_size, &m->ci_slices) == 7 &&
            m->profile_index < MAX_PROFILES) {
            copy_str(m->uuid, sizeof m->uuid, uuid);
            m->present = 1;
        }
    } else
        mig_apply_key(i, field, value);
}

static void load_config(void) {
    set_defaults();
    mig_before_config();
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#') continue;
        *eq = 0;
        const char *key = line, *value = eq + 1;
        int i, consumed = 0;
        if (!strcmp(key, "init_error")) init_error = atoi(value);
        else if (!strcmp(key, "driver_version")) copy_str(driver_version, sizeof driver_version, value);
        else if (!strcmp(key, "cuda_driver_version")) cuda_driver_version = atoi(value);
        else if (!strcmp(key, "device_count")) device_count = (unsigned)strtoul(value, NULL, 10);
        else if (sscanf(key, "gpu.%d.%n", &i, &consumed) == 1 && consumed > 0 && i >= 0 && i < MAX_GPUS)
            apply_gpu_key(&gpus[i], i, key + consumed, value);
        else
            mig_apply_global(key, value);
    }
    fclose(f);
    if (device_count > MAX_GPUS) device_count = MAX_GPUS;
    mig_after_config();
}

/* Every per-device call starts here: initialised, a valid handle, and the configured failure. */
static int check(void *handle, const char *symbol, fake_dev **out) {
    if (!initialized) return ERR_UNINITIALIZED;
    fake_dev *d = (fake_dev *)handle;
    if (!d) return ERR_INVALID_ARGUMENT;
    if (d->fail_symbol[0] && !strcmp(d->fail_symbol, symbol)) return d->fail_code;
    *out = d;
    return OK;
}
#define CHECK(handle, symbol) \
    fake_dev *d; \
    int rc_ = check(handle, symbol, &d); \
    if (rc_ != OK) return rc_;

int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    load_config();
    init_calls++;
    if (init_error) return init_error;
    initialized = 1;
    return OK;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) {
    shutdown_calls++;
    if (!initialized) return ERR_UNINITIALIZED;
    initialized = 0;
    return OK;
}
const char *nvmlErrorString(int rc) {
    (void)rc;
    return "fake NVML error";
}

int nvmlSystemGetDriverVersion(char *buf, unsigned len) {
    if (!initialized) return ERR_UNINITIALIZED;
    if (strlen(driver_version) + 1 > len) return ERR_INSUFFICIENT_SIZE;
    strcpy(buf, driver_version);
    return OK;
}
int nvmlSystemGetCudaDriverVersion(int *v) {
    if (!initialized) return ERR_UNINITIALIZED;
    *v = cuda_driver_version;
    return OK;
}
int nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialized) return ERR_UNINITIALIZED;
    *count = device_count;
    return OK;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    if (!initialized) return ERR_UNINITIALIZED;
    if (index >= device_count) return ERR_INVALID_ARGUMENT;
    fake_dev *d = &gpus[index];
    if (d->fail_symbol[0] && !strcmp(d->fail_symbol, "nvmlDeviceGetHandleByIndex_v2")) return d->fail_code;
    *handle = d;
    return OK;
}

static int put_string(const char *src, char *buf, unsigned len) {
    if (strlen(src) + 1 > len) return ERR_INSUFFICIENT_SIZE;
    strcpy(buf, src);
    return OK;
}
int nvmlDeviceGetUUID(void *h, char *buf, unsigned len) {
    CHECK(h, "nvmlDeviceGetUUID");
    return put_string(d->uuid, buf, len);
}
int nvmlDeviceGetName(void *h, char *buf, unsigned len) {
    CHECK(h, "nvmlDeviceGetName");
    return put_string(d->is_mig ? gpus[d->gpu].name : d->name, buf, len);
}
int nvmlDeviceGetMinorNumber(void *h, unsigned *minor) {
    CHECK(h, "nvmlDeviceGetMinorNumber");
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    *minor = d->minor;
    return OK;
}
int nvmlDeviceGetBrand(void *h, unsigned *brand) {
    CHECK(h, "nvmlDeviceGetBrand");
    *brand = d->brand;
    return OK;
}
int nvmlDeviceGetArchitecture(void *h, unsigned *arch) {
    CHECK(h, "nvmlDeviceGetArchitecture");
    *arch = d->arch;
    return OK;
}
int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
    CHECK(h, "nvmlDeviceGetCudaComputeCapability");
    *major = d->cc_major;
    *minor = d->cc_minor;
    return OK;
}
int nvmlDeviceGetMemoryInfo(void *h, memory_t *mem) {
    CHECK(h, "nvmlDeviceGetMemoryInfo");
    mem->total = d->memory;
    mem->free = d->memory;
    mem->used = 0;
    return OK;
}
int nvmlDeviceGetPciInfo_v3(void *h, pci_info_t *pci) {
    CHECK(h, "nvmlDeviceGetPciInfo_v3");
    memset(pci, 0, sizeof *pci);
    copy_str(pci->busId, sizeof pci->busId, d->bus_id);
    copy_str(pci->busIdLegacy, sizeof pci->busIdLegacy, d->bus_id + 4);
    sscanf(d->bus_id, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    return OK;
}
typedef struct { unsigned version, value; } addressing_mode_t;
int nvmlDeviceGetAddressingMode(void *h, addressing_mode_t *mode) {
    CHECK(h, "nvmlDeviceGetAddressingMode");
    if (d->addressing_mode < 0) return ERR_NOT_SUPPORTED;
    mode->value = (unsigned)d->addressing_mode;
    return OK;
}
int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *count) {
    CHECK(h, "nvmlDeviceGetMaxMigDeviceCount");
    if (d->mig_mode < 0) return ERR_NOT_SUPPORTED;
    *count = d->mig_max;
    return OK;
}
int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned index, void **mig) {
    CHECK(h, "nvmlDeviceGetMigDeviceHandleByIndex");
    if (d->is_mig || d->mig_mode != 1 || index >= d->mig_max || index >= MAX_MIGS) return ERR_INVALID_ARGUMENT;
    if (!migs[d->gpu][index].present) return ERR_NOT_FOUND;
    *mig = &migs[d->gpu][index];
    return OK;
}
int nvmlDeviceIsMigDeviceHandle(void *h, unsigned *is_mig) {
    CHECK(h, "nvmlDeviceIsMigDeviceHandle");
    *is_mig = (unsigned)d->is_mig;
    return OK;
}
int nvmlDeviceGetGpuInstanceId(void *h, unsigned *id) {
    CHECK(h, "nvmlDeviceGetGpuInstanceId");
    if (!d->is_mig) return ERR_INVALID_ARGUMENT;
    *id = d->gi_id;
    return OK;
}
int nvmlDeviceGetComputeInstanceId(void *h, unsigned *id) {
    CHECK(h, "nvmlDeviceGetComputeInstanceId");
    if (!d->is_mig) return ERR_INVALID_ARGUMENT;
    *id = d->ci_id;
    return OK;
}
/* MIG: GPU and compute instances, their profiles, placements, creation and destruction. */
#include "fake_nvml_mig.c"
