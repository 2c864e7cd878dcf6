// Skinny fp32 GEMM for CPU decoding: out[M, N] = x[M, K] @ W[N, K]^T for the 1..32 rows a decoding step
// multiplies by each weight (decoding/cpu_gemm.py says why and when it is used).
//
// W is stored once as panels of 16 output columns, P[N/16][K][16] (the last panel zero-padded), so that
// one panel is one sequential 64*K-byte stream from memory. A tile of R <= 6 rows x 16 columns keeps its
// 2R accumulators in registers across the whole K loop (6x16 is the classic AVX2 micro-kernel: 12
// accumulators, two weight vectors, one broadcast), and every further row tile re-reads the panel from
// L1/L2, not from memory: each weight is streamed once per call whatever M is.
//
// Every output element is one sequential FMA chain over k, whichever tile it falls in: a row's result does
// not depend on how many other rows share the call (bitwise), which MKL does not promise.
//
// Block panels (block_linear): a weight that is exactly de-quantised ggml Q4_1 / Q8_0 blocks (blocks.py) is
// stored as those blocks, 5 / 8.5 bits a weight instead of 32, in the same 16-column panels. Per panel and
// per 32-k block, one record: d[16] (float16), for Q4_1 m[16] (float16), then the codes, 16 columns per k:
// Q4_1 one byte per column for each pair of k (low nibble k, high nibble k + 1), Q8_0 one int8 per column.
// The panels of a matrix are one sequential stream. The kernel de-quantises w = d * q + m in registers (d * q
// is exact in fp32, so this is the fp32 weight bit for bit) and runs the very FMA chain of the fp32 kernel,
// so its results equal packed_linear's on the de-quantised weight bitwise, for every row count.
// k8 records (K-quants, Q5_1: blocks.py) hold D[2][16] and M[2][16] float32 (one scale and offset per 16 k, the
// halves of the 32-k block), then one int8 code per column and k; w = fma(D, q, M), bitwise gguf-py's value (D * q
// is exact where M is an offset; Q6_K's M is -0.0, and fma(D, q, -0.0) is the rounded product itself).
// The format of a record is its size (FMT: 0 Q8_0, 1 Q4_1, 2 k8).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

constexpr int64_t PANEL = 16;

// The int8 kernel (cpu_int8.cpp): rows quantised per block, int32 block sums, one fixed combining order.
namespace decodescope_int8 {
struct QRows {
  std::vector<int8_t> q;
  std::vector<float> d, s, s16;
  std::vector<int32_t> sum, sum16;
  int64_t K = 0, nb = 0;
};
QRows quantize_rows(const float* x, int64_t M, int64_t K);
void int8_range(const QRows& X, int64_t M, const uint8_t* pp, int64_t p0, int64_t p1, float* op, int64_t N, int fmt);
bool select_vnni(bool want);
}  // namespace decodescope_int8
torch::Tensor pack_blocks_i8(const torch::Tensor& q, const torch::Tensor& d, const std::optional<torch::Tensor>& m);

torch::Tensor pack_panels(const torch::Tensor& W) {  // W [N, K] float32 -> P [ceil(N/16), K, 16]
  TORCH_CHECK(W.dim() == 2 && W.scalar_type() == torch::kFloat32, "pack_panels: a 2D float32 weight");
  const int64_t N = W.size(0), K = W.size(1), np = (N + PANEL - 1) / PANEL;
  auto P = torch::zeros({np, K, PANEL}, W.options());
  for (int64_t p = 0; p < np; ++p) {
    const int64_t n0 = p * PANEL, n = std::min(PANEL, N - n0);
    P[p].narrow(1, 0, n).copy_(W.narrow(0, n0, n).t());
  }
  return P;
}

static inline void store(float* o, __m256 lo, __m256 hi, int64_t ncols) {
  if (ncols == PANEL) { _mm256_storeu_ps(o, lo); _mm256_storeu_ps(o + 8, hi); return; }
  alignas(32) float tmp[PANEL];
  _mm256_store_ps(tmp, lo); _mm256_store_ps(tmp + 8, hi);
  for (int64_t c = 0; c < ncols; ++c) o[c] = tmp[c];
}

constexpr int64_t QK = 32;                                      // ggml's block length along k
constexpr int64_t Q4_1_BYTES = 2 * PANEL * 2 + QK / 2 * PANEL;  // d, m, nibbles: 320
constexpr int64_t Q8_0_BYTES = PANEL * 2 + QK * PANEL;          // d, int8 codes: 544
constexpr int64_t K8_SCALES = 4 * PANEL * 4;                    // D[2][16], M[2][16] float32: 256
constexpr int64_t K8_BYTES = K8_SCALES + QK * PANEL;            // + int8 codes: 768
constexpr int64_t rec_bytes(int fmt) { return fmt == 1 ? Q4_1_BYTES : fmt == 2 ? K8_BYTES : Q8_0_BYTES; }
static int format_of(int64_t bytes) { return bytes == Q4_1_BYTES ? 1 : bytes == K8_BYTES ? 2 : 0; }

// q [N, K] codes (uint8 0..15 for Q4_1, int8 for Q8_0), d and m [N, K/32] float16 -> [ceil(N/16), K/32, bytes]
// k8: q [N, K] int8, d and m [N, K/16] float32 -> [ceil(N/16), K/32, 768]
static torch::Tensor pack_k8(const torch::Tensor& q_in, const torch::Tensor& d_in, const torch::Tensor& m_in) {
  TORCH_CHECK(q_in.dim() == 2 && q_in.size(1) % QK == 0 && q_in.scalar_type() == torch::kInt8,
              "pack_blocks: k8 codes [N, K] int8, K a multiple of 32");
  const int64_t N = q_in.size(0), K = q_in.size(1), nb = K / QK, np = (N + PANEL - 1) / PANEL;
  TORCH_CHECK(d_in.dim() == 2 && d_in.size(0) == N && d_in.size(1) == 2 * nb && m_in.scalar_type() == torch::kFloat32 &&
              m_in.sizes() == d_in.sizes(), "pack_blocks: k8 d and m [N, K/16] float32");
  const auto q = q_in.contiguous(), d = d_in.contiguous(), m = m_in.contiguous();
  auto P = torch::zeros({np, nb, K8_BYTES}, q.options().dtype(torch::kUInt8));
  const int8_t* qp = q.data_ptr<int8_t>();
  const float* dp = d.data_ptr<float>();
  const float* mp = m.data_ptr<float>();
  uint8_t* out = P.data_ptr<uint8_t>();
  for (int64_t p = 0; p < np; ++p)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = out + (p * nb + b) * K8_BYTES;
      float* s = reinterpret_cast<float*>(rec);
      for (int64_t c = 0; c < PANEL && p * PANEL + c < N; ++c) {
        const int64_t n = p * PANEL + c;
        for (int64_t h = 0; h < 2; ++h) {
          s[PANEL * h + c] = dp[n * 2 * nb + 2 * b + h];
          s[2 * PANEL + PANEL * h + c] = mp[n * 2 * nb + 2 * b + h];
        }
        for (int64_t t = 0; t < QK; ++t) rec[K8_SCALES + t * PANEL + c] = static_cast<uint8_t>(qp[n * K + b * QK + t]);
      }
    }
  return P;
}

