/* cuda_host_wmma.h — the cuda-host harness's nvcuda::wmma (tensor cores before
 * Hopper).  Part of tuned_cuda_host.h: measure/cuda_host.h includes it after
 * the block's threads, and measure/embed.py inlines it there; not a header
 * of its own. */
#ifndef TUNED_CUDA_HOST_WMMA_H
#define TUNED_CUDA_HOST_WMMA_H

/* ---- nvcuda::wmma: warp-wide tensor-core operations ------------------------------- */

/* A fragment holds the warp's whole tile in every lane, row-major (the real
 * ones spread it over the lanes in a layout code must not rely on: the
 * generated code only touches elements uniformly).  load_matrix_sync,
 * mma_sync and store_matrix_sync are warp-wide: all 32 lanes meet, must
 * bring the same pointer, leading dimension and fragments, and the result is
 * computed once: products of float16/bfloat16 (exact in float32) and of
 * tf32 (float32 with the 13 low mantissa bits dropped, as the tensor cores
 * read it) summed in float32 along k.  Addresses must be 32-byte aligned and
 * leading dimensions multiples of 16 bytes, as on the GPU. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct tile_shape;
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };
template <typename T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  typedef typename storage<T>::type element_type;
  enum { rows = tile_shape<Use, M, N, K>::rows, cols = tile_shape<Use, M, N, K>::cols, num_elements = rows * cols };
  element_type x[num_elements];
};

inline float to_float(__half h) { return __half2float(h); }
inline float to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
inline float to_float(float f) { return f; }

/* cvt.rna.tf32.f32: to nearest, ties away from zero, 10 bits of mantissa. */
inline float __float_to_tf32(float f) {
  uint32_t u = tuned_host_bits(f);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  return tuned_host_float(u);
}

inline void check_mem(const char *op, const void *p, unsigned ldm, size_t elem) {
  if ((uintptr_t)p % 32) tuned_host::fail("nvcuda::wmma::%s: the pointer is not 32-byte aligned", op);
  if (ldm * elem % 16) tuned_host::fail("nvcuda::wmma::%s: the leading dimension is not a multiple of 16 bytes", op);
}

template <typename Use, int M, int N, int K, typename T, typename L, typename P>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm) {
  typedef fragment<Use, M, N, K, T, L> F;
  const bool col = std::is_same<L, col_major>::value;
  tuned_host::collective_args a = {"load_matrix_sync", p, ldm, col, {NULL, NULL, NULL}, {0, 0, 0}};
  check_mem(a.op, p, ldm, sizeof(P));
  tuned_host::warp_meet(a);
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = p[col ? (size_t)c * ldm + r : (size_t)r * ldm + c];
  tuned_host::warp_done();
}

template <int M, int N, int K, typename T> void fill_fragment(fragment<accumulator, M, N, K, T> &f, T v) {
  for (int i = 0; i < M * N; i++) f.x[i] = v;
}

template <int M, int N, int K, typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
              const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
  tuned_host::collective_args g = {"mma_sync", NULL, 0, 0, {&a, &b, &c}, {sizeof a, sizeof b, sizeof c}};
  const bool tf32 = std::is_same<T, precision::tf32>::value;
  if (tuned_host::warp_meet(g)) {
    float *t = tuned_host::warp_tile();
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        float s = c.x[i * N + j];
        for (int k = 0; k < K; k++) {
          float x = to_float(a.x[i * K + k]), y = to_float(b.x[k * N + j]);
          if (tf32) x = tuned_host_float(tuned_host_bits(x) & 0xffffe000u), y = tuned_host_float(tuned_host_bits(y) & 0xffffe000u);
          s += x * y;
        }
        t[i * N + j] = s;
      }
  }
  memcpy(d.x, tuned_host::warp_tile(), sizeof d.x);
  tuned_host::warp_done();
}

template <int M, int N, int K>
void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
  tuned_host::collective_args a = {"store_matrix_sync", p, ldm, (int)l, {&f, NULL, NULL}, {sizeof f, 0, 0}};
  check_mem(a.op, p, ldm, sizeof(float));
  if (tuned_host::warp_meet(a))
    for (int r = 0; r < M; r++)
      for (int c = 0; c < N; c++) p[l == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[r * N + c];
  tuned_host::warp_done();
}
} /* namespace wmma */
} /* namespace nvcuda */

#endif
