// An fp64 forward of MiniMax-H3 written from the diffusers math (transformer_minimax_h3.py), independently of the
// runtime's executor: packed-order rows scattered by the index tensors, no bf16 rounding, double everywhere. Weights
// come from a WeightSource (they are inputs, not code under test). Used by runtime_model_test.cpp.
#pragma once

#include "h3c/models/config.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/weights.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace h3c::rt::fp64ref {

using Mat = std::vector<double>;  // row-major

// Softmax attention in double over M rows of q, k, v [M, I] (heads of d columns, scale d^-0.5): o [M, I].
template <class T>
Mat attention(const std::vector<T> &q, const std::vector<T> &k, const std::vector<T> &v, int64_t M, int64_t I,
              int64_t heads, int64_t d) {
  Mat o(size_t(M * I));
  const double scale = 1.0 / std::sqrt(double(d));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < M; ++i) {
      std::vector<double> s(static_cast<size_t>(M));
      double mx = -1e300;
      for (int64_t j = 0; j < M; ++j) {
        double a = 0;
        for (int64_t e = 0; e < d; ++e)
          a += double(q[size_t(i * I + h * d + e)]) * double(k[size_t(j * I + h * d + e)]);
        s[size_t(j)] = a * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      double l = 0;
      for (auto &e : s) {
        e = std::exp(e - mx);
        l += e;
      }
      for (int64_t e = 0; e < d; ++e) {
        double a = 0;
        for (int64_t j = 0; j < M; ++j)
          a += s[size_t(j)] * double(v[size_t(j * I + h * d + e)]);
        o[size_t(i * I + h * d + e)] = a / l;
      }
    }
  return o;
}

struct Ref {
  const h3::Config &c;
  WeightSource &w;
  std::map<std::string, Mat> cache;