torch::Tensor pack_blocks(const torch::Tensor& q_in, const torch::Tensor& d_in, const std::optional<torch::Tensor>& m_in) {
  if (d_in.scalar_type() == torch::kFloat32 && m_in.has_value()) return pack_k8(q_in, d_in, *m_in);
  const bool q4 = m_in.has_value();
  TORCH_CHECK(q_in.dim() == 2 && q_in.size(1) % QK == 0 && q_in.scalar_type() == (q4 ? torch::kUInt8 : torch::kInt8),
              "pack_blocks: codes [N, K] (uint8 with m, int8 without), K a multiple of 32");
  const int64_t N = q_in.size(0), K = q_in.size(1), nb = K / QK, np = (N + PANEL - 1) / PANEL;
  TORCH_CHECK(d_in.scalar_type() == torch::kHalf && d_in.dim() == 2 && d_in.size(0) == N && d_in.size(1) == nb,
              "pack_blocks: d [N, K/32] float16");
  TORCH_CHECK(!q4 || (m_in->scalar_type() == torch::kHalf && m_in->sizes() == d_in.sizes()), "pack_blocks: m like d");
  TORCH_CHECK(!q4 || q_in.numel() == 0 || q_in.max().item<uint8_t>() <= 15, "pack_blocks: Q4_1 codes are 0..15");
  const auto q = q_in.contiguous(), d = d_in.contiguous();
  const auto m = q4 ? m_in->contiguous() : d;
  const int64_t B = q4 ? Q4_1_BYTES : Q8_0_BYTES;
  auto P = torch::zeros({np, nb, B}, q.options().dtype(torch::kUInt8));
  const uint8_t* qp = static_cast<const uint8_t*>(q.data_ptr());
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
  const uint16_t* mp = reinterpret_cast<const uint16_t*>(m.data_ptr<at::Half>());
  uint8_t* out = P.data_ptr<uint8_t>();
  for (int64_t p = 0; p < np; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = out + (p * nb + b) * B;
      for (int64_t c = 0; c < PANEL && p * PANEL + c < N; ++c) {
        const int64_t n = p * PANEL + c;
        std::memcpy(rec + 2 * c, dp + n * nb + b, 2);
        const uint8_t* qs = qp + n * K + b * QK;
        if (q4) {
          std::memcpy(rec + 2 * PANEL + 2 * c, mp + n * nb + b, 2);
          for (int64_t t = 0; t < QK / 2; ++t) rec[4 * PANEL + t * PANEL + c] = (qs[2 * t] & 15) | (qs[2 * t + 1] << 4);
        } else {
          for (int64_t t = 0; t < QK; ++t) rec[2 * PANEL + t * PANEL + c] = qs[t];
        }
      }
    }
  }
  return P;
}

// Named locals, not an array: g++ 12 spilled an indexed __m256 array to the stack on every k (3x slower).
#define ACC(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
#define FMA(r) if (R > r) { const __m256 b = _mm256_broadcast_ss(x + r * K + k); \
    a##r##0 = _mm256_fmadd_ps(b, w0, a##r##0); a##r##1 = _mm256_fmadd_ps(b, w1, a##r##1); }
#define STORE(r) if (R > r) store(out + r * N, a##r##0, a##r##1, ncols);

template <int R>
static void tile(const float* __restrict x, const float* __restrict panel, int64_t K, float* __restrict out,
                 int64_t N, int64_t ncols) {
  ACC(0) ACC(1) ACC(2) ACC(3) ACC(4) ACC(5)
  for (int64_t k = 0; k < K; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(panel + (k + 16) * PANEL), _MM_HINT_T0);
    const __m256 w0 = _mm256_loadu_ps(panel + k * PANEL), w1 = _mm256_loadu_ps(panel + k * PANEL + 8);
    FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5)
  }
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

static inline __m256 half8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
static inline __m256i bytes8(const uint8_t* p, bool sign) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return sign ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}

// The fp32 weights of k = b*32 .. b*32+31 of one panel (16 columns), handed two vectors per k to `use`:
// exactly the values pack_panels would hold (w = d * q + m; d * q is exact in fp32, so fma == mul + add).
template <int FMT, typename F>
static inline void dequant_block(const uint8_t* __restrict rec, F&& use) {
  if constexpr (FMT == 2) {  // k8: per half h, w = fma(D[h], q, M[h])
    const float* s = reinterpret_cast<const float*>(rec);
    for (int64_t h = 0; h < 2; ++h) {
      const __m256 d0 = _mm256_loadu_ps(s + PANEL * h), d1 = _mm256_loadu_ps(s + PANEL * h + 8);
      const __m256 m0 = _mm256_loadu_ps(s + 2 * PANEL + PANEL * h), m1 = _mm256_loadu_ps(s + 2 * PANEL + PANEL * h + 8);
      for (int64_t t = QK / 2 * h; t < QK / 2 * (h + 1); ++t)
        use(t, _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(bytes8(rec + K8_SCALES + t * PANEL, true)), m0),
            _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(bytes8(rec + K8_SCALES + t * PANEL + 8, true)), m1));
    }
    return;
  }
  const __m256 d0 = half8(rec), d1 = half8(rec + 16);
  if constexpr (FMT == 1) {
    const __m256 m0 = half8(rec + 32), m1 = half8(rec + 48);
    const __m256i mask = _mm256_set1_epi32(15);
    const uint8_t* qs = rec + 4 * PANEL;
    for (int64_t t = 0; t < QK / 2; ++t) {
      const __m256i c0 = bytes8(qs + t * PANEL, false), c1 = bytes8(qs + t * PANEL + 8, false);
      use(2 * t, _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(_mm256_and_si256(c0, mask)), m0),
          _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(_mm256_and_si256(c1, mask)), m1));
      use(2 * t + 1, _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(_mm256_srli_epi32(c0, 4)), m0),
          _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(_mm256_srli_epi32(c1, 4)), m1));
    }
  } else {
    const uint8_t* qs = rec + 2 * PANEL;
    for (int64_t t = 0; t < QK; ++t)
      use(t, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(bytes8(qs + t * PANEL, true))),
          _mm256_mul_ps(d1, _mm256_cvtepi32_ps(bytes8(qs + t * PANEL + 8, true))));
  }
}

