/*
 * shmem.h: the OpenSHMEM 1.5 C API of shmem-rs (libshmem.so).
 *
 * Typed families are declared once through X-macros over the type tables
 * below (SHMEM_RMA_TYPES, SHMEM_AMO_*_TYPES, SHMEM_WAIT_TYPES,
 * SHMEM_REDUCE_*_TYPES, SHMEM_TOALL_*_TYPES); the C11 generic selections
 * and the C++17 generic templates at the end expand the same tables, so a
 * type's function and its generic case cannot drift apart. The library
 * generates the same names with Rust macros (a test links a program that
 * calls every generic and typed name for every type the spec lists). Our
 * extensions live in shmemx.h.
 *
 * Symmetric objects are the symmetric heap (shmem_malloc and friends) and
 * the program's global and static variables. Errors the standard leaves
 * undefined print one line naming the call on stderr and end the job with
 * shmem_global_exit(1).
 */
#ifndef SHMEM_H
#define SHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <complex>
extern "C" {
#endif

/* ----- version and vendor ------------------------------------------------ */
#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 5
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define SHMEM_MAX_NAME_LEN 256
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define SHMEM_VENDOR_STRING "shmem-rs"
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING
#define SHMEM_VENDOR_MAJOR_VERSION 0
#define SHMEM_VENDOR_MINOR_VERSION 1
#define SHMEM_VENDOR_PATCH_VERSION 0

/* ----- threads ----------------------------------------------------------- */
#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

/* ----- comparisons and signals ------------------------------------------- */
#define SHMEM_CMP_EQ 1
#define SHMEM_CMP_NE 2
#define SHMEM_CMP_GT 3
#define SHMEM_CMP_LE 4
#define SHMEM_CMP_LT 5
#define SHMEM_CMP_GE 6
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_LE SHMEM_CMP_LE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

/* ----- deprecated collective work arrays --------------------------------- */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_SYNC_SIZE 64
#define SHMEM_BCAST_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_BARRIER_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_REDUCE_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_COLLECT_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_ALLTOALL_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_ALLTOALLS_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 1
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_SYNC_SIZE SHMEM_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_ALLTOALL_SYNC_SIZE SHMEM_ALLTOALL_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* ----- memory hints ------------------------------------------------------ */
#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L

/* ----- teams and contexts ------------------------------------------------ */
typedef struct shmem_team_handle *shmem_team_t;
typedef struct shmem_ctx_handle *shmem_ctx_t;

#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_TEAM_WORLD ((shmem_team_t)1)
#define SHMEM_TEAM_SHARED ((shmem_team_t)2)
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)
#define SHMEM_CTX_DEFAULT ((shmem_ctx_t)1)

typedef struct {
    int num_contexts;
} shmem_team_config_t;
#define SHMEM_TEAM_NUM_CONTEXTS 1L

#define SHMEM_CTX_PRIVATE 1L
#define SHMEM_CTX_SERIALIZED 2L
#define SHMEM_CTX_NOSTORE 4L

/* ----- setup and query --------------------------------------------------- */
void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
int shmem_initialized(void);
int shmem_my_pe(void);
int shmem_n_pes(void);
void shmem_global_exit(int status) __attribute__((noreturn));
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void *shmem_team_ptr(shmem_team_t team, const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);

/* deprecated */
void start_pes(int npes);
int _my_pe(void);
int _num_pes(void);

/* ----- memory ------------------------------------------------------------ */
void *shmem_malloc(size_t size);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);
void *shmem_malloc_with_hints(size_t size, long hints);
/* deprecated */
void *shmalloc(size_t size);
void shfree(void *ptr);
void *shrealloc(void *ptr, size_t size);
void *shmemalign(size_t alignment, size_t size);

/* ----- teams ------------------------------------------------------------- */
int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask,
                             shmem_team_t *new_team);
int shmem_team_split_2d(shmem_team_t parent_team, int xrange,
                        const shmem_team_config_t *xaxis_config, long xaxis_mask,
                        shmem_team_t *xaxis_team, const shmem_team_config_t *yaxis_config,
                        long yaxis_mask, shmem_team_t *yaxis_team);
void shmem_team_destroy(shmem_team_t team);

/* ----- contexts ---------------------------------------------------------- */
int shmem_ctx_create(long options, shmem_ctx_t *ctx);
int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx);
void shmem_ctx_destroy(shmem_ctx_t ctx);
int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team);

/* ----- type tables ------------------------------------------------------- */
/*
 * One list per family, X(C type, TYPENAME, extra...): the typed
 * declarations below and the C11 generic selections at the end both expand
 * these lists, so a type added here gets its function and its generic case
 * together. SHMEM_<LIST>(X) is the two-argument form, X(C type, TYPENAME).
 */
#ifdef __cplusplus
#define SHMEM_COMPLEXF_T std::complex<float>
#define SHMEM_COMPLEXD_T std::complex<double>
#else
#define SHMEM_COMPLEXF_T float _Complex
#define SHMEM_COMPLEXD_T double _Complex
#endif
#define SHMEM_APPLY2_(T, N, X) X(T, N)

/* RMA types whose values the library passes by value (all but long double) */
#define SHMEM_RMA_VALUE_TYPES_(X, ...)                                                   \
    X(float, float, __VA_ARGS__) X(double, double, __VA_ARGS__) X(char, char, __VA_ARGS__) \
    X(signed char, schar, __VA_ARGS__) X(short, short, __VA_ARGS__)                       \
    X(int, int, __VA_ARGS__) X(long, long, __VA_ARGS__) X(long long, longlong, __VA_ARGS__) \
    X(unsigned char, uchar, __VA_ARGS__) X(unsigned short, ushort, __VA_ARGS__)           \
    X(unsigned int, uint, __VA_ARGS__) X(unsigned long, ulong, __VA_ARGS__)               \
    X(unsigned long long, ulonglong, __VA_ARGS__) X(int8_t, int8, __VA_ARGS__)            \
    X(int16_t, int16, __VA_ARGS__) X(int32_t, int32, __VA_ARGS__)                         \
    X(int64_t, int64, __VA_ARGS__) X(uint8_t, uint8, __VA_ARGS__)                         \
    X(uint16_t, uint16, __VA_ARGS__) X(uint32_t, uint32, __VA_ARGS__)                     \
    X(uint64_t, uint64, __VA_ARGS__) X(size_t, size, __VA_ARGS__)                         \
    X(ptrdiff_t, ptrdiff, __VA_ARGS__)
