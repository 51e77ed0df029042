/* Which file defines a function the loader resolved (issue 22, the library set): dlsym on a
 * handle also searches that library's dependencies, so only dladdr says which file it is.
 * In C so that the loader's first use costs no ctypes import. */
#include <dlfcn.h>

#include "_fast_internal.h"

size_t aclprof_fast_dl_file(uintptr_t address, char *out, size_t cap)
{
    Dl_info info;
    if (address == 0 || dladdr((void *)address, &info) == 0 || info.dli_fname == NULL)
        return 0;
    size_t n = strlen(info.dli_fname);
    if (out != NULL && cap > 0) {
        size_t k = n < cap - 1 ? n : cap - 1;
        memcpy(out, info.dli_fname, k);
        out[k] = '\0';
    }
    return n;
}
