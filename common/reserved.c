/* reserved.c — the one table of names that must not reach generated code as
 * they are: the keywords, types and builtins of C (C23 and GNU C), C++ (C++23)
 * and CUDA, and OpenCL C up to 3.0; the names the C library and the
 * backends' headers declare; and the names generated code keeps for itself.
 * The workload parser refuses the words (keywords, types, builtin
 * variables); code generation renames every name of the table (`dot` becomes
 * `dot_1`), and no entry point takes one.  tests/test_codegen.c compiles a
 * kernel with each of them on every backend and checks the table against
 * what the compilers' own headers declare. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

/* One row: a name, or a family of names where each {a|b|...} group stands
 * for one of its alternatives ({|f}: nothing or "f"); a trailing '*' makes
 * the name a prefix of any longer one.  W rows are words of their languages
 * (refused in workloads), N rows names (renamed only). */
typedef struct rw_row {
  const char *text;
  unsigned langs; /* TN_RW_* */
} rw_row_t;

#define C TN_RW_C
#define CXX TN_RW_CXX
#define CU TN_RW_CUDA
#define CL TN_RW_OPENCL
#define LIB TN_RW_LIB
#define OWN TN_RW_TUNED
#define W(text, langs) {text, (langs) | (langs) << TN_RW_WORDS}
#define N(text, langs) {text, (langs)}
#define UPPER "{A|B|C|D|E|F|G|H|I|J|K|L|M|N|O|P|Q|R|S|T|U|V|W|X|Y|Z}"
#define LOWER "{a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q|r|s|t|u|v|w|x|y|z}"
/* OpenCL C's scalar types that have vectors, and its vector widths */
#define CL_T "{char|uchar|short|ushort|int|uint|long|ulong|float|double|half}"
#define CL_N "{2|3|4|8|16}"
#define CL_RND "{|_rte|_rtz|_rtp|_rtn}"
/* CUDA's vector types */
#define CU_T "{char|uchar|short|ushort|int|uint|long|ulong|longlong|ulonglong|float|double}"