// tile<R> with the weights de-quantised in registers: the same chain of FMAs over k, per output.
template <int R, int FMT>
static void block_tile(const float* __restrict x, const uint8_t* __restrict panel, int64_t K, float* __restrict out,
                       int64_t N, int64_t ncols) {
  constexpr int64_t B = rec_bytes(FMT);
  ACC(0) ACC(1) ACC(2) ACC(3) ACC(4) ACC(5)
  for (int64_t b = 0; b < K / QK; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(panel + (b + 2) * B), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(panel + (b + 2) * B + 256), _MM_HINT_T0);
    const float* xb = x + b * QK;
    dequant_block<FMT>(panel + b * B, [&](int64_t k, __m256 w0, __m256 w1) {
      const float* x = xb;
      FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5)
    });
  }
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

template <int FMT>
static void dequant_panel(const uint8_t* __restrict panel, int64_t K, float* __restrict w) {
  constexpr int64_t B = rec_bytes(FMT);
  for (int64_t b = 0; b < K / QK; ++b)
    dequant_block<FMT>(panel + b * B, [&](int64_t k, __m256 w0, __m256 w1) {
      _mm256_storeu_ps(w + (b * QK + k) * PANEL, w0); _mm256_storeu_ps(w + (b * QK + k) * PANEL + 8, w1);
    });
}

#define T6(r) case r: tile<r>(xr, panel, K, orow, N, nc); break;

// All row tiles of one panel: ceil(M / 6) tiles of balanced sizes (M = 7: 4 + 3, not 6 + 1, whose 1-row tile
// waits on the FMA latency). Every output is one FMA chain over k, whichever tile holds its row.
static void panel_rows(const float* xp, const float* panel, int64_t M, int64_t K, float* o, int64_t N, int64_t nc) {
  const int64_t tiles = (M + 5) / 6;
  for (int64_t t = 0, m = 0; t < tiles; ++t) {
    const int64_t r = M / tiles + (t < M % tiles ? 1 : 0);
    const float* xr = xp + m * K;
    float* orow = o + m * N;
    switch (r) { T6(1) T6(2) T6(3) T6(4) T6(5) T6(6) default: break; }
    m += r;
  }
}

// One or two rows: two panels at once, so that 8 chains, not 4, hide the FMA latency (a 1-row tile of one
// panel waits on it). Each output's chain is unchanged.
#define FMA2(r) if (R > r) { const __m256 b = _mm256_broadcast_ss(x + r * K + k); \
    a##r##0 = _mm256_fmadd_ps(b, w0, a##r##0); a##r##1 = _mm256_fmadd_ps(b, w1, a##r##1); \
    c##r##0 = _mm256_fmadd_ps(b, v0, c##r##0); c##r##1 = _mm256_fmadd_ps(b, v1, c##r##1); }

template <int R, int FMT>
static void block_tile2(const float* __restrict x, const uint8_t* __restrict pan, int64_t K, float* __restrict out,
                        int64_t N, int64_t nc0, int64_t nc1) {
  constexpr int64_t B = rec_bytes(FMT);
  const int64_t nb = K / QK;
  const __m256i mask = _mm256_set1_epi32(15);
  ACC(0) ACC(1)
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* r0 = pan + b * B;
    const uint8_t* r1 = pan + (nb + b) * B;
    if constexpr (FMT == 2) {  // k8: both panels' halves, w = fma(D[h], q, M[h])
      const float* s0 = reinterpret_cast<const float*>(r0);
      const float* s1 = reinterpret_cast<const float*>(r1);
      for (int64_t h = 0; h < 2; ++h) {
        const __m256 d0 = _mm256_loadu_ps(s0 + PANEL * h), d1 = _mm256_loadu_ps(s0 + PANEL * h + 8);
        const __m256 e0 = _mm256_loadu_ps(s1 + PANEL * h), e1 = _mm256_loadu_ps(s1 + PANEL * h + 8);
        const __m256 m0 = _mm256_loadu_ps(s0 + 2 * PANEL + PANEL * h), m1 = _mm256_loadu_ps(s0 + 2 * PANEL + PANEL * h + 8);
        const __m256 n0 = _mm256_loadu_ps(s1 + 2 * PANEL + PANEL * h), n1 = _mm256_loadu_ps(s1 + 2 * PANEL + PANEL * h + 8);
        for (int64_t t = QK / 2 * h; t < QK / 2 * (h + 1); ++t) {
          const int64_t k = b * QK + t;
          const uint8_t* q0 = r0 + K8_SCALES + t * PANEL;
          const uint8_t* q1 = r1 + K8_SCALES + t * PANEL;
          const __m256 w0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(bytes8(q0, true)), m0);
          const __m256 w1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(bytes8(q0 + 8, true)), m1);
          const __m256 v0 = _mm256_fmadd_ps(e0, _mm256_cvtepi32_ps(bytes8(q1, true)), n0);
          const __m256 v1 = _mm256_fmadd_ps(e1, _mm256_cvtepi32_ps(bytes8(q1 + 8, true)), n1);
          FMA2(0) FMA2(1)
        }
      }
      continue;
    }
    const __m256 d0 = half8(r0), d1 = half8(r0 + 16), e0 = half8(r1), e1 = half8(r1 + 16);
    if constexpr (FMT == 1) {
      const __m256 m0 = half8(r0 + 32), m1 = half8(r0 + 48), n0 = half8(r1 + 32), n1 = half8(r1 + 48);
      for (int64_t t = 0; t < QK / 2; ++t) {
        const uint8_t* q0 = r0 + 4 * PANEL + t * PANEL;
        const uint8_t* q1 = r1 + 4 * PANEL + t * PANEL;
        const __m256i g0 = bytes8(q0, false), g1 = bytes8(q0 + 8, false), h0 = bytes8(q1, false), h1 = bytes8(q1 + 8, false);
        {
          const int64_t k = b * QK + 2 * t;
          const __m256 w0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(_mm256_and_si256(g0, mask)), m0);
          const __m256 w1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(_mm256_and_si256(g1, mask)), m1);
          const __m256 v0 = _mm256_fmadd_ps(e0, _mm256_cvtepi32_ps(_mm256_and_si256(h0, mask)), n0);
          const __m256 v1 = _mm256_fmadd_ps(e1, _mm256_cvtepi32_ps(_mm256_and_si256(h1, mask)), n1);
          FMA2(0) FMA2(1)
        }
        {
          const int64_t k = b * QK + 2 * t + 1;
          const __m256 w0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(_mm256_srli_epi32(g0, 4)), m0);
          const __m256 w1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(_mm256_srli_epi32(g1, 4)), m1);
          const __m256 v0 = _mm256_fmadd_ps(e0, _mm256_cvtepi32_ps(_mm256_srli_epi32(h0, 4)), n0);
          const __m256 v1 = _mm256_fmadd_ps(e1, _mm256_cvtepi32_ps(_mm256_srli_epi32(h1, 4)), n1);
          FMA2(0) FMA2(1)
        }
      }
    } else {
      for (int64_t t = 0; t < QK; ++t) {
        const int64_t k = b * QK + t;
        const uint8_t* q0 = r0 + 2 * PANEL + t * PANEL;
        const uint8_t* q1 = r1 + 2 * PANEL + t * PANEL;
        const __m256 w0 = _mm256_mul_ps(d0, _mm256_cvtepi32_ps(bytes8(q0, true)));
        const __m256 w1 = _mm256_mul_ps(d1, _mm256_cvtepi32_ps(bytes8(q0 + 8, true)));
        const __m256 v0 = _mm256_mul_ps(e0, _mm256_cvtepi32_ps(bytes8(q1, true)));
        const __m256 v1 = _mm256_mul_ps(e1, _mm256_cvtepi32_ps(bytes8(q1 + 8, true)));
        FMA2(0) FMA2(1)
      }
    }
  }
  const int64_t ncols = nc0;
  STORE(0) STORE(1)
  if (R > 0) store(out + PANEL, c00, c01, nc1);
  if (R > 1) store(out + N + PANEL, c10, c11, nc1);
}

