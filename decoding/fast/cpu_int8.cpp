// The int8 kernel for block weights (Q4_1 / Q8_0): out[M, N] = x[M, K] @ W[N, K]^T with each row's activations
// quantised per 32-block to int8 (llama.cpp's Q8 activation scheme: d = amax / 127, q = round(x / d)), the
// block dot products taken in int32 (exact, so their order does not matter) and the blocks combined in one fixed
// order per output, the same for every row count and both instruction sets:
//   acc = 0; for b in blocks: acc = fma(d_w[b] * d_x[b], float(isum[b]), acc); Q4_1: acc = fma(m_w[b], s_x[b], acc)
// with s_x[b] = d_x[b] * float(sum of the row's codes in block b). So a row's output is bitwise independent of how
// many rows share the call and of the instruction set: verifying k drafted rows computes exactly what k one-row
// steps would, which is what makes drafting exact in this mode. The values are not the fp32 kernel's (the
// activations are rounded to 8 bits), so this mode's greedy is its own, not HF's (docs/cpu-kernel.md measures
// how often they agree). d_x is kept in float32 (llama.cpp rounds it to float16): one rounding fewer.
//
// Panels (pack_blocks_i8): the same 16-column panels and per-block records as pack_blocks, of the same size,
// with the codes ordered for 32-bit lanes of one column each (vpdpbusd / pmaddubsw sum 4 adjacent bytes):
//   Q4_1: d[16] fp16, m[16] fp16, then 4 x 64 bytes; in group j, lane c's byte i holds the code of k = 8j + i in
//         its low nibble and of k = 8j + 4 + i in its high nibble;
//   Q8_0: d[16] fp16, then 8 x 64 bytes; in group g, lane c's byte i is the code of k = 4g + i, plus 128 (uint8).
//   k8:   D[2][16], M[2][16] float32, then Q8_0's 8 x 64 bytes of codes + 128; its blocks are combined per half
//         h of 16 k: acc = fma(D[h] * d_x[b], float(isum_h), acc); acc = fma(M[h], s16_x[b][h], acc), h = 0, 1,
//         with s16_x = d_x * float(sum of the row's codes in that half).
// They are returned as an int8 tensor so that the ops can tell them from pack_blocks' uint8 ones.
//
// Instruction sets: AVX-512 VNNI (vpdpbusd: unsigned weights x signed activations; Q8_0's +128 is taken off by
// starting the block's sum at -128 * sum(x codes)), else AVX2 (pmaddubsw + pmaddwd: Q4_1 as is; Q8_0 with
// llama.cpp's sign transfer |w| x sign(x, w), whose pair sums cannot saturate). Both give the same int32 sums.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace decodescope_int8 {

constexpr int64_t PANEL = 16, QK = 32;
constexpr int64_t Q4_BYTES = 2 * PANEL * 2 + QK / 2 * PANEL;  // 320, as pack_blocks
constexpr int64_t Q8_BYTES = PANEL * 2 + QK * PANEL;          // 544
constexpr int64_t K8_SCALES = 4 * PANEL * 4;                   // D[2][16], M[2][16] float32
constexpr int64_t K8_BYTES = K8_SCALES + QK * PANEL;           // 768, as pack_blocks
constexpr int64_t rec_bytes(int fmt) { return fmt == 1 ? Q4_BYTES : fmt == 2 ? K8_BYTES : Q8_BYTES; }

bool g_vnni = false;

// Rows quantised per 32-block: codes q [M, K], scales d [M, K/32], code sums [M, K/32], s = d * float(sum).
struct QRows {
  std::vector<int8_t> q;
  std::vector<float> d, s, s16;   // s16 [M, K/32, 2]: d * float(sum of the codes of each half of 16)
  std::vector<int32_t> sum, sum16;
  int64_t K = 0, nb = 0;
};

