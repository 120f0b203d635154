/*
 * The fake NVML's MIG API (compiled into the same library: fake_nvml.c includes this file at its end and
 * shares its GPUs, handles and configuration). Signatures, structs and codes as nvml.h and pynvml declare
 * them. Configuration keys besides fake_nvml.c's gpu.<i>.profile.<index> and gpu.<i>.mig.<slot>:
 *
 *   gpu.<i>.placements.<index>=<size>:<start>,<start>,...   possible placements of profile <index>
 *   gpu.<i>.profile_name.<index>=<name>                     profile name ("1g.10gb"), reported as "MIG <name>"
 *
 * A GPU instance (GI) is created at one of its profile's placements; a placement sharing a memory slice with
 * an existing GI is refused (NVML_ERROR_INSUFFICIENT_RESOURCES). Each GI holds at most one compute instance
 * (CI); a CI is a MIG device (fake_nvml.c's migs[gpu][slot], handle by index and by UUID). Destroying a GI
 * that has a CI answers NVML_ERROR_IN_USE; MIG mode cannot change while GIs exist (NVML_ERROR_IN_USE).
 * With MIG unsupported (mig_mode -1) or off (0) the instance calls answer NVML_ERROR_NOT_SUPPORTED.
 *
 * Every call here is logged as "<symbol> <gpu>" lines: fakeNvmlMigCallLog() returns them,
 * fakeNvmlMigClearCallLog() empties the log.
 *
 * As in the real driver, instances outlive the NVML session and the process when $FAKE_NVML_MIG_STATE names a
 * file: every change (MIG mode, GI/CI created or destroyed) rewrites it (a new file renamed over the old one),
 * and the next nvmlInit reads it instead of the configured gpu.<i>.mig.<slot> devices. Crash injection:
 *
 *   mig_crash_after=<symbol>      the process kills itself (SIGKILL) right after that call's change is saved
 */
#include <signal.h>
#include <unistd.h>

#define ERR_IN_USE 19
#define ERR_INSUFFICIENT_RESOURCES 23
#define GI_PROFILE_INFO_V2 0x02000098
#define GI_PROFILE_INFO_V3 0x03000098
#define CI_PROFILE_INFO_V2 0x02000088
#define MAX_PLACEMENTS 8

typedef struct {
    int used;
    unsigned id, profile_index, start, size;
} mig_gi;

/* nvmlGpuInstanceProfileInfo_t (v1: no version, no name) and _v3_t (no isP2pSupported; capabilities last). */
typedef struct {
    unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount, decoderCount,
        encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} gi_profile_info_v1_t;
typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount, copyEngineCount, decoderCount,
        encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
    unsigned capabilities;
} gi_profile_info_v3_t;

typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[96];
} ci_profile_info_v2_t;

static mig_gi mgis[MAX_GPUS][MAX_MIGS];
static fake_instance gi_handles[MAX_GPUS][MAX_MIGS];
static unsigned placement_size[MAX_GPUS][MAX_PROFILES], placement_count[MAX_GPUS][MAX_PROFILES];
static unsigned placement_start[MAX_GPUS][MAX_PROFILES][MAX_PLACEMENTS];
static char profile_names[MAX_GPUS][MAX_PROFILES][32];
static int mig_pending[MAX_GPUS];
static char call_log[16384];
static char crash_after[96];

const char *fakeNvmlMigCallLog(void) { return call_log; }
void fakeNvmlMigClearCallLog(void) { call_log[0] = 0; }

static void log_call(const char *symbol, int gpu) {
    size_t used = strlen(call_log);
    snprintf(call_log + used, sizeof call_log - used, "%s %d\n", symbol, gpu);
}

static void mig_load_state(void);

static void mig_before_config(void) {
    crash_after[0] = 0;
    memset(mgis, 0, sizeof mgis);
    memset(placement_count, 0, sizeof placement_count);
    memset(profile_names, 0, sizeof profile_names);
    for (int g = 0; g < MAX_GPUS; g++) {
        mig_pending[g] = -1;
        for (int k = 0; k < MAX_MIGS; k++) {
            gi_handles[g][k].gpu = g;
            gi_handles[g][k].slot = k;
        }
    }
}

