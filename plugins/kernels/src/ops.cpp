#include <cmath>
#include <numbers>

#include "halo/kernels/kernels.h"
#include "simd.h"

namespace halo::kernels {

void rmsnorm(const float* x, const float* w, size_t n, float eps, float* out) {
  const float ss = detail::simd().dot(x, x, n);
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
}

void rope_neox(float* x, size_t num_heads, size_t head_dim, const float* cos_half,
               const float* sin_half) {
  const size_t half = head_dim / 2;
  for (size_t h = 0; h < num_heads; ++h) {
    float* v = x + h * head_dim;
    for (size_t i = 0; i < half; ++i) {
      const float a = v[i];
      const float b = v[i + half];
      v[i] = a * cos_half[i] - b * sin_half[i];
      v[i + half] = b * cos_half[i] + a * sin_half[i];
    }
  }
}

void rope_inv_freq(const RopeParams& p, size_t head_dim, double* inv_freq) {
  const size_t half = head_dim / 2;
  for (size_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0 / std::pow(p.theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  if (p.scaling == RopeScaling::Linear) {
    for (size_t i = 0; i < half; ++i) inv_freq[i] /= p.factor;
  } else if (p.scaling == RopeScaling::Llama3) {
    // transformers.modeling_rope_utils._compute_llama3_parameters
    const double old_len = p.original_max_position;
    const double low_freq_wavelen = old_len / p.low_freq_factor;
    const double high_freq_wavelen = old_len / p.high_freq_factor;
    for (size_t i = 0; i < half; ++i) {
      const double f = inv_freq[i];
      const double wavelen = 2.0 * std::numbers::pi / f;
      double g = wavelen > low_freq_wavelen ? f / p.factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const double smooth =
            (old_len / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        g = (1.0 - smooth) * g / p.factor + smooth * g;
      }
      inv_freq[i] = g;
    }
  }
}

void rope_cos_sin(double position, const double* inv_freq, size_t half, float* cos_half,
                  float* sin_half) {
  for (size_t i = 0; i < half; ++i) {
    const double a = position * inv_freq[i];
    cos_half[i] = static_cast<float>(std::cos(a));
    sin_half[i] = static_cast<float>(std::sin(a));
  }
}

void silu_mul(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n) {
  const float c = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(c * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void paged_attention(const float* q, size_t group, const PagedKV& kv, int32_t kv_head,
                     const int32_t* block_table, int32_t n_ctx, float scale, float* scores,
                     float* out) {
  const detail::SimdTable& simd = detail::simd();
  const size_t hd = static_cast<size_t>(kv.head_dim);
  const size_t bs = static_cast<size_t>(kv.block_size);
  const size_t token_stride = static_cast<size_t>(kv.kv_heads) * hd;
  const size_t block_stride = bs * token_stride;
  const size_t head_off = static_cast<size_t>(kv_head) * hd;
  const size_t n = static_cast<size_t>(n_ctx);
  for (size_t g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* og = out + g * hd;
    float mx = -INFINITY;
    for (size_t j = 0; j < n; ++j) {
      const size_t blk = static_cast<size_t>(block_table[j / bs]);
      const float* kp = kv.k + blk * block_stride + (j % bs) * token_stride + head_off;
      const float s = simd.dot(qg, kp, hd) * scale;
      scores[j] = s;
      mx = s > mx ? s : mx;
    }
    float sum = 0.f;
    for (size_t j = 0; j < n; ++j) {
      const float e = std::exp(scores[j] - mx);
      scores[j] = e;
      sum += e;
    }
    for (size_t d = 0; d < hd; ++d) og[d] = 0.f;
    for (size_t j = 0; j < n; ++j) {
      const size_t blk = static_cast<size_t>(block_table[j / bs]);
      const float* vp = kv.v + blk * block_stride + (j % bs) * token_stride + head_off;
      simd.axpy(og, scores[j], vp, hd);
    }
    const float inv = sum > 0.f ? 1.0f / sum : 0.f;
    for (size_t d = 0; d < hd; ++d) og[d] *= inv;
  }
}

}  // namespace halo::kernels