// One row's block: amax, d = amax / 127, codes = round-to-nearest-even(x * (1 / d)) clamped to +-127. The same
// AVX2 code under both instruction sets, so both see the same codes.
static void quantize_block(const float* x, int8_t* q, float& d, float& s, int32_t& sum, float* s16, int32_t* sum16) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) { v[i] = _mm256_loadu_ps(x + 8 * i); m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i])); }
  alignas(32) float t[8];
  _mm256_store_ps(t, m);
  float amax = 0.0f;
  for (float a : t) amax = std::max(amax, a);
  d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  int32_t half[2] = {0, 0};
  alignas(32) int32_t c[8];
  for (int i = 0; i < 4; ++i) {
    const __m256i qi = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv)), lo), hi);
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), qi);
    for (int j = 0; j < 8; ++j) { q[8 * i + j] = static_cast<int8_t>(c[j]); half[i / 2] += c[j]; }
  }
  sum = half[0] + half[1];
  s = d * static_cast<float>(sum);
  for (int h = 0; h < 2; ++h) { sum16[h] = half[h]; s16[h] = d * static_cast<float>(half[h]); }
}

QRows quantize_rows(const float* x, int64_t M, int64_t K) {
  QRows r;
  r.K = K; r.nb = K / QK;
  r.q.resize(M * K); r.d.resize(M * r.nb); r.s.resize(M * r.nb); r.sum.resize(M * r.nb);
  r.s16.resize(2 * M * r.nb); r.sum16.resize(2 * M * r.nb);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < r.nb; ++b) {
      const int64_t i = m * r.nb + b;
      quantize_block(x + m * K + b * QK, r.q.data() + m * K + b * QK, r.d[i], r.s[i], r.sum[i], r.s16.data() + 2 * i,
                     r.sum16.data() + 2 * i);
    }
  return r;
}

static inline int32_t word(const int8_t* p) { int32_t v; std::memcpy(&v, p, 4); return v; }

// Rows [0, M) in ceil(M / most) tiles of near-equal size, the larger first: f(first row, rows). A row's tile (and
// so its tile's code path) depends on M only through how the rows are split, never on the instruction set.
template <int64_t most, class F>
static inline void for_each_tile(int64_t M, F&& f) {
  const int64_t tiles = (M + most - 1) / most;
  for (int64_t t = 0, m = 0; t < tiles; ++t) {
    const int64_t r = M / tiles + (t < M % tiles ? 1 : 0);
    f(m, r);
    m += r;
  }
}

static inline void store8(float* o, __m256 v, int64_t nc) {  // nc of 8 columns
  if (nc >= 8) { _mm256_storeu_ps(o, v); return; }
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int64_t c = 0; c < nc; ++c) o[c] = t[c];
}

// AVX2: rows [r0, r0 + R) x the 8 columns [8h, 8h + 8) of one panel (ymm: 8 lanes, one column each).
#define A_ACC(r) __m256 f##r = _mm256_setzero_ps(); __m256i i##r;
#define A_ZERO(r) if (R > r) i##r = _mm256_setzero_si256();
#define A_Q4(r) if (R > r) { \
    const __m256i xa = _mm256_set1_epi32(word(xq + r * K + b * QK + 8 * j)); \
    const __m256i xb = _mm256_set1_epi32(word(xq + r * K + b * QK + 8 * j + 4)); \
    i##r = _mm256_add_epi32(i##r, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xa), ones)); \
    i##r = _mm256_add_epi32(i##r, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xb), ones)); }
#define A_Q8(r) if (R > r) { \
    const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(word(xq + r * K + b * QK + 4 * g)), ws); \
    i##r = _mm256_add_epi32(i##r, _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones)); }
#define A_COMBINE(r) if (R > r) { \
    f##r = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xd[r * nb + b])), _mm256_cvtepi32_ps(i##r), f##r); \
    if (Q4) f##r = _mm256_fmadd_ps(mw, _mm256_set1_ps(xs_[r * nb + b]), f##r); }
