/*
 * A fake libnvidia-ml.so.1 for tests: the real pynvml loads it and sees the GPUs described by its
 * configuration, read at every first nvmlInitWithFlags from the first of:
 *
 *   1. the file named in $FAKE_NVML_CONFIG;
 *   2. `fake-nvml.conf` in the folder of the library file itself (found with dladdr, as the loader
 *      opened it): a driver root's configuration, for a process given no environment (the chart's
 *      plugin container sees the root at /driver-root);
 *   3. the configuration compiled in with -DFAKE_NVML_BUILTIN_CONFIG="<lines>" (fake_nvml.build's
 *      `builtin`): the only one a container has whose CDI spec mounts the library file alone.
 *
 * None of them: no GPU. One "key=value" per line:
 *
 *   init_error=9                      nvmlInitWithFlags returns this code (9 = DRIVER_NOT_LOADED)
 *   event_set_error=3                 nvmlEventSetCreate returns this code (3 = NOT_SUPPORTED)
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
 *   gpu.<i>.events=<mask>             nvmlDeviceGetSupportedEventTypes (default 0xB: single/double-bit ECC, XID)
 *
 *   event_file=<path>                 events from another process (the plugin in its container): each line
 *                                     "<gpu> <type> <data>[ <gi> <ci>]" appended to the file is queued as
 *                                     fakeNvmlInjectEvent would queue it, read by waiting calls (every 50 ms
 *                                     while one waits); lines present when the configuration is read count
 *                                     as already delivered
 *
 *   require_device_nodes=<dir>[,<dir>...]
 *                                     as the real NVML in a container: a GPU is listed (counted, indexed,
 *                                     found by UUID) only while `<dir>/nvidia<minor>` is a character device
 *                                     in one of the folders; checked at each first nvmlInitWithFlags
 *
 * Unset GPU fields get defaults (an A30 at minor <i>). fakeNvmlInitCount()/fakeNvmlShutdownCount()
 * let tests check that NVML was shut down after use. NVML counts initialisations: the file is read when
 * the count goes from 0 to 1, and only the last nvmlShutdown ends the session.
 *
 * Events (nvml.h's event API: nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes,
 * nvmlDeviceRegisterEvents, nvmlEventSetWait_v2, nvmlEventSetFree) come from the test:
 *   fakeNvmlInjectEvent(gpu, type, data, gi, ci)   queue an event for GPU <gpu> (delivered to the sets the
 *                                                  GPU is registered on for <type>)
 *   fakeNvmlSetLost(gpu, lost)                     every call on that GPU (and its MIG devices) answers
 *                                                  NVML_ERROR_GPU_IS_LOST (15) while lost
 *   fakeNvmlWaiting()                              threads blocked in nvmlEventSetWait_v2 now
 *   fakeNvmlQueued()                               injected events not yet delivered
 *   fakeNvmlEventSets()                            event sets created and not freed
 *   fakeNvmlReset()                                no events, no lost GPUs, no registrations
 * These survive re-reading the configuration.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_GPUS 16
#define MAX_MIGS 8
#define MAX_PROFILES 18

#define OK 0
#define ERR_UNINITIALIZED 1
#define ERR_INVALID_ARGUMENT 2
#define ERR_NOT_SUPPORTED 3
#define ERR_NOT_FOUND 6
#define ERR_INSUFFICIENT_SIZE 7
#define ERR_TIMEOUT 10
#define ERR_GPU_IS_LOST 15
#define MAX_EVENTS 64
#define MAX_SETS 8

typedef struct {
    int is_mig, gpu, slot, present;
    char name[96], uuid[96], bus_id[32];
    unsigned minor, brand, arch, mig_max;
    int mig_mode, cc_major, cc_minor, addressing_mode;
    unsigned long long memory;
    char fail_symbol[96];
    int fail_code;
    unsigned gi_id, ci_id, profile_index, placement_start, placement_size, ci_slices;
    unsigned long long events;
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
/* The GPUs NVML lists, by gpus[] index: all of device_count, or those whose device node is present. */
static unsigned visible[MAX_GPUS], visible_count;
static char require_nodes[512];
static char event_file[512];
static long event_file_offset;
static int initialized, init_error, event_set_error, cuda_driver_version;
static char driver_version[80];
static int init_calls, shutdown_calls, init_refs;

