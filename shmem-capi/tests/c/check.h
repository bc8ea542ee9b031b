/* Shared by the C tests: CHECK fails the PE (exit 1) naming the line. */
#ifndef CHECK_H
#define CHECK_H
#include <stdio.h>
#include <stdlib.h>
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "PE %d: %s:%d: check failed: %s\n", shmem_my_pe(),       \
                    __FILE__, __LINE__, #cond);                                      \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)
#endif