#define A_STORE(r) if (R > r) store8(out + r * N, f##r, nc);
#define A_ALL(X) X(0) X(1) X(2) X(3)

template <int R, bool Q4>
static void avx2_tile(const int8_t* xq, const float* xd, const float* xs_, const uint8_t* pan, int64_t K, int64_t h,
                      float* out, int64_t N, int64_t nc) {
  constexpr int64_t B = Q4 ? Q4_BYTES : Q8_BYTES;
  const int64_t nb = K / QK;
  const __m256i ones = _mm256_set1_epi16(1), nib = _mm256_set1_epi8(15), flip = _mm256_set1_epi8(-128);
  A_ALL(A_ACC)
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = pan + b * B;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 16 * h)));
    __m256 mw = dw;  // Q8_0 has no m (A_COMBINE reads it for Q4_1 only)
    A_ALL(A_ZERO)
    if constexpr (Q4) {
      mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + 16 * h)));
      for (int64_t j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 64 + 64 * j + 32 * h));
        const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
        A_ALL(A_Q4)
      }
    } else {
      for (int64_t g = 0; g < 8; ++g) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 + 64 * g + 32 * h));
        const __m256i ws = _mm256_xor_si256(v, flip), aw = _mm256_abs_epi8(ws);
        A_ALL(A_Q8)
      }
    }
    A_ALL(A_COMBINE)
  }
  A_ALL(A_STORE)
}

// k8 on AVX2: per half kh of 16 k, the Q8_0 sign-transfer sums over its 4 groups, then D[kh] and M[kh] terms.
#define A_K8(r) if (R > r) { \
    const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(word(xq + r * K + b * QK + 4 * g)), ws); \
    i##r = _mm256_add_epi32(i##r, _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones)); }
#define A_K8_COMBINE(r) if (R > r) { \
    f##r = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xd[r * nb + b])), _mm256_cvtepi32_ps(i##r), f##r); \
    f##r = _mm256_fmadd_ps(mw, _mm256_set1_ps(x16[2 * (r * nb + b) + kh]), f##r); }

template <int R>
static void avx2_tile_k8(const int8_t* xq, const float* xd, const float* x16, const uint8_t* pan, int64_t K, int64_t h,
                         float* out, int64_t N, int64_t nc) {
  const int64_t nb = K / QK;
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(-128);
  A_ALL(A_ACC)
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = pan + b * K8_BYTES;
    const float* sc = reinterpret_cast<const float*>(rec);
    for (int64_t kh = 0; kh < 2; ++kh) {
      const __m256 dw = _mm256_loadu_ps(sc + PANEL * kh + 8 * h), mw = _mm256_loadu_ps(sc + 2 * PANEL + PANEL * kh + 8 * h);
      A_ALL(A_ZERO)
      for (int64_t g = 4 * kh; g < 4 * kh + 4; ++g) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + K8_SCALES + 64 * g + 32 * h));
        const __m256i ws = _mm256_xor_si256(v, flip), aw = _mm256_abs_epi8(ws);
        A_ALL(A_K8)
      }
      A_ALL(A_K8_COMBINE)
    }
  }
  A_ALL(A_STORE)
}

#define A_T8(r) case r: avx2_tile_k8<r>(X.q.data() + m * K, X.d.data() + m * nb, X.s16.data() + 2 * m * nb, pan, K, h, \
                                       o + m * N + 8 * h, N, nc - 8 * h); break;

static void avx2_panel_k8(const QRows& X, int64_t M, const uint8_t* pan, float* o, int64_t N, int64_t nc) {
  const int64_t K = X.K, nb = X.nb;
  for (int64_t h = 0; h < 2 && 8 * h < nc; ++h)
    for_each_tile<4>(M, [&](int64_t m, int64_t r) { switch (r) { A_T8(1) A_T8(2) A_T8(3) A_T8(4) default: break; } });
}