#define SHMEM_RMA_TYPES_(X, ...) \
    SHMEM_RMA_VALUE_TYPES_(X, __VA_ARGS__) X(long double, longdouble, __VA_ARGS__)

#define SHMEM_AMO_STANDARD_TYPES_(X, ...)                                                \
    X(int, int, __VA_ARGS__) X(long, long, __VA_ARGS__) X(long long, longlong, __VA_ARGS__) \
    X(unsigned int, uint, __VA_ARGS__) X(unsigned long, ulong, __VA_ARGS__)               \
    X(unsigned long long, ulonglong, __VA_ARGS__) X(int32_t, int32, __VA_ARGS__)          \
    X(int64_t, int64, __VA_ARGS__) X(uint32_t, uint32, __VA_ARGS__)                       \
    X(uint64_t, uint64, __VA_ARGS__) X(size_t, size, __VA_ARGS__)                         \
    X(ptrdiff_t, ptrdiff, __VA_ARGS__)
#define SHMEM_AMO_EXTENDED_TYPES_(X, ...)                                                \
    SHMEM_AMO_STANDARD_TYPES_(X, __VA_ARGS__) X(float, float, __VA_ARGS__)                \
    X(double, double, __VA_ARGS__)
#define SHMEM_AMO_BITWISE_TYPES_(X, ...)                                                 \
    X(unsigned int, uint, __VA_ARGS__) X(unsigned long, ulong, __VA_ARGS__)               \
    X(unsigned long long, ulonglong, __VA_ARGS__) X(int32_t, int32, __VA_ARGS__)          \
    X(int64_t, int64, __VA_ARGS__) X(uint32_t, uint32, __VA_ARGS__)                       \
    X(uint64_t, uint64, __VA_ARGS__)

#define SHMEM_WAIT_TYPES_(X, ...)                                                        \
    X(short, short, __VA_ARGS__) X(int, int, __VA_ARGS__) X(long, long, __VA_ARGS__)      \
    X(long long, longlong, __VA_ARGS__) X(unsigned short, ushort, __VA_ARGS__)            \
    X(unsigned int, uint, __VA_ARGS__) X(unsigned long, ulong, __VA_ARGS__)               \
    X(unsigned long long, ulonglong, __VA_ARGS__) X(int32_t, int32, __VA_ARGS__)          \
    X(int64_t, int64, __VA_ARGS__) X(uint32_t, uint32, __VA_ARGS__)                       \
    X(uint64_t, uint64, __VA_ARGS__) X(size_t, size, __VA_ARGS__)                         \
    X(ptrdiff_t, ptrdiff, __VA_ARGS__)

#define SHMEM_REDUCE_BITWISE_TYPES_(X, ...)                                              \
    X(unsigned char, uchar, __VA_ARGS__) X(unsigned short, ushort, __VA_ARGS__)           \
    X(unsigned int, uint, __VA_ARGS__) X(unsigned long, ulong, __VA_ARGS__)               \
    X(unsigned long long, ulonglong, __VA_ARGS__) X(int8_t, int8, __VA_ARGS__)            \
    X(int16_t, int16, __VA_ARGS__) X(int32_t, int32, __VA_ARGS__)                         \
    X(int64_t, int64, __VA_ARGS__) X(uint8_t, uint8, __VA_ARGS__)                         \
    X(uint16_t, uint16, __VA_ARGS__) X(uint32_t, uint32, __VA_ARGS__)                     \
    X(uint64_t, uint64, __VA_ARGS__) X(size_t, size, __VA_ARGS__)
#define SHMEM_REDUCE_MINMAX_TYPES_(X, ...)                                               \
    X(char, char, __VA_ARGS__) X(signed char, schar, __VA_ARGS__)                         \
    X(short, short, __VA_ARGS__) X(int, int, __VA_ARGS__) X(long, long, __VA_ARGS__)      \
    X(long long, longlong, __VA_ARGS__) X(ptrdiff_t, ptrdiff, __VA_ARGS__)                \
    X(unsigned char, uchar, __VA_ARGS__) X(unsigned short, ushort, __VA_ARGS__)           \
    X(unsigned int, uint, __VA_ARGS__) X(unsigned long, ulong, __VA_ARGS__)               \
    X(unsigned long long, ulonglong, __VA_ARGS__) X(int8_t, int8, __VA_ARGS__)            \
    X(int16_t, int16, __VA_ARGS__) X(int32_t, int32, __VA_ARGS__)                         \
    X(int64_t, int64, __VA_ARGS__) X(uint8_t, uint8, __VA_ARGS__)                         \
    X(uint16_t, uint16, __VA_ARGS__) X(uint32_t, uint32, __VA_ARGS__)                     \
    X(uint64_t, uint64, __VA_ARGS__) X(size_t, size, __VA_ARGS__)                         \
    X(float, float, __VA_ARGS__) X(double, double, __VA_ARGS__)                           \
    X(long double, longdouble, __VA_ARGS__)
#define SHMEM_REDUCE_ARITH_TYPES_(X, ...)                                                \
    SHMEM_REDUCE_MINMAX_TYPES_(X, __VA_ARGS__) X(SHMEM_COMPLEXD_T, complexd, __VA_ARGS__)  \
    X(SHMEM_COMPLEXF_T, complexf, __VA_ARGS__)

/* deprecated *_to_all reductions */
#define SHMEM_TOALL_BITWISE_TYPES_(X, ...)                                               \
    X(short, short, __VA_ARGS__) X(int, int, __VA_ARGS__) X(long, long, __VA_ARGS__)      \
    X(long long, longlong, __VA_ARGS__)
#define SHMEM_TOALL_MINMAX_TYPES_(X, ...)                                                \
    SHMEM_TOALL_BITWISE_TYPES_(X, __VA_ARGS__) X(float, float, __VA_ARGS__)               \
    X(double, double, __VA_ARGS__) X(long double, longdouble, __VA_ARGS__)