  const Mat &W(const std::string &name) {
    auto it = cache.find(name);
    if (it != cache.end())
      return it->second;
    auto f = w.load(name).toFloats();
    return cache[name] = Mat(f.begin(), f.end());
  }
  bool has(const std::string &name) {
    try {
      w.spec(name);
      return true;
    } catch (...) {
      return false;
    }
  }
  // y[M][N] = x[M][K] W^T + b
  Mat linear(const Mat &x, int64_t M, const std::string &mod) {
    const Mat &wt = W(mod + ".weight");
    const auto &sp = w.spec(mod + ".weight");
    int64_t N = sp.shape[0], K = sp.shape[1];
    const Mat *b = has(mod + ".bias") ? &W(mod + ".bias") : nullptr;
    Mat y(size_t(M * N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = b ? (*b)[size_t(n)] : 0.0;
        for (int64_t k = 0; k < K; ++k)
          s += x[size_t(m * K + k)] * wt[size_t(n * K + k)];
        y[size_t(m * N + n)] = s;
      }
    // An unmerged LoRA path (docs/contract.md section 13), where the weight source holds the module's adapter slots
    // (an engine's OverlayWeights): y += (x down^T) up^T, the scale already in up.
    if (has(mod + ".lora_down")) {
      const Mat &down = W(mod + ".lora_down"), &up = W(mod + ".lora_up");
      const int64_t R = w.spec(mod + ".lora_down").shape[0];
      for (int64_t m = 0; m < M; ++m) {
        Mat t(size_t(R), 0.0);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t k = 0; k < K; ++k) t[size_t(r)] += x[size_t(m * K + k)] * down[size_t(r * K + k)];
        for (int64_t n = 0; n < N; ++n)
          for (int64_t r = 0; r < R; ++r) y[size_t(m * N + n)] += t[size_t(r)] * up[size_t(n * R + r)];
      }
    }
    return y;
  }
  static double silu(double v) { return v / (1.0 + std::exp(-v)); }
  // nn.RMSNorm over rows of width n (optional weight).
  Mat rms(const Mat &x, int64_t n, double eps, const std::string &weight) {
    const Mat *g = weight.empty() ? nullptr : &W(weight);
    Mat y(x.size());
    for (size_t r = 0; r < x.size() / size_t(n); ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i)
        ss += x[r * size_t(n) + size_t(i)] * x[r * size_t(n) + size_t(i)];
      double inv = 1.0 / std::sqrt(ss / double(n) + eps);
      for (int64_t i = 0; i < n; ++i)
        y[r * size_t(n) + size_t(i)] = x[r * size_t(n) + size_t(i)] * inv * (g ? (*g)[size_t(i)] : 1.0);
    }
    return y;
  }
  // Attention with optional rope (angles per row), over all M rows.
  Mat attn(const std::string &p, const Mat &x, int64_t M, const std::vector<std::vector<double>> *angles) {
    const int64_t heads = c.num_attention_heads, d = c.attention_head_dim, I = heads * d, R = c.rotaryDim();
    Mat q = linear(x, M, p + "attn.to_q"), k = linear(x, M, p + "attn.to_k"), v = linear(x, M, p + "attn.to_v");
    q = rms(q, d, c.qk_norm_eps, p + "attn.norm_q.weight");
    k = rms(k, d, c.qk_norm_eps, p + "attn.norm_k.weight");
    if (angles)
      for (Mat *t : {&q, &k})
        for (int64_t m = 0; m < M; ++m)
          for (int64_t h = 0; h < heads; ++h) {
            double *v0 = &(*t)[size_t(m * I + h * d)];
            std::vector<double> out(v0, v0 + R);
            for (int64_t i = 0; i < R; ++i) {
              double rot = i < R / 2 ? -v0[i + R / 2] : v0[i - R / 2];
              double a = (*angles)[size_t(m)][size_t(i)];
              out[size_t(i)] = v0[i] * std::cos(a) + rot * std::sin(a);
            }
            std::copy(out.begin(), out.end(), v0);
          }
    Mat o = attention(q, k, v, M, I, heads, d);
    return linear(o, M, p + "attn.to_out.0");
  }
  Mat ff(const std::string &p, const Mat &x, int64_t M) {
    const int64_t F = c.ffn_dim;
    Mat h = linear(x, M, p + "ff.net.0.proj");
    Mat g(size_t(M * F));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t f = 0; f < F; ++f)
        g[size_t(m * F + f)] = h[size_t(m * 2 * F + f)] * silu(h[size_t(m * 2 * F + F + f)]);
    return linear(g, M, p + "ff.net.2");
  }

  // Batch item b of the raw request -> (sample [Nv, P], audio_sample [Na, Ca]).
  std::pair<Mat, Mat> forward(const Request &r, int64_t b) {
    const int64_t H = c.hidden_size;
    auto floats = [&](const char *n) {
      const Tensor &t = r.tensors.at(n);
      int64_t per = t.numel() / t.shape[0];
      Mat m(static_cast<size_t>(per));
      for (int64_t i = 0; i < per; ++i)
        m[size_t(i)] = t.getFloat(b * per + i);
      return m;
    };
    auto ints = [&](const char *n) { return r.tensors.at(n).toInts(); };
    Mat hs = floats("hidden_states"), ahs = floats("audio_hidden_states"), ehs = floats("encoder_hidden_states");
    auto ts = r.tensors.at("timestep").toFloats();
    auto tsi = ints("timestep_indices"), tags = ints("token_tags");
    // position_ids.to(torch.float32), whatever its dtype (F64 and I64 round to nearest)
    const Tensor &pt = r.tensors.at("position_ids");
    std::vector<float> pos(static_cast<size_t>(pt.numel()));
    for (int64_t i = 0; i < pt.numel(); ++i)
      pos[size_t(i)] = pt.dtype == DType::I64 ? float(pt.getInt(i)) : pt.getFloat(i);
    auto vi = ints("video_indices"), ai = ints("audio_indices"), ti = ints("text_indices");
    const int64_t Nv = int64_t(vi.size()), Na = int64_t(ai.size()), Nt = int64_t(ti.size()), S = Nv + Na + Nt;
    const int64_t T = int64_t(ts.size());

    // rope angles per packed row. The rotary module is float32 by definition (the angles are part of the model, not
    // a precision choice): inv_freq = 1 / theta^(arange(0, 2f, 2) / 2f) in float32, freqs = pos_f32 * inv_freq as
    // one float32 product; only cos/sin and everything after are exact here.
    const int f = c.rope_freq_dim, R = c.rotaryDim();
    std::vector<std::vector<double>> ang(static_cast<size_t>(S), std::vector<double>(static_cast<size_t>(R)));
    for (int64_t s = 0; s < S; ++s)
      for (int a = 0; a < 3; ++a)
        for (int i = 0; i < f; ++i) {
          const float expo = float(2 * i) / float(2 * f);
          const float inv = 1.0f / float(std::pow(double(float(c.rope_theta)), double(expo)));
          const double v = double(pos[size_t(s * 3 + a)] * inv);
          ang[size_t(s)][size_t(a * f + i)] = v;
          ang[size_t(s)][size_t(3 * f + a * f + i)] = v;
        }
    Mat ve = linear(hs, Nv, "proj_in"), ae = linear(ahs, Na, "audio_proj_in"), te = linear(ehs, Nt, "context_embedder");
    for (int bl = 0; bl < c.num_refiner_layers; ++bl) {
      std::string p = "token_refiner.refiner_blocks." + std::to_string(bl) + ".";
      Mat a = attn(p, rms(te, H, c.norm_eps, p + "norm1.weight"), Nt, nullptr);
      for (size_t i = 0; i < te.size(); ++i) te[i] += a[i];
      Mat m = ff(p, rms(te, H, c.norm_eps, p + "norm2.weight"), Nt);
      for (size_t i = 0; i < te.size(); ++i) te[i] += m[i];
    }
    te = rms(te, H, c.final_norm_eps, "token_refiner.final_norm.weight");
    Mat x(size_t(S * H), 0.0);
    auto scatter = [&](const Mat &src, const std::vector<int64_t> &idx) {
      for (size_t k = 0; k < idx.size(); ++k)
        std::copy_n(&src[k * size_t(H)], H, &x[size_t(idx[k]) * size_t(H)]);
    };
    scatter(te, ti);
    scatter(ve, vi);
    scatter(ae, ai);
    // time embedding
    const int half = c.freq_dim / 2;
    Mat sinus(size_t(T * c.freq_dim));
    for (int64_t t = 0; t < T; ++t)
      for (int i = 0; i < half; ++i) {
        double arg = double(ts[size_t(t)]) * std::exp(-std::log(10000.0) * double(i) / double(half));
        sinus[size_t(t * c.freq_dim + i)] = std::cos(arg);
        sinus[size_t(t * c.freq_dim + half + i)] = std::sin(arg);
      }
    Mat h1 = linear(sinus, T, "time_embedder.linear_1");
    for (auto &e : h1) e = silu(e);
    Mat temb = linear(h1, T, "time_embedder.linear_2");
    Mat stemb = temb;
    for (auto &e : stemb) e = silu(e);
    for (int bl = 0; bl < c.num_layers; ++bl) {
      std::string p = "transformer_blocks." + std::to_string(bl) + ".";
      Mat tab = linear(stemb, T, p + "adaln_proj.linear");  // [T, 18H] = [T*3, 6H]
      auto ch = [&](int64_t s, int k) { return &tab[size_t((tsi[size_t(s)] * 3 + tags[size_t(s)]) * 6 * H + k * H)]; };
      Mat n1 = rms(x, H, c.norm_eps, p + "norm1.weight");
      for (int64_t s = 0; s < S; ++s)
        for (int64_t i = 0; i < H; ++i)
          n1[size_t(s * H + i)] = n1[size_t(s * H + i)] * (1.0 + ch(s, 1)[i]) + ch(s, 0)[i];
      Mat a = attn(p, n1, S, &ang);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t i = 0; i < H; ++i)
          x[size_t(s * H + i)] += ch(s, 2)[i] * a[size_t(s * H + i)];
      Mat n2 = rms(x, H, c.norm_eps, p + "norm2.weight");
      for (int64_t s = 0; s < S; ++s)
        for (int64_t i = 0; i < H; ++i)
          n2[size_t(s * H + i)] = n2[size_t(s * H + i)] * (1.0 + ch(s, 4)[i]) + ch(s, 3)[i];
      Mat m = ff(p, n2, S);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t i = 0; i < H; ++i)
          x[size_t(s * H + i)] += ch(s, 5)[i] * m[size_t(s * H + i)];
    }
    Mat ot = linear(stemb, T, "norm_out.linear");  // [T, 2H]: shift, scale
    Mat xn = rms(x, H, c.final_norm_eps, "norm_out.norm.weight");
    for (int64_t s = 0; s < S; ++s) {
      const double *shift = &ot[size_t(tsi[size_t(s)] * 2 * H)], *scale = shift + H;
      for (int64_t i = 0; i < H; ++i)
        xn[size_t(s * H + i)] = xn[size_t(s * H + i)] * (1.0 + scale[i]) + shift[i];
    }
    Mat yv = linear(xn, S, "proj_out"), ya = linear(xn, S, "audio_proj_out");
    const int64_t P = c.videoPatchDim(), Ca = c.audio_in_channels;
    Mat sv(size_t(Nv * P)), sa(size_t(Na * Ca));
    for (int64_t k = 0; k < Nv; ++k)
      std::copy_n(&yv[size_t(vi[size_t(k)] * P)], P, &sv[size_t(k * P)]);
    for (int64_t k = 0; k < Na; ++k)
      std::copy_n(&ya[size_t(ai[size_t(k)] * Ca)], Ca, &sa[size_t(k * Ca)]);
    return {sv, sa};
  }
};

} // namespace h3c::rt::fp64ref