#define A_T(r) case r: avx2_tile<r, Q4>(X.q.data() + m * K, X.d.data() + m * nb, X.s.data() + m * nb, pan, K, h, \
                                     o + m * N + 8 * h, N, nc - 8 * h); break;

template <bool Q4>
static void avx2_panel(const QRows& X, int64_t M, const uint8_t* pan, float* o, int64_t N, int64_t nc) {
  const int64_t K = X.K, nb = X.nb;
  for (int64_t h = 0; h < 2 && 8 * h < nc; ++h)
    for_each_tile<4>(M, [&](int64_t m, int64_t r) { switch (r) { A_T(1) A_T(2) A_T(3) A_T(4) default: break; } });
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

static inline void zstore(float* o, __m512 v, int64_t nc) {
  if (nc >= PANEL) _mm512_storeu_ps(o, v);
  else _mm512_mask_storeu_ps(o, static_cast<__mmask16>((1u << nc) - 1), v);
}

// AVX-512 VNNI: rows [r0, r0 + R) x one panel (zmm: 16 lanes, one column each). Under 4 rows, two int32 sums per
// row so that consecutive vpdpbusd do not wait on each other; from 4 rows the rows' chains hide the latency, and one
// sum saves an add per block (the sums are integers: the same value either way).
#define V_ACC(r) __m512 f##r = _mm512_setzero_ps(); __m512i i##r, j##r;
#define V_INIT(r) if (R > r) { i##r = Q4 ? _mm512_setzero_si512() : _mm512_set1_epi32(-128 * xsum[r * nb + b]); \
    if (R < 4) j##r = _mm512_setzero_si512(); }
#define V_Q4(r) if (R > r) { \
    i##r = _mm512_dpbusd_epi32(i##r, lo, _mm512_set1_epi32(word(xq + r * K + b * QK + 8 * j))); \
    (R < 4 ? j##r : i##r) = _mm512_dpbusd_epi32(R < 4 ? j##r : i##r, hi, \
                                                _mm512_set1_epi32(word(xq + r * K + b * QK + 8 * j + 4))); }
#define V_Q8(r) if (R > r) { \
    i##r = _mm512_dpbusd_epi32(i##r, v0, _mm512_set1_epi32(word(xq + r * K + b * QK + 8 * g))); \
    (R < 4 ? j##r : i##r) = _mm512_dpbusd_epi32(R < 4 ? j##r : i##r, v1, \
                                                _mm512_set1_epi32(word(xq + r * K + b * QK + 8 * g + 4))); }