static const rw_row_t rows[] = {
    /* ---- every language: the implementation's names ---- */
    W("__*", C | CXX | CU | CL),            /* __global__, __kernel, __syncthreads, __builtin_* */
    W("_" UPPER "*", C | CXX | CU | CL),    /* _Bool, _Float16, _Alignas: C and C++ reserve _X names */

    /* ---- C: C23's keywords (C11's, and the macros of stdbool.h, stdalign.h,
     * stdnoreturn.h and complex.h that name them), GNU C's, the standard
     * headers' types, and what gcc and clang predefine ---- */
    W("{auto|break|case|char|const|continue|default|do|double|else|enum|extern|float|for|goto|if|inline|int|long}",
      C | CXX | CU | CL),
    W("{register|restrict|return|short|signed|sizeof|static|struct|switch|typedef|union|unsigned|void|volatile|while}",
      C | CXX | CU | CL),
    W("{alignas|alignof|bool|constexpr|false|nullptr|static_assert|thread_local|true|typeof|typeof_unqual}", C | CXX | CU),
    W("{noreturn|complex|imaginary|asm|main}", C),
    W("{size_t|ptrdiff_t|wchar_t|max_align_t|nullptr_t|char8_t|char16_t|char32_t|wint_t}", C | CXX | CU),
    W("{int|uint|int_least|uint_least|int_fast|uint_fast}{8|16|32|64}_t", C | CXX | CU),
    W("{intptr_t|uintptr_t|intmax_t|uintmax_t|float_t|double_t|div_t|ldiv_t|lldiv_t|va_list}", C | CXX | CU),
    N("{linux|unix|i386}", C | CXX),        /* predefined by gcc and clang in their GNU modes */

    /* ---- C++ (C++23, as NVRTC compiles CUDA): keywords, alternative
     * tokens, identifiers with a special meaning, the TM TS's, std ---- */
    W("{catch|class|concept|consteval|constinit|const_cast|co_await|co_return|co_yield|decltype|delete}", CXX | CU),
    W("{dynamic_cast|explicit|export|friend|mutable|namespace|new|noexcept|operator|private|protected|public}",
      CXX | CU),
    W("{reinterpret_cast|requires|static_cast|template|this|throw|try|typeid|typename|using|virtual}", CXX | CU),
    W("{and|and_eq|bitand|bitor|compl|not|not_eq|or|or_eq|xor|xor_eq}", CXX | CU),
    N("{final|override|import|module|std}", CXX | CU),
    N("{atomic_cancel|atomic_commit|atomic_noexcept|synchronized|reflexpr|transaction_safe|transaction_safe_dynamic}",
      CXX | CU),

    /* ---- CUDA: builtin variables, types, namespaces ---- */
    W("{gridDim|blockIdx|blockDim|threadIdx|warpSize|dim3}", CU),
    W(CU_T "{1|2|3|4}", CU),
    W("{long|ulong|longlong|ulonglong|double}4_{16a|32a}", CU),
    W("{half|half2|nv_half|nv_half2|nv_bfloat16|nv_bfloat162}", CU),
    N("nvcuda", CU),
    /* ---- CUDA: builtin functions (the CUDA Math API with its float
     * variants, integer and conversion intrinsics, atomics, textures and
     * surfaces, half and bfloat16 math, make_<vector>), and the runtime and
     * driver APIs' names ---- */
    N("{acos|acosh|asin|asinh|atan|atan2|atanh|cbrt|ceil|copysign|cos|cosh|cospi|cyl_bessel_i0|cyl_bessel_i1|erf}{|f}",
      CU),
    N("{erfc|erfcinv|erfcx|erfinv|exp|exp10|exp2|expm1|fabs|fdim|fdivide|floor|fma|fmax|fmin|fmod|frexp|hypot}{|f}",
      CU),
    N("{ilogb|j0|j1|jn|ldexp|lgamma|llrint|llround|log|log10|log1p|log2|logb|lrint|lround|modf|nan|nearbyint}{|f}",
      CU),
    N("{nextafter|norm|norm3d|norm4d|normcdf|normcdfinv|pow|rcbrt|remainder|remquo|rhypot|rint|rnorm|rnorm3d}{|f}", CU),
    N("{rnorm4d|round|rsqrt|scalbln|scalbn|sin|sincos|sincospi|sinh|sinpi|sqrt|tan|tanh|tgamma|trunc|y0|y1|yn}{|f}", CU),
    N("{abs|labs|llabs|min|max|umin|umax|llmin|llmax|ullmin|ullmax|isfinite|isinf|isnan|signbit}", CU),
    N("{dadd|dmul|dsub|double2int|double2ll|double2uint|double2ull|float2double|int2double|ll2double}", CU),
    N("{uint2double|ull2double|ballot|all|any|syncthreads_and|syncthreads_count|syncthreads_or}", CU),
    N("{clock|clock64|clock_t|printf|malloc|free|memcpy|memset|assert}", CU),
    N("atomic{Add|Sub|Exch|Min|Max|Inc|Dec|CAS|And|Or|Xor}{|_block|_system}", CU),
    N("tex{1D|2D|3D|1DLayered|2DLayered|Cubemap|CubemapLayered}{|Lod|Grad}", CU),
    N("{tex1Dfetch|tex2Dgather}", CU),
    N("surf{1D|2D|3D|1DLayered|2DLayered|Cubemap|CubemapLayered}{read|write}", CU),
    N("{h|h2}{ceil|cos|exp|exp10|exp2|floor|log|log10|log2|rcp|rint|rsqrt|sin|sqrt|tanh|tanh_approx|trunc}", CU),
    N("make_" CU_T "{1|2|3|4}", CU),
    N("make_{double4_16a|double4_32a|half2|bfloat162}", CU),
    N("cuda" UPPER "*", CU),                 /* cudaMalloc, cudaError_t, cudaDevAttrMaxTexture1DWidth */
    N("cu" UPPER "*", CU),                   /* cuInit, cuLaunchKernel */
    N("CU" LOWER "*", CU),                   /* CUuuid, CUtensorMap */

    /* ---- OpenCL C 3.0 (and 1.2, 2.0): keywords, address spaces and
     * access qualifiers, types (the reserved ones too: quad, bool and
     * matrix types), builtin types of images, events, pipes, atomics ---- */
    W("{kernel|global|local|constant|private|generic|read_only|write_only|read_write|uniform|pipe|vec_step}", CL),
    W("{complex|imaginary|quad|uchar|ushort|uint|ulong|half|bool|size_t|ptrdiff_t|intptr_t|uintptr_t}", CL),
    W(CL_T CL_N, CL),
    W("{bool|quad}" CL_N, CL),
    W("{float|double|half}{2|3|4|8|16}x{2|3|4|8|16}", CL),
    W("image{1d|1d_array|1d_buffer|2d|2d_array|2d_depth|2d_array_depth|2d_msaa|2d_array_msaa}_t", CL),
    W("image{2d_msaa_depth|2d_array_msaa_depth|3d}_t", CL),
    W("{sampler_t|event_t|queue_t|ndrange_t|clk_event_t|reserve_id_t|kernel_enqueue_flags_t|clk_profiling_info}", CL),
    W("{memory_order|memory_scope|atomic_flag}", CL),
    W("atomic_{int|uint|long|ulong|float|double|half|intptr_t|uintptr_t|size_t|ptrdiff_t}", CL),
    N("memory_order_{relaxed|acquire|release|acq_rel|seq_cst}", CL),
    N("memory_scope_{work_item|work_group|sub_group|device|all_svm_devices|all_devices}", CL),
    N("{CLK_*|cl_*}", CL),                  /* CLK_sRGB, cl_khr_fp16, cl_mem_fence_flags */
    /* ---- OpenCL C's builtin functions ---- */
    N("{get_work_dim|get_global_size|get_global_id|get_local_size|get_enqueued_local_size|get_local_id}", CL),
    N("{get_num_groups|get_group_id|get_global_offset|get_global_linear_id|get_local_linear_id}", CL),
    N("{get_sub_group_size|get_max_sub_group_size|get_num_sub_groups|get_enqueued_num_sub_groups}", CL),
    N("{get_sub_group_id|get_sub_group_local_id}", CL),
    N("get_sub_group_{eq|ge|gt|le|lt}_mask", CL),
    N("{acos|acosh|acospi|asin|asinh|asinpi|atan|atan2|atanh|atanpi|atan2pi|cbrt|ceil|copysign|cos|cosh|cospi}", CL),
    N("{erfc|erf|exp|exp2|exp10|expm1|fabs|fdim|floor|fma|fmax|fmin|fmod|fract|frexp|hypot|ilogb|ldexp|lgamma}", CL),
    N("{lgamma_r|log|log2|log10|log1p|logb|mad|maxmag|minmag|modf|nan|nextafter|pow|pown|powr|remainder|remquo}", CL),
    N("{rint|rootn|round|rsqrt|sin|sincos|sinh|sinpi|sqrt|tan|tanh|tanpi|tgamma|trunc}", CL),
    N("{half|native}_{cos|divide|exp|exp2|exp10|log|log2|log10|powr|recip|rsqrt|sin|sqrt|tan}", CL),
    N("{abs|abs_diff|add_sat|hadd|rhadd|clamp|clz|ctz|mad_hi|mad_sat|max|min|mul_hi|rotate|sub_sat|upsample}", CL),
    N("{popcount|mad24|mul24|bit_reverse|bitfield_insert|bitfield_extract_signed|bitfield_extract_unsigned}", CL),
    N("{dot|dot_acc_sat}_4x8packed_{ss_int|su_int|us_int|uu_uint}", CL),
    N("{dot_acc_sat|degrees|mix|radians|step|smoothstep|sign|cross|dot|distance|length}", CL),
    N("{normalize|fast_distance|fast_length|fast_normalize|isequal|isnotequal|isgreater|isgreaterequal|isless}", CL),
    N("{islessequal|islessgreater|isfinite|isinf|isnan|isnormal|isordered|isunordered|signbit|any|all}", CL),
    N("{bitselect|select|shuffle|shuffle2|printf}", CL),
    N("convert_" CL_T "{|2|3|4|8|16}{|_sat}" CL_RND, CL),
    N("as_" CL_T "{|2|3|4|8|16}", CL),
    N("{vload|vstore}" CL_N, CL),
    N("{vload_half|vloada_half}{|2|3|4|8|16}", CL),
    N("{vstore_half|vstorea_half}{|2|3|4|8|16}" CL_RND, CL),
    N("{barrier|work_group_barrier|sub_group_barrier|mem_fence|read_mem_fence|write_mem_fence}", CL),
    N("{atomic_work_item_fence|to_global|to_local|to_private|get_fence|async_work_group_copy}", CL),
    N("{async_work_group_strided_copy|wait_group_events|prefetch}", CL),
    N("{atom|atomic}_{add|sub|xchg|inc|dec|cmpxchg|min|max|and|or|xor}", CL),
    N("atomic_{init|store|load|exchange|compare_exchange_strong|compare_exchange_weak}{|_explicit}", CL),
    N("atomic_fetch_{add|sub|or|xor|and|min|max}{|_explicit}", CL),
    N("atomic_flag_{test_and_set|clear}{|_explicit}", CL),
    N("{read|write}_image{f|i|ui|h}", CL),
    N("get_image_{width|height|depth|channel_data_type|channel_order|dim|array_size|num_samples|num_mip_levels}", CL),
    N("{work_group|sub_group}_{all|any|broadcast|reduce_add|reduce_min|reduce_max}", CL),
    N("{work_group|sub_group}_scan_{exclusive|inclusive}_{add|min|max}", CL),
    N("sub_group_{ballot|ballot_bit_count|ballot_bit_extract|ballot_exclusive_scan|ballot_find_lsb}", CL),
    N("sub_group_{ballot_find_msb|ballot_inclusive_scan|broadcast_first|elect|inverse_ballot|rotate}", CL),
    N("sub_group_{shuffle|shuffle_down|shuffle_up|shuffle_xor|clustered_rotate|non_uniform_all}", CL),
    N("sub_group_{non_uniform_all_equal|non_uniform_any|non_uniform_broadcast}", CL),
    N("sub_group_{clustered_reduce|non_uniform_reduce|non_uniform_scan_exclusive|non_uniform_scan_inclusive}_"
      "{add|mul|min|max|and|or|xor|logical_and|logical_or|logical_xor}", CL),
    N("{read_pipe|write_pipe|reserve_read_pipe|reserve_write_pipe|commit_read_pipe|commit_write_pipe}", CL),
    N("{work_group|sub_group}_{reserve_read_pipe|reserve_write_pipe|commit_read_pipe|commit_write_pipe}", CL),
    N("{is_valid_reserve_id|get_pipe_num_packets|get_pipe_max_packets|enqueue_kernel|enqueue_marker}", CL),
    N("{get_kernel_work_group_size|get_kernel_preferred_work_group_size_multiple|get_default_queue}", CL),
    N("{get_kernel_sub_group_count_for_ndrange|get_kernel_max_sub_group_size_for_ndrange}", CL),
    N("ndrange_{1D|2D|3D}", CL),
    N("{retain_event|release_event|create_user_event|is_valid_event|set_user_event_status}", CL),
    N("{capture_event_profiling_info}", CL),
    N("{intel_*|amd_*|arm_*}", CL),          /* vendor extensions PoCL's headers declare */
    N("{dev_image_t|dev_sampler_t}", CL),    /* PoCL's own */

    /* ---- the C library: what math.h, stdint.h and stdlib.h declare (gcc and
     * glibc, GNU mode: the generated C includes them), their float and long
     * double variants, and the POSIX calls that most often make names ---- */
    N("{acos|acosh|asin|asinh|atan|atan2|atanh|cbrt|ceil|copysign|cos|cosh|drem|erf|erfc|exp|exp2|exp10|expm1}{|f|l}",
      LIB),
    N("{fabs|fdim|finite|floor|fma|fmax|fmin|fmod|frexp|gamma|hypot|ilogb|isinf|isnan|j0|j1|jn|ldexp|lgamma}{|f|l}",
      LIB),
    N("{llrint|llround|log|log10|log1p|log2|logb|lrint|lround|modf|nan|nearbyint|nextafter|nexttoward|pow}{|f|l}",
      LIB),
    N("{pow10|remainder|remquo|rint|round|scalb|scalbln|scalbn|significand|sin|sincos|sinh|sqrt|tan|tanh|tgamma}{|f|l}",
      LIB),
    N("{trunc|y0|y1|yn}{|f|l}", LIB),
    N("lgamma{|f|l}_r", LIB),
    N("{fpclassify|isfinite|isnormal|signbit|isgreater|isgreaterequal|isless|islessequal|islessgreater}", LIB),
    N("{isunordered|iscanonical|issignaling|issubnormal|iszero|signgam|math_errhandling|errno|offsetof}", LIB),
    N("{a64l|abort|abs|aligned_alloc|alloca|arc4random|arc4random_buf|arc4random_uniform|at_quick_exit|atexit}", LIB),
    N("{atof|atoi|atol|atoll|bsearch|calloc|clearenv|div|drand48|drand48_r|ecvt|ecvt_r|erand48|erand48_r|exit}", LIB),
    N("{fcvt|fcvt_r|free|gcvt|getenv|getloadavg|getsubopt|initstate|initstate_r|jrand48|jrand48_r|l64a|labs}", LIB),
    N("{lcong48|lcong48_r|ldiv|llabs|lldiv|lrand48|lrand48_r|malloc|mblen|mbstowcs|mbtowc|mkdtemp|mkstemp}", LIB),
    N("{mkstemps|mktemp|mrand48|mrand48_r|nrand48|nrand48_r|on_exit|posix_memalign|pselect|putenv|qecvt}", LIB),
    N("{qecvt_r|qfcvt|qfcvt_r|qgcvt|qsort|quick_exit|rand|rand_r|random|random_r|realloc|reallocarray}", LIB),
    N("{realpath|rpmatch|seed48|seed48_r|select|setenv|setstate|setstate_r|srand|srand48|srand48_r|srandom}", LIB),
    N("{srandom_r|strtod|strtof|strtol|strtold|strtoll|strtoq|strtoul|strtoull|strtouq|system|unsetenv}", LIB),
    N("{valloc|wcstombs|wctomb|memcpy|memset|memmove|memcmp|strlen|strcpy|strcmp|strncpy|strdup|printf}", LIB),
    N("{blkcnt_t|blksize_t|caddr_t|clock_t|clockid_t|daddr_t|dev_t|fd_mask|fd_set|fsblkcnt_t|fsfilcnt_t}", LIB),
    N("{fsid_t|gid_t|id_t|ino_t|key_t|loff_t|mode_t|nlink_t|off_t|pid_t|quad_t|register_t|sigset_t|ssize_t}", LIB),
    N("{suseconds_t|time_t|timer_t|u_char|u_int|u_int8_t|u_int16_t|u_int32_t|u_int64_t|u_long|u_quad_t}", LIB),
    N("{u_short|uid_t|uint|ulong|ushort|uchar}", LIB),
    N("pthread_{t|attr_t|barrier_t|barrierattr_t|cond_t|condattr_t|key_t|mutex_t|mutexattr_t|once_t}", LIB),
    N("pthread_{rwlock_t|rwlockattr_t|spinlock_t}", LIB),
    N("{read|write|open|close|pipe|dup|dup2|fork|kill|wait|sleep|usleep|alarm|pause|link|unlink|access}", LIB),
    N("{chdir|chmod|chown|creat|fsync|sync|truncate|ftruncate|getpid|lseek|mkdir|rmdir|rename|stat|fstat}", LIB),
    N("{lstat|symlink|umask|ioctl|mmap|munmap|socket|bind|listen|accept|connect|send|recv|shutdown|poll}", LIB),
    N("{signal|raise|time|times|index|rindex|nice|fopen|fclose|fread|fwrite|puts|putchar|getchar}", LIB),
    N("{execl|execlp|execle|execv|execvp|execvpe|getline|getdelim|strndup|clock|sbrk|brk|nanosleep}", LIB),

    /* ---- tuned's own: what generated code declares (the entry wrapper's
     * argument, the block iterators' prefix is the parser's) ---- */
    W("tuned_*", OWN),
    N("args", OWN),
};

