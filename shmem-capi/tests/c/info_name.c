/* Item: shmem_info_get_name gives SHMEM_VENDOR_STRING, and the version
   query matches the version macros (the spec's example). */
#include <shmem.h>
#include <string.h>
#include "check.h"

int main(void) {
    shmem_init();
    char name[SHMEM_MAX_NAME_LEN];
    memset(name, 'x', sizeof name);
    shmem_info_get_name(name);
    CHECK(strncmp(name, SHMEM_VENDOR_STRING, SHMEM_MAX_NAME_LEN) == 0);
    CHECK(memchr(name, 0, sizeof name) != NULL);
    int major = 0, minor = 0;
    shmem_info_get_version(&major, &minor);
    CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION);
    int me = shmem_my_pe();
    shmem_finalize();
    if (me == 0) printf("info_name: %s %d.%d\n", name, major, minor);
    return 0;
}