#define V_COMBINE(r) if (R > r) { \
    f##r = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xd[r * nb + b])), \
                           _mm512_cvtepi32_ps(R < 4 ? _mm512_add_epi32(i##r, j##r) : i##r), f##r); \
    if (Q4) f##r = _mm512_fmadd_ps(mw, _mm512_set1_ps(xs_[r * nb + b]), f##r); }
#define V_STORE(r) if (R > r) zstore(out + r * N, f##r, nc);
#define V_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

template <int R, bool Q4>
static void vnni_tile(const int8_t* xq, const float* xd, const float* xs_, const int32_t* xsum, const uint8_t* pan,
                      int64_t K, float* out, int64_t N, int64_t nc) {
  constexpr int64_t B = Q4 ? Q4_BYTES : Q8_BYTES;
  const int64_t nb = K / QK;
  const __m512i nib = _mm512_set1_epi8(15);
  V_ALL(V_ACC)
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = pan + b * B;
    if (R >= 4)  // compute-bound tiles: fetch two blocks ahead; 1-3 rows stream faster on the hardware prefetcher
      for (int64_t off = 0; off < B; off += 64) _mm_prefetch(reinterpret_cast<const char*>(rec + 2 * B + off), _MM_HINT_T0);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    __m512 mw = dw;  // Q8_0 has no m (V_COMBINE reads it for Q4_1 only)
    V_ALL(V_INIT)
    if constexpr (Q4) {
      mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
      for (int64_t j = 0; j < 4; ++j) {
        const __m512i v = _mm512_loadu_si512(rec + 64 + 64 * j);
        const __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        V_ALL(V_Q4)
      }
    } else {
      for (int64_t g = 0; g < 4; ++g) {
        const __m512i v0 = _mm512_loadu_si512(rec + 32 + 128 * g), v1 = _mm512_loadu_si512(rec + 96 + 128 * g);
        V_ALL(V_Q8)
      }
    }
    V_ALL(V_COMBINE)
  }
  V_ALL(V_STORE)
}

// k8 with VNNI: per half kh of 16 k, Q8_0's two dpbusd pairs (codes + 128, the sum started at -128 * the half's
// code sum), then the D[kh] and M[kh] terms in AVX2's order.
#define V_K8_INIT(r) if (R > r) i##r = _mm512_set1_epi32(-128 * x16sum[2 * (r * nb + b) + kh]);
#define V_K8(r) if (R > r) { \
    i##r = _mm512_dpbusd_epi32(i##r, v0, _mm512_set1_epi32(word(xq + r * K + b * QK + 8 * g))); \
    i##r = _mm512_dpbusd_epi32(i##r, v1, _mm512_set1_epi32(word(xq + r * K + b * QK + 8 * g + 4))); }
#define V_K8_COMBINE(r) if (R > r) { \
    f##r = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xd[r * nb + b])), _mm512_cvtepi32_ps(i##r), f##r); \
    f##r = _mm512_fmadd_ps(mw, _mm512_set1_ps(x16[2 * (r * nb + b) + kh]), f##r); }

template <int R>
static void vnni_tile_k8(const int8_t* xq, const float* xd, const float* x16, const int32_t* x16sum, const uint8_t* pan,
                         int64_t K, float* out, int64_t N, int64_t nc) {
  const int64_t nb = K / QK;
  V_ALL(V_ACC)
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = pan + b * K8_BYTES;
    const float* sc = reinterpret_cast<const float*>(rec);
    if (R >= 4)
      for (int64_t off = 0; off < K8_BYTES; off += 64) _mm_prefetch(reinterpret_cast<const char*>(rec + 2 * K8_BYTES + off), _MM_HINT_T0);
    for (int64_t kh = 0; kh < 2; ++kh) {
      const __m512 dw = _mm512_loadu_ps(sc + PANEL * kh), mw = _mm512_loadu_ps(sc + 2 * PANEL + PANEL * kh);
      V_ALL(V_K8_INIT)
      for (int64_t g = 2 * kh; g < 2 * kh + 2; ++g) {
        const __m512i v0 = _mm512_loadu_si512(rec + K8_SCALES + 128 * g), v1 = _mm512_loadu_si512(rec + K8_SCALES + 64 + 128 * g);
        V_ALL(V_K8)
      }
      V_ALL(V_K8_COMBINE)
    }
  }
  V_ALL(V_STORE)
}

#define V_T8(r) case r: vnni_tile_k8<r>(X.q.data() + m * K, X.d.data() + m * nb, X.s16.data() + 2 * m * nb, \
                                        X.sum16.data() + 2 * m * nb, pan, K, o + m * N, N, nc); break;

static void vnni_panel_k8(const QRows& X, int64_t M, const uint8_t* pan, float* o, int64_t N, int64_t nc) {
  const int64_t K = X.K, nb = X.nb;
  for_each_tile<8>(M, [&](int64_t m, int64_t r) {
    switch (r) { V_T8(1) V_T8(2) V_T8(3) V_T8(4) V_T8(5) V_T8(6) V_T8(7) V_T8(8) default: break; }
  });
}

#define V_T(r) case r: vnni_tile<r, Q4>(X.q.data() + m * K, X.d.data() + m * nb, X.s.data() + m * nb, \
                                        X.sum.data() + m * nb, pan, K, o + m * N, N, nc); break;