static void mig_apply_global(const char *key, const char *value) {
    if (!strcmp(key, "mig_crash_after")) copy_str(crash_after, sizeof crash_after, value);
}

static void mig_apply_key(int i, const char *field, const char *value) {
    unsigned idx;
    int consumed = 0;
    if (sscanf(field, "placements.%u%n", &idx, &consumed) == 1 && idx < MAX_PROFILES && !field[consumed]) {
        const char *p = value;
        char *end;
        placement_size[i][idx] = (unsigned)strtoul(p, &end, 10);
        placement_count[i][idx] = 0;
        if (*end != ':') return;
        p = end + 1;
        while (*p && placement_count[i][idx] < MAX_PLACEMENTS) {
            placement_start[i][idx][placement_count[i][idx]++] = (unsigned)strtoul(p, &end, 10);
            if (*end != ',') break;
            p = end + 1;
        }
    } else if (sscanf(field, "profile_name.%u%n", &idx, &consumed) == 1 && idx < MAX_PROFILES && !field[consumed]) {
        copy_str(profile_names[i][idx], sizeof profile_names[i][idx], value);
    }
}

/* The configured MIG devices (gpu.<i>.mig.<slot>) define the GPU instances that exist at start. */
static void mig_after_config(void) {
    for (int g = 0; g < MAX_GPUS; g++) {
        mig_pending[g] = gpus[g].mig_mode;
        for (int s = 0; s < MAX_MIGS; s++) {
            fake_dev *m = &migs[g][s];
            if (!m->present) continue;
            int found = 0;
            for (int k = 0; k < MAX_MIGS; k++) found |= mgis[g][k].used && mgis[g][k].id == m->gi_id;
            for (int k = 0; k < MAX_MIGS && !found; k++) {
                if (mgis[g][k].used) continue;
                mgis[g][k] = (mig_gi){1, m->gi_id, m->profile_index, m->placement_start, m->placement_size};
                found = 1;
            }
        }
    }
    /* not reset: the call log, cleared by the tests */
    mig_load_state();
}

/* ------------------------------------------------------------------------------- state across sessions */

static void mig_save_state(const char *symbol) {
    const char *path = getenv("FAKE_NVML_MIG_STATE");
    if (path && *path) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (f) {
            for (int g = 0; g < MAX_GPUS; g++) {
                fprintf(f, "mode %d %d\n", g, gpus[g].mig_mode);
                for (int k = 0; k < MAX_MIGS; k++) {
                    mig_gi *gi = &mgis[g][k];
                    if (gi->used)
                        fprintf(f, "gi %d %d %u %u %u %u\n", g, k, gi->id, gi->profile_index, gi->start, gi->size);
                }
                for (int s = 0; s < MAX_MIGS; s++) {
                    fake_dev *m = &migs[g][s];
                    if (m->present)
                        fprintf(f, "ci %d %d %u %u %u %u %u %u %s\n", g, s, m->gi_id, m->ci_id, m->profile_index,
                                m->placement_start, m->placement_size, m->ci_slices, m->uuid);
                }
            }
            fclose(f);
            rename(tmp, path);
        }
    }
    if (crash_after[0] && !strcmp(crash_after, symbol)) raise(SIGKILL);
}