// Up to 6 rows: one tile, de-quantising in registers. More: de-quantise the panel once into an fp32 panel
// in L1/L2 and run the fp32 tiles on it (the same values, the same chains), not once per row tile.
template <int FMT>
static void block_panel_rows(const float* xp, const uint8_t* panel, int64_t M, int64_t K, float* o, int64_t N,
                             int64_t nc, float* scratch) {
  switch (M) {
    case 6: block_tile<6, FMT>(xp, panel, K, o, N, nc); return;
    case 5: block_tile<5, FMT>(xp, panel, K, o, N, nc); return;
    case 4: block_tile<4, FMT>(xp, panel, K, o, N, nc); return;
    case 3: block_tile<3, FMT>(xp, panel, K, o, N, nc); return;
    case 2: block_tile<2, FMT>(xp, panel, K, o, N, nc); return;
    case 1: block_tile<1, FMT>(xp, panel, K, o, N, nc); return;
    default: dequant_panel<FMT>(panel, K, scratch); panel_rows(xp, scratch, M, K, o, N, nc);
  }
}

// AVX-512 (run-time choice: select_isa): one 16-column panel is one zmm, so a k costs half the instructions,
// and with 32 registers two panels are interleaved for 1..6 rows (the FMA latency is then hidden even for one
// row), block panels are de-quantised once in registers for up to 16 rows, and fp32 tiles take up to 16 rows
// (more rows: balanced tiles, e.g. 24 = 12 + 12, not 16 + 8, nor 12 + 1 for 13, whose 1-row tile waited on
// the FMA latency: a 13-row pass over the default model's Linears cost 1.7x a 12-row one). The same chains
// over k, lane by lane, so the results equal the AVX2 kernels' bitwise (packed_linear's and block_linear's).
static bool g_avx512 = false;

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

static inline __m512 zhalf16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline __m512i zcodes(const uint8_t* p, bool sign) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return sign ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}
static inline void zstore(float* o, __m512 v, int64_t nc) {
  if (nc == PANEL) _mm512_storeu_ps(o, v);
  else _mm512_mask_storeu_ps(o, static_cast<__mmask16>((1u << nc) - 1), v);
}

#define ZACC(r) __m512 z##r##0 = _mm512_setzero_ps(), z##r##1 = _mm512_setzero_ps();
#define ZFMA(r) if (R > r) { const __m512 xb = _mm512_set1_ps(x[r * K + k]); \
    z##r##0 = _mm512_fmadd_ps(xb, w0, z##r##0); if (NP > 1) z##r##1 = _mm512_fmadd_ps(xb, w1, z##r##1); }
#define ZSTORE(r) if (R > r) { zstore(out + r * N, z##r##0, nc0); if (NP > 1) zstore(out + r * N + PANEL, z##r##1, nc1); }
#define ZFMAS ZFMA(0) ZFMA(1) ZFMA(2) ZFMA(3) ZFMA(4) ZFMA(5)

// R rows x NP (1 or 2) consecutive block panels, de-quantised in registers.
template <int R, int NP, int FMT>
static void zblock_tile(const float* __restrict x, const uint8_t* __restrict pan, int64_t K, float* __restrict out,
                        int64_t N, int64_t nc0, int64_t nc1) {
  constexpr int64_t B = rec_bytes(FMT);
  const int64_t nb = K / QK;
  const uint8_t* pan1 = pan + nb * B;
  const __m512i mask = _mm512_set1_epi32(15);
  ZACC(0) ZACC(1) ZACC(2) ZACC(3) ZACC(4) ZACC(5)
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* r0 = pan + b * B;
    const uint8_t* r1 = pan1 + b * B;
    for (int64_t off = 0; off < B; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(r0 + 2 * B + off), _MM_HINT_T0);
      if (NP > 1) _mm_prefetch(reinterpret_cast<const char*>(r1 + 2 * B + off), _MM_HINT_T0);
    }
    if constexpr (FMT == 2) {  // k8: per half h, w = fma(D[h], q, M[h])
      const float* s0 = reinterpret_cast<const float*>(r0);
      const float* s1 = reinterpret_cast<const float*>(r1);
      for (int64_t h = 0; h < 2; ++h) {
        const __m512 e0 = _mm512_loadu_ps(s0 + PANEL * h), e1 = NP > 1 ? _mm512_loadu_ps(s1 + PANEL * h) : e0;
        const __m512 n0 = _mm512_loadu_ps(s0 + 2 * PANEL + PANEL * h);
        const __m512 n1 = NP > 1 ? _mm512_loadu_ps(s1 + 2 * PANEL + PANEL * h) : n0;
        for (int64_t t = QK / 2 * h; t < QK / 2 * (h + 1); ++t) {
          const int64_t k = b * QK + t;
          const __m512 w0 = _mm512_fmadd_ps(e0, _mm512_cvtepi32_ps(zcodes(r0 + K8_SCALES + t * PANEL, true)), n0);
          const __m512 w1 = NP > 1 ? _mm512_fmadd_ps(e1, _mm512_cvtepi32_ps(zcodes(r1 + K8_SCALES + t * PANEL, true)), n1)
                                   : w0;
          ZFMAS
        }
      }
      continue;
    }
    const __m512 d0 = zhalf16(r0), d1 = NP > 1 ? zhalf16(r1) : d0;
    if constexpr (FMT == 1) {
      const __m512 m0 = zhalf16(r0 + 2 * PANEL), m1 = NP > 1 ? zhalf16(r1 + 2 * PANEL) : m0;
      for (int64_t t = 0; t < QK / 2; ++t) {
        const __m512i c0 = zcodes(r0 + 4 * PANEL + t * PANEL, false);
        const __m512i c1 = NP > 1 ? zcodes(r1 + 4 * PANEL + t * PANEL, false) : c0;
        {
          const int64_t k = b * QK + 2 * t;
          const __m512 w0 = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(_mm512_and_si512(c0, mask)), m0);
          const __m512 w1 = NP > 1 ? _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(_mm512_and_si512(c1, mask)), m1) : w0;
          ZFMAS
        }
        {
          const int64_t k = b * QK + 2 * t + 1;
          const __m512 w0 = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(_mm512_srli_epi32(c0, 4)), m0);
          const __m512 w1 = NP > 1 ? _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(_mm512_srli_epi32(c1, 4)), m1) : w0;
          ZFMAS
        }
      }
    } else {
      for (int64_t t = 0; t < QK; ++t) {
        const int64_t k = b * QK + t;
        const __m512 w0 = _mm512_mul_ps(d0, _mm512_cvtepi32_ps(zcodes(r0 + 2 * PANEL + t * PANEL, true)));
        const __m512 w1 = NP > 1 ? _mm512_mul_ps(d1, _mm512_cvtepi32_ps(zcodes(r1 + 2 * PANEL + t * PANEL, true))) : w0;
        ZFMAS
      }
    }
  }
  ZSTORE(0) ZSTORE(1) ZSTORE(2) ZSTORE(3) ZSTORE(4) ZSTORE(5)
}