template <bool Q4>
static void vnni_panel(const QRows& X, int64_t M, const uint8_t* pan, float* o, int64_t N, int64_t nc) {
  const int64_t K = X.K, nb = X.nb;
  for_each_tile<8>(M, [&](int64_t m, int64_t r) {
    switch (r) { V_T(1) V_T(2) V_T(3) V_T(4) V_T(5) V_T(6) V_T(7) V_T(8) default: break; }
  });
}

#pragma GCC pop_options

// Panels [p0, p1) of one int8-ordered block matrix (pp: its first panel) into o [M, N].
void int8_range(const QRows& X, int64_t M, const uint8_t* pp, int64_t p0, int64_t p1, float* op, int64_t N, int fmt) {
  const bool q4 = fmt == 1;
  const int64_t stride = X.nb * rec_bytes(fmt);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* pan = pp + p * stride;
    const int64_t nc = std::min(PANEL, N - p * PANEL);
    float* o = op + p * PANEL;
    if (fmt == 2) { if (g_vnni) vnni_panel_k8(X, M, pan, o, N, nc); else avx2_panel_k8(X, M, pan, o, N, nc); }
    else if (g_vnni) { if (q4) vnni_panel<true>(X, M, pan, o, N, nc); else vnni_panel<false>(X, M, pan, o, N, nc); }
    else if (q4) avx2_panel<true>(X, M, pan, o, N, nc);
    else avx2_panel<false>(X, M, pan, o, N, nc);
  }
}

// Use VNNI where asked (with AVX-512) and present; returns whether it is used.
bool select_vnni(bool want) {
  g_vnni = want && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return g_vnni;
}

}  // namespace decodescope_int8

// q [N, K] codes (uint8 0..15 with m: Q4_1; int8 without: Q8_0), d and m [N, K/32] float16 -> int8 [ceil(N/16),
// K/32, bytes]: pack_blocks' records with the codes in the int8 kernel's order (above).
// k8: q [N, K] int8, d and m [N, K/16] float32 -> int8 [ceil(N/16), K/32, 768]: the scales as pack_blocks, the
// codes + 128 in Q8_0's order.
static torch::Tensor pack_k8_i8(const torch::Tensor& q_in, const torch::Tensor& d_in, const torch::Tensor& m_in) {
  using namespace decodescope_int8;
  TORCH_CHECK(q_in.dim() == 2 && q_in.size(1) % QK == 0 && q_in.scalar_type() == torch::kInt8,
              "pack_blocks_i8: k8 codes [N, K] int8, K a multiple of 32");
  const int64_t N = q_in.size(0), K = q_in.size(1), nb = K / QK, np = (N + PANEL - 1) / PANEL;
  TORCH_CHECK(d_in.dim() == 2 && d_in.size(0) == N && d_in.size(1) == 2 * nb && m_in.scalar_type() == torch::kFloat32 &&
              m_in.sizes() == d_in.sizes(), "pack_blocks_i8: k8 d and m [N, K/16] float32");
  const auto q = q_in.contiguous(), d = d_in.contiguous(), m = m_in.contiguous();
  auto P = torch::zeros({np, nb, K8_BYTES}, q.options().dtype(torch::kInt8));
  const int8_t* qp = q.data_ptr<int8_t>();
  const float* dp = d.data_ptr<float>();
  const float* mp = m.data_ptr<float>();
  uint8_t* out = reinterpret_cast<uint8_t*>(P.data_ptr<int8_t>());
  for (int64_t p = 0; p < np; ++p)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = out + (p * nb + b) * K8_BYTES;
      float* s = reinterpret_cast<float*>(rec);
      for (int64_t c = 0; c < PANEL; ++c) {
        const int64_t n = p * PANEL + c;
        for (int64_t k = 0; k < QK; ++k)  // a padding column holds the zero code (128) and D = M = 0
          rec[K8_SCALES + 64 * (k / 4) + 4 * c + k % 4] = static_cast<uint8_t>((n < N ? qp[n * K + b * QK + k] : 0) + 128);
        if (n >= N) continue;
        for (int64_t h = 0; h < 2; ++h) {
          s[PANEL * h + c] = dp[n * 2 * nb + 2 * b + h];
          s[2 * PANEL + PANEL * h + c] = mp[n * 2 * nb + 2 * b + h];
        }
      }
    }
  return P;
}

