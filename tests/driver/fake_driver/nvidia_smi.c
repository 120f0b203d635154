/* A stub nvidia-smi: dlopen()s libnvidia-ml.so.1 by SONAME, as the real one does, and prints
 * `nvidia-smi -L` lines: "GPU <i>: <name> (UUID: <uuid>)". Exit 9 when the library is not found. */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*init_fn)(unsigned);
typedef int (*count_fn)(unsigned *);
typedef int (*handle_fn)(unsigned, void **);
typedef int (*string_fn)(void *, char *, unsigned);

int main(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "NVIDIA-SMI has failed: %s\n", dlerror());
        return 9;
    }
    init_fn init = (init_fn)dlsym(lib, "nvmlInitWithFlags");
    count_fn count = (count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    handle_fn handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    string_fn name = (string_fn)dlsym(lib, "nvmlDeviceGetName");
    string_fn uuid = (string_fn)dlsym(lib, "nvmlDeviceGetUUID");
    if (!init || !count || !handle || !name || !uuid || init(0) != 0) {
        fprintf(stderr, "NVIDIA-SMI has failed: NVML did not initialise\n");
        return 2;
    }
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