#define SHMEM_TOALL_ARITH_TYPES_(X, ...)                                                 \
    SHMEM_TOALL_MINMAX_TYPES_(X, __VA_ARGS__) X(SHMEM_COMPLEXD_T, complexd, __VA_ARGS__)   \
    X(SHMEM_COMPLEXF_T, complexf, __VA_ARGS__)

#define SHMEM_RMA_TYPES(X) SHMEM_RMA_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_RMA_VALUE_TYPES(X) SHMEM_RMA_VALUE_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_AMO_STANDARD_TYPES(X) SHMEM_AMO_STANDARD_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_AMO_EXTENDED_TYPES(X) SHMEM_AMO_EXTENDED_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_AMO_BITWISE_TYPES(X) SHMEM_AMO_BITWISE_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_WAIT_TYPES(X) SHMEM_WAIT_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_REDUCE_BITWISE_TYPES(X) SHMEM_REDUCE_BITWISE_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_REDUCE_MINMAX_TYPES(X) SHMEM_REDUCE_MINMAX_TYPES_(SHMEM_APPLY2_, X)
#define SHMEM_REDUCE_ARITH_TYPES(X) SHMEM_REDUCE_ARITH_TYPES_(SHMEM_APPLY2_, X)

/* ----- RMA --------------------------------------------------------------- */
#define SHMEM_DECL_RMA(T, N)                                                                     \
    void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe);                       \
    void shmem_ctx_##N##_put(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe);  \
    void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe);                       \
    void shmem_ctx_##N##_get(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe);  \
    void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe);                   \
    void shmem_ctx_##N##_put_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems,       \
                                 int pe);                                                        \
    void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe);                   \
    void shmem_ctx_##N##_get_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems,       \
                                 int pe);                                                        \
    void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, \
                          int pe);                                                               \
    void shmem_ctx_##N##_iput(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst,          \
                              ptrdiff_t sst, size_t nelems, int pe);                             \
    void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, \
                          int pe);                                                               \
    void shmem_ctx_##N##_iget(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst,          \
                              ptrdiff_t sst, size_t nelems, int pe);                             \
    void shmem_##N##_put_signal(T *dest, const T *source, size_t nelems, uint64_t *sig_addr,     \
                                uint64_t signal, int sig_op, int pe);                            \
    void shmem_ctx_##N##_put_signal(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems,    \
                                    uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);    \
    void shmem_##N##_put_signal_nbi(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, \
                                    uint64_t signal, int sig_op, int pe);                        \
    void shmem_ctx_##N##_put_signal_nbi(shmem_ctx_t ctx, T *dest, const T *source,               \
                                        size_t nelems, uint64_t *sig_addr, uint64_t signal,      \
                                        int sig_op, int pe);
SHMEM_RMA_TYPES(SHMEM_DECL_RMA)

#define SHMEM_DECL_PG(T, N)                                                   \
    void shmem_##N##_p(T *dest, T value, int pe);                             \
    void shmem_ctx_##N##_p(shmem_ctx_t ctx, T *dest, T value, int pe);        \
    T shmem_##N##_g(const T *source, int pe);                                 \
    T shmem_ctx_##N##_g(shmem_ctx_t ctx, const T *source, int pe);
SHMEM_RMA_VALUE_TYPES(SHMEM_DECL_PG)

/* long double travels by value in x87 registers, which the library's
   language cannot express: p and g for it are defined here. */
void shmem_ctx_putmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
static inline void shmem_ctx_longdouble_p(shmem_ctx_t ctx, long double *dest, long double value,
                                          int pe) {
    shmem_ctx_putmem(ctx, dest, &value, sizeof value, pe);
}
static inline void shmem_longdouble_p(long double *dest, long double value, int pe) {
    shmem_ctx_putmem(SHMEM_CTX_DEFAULT, dest, &value, sizeof value, pe);
}
static inline long double shmem_ctx_longdouble_g(shmem_ctx_t ctx, const long double *source,
                                                 int pe) {
    long double v;
    shmem_ctx_getmem(ctx, &v, source, sizeof v, pe);
    return v;
}
static inline long double shmem_longdouble_g(const long double *source, int pe) {
    return shmem_ctx_longdouble_g(SHMEM_CTX_DEFAULT, source, pe);
}

#define SHMEM_SIZES(X) X(8) X(16) X(32) X(64) X(128)
#define SHMEM_DECL_RMA_SIZE(S)                                                                  \
    void shmem_put##S(void *dest, const void *source, size_t nelems, int pe);                   \
    void shmem_ctx_put##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems,       \
                          int pe);                                                              \
    void shmem_get##S(void *dest, const void *source, size_t nelems, int pe);                   \
    void shmem_ctx_get##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems,       \
                          int pe);                                                              \
    void shmem_put##S##_nbi(void *dest, const void *source, size_t nelems, int pe);             \
    void shmem_ctx_put##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source,                \
                                size_t nelems, int pe);                                         \
    void shmem_get##S##_nbi(void *dest, const void *source, size_t nelems, int pe);             \
    void shmem_ctx_get##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source,                \
                                size_t nelems, int pe);                                         \
    void shmem_iput##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,            \
                       size_t nelems, int pe);                                                  \
    void shmem_ctx_iput##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst,      \
                           ptrdiff_t sst, size_t nelems, int pe);                               \
    void shmem_iget##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,            \
                       size_t nelems, int pe);                                                  \
    void shmem_ctx_iget##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst,      \
                           ptrdiff_t sst, size_t nelems, int pe);                               \
    void shmem_put##S##_signal(void *dest, const void *source, size_t nelems,                   \
                               uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);        \
    void shmem_ctx_put##S##_signal(shmem_ctx_t ctx, void *dest, const void *source,             \
                                   size_t nelems, uint64_t *sig_addr, uint64_t signal,          \
                                   int sig_op, int pe);                                         \
    void shmem_put##S##_signal_nbi(void *dest, const void *source, size_t nelems,               \
                                   uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);    \
    void shmem_ctx_put##S##_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source,         \
                                       size_t nelems, uint64_t *sig_addr, uint64_t signal,      \
                                       int sig_op, int pe);
SHMEM_SIZES(SHMEM_DECL_RMA_SIZE)

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_putmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr,
                         uint64_t signal, int sig_op, int pe);