#define YACC(r) __m512 y##r = _mm512_setzero_ps();
#define YFMA(r) if (R > r) y##r = _mm512_fmadd_ps(_mm512_set1_ps(x[r * K + k]), w, y##r);
#define YFMAS YFMA(0) YFMA(1) YFMA(2) YFMA(3) YFMA(4) YFMA(5) YFMA(6) YFMA(7) YFMA(8) YFMA(9) YFMA(10) YFMA(11) \
    YFMA(12) YFMA(13) YFMA(14) YFMA(15)
#define YSTORE(r) if (R > r) zstore(out + r * N, y##r, nc);

// 7..16 rows x one block panel, de-quantised in registers once for all of them (16 accumulators + 5 registers).
template <int R, int FMT>
static void zblock_tile16(const float* __restrict x, const uint8_t* __restrict pan, int64_t K, float* __restrict out,
                          int64_t N, int64_t nc) {
  constexpr int64_t B = rec_bytes(FMT);
  const __m512i mask = _mm512_set1_epi32(15);
  YACC(0) YACC(1) YACC(2) YACC(3) YACC(4) YACC(5) YACC(6) YACC(7) YACC(8) YACC(9) YACC(10) YACC(11)
  YACC(12) YACC(13) YACC(14) YACC(15)
  for (int64_t b = 0; b < K / QK; ++b) {
    const uint8_t* r0 = pan + b * B;
    if constexpr (FMT == 2) {  // k8: per half h, w = fma(D[h], q, M[h])
      const float* s0 = reinterpret_cast<const float*>(r0);
      for (int64_t h = 0; h < 2; ++h) {
        const __m512 e0 = _mm512_loadu_ps(s0 + PANEL * h), n0 = _mm512_loadu_ps(s0 + 2 * PANEL + PANEL * h);
        for (int64_t t = QK / 2 * h; t < QK / 2 * (h + 1); ++t) {
          const int64_t k = b * QK + t;
          const __m512 w = _mm512_fmadd_ps(e0, _mm512_cvtepi32_ps(zcodes(r0 + K8_SCALES + t * PANEL, true)), n0);
          YFMAS
        }
      }
      continue;
    }
    const __m512 d0 = zhalf16(r0);
    if constexpr (FMT == 1) {
      const __m512 m0 = zhalf16(r0 + 2 * PANEL);
      for (int64_t t = 0; t < QK / 2; ++t) {
        const __m512i c0 = zcodes(r0 + 4 * PANEL + t * PANEL, false);
        { const int64_t k = b * QK + 2 * t;
          const __m512 w = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(_mm512_and_si512(c0, mask)), m0); YFMAS }
        { const int64_t k = b * QK + 2 * t + 1;
          const __m512 w = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(_mm512_srli_epi32(c0, 4)), m0); YFMAS }
      }
    } else {
      for (int64_t t = 0; t < QK; ++t) {
        const int64_t k = b * QK + t;
        const __m512 w = _mm512_mul_ps(d0, _mm512_cvtepi32_ps(zcodes(r0 + 2 * PANEL + t * PANEL, true)));
        YFMAS
      }
    }
  }
  YSTORE(0) YSTORE(1) YSTORE(2) YSTORE(3) YSTORE(4) YSTORE(5) YSTORE(6) YSTORE(7) YSTORE(8) YSTORE(9) YSTORE(10)
  YSTORE(11) YSTORE(12) YSTORE(13) YSTORE(14) YSTORE(15)
}

// R <= 6 rows x NP (1 or 2) consecutive fp32 panels: packed_linear's tile with 16-wide vectors.
template <int R, int NP>
static void zf32_tile(const float* __restrict x, const float* __restrict pan, int64_t K, float* __restrict out,
                      int64_t N, int64_t nc0, int64_t nc1) {
  const float* pan1 = pan + K * PANEL;
  ZACC(0) ZACC(1) ZACC(2) ZACC(3) ZACC(4) ZACC(5)
  for (int64_t k = 0; k < K; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(pan + (k + 16) * PANEL), _MM_HINT_T0);
    if (NP > 1) _mm_prefetch(reinterpret_cast<const char*>(pan1 + (k + 16) * PANEL), _MM_HINT_T0);
    const __m512 w0 = _mm512_loadu_ps(pan + k * PANEL), w1 = NP > 1 ? _mm512_loadu_ps(pan1 + k * PANEL) : w0;
    ZFMAS
  }
  ZSTORE(0) ZSTORE(1) ZSTORE(2) ZSTORE(3) ZSTORE(4) ZSTORE(5)
}

static void zpanel_rows(const float* xp, const float* panel, int64_t M, int64_t K, float* o, int64_t N, int64_t nc);

#define ZF32(r) case r: if (NP > 1) zf32_tile<r, 2>(xp, pan, K, o, N, nc0, nc1); \
                        else zf32_tile<r, 1>(xp, pan, K, o, N, nc0, 0); break;

// packed_linear's panels [p0, p1) with AVX-512: pairs of panels for up to 6 rows, 12-row tiles beyond.
static void zf32_panels(const float* xp, const float* pp, int64_t p0, int64_t p1, int64_t M, int64_t K, float* op,
                        int64_t N) {
  for (int64_t p = p0; p < p1;) {
    const float* pan = pp + p * K * PANEL;
    const int64_t nc0 = std::min(PANEL, N - p * PANEL);
    const int NP = M <= 6 && p + 1 < p1 ? 2 : 1;
    const int64_t nc1 = NP > 1 ? std::min(PANEL, N - (p + 1) * PANEL) : 0;
    float* o = op + p * PANEL;
    if (M > 6) zpanel_rows(xp, pan, M, K, o, N, nc0);
    else switch (M) { ZF32(1) ZF32(2) ZF32(3) ZF32(4) ZF32(5) ZF32(6) default: break; }
    p += NP;
  }
}

