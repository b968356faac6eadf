#include "CNATS.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static wsb_nats_api api;
static const wsb_nats_api *loaded;
static char failure[512];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

const wsb_nats_api *wsb_nats_load(const char *file, const char **error) {
    pthread_mutex_lock(&lock);
    if (loaded == NULL) {
        void *handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) {
            snprintf(failure, sizeof failure, "%s", dlerror());
        } else {
            int ok = 1;
#define WSB_NATS_LOAD(name) \
            if (ok) { \
                api.name = (__typeof__(name) *)dlsym(handle, #name); \
                if (api.name == NULL) { \
                    snprintf(failure, sizeof failure, "%s has no %s (libnats 3.4 or later is needed)", file, #name); \
                    ok = 0; \
                } \
            }
            WSB_NATS_FUNCTIONS(WSB_NATS_LOAD)
#undef WSB_NATS_LOAD
            if (ok) {
                loaded = &api;
            } else {
                dlclose(handle);
            }
        }
    }
    const wsb_nats_api *result = loaded;
    *error = result == NULL ? failure : NULL;
    pthread_mutex_unlock(&lock);
    return result;
}
