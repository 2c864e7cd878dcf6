// A whole decoding step of a Llama-shaped decoder (Llama, Qwen2, Mistral) on CPU in one call (decoding/fast/cpu_step.py says why and
// when it is used): per layer RMSNorm, the fused q/k/v kernel call, rotary embedding, the KV write, attention
// over the cache with the engine's additive tree mask, o_proj, the residual, RMSNorm, the fused gate/up call,
// SiLU x up, down_proj, the residual; then the final RMSNorm. The Linears are the packed kernel's own ops
// (called through the dispatcher, so the profiler still names them); everything between them is plain loops
// here instead of ~40 Python-dispatched tensor ops per layer.
//
// Values: RMSNorm and rotary are computed as transformers' Llama code computes them, one rounding per
// operation in its order (no FMA contraction in this file); the variance's sum and the attention's dot
// products and softmax sum in another order than ATen's kernels (differences of an ulp or so, as between
// MKL and the packed kernel). The engine's exactness tests compare the tokens with HF greedy.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <vector>

#pragma GCC optimize("fp-contract=off")

namespace {

using OptT = std::optional<torch::Tensor>;

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& P, int64_t N) {
  static auto block = c10::Dispatcher::singleton().findSchemaOrThrow("decodescope::block_linear", "")
      .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, int64_t, const OptT&)>();
  static auto packed = c10::Dispatcher::singleton().findSchemaOrThrow("decodescope::packed_linear", "")
      .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, int64_t, const OptT&)>();
  return P.scalar_type() == torch::kUInt8 || P.scalar_type() == torch::kInt8 ? block.call(x, P, N, std::nullopt)
                                                                             : packed.call(x, P, N, std::nullopt);
}

std::vector<torch::Tensor> fused(const torch::Tensor& x, const torch::Tensor& P, std::vector<int64_t> ns,
                                 const c10::List<OptT>& biases = c10::List<OptT>()) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("decodescope::fused_linear", "")
      .typed<std::vector<torch::Tensor>(const torch::Tensor&, const torch::Tensor&, c10::ArrayRef<int64_t>,
                                        const c10::List<OptT>&)>();
  return op.call(x, P, ns, biases);
}

// transformers' LlamaRMSNorm: w * (x * rsqrt(mean(x^2) + eps)), each product rounded to float32.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, float eps) {
  const int64_t M = x.size(0), H = x.size(1);
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t r = 0; r < M; ++r) {
    const float* xr = xp + r * H;
    double ss = 0.0;
    for (int64_t i = 0; i < H; ++i) ss += static_cast<double>(xr[i] * xr[i]);
    const float var = static_cast<float>(ss / static_cast<double>(H));
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < H; ++i) {
      const float t = xr[i] * inv;
      op[r * H + i] = wp[i] * t;
    }
  }
  return out;
}

// transformers' apply_rotary_pos_emb on rows x [M, heads * D] in place: x * cos + rotate_half(x) * sin.
void rotary(torch::Tensor& x, int64_t heads, int64_t D, const float* cos, const float* sin) {
  const int64_t M = x.size(0), half = D / 2;
  float* xp = x.data_ptr<float>();
  std::vector<float> tmp(D);
  for (int64_t r = 0; r < M; ++r) {
    const float* c = cos + r * D;
    const float* s = sin + r * D;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = xp + (r * heads + h) * D;
      for (int64_t i = 0; i < D; ++i) {
        const float rot = i < half ? -v[i + half] : v[i - half];
        const float a = v[i] * c[i];
        const float b = rot * s[i];
        tmp[i] = a + b;
      }
      std::copy(tmp.begin(), tmp.end(), v);
    }
  }
}