static void mig_load_state(void) {
    const char *path = getenv("FAKE_NVML_MIG_STATE");
    if (!path || !*path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    memset(mgis, 0, sizeof mgis);
    for (int g = 0; g < MAX_GPUS; g++)
        for (int s = 0; s < MAX_MIGS; s++) migs[g][s].present = 0;
    char line[256], uuid[96];
    while (fgets(line, sizeof line, f)) {
        int g, k, mode;
        unsigned a, b, c, d, e, f2;
        if (sscanf(line, "mode %d %d", &g, &mode) == 2 && g >= 0 && g < MAX_GPUS) {
            gpus[g].mig_mode = mig_pending[g] = mode;
        } else if (sscanf(line, "gi %d %d %u %u %u %u", &g, &k, &a, &b, &c, &d) == 6 && g >= 0 && g < MAX_GPUS &&
                   k >= 0 && k < MAX_MIGS) {
            mgis[g][k] = (mig_gi){1, a, b, c, d};
        } else if (sscanf(line, "ci %d %d %u %u %u %u %u %u %95s", &g, &k, &a, &b, &c, &d, &e, &f2, uuid) == 9 &&
                   g >= 0 && g < MAX_GPUS && k >= 0 && k < MAX_MIGS) {
            fake_dev *m = &migs[g][k];
            m->present = 1;
            m->gi_id = a;
            m->ci_id = b;
            m->profile_index = c;
            m->placement_start = d;
            m->placement_size = e;
            m->ci_slices = f2;
            copy_str(m->uuid, sizeof m->uuid, uuid);
            if (gpus[g].mig_max < (unsigned)k + 1) gpus[g].mig_max = (unsigned)k + 1;
        }
    }
    fclose(f);
}

static int check_gpu(void *handle, const char *symbol, fake_dev **out) {
    int rc = check(handle, symbol, out);
    if (rc == OK) log_call(symbol, (*out)->gpu);
    if (rc == OK && (*out)->is_mig) return strcmp(symbol, "nvmlDeviceGetMigMode") ? ERR_INVALID_ARGUMENT : ERR_NOT_SUPPORTED;
    return rc;
}
#define CHECK_GPU(handle, symbol) \
    fake_dev *d; \
    int rc_ = check_gpu(handle, symbol, &d); \
    if (rc_ != OK) return rc_;

/* A GI handle: one of gi_handles, for a GI that exists. */
static mig_gi *gi_of(void *handle, const char *symbol, int *gpu, int *slot) {
    fake_instance *h = (fake_instance *)handle;
    if (!initialized || !h) return NULL;
    if (h < &gi_handles[0][0] || h > &gi_handles[MAX_GPUS - 1][MAX_MIGS - 1]) return NULL;
    mig_gi *gi = &mgis[h->gpu][h->slot];
    log_call(symbol, h->gpu);
    if (!gi->used) return NULL;
    *gpu = h->gpu;
    *slot = h->slot;
    return gi;
}

static fake_profile *profile_by_id(int g, unsigned id, unsigned *index) {
    for (unsigned i = 0; i < MAX_PROFILES; i++) {
        if (profiles[g][i].valid && profiles[g][i].id == id) {
            *index = i;
            return &profiles[g][i];
        }
    }
    return NULL;
}

static int overlaps_existing(int g, unsigned start, unsigned size) {
    for (int k = 0; k < MAX_MIGS; k++) {
        mig_gi *gi = &mgis[g][k];
        if (gi->used && start < gi->start + gi->size && gi->start < start + size) return 1;
    }
    return 0;
}

static int mig_on(fake_dev *d) { return d->mig_mode == 1; }

static int gi_count(int g) {
    int n = 0;
    for (int k = 0; k < MAX_MIGS; k++) n += mgis[g][k].used;
    return n;
}

/* ------------------------------------------------------------------------------------------ MIG mode */

int nvmlDeviceGetMigMode(void *h, unsigned *current, unsigned *pending) {
    CHECK_GPU(h, "nvmlDeviceGetMigMode");
    if (d->mig_mode < 0) return ERR_NOT_SUPPORTED;
    *current = (unsigned)d->mig_mode;
    *pending = (unsigned)mig_pending[d->gpu];
    return OK;
}

int nvmlDeviceSetMigMode(void *h, unsigned mode, int *activation_status) {
    CHECK_GPU(h, "nvmlDeviceSetMigMode");
    if (d->mig_mode < 0) return ERR_NOT_SUPPORTED;
    if (mode > 1) return ERR_INVALID_ARGUMENT;
    if (gi_count(d->gpu)) return ERR_IN_USE;
    d->mig_mode = mig_pending[d->gpu] = (int)mode;
    if (activation_status) *activation_status = OK;
    mig_save_state("nvmlDeviceSetMigMode");
    return OK;
}

/* ------------------------------------------------------------------------------- GPU-instance profiles */

/* Fills a v2 record (the one every version is copied from). */
static int gi_profile(fake_dev *d, unsigned index, gi_profile_info_v2_t *info) {
    if (index >= MAX_PROFILES) return ERR_INVALID_ARGUMENT;
    fake_profile *p = &profiles[d->gpu][index];
    if (d->mig_mode < 0 || !p->valid) return ERR_NOT_SUPPORTED;
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->slices;
    info->instanceCount = placement_count[d->gpu][index] ? placement_count[d->gpu][index] : 1;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->ce;
    info->decoderCount = p->dec;
    info->encoderCount = p->enc;
    info->jpegCount = p->jpeg;
    info->ofaCount = p->ofa;
    info->memorySizeMB = p->mem_mib;
    if (profile_names[d->gpu][index][0])
        snprintf(info->name, sizeof info->name, "MIG %s", profile_names[d->gpu][index]);
    else
        snprintf(info->name, sizeof info->name, "MIG %ug", p->slices);
    return OK;
}

int nvmlDeviceGetGpuInstanceProfileInfoV(void *h, unsigned index, void *out) {
    CHECK_GPU(h, "nvmlDeviceGetGpuInstanceProfileInfoV");
    if (!out) return ERR_INVALID_ARGUMENT;
    unsigned version = *(unsigned *)out;
    if (version != GI_PROFILE_INFO_V2 && version != GI_PROFILE_INFO_V3) return ERR_INVALID_ARGUMENT;
    gi_profile_info_v2_t v2;
    int rc = gi_profile(d, index, &v2);
    if (rc != OK) return rc;
    if (version == GI_PROFILE_INFO_V2) {
        v2.version = version;
        memcpy(out, &v2, sizeof v2);
        return OK;
    }
    gi_profile_info_v3_t *v3 = out;
    *v3 = (gi_profile_info_v3_t){version, v2.id, v2.sliceCount, v2.instanceCount, v2.multiprocessorCount,
                                 v2.copyEngineCount, v2.decoderCount, v2.encoderCount, v2.jpegCount, v2.ofaCount,
                                 v2.memorySizeMB, {0}, 0};
    memcpy(v3->name, v2.name, sizeof v3->name);
    return OK;
}

int nvmlDeviceGetGpuInstanceProfileInfo(void *h, unsigned index, gi_profile_info_v1_t *info) {
    CHECK_GPU(h, "nvmlDeviceGetGpuInstanceProfileInfo");
    if (!info) return ERR_INVALID_ARGUMENT;
    gi_profile_info_v2_t v2;
    int rc = gi_profile(d, index, &v2);
    if (rc != OK) return rc;
    *info = (gi_profile_info_v1_t){v2.id, v2.isP2pSupported, v2.sliceCount, v2.instanceCount,
                                   v2.multiprocessorCount, v2.copyEngineCount, v2.decoderCount, v2.encoderCount,
                                   v2.jpegCount, v2.ofaCount, v2.memorySizeMB};
    return OK;
}

int nvmlDeviceGetGpuInstanceProfileInfoByIdV(void *h, unsigned profile_id, gi_profile_info_v2_t *info) {
    CHECK_GPU(h, "nvmlDeviceGetGpuInstanceProfileInfoByIdV");
    if (!info || info->version != GI_PROFILE_INFO_V2) return ERR_INVALID_ARGUMENT;
    unsigned index;
    if (d->mig_mode < 0) return ERR_NOT_SUPPORTED;
    if (!profile_by_id(d->gpu, profile_id, &index)) return ERR_INVALID_ARGUMENT;
    return gi_profile(d, index, info);
}

int nvmlDeviceGetGpuInstancePossiblePlacements_v2(void *h, unsigned profile_id, placement_t *placements,
                                                  unsigned *count) {
    CHECK_GPU(h, "nvmlDeviceGetGpuInstancePossiblePlacements_v2");
    if (!count) return ERR_INVALID_ARGUMENT;
    if (!mig_on(d)) return ERR_NOT_SUPPORTED;
    unsigned index;
    if (!profile_by_id(d->gpu, profile_id, &index)) return ERR_INVALID_ARGUMENT;
    unsigned n = placement_count[d->gpu][index];
    if (!placements) {
        *count = n;
        return OK;
    }
    if (*count < n) {
        *count = n;
        return ERR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++)
        placements[i] = (placement_t){placement_start[d->gpu][index][i], placement_size[d->gpu][index]};
    *count = n;
    return OK;
}

int nvmlDeviceGetGpuInstanceRemainingCapacity(void *h, unsigned profile_id, unsigned *count) {
    CHECK_GPU(h, "nvmlDeviceGetGpuInstanceRemainingCapacity");
    if (!mig_on(d)) return ERR_NOT_SUPPORTED;
    unsigned index;
    if (!profile_by_id(d->gpu, profile_id, &index)) return ERR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned i = 0; i < placement_count[d->gpu][index]; i++)
        n += !overlaps_existing(d->gpu, placement_start[d->gpu][index][i], placement_size[d->gpu][index]);
    *count = n;
    return OK;
}