void shmem_ctx_putmem_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems,
                             uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_putmem_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr,
                             uint64_t signal, int sig_op, int pe);
void shmem_ctx_putmem_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems,
                                 uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);

/* ----- signals ----------------------------------------------------------- */
uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);
void shmem_signal_set(uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_ctx_signal_set(shmem_ctx_t ctx, uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_signal_add(uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_ctx_signal_add(shmem_ctx_t ctx, uint64_t *sig_addr, uint64_t signal, int pe);

/* ----- atomics ----------------------------------------------------------- */
#define SHMEM_DECL_AMO_EXT(T, N)                                                              \
    T shmem_##N##_atomic_fetch(const T *source, int pe);                                      \
    T shmem_ctx_##N##_atomic_fetch(shmem_ctx_t ctx, const T *source, int pe);                 \
    void shmem_##N##_atomic_set(T *dest, T value, int pe);                                    \
    void shmem_ctx_##N##_atomic_set(shmem_ctx_t ctx, T *dest, T value, int pe);               \
    T shmem_##N##_atomic_swap(T *dest, T value, int pe);                                      \
    T shmem_ctx_##N##_atomic_swap(shmem_ctx_t ctx, T *dest, T value, int pe);                 \
    void shmem_##N##_atomic_fetch_nbi(T *fetch, const T *source, int pe);                     \
    void shmem_ctx_##N##_atomic_fetch_nbi(shmem_ctx_t ctx, T *fetch, const T *source, int pe); \
    void shmem_##N##_atomic_swap_nbi(T *fetch, T *dest, T value, int pe);                     \
    void shmem_ctx_##N##_atomic_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);
SHMEM_AMO_EXTENDED_TYPES(SHMEM_DECL_AMO_EXT)

#define SHMEM_DECL_AMO_STD(T, N)                                                                 \
    T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe);                         \
    T shmem_ctx_##N##_atomic_compare_swap(shmem_ctx_t ctx, T *dest, T cond, T value, int pe);    \
    T shmem_##N##_atomic_fetch_inc(T *dest, int pe);                                             \
    T shmem_ctx_##N##_atomic_fetch_inc(shmem_ctx_t ctx, T *dest, int pe);                        \
    void shmem_##N##_atomic_inc(T *dest, int pe);                                                \
    void shmem_ctx_##N##_atomic_inc(shmem_ctx_t ctx, T *dest, int pe);                           \
    T shmem_##N##_atomic_fetch_add(T *dest, T value, int pe);                                    \
    T shmem_ctx_##N##_atomic_fetch_add(shmem_ctx_t ctx, T *dest, T value, int pe);               \
    void shmem_##N##_atomic_add(T *dest, T value, int pe);                                       \
    void shmem_ctx_##N##_atomic_add(shmem_ctx_t ctx, T *dest, T value, int pe);                  \
    void shmem_##N##_atomic_compare_swap_nbi(T *fetch, T *dest, T cond, T value, int pe);        \
    void shmem_ctx_##N##_atomic_compare_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T cond,     \
                                                 T value, int pe);                               \
    void shmem_##N##_atomic_fetch_inc_nbi(T *fetch, T *dest, int pe);                            \
    void shmem_ctx_##N##_atomic_fetch_inc_nbi(shmem_ctx_t ctx, T *fetch, T *dest, int pe);       \
    void shmem_##N##_atomic_fetch_add_nbi(T *fetch, T *dest, T value, int pe);                   \
    void shmem_ctx_##N##_atomic_fetch_add_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value,       \
                                              int pe);
SHMEM_AMO_STANDARD_TYPES(SHMEM_DECL_AMO_STD)

#define SHMEM_DECL_AMO_BIT(T, N)                                                                 \
    T shmem_##N##_atomic_fetch_and(T *dest, T value, int pe);                                    \
    T shmem_ctx_##N##_atomic_fetch_and(shmem_ctx_t ctx, T *dest, T value, int pe);               \
    void shmem_##N##_atomic_and(T *dest, T value, int pe);                                       \
    void shmem_ctx_##N##_atomic_and(shmem_ctx_t ctx, T *dest, T value, int pe);                  \
    T shmem_##N##_atomic_fetch_or(T *dest, T value, int pe);                                     \
    T shmem_ctx_##N##_atomic_fetch_or(shmem_ctx_t ctx, T *dest, T value, int pe);                \
    void shmem_##N##_atomic_or(T *dest, T value, int pe);                                        \
    void shmem_ctx_##N##_atomic_or(shmem_ctx_t ctx, T *dest, T value, int pe);                   \
    T shmem_##N##_atomic_fetch_xor(T *dest, T value, int pe);                                    \
    T shmem_ctx_##N##_atomic_fetch_xor(shmem_ctx_t ctx, T *dest, T value, int pe);               \
    void shmem_##N##_atomic_xor(T *dest, T value, int pe);                                       \
    void shmem_ctx_##N##_atomic_xor(shmem_ctx_t ctx, T *dest, T value, int pe);                  \
    void shmem_##N##_atomic_fetch_and_nbi(T *fetch, T *dest, T value, int pe);                   \
    void shmem_ctx_##N##_atomic_fetch_and_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value,       \
                                              int pe);                                           \
    void shmem_##N##_atomic_fetch_or_nbi(T *fetch, T *dest, T value, int pe);                    \
    void shmem_ctx_##N##_atomic_fetch_or_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value,        \
                                             int pe);                                            \
    void shmem_##N##_atomic_fetch_xor_nbi(T *fetch, T *dest, T value, int pe);                   \
    void shmem_ctx_##N##_atomic_fetch_xor_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value,       \
                                              int pe);
SHMEM_AMO_BITWISE_TYPES(SHMEM_DECL_AMO_BIT)

/* deprecated atomics (int, long, longlong; swap/fetch/set also float, double) */
#define SHMEM_OLD_AMO_INT_TYPES(X) X(int, int) X(long, long) X(long long, longlong)
#define SHMEM_OLD_AMO_EXT_TYPES(X) SHMEM_OLD_AMO_INT_TYPES(X) X(float, float) X(double, double)
#define SHMEM_DECL_OLD_AMO_INT(T, N)                         \
    T shmem_##N##_fadd(T *dest, T value, int pe);            \
    T shmem_##N##_finc(T *dest, int pe);                     \
    void shmem_##N##_add(T *dest, T value, int pe);          \
    void shmem_##N##_inc(T *dest, int pe);                   \
    T shmem_##N##_cswap(T *dest, T cond, T value, int pe);