#define FACC(r) __m512 f##r = _mm512_setzero_ps();
#define FFMA(r) if (R > r) f##r = _mm512_fmadd_ps(_mm512_set1_ps(x[r * K + k]), w, f##r);
#define FSTORE(r) if (R > r) zstore(out + r * N, f##r, nc);

// R <= 16 rows x one fp32 panel (from L1/L2): the fp32 tile with 16-wide vectors.
template <int R>
static void ztile(const float* __restrict x, const float* __restrict panel, int64_t K, float* __restrict out,
                  int64_t N, int64_t nc) {
  FACC(0) FACC(1) FACC(2) FACC(3) FACC(4) FACC(5) FACC(6) FACC(7) FACC(8) FACC(9) FACC(10) FACC(11)
  FACC(12) FACC(13) FACC(14) FACC(15)
  for (int64_t k = 0; k < K; ++k) {
    const __m512 w = _mm512_loadu_ps(panel + k * PANEL);
    FFMA(0) FFMA(1) FFMA(2) FFMA(3) FFMA(4) FFMA(5) FFMA(6) FFMA(7) FFMA(8) FFMA(9) FFMA(10) FFMA(11)
    FFMA(12) FFMA(13) FFMA(14) FFMA(15)
  }
  FSTORE(0) FSTORE(1) FSTORE(2) FSTORE(3) FSTORE(4) FSTORE(5) FSTORE(6) FSTORE(7) FSTORE(8) FSTORE(9) FSTORE(10)
  FSTORE(11) FSTORE(12) FSTORE(13) FSTORE(14) FSTORE(15)
}

#define ZT(r) case r: ztile<r>(xr, panel, K, orow, N, nc); break;

// All rows of one fp32 panel: ceil(M / 12) tiles of balanced sizes (M = 13: 7 + 6), each with enough chains to
// hide the FMA latency, where fixed 12-row tiles left a latency-bound remainder (13 = 12 + 1). 12, not 16: with
// the panel in memory, not in registers, 16-row tiles measured slower (32 rows: 16 + 16 vs 11 + 11 + 10).
static void zpanel_rows(const float* xp, const float* panel, int64_t M, int64_t K, float* o, int64_t N, int64_t nc) {
  const int64_t tiles = (M + 11) / 12;
  for (int64_t t = 0, m = 0; t < tiles; ++t) {
    const int64_t r = M / tiles + (t < M % tiles ? 1 : 0);
    const float* xr = xp + m * K;
    float* orow = o + m * N;
    switch (r) {
      ZT(1) ZT(2) ZT(3) ZT(4) ZT(5) ZT(6) ZT(7) ZT(8) ZT(9) ZT(10) ZT(11) ZT(12) ZT(13) ZT(14) ZT(15) ZT(16)
      default: break;
    }
    m += r;
  }
}

template <int NP, int FMT>
static void zblock_rows(const float* x, const uint8_t* pan, int64_t M, int64_t K, float* o, int64_t N,
                        int64_t nc0, int64_t nc1) {
  switch (M) {
    case 6: zblock_tile<6, NP, FMT>(x, pan, K, o, N, nc0, nc1); break;
    case 5: zblock_tile<5, NP, FMT>(x, pan, K, o, N, nc0, nc1); break;
    case 4: zblock_tile<4, NP, FMT>(x, pan, K, o, N, nc0, nc1); break;
    case 3: zblock_tile<3, NP, FMT>(x, pan, K, o, N, nc0, nc1); break;
    case 2: zblock_tile<2, NP, FMT>(x, pan, K, o, N, nc0, nc1); break;
    case 1: zblock_tile<1, NP, FMT>(x, pan, K, o, N, nc0, nc1); break;
    default: break;
  }
}

#define ZB16(r) case r: zblock_tile16<r, FMT>(xp, pan, K, o, N, nc0); break;
#define ZB(r) case r: zblock_tile16<r, FMT>(x, pan, K, o, N, nc0); break;

// Panels [p0, p1) of a block matrix: pairs of panels de-quantised in registers for up to 6 rows, one panel for
// 7..16 rows; more rows in balanced tiles of <= 16 (M = 24: 12 + 12), each de-quantising the panel again from L1:
// measured faster than de-quantising it once into an fp32 panel and running fp32 tiles on it (24 rows: 40 vs
// 47 ms over the default model's Linears), and than fixed 16-row tiles, whose remainder waits on FMA latency.
template <int FMT>
static void zblock_panels(const float* xp, const uint8_t* pp, int64_t p0, int64_t p1, int64_t M, int64_t K,
                          float* op, int64_t N) {
  constexpr int64_t B = rec_bytes(FMT);
  const int64_t stride = K / QK * B;
  for (int64_t p = p0; p < p1;) {
    const int64_t nc0 = std::min(PANEL, N - p * PANEL);
    if (M > 6 && M <= 16) {
      const uint8_t* pan = pp + p * stride;
      float* o = op + p * PANEL;
      switch (M) { ZB16(7) ZB16(8) ZB16(9) ZB16(10) ZB16(11) ZB16(12) ZB16(13) ZB16(14) ZB16(15) ZB16(16) default: break; }
      p += 1;
    } else if (M > 6) {  // balanced tiles of <= 16 rows, each de-quantising the panel (from L1) in registers
      const uint8_t* pan = pp + p * stride;
      const int64_t tiles = (M + 15) / 16;
      for (int64_t t = 0, m = 0; t < tiles; ++t) {
        const int64_t r = M / tiles + (t < M % tiles ? 1 : 0);
        const float* x = xp + m * K;
        float* o = op + p * PANEL + m * N;
        switch (r) { ZB(8) ZB(9) ZB(10) ZB(11) ZB(12) ZB(13) ZB(14) ZB(15) ZB(16) default: break; }
        m += r;
      }
      p += 1;
    } else if (p + 1 < p1) {
      zblock_rows<2, FMT>(xp, pp + p * stride, M, K, op + p * PANEL, N, nc0, std::min(PANEL, N - (p + 1) * PANEL));
      p += 2;
    } else {
      zblock_rows<1, FMT>(xp, pp + p * stride, M, K, op + p * PANEL, N, nc0, 0);
      p += 1;
    }
  }
}

#pragma GCC pop_options