/* ------------------------------------------------------------------------------------- GPU instances */

int nvmlDeviceCreateGpuInstanceWithPlacement(void *h, unsigned profile_id, const placement_t *placement,
                                             void **gi_out) {
    CHECK_GPU(h, "nvmlDeviceCreateGpuInstanceWithPlacement");
    if (!placement || !gi_out) return ERR_INVALID_ARGUMENT;
    if (!mig_on(d)) return ERR_NOT_SUPPORTED;
    int g = d->gpu;
    unsigned index;
    if (!profile_by_id(g, profile_id, &index)) return ERR_INVALID_ARGUMENT;
    int possible = 0;
    for (unsigned i = 0; i < placement_count[g][index]; i++)
        possible |= placement_start[g][index][i] == placement->start && placement_size[g][index] == placement->size;
    if (!possible) return ERR_INVALID_ARGUMENT;
    if (overlaps_existing(g, placement->start, placement->size)) return ERR_INSUFFICIENT_RESOURCES;
    for (int k = 0; k < MAX_MIGS; k++) {
        if (mgis[g][k].used) continue;
        unsigned id = 1;
        for (int taken = 1; taken;) {
            taken = 0;
            for (int j = 0; j < MAX_MIGS; j++) taken |= mgis[g][j].used && mgis[g][j].id == id;
            if (taken) id++;
        }
        mgis[g][k] = (mig_gi){1, id, index, placement->start, placement->size};
        *gi_out = &gi_handles[g][k];
        mig_save_state("nvmlDeviceCreateGpuInstanceWithPlacement");
        return OK;
    }
    return ERR_INSUFFICIENT_RESOURCES;
}

