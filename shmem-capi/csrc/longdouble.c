/*
 * long double arithmetic for the library's reductions. Rust has no type for
 * C's long double (80-bit x87 extended in 16 bytes on x86_64, IEEE quad on
 * aarch64), so the element-wise operators are compiled here, with the same
 * compiler and ABI as the C programs that call the library.
 *
 * Operator codes follow the library's ReduceOp: 3 min, 4 max, 5 sum, 6 prod.
 */
#include <stddef.h>

void shmemrs_longdouble_combine(int op, long double *acc, const long double *x, size_t n) {
    size_t i;
    switch (op) {
    case 3:
        for (i = 0; i < n; i++) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
        break;
    case 4:
        for (i = 0; i < n; i++) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
        break;
    case 5:
        for (i = 0; i < n; i++) acc[i] += x[i];
        break;
    case 6:
        for (i = 0; i < n; i++) acc[i] *= x[i];
        break;
    default:
        break;
    }
}

/* -1, 0 or 1 as a < b, a == b or a > b; 2 when unordered (NaN). */
int shmemrs_longdouble_cmp(const long double *a, const long double *b) {
    if (*a < *b) return -1;
    if (*a > *b) return 1;
    if (*a == *b) return 0;
    return 2;
}

/* The identity of `op`: +inf for min, -inf for max, 0 for sum, 1 for prod. */
void shmemrs_longdouble_identity(int op, long double *out) {
    switch (op) {
    case 3: *out = __builtin_infl(); break;
    case 4: *out = -__builtin_infl(); break;
    case 6: *out = 1.0L; break;
    default: *out = 0.0L; break;
    }
}

/* Converts for tests and messages. */
double shmemrs_longdouble_to_double(const long double *a) { return (double)*a; }