// "AVX512" (taken only where this CPU and its OS support it) or anything else (AVX2); returns the one in use.
std::string select_isa(const std::string& isa) {
  g_avx512 = isa == "AVX512" && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  decodescope_int8::select_vnni(g_avx512);  // the int8 kernel: VNNI with AVX-512 where the CPU has it, else AVX2
  return g_avx512 ? "AVX512" : "AVX2";
}

// The instruction set the int8 kernel runs with: "AVX512-VNNI" or "AVX2".
std::string int8_isa() {
  return decodescope_int8::select_vnni(g_avx512) ? "AVX512-VNNI" : "AVX2";
}

// fp32 panels [p0, p1) of one matrix (pp: its first panel) into the output columns p*16.. of o [M, N].
static void f32_range(const float* xp, const float* pp, int64_t p0, int64_t p1, int64_t M, int64_t K, float* op,
                      int64_t N) {
  if (g_avx512) return zf32_panels(xp, pp, p0, p1, M, K, op, N);
  for (int64_t p = p0; p < p1; ++p)
    panel_rows(xp, pp + p * K * PANEL, M, K, op + p * PANEL, N, std::min(PANEL, N - p * PANEL));
}

// Block panels [p0, p1) of one matrix (pp: its first panel) into o [M, N]; scratch: one aligned fp32 panel
// where M > 6.
static void block_range(const float* xp, const uint8_t* pp, int64_t p0, int64_t p1, int64_t M, int64_t K, float* op,
                        int64_t N, int fmt, float* scratch) {
  const int64_t B = rec_bytes(fmt);
  if (g_avx512) {
    if (fmt == 1) zblock_panels<1>(xp, pp, p0, p1, M, K, op, N);
    else if (fmt == 2) zblock_panels<2>(xp, pp, p0, p1, M, K, op, N);
    else zblock_panels<0>(xp, pp, p0, p1, M, K, op, N);
    return;
  }
  int64_t p = p0;
  for (; M <= 2 && p + 1 < p1; p += 2) {
    const uint8_t* panel = pp + p * (K / QK) * B;
    const int64_t nc0 = std::min(PANEL, N - p * PANEL), nc1 = std::min(PANEL, N - (p + 1) * PANEL);
    float* o = op + p * PANEL;
    if (M == 1) {
      if (fmt == 1) block_tile2<1, 1>(xp, panel, K, o, N, nc0, nc1);
      else if (fmt == 2) block_tile2<1, 2>(xp, panel, K, o, N, nc0, nc1);
      else block_tile2<1, 0>(xp, panel, K, o, N, nc0, nc1);
    } else {
      if (fmt == 1) block_tile2<2, 1>(xp, panel, K, o, N, nc0, nc1);
      else if (fmt == 2) block_tile2<2, 2>(xp, panel, K, o, N, nc0, nc1);
      else block_tile2<2, 0>(xp, panel, K, o, N, nc0, nc1);
    }
  }
  for (; p < p1; ++p) {
    const uint8_t* panel = pp + p * (K / QK) * B;
    const int64_t nc = std::min(PANEL, N - p * PANEL);
    if (fmt == 1) block_panel_rows<1>(xp, panel, M, K, op + p * PANEL, N, nc, scratch);
    else if (fmt == 2) block_panel_rows<2>(xp, panel, M, K, op + p * PANEL, N, nc, scratch);
    else block_panel_rows<0>(xp, panel, M, K, op + p * PANEL, N, nc, scratch);
  }
}

// One 64-byte aligned fp32 panel per thread for the AVX2 block kernel at M > 6 (loads from an unaligned panel
// would span cache lines); null otherwise.
struct Scratch {
  std::unique_ptr<float[]> buf;
  float* p = nullptr;
  Scratch(int64_t M, int64_t K) {
    if (M <= 6) return;
    buf.reset(new float[K * PANEL + 16]);
    p = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.get()) + 63) & ~uintptr_t(63));
  }
};

static torch::Tensor finish(torch::Tensor out, const torch::Tensor& x_in, int64_t N, const std::optional<torch::Tensor>& bias) {
  if (bias.has_value()) out.add_(*bias);
  auto shape = x_in.sizes().vec();
  shape.back() = N;
  return out.view(shape);
}

// x [..., K] (any leading shape) -> [..., N]; + bias when given. The reshape, bias and view are done here, not
// in Python: a decoding step makes ~40 of these calls, and each Python tensor op costs microseconds.
torch::Tensor packed_linear(const torch::Tensor& x_in, const torch::Tensor& P, int64_t N,
                            const std::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x_in.scalar_type() == torch::kFloat32 && x_in.dim() >= 1, "packed_linear: a float32 x");
  const int64_t K = x_in.size(-1);
  TORCH_CHECK(P.dim() == 3 && P.size(1) == K && P.size(2) == PANEL && P.size(0) * PANEL >= N,
              "packed_linear: panels of x's width");
  const auto x = x_in.reshape({-1, K}).contiguous();
  const int64_t M = x.size(0), np = P.size(0);
  auto out = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* pp = P.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, np, 4, [&](int64_t p0, int64_t p1) { f32_range(xp, pp, p0, p1, M, K, op, N); });
  return finish(out, x_in, N, bias);
}

static bool is_block_panels(const torch::Tensor& P, int64_t K) {
  return P.dim() == 3 && P.scalar_type() == torch::kUInt8 && P.is_contiguous() && P.size(1) * QK == K &&
         (P.size(2) == Q4_1_BYTES || P.size(2) == Q8_0_BYTES || P.size(2) == K8_BYTES);
}

// pack_blocks_i8's panels: the same records, int8 dtype (the codes in the int8 kernel's order).
static bool is_int8_panels(const torch::Tensor& P, int64_t K) {
  return P.dim() == 3 && P.scalar_type() == torch::kInt8 && P.is_contiguous() && P.size(1) * QK == K &&
         (P.size(2) == Q4_1_BYTES || P.size(2) == Q8_0_BYTES || P.size(2) == K8_BYTES);
}

// block_linear on int8-ordered panels: x quantised once per call (per row, so a row's codes do not depend on
// the others), then the int8 kernel over the panels.
static torch::Tensor int8_linear(const torch::Tensor& x_in, const torch::Tensor& P, int64_t N,
                                 const std::optional<torch::Tensor>& bias) {
  const int64_t K = x_in.size(-1);
  const int fmt = format_of(P.size(2));
  const auto x = x_in.reshape({-1, K}).contiguous();
  const int64_t M = x.size(0), np = P.size(0);
  auto out = torch::empty({M, N}, x.options());
  const auto X = decodescope_int8::quantize_rows(x.data_ptr<float>(), M, K);
  const uint8_t* pp = reinterpret_cast<const uint8_t*>(P.data_ptr<int8_t>());
  float* op = out.data_ptr<float>();
  at::parallel_for(0, np, 4, [&](int64_t p0, int64_t p1) { decodescope_int8::int8_range(X, M, pp, p0, p1, op, N, fmt); });
  return finish(out, x_in, N, bias);
}