// e^x for 8 lanes (Cephes' expf: x = n ln2 + r, a degree-5 polynomial in r, times 2^n; ~1 ulp like the
// Sleef exp ATen's vectorised kernels use); exactly 0 below -87.3, where float32 e^x is denormal or 0, so a
// masked attention column (score ~ -3.4e38) contributes exactly nothing.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 dead = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), lo);
  __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(dead, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// e^x over n floats in place (8 lanes at a time, the tail through a padded lane block).
void exp_inplace(float* p, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(p + j, exp8(_mm256_loadu_ps(p + j)));
  if (j < n) {
    alignas(32) float t[8] = {0};
    std::copy(p + j, p + n, t);
    _mm256_store_ps(t, exp8(_mm256_load_ps(t)));
    std::copy(t, t + (n - j), p + j);
  }
}

inline float dot(const float* a, const float* b, int64_t D) {
  int64_t i = 0;
  float out = 0.0f;
  if (D >= 8) {
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= D; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    out = _mm_cvtss_f32(s);
  }
  for (; i < D; ++i) out += a[i] * b[i];
  return out;
}

// dot() summed in dot8's order, lane by lane ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)), D a multiple of 8:
// a key's score then does not depend on whether it falls in a group of 8 keys or in the tail, i.e. on how many
// rows the step has (the int8 mode's batch invariance; the fp32 mode keeps dot()).
inline float dot_as8(const float* a, const float* b, int64_t D) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < D; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc, acc), _mm256_hadd_ps(acc, acc));
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

// q . K[t] for the 8 rows K[0..7] (row stride D, D a multiple of 8) in one vector: 8 lanes of partial sums per
// row, then one transpose-and-add (hadd) instead of a horizontal sum per row.
inline __m256 dot8(const float* q, const float* K, int64_t D) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t i = 0; i < D; i += 8) {
    const __m256 v = _mm256_loadu_ps(q + i);
    a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + i), a0);
    a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + D + i), a1);
    a2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + 2 * D + i), a2);
    a3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + 3 * D + i), a3);
    a4 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + 4 * D + i), a4);
    a5 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + 5 * D + i), a5);
    a6 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + 6 * D + i), a6);
    a7 = _mm256_fmadd_ps(v, _mm256_loadu_ps(K + 7 * D + i), a7);
  }
  const __m256 s03 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 s47 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  return _mm256_add_ps(_mm256_permute2f128_ps(s03, s47, 0x20), _mm256_permute2f128_ps(s03, s47, 0x31));
}

// One (row, head): p = softmax(q K^T * scale + mask) over kvlen keys, o = p V. D = 8 * NV (a template, so that
// the output's NV vectors stay in registers across the keys), or NV = 0: any D, accumulated in memory.
template <int NV>
void attend(const float* qv, const float* Kg, const float* Vg, const float* mr, int64_t kvlen, int64_t D,
            float scale, float* p, float* acc, float* o, bool invariant) {
  int64_t j = 0;
  if (D % 8 == 0) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (; j + 8 <= kvlen; j += 8)
      _mm256_storeu_ps(p + j, _mm256_add_ps(_mm256_mul_ps(dot8(qv, Kg + j * D, D), sc), _mm256_loadu_ps(mr + j)));
  }
  if (invariant && D % 8 == 0)
    for (; j < kvlen; ++j) p[j] = dot_as8(qv, Kg + j * D, D) * scale + mr[j];
  for (; j < kvlen; ++j) p[j] = dot(qv, Kg + j * D, D) * scale + mr[j];
  float top = -INFINITY;
  for (j = 0; j < kvlen; ++j) top = std::max(top, p[j]);
  for (j = 0; j < kvlen; ++j) p[j] -= top;
  exp_inplace(p, kvlen);
  float sum = 0.0f;
  if constexpr (NV > 0) {
    __m256 a[NV];
    for (int v = 0; v < NV; ++v) a[v] = _mm256_setzero_ps();
    for (j = 0; j < kvlen; ++j) {
      if (p[j] == 0.0f) continue;  // a masked column
      sum += p[j];
      const __m256 w = _mm256_set1_ps(p[j]);
      const float* vj = Vg + j * 8 * NV;
      for (int v = 0; v < NV; ++v) a[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 8 * v), a[v]);
    }
    const __m256 s = _mm256_set1_ps(sum);
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(o + 8 * v, _mm256_div_ps(a[v], s));
  } else {
    std::fill(acc, acc + D, 0.0f);
    for (j = 0; j < kvlen; ++j) {
      if (p[j] == 0.0f) continue;
      sum += p[j];
      const float* vj = Vg + j * D;
      for (int64_t i = 0; i < D; ++i) acc[i] += p[j] * vj[i];
    }
    for (int64_t i = 0; i < D; ++i) o[i] = acc[i] / sum;
  }
}