/* ---- the expanded table ------------------------------------------------------ */

typedef struct rw_name {
  char *text;
  unsigned langs;
} rw_name_t;

static struct {
  rw_name_t *exact;   /* sorted, each name once (langs merged) */
  size_t nexact, capexact;
  rw_name_t *prefix;  /* from rows ending in '*' */
  size_t nprefix, capprefix;
  const char **names, **prefixes; /* the texts alone: tn_reserved_list */
  unsigned *name_langs, *prefix_langs;
} rw;
static pthread_once_t rw_once = PTHREAD_ONCE_INIT;

static void rw_add(const char *text, size_t len, unsigned langs) {
  bool pre = len > 0 && text[len - 1] == '*';
  rw_name_t **v = pre ? &rw.prefix : &rw.exact;
  size_t *n = pre ? &rw.nprefix : &rw.nexact, *cap = pre ? &rw.capprefix : &rw.capexact;
  if (*n == *cap) *v = tn_xrealloc(*v, sizeof **v * (*cap = *cap * 2 + 256));
  char *t = tn_xmalloc(len + 1);
  memcpy(t, text, len);
  t[pre ? len - 1 : len] = 0;
  (*v)[(*n)++] = (rw_name_t){.text = t, .langs = langs};
}

/* Expands the first {...} group of pat (after the prefix done), recursively. */
static void rw_expand(char *done, size_t ndone, const char *pat, unsigned langs) {
  const char *open = strchr(pat, '{');
  if (!open) {
    size_t n = strlen(pat);
    memcpy(done + ndone, pat, n);
    rw_add(done, ndone + n, langs);
    return;
  }
  size_t lead = (size_t)(open - pat);
  memcpy(done + ndone, pat, lead);
  const char *close = strchr(open, '}');
  for (const char *alt = open + 1; alt <= close;) {
    size_t alen = strcspn(alt, "|}");
    memcpy(done + ndone + lead, alt, alen);
    rw_expand(done, ndone + lead + alen, close + 1, langs);
    alt += alen + 1;
  }
}