int nvmlDeviceGetGpuInstances(void *h, unsigned profile_id, void **out, unsigned *count) {
    CHECK_GPU(h, "nvmlDeviceGetGpuInstances");
    if (!count) return ERR_INVALID_ARGUMENT;
    if (!mig_on(d)) return ERR_NOT_SUPPORTED;
    unsigned index, n = 0;
    if (!profile_by_id(d->gpu, profile_id, &index)) return ERR_INVALID_ARGUMENT;
    for (int k = 0; k < MAX_MIGS; k++) {
        if (!mgis[d->gpu][k].used || mgis[d->gpu][k].profile_index != index) continue;
        if (out) out[n] = &gi_handles[d->gpu][k];
        n++;
    }
    *count = n;
    return OK;
}

int nvmlDeviceGetGpuInstanceById(void *h, unsigned id, void **gi) {
    CHECK_GPU(h, "nvmlDeviceGetGpuInstanceById");
    if (!mig_on(d)) return ERR_NOT_SUPPORTED;
    for (int k = 0; k < MAX_MIGS; k++) {
        if (mgis[d->gpu][k].used && mgis[d->gpu][k].id == id) {
            *gi = &gi_handles[d->gpu][k];
            return OK;
        }
    }
    return ERR_NOT_FOUND;
}

