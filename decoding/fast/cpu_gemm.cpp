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
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <optional>

constexpr int64_t PANEL = 16;

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
  at::parallel_for(0, np, 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* panel = pp + p * K * PANEL;
      const int64_t n0 = p * PANEL, nc = std::min(PANEL, N - n0);
      int64_t m = 0;
      for (; m + 6 <= M; m += 6) tile<6>(xp + m * K, panel, K, op + m * N + n0, N, nc);
      const float* xr = xp + m * K;
      float* o = op + m * N + n0;
      switch (M - m) {
        case 5: tile<5>(xr, panel, K, o, N, nc); break;
        case 4: tile<4>(xr, panel, K, o, N, nc); break;
        case 3: tile<3>(xr, panel, K, o, N, nc); break;
        case 2: tile<2>(xr, panel, K, o, N, nc); break;
        case 1: tile<1>(xr, panel, K, o, N, nc); break;
        default: break;
      }
    }
  });
  if (bias.has_value()) out.add_(*bias);
  auto shape = x_in.sizes().vec();
  shape.back() = N;
  return out.view(shape);
}

// Registered as torch operators (not a pybind function): the profiler's traces name them
// decodescope::packed_linear, and FlopCounterMode / torch.compile reach them through the dispatcher.
TORCH_LIBRARY(decodescope, m) {
  m.def("pack_panels(Tensor w) -> Tensor");
  m.def("packed_linear(Tensor x, Tensor panels, int n, Tensor? bias=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(decodescope, CPU, m) {
  m.impl("pack_panels", &pack_panels);
  m.impl("packed_linear", &packed_linear);
}