static int rw_cmp(const void *a, const void *b) {
  return strcmp(((const rw_name_t *)a)->text, ((const rw_name_t *)b)->text);
}

static void rw_build(void) {
  char buf[256];
  for (size_t i = 0; i < TN_ARRAY_LEN(rows); i++) rw_expand(buf, 0, rows[i].text, rows[i].langs);
  qsort(rw.exact, rw.nexact, sizeof *rw.exact, rw_cmp);
  size_t k = 0; /* a name several rows give: one entry with every row's languages */
  for (size_t i = 0; i < rw.nexact; i++) {
    if (k > 0 && strcmp(rw.exact[k - 1].text, rw.exact[i].text) == 0) {
      rw.exact[k - 1].langs |= rw.exact[i].langs;
      free(rw.exact[i].text);
    } else {
      rw.exact[k++] = rw.exact[i];
    }
  }
  rw.nexact = k;
  rw.names = tn_xmalloc(sizeof *rw.names * (k ? k : 1));
  rw.name_langs = tn_xmalloc(sizeof *rw.name_langs * (k ? k : 1));
  for (size_t i = 0; i < k; i++) rw.names[i] = rw.exact[i].text, rw.name_langs[i] = rw.exact[i].langs;
  rw.prefixes = tn_xmalloc(sizeof *rw.prefixes * (rw.nprefix ? rw.nprefix : 1));
  rw.prefix_langs = tn_xmalloc(sizeof *rw.prefix_langs * (rw.nprefix ? rw.nprefix : 1));
  for (size_t i = 0; i < rw.nprefix; i++) rw.prefixes[i] = rw.prefix[i].text, rw.prefix_langs[i] = rw.prefix[i].langs;
}