// softmax(q k^T * scale + mask) v per (row, head); K/V [kv_heads, cap, D] of one layer, q [M, heads * D].
torch::Tensor attention(const torch::Tensor& q, const float* K, const float* V, int64_t cap, const float* mask,
                        int64_t kvlen, int64_t heads, int64_t kv_heads, int64_t D, float scale, bool invariant) {
  const int64_t M = q.size(0), group = heads / kv_heads;
  auto out = torch::empty({M, heads * D}, q.options());
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, M * heads, 1, [&](int64_t b, int64_t e) {
    std::vector<float> p(kvlen), acc(D);
    for (int64_t job = b; job < e; ++job) {
      const int64_t r = job / heads, h = job % heads, g = h / group;
      const float* args_q = qp + (r * heads + h) * D;
      const float* Kg = K + g * cap * D;
      const float* Vg = V + g * cap * D;
      float* o = op + (r * heads + h) * D;
      if (D == 64) attend<8>(args_q, Kg, Vg, mask + r * kvlen, kvlen, D, scale, p.data(), acc.data(), o, invariant);
      else if (D == 128) attend<16>(args_q, Kg, Vg, mask + r * kvlen, kvlen, D, scale, p.data(), acc.data(), o, invariant);
      else attend<0>(args_q, Kg, Vg, mask + r * kvlen, kvlen, D, scale, p.data(), acc.data(), o, invariant);
    }
  });
  return out;
}

// g = silu(g) * u, SiLU written as ATen's CPU kernel writes it: g / (1 + e^-g).
void silu_mul(float* g, const float* u, int64_t n) {
  std::vector<float> e(n);
  for (int64_t i = 0; i < n; ++i) e[i] = -g[i];
  exp_inplace(e.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float s = g[i] / (1.0f + e[i]);
    g[i] = s * u[i];
  }
}

}  // namespace