int nvmlGpuInstanceGetInfo(void *handle, gi_info_t *info) {
    int g, k;
    mig_gi *gi = gi_of(handle, "nvmlGpuInstanceGetInfo", &g, &k);
    if (!initialized) return ERR_UNINITIALIZED;
    if (!gi || !info) return ERR_INVALID_ARGUMENT;
    for (int s = 0; s < MAX_MIGS; s++) {
        fake_dev *m = &migs[g][s];
        if (m->present && m->gi_id == gi->id && !strcmp(m->fail_symbol, "nvmlGpuInstanceGetInfo"))
            return m->fail_code;
    }
    info->device = &gpus[g];
    info->id = gi->id;
    info->profileId = profiles[g][gi->profile_index].id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return OK;
}

int nvmlGpuInstanceDestroy(void *handle) {
    int g, k;
    mig_gi *gi = gi_of(handle, "nvmlGpuInstanceDestroy", &g, &k);
    if (!initialized) return ERR_UNINITIALIZED;
    if (!gi) return ERR_INVALID_ARGUMENT;
    for (int s = 0; s < MAX_MIGS; s++)
        if (migs[g][s].present && migs[g][s].gi_id == gi->id) return ERR_IN_USE;
    gi->used = 0;
    mig_save_state("nvmlGpuInstanceDestroy");
    return OK;
}

/* --------------------------------------------------------------------------------- compute instances */

static const unsigned ci_slices_by_index[] = {1, 2, 3, 4, 7, 8, 6};

int nvmlGpuInstanceGetComputeInstanceProfileInfoV(void *handle, unsigned profile, unsigned eng_profile,
                                                  ci_profile_info_v2_t *info) {
    int g, k;
    mig_gi *gi = gi_of(handle, "nvmlGpuInstanceGetComputeInstanceProfileInfoV", &g, &k);
    if (!initialized) return ERR_UNINITIALIZED;
    if (!gi || !info || info->version != CI_PROFILE_INFO_V2 || eng_profile != 0) return ERR_INVALID_ARGUMENT;
    if (profile >= sizeof ci_slices_by_index / sizeof ci_slices_by_index[0]) return ERR_NOT_SUPPORTED;
    fake_profile *p = &profiles[g][gi->profile_index];
    unsigned slices = ci_slices_by_index[profile];
    if (slices > p->slices) return ERR_NOT_SUPPORTED;
    info->id = profile;
    info->sliceCount = slices;
    info->instanceCount = p->slices / slices;
    info->multiprocessorCount = p->sms * slices / p->slices;
    info->sharedCopyEngineCount = p->ce;
    info->sharedDecoderCount = p->dec;
    info->sharedEncoderCount = p->enc;
    info->sharedJpegCount = p->jpeg;
    info->sharedOfaCount = p->ofa;
    snprintf(info->name, sizeof info->name, "MIG %uc.%s", slices, profile_names[g][gi->profile_index]);
    return OK;
}

int nvmlGpuInstanceCreateComputeInstance(void *handle, unsigned profile, void **ci_out) {
    int g, k;
    mig_gi *gi = gi_of(handle, "nvmlGpuInstanceCreateComputeInstance", &g, &k);
    if (!initialized) return ERR_UNINITIALIZED;
    if (!gi || !ci_out) return ERR_INVALID_ARGUMENT;
    fake_profile *p = &profiles[g][gi->profile_index];
    if (profile >= sizeof ci_slices_by_index / sizeof ci_slices_by_index[0]) return ERR_INVALID_ARGUMENT;
    unsigned slices = ci_slices_by_index[profile];
    if (slices > p->slices) return ERR_NOT_SUPPORTED;
    for (int s = 0; s < MAX_MIGS; s++)
        if (migs[g][s].present && migs[g][s].gi_id == gi->id) return ERR_INSUFFICIENT_RESOURCES;
    for (int s = 0; s < MAX_MIGS; s++) {
        fake_dev *m = &migs[g][s];
        if (m->present) continue;
        m->present = 1;
        m->gi_id = gi->id;
        m->ci_id = 0;
        m->profile_index = gi->profile_index;
        m->placement_start = gi->start;
        m->placement_size = gi->size;
        m->ci_slices = slices;
        snprintf(m->uuid, sizeof m->uuid, "MIG-%08x-0000-4000-8000-%012x", (unsigned)(0xf00d0000u + (unsigned)g),
                 gi->id * 16 + (unsigned)s);
        if (gpus[g].mig_max < (unsigned)s + 1) gpus[g].mig_max = (unsigned)s + 1;
        *ci_out = &cis[g][s];
        mig_save_state("nvmlGpuInstanceCreateComputeInstance");
        return OK;
    }
    return ERR_INSUFFICIENT_RESOURCES;
}