/* Event state: not part of the configuration, so it survives re-reading it. */
typedef struct { void *device; unsigned long long eventType, eventData; unsigned gpuInstanceId, computeInstanceId; } event_data_t;
typedef struct { int gpu; unsigned long long type, data; unsigned gi, ci; } fake_event;
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static fake_event queue[MAX_EVENTS];
static int queue_len, waiting, lost[MAX_GPUS];
static int set_used[MAX_SETS];
static unsigned long long registered[MAX_SETS][MAX_GPUS];

int fakeNvmlInitCount(void) { return init_calls; }
int fakeNvmlShutdownCount(void) { return shutdown_calls; }

static void set_defaults(void) {
    memset(gpus, 0, sizeof gpus);
    memset(migs, 0, sizeof migs);
    memset(profiles, 0, sizeof profiles);
    device_count = 0;
    require_nodes[0] = 0;
    event_file[0] = 0;
    init_error = 0;
    event_set_error = 0;
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
        d->events = 0xB;
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
    else if (!strcmp(field, "events")) d->events = strtoull(value, NULL, 0);
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

/* `fake-nvml.conf` beside this library's file, as the loader opened it. */
static FILE *open_beside_library(void) {
    Dl_info info;
    if (!dladdr((void *)&set_defaults, &info) || !info.dli_fname || info.dli_fname[0] != '/') return NULL;
    char copy[4096], path[4200];
    snprintf(copy, sizeof copy, "%s", info.dli_fname);
    snprintf(path, sizeof path, "%s/fake-nvml.conf", dirname(copy));
    return fopen(path, "r");
}

static FILE *open_config(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (path) return fopen(path, "r");
    FILE *f = open_beside_library();
    if (f) return f;
#ifdef FAKE_NVML_BUILTIN_CONFIG
    static const char builtin[] = FAKE_NVML_BUILTIN_CONFIG;
    return fmemopen((void *)builtin, sizeof builtin - 1, "r");
#else
    return NULL;
#endif
}

/* Which GPUs are listed: every configured one, or with require_device_nodes those with a device node. */
static void find_visible(void) {
    visible_count = 0;
    for (unsigned i = 0; i < device_count; i++) {
        int present = !require_nodes[0];
        char dirs[sizeof require_nodes], *save = NULL;
        snprintf(dirs, sizeof dirs, "%s", require_nodes);
        for (char *dir = strtok_r(dirs, ",", &save); dir && !present; dir = strtok_r(NULL, ",", &save)) {
            char node[600];
            struct stat st;
            snprintf(node, sizeof node, "%s/nvidia%u", dir, gpus[i].minor);
            present = stat(node, &st) == 0 && S_ISCHR(st.st_mode);
        }
        if (present) visible[visible_count++] = i;
    }
}

static void load_config(void) {
    set_defaults();
    mig_before_config();
    FILE *f = open_config();
    if (!f) {
        find_visible();
        return;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#') continue;
        *eq = 0;
        const char *key = line, *value = eq + 1;
        int i, consumed = 0;
        if (!strcmp(key, "init_error")) init_error = atoi(value);
        else if (!strcmp(key, "event_set_error")) event_set_error = atoi(value);
        else if (!strcmp(key, "driver_version")) copy_str(driver_version, sizeof driver_version, value);
        else if (!strcmp(key, "cuda_driver_version")) cuda_driver_version = atoi(value);
        else if (!strcmp(key, "device_count")) device_count = (unsigned)strtoul(value, NULL, 10);
        else if (!strcmp(key, "require_device_nodes")) copy_str(require_nodes, sizeof require_nodes, value);
        else if (!strcmp(key, "event_file")) copy_str(event_file, sizeof event_file, value);
        else if (sscanf(key, "gpu.%d.%n", &i, &consumed) == 1 && consumed > 0 && i >= 0 && i < MAX_GPUS)
            apply_gpu_key(&gpus[i], i, key + consumed, value);
        else
            mig_apply_global(key, value);
    }
    fclose(f);
    if (device_count > MAX_GPUS) device_count = MAX_GPUS;
    struct stat events;
    event_file_offset = event_file[0] && stat(event_file, &events) == 0 ? (long)events.st_size : 0;
    find_visible();
    mig_after_config();
}

/* Every per-device call starts here: initialised, a valid handle, and the configured failure. */
static int is_lost(int gpu) {
    pthread_mutex_lock(&ev_lock);
    int l = lost[gpu];
    pthread_mutex_unlock(&ev_lock);
    return l;
}

static int check(void *handle, const char *symbol, fake_dev **out) {
    if (!initialized) return ERR_UNINITIALIZED;
    fake_dev *d = (fake_dev *)handle;
    if (!d) return ERR_INVALID_ARGUMENT;
    if (is_lost(d->gpu)) return ERR_GPU_IS_LOST;
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
    init_calls++;
    if (init_refs == 0) {
        load_config();
        if (init_error) return init_error;
    }
    init_refs++;
    initialized = 1;
    return OK;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) {
    shutdown_calls++;
    if (!initialized) return ERR_UNINITIALIZED;
    if (--init_refs == 0) initialized = 0;
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
    *count = visible_count;
    return OK;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    if (!initialized) return ERR_UNINITIALIZED;
    if (index >= visible_count) return ERR_INVALID_ARGUMENT;
    fake_dev *d = &gpus[visible[index]];
    if (is_lost(d->gpu)) return ERR_GPU_IS_LOST;
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

/* ------------------------------------------------------------------------------------------ by UUID */

int nvmlDeviceGetHandleByUUID(const char *uuid, void **handle) {
    if (!initialized) return ERR_UNINITIALIZED;
    if (!uuid) return ERR_INVALID_ARGUMENT;
    for (unsigned v = 0; v < visible_count; v++) {
        unsigned i = visible[v];
        fake_dev *d = &gpus[i];
        if (!strcmp(d->uuid, uuid)) {
            if (is_lost(d->gpu)) return ERR_GPU_IS_LOST;
            if (!strcmp(d->fail_symbol, "nvmlDeviceGetHandleByUUID")) return d->fail_code;
            *handle = d;
            return OK;
        }
        for (int s = 0; s < MAX_MIGS; s++) {
            fake_dev *m = &migs[i][s];
            if (m->present && !strcmp(m->uuid, uuid)) {
                if (is_lost(m->gpu)) return ERR_GPU_IS_LOST;
                *handle = m;
                return OK;
            }
        }
    }
    return ERR_NOT_FOUND;
}

/* ------------------------------------------------------------------------------------------- events */

int nvmlEventSetCreate(void **set) {
    if (!initialized) return ERR_UNINITIALIZED;
    if (!set) return ERR_INVALID_ARGUMENT;
    if (event_set_error) return event_set_error;
    pthread_mutex_lock(&ev_lock);
    for (int i = 0; i < MAX_SETS; i++) {
        if (!set_used[i]) {
            set_used[i] = 1;
            memset(registered[i], 0, sizeof registered[i]);
            pthread_mutex_unlock(&ev_lock);
            *set = (void *)(long)(i + 1);
            return OK;
        }
    }
    pthread_mutex_unlock(&ev_lock);
    return ERR_INSUFFICIENT_SIZE;
}

static int set_index(void *set) {
    long i = (long)set - 1;
    return (i >= 0 && i < MAX_SETS && set_used[i]) ? (int)i : -1;
}

int nvmlEventSetFree(void *set) {
    if (!initialized) return ERR_UNINITIALIZED;
    pthread_mutex_lock(&ev_lock);
    int i = set_index(set);
    if (i >= 0) set_used[i] = 0;
    pthread_cond_broadcast(&ev_cond);
    pthread_mutex_unlock(&ev_lock);
    return i >= 0 ? OK : ERR_INVALID_ARGUMENT;
}

int nvmlDeviceGetSupportedEventTypes(void *h, unsigned long long *types) {
    CHECK(h, "nvmlDeviceGetSupportedEventTypes");
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    *types = d->events;
    return OK;
}

int nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set) {
    CHECK(h, "nvmlDeviceRegisterEvents");
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    if (types & ~d->events) return ERR_NOT_SUPPORTED;
    pthread_mutex_lock(&ev_lock);
    int i = set_index(set);
    if (i >= 0) registered[i][d->gpu] |= types;
    pthread_mutex_unlock(&ev_lock);
    return i >= 0 ? OK : ERR_INVALID_ARGUMENT;
}

/* Queue the complete lines appended to event_file since the last read (ev_lock held). */
static void read_event_file(void) {
    if (!event_file[0]) return;
    FILE *f = fopen(event_file, "r");
    if (!f) return;
    if (fseek(f, event_file_offset, SEEK_SET) == 0) {
        char line[256];
        while (fgets(line, sizeof line, f) && strchr(line, '\n')) {
            event_file_offset += (long)strlen(line);
            int gpu;
            unsigned long long type, value;
            unsigned gi = 0xFFFFFFFFu, ci = 0xFFFFFFFFu;
            if (sscanf(line, "%d %lli %lli %u %u", &gpu, &type, &value, &gi, &ci) >= 3 && gpu >= 0 &&
                gpu < MAX_GPUS && queue_len < MAX_EVENTS)
                queue[queue_len++] = (fake_event){gpu, type, value, gi, ci};
        }
    }
    fclose(f);
}

int nvmlEventSetWait_v2(void *set, event_data_t *data, unsigned timeoutms) {
    if (!initialized) return ERR_UNINITIALIZED;
    if (!data) return ERR_INVALID_ARGUMENT;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeoutms / 1000;
    until.tv_nsec += (long)(timeoutms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&ev_lock);
    int rc = ERR_TIMEOUT;
    waiting++;
    for (;;) {
        int i = set_index(set);
        if (i < 0) {
            rc = ERR_INVALID_ARGUMENT;
            break;
        }
        read_event_file();
        int found = -1;
        for (int e = 0; e < queue_len && found < 0; e++)
            if (registered[i][queue[e].gpu] & queue[e].type) found = e;
        if (found >= 0) {
            fake_event ev = queue[found];
            memmove(&queue[found], &queue[found + 1], sizeof queue[0] * (size_t)(queue_len - found - 1));
            queue_len--;
            data->device = &gpus[ev.gpu];
            data->eventType = ev.type;
            data->eventData = ev.data;
            data->gpuInstanceId = ev.gi;
            data->computeInstanceId = ev.ci;
            rc = OK;
            break;
        }
        struct timespec now, step;
        clock_gettime(CLOCK_REALTIME, &now);
        if (now.tv_sec > until.tv_sec || (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec)) break;
        step = until;
        if (event_file[0]) { /* look at the file again in 50 ms */
            step = now;
            step.tv_nsec += 50000000L;
            if (step.tv_nsec >= 1000000000L) {
                step.tv_sec++;
                step.tv_nsec -= 1000000000L;
            }
            if (step.tv_sec > until.tv_sec || (step.tv_sec == until.tv_sec && step.tv_nsec > until.tv_nsec))
                step = until;
        }
        pthread_cond_timedwait(&ev_cond, &ev_lock, &step);
    }
    waiting--;
    pthread_mutex_unlock(&ev_lock);
    return rc;
}

/* ---------------------------------------------------------------------------------- test controls */

int fakeNvmlInjectEvent(int gpu, unsigned long long type, unsigned long long data, unsigned gi, unsigned ci) {
    if (gpu < 0 || gpu >= MAX_GPUS) return ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ev_lock);
    int rc = ERR_INSUFFICIENT_SIZE;
    if (queue_len < MAX_EVENTS) {
        queue[queue_len++] = (fake_event){gpu, type, data, gi, ci};
        rc = OK;
    }
    pthread_cond_broadcast(&ev_cond);
    pthread_mutex_unlock(&ev_lock);
    return rc;
}

int fakeNvmlSetLost(int gpu, int is_lost_now) {
    if (gpu < 0 || gpu >= MAX_GPUS) return ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ev_lock);
    lost[gpu] = is_lost_now;
    pthread_mutex_unlock(&ev_lock);
    return OK;
}

int fakeNvmlWaiting(void) {
    pthread_mutex_lock(&ev_lock);
    int w = waiting;
    pthread_mutex_unlock(&ev_lock);
    return w;
}

int fakeNvmlQueued(void) {
    pthread_mutex_lock(&ev_lock);
    int n = queue_len;
    pthread_mutex_unlock(&ev_lock);
    return n;
}

int fakeNvmlEventSets(void) {
    pthread_mutex_lock(&ev_lock);
    int n = 0;
    for (int i = 0; i < MAX_SETS; i++) n += set_used[i];
    pthread_mutex_unlock(&ev_lock);
    return n;
}

void fakeNvmlReset(void) {
    pthread_mutex_lock(&ev_lock);
    queue_len = 0;
    memset(lost, 0, sizeof lost);
    memset(set_used, 0, sizeof set_used);
    memset(registered, 0, sizeof registered);
    pthread_mutex_unlock(&ev_lock);
}