// x [M, H] (the step's input embeddings), cos / sin [M, D] (the model's rotary embedding at the rows'
// positions), store [L, 2, kv_heads, cap, D] (every layer's keys and values; the step's rows are written at
// slots kvlen - M .. kvlen - 1), mask [M, kvlen] additive (0 or a large negative), weights: per layer
// (input norm, q/k/v panels, o panels, post-attention norm, gate/up panels, down panels), then the final norm;
// dims (heads, kv_heads, D, intermediate); qkv_bias: empty, or the q/k/v biases of every layer (Qwen2).
// Returns the final-normed hidden states, then the hidden states
// transformers would return at the indices `want` (0: the embeddings, k: after layer k, L: the final-normed).
std::vector<torch::Tensor> llama_step(const torch::Tensor& x_in, const torch::Tensor& cos_in,
                                      const torch::Tensor& sin_in, const torch::Tensor& store,
                                      const torch::Tensor& mask_in, std::vector<torch::Tensor> weights,
                                      std::vector<torch::Tensor> qkv_bias, at::IntArrayRef dims, double eps_d,
                                      double scale_d, at::IntArrayRef want) {
  TORCH_CHECK(dims.size() == 4, "llama_step: dims are (heads, kv_heads, head_dim, intermediate)");
  const int64_t heads = dims[0], kv_heads = dims[1], D = dims[2], I = dims[3];
  TORCH_CHECK(weights.size() % 6 == 1, "llama_step: 6 weights per layer, then the final norm");
  const int64_t L = static_cast<int64_t>(weights.size()) / 6;
  TORCH_CHECK(qkv_bias.empty() || static_cast<int64_t>(qkv_bias.size()) == 3 * L,
              "llama_step: no q/k/v biases, or 3 per layer");
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == torch::kFloat32, "llama_step: x [rows, hidden] float32");
  const int64_t M = x_in.size(0), H = x_in.size(1);
  TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && D % 2 == 0, "llama_step: head shapes");
  TORCH_CHECK(store.dim() == 5 && store.size(0) == L && store.size(1) == 2 && store.size(2) == kv_heads &&
              store.size(4) == D && store.is_contiguous() && store.scalar_type() == torch::kFloat32,
              "llama_step: store [layers, 2, kv_heads, capacity, head_dim] float32");
  const auto mask = mask_in.reshape({M, -1}).contiguous();
  const int64_t kvlen = mask.size(1), cap = store.size(3), slot0 = kvlen - M;
  TORCH_CHECK(slot0 >= 0 && kvlen <= cap && mask.scalar_type() == torch::kFloat32, "llama_step: mask [rows, kv]");
  const auto cs = cos_in.reshape({M, D}).contiguous(), sn = sin_in.reshape({M, D}).contiguous();
  const float eps = static_cast<float>(eps_d), scale = static_cast<float>(scale_d);
  for (auto w : want) TORCH_CHECK(0 <= w && w <= L, "llama_step: hidden-state indices in 0..layers");

  std::vector<torch::Tensor> outs(1 + want.size());
  auto keep = [&](int64_t idx, const torch::Tensor& h) {
    for (size_t i = 0; i < want.size(); ++i)
      if (want[i] == idx) outs[1 + i] = h.clone();
  };
  // int8 panels (the int8 kernel, batch-invariant by construction): attention sums every key's score in one order
  const bool invariant = weights[1].scalar_type() == torch::kInt8;
  auto h = x_in.contiguous().clone();  // the residual stream
  keep(0, h);
  float* sp = store.data_ptr<float>();
  const int64_t layer_stride = 2 * kv_heads * cap * D, half_stride = kv_heads * cap * D;
  for (int64_t l = 0; l < L; ++l) {
    const torch::Tensor* w = weights.data() + 6 * l;
    c10::List<OptT> bias;
    if (!qkv_bias.empty())
      for (int64_t j = 0; j < 3; ++j) bias.push_back(qkv_bias[3 * l + j]);
    auto qkv = fused(rms_norm(h, w[0], eps), w[1], {heads * D, kv_heads * D, kv_heads * D}, bias);
    rotary(qkv[0], heads, D, cs.data_ptr<float>(), sn.data_ptr<float>());
    rotary(qkv[1], kv_heads, D, cs.data_ptr<float>(), sn.data_ptr<float>());
    float* Kl = sp + l * layer_stride;
    float* Vl = Kl + half_stride;
    const float* kp = qkv[1].data_ptr<float>();
    const float* vp = qkv[2].data_ptr<float>();
    for (int64_t r = 0; r < M; ++r)
      for (int64_t g = 0; g < kv_heads; ++g) {
        std::copy(kp + (r * kv_heads + g) * D, kp + (r * kv_heads + g + 1) * D, Kl + (g * cap + slot0 + r) * D);
        std::copy(vp + (r * kv_heads + g) * D, vp + (r * kv_heads + g + 1) * D, Vl + (g * cap + slot0 + r) * D);
      }
    auto a = attention(qkv[0], Kl, Vl, cap, mask.data_ptr<float>(), kvlen, heads, kv_heads, D, scale, invariant);
    h.add_(linear(a, w[2], H));
    auto gu = fused(rms_norm(h, w[3], eps), w[4], {I, I});
    float* gp = gu[0].data_ptr<float>();
    const float* up = gu[1].data_ptr<float>();
    silu_mul(gp, up, M * I);
    h.add_(linear(gu[0], w[5], H));
    if (l + 1 < L) keep(l + 1, h);
  }
  outs[0] = rms_norm(h, weights.back(), eps);
  keep(L, outs[0]);
  return outs;
}

TORCH_LIBRARY_FRAGMENT(decodescope, m) {
  m.def("llama_step(Tensor x, Tensor cos, Tensor sin, Tensor(a!) store, Tensor mask, Tensor[] weights, "
        "Tensor[] qkv_bias, int[] dims, float eps, float scale, int[] want) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(decodescope, CPU, m) { m.impl("llama_step", &llama_step); }