unsigned tn_reserved_langs(const char *s) {
  pthread_once(&rw_once, rw_build);
  unsigned langs = 0;
  rw_name_t key = {.text = (char *)s};
  const rw_name_t *e = bsearch(&key, rw.exact, rw.nexact, sizeof *rw.exact, rw_cmp);
  if (e) langs |= e->langs;
  for (size_t i = 0; i < rw.nprefix; i++)
    if (strncmp(s, rw.prefix[i].text, strlen(rw.prefix[i].text)) == 0) langs |= rw.prefix[i].langs;
  return langs;
}

bool tn_reserved_by_prefix(const char *s) {
  pthread_once(&rw_once, rw_build);
  for (size_t i = 0; i < rw.nprefix; i++)
    if (strncmp(s, rw.prefix[i].text, strlen(rw.prefix[i].text)) == 0) return true;
  return false;
}

bool tn_is_reserved_word(const char *s) {
  return (tn_reserved_langs(s) >> TN_RW_WORDS) != 0;
}

size_t tn_reserved_list(bool prefixes, const char *const **texts, const unsigned **langs) {
  pthread_once(&rw_once, rw_build);
  *texts = prefixes ? rw.prefixes : rw.names;
  if (langs) *langs = prefixes ? rw.prefix_langs : rw.name_langs;
  return prefixes ? rw.nprefix : rw.nexact;
}

void tn_reserved_langs_text(unsigned langs, char *buf, size_t size) {
  static const struct {
    unsigned bit;
    const char *name;
  } names[] = {{TN_RW_C, "C"}, {TN_RW_CXX, "C++"}, {TN_RW_CUDA, "CUDA"}, {TN_RW_OPENCL, "OpenCL C"},
               {TN_RW_LIB, "the C library"}, {TN_RW_TUNED, "tuned's generated code"}};
  int total = 0, k = 0;
  langs &= TN_RW_ALL;
  for (size_t i = 0; i < TN_ARRAY_LEN(names); i++) total += (langs & names[i].bit) != 0;
  size_t n = 0;
  if (size) buf[0] = 0;
  for (size_t i = 0; i < TN_ARRAY_LEN(names) && n < size; i++) {
    if (!(langs & names[i].bit)) continue;
    k++;
    int w = snprintf(buf + n, size - n, "%s%s", k == 1 ? "" : k == total ? " and " : ", ", names[i].name);
    if (w < 0) break;
    n += (size_t)w;
  }
}
