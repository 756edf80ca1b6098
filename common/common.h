/* common.h — small helpers shared by every module: error reporting, arena
 * allocation, growable string buffers, a deterministic RNG, half floats and
 * hashing.  Prefix: tn_.  Nothing here knows about tensors or targets. */
#ifndef TUNED_COMMON_H
#define TUNED_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- errors ------------------------------------------------------------ */

/* Error codes: 0 is success, every failure is negative. */
enum {
  TN_OK = 0,
  TN_EINVAL = -1,       /* bad input: the message says what and where */
  TN_ENOMEM = -2,       /* out of memory or over a size limit */
  TN_EIO = -3,          /* a file or system call failed */
  TN_EUNSUPPORTED = -4, /* a valid request this build or device cannot do */
  TN_ERANGE = -5,       /* a value out of the range it must be in */
  TN_ESTATE = -6,       /* the operation does not apply in the current state */
  TN_ESTOPPED = -7,     /* stopped midway because the caller asked (a cancel, a deadline) */
  TN_EAGAIN = -8,       /* a resource is away for now (the database server down, its disk full): the same
                         * call may work later */
};

#define TN_ERR_MSG_MAX 1024

/* A caller-provided error: code plus a message a user can act on.
 * line/col are set (1-based) when the error has a source position, else 0. */
typedef struct tn_err {
  int code;
  int line, col;
  char msg[TN_ERR_MSG_MAX];
} tn_err_t;

/* Sets err (if non-NULL) and returns code, so callers can write
 * `return tn_err_set(err, TN_EINVAL, "...")`. */