// packed_linear on block panels (pack_blocks); the record size tells Q4_1, Q8_0 and k8 apart.
torch::Tensor block_linear(const torch::Tensor& x_in, const torch::Tensor& P, int64_t N,
                           const std::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x_in.scalar_type() == torch::kFloat32 && x_in.dim() >= 1, "block_linear: a float32 x");
  const int64_t K = x_in.size(-1);
  if (is_int8_panels(P, K) && P.size(0) * PANEL >= N) return int8_linear(x_in, P, N, bias);
  TORCH_CHECK(is_block_panels(P, K) && P.size(0) * PANEL >= N, "block_linear: block panels of x's width");
  const int fmt = format_of(P.size(2));
  const auto x = x_in.reshape({-1, K}).contiguous();
  const int64_t M = x.size(0), np = P.size(0);
  auto out = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const uint8_t* pp = P.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, np, 4, [&](int64_t p0, int64_t p1) {
    Scratch s(g_avx512 ? 0 : M, K);  // the AVX-512 block tiles de-quantise in registers only
    block_range(xp, pp, p0, p1, M, K, op, N, fmt, s.p);
  });
  return finish(out, x_in, N, bias);
}

// Several Linears of the same input in one call (a layer's q/k/v, or gate/up): P is their panels (block or fp32)
// concatenated along the panel axis, each matrix padded to whole panels, ns their output widths; returns one
// tensor per matrix, [..., ns[j]]. Every output is the FMA chain it has in its own matrix's call, so each result
// equals block_linear's / packed_linear's bitwise; one call instead of several saves the dispatch and a stream
// that restarts per matrix.
std::vector<torch::Tensor> fused_linear(const torch::Tensor& x_in, const torch::Tensor& P, at::IntArrayRef ns,
                                        const c10::List<std::optional<torch::Tensor>>& biases) {
  TORCH_CHECK(x_in.scalar_type() == torch::kFloat32 && x_in.dim() >= 1, "fused_linear: a float32 x");
  TORCH_CHECK(!ns.empty() && (biases.size() == 0 || biases.size() == ns.size()),
              "fused_linear: one width per matrix, and no biases or one (or None) per matrix");
  const int64_t K = x_in.size(-1), J = static_cast<int64_t>(ns.size());
  std::vector<int64_t> start(J + 1, 0);
  for (int64_t j = 0; j < J; ++j) {
    TORCH_CHECK(ns[j] > 0, "fused_linear: widths must be positive");
    start[j + 1] = start[j] + (ns[j] + PANEL - 1) / PANEL;
  }
  const bool int8 = P.scalar_type() == torch::kInt8;
  const bool blocks = P.scalar_type() == torch::kUInt8 || int8;
  TORCH_CHECK(int8 ? is_int8_panels(P, K) : blocks ? is_block_panels(P, K)
                     : P.scalar_type() == torch::kFloat32 && P.is_contiguous() && P.dim() == 3 && P.size(1) == K &&
                       P.size(2) == PANEL,
              "fused_linear: block or fp32 panels of x's width");
  TORCH_CHECK(P.size(0) == start[J], "fused_linear: the panels hold exactly the matrices of widths ns");
  const int fmt = blocks ? format_of(P.size(2)) : 0;
  const int64_t stride = blocks ? P.size(1) * P.size(2) : K * PANEL;  // elements per panel
  const auto x = x_in.reshape({-1, K}).contiguous();
  const int64_t M = x.size(0);
  std::vector<torch::Tensor> outs;
  std::vector<float*> ops;
  for (int64_t j = 0; j < J; ++j) {
    outs.push_back(torch::empty({M, ns[j]}, x.options()));
    ops.push_back(outs.back().data_ptr<float>());
  }
  const float* xp = x.data_ptr<float>();
  if (int8) {  // one quantisation of x for every matrix
    const auto X = decodescope_int8::quantize_rows(xp, M, K);
    const uint8_t* pp = reinterpret_cast<const uint8_t*>(P.data_ptr<int8_t>());
    at::parallel_for(0, start[J], 4, [&](int64_t p0, int64_t p1) {
      for (int64_t j = 0; j < J; ++j) {
        const int64_t lo = std::max(p0, start[j]) - start[j], hi = std::min(p1, start[j + 1]) - start[j];
        if (lo < hi) decodescope_int8::int8_range(X, M, pp + start[j] * stride, lo, hi, ops[j], ns[j], fmt);
      }
    });
  } else
  at::parallel_for(0, start[J], 4, [&](int64_t p0, int64_t p1) {
    Scratch s(blocks && !g_avx512 ? M : 0, K);
    for (int64_t j = 0; j < J; ++j) {
      const int64_t lo = std::max(p0, start[j]) - start[j], hi = std::min(p1, start[j + 1]) - start[j];
      if (lo >= hi) continue;
      if (blocks) block_range(xp, P.data_ptr<uint8_t>() + start[j] * stride, lo, hi, M, K, ops[j], ns[j], fmt, s.p);
      else f32_range(xp, P.data_ptr<float>() + start[j] * stride, lo, hi, M, K, ops[j], ns[j]);
    }
  });
  for (int64_t j = 0; j < J; ++j)
    outs[j] = finish(outs[j], x_in, ns[j], biases.size() ? biases.get(j) : std::optional<torch::Tensor>());
  return outs;
}

// Registered as torch operators (not a pybind function): the profiler's traces name them
// decodescope::packed_linear, and FlopCounterMode / torch.compile reach them through the dispatcher.
TORCH_LIBRARY(decodescope, m) {
  m.def("pack_panels(Tensor w) -> Tensor");
  m.def("packed_linear(Tensor x, Tensor panels, int n, Tensor? bias=None) -> Tensor");
  m.def("pack_blocks(Tensor q, Tensor d, Tensor? m=None) -> Tensor");
  m.def("block_linear(Tensor x, Tensor panels, int n, Tensor? bias=None) -> Tensor");
  m.def("fused_linear(Tensor x, Tensor panels, int[] ns, Tensor?[] biases) -> Tensor[]");
  m.def("pack_blocks_i8(Tensor q, Tensor d, Tensor? m=None) -> Tensor");
  m.def("select_isa(str isa) -> str", &select_isa);
  m.def("int8_isa() -> str", &int8_isa);  // no tensor to dispatch on: one kernel for all
}

TORCH_LIBRARY_IMPL(decodescope, CPU, m) {
  m.impl("pack_panels", &pack_panels);
  m.impl("packed_linear", &packed_linear);
  m.impl("pack_blocks", &pack_blocks);
  m.impl("pack_blocks_i8", &pack_blocks_i8);
  m.impl("block_linear", &block_linear);
  m.impl("fused_linear", &fused_linear);
}