torch::Tensor pack_blocks_i8(const torch::Tensor& q_in, const torch::Tensor& d_in, const std::optional<torch::Tensor>& m_in) {
  using namespace decodescope_int8;
  if (d_in.scalar_type() == torch::kFloat32 && m_in.has_value()) return pack_k8_i8(q_in, d_in, *m_in);
  const bool q4 = m_in.has_value();
  TORCH_CHECK(q_in.dim() == 2 && q_in.size(1) % QK == 0 && q_in.scalar_type() == (q4 ? torch::kUInt8 : torch::kInt8),
              "pack_blocks_i8: codes [N, K] (uint8 with m, int8 without), K a multiple of 32");
  const int64_t N = q_in.size(0), K = q_in.size(1), nb = K / QK, np = (N + PANEL - 1) / PANEL;
  TORCH_CHECK(d_in.scalar_type() == torch::kHalf && d_in.dim() == 2 && d_in.size(0) == N && d_in.size(1) == nb,
              "pack_blocks_i8: d [N, K/32] float16");
  TORCH_CHECK(!q4 || (m_in->scalar_type() == torch::kHalf && m_in->sizes() == d_in.sizes()), "pack_blocks_i8: m like d");
  TORCH_CHECK(!q4 || q_in.numel() == 0 || q_in.max().item<uint8_t>() <= 15, "pack_blocks_i8: Q4_1 codes are 0..15");
  TORCH_CHECK(q4 || q_in.numel() == 0 || q_in.min().item<int8_t>() >= -127, "pack_blocks_i8: Q8_0 codes are -127..127");
  const auto q = q_in.contiguous(), d = d_in.contiguous();
  const auto m = q4 ? m_in->contiguous() : d;
  const int64_t B = q4 ? Q4_BYTES : Q8_BYTES;
  auto P = torch::zeros({np, nb, B}, q.options().dtype(torch::kInt8));
  const uint8_t* qp = static_cast<const uint8_t*>(q.data_ptr());
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
  const uint16_t* mp = reinterpret_cast<const uint16_t*>(m.data_ptr<at::Half>());
  uint8_t* out = reinterpret_cast<uint8_t*>(P.data_ptr<int8_t>());
  for (int64_t p = 0; p < np; ++p)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = out + (p * nb + b) * B;
      for (int64_t c = 0; c < PANEL; ++c) {
        const int64_t n = p * PANEL + c;
        const uint8_t* qs = qp + n * K + b * QK;
        if (!q4)  // Q8_0: code + 128 as uint8; a padding column holds the zero code (128)
          for (int64_t k = 0; k < QK; ++k)
            rec[32 + 64 * (k / 4) + 4 * c + k % 4] = static_cast<uint8_t>((n < N ? static_cast<int8_t>(qs[k]) : 0) + 128);
        if (n >= N) continue;  // padding columns: d = m = 0
        std::memcpy(rec + 2 * c, dp + n * nb + b, 2);
        if (q4) {
          std::memcpy(rec + 32 + 2 * c, mp + n * nb + b, 2);
          for (int64_t j = 0; j < 4; ++j)
            for (int64_t i = 0; i < 4; ++i)
              rec[64 + 64 * j + 4 * c + i] = (qs[8 * j + i] & 15) | (qs[8 * j + 4 + i] << 4);
        }
      }
    }
  return P;
}