/* A CI handle: one of cis, for a MIG device that exists. */
static fake_dev *ci_of(void *handle, const char *symbol) {
    fake_instance *h = (fake_instance *)handle;
    if (!initialized || !h) return NULL;
    if (h < &cis[0][0] || h > &cis[MAX_GPUS - 1][MAX_MIGS - 1]) return NULL;
    log_call(symbol, h->gpu);
    fake_dev *m = &migs[h->gpu][h->slot];
    return m->present ? m : NULL;
}

int nvmlGpuInstanceGetComputeInstances(void *handle, unsigned profile, void **out, unsigned *count) {
    int g, k;
    mig_gi *gi = gi_of(handle, "nvmlGpuInstanceGetComputeInstances", &g, &k);
    if (!initialized) return ERR_UNINITIALIZED;
    if (!gi || !count) return ERR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int s = 0; s < MAX_MIGS; s++) {
        fake_dev *m = &migs[g][s];
        if (!m->present || m->gi_id != gi->id) continue;
        if (profile < sizeof ci_slices_by_index / sizeof ci_slices_by_index[0] &&
            ci_slices_by_index[profile] != m->ci_slices)
            continue;
        if (out) out[n] = &cis[g][s];
        n++;
    }
    *count = n;
    return OK;
}

int nvmlGpuInstanceGetComputeInstanceById(void *handle, unsigned id, void **ci) {
    int g, k;
    mig_gi *gi = gi_of(handle, "nvmlGpuInstanceGetComputeInstanceById", &g, &k);
    if (!initialized) return ERR_UNINITIALIZED;
    if (!gi) return ERR_INVALID_ARGUMENT;
    for (int s = 0; s < MAX_MIGS; s++) {
        fake_dev *m = &migs[g][s];
        if (m->present && m->gi_id == gi->id && m->ci_id == id) {
            *ci = &cis[g][s];
            return OK;
        }
    }
    return ERR_NOT_FOUND;
}

int nvmlComputeInstanceGetInfo_v2(void *handle, ci_info_t *info) {
    fake_dev *m = ci_of(handle, "nvmlComputeInstanceGetInfo_v2");
    if (!initialized) return ERR_UNINITIALIZED;
    if (!m || !info) return ERR_INVALID_ARGUMENT;
    if (!strcmp(m->fail_symbol, "nvmlComputeInstanceGetInfo_v2")) return m->fail_code;
    int g = m->gpu;
    info->device = &gpus[g];
    info->gpuInstance = NULL;
    for (int k = 0; k < MAX_MIGS; k++)
        if (mgis[g][k].used && mgis[g][k].id == m->gi_id) info->gpuInstance = &gi_handles[g][k];
    info->id = m->ci_id;
    info->profileId = m->profile_index;
    for (unsigned i = 0; i < sizeof ci_slices_by_index / sizeof ci_slices_by_index[0]; i++)
        if (ci_slices_by_index[i] == m->ci_slices) info->profileId = i;
    info->placement.start = 0;
    info->placement.size = m->ci_slices;
    return OK;
}

int nvmlComputeInstanceDestroy(void *handle) {
    fake_dev *m = ci_of(handle, "nvmlComputeInstanceDestroy");
    if (!initialized) return ERR_UNINITIALIZED;
    if (!m) return ERR_INVALID_ARGUMENT;
    m->present = 0;
    mig_save_state("nvmlComputeInstanceDestroy");
    return OK;
}