SHMEM_OLD_AMO_INT_TYPES(SHMEM_DECL_OLD_AMO_INT)
#define SHMEM_DECL_OLD_AMO_EXT(T, N)                         \
    T shmem_##N##_swap(T *dest, T value, int pe);            \
    T shmem_##N##_fetch(const T *source, int pe);            \
    void shmem_##N##_set(T *dest, T value, int pe);
SHMEM_OLD_AMO_EXT_TYPES(SHMEM_DECL_OLD_AMO_EXT)
long shmem_swap(long *dest, long value, int pe);

/* ----- point-to-point synchronisation ------------------------------------ */
#define SHMEM_DECL_WAIT(T, N)                                                                    \
    void shmem_##N##_wait_until(T *ivar, int cmp, T cmp_value);                                  \
    void shmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp,         \
                                    T cmp_value);                                                \
    size_t shmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp,       \
                                      T cmp_value);                                              \
    size_t shmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices,                 \
                                       const int *status, int cmp, T cmp_value);                 \
    void shmem_##N##_wait_until_all_vector(T *ivars, size_t nelems, const int *status, int cmp,  \
                                           T *cmp_values);                                       \
    size_t shmem_##N##_wait_until_any_vector(T *ivars, size_t nelems, const int *status,         \
                                             int cmp, T *cmp_values);                            \
    size_t shmem_##N##_wait_until_some_vector(T *ivars, size_t nelems, size_t *indices,          \
                                              const int *status, int cmp, T *cmp_values);        \
    int shmem_##N##_test(T *ivar, int cmp, T cmp_value);                                         \
    int shmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value);  \
    size_t shmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp,             \
                                T cmp_value);                                                    \
    size_t shmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status,    \
                                 int cmp, T cmp_value);                                          \
    int shmem_##N##_test_all_vector(T *ivars, size_t nelems, const int *status, int cmp,         \
                                    T *cmp_values);                                              \
    size_t shmem_##N##_test_any_vector(T *ivars, size_t nelems, const int *status, int cmp,      \
                                       T *cmp_values);                                           \
    size_t shmem_##N##_test_some_vector(T *ivars, size_t nelems, size_t *indices,                \
                                        const int *status, int cmp, T *cmp_values);
SHMEM_WAIT_TYPES(SHMEM_DECL_WAIT)

/* deprecated */
#define SHMEM_DECL_OLD_WAIT(T, N)                                 \
    void shmem_##N##_wait(T *ivar, T cmp_value);
SHMEM_WAIT_TYPES(SHMEM_DECL_OLD_WAIT)
void shmem_wait(long *ivar, long cmp_value);
void shmem_wait_until(long *ivar, int cmp, long cmp_value);

/* ----- memory ordering and locks ----------------------------------------- */
void shmem_fence(void);
void shmem_ctx_fence(shmem_ctx_t ctx);
void shmem_quiet(void);
void shmem_ctx_quiet(shmem_ctx_t ctx);
void shmem_set_lock(long *lock);
int shmem_test_lock(long *lock);
void shmem_clear_lock(long *lock);

/* ----- collectives ------------------------------------------------------- */
void shmem_barrier_all(void);
void shmem_sync_all(void);
int shmem_sync(shmem_team_t team);
/* The 1.4 active-set form, deprecated in 1.5 but still specified:
   shmem_sync(PE_start, logPE_stride, PE_size, pSync) synchronises the set
   without completing puts (shmem_barrier's sync half). The call's argument
   count picks the form; shmem_sync stays a function for one argument. */
void shmem_sync_deprecated(int PE_start, int logPE_stride, int PE_size, long *pSync);
#define SHMEM_SYNC_PICK_(a, b, c, d, NAME, ...) NAME
#define shmem_sync(...)                                                                \
    SHMEM_SYNC_PICK_(__VA_ARGS__, shmem_sync_deprecated, shmem_sync_deprecated,       \
                     shmem_sync_deprecated, shmem_sync, shmem_sync)(__VA_ARGS__)
int shmem_team_sync(shmem_team_t team);

#define SHMEM_DECL_COLL(T, N)                                                                   \
    int shmem_##N##_broadcast(shmem_team_t team, T *dest, const T *source, size_t nelems,       \
                              int PE_root);                                                     \
    int shmem_##N##_collect(shmem_team_t team, T *dest, const T *source, size_t nelems);        \
    int shmem_##N##_fcollect(shmem_team_t team, T *dest, const T *source, size_t nelems);       \
    int shmem_##N##_alltoall(shmem_team_t team, T *dest, const T *source, size_t nelems);       \
    int shmem_##N##_alltoalls(shmem_team_t team, T *dest, const T *source, ptrdiff_t dst,       \
                              ptrdiff_t sst, size_t nelems);
SHMEM_RMA_TYPES(SHMEM_DECL_COLL)
int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems,
                       int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst,
                       ptrdiff_t sst, size_t nelems);

#define SHMEM_DECL_REDUCE(T, N, OP)                                                            \
    int shmem_##N##_##OP##_reduce(shmem_team_t team, T *dest, const T *source, size_t nreduce);
#define SHMEM_DECL_REDUCE_BIT(T, N) \
    SHMEM_DECL_REDUCE(T, N, and) SHMEM_DECL_REDUCE(T, N, or) SHMEM_DECL_REDUCE(T, N, xor)
#define SHMEM_DECL_REDUCE_MINMAX(T, N) SHMEM_DECL_REDUCE(T, N, min) SHMEM_DECL_REDUCE(T, N, max)
#define SHMEM_DECL_REDUCE_ARITH(T, N) SHMEM_DECL_REDUCE(T, N, sum) SHMEM_DECL_REDUCE(T, N, prod)
SHMEM_REDUCE_BITWISE_TYPES(SHMEM_DECL_REDUCE_BIT)
SHMEM_REDUCE_MINMAX_TYPES(SHMEM_DECL_REDUCE_MINMAX)
SHMEM_REDUCE_ARITH_TYPES(SHMEM_DECL_REDUCE_ARITH)

