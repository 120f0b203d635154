/* A stub nvidia-smi: dlopen()s libnvidia-ml.so.1 by SONAME, as the real one does.
 *
 *   nvidia-smi, nvidia-smi -L                 the `-L` lines: "GPU <i>: <name> (UUID: <uuid>)"
 *   nvidia-smi -i <id> -c <mode>              compute mode DEFAULT, EXCLUSIVE_PROCESS or PROHIBITED (or 0, 2, 3)
 *   nvidia-smi compute-policy -i <id> --set-timeslice <n>   time-slice 0 (default) to 3 (long)
 *
 * <id> is a UUID or an index of a GPU NVML lists (the fake NVML lists only the GPUs whose device node is
 * present where its configuration says). A setting the real tool would apply is appended, one line
 * "<uuid> compute-mode <MODE>" or "<uuid> timeslice <n>", to the file named by $FAKE_NVIDIA_SMI_LOG (when
 * set): what the GPU was told. Exit 9 when the library is not found, 6 for an unknown GPU, 2 for other
 * bad arguments (the real tool's codes). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*init_fn)(unsigned);
typedef int (*count_fn)(unsigned *);
typedef int (*handle_fn)(unsigned, void **);
typedef int (*string_fn)(void *, char *, unsigned);

static count_fn count;
static handle_fn handle;
static string_fn name, uuid;

static int usage(const char *why) {
    fprintf(stderr, "%s\nPlease run 'nvidia-smi -h' for help.\n", why);
    return 2;
}

/* The UUID of GPU <id> (a UUID or an index NVML lists) into `out`; 0 when found. */
static int find_gpu(const char *id, char *out, unsigned size) {
    unsigned n = 0;
    count(&n);
    for (unsigned i = 0; i < n; i++) {
        void *h;
        char index[16];
        if (handle(i, &h) || uuid(h, out, size)) return 3;
        snprintf(index, sizeof index, "%u", i);
        if (!strcmp(id, out) || !strcmp(id, index)) return 0;
    }
    return 1;
}

static int record(const char *gpu, const char *what, const char *value) {
    const char *path = getenv("FAKE_NVIDIA_SMI_LOG");
    if (path && *path) {
        FILE *f = fopen(path, "a");
        if (!f) {
            perror(path);
            return 1;
        }
        fprintf(f, "%s %s %s\n", gpu, what, value);
        fclose(f);
    }
    return 0;
}

/* GPU <id> told `what` = `value` (recorded), with the real tool's line: "Set <label> to <value> for GPU ...". */
static int apply(const char *id, const char *what, const char *label, const char *value) {
    char gpu[96];
    if (find_gpu(id, gpu, sizeof gpu)) {
        fprintf(stderr, "No devices were found\n");
        return 6;
    }
    if (record(gpu, what, value)) return 1;
    printf("Set %s to %s for GPU %s.\n", label, value, gpu);
    return 0;
}

static int set_compute_mode(const char *id, const char *mode) {
    static const char *const modes[][2] = {
        {"DEFAULT", "0"}, {"EXCLUSIVE_PROCESS", "2"}, {"PROHIBITED", "3"}};
    for (unsigned m = 0; m < sizeof modes / sizeof modes[0]; m++)
        if (!strcmp(mode, modes[m][0]) || !strcmp(mode, modes[m][1]))
            return apply(id, "compute-mode", "compute mode", modes[m][0]);
    return usage("Invalid compute mode value.");
}

static int set_timeslice(const char *id, const char *value) {
    if (strlen(value) != 1 || value[0] < '0' || value[0] > '3')
        return usage("Invalid timeslice value: expected 0 (default), 1 (short), 2 (medium) or 3 (long).");
    return apply(id, "timeslice", "timeslice", value);
}

static int list(void) {
    unsigned n = 0;
    count(&n);
    for (unsigned i = 0; i < n; i++) {
        void *h;
        char product[96], id[96];
        if (handle(i, &h) || name(h, product, sizeof product) || uuid(h, id, sizeof id)) return 3;
        printf("GPU %u: %s (UUID: %s)\n", i, product, id);
    }
    return 0;
}

int main(int argc, char **argv) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "NVIDIA-SMI has failed: %s\n", dlerror());
        return 9;
    }
    init_fn init = (init_fn)dlsym(lib, "nvmlInitWithFlags");
    count = (count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    name = (string_fn)dlsym(lib, "nvmlDeviceGetName");
    uuid = (string_fn)dlsym(lib, "nvmlDeviceGetUUID");
    if (!init || !count || !handle || !name || !uuid || init(0) != 0) {
        fprintf(stderr, "NVIDIA-SMI has failed: NVML did not initialise\n");
        return 2;
    }
    if (argc == 1 || (argc == 2 && !strcmp(argv[1], "-L"))) return list();
    if (argc == 5 && !strcmp(argv[1], "-i") && !strcmp(argv[3], "-c")) return set_compute_mode(argv[2], argv[4]);
    if (argc == 6 && !strcmp(argv[1], "compute-policy") && !strcmp(argv[2], "-i") &&
        !strcmp(argv[4], "--set-timeslice"))
        return set_timeslice(argv[3], argv[5]);
    return usage("Invalid combination of input arguments.");
}
