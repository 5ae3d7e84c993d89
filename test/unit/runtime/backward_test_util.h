// What the backward tests over the tiny config share (backward_model_test.cpp, backward_lora_test.cpp): their
// request, a scalar loss with fixed random output gradients (and its value on the fp64 model's outputs), and the
// comparisons.
#pragma once

#include "fp64_reference.h"

#include "h3c/runtime/backward.h"
#include "h3c/runtime/request.h"

#include <cmath>
#include <memory>
#include <random>

namespace h3c::rt::backward_test {

inline Request tinyRequest(const h3::Config &c, int64_t batch, bool shuffle) {
  RequestShape sh;
  sh.text = 3;
  sh.audio = 3;
  sh.videoT = 2;
  sh.videoH = 2;
  sh.videoW = 2;
  sh.batch = batch;
  sh.timesteps = 2;
  sh.shuffle = shuffle;
  return makeRequest(c, sh, 11);
}

// The loss L = sum(sample * a) + sum(audio_sample * b) with fixed random a, b (drawn from `seed`): its output
// gradients are a and b.
struct Loss {
  std::vector<float> a, b;
  Loss(size_t na, size_t nb, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> n;
    for (size_t i = 0; i < na; ++i) a.push_back(n(g));
    for (size_t i = 0; i < nb; ++i) b.push_back(n(g));
  }
  // The loss's gradients for a batch of B items, each with the same weights (item b of a batch is one request).
  OutputGrads grads(int64_t B, int64_t Nv, int64_t P, int64_t Na, int64_t Ca) const {
    std::vector<float> ga, gb;
    for (int64_t i = 0; i < B; ++i) {
      ga.insert(ga.end(), a.begin(), a.end());
      gb.insert(gb.end(), b.begin(), b.end());
    }
    return {Tensor::fromFloats(DType::F32, {B, Nv, P}, ga.data()), Tensor::fromFloats(DType::F32, {B, Na, Ca}, gb.data())};
  }
  double of(const std::pair<fp64ref::Mat, fp64ref::Mat> &out) const {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += out.first[i] * double(a[i]);
    for (size_t i = 0; i < b.size(); ++i) s += out.second[i] * double(b[i]);
    return s;
  }
};

inline bool sameBytes(const Tensor &a, const Tensor &b) { return a.shape == b.shape && a.bytes == b.bytes; }

// ||got - want|| / ||want|| over the sampled elements.
inline double relErr(const std::vector<double> &got, const std::vector<double> &want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return std::sqrt(d / n);
}

// An overlay over `base` holding `p`'s adapter slots, each random (down std 0.1, up std 0.02: a low-rank term the
// size of the base linear's), drawn from `seed`.
inline std::unique_ptr<OverlayWeights> randomAdapters(WeightSource &base, const plan::Plan &p, uint64_t seed) {
  auto w = std::make_unique<OverlayWeights>(base);
  w->holdAdapterSlots(p);
  std::mt19937_64 g(seed);
  for (const auto &b : p.weights)
    for (const auto &ts : b.tensors) {
      if (!ts.adapter) continue;
      std::normal_distribution<float> n(0.f, ts.name.find("lora_down") != std::string::npos ? 0.1f : 0.02f);
      std::vector<float> v(size_t(ts.numel()));
      for (float &x : v) x = n(g);
      w->set(ts.name, Tensor::fromFloats(DType::BF16, ts.shape, v.data()));
    }
  return w;
}

// Item b of a batched request: its slice of the three activations, everything else shared.
inline Request itemOf(const Request &r, int64_t b) {
  Request one = r;
  for (const char *n : {"hidden_states", "audio_hidden_states", "encoder_hidden_states"}) {
    const Tensor &t = r.tensors.at(n);
    const int64_t per = t.numel() / t.shape[0];
    std::vector<float> f = t.toFloats();
    std::vector<int64_t> shape = t.shape;
    shape[0] = 1;
    one.tensors[n] = Tensor::fromFloats(t.dtype, shape, f.data() + b * per);
  }
  return one;
}

// A few elements of a tensor of `numel`, spread over it.
inline std::vector<int64_t> picks(int64_t numel) {
  std::vector<int64_t> i;
  for (int64_t k = 0; k < std::min<int64_t>(numel, 6); ++k) i.push_back((k * 7919 + 5) % numel);
  return i;
}

// The central difference of the loss on the fp64 model for each picked element of weight tensor `name` (step
// max(1e-3, 1e-3 |w|)), beside h3c's gradient `g` of those elements and a wrong gradient (each element's
// neighbour's): {h3c, fd, wrong}.
struct Sampled {
  std::vector<double> got, fd, wrong;
};
inline Sampled weightDifferences(fp64ref::Ref &ref, const Loss &loss, const Request &r, const std::string &name,
                                 const Tensor &g) {
  fp64ref::Mat &W = ref.cache[name];
  if (W.empty()) ref.W(name);
  Sampled s;
  for (int64_t i : picks(g.numel())) {
    const double w0 = W[size_t(i)], h = std::max(1e-3, 1e-3 * std::fabs(w0));
    W[size_t(i)] = w0 + h;
    const double lp = loss.of(ref.forward(r, 0));
    W[size_t(i)] = w0 - h;
    const double lm = loss.of(ref.forward(r, 0));
    W[size_t(i)] = w0;
    s.fd.push_back((lp - lm) / (2 * h));
    s.got.push_back(g.getFloat(i));
    s.wrong.push_back(g.getFloat((i + 1) % g.numel()));
  }
  return s;
}

} // namespace h3c::rt::backward_test