int tn_err_set(tn_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tn_err_vset(tn_err_t *err, int code, const char *fmt, va_list ap);
/* Prefixes the existing message with more context ("while X: <old>"). */
int tn_err_prefix(tn_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tn_err_clear(tn_err_t *err);
const char *tn_strerror(int code);

/* ---- arena ------------------------------------------------------------- */

/* A bump allocator: everything allocated from it is freed at once.
 * Allocation failure is treated like the C library's: the process reports
 * "out of memory" and aborts (input sizes are validated before they reach
 * an arena, so this only happens when the machine is truly exhausted). */
typedef struct tn_arena tn_arena_t;

tn_arena_t *tn_arena_new(void);
void tn_arena_free(tn_arena_t *a);
void *tn_arena_alloc(tn_arena_t *a, size_t size); /* zeroed, 16-byte aligned */
char *tn_arena_strdup(tn_arena_t *a, const char *s);
char *tn_arena_strndup(tn_arena_t *a, const char *s, size_t n);
char *tn_arena_printf(tn_arena_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void *tn_arena_memdup(tn_arena_t *a, const void *p, size_t size);
size_t tn_arena_used(const tn_arena_t *a);

#define TN_NEW(arena, type) ((type *)tn_arena_alloc((arena), sizeof(type)))
#define TN_NEWN(arena, type, n) ((type *)tn_arena_alloc((arena), sizeof(type) * (size_t)(n)))

/* malloc/realloc that abort with "out of memory" instead of returning NULL;
 * for small bookkeeping only.  Large data allocations use plain malloc and
 * report TN_ENOMEM. */
void *tn_xmalloc(size_t size);
void *tn_xcalloc(size_t n, size_t size);
void *tn_xrealloc(void *p, size_t size);
char *tn_xstrdup(const char *s);

/* ---- string buffer ----------------------------------------------------- */

typedef struct tn_buf {
  char *data; /* always NUL-terminated once anything was appended */
  size_t len, cap;
} tn_buf_t;

void tn_buf_init(tn_buf_t *b);
void tn_buf_free(tn_buf_t *b);
void tn_buf_reset(tn_buf_t *b);
void tn_buf_put(tn_buf_t *b, const char *s);
void tn_buf_putn(tn_buf_t *b, const char *s, size_t n);
void tn_buf_putc(tn_buf_t *b, char c);
void tn_buf_printf(tn_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tn_buf_vprintf(tn_buf_t *b, const char *fmt, va_list ap);
void tn_buf_indent(tn_buf_t *b, int spaces);
/* Returns the contents (never NULL; "" when empty); the buffer keeps ownership. */
const char *tn_buf_str(const tn_buf_t *b);
/* Hands the heap string to the caller (free() it) and resets the buffer. */
char *tn_buf_take(tn_buf_t *b);

/* ---- files --------------------------------------------------------------- */

/* Reads a whole file (NUL-terminated, *len excludes the NUL).  Files larger
 * than max_bytes are refused with TN_ENOMEM. */
int tn_read_file(const char *path, size_t max_bytes, char **out, size_t *len, tn_err_t *err);

/* Opens path for writing (created 0644 or truncated) as a user-named output
 * (-o FILE): a symbolic link there is refused, not followed, so a link
 * planted in a shared directory cannot redirect what we write.  NULL with
 * err set on failure. */
FILE *tn_open_out(const char *path, bool binary, tn_err_t *err);

/* mkdir -p: every missing directory of path is created with mode (umask
 * applies); TN_EIO naming the part that failed, or when path exists and is
 * not a directory. */
int tn_mkdirs(const char *path, unsigned mode, tn_err_t *err);

/* ---- RNG ----------------------------------------------------------------- */

/* xoshiro256** seeded through splitmix64: integer-only, so the same seed
 * gives the same stream on every machine. */
typedef struct tn_rng {
  uint64_t s[4];
} tn_rng_t;

void tn_rng_seed(tn_rng_t *r, uint64_t seed);
uint64_t tn_rng_next(tn_rng_t *r);
/* Uniform integer in [0, n); n > 0.  Unbiased (rejection). */
uint64_t tn_rng_below(tn_rng_t *r, uint64_t n);
/* Uniform double in [0, 1) with 53 random bits. */
double tn_rng_double(tn_rng_t *r);
/* A child seed for an independent stream (forking). */
uint64_t tn_rng_fork(tn_rng_t *r);

/* ---- identities (ident.c) -------------------------------------------------- */

/* What names a workload or a trace wherever it is stored, compared or
 * shown: BLAKE2b-256 (libsodium's crypto_generichash) of a canonical byte
 * stream that starts with a domain string (TN_ID_WORKLOAD, ...), so that two
 * kinds of thing never share an identity.  Finding two inputs with one
 * identity takes ~2^128 work, unlike the FNV-1a below (docs/security.md).
 * Written as TN_ID_HEX lower-case hex digits; tables for people show the
 * first TN_ID_SHOWN (128 bits), and a prefix of at least TN_ID_SHOWN
 * digits names a workload wherever a hash is taken. */
#define TN_ID_BYTES 32
#define TN_ID_HEX (2 * TN_ID_BYTES) /* digits */
#define TN_ID_SIZE (TN_ID_HEX + 1)  /* a buffer for the digits and the NUL */
#define TN_ID_SHOWN 32              /* digits shown in tables, the shortest prefix taken */

/* Domains: a workload's structure (ir_func_hash), a trace's text
 * (db_trace_hash), and a workload row the schema-8 migration could not
 * rebuild from its source (db/). */
#define TN_ID_WORKLOAD "tuned.workload.v1"
#define TN_ID_TRACE "tuned.trace.v1"
#define TN_ID_LEGACY "tuned.legacy-workload.v1"

/* A digest in progress (libsodium's state, kept opaque so that includers
 * need no libsodium header). */
typedef struct tn_id_ctx {
  unsigned char state[384] __attribute__((aligned(64)));
} tn_id_ctx_t;

void tn_id_init(tn_id_ctx_t *c, const char *domain); /* feeds the domain and its NUL */
void tn_id_update(tn_id_ctx_t *c, const void *data, size_t n);
void tn_id_final(tn_id_ctx_t *c, char out[TN_ID_SIZE]);
/* One call: the identity of n bytes in a domain. */
void tn_id_of(const char *domain, const void *data, size_t n, char out[TN_ID_SIZE]);
/* Whether s is a whole identity: exactly TN_ID_HEX lower-case hex digits. */
bool tn_id_valid(const char *s);
/* Whether s can name one: TN_ID_SHOWN to TN_ID_HEX lower-case hex digits. */
bool tn_id_prefix_valid(const char *s);
/* The first 64 bits of an identity (or prefix) as a number, for hash
 * tables and keys that need no protection against forgery; 0 for text that
 * does not start with 16 hex digits. */
uint64_t tn_id_key(const char *hex);

/* ---- hashing ------------------------------------------------------------- */

/* FNV-1a, 64-bit: byte-order independent when fed bytes.  Fast and easy to
 * make collide: for hash tables and in-memory dedup only, never to name
 * anything (the identities above do). */
#define TN_FNV_INIT 0xcbf29ce484222325ULL
uint64_t tn_fnv1a(uint64_t h, const void *data, size_t n);
uint64_t tn_fnv1a_str(uint64_t h, const char *s);
uint64_t tn_fnv1a_u64(uint64_t h, uint64_t v); /* hashes v as 8 little-endian bytes */

/* ---- arithmetic ----------------------------------------------------------- */

/* Greatest common divisor of |a| and |b| (gcd(0, 0) = 0); INT64_MIN's
 * magnitude does not fit an int64_t, so a result of 2^63 is clamped to
 * 2^62 (a divisor of it). */
int64_t tn_gcd64(int64_t a, int64_t b);

/* ---- half precision ------------------------------------------------------ */

uint16_t tn_float_to_half(float f); /* round to nearest even */
float tn_half_to_float(uint16_t h);
/* bfloat16: the top half of a float32, rounded to nearest even (NaN stays NaN). */
uint16_t tn_float_to_bf16(float f);
float tn_bf16_to_float(uint16_t h);

/* ---- misc ---------------------------------------------------------------- */

#define TN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TN_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Monotonic clock in seconds. */
double tn_now(void);

/* Levenshtein distance between a and b (each compared up to its first 64
 * bytes): edits that turn one into the other, for "did you mean". */
int tn_edit_distance(const char *a, const char *b);

/* Identifier check for names that reach generated code: [A-Za-z_][A-Za-z0-9_]*
 * and not a reserved word of C, C++/CUDA or OpenCL C (nor a name starting with
 * "__" or "tuned_", which generated code keeps for itself). */
bool tn_is_identifier(const char *s);

/* ---- reserved names (reserved.c: the one table) ------------------------ */

/* Who keeps a name from generated code: a language (keywords, types,
 * builtins and its headers' names), the C library (what the generated C's
 * headers declare, common POSIX calls), or tuned's generated code itself.
 * Where the name is a word (a keyword, type or builtin variable), which
 * workloads may not use as a name, the same bits shifted by TN_RW_WORDS say
 * for whom.  Generated code renames every reserved name (`dot` -> `dot_1`). */
enum {
  TN_RW_C = 1 << 0,
  TN_RW_CXX = 1 << 1,
  TN_RW_CUDA = 1 << 2,
  TN_RW_OPENCL = 1 << 3,
  TN_RW_LIB = 1 << 4,
  TN_RW_TUNED = 1 << 5,
  TN_RW_ALL = (1 << 6) - 1,
  TN_RW_WORDS = 8,
};

/* The bits of s: TN_RW_* for whoever reserves it, and (bits << TN_RW_WORDS)
 * for those to whom it is a word; 0: free to use. */
unsigned tn_reserved_langs(const char *s);
/* Whether s starts with a reserved prefix (__, tuned_, cudaX, CLK_, ...):
 * no suffix makes such a name free. */
bool tn_reserved_by_prefix(const char *s);
/* A word of some language: refused as a name in workloads. */
bool tn_is_reserved_word(const char *s);
/* The table, expanded: its exact names (sorted) or its prefixes (names
 * starting with one are reserved), with their bits; valid for the process's
 * life. */
size_t tn_reserved_list(bool prefixes, const char *const **texts, const unsigned **langs);
/* "C, C++ and OpenCL C" for the TN_RW_* bits of langs (TN_RW_ALL of them), into buf. */
void tn_reserved_langs_text(unsigned langs, char *buf, size_t size);

#endif