/* deprecated active-set collectives: any active set (PE_start, logPE_stride,
   PE_size). pSync (SHMEM_*_SYNC_SIZE longs, all SHMEM_SYNC_VALUE) is used
   and is back at SHMEM_SYNC_VALUE on return; pWrk is not needed. */
void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast32(void *dest, const void *source, size_t nelems, int PE_root, int PE_start,
                       int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast64(void *dest, const void *source, size_t nelems, int PE_root, int PE_start,
                       int logPE_stride, int PE_size, long *pSync);
void shmem_collect32(void *dest, const void *source, size_t nelems, int PE_start,
                     int logPE_stride, int PE_size, long *pSync);
void shmem_collect64(void *dest, const void *source, size_t nelems, int PE_start,
                     int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect32(void *dest, const void *source, size_t nelems, int PE_start,
                      int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect64(void *dest, const void *source, size_t nelems, int PE_start,
                      int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall32(void *dest, const void *source, size_t nelems, int PE_start,
                      int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall64(void *dest, const void *source, size_t nelems, int PE_start,
                      int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,
                       size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,
                       size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
#define SHMEM_DECL_TOALL(T, N, OP)                                                            \
    void shmem_##N##_##OP##_to_all(T *dest, const T *source, int nreduce, int PE_start,       \
                                   int logPE_stride, int PE_size, T *pWrk, long *pSync);
#define SHMEM_DECL_TOALL_BIT(T, N, _)                                                         \
    SHMEM_DECL_TOALL(T, N, and) SHMEM_DECL_TOALL(T, N, or) SHMEM_DECL_TOALL(T, N, xor)
#define SHMEM_DECL_TOALL_MINMAX(T, N, _) SHMEM_DECL_TOALL(T, N, min) SHMEM_DECL_TOALL(T, N, max)
#define SHMEM_DECL_TOALL_ARITH(T, N, _) SHMEM_DECL_TOALL(T, N, sum) SHMEM_DECL_TOALL(T, N, prod)
SHMEM_TOALL_BITWISE_TYPES_(SHMEM_DECL_TOALL_BIT, _)
SHMEM_TOALL_MINMAX_TYPES_(SHMEM_DECL_TOALL_MINMAX, _)
SHMEM_TOALL_ARITH_TYPES_(SHMEM_DECL_TOALL_ARITH, _)

/* profiling control: accepted and ignored */
void shmem_pcontrol(const int level, ...);

/* ----- C11 type-generic interfaces --------------------------------------- */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus)

/*
 * Each generic is a chain of _Generic selections built from a family's
 * type list: _Generic(e, T1 *: f1, const T1 *: f1, default: _Generic(e, T2
 * *: ...)). Nesting lets the list name both a type and its typedef alias
 * (int32_t and int) without a duplicate-association error: the first match
 * wins, and aliases name functions of the same meaning. A type no list
 * holds selects shmem_generic_unsupported_type, whose call fails to compile.
 */
void shmem_generic_unsupported_type(void);

#define SHMEM_ARG1_(a, ...) a
#define SHMEM_ARG2_(a, b, ...) b
#define SHMEM_ARG1(...) SHMEM_ARG1_(__VA_ARGS__, 0)
#define SHMEM_ARG2(...) SHMEM_ARG2_(__VA_ARGS__, 0, 0)

#define SHMEM_GSEL_(T, N, OP, E) \
    _Generic((E), T *: shmem_##N##_##OP, const T *: shmem_##N##_##OP, default:
#define SHMEM_GSEL_CTX_(T, N, OP, E) \
    _Generic((E), T *: shmem_ctx_##N##_##OP, const T *: shmem_ctx_##N##_##OP, default:
#define SHMEM_GEND_(T, N, OP, E) )
/* The function for pointer expression E in list TYPES (plain or ctx_ form). */
#define SHMEM_GPICK_(TYPES, OP, E) \
    TYPES(SHMEM_GSEL_, OP, E) shmem_generic_unsupported_type TYPES(SHMEM_GEND_, OP, E)
#define SHMEM_GPICK_CTX_(TYPES, OP, E) \
    TYPES(SHMEM_GSEL_CTX_, OP, E) shmem_generic_unsupported_type TYPES(SHMEM_GEND_, OP, E)

/* A context first selects the ctx_ form, typed by the second argument;
   otherwise the first argument's type selects. */
#define SHMEM_GEN_(TYPES, OP, ...)                                            \
    _Generic(SHMEM_ARG1(__VA_ARGS__),                                         \
        shmem_ctx_t: SHMEM_GPICK_CTX_(TYPES, OP, SHMEM_ARG2(__VA_ARGS__)),    \
        default: SHMEM_GPICK_(TYPES, OP, SHMEM_ARG1(__VA_ARGS__)))(__VA_ARGS__)

#define shmem_put(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, put, __VA_ARGS__)
#define shmem_get(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, get, __VA_ARGS__)
#define shmem_put_nbi(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, put_nbi, __VA_ARGS__)
#define shmem_get_nbi(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, get_nbi, __VA_ARGS__)
#define shmem_iput(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, iput, __VA_ARGS__)
#define shmem_iget(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, iget, __VA_ARGS__)
#define shmem_p(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, p, __VA_ARGS__)
#define shmem_g(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, g, __VA_ARGS__)
#define shmem_put_signal(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, put_signal, __VA_ARGS__)
#define shmem_put_signal_nbi(...) SHMEM_GEN_(SHMEM_RMA_TYPES_, put_signal_nbi, __VA_ARGS__)

#define shmem_atomic_fetch(...) SHMEM_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_fetch, __VA_ARGS__)
#define shmem_atomic_set(...) SHMEM_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_set, __VA_ARGS__)
#define shmem_atomic_swap(...) SHMEM_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_swap, __VA_ARGS__)
#define shmem_atomic_fetch_nbi(...) SHMEM_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_fetch_nbi, __VA_ARGS__)
#define shmem_atomic_swap_nbi(...) SHMEM_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_swap_nbi, __VA_ARGS__)
#define shmem_atomic_compare_swap(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_compare_swap, __VA_ARGS__)
#define shmem_atomic_fetch_inc(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_inc, __VA_ARGS__)
#define shmem_atomic_inc(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_inc, __VA_ARGS__)
#define shmem_atomic_fetch_add(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_add, __VA_ARGS__)
#define shmem_atomic_add(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_add, __VA_ARGS__)
#define shmem_atomic_compare_swap_nbi(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_compare_swap_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_inc_nbi(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_inc_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_add_nbi(...) SHMEM_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_add_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_and(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_and, __VA_ARGS__)
#define shmem_atomic_and(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_and, __VA_ARGS__)
#define shmem_atomic_fetch_or(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_or, __VA_ARGS__)
#define shmem_atomic_or(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_or, __VA_ARGS__)
#define shmem_atomic_fetch_xor(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_xor, __VA_ARGS__)
#define shmem_atomic_xor(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_xor, __VA_ARGS__)
#define shmem_atomic_fetch_and_nbi(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_and_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_or_nbi(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_or_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_xor_nbi(...) SHMEM_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_xor_nbi, __VA_ARGS__)

/* The 1.4 generic names, deprecated in 1.5 but still specified there: the
   same selection as their shmem_atomic_* successors (so every AMO type the
   successor takes). shmem_swap(long *, long, int) stays a function too. */
#define shmem_fetch(...) shmem_atomic_fetch(__VA_ARGS__)
#define shmem_set(...) shmem_atomic_set(__VA_ARGS__)
#define shmem_swap(...) shmem_atomic_swap(__VA_ARGS__)
#define shmem_cswap(...) shmem_atomic_compare_swap(__VA_ARGS__)
#define shmem_fadd(...) shmem_atomic_fetch_add(__VA_ARGS__)
#define shmem_finc(...) shmem_atomic_fetch_inc(__VA_ARGS__)
#define shmem_add(...) shmem_atomic_add(__VA_ARGS__)
#define shmem_inc(...) shmem_atomic_inc(__VA_ARGS__)

/* Point-to-point synchronisation: the variable's type selects. */
#define SHMEM_GWAIT_(OP, ivars, ...) SHMEM_GPICK_(SHMEM_WAIT_TYPES_, OP, ivars)(ivars, __VA_ARGS__)
#define shmem_wait_until(ivars, ...) SHMEM_GWAIT_(wait_until, ivars, __VA_ARGS__)
#define shmem_wait_until_all(ivars, ...) SHMEM_GWAIT_(wait_until_all, ivars, __VA_ARGS__)
#define shmem_wait_until_any(ivars, ...) SHMEM_GWAIT_(wait_until_any, ivars, __VA_ARGS__)
#define shmem_wait_until_some(ivars, ...) SHMEM_GWAIT_(wait_until_some, ivars, __VA_ARGS__)
#define shmem_wait_until_all_vector(ivars, ...) SHMEM_GWAIT_(wait_until_all_vector, ivars, __VA_ARGS__)
#define shmem_wait_until_any_vector(ivars, ...) SHMEM_GWAIT_(wait_until_any_vector, ivars, __VA_ARGS__)
#define shmem_wait_until_some_vector(ivars, ...) SHMEM_GWAIT_(wait_until_some_vector, ivars, __VA_ARGS__)
#define shmem_test(ivars, ...) SHMEM_GWAIT_(test, ivars, __VA_ARGS__)
#define shmem_test_all(ivars, ...) SHMEM_GWAIT_(test_all, ivars, __VA_ARGS__)
#define shmem_test_any(ivars, ...) SHMEM_GWAIT_(test_any, ivars, __VA_ARGS__)
#define shmem_test_some(ivars, ...) SHMEM_GWAIT_(test_some, ivars, __VA_ARGS__)
#define shmem_test_all_vector(ivars, ...) SHMEM_GWAIT_(test_all_vector, ivars, __VA_ARGS__)
#define shmem_test_any_vector(ivars, ...) SHMEM_GWAIT_(test_any_vector, ivars, __VA_ARGS__)
#define shmem_test_some_vector(ivars, ...) SHMEM_GWAIT_(test_some_vector, ivars, __VA_ARGS__)

/* Collectives take the team first; the destination's type selects. */
#define SHMEM_GCOLL_(TYPES, OP, team, dest, ...) \
    SHMEM_GPICK_(TYPES, OP, dest)(team, dest, __VA_ARGS__)
#define shmem_broadcast(team, dest, ...) SHMEM_GCOLL_(SHMEM_RMA_TYPES_, broadcast, team, dest, __VA_ARGS__)
#define shmem_collect(team, dest, ...) SHMEM_GCOLL_(SHMEM_RMA_TYPES_, collect, team, dest, __VA_ARGS__)
#define shmem_fcollect(team, dest, ...) SHMEM_GCOLL_(SHMEM_RMA_TYPES_, fcollect, team, dest, __VA_ARGS__)
#define shmem_alltoall(team, dest, ...) SHMEM_GCOLL_(SHMEM_RMA_TYPES_, alltoall, team, dest, __VA_ARGS__)
#define shmem_alltoalls(team, dest, ...) SHMEM_GCOLL_(SHMEM_RMA_TYPES_, alltoalls, team, dest, __VA_ARGS__)
#define shmem_and_reduce(team, dest, ...) SHMEM_GCOLL_(SHMEM_REDUCE_BITWISE_TYPES_, and_reduce, team, dest, __VA_ARGS__)
#define shmem_or_reduce(team, dest, ...) SHMEM_GCOLL_(SHMEM_REDUCE_BITWISE_TYPES_, or_reduce, team, dest, __VA_ARGS__)
#define shmem_xor_reduce(team, dest, ...) SHMEM_GCOLL_(SHMEM_REDUCE_BITWISE_TYPES_, xor_reduce, team, dest, __VA_ARGS__)
#define shmem_min_reduce(team, dest, ...) SHMEM_GCOLL_(SHMEM_REDUCE_MINMAX_TYPES_, min_reduce, team, dest, __VA_ARGS__)
#define shmem_max_reduce(team, dest, ...) SHMEM_GCOLL_(SHMEM_REDUCE_MINMAX_TYPES_, max_reduce, team, dest, __VA_ARGS__)
#define shmem_sum_reduce(team, dest, ...) SHMEM_GCOLL_(SHMEM_REDUCE_ARITH_TYPES_, sum_reduce, team, dest, __VA_ARGS__)
#define shmem_prod_reduce(team, dest, ...) SHMEM_GCOLL_(SHMEM_REDUCE_ARITH_TYPES_, prod_reduce, team, dest, __VA_ARGS__)

#endif /* C11 */

#ifdef __cplusplus
}
#endif

/* ----- C++17 generic interfaces ------------------------------------------- */
#if defined(__cplusplus) && __cplusplus >= 201703L
#include <type_traits>

/*
 * The same generic names for C++, from the same type lists: a template
 * picks the typed function with an `if constexpr` chain over the list (the
 * first match wins, so aliases such as int32_t and int may both appear); a
 * type outside the list fails a static_assert naming the routine.
 */
template <class T> struct shmem_cxx_false_ : std::false_type {};
#define SHMEM_CXX_IS_(T_, N, OP) \
    if constexpr (std::is_same<U, T_>::value) return &shmem_##N##_##OP; else
#define SHMEM_CXX_IS_CTX_(T_, N, OP) \
    if constexpr (std::is_same<U, T_>::value) return &shmem_ctx_##N##_##OP; else
#define SHMEM_CXX_PICK_(IS, TYPES, OP)                                                  \
    using U = typename std::remove_cv<T>::type;                                         \
    TYPES(IS, OP) {                                                                     \
        static_assert(shmem_cxx_false_<T>::value,                                       \
                      "shmem_" #OP ": not defined for this type (OpenSHMEM 1.5)");      \
        return 0;                                                                       \
    }
/* Generic with and without a context, selected by the first pointer. */
#define SHMEM_CXX_GEN_(TYPES, OP)                                                       \
    template <class T> inline auto shmem_cxx_##OP##_() { SHMEM_CXX_PICK_(SHMEM_CXX_IS_, TYPES, OP) } \
    template <class T> inline auto shmem_cxx_ctx_##OP##_() {                            \
        SHMEM_CXX_PICK_(SHMEM_CXX_IS_CTX_, TYPES, OP)                                   \
    }                                                                                   \
    template <class T, class... A> inline decltype(auto) shmem_##OP(T *p, A... a) {     \
        return shmem_cxx_##OP##_<T>()(p, a...);                                         \
    }                                                                                   \
    template <class T, class... A>                                                      \
    inline decltype(auto) shmem_##OP(shmem_ctx_t ctx, T *p, A... a) {                   \
        return shmem_cxx_ctx_##OP##_<T>()(ctx, p, a...);                                \
    }
/* Generic without a context (point-to-point synchronisation). */
#define SHMEM_CXX_GEN_PLAIN_(TYPES, OP)                                                 \
    template <class T> inline auto shmem_cxx_##OP##_() { SHMEM_CXX_PICK_(SHMEM_CXX_IS_, TYPES, OP) } \
    template <class T, class... A> inline decltype(auto) shmem_##OP(T *p, A... a) {     \
        return shmem_cxx_##OP##_<T>()(p, a...);                                         \
    }
/* Team collectives: the destination (second argument) selects. */
#define SHMEM_CXX_GEN_TEAM_(TYPES, OP)                                                  \
    template <class T> inline auto shmem_cxx_##OP##_() { SHMEM_CXX_PICK_(SHMEM_CXX_IS_, TYPES, OP) } \
    template <class T, class... A>                                                      \
    inline decltype(auto) shmem_##OP(shmem_team_t team, T *dest, A... a) {              \
        return shmem_cxx_##OP##_<T>()(team, dest, a...);                                \
    }

SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, put)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, get)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, put_nbi)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, get_nbi)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, iput)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, iget)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, p)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, g)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, put_signal)
SHMEM_CXX_GEN_(SHMEM_RMA_TYPES_, put_signal_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_fetch)
SHMEM_CXX_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_set)
SHMEM_CXX_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_swap)
SHMEM_CXX_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_fetch_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_EXTENDED_TYPES_, atomic_swap_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_compare_swap)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_inc)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_inc)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_add)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_add)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_compare_swap_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_inc_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_STANDARD_TYPES_, atomic_fetch_add_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_and)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_and)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_or)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_or)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_xor)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_xor)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_and_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_or_nbi)
SHMEM_CXX_GEN_(SHMEM_AMO_BITWISE_TYPES_, atomic_fetch_xor_nbi)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, wait_until)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, wait_until_all)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, wait_until_any)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, wait_until_some)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, wait_until_all_vector)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, wait_until_any_vector)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, wait_until_some_vector)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, test)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, test_all)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, test_any)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, test_some)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, test_all_vector)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, test_any_vector)
SHMEM_CXX_GEN_PLAIN_(SHMEM_WAIT_TYPES_, test_some_vector)
SHMEM_CXX_GEN_TEAM_(SHMEM_RMA_TYPES_, broadcast)
SHMEM_CXX_GEN_TEAM_(SHMEM_RMA_TYPES_, collect)
SHMEM_CXX_GEN_TEAM_(SHMEM_RMA_TYPES_, fcollect)
SHMEM_CXX_GEN_TEAM_(SHMEM_RMA_TYPES_, alltoall)
SHMEM_CXX_GEN_TEAM_(SHMEM_RMA_TYPES_, alltoalls)
SHMEM_CXX_GEN_TEAM_(SHMEM_REDUCE_BITWISE_TYPES_, and_reduce)
SHMEM_CXX_GEN_TEAM_(SHMEM_REDUCE_BITWISE_TYPES_, or_reduce)
SHMEM_CXX_GEN_TEAM_(SHMEM_REDUCE_BITWISE_TYPES_, xor_reduce)
SHMEM_CXX_GEN_TEAM_(SHMEM_REDUCE_MINMAX_TYPES_, min_reduce)
SHMEM_CXX_GEN_TEAM_(SHMEM_REDUCE_MINMAX_TYPES_, max_reduce)
SHMEM_CXX_GEN_TEAM_(SHMEM_REDUCE_ARITH_TYPES_, sum_reduce)
SHMEM_CXX_GEN_TEAM_(SHMEM_REDUCE_ARITH_TYPES_, prod_reduce)
#endif /* C++17 */

#endif /* SHMEM_H */
