// The backward's gradient kernels on the GPU against the CPU reference, op by op on the same inputs (GpuBackward*):
// the CPU reference runs a tiny `--backward` plan (runCpuBackward, docs/contract.md section 14) and, after each
// gradient op, the op's kernel runs on the device on exactly the values the CPU op read (uploaded in their plan
// dtypes) and the synthetic weights.
// - The plan compiled with `--tune grad_mma=0` ($H3C_PLANS/tiny-backward-ref: grad.cuh's one-thread forms, which
//   compute the CPU's model of a chunk sum): every output byte-equal to the CPU's, except attention_grad's, whose
//   ex2 / lg2 are the hardware's (the CPU's exp2 / log2 differ by an ulp or so): within a relative error of 1e-4.
// - The default plan ($H3C_PLANS/tiny-backward: the linear and attention gradients on the tensor cores, whose chunk
//   sums are the hardware's): those kernels within a bound of the CPU's outputs, the others byte-equal; and the
//   tensor-core linear gradients on crafted operands whose tensor-core chains are exact (small integers; for dW one
//   power-of-two scale per unit of 128 rows, 2^-12..2^12, so the F32 folds between units and items round): byte-equal
//   to the contract's sequence written out in this test (the chunks, the units of 128 rows, the folds), which pins
//   every chunk's place and every F32 addition those kernels make themselves. (The accumulation of a chunk into the
//   chain happens inside the tensor core and is not an IEEE addition: measured, an inexact chain differs from
//   `acc + chunk` in the last place. The contract leaves it to the hardware, as in the forward.)
// Then the whole backward on the GPU executor (default plan): two runs byte-equal, every gradient within 1e-2 of the
// CPU's (attention's differences travel upstream), a batch item's input gradients equal to its own run's, the
// token-row weight gradients of a batch the F32 fold of its items', a packed-row permutation changing no bit.
// Requests of more than 128 rows per item, so the row units fold. Then the same plans compiled with `--checkpoint
// blocks` (GpuBackwardCheckpoint): the executor's outputs and gradients byte-equal to the unsegmented plan's, in an
// arena of exactly the checkpointed plan's slots. Skips without a GPU or the plans ($H3C_PLANS/tiny-backward,
// tiny-backward-ref, tiny-backward-ckpt, tiny-backward-lora(-ckpt): scripts/gpu-plans.sh).
#include "../unit/runtime/backward_test_util.h"
#include "emit_ops.h"

#include "h3c/plan/io.h"
#include "h3c/runtime/backward.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/engine.h"
#include "h3c/runtime/grad_ops.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/weights.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace hc = h3c::runtime::cuda;
namespace plan = h3c::plan;
using namespace h3c::rt;
using h3c::DType;

namespace {

std::filesystem::path planDir(const std::string &name = "tiny-backward") {
  const char *p = std::getenv("H3C_PLANS");
  return std::filesystem::path(p ? p : "carry/plans") / name;
}

bool isTensorCoreForm(const plan::Kernel &k) { return k.id.find("_mma_") != std::string::npos; }

// A crafted operand value: a small integer times a power of two. With `unitScaled`, one power per 128-row unit of the
// reduction index (2^-12..2^12): each unit's chain is exact (its sum is a small integer times its power, so the
// tensor core's chunk sums and its accumulation, which are the hardware's and not IEEE additions, cannot round), and
// the F32 additions of the folds between units and items, which the kernel does as written, do round. Without it the
// whole chain is exact.
float craftedValue(int64_t v, int64_t reductionIndex, bool unitScaled) {
  return float(v % 7 - 3) * (unitScaled ? std::ldexp(1.0f, int((reductionIndex / 128) * 7 % 25) - 12) : 1.0f);
}

// The contract's sum of one chunk whose products are exact and whose sum is exact in F32: double, rounded once.
float exactChunk(const std::vector<double> &products) {
  double s = 0;
  for (double p : products) s += p;
  return float(s);
}

// A host value as the device holds it in its plan dtype (bf16 values are exact in their floats).
std::vector<unsigned char> deviceBytes(const HostValue &h, DType dt) {
  std::vector<unsigned char> b;
  if (dt == DType::I64) {
    b.resize(h.i.size() * 8);
    std::memcpy(b.data(), h.i.data(), b.size());
  } else if (dt == DType::F32) {
    b.resize(h.f.size() * 4);
    std::memcpy(b.data(), h.f.data(), b.size());
  } else {
    b.resize(h.f.size() * 2);
    for (size_t i = 0; i < h.f.size(); ++i) {
      const uint16_t v = h3c::floatToBf16(h.f[i]);
      std::memcpy(&b[2 * i], &v, 2);
    }
  }
  return b;
}

// A device buffer of `count` values in plan dtype `dt` (F32, or bf16: h3-fuse-grad's rounded gradients) as floats.
std::vector<float> hostFloats(const hc::DeviceBuffer &b, size_t count, DType dt) {
  std::vector<float> f(count);
  if (count == 0) return f;
  if (dt == DType::F32) {
    b.download(f.data(), count * 4);
    return f;
  }
  std::vector<uint16_t> h(count);
  b.download(h.data(), count * 2);
  for (size_t i = 0; i < count; ++i) f[i] = h3c::bf16ToFloat(h[i]);
  return f;
}

// A two-timestep request of text, audio and video (T, H, W) rows: {text, audio, T, H, W}; `shuffle`: its packed rows
// permuted (the same values, indices to match).
Request tinyRequest(const h3c::h3::Config &c, std::array<int64_t, 5> rows, int64_t batch, uint64_t seed,
                    bool shuffle = false) {
  RequestShape sh;
  sh.text = rows[0];
  sh.audio = rows[1];
  sh.videoT = rows[2];
  sh.videoH = rows[3];
  sh.videoW = rows[4];
  sh.batch = batch;
  sh.timesteps = 2;
  sh.shuffle = shuffle;
  return makeRequest(c, sh, seed);
}

OutputGrads lossGrads(const CanonicalRequest &q, const h3c::h3::Config &c) {
  std::mt19937_64 g(5);
  std::normal_distribution<float> n;
  auto make = [&](int64_t rows, int64_t cols) {
    std::vector<float> v(size_t(q.B * rows * cols));
    for (float &x : v) x = n(g);
    return Tensor::fromFloats(DType::F32, {q.B, rows, cols}, v.data());
  };
  OutputGrads d;
  d.sample = make(q.Nv, c.videoPatchDim());
  d.audioSample = make(q.Na, c.audio_in_channels);
  return d;
}

double relFrob(const std::vector<float> &ref, const std::vector<float> &got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}


// Runs every gradient kernel of the plan `name` on the CPU op's own inputs (a batch of two items of 198 rows); the
// one-thread forms must give the CPU's bytes (attention_grad within 1e-4), the tensor-core forms within their bounds
// and, for the linear gradients, the contract's bytes on crafted operands.
void checkKernelsOnCpuInputs(const char *name) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  if (!std::filesystem::exists(planDir(name) / "plan.json")) GTEST_SKIP() << "no plan at " << planDir(name);
  const plan::Plan p = plan::loadPlan(planDir(name));
  auto weights = makeSyntheticWeights(p.config, 7);
  const Request r = tinyRequest(p.config, {40, 30, 2, 8, 8}, 2, 3);
  const CanonicalRequest q = canonicalize(r, p.config);
  const plan::Extents ext = q.extents();
  hc::KernelRunner runner;
  std::map<std::string, hc::DeviceBuffer> w;  // the weights a gradient op reads, by name
  std::map<std::string, std::vector<int>> failures;
  std::map<std::string, double> worstMma;
  int checked = 0, crafted = 0;
  auto launch = [&](const plan::Op &op, std::vector<hc::DeviceBuffer> &in, std::vector<hc::DeviceBuffer> &out,
                    const hc::DeviceBuffer *weight) {
    runner.launch(runner.load(p.kernel(op)), ext, [&](plan::OperandRole role, int64_t i) -> CUdeviceptr {
      switch (role) {
      case plan::OperandRole::In: return in.at(size_t(i)).get();
      case plan::OperandRole::Out: return out.at(size_t(i)).get();
      case plan::OperandRole::Weight: return weight ? weight->get() : w.at(op.weights.at(size_t(i))).get();
      case plan::OperandRole::Bias: return w.at(op.biases.at(size_t(i))).get();
      }
      return 0;
    });
    hc::check(hc::driver().cuCtxSynchronize(), "running " + op.where);
  };
  // The tensor-core linear gradient of `op` on crafted operands against the contract's sequence written out here.
  auto craftedLinear = [&](const plan::Op &op, const ValueMap &vals) {
    const int64_t N = op.attrs.N, K = op.attrs.K;
    const int64_t rows = int64_t(vals.at(op.in[0]).f.size()) / N;
    const bool dw = op.kind == plan::OpKind::LinearGradW;
    const int64_t items = p.value(op.in[0]).batch ? q.B : 1, itemRows = rows / items;
    std::vector<float> g(size_t(rows * N)), other(size_t(dw ? rows * K : N * K));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < N; ++n) g[size_t(r * N + n)] = craftedValue(r * 5 + n * 3, r % itemRows, dw);
    if (dw)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < K; ++k) other[size_t(r * K + k)] = float((r * 3 + k * 5) % 5 - 2);
    else
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) other[size_t(n * K + k)] = float((n * 3 + k * 5) % 5 - 2);
    HostValue otherValue, gValue;
    otherValue.f = other;
    gValue.f = g;  // (crafted values are exact in bf16: a grad_round's bf16 g holds them as they are)
    const std::vector<unsigned char> ob = deviceBytes(otherValue, DType::BF16),
                                     gb = deviceBytes(gValue, p.value(op.in[0]).dtype);
    std::vector<hc::DeviceBuffer> in, out;
    in.emplace_back(gb.size());
    in.back().upload(gb.data(), gb.size());
    in.emplace_back(dw ? ob.size() : 4);
    if (dw) in.back().upload(ob.data(), ob.size());
    // A dX with h3-fuse-grad's residual epilogue reads input 1, the part it adds: small integers (the sum exact).
    const bool residual = !dw && op.attrs.epilogue == plan::Epilogue::Residual;
    std::vector<float> res(residual ? size_t(rows * K) : 0);
    for (size_t i = 0; i < res.size(); ++i) res[i] = float(int(i % 5) - 2);
    if (residual) {
      in.back() = hc::DeviceBuffer(res.size() * 4);
      in.back().upload(res.data(), res.size() * 4);
    }
    hc::DeviceBuffer wbuf(ob.size());
    wbuf.upload(ob.data(), ob.size());
    for (const auto &n : op.out) out.emplace_back(std::max<size_t>(vals.at(n).f.size() * 4, 4));
    launch(op, in, out, dw ? nullptr : &wbuf);
    // The contract's sequences (section 14).
    std::vector<float> want(static_cast<size_t>(dw ? N * K : rows * K)), wantBias(static_cast<size_t>(N));
    std::vector<double> prods;
    if (dw) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          float total = 0.f;
          for (int64_t b = 0; b < items; ++b) {
            float item = 0.f;
            for (int64_t u = 0; u < itemRows; u += 128) {
              const int64_t u1 = std::min(u + 128, itemRows);
              float acc = 0.f;
              for (int64_t c0 = u; c0 < u1; c0 += 16) {
                prods.clear();
                for (int64_t r = c0; r < std::min(c0 + 16, u1); ++r)
                  prods.push_back(double(g[size_t((b * itemRows + r) * N + n)]) * other[size_t((b * itemRows + r) * K + k)]);
                acc = acc + exactChunk(prods);
              }
              item = u == 0 ? acc : item + acc;
            }
            total = b == 0 ? item : total + item;
          }
          want[size_t(n * K + k)] = total;
        }
      for (int64_t n = 0; n < N; ++n) {
        float total = 0.f;
        for (int64_t b = 0; b < items; ++b) {
          float item = 0.f;
          for (int64_t u = 0; u < itemRows; u += 128) {
            float acc = 0.f;
            for (int64_t r = u; r < std::min(u + 128, itemRows); ++r) acc = acc + g[size_t((b * itemRows + r) * N + n)];
            item = u == 0 ? acc : item + acc;
          }
          total = b == 0 ? item : total + item;
        }
        wantBias[size_t(n)] = total;
      }
    } else {
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t k = 0; k < K; ++k) {
          float acc = 0.f;
          for (int64_t n0 = 0; n0 < N; n0 += 16) {
            prods.clear();
            for (int64_t n = n0; n < std::min(n0 + 16, N); ++n)
              prods.push_back(double(g[size_t(m * N + n)]) * other[size_t(n * K + k)]);
            acc = acc + exactChunk(prods);
          }
          want[size_t(m * K + k)] = residual ? res[size_t(m * K + k)] + acc : acc;  // grad_add's F32 sum
        }
    }
    // Outputs: dx, or the trained weight's gradient then the bias's (op.grads order).
    for (size_t o = 0; o < op.out.size(); ++o) {
      // (linear_grad_w's outputs are op.grads, in order)
      const bool isBias = dw && !op.biases.empty() && o < op.grads.size() && op.grads[o] == op.biases[0];
      const std::vector<float> &ref = isBias ? wantBias : want;
      std::vector<float> got(ref.size());
      out[o].download(got.data(), got.size() * 4);
      ++crafted;
      if (std::memcmp(ref.data(), got.data(), ref.size() * 4) != 0) {
        size_t at = 0;
        while (at < ref.size() && std::memcmp(&ref[at], &got[at], 4) == 0) ++at;
        std::printf("FAIL %s crafted operands, output %zu: first difference at %zu of %zu: contract %.9g gpu %.9g\n",
                    op.where.c_str(), o, at, ref.size(), ref[at], got[at]);
        failures[std::string(plan::opKindName(op.kind)) + " (crafted)"].push_back(int(op.index));
      }
    }
  };
  auto observe = [&](const plan::Op &op, const ValueMap &vals) {
    std::vector<hc::DeviceBuffer> in, out;
    for (const auto &n : op.in) {
      const std::vector<unsigned char> b = deviceBytes(vals.at(n), p.value(n).dtype);
      in.emplace_back(std::max<size_t>(b.size(), 4));
      if (!b.empty()) in.back().upload(b.data(), b.size());
    }
    for (const auto &n : op.out)
      out.emplace_back(std::max<size_t>(vals.at(n).f.size() * (p.value(n).dtype == DType::BF16 ? 2 : 4), 4));
    for (const auto *names : {&op.weights, &op.biases})
      for (const auto &n : *names)
        if (!w.count(n)) {
          const Tensor t = weights->load(n);
          w[n] = hc::DeviceBuffer(t.bytes.size());
          w[n].upload(t.bytes.data(), t.bytes.size());
        }
    launch(op, in, out, nullptr);
    const bool mma = isTensorCoreForm(p.kernel(op));
    // The tensor cores' chunk sums against the CPU's double-then-round model: each element's chain differs by
    // about an F32 ulp per chunk (linear gradients); attention's bf16 roundings of P and dS turn such differences
    // into a bf16 ulp on some elements.
    const double bound = !mma ? 1e-4 : op.kind == plan::OpKind::AttentionGrad ? 1e-2 : 1e-4;
    for (size_t k = 0; k < op.out.size(); ++k) {
      const std::vector<float> &want = vals.at(op.out[k]).f;
      const std::vector<float> got = hostFloats(out[k], want.size(), p.value(op.out[k]).dtype);
      ++checked;
      if (mma || op.kind == plan::OpKind::AttentionGrad) {
        const double e = relFrob(want, got);
        if (mma) worstMma[plan::opKindName(op.kind)] = std::max(worstMma[plan::opKindName(op.kind)], e);
        std::printf("%s %s %s output %zu: rel_frob %.3e (bound %.0e)\n", e <= bound ? "PASS" : "FAIL",
                    op.where.c_str(), p.kernel(op).id.c_str(), k, e, bound);
        if (!(e <= bound)) failures[plan::opKindName(op.kind)].push_back(int(op.index));
      } else if (std::memcmp(want.data(), got.data(), want.size() * 4) != 0) {
        size_t at = 0;
        while (at < want.size() && std::memcmp(&want[at], &got[at], 4) == 0) ++at;
        std::printf("FAIL %s %s output %zu (%s): first difference at %zu of %zu: cpu %.9g gpu %.9g\n",
                    op.where.c_str(), plan::opKindName(op.kind), k, op.out[k].c_str(), at, want.size(), want[at],
                    got[at]);
        failures[plan::opKindName(op.kind)].push_back(int(op.index));
      }
    }
    if (mma && (op.kind == plan::OpKind::LinearGradW || op.kind == plan::OpKind::LinearGradX)) craftedLinear(op, vals);
  };
  runCpuBackward(p, *weights, q, lossGrads(q, p.config), 0, observe);
  for (const auto &[kind, ops] : failures)
    ADD_FAILURE() << kind << ": " << ops.size() << " ops differ from the CPU reference (first: backward op "
                  << ops.front() << ")";
  for (const auto &[kind, e] : worstMma) std::printf("tensor-core %s: worst rel_frob against the CPU %.3e\n", kind.c_str(), e);
  std::printf("%s every gradient kernel of %s (%d outputs; %d crafted-operand outputs byte-equal to the contract's "
              "sequence)\n", failures.empty() ? "PASS" : "FAIL", name, checked, crafted);
  EXPECT_GT(checked, 100);
}

// The memory-bound gradient kernels (grad.cuh's vector and row forms: grad_add, swiglu_grad, rope_grad,
// norm_modulate_grad, gate_residual_grad) at the full config's widths, emitted for this device, against the CPU
// reference functions (runtime/grad_ops.h) byte for byte: rows of several 16-byte steps per thread (5,376 channels:
// 672 vectors of 8 over 224 threads; norm_modulate's 21 per lane), a row count that ends in a part block and a part
// unit (333 = 2 x 128 + 77), table rows of two timesteps mixed along the rows; each kernel again on a grid of 3
// blocks of 64 threads (every row-walking and grid-stride loop then takes many steps), byte-equal too.
class MemoryBoundGrads {
public:
  explicit MemoryBoundGrads(int64_t M) : M_(M) {}

  // Bytes of `v` in plan dtype `dt` (bf16: `v` holds bf16 values).
  static std::vector<unsigned char> bytes(const std::vector<float> &v, DType dt) {
    HostValue h;
    h.f = v;
    return deviceBytes(h, dt);
  }
  static std::vector<unsigned char> bytes(const std::vector<int64_t> &v) {
    HostValue h;
    h.i = v;
    return deviceBytes(h, DType::I64);
  }
  std::vector<float> random(size_t n, bool bf16, double stdv = 1.0) {
    std::normal_distribution<float> d(0.f, float(stdv));
    std::vector<float> v(n);
    for (float &e : v) e = bf16 ? h3c::roundBf16(d(rng_)) : d(rng_);
    return v;
  }

  // Runs the op's kernel (and, with `smallGrid`, its first phase on 3 blocks of 64 threads) on the inputs (host bytes
  // at the input positions, weights at the weight positions); the outputs' bytes, `outBytes` each.
  std::vector<std::vector<unsigned char>> run(const h3c::testops::EmitOp &op, const plan::Extents &ext,
                                              const std::vector<std::vector<unsigned char>> &ins,
                                              const std::vector<std::vector<unsigned char>> &ws,
                                              const std::vector<size_t> &outBytes, bool smallGrid) {
    auto k = h3c::testops::emit(op, hc::device().arch());
    if (!k) throw std::runtime_error("no kernel for " + op.op.where);
    if (smallGrid) {
      k->id += "_grid3x64";  // (the runner keeps kernels by id)
      k->launch.grid[0].extent = plan::Extent::constant(3);
      k->launch.grid[0].div = 1;
      k->launch.grid[0].maxPerSm = 0;
      k->launch.block = {64, 1, 1};
    }
    kernels_.push_back(std::make_unique<plan::Kernel>(*k));
    std::vector<hc::DeviceBuffer> in, w, out;
    for (const auto &b : ins) {
      in.emplace_back(std::max<size_t>(b.size(), 4));
      if (!b.empty()) in.back().upload(b.data(), b.size());
    }
    for (const auto &b : ws) {
      w.emplace_back(std::max<size_t>(b.size(), 4));
      w.back().upload(b.data(), b.size());
    }
    for (size_t n : outBytes) {
      out.emplace_back(std::max<size_t>(n, 4));
      hc::check(hc::driver().cuMemsetD8(out.back().get(), 0xA5, out.back().bytes()), "poison");  // all written
    }
    runner_.launch(runner_.load(*kernels_.back()), ext, [&](plan::OperandRole role, int64_t i) -> CUdeviceptr {
      switch (role) {
      case plan::OperandRole::In: return in.at(size_t(i)).get();
      case plan::OperandRole::Out: return out.at(size_t(i)).get();
      case plan::OperandRole::Weight: return w.at(size_t(i)).get();
      case plan::OperandRole::Bias: break;
      }
      throw std::runtime_error("no bias operand");
    });
    hc::check(hc::driver().cuCtxSynchronize(), "running " + k->id);
    std::vector<std::vector<unsigned char>> got;
    for (size_t o = 0; o < out.size(); ++o) {
      got.emplace_back(outBytes[o]);
      if (outBytes[o]) out[o].download(got.back().data(), outBytes[o]);
    }
    return got;
  }

  // The kernel's outputs (plan grid and small grid) against the CPU's, `want[o]` in the outputs' dtypes.
  void check(const std::string &what, const h3c::testops::EmitOp &op, const plan::Extents &ext,
             const std::vector<std::vector<unsigned char>> &ins, const std::vector<std::vector<unsigned char>> &ws,
             const std::vector<std::vector<unsigned char>> &want) {
    std::vector<size_t> sizes;
    for (const auto &b : want) sizes.push_back(b.size());
    for (bool small : {false, true}) {
      const auto got = run(op, ext, ins, ws, sizes, small);
      for (size_t o = 0; o < want.size(); ++o) {
        size_t at = 0;
        while (at < want[o].size() && want[o][at] == got[o][at]) ++at;
        const bool ok = at == want[o].size();
        std::printf("%s %s%s output %zu: %zu bytes %s\n", ok ? "PASS" : "FAIL", what.c_str(),
                    small ? " (3 x 64 grid)" : "", o, want[o].size(),
                    ok ? "byte-equal to the CPU's" : ("differ from the CPU's at byte " + std::to_string(at)).c_str());
        EXPECT_TRUE(ok) << what << (small ? " small grid" : "") << " output " << o << " byte " << at;
      }
    }
  }

  int64_t M_;
  std::mt19937 rng_{20261206};
  hc::KernelRunner runner_;
  std::vector<std::unique_ptr<plan::Kernel>> kernels_;  // (the runner keeps pointers to them)
};

} // namespace

TEST(GpuBackward, MemoryBoundKernelsAtFullWidthsEqualTheCpu) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  namespace to = h3c::testops;
  using grad::ItemRows;
  using grad::TableRows;
  const int64_t M = 333, H = 5376, F = 14336, heads = 56, d = 128, R = 96, T = 2, chunks = 6;
  MemoryBoundGrads g(M);
  const plan::Extents ext{1, M, 0, 0, 0, T, 0};
  const ItemRows items{0, M};
  auto f32 = [](const std::vector<float> &v) { return MemoryBoundGrads::bytes(v, DType::F32); };
  auto bf = [](const std::vector<float> &v) { return MemoryBoundGrads::bytes(v, DType::BF16); };
  auto setCols = [](to::EmitOp &op, std::vector<std::pair<int64_t, DType>> in, std::vector<std::pair<int64_t, DType>> out) {
    for (size_t i = 0; i < in.size(); ++i) op.vals.in[i].cols = in[i].first, op.vals.in[i].dtype = in[i].second;
    for (size_t i = 0; i < out.size(); ++i) op.vals.out[i].cols = out[i].first, op.vals.out[i].dtype = out[i].second;
  };

  {  // grad_add: c = a + b
    to::EmitOp op = to::op(plan::OpKind::GradAdd, "transformer_blocks.0.grad_add", {});
    setCols(op, {{H, DType::F32}, {H, DType::F32}}, {{H, DType::F32}});
    const auto a = g.random(size_t(M * H), false), b = g.random(size_t(M * H), false);
    std::vector<float> c(a.size());
    for (size_t i = 0; i < c.size(); ++i) c[i] = a[i] + b[i];
    g.check("grad_add c5376", op, ext, {f32(a), f32(b)}, {}, {f32(c)});
  }
  for (DType out : {DType::F32, DType::BF16}) {  // swiglu_grad: x = [v | g] bf16, dx F32 or h3-fuse-grad's bf16
    to::EmitOp op = to::op(plan::OpKind::SwigluGrad, "transformer_blocks.0.ff.swiglu_grad", to::attrs({{"F", double(F)}}));
    setCols(op, {{F, DType::F32}, {2 * F, DType::BF16}}, {{2 * F, out}});
    const auto dy = g.random(size_t(M * F), false), x = g.random(size_t(M * 2 * F), true, 2.0);
    const std::vector<float> dx = grad::swigluGrad(dy.data(), x.data(), M, F);
    g.check(std::string("swiglu_grad f14336") + (out == DType::BF16 ? " bfout" : ""), op, ext, {f32(dy), bf(x)}, {},
            {MemoryBoundGrads::bytes(dx, out)});
  }
  {  // rope_grad: cos / sin F32 [S][R] (rounded to bf16 by the op)
    to::EmitOp op = to::op(plan::OpKind::RopeGrad, "transformer_blocks.0.attn.rope_grad",
                           to::attrs({{"heads", double(heads)}, {"head_dim", double(d)}, {"rotary_dim", double(R)}}));
    setCols(op, {{heads * d, DType::F32}, {R, DType::F32}, {R, DType::F32}}, {{heads * d, DType::F32}});
    const auto dy = g.random(size_t(M * heads * d), false), c = g.random(size_t(M * R), false, 0.7),
               s = g.random(size_t(M * R), false, 0.7);
    const std::vector<float> dx = grad::ropeGrad(dy.data(), c.data(), s.data(), M, heads, d, R);
    g.check("rope_grad h56 d128 r96", op, ext, {f32(dy), f32(c), f32(s)}, {}, {f32(dx)});
  }
  for (const bool trained : {false, true}) {
    // A qk_norm's rms_norm_grad with the rope_grad before it folded in (h3-fuse-grad): dy the rope's output
    // gradient, rotated back as it is read; == rope_grad then rms_norm_grad on the CPU. Frozen norm weight (the LoRA
    // plans: dx stored bf16) and trained (dx F32 and dw, whose sum reads the rotated dy too).
    const to::EmitOp op = to::qkNormGrad(heads, d, R, trained);
    const DType out = trained ? DType::F32 : DType::BF16;
    const auto dy = g.random(size_t(M * heads * d), false), x = g.random(size_t(M * heads * d), true, 2.0),
               c = g.random(size_t(M * R), false, 0.7), s = g.random(size_t(M * R), false, 0.7),
               w = g.random(size_t(d), true);
    const std::vector<float> rotated = grad::ropeGrad(dy.data(), c.data(), s.data(), M, heads, d, R);
    const grad::NormGrad want = grad::rmsNormGrad(rotated.data(), x.data(), w.data(), items, heads * d, d, 1e-6, trained);
    std::vector<std::vector<uint8_t>> outs = {MemoryBoundGrads::bytes(want.dx, out)};
    if (trained) outs.push_back(f32(want.dw));
    g.check(std::string("rms_norm_grad c7168 g128 with rope r96") + (trained ? " (weight trained)" : " bfout"), op, ext,
            {f32(dy), bf(x), f32(c), f32(s)}, {bf(w)}, outs);
  }
  // The AdaLN rows: timestep (r / 7) % T, tag r % 3 (table row ts * 3 + tag), the table bf16 [3T][6H].
  std::vector<int64_t> ts(static_cast<size_t>(M)), tags(static_cast<size_t>(M));
  TableRows rows;
  rows.count = 3 * T;
  for (int64_t r = 0; r < M; ++r) {
    ts[size_t(r)] = (r / 7) % T;
    tags[size_t(r)] = r % 3;
    rows.row.push_back(ts[size_t(r)] * 3 + tags[size_t(r)]);
  }
  const auto table = g.random(size_t(3 * T * chunks * H), true, 0.5);
  auto chunkOf = [&](int64_t k) {
    std::vector<float> c(size_t(3 * T * H));
    for (int64_t t = 0; t < 3 * T; ++t)
      std::copy_n(table.begin() + (t * chunks + k) * H, H, c.begin() + t * H);
    return c;
  };
  // dtable [3T][6H]: the chunks' gradients at their chunks, zero elsewhere.
  auto dtableOf = [&](std::vector<std::pair<int64_t, const std::vector<float> *>> parts) {
    std::vector<float> dt(size_t(3 * T * chunks * H), 0.f);
    for (auto [k, v] : parts)
      for (int64_t t = 0; t < 3 * T; ++t) std::copy_n(v->begin() + t * H, H, dt.begin() + (t * chunks + k) * H);
    return dt;
  };
  {  // norm_modulate_grad with its bf16 weight trained: dx, dtable (shift chunk 0, scale chunk 1), dw
    plan::OpAttrs a = to::attrs({{"H", double(H)}, {"num_chunks", double(chunks)}, {"shift_chunk", 0.0},
                                 {"scale_chunk", 1.0}, {"eps", 1e-6}});
    a.wDtype = DType::BF16;
    a.rowIndex = plan::RowIndex::Adaln;
    plan::Order order;
    order.kind = plan::OrderKind::RowUnits;
    to::EmitOp op = to::op(plan::OpKind::NormModulateGrad, "transformer_blocks.0.norm1.norm_modulate_grad", a, order, 1);
    setCols(op, {{H, DType::F32}, {H, DType::BF16}, {chunks * H, DType::BF16}, {1, DType::I64}, {1, DType::I64}},
            {{H, DType::F32}, {chunks * H, DType::F32}});
    to::trainWeight(op, H);
    const auto dy = g.random(size_t(M * H), false), x = g.random(size_t(M * H), true, 3.0), w = g.random(size_t(H), true);
    const std::vector<float> scale = chunkOf(1);
    const grad::NormModulateGrad want = grad::normModulateGrad(dy.data(), x.data(), w.data(), scale.data(), rows, items, H, 1e-6);
    g.check("norm_modulate_grad h5376 t3", op, ext, {f32(dy), bf(x), bf(table), MemoryBoundGrads::bytes(ts),
                                                     MemoryBoundGrads::bytes(tags)},
            {bf(w)}, {f32(want.dx), f32(dtableOf({{0, &want.dshift}, {1, &want.dscale}})), f32(want.dw)});
    // With h3-fuse-grad's residual (input after the row meta): dx = residual + dx, the rest the same.
    to::EmitOp rop = op;
    rop.op.attrs.epilogue = plan::Epilogue::Residual;
    plan::Value rv = rop.vals.in[0];
    rv.name = "grad:residual";
    rop.op.in.push_back(rv.name);
    rop.vals.in.push_back(rv);
    const auto res = g.random(size_t(M * H), false);
    std::vector<float> sum(want.dx.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = res[i] + want.dx[i];
    g.check("norm_modulate_grad h5376 t3 + residual", rop, ext,
            {f32(dy), bf(x), bf(table), MemoryBoundGrads::bytes(ts), MemoryBoundGrads::bytes(tags), f32(res)}, {bf(w)},
            {f32(sum), f32(dtableOf({{0, &want.dshift}, {1, &want.dscale}})), f32(want.dw)});
  }
  for (DType out : {DType::F32, DType::BF16}) {  // gate_residual_grad (gate chunk 2): dy, dtable
    plan::OpAttrs a = to::attrs({{"H", double(H)}, {"num_chunks", double(chunks)}, {"chunk", 2.0}});
    a.rowIndex = plan::RowIndex::Adaln;
    plan::Order order;
    order.kind = plan::OrderKind::RowUnits;
    to::EmitOp op = to::op(plan::OpKind::GateResidualGrad, "transformer_blocks.0.gate_residual_grad", a, order);
    setCols(op, {{H, DType::F32}, {H, DType::BF16}, {chunks * H, DType::BF16}, {1, DType::I64}, {1, DType::I64}},
            {{H, out}, {chunks * H, DType::F32}});
    const auto dz = g.random(size_t(M * H), false), y = g.random(size_t(M * H), true);
    const std::vector<float> gate = chunkOf(2);
    const grad::GateResidualGrad want = grad::gateResidualGrad(dz.data(), y.data(), gate.data(), rows, items, H);
    g.check(std::string("gate_residual_grad h5376 t3") + (out == DType::BF16 ? " bfout" : ""), op, ext,
            {f32(dz), bf(y), bf(table), MemoryBoundGrads::bytes(ts), MemoryBoundGrads::bytes(tags)}, {},
            {MemoryBoundGrads::bytes(want.dy, out), f32(dtableOf({{2, &want.dgate}}))});
    // The AdaLN tables frozen (table_grad 0, the LoRA plans' form): no y, no dtable, no phases; dy the same bytes.
    plan::OpAttrs na = a;
    na.tableGrad = 0;
    to::EmitOp nop = to::op(plan::OpKind::GateResidualGrad, "transformer_blocks.0.gate_residual_grad", na, order);
    setCols(nop, {{H, DType::F32}, {chunks * H, DType::BF16}, {1, DType::I64}, {1, DType::I64}}, {{H, out}});
    g.check(std::string("gate_residual_grad h5376 t3 without the table's gradient") + (out == DType::BF16 ? " bfout" : ""),
            nop, ext, {f32(dz), bf(table), MemoryBoundGrads::bytes(ts), MemoryBoundGrads::bytes(tags)}, {},
            {MemoryBoundGrads::bytes(want.dy, out)});
  }
  {  // norm_modulate_grad as the LoRA plans have it: no norm weight, the tables frozen (table_grad 0: no dtable, no
     // sums, no phases), h3-fuse-grad's residual: dx = residual + dx, the CPU's dx.
    plan::OpAttrs a = to::attrs({{"H", double(H)}, {"num_chunks", double(chunks)}, {"shift_chunk", 3.0},
                                 {"scale_chunk", 4.0}, {"eps", 1e-6}});
    a.rowIndex = plan::RowIndex::Adaln;
    a.epilogue = plan::Epilogue::Residual;
    a.tableGrad = 0;
    plan::Order order;
    order.kind = plan::OrderKind::RowUnits;
    to::EmitOp op = to::op(plan::OpKind::NormModulateGrad, "transformer_blocks.0.norm2.norm_modulate_grad", a, order);
    setCols(op, {{H, DType::F32}, {H, DType::BF16}, {chunks * H, DType::BF16}, {1, DType::I64}, {1, DType::I64},
                 {H, DType::F32}},
            {{H, DType::F32}});
    const auto dy = g.random(size_t(M * H), false), x = g.random(size_t(M * H), true, 3.0),
               res = g.random(size_t(M * H), false);
    const std::vector<float> scale = chunkOf(4);
    const grad::NormModulateGrad want =
        grad::normModulateGrad(dy.data(), x.data(), nullptr, scale.data(), rows, items, H, 1e-6, false, false);
    std::vector<float> sum(want.dx.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = res[i] + want.dx[i];
    g.check("norm_modulate_grad h5376 t3 without the table's gradient + residual", op, ext,
            {f32(dy), bf(x), bf(table), MemoryBoundGrads::bytes(ts), MemoryBoundGrads::bytes(tags), f32(res)}, {},
            {f32(sum)});
  }
}

TEST(GpuBackward, EveryOneThreadKernelEqualsTheCpuReferenceOnItsInputs) { checkKernelsOnCpuInputs("tiny-backward-ref"); }

TEST(GpuBackward, TensorCoreKernelsFollowTheContractsOrderAndTheCpu) { checkKernelsOnCpuInputs("tiny-backward"); }

TEST(GpuBackward, TheExecutorsBackwardRepeatsAndFollowsTheCpu) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  if (!std::filesystem::exists(planDir() / "plan.json")) GTEST_SKIP() << "no plan at " << planDir();
  const plan::Plan p = plan::loadPlan(planDir());
  auto weights = makeSyntheticWeights(p.config, 7);
  const Request r = tinyRequest(p.config, {6, 5, 2, 3, 4}, 1, 9);
  const CanonicalRequest q = canonicalize(r, p.config);
  const OutputGrads dy = lossGrads(q, p.config);
  RunOptions o;
  o.device = "gpu";
  const BackwardResult g1 = runBackward(p, *weights, r, dy, o), g2 = runBackward(p, *weights, r, dy, o);
  const BackwardResult c = runCpuBackward(p, *weights, q, dy, 0);
  bool same = true, near = true;
  double worst = -1;
  std::string worstName;
  auto compare = [&](const std::map<std::string, Tensor> &a, const std::map<std::string, Tensor> &b,
                     const std::map<std::string, Tensor> &ref) {
    ASSERT_EQ(a.size(), ref.size());
    for (const auto &[n, t] : ref) {
      same &= a.at(n).bytes == b.at(n).bytes;
      const double e = relFrob(t.toFloats(), a.at(n).toFloats());
      if (!(e <= worst)) {  // (a NaN is the worst)
        worst = e;
        worstName = n;
      }
      near &= e <= 1e-2;
    }
  };
  compare(g1.inputGrads, g2.inputGrads, c.inputGrads);
  compare(g1.weightGrads, g2.weightGrads, c.weightGrads);
  std::printf("%s two GPU backwards byte-equal (%zu gradients)\n", same ? "PASS" : "FAIL",
              g1.inputGrads.size() + g1.weightGrads.size());
  std::printf("%s GPU backward within 1e-2 of the CPU reference (worst %s: %.3e)\n", near ? "PASS" : "FAIL",
              worstName.c_str(), worst);
  EXPECT_TRUE(same);
  EXPECT_TRUE(near);
}

// A training step's forward kept for its backward (Engine::forwardKept, executor.h): the backward that starts from
// it gives the bytes of one that runs its own forward (outputs and every gradient) and says so; the kept forward's
// outputs are a plain forward's; a forward run on the engine in between (a rollout) makes the backward run its own
// forward again, with the same bytes.
namespace {

// The tiny plan on a resident GPU engine, with the two-item request and loss gradients of the engine tests below.
struct TinyGpuEngine {
  plan::Plan p = plan::loadPlan(planDir());
  std::unique_ptr<WeightSource> weights = makeSyntheticWeights(p.config, 7);
  Request r = tinyRequest(p.config, {6, 5, 2, 3, 4}, 2, 9);
  OutputGrads dy = lossGrads(canonicalize(r, p.config), p.config);
  Engine e{p, *weights, [] {
             RunOptions o;
             o.device = "gpu";
             return o;
           }()};
};

// Byte-equal tensors under the same names.
bool sameTensors(const std::map<std::string, Tensor> &a, const std::map<std::string, Tensor> &b) {
  bool eq = a.size() == b.size();
  for (const auto &[n, t] : a) eq &= b.count(n) && b.at(n).bytes == t.bytes;
  return eq;
}

} // namespace

TEST(GpuBackward, AKeptForwardsBackwardIsTheBackward) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  if (!std::filesystem::exists(planDir() / "plan.json")) GTEST_SKIP() << "no plan at " << planDir();
  TinyGpuEngine t;
  Engine &e = t.e;
  const Request &r = t.r;
  const OutputGrads &dy = t.dy;
  const BackwardResult full = e.backward(r, dy);
  const auto [out, ticket] = e.forwardKept(r);
  const BackwardResult kept = e.backward(r, dy, ticket);
  const RunResult plain = e.run(r);
  const auto [out2, ticket2] = e.forwardKept(r);
  e.run(r);  // a rollout between the training forward and its backward
  const BackwardResult stale = e.backward(r, dy, ticket2);
  auto gradsEqual = [](const BackwardResult &a, const BackwardResult &b) {
    return sameTensors(a.inputGrads, b.inputGrads) && sameTensors(a.weightGrads, b.weightGrads);
  };
  const bool outsEqual = out.sample.bytes == full.outputs.sample.bytes &&
                         out.audio_sample.bytes == full.outputs.audio_sample.bytes &&
                         plain.outputs.sample.bytes == out.sample.bytes &&
                         plain.outputs.audio_sample.bytes == out.audio_sample.bytes &&
                         out2.sample.bytes == out.sample.bytes && kept.outputs.sample.bytes == out.sample.bytes;
  const bool keptEqual = gradsEqual(full, kept), staleEqual = gradsEqual(full, stale);
  std::printf("%s the kept forward's backward started after the forward (ticket %llu), the others did not\n",
              kept.forwardKept && !full.forwardKept && !stale.forwardKept && ticket != 0 ? "PASS" : "FAIL",
              (unsigned long long)ticket);
  std::printf("%s kept forward's outputs == the backward's own forward's == a plain forward's\n",
              outsEqual ? "PASS" : "FAIL");
  std::printf("%s %zu gradients from the kept forward byte-equal to the backward's with its own forward; after a "
              "rollout in between: %s\n", keptEqual ? "PASS" : "FAIL", full.inputGrads.size() + full.weightGrads.size(),
              staleEqual ? "byte-equal" : "DIFFERENT");
  EXPECT_TRUE(kept.forwardKept);
  EXPECT_FALSE(full.forwardKept);
  EXPECT_FALSE(stale.forwardKept);
  EXPECT_NE(ticket, 0u);
  EXPECT_TRUE(outsEqual);
  EXPECT_TRUE(keptEqual);
  EXPECT_TRUE(staleEqual);
}

// Weight gradients left in the caller's device memory (DeviceGrads: the Python package's CUDA masters' .grad): the
// gradient kernels write them there (their slots are no part of the arena), on a stream of the caller's that has work
// queued before the call; those named come back as the bytes of the backward that downloads them, the others are
// downloaded as before, and a backward without DeviceGrads after it places them in its own region again.
TEST(GpuBackward, WeightGradientsWrittenIntoTheCallersMemoryAreTheDownloadedOnes) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  if (!std::filesystem::exists(planDir() / "plan.json")) GTEST_SKIP() << "no plan at " << planDir();
  TinyGpuEngine te;
  Engine &e = te.e;
  const Request &r = te.r;
  const OutputGrads &dy = te.dy;
  const BackwardResult host = e.backward(r, dy);
  ASSERT_GT(host.weightGrads.size(), 2u);
  const auto &d = hc::driver();
  CUstream stream = nullptr;
  hc::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::vector<hc::DeviceBuffer> bufs;
  DeviceGrads into;
  into.stream = uint64_t(reinterpret_cast<uintptr_t>(stream));
  size_t i = 0;
  for (const auto &[name, t] : host.weightGrads) {
    if (i++ % 2) continue;  // every other one: the rest stays the executor's
    bufs.emplace_back(t.bytes.size());
    into.weights[name] = uint64_t(bufs.back().get());
  }
  // Work on the caller's stream that the backward must wait for: 0xff bytes (a NaN pattern) that its kernels
  // overwrite; run after them, they would leave the gradients NaN.
  std::vector<uint8_t> ff(1 << 20, 0xff);
  for (auto &b : bufs)
    for (size_t off = 0; off < b.bytes(); off += ff.size())
      hc::check(d.cuMemcpyHtoDAsync(b.get() + off, ff.data(), std::min(ff.size(), b.bytes() - off), stream),
                "fill");
  const auto [out, ticket] = e.forwardKept(r);
  const BackwardResult dev = e.backward(r, dy, ticket, &into);
  bool named = true, rest = true;
  size_t k = 0;
  for (const auto &[name, t] : host.weightGrads) {
    if (into.weights.count(name)) {
      std::vector<uint8_t> got(t.bytes.size());
      hc::check(d.cuMemcpyDtoH(got.data(), CUdeviceptr(into.weights.at(name)), got.size()), "download");
      named &= !dev.weightGrads.count(name) && got == t.bytes;
      ++k;
    } else {
      rest &= dev.weightGrads.count(name) && dev.weightGrads.at(name).bytes == t.bytes;
    }
  }
  const bool againEqual = sameTensors(e.backward(r, dy).weightGrads, host.weightGrads);
  hc::check(d.cuStreamDestroy(stream), "cuStreamDestroy");
  std::printf("%s %zu weight gradients written into the caller's memory == the downloaded ones (after the caller's "
              "stream's work)\n", named ? "PASS" : "FAIL", k);
  std::printf("%s the other %zu downloaded as before; %s\n", rest ? "PASS" : "FAIL", host.weightGrads.size() - k,
              againEqual ? "a later backward without DeviceGrads the same bytes" : "a later backward DIFFERENT");
  EXPECT_TRUE(dev.forwardKept);
  EXPECT_TRUE(named);
  EXPECT_TRUE(rest);
  EXPECT_TRUE(againEqual);
}

// The contract's invariances on the GPU (section 14), with the tensor-core kernels: a batch item's input gradients
// equal its own run's, the token-row weight gradients of a batch are the F32 fold of its items' in batch order (the
// AdaLN tables' and the time embedder's are functions of the summed table gradients: left out, as on the CPU), and a
// packed-row permutation changes no bit. Items of 198 rows: two units of 128, and attention's query and key tiles
// span several 64-row tiles.
TEST(GpuBackward, BatchItemsFoldAndPermutationsChangeNoBit) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  if (!std::filesystem::exists(planDir() / "plan.json")) GTEST_SKIP() << "no plan at " << planDir();
  const plan::Plan p = plan::loadPlan(planDir());
  auto weights = makeSyntheticWeights(p.config, 7);
  const h3c::h3::Config &c = p.config;
  auto request = [&](int64_t batch, bool shuffle) { return tinyRequest(c, {40, 30, 2, 8, 8}, batch, 11, shuffle); };
  const backward_test::Loss loss(size_t(128 * c.videoPatchDim()), size_t(30 * c.audio_in_channels), 5);
  RunOptions o;
  o.device = "gpu";
  auto run = [&](const Request &r) {
    const int64_t B = r.tensors.at("hidden_states").shape[0];
    return runBackward(p, *weights, r, loss.grads(B, 128, c.videoPatchDim(), 30, c.audio_in_channels), o);
  };
  const Request batch = request(2, false);
  const BackwardResult g = run(batch);
  const BackwardResult i0 = run(backward_test::itemOf(batch, 0)), i1 = run(backward_test::itemOf(batch, 1));
  int inputsSame = 0, folded = 0, notFolded = 0;
  for (const auto &[n, t] : g.inputGrads) {
    const std::vector<float> all = t.toFloats(), a = i0.inputGrads.at(n).toFloats(), b = i1.inputGrads.at(n).toFloats();
    ASSERT_EQ(all.size(), a.size() + b.size()) << n;
    const bool same = std::memcmp(a.data(), all.data(), a.size() * 4) == 0 &&
                      std::memcmp(b.data(), all.data() + a.size(), b.size() * 4) == 0;
    EXPECT_TRUE(same) << n << ": a batch item's input gradient differs from its own run's";
    inputsSame += same;
  }
  for (const auto &[n, t] : g.weightGrads) {
    if (n.find("adaln_proj") != std::string::npos || n.rfind("norm_out.linear", 0) == 0 ||
        n.rfind("time_embedder.", 0) == 0)
      continue;
    const std::vector<float> all = t.toFloats(), a = i0.weightGrads.at(n).toFloats(), b = i1.weightGrads.at(n).toFloats();
    bool same = all.size() == a.size();
    for (size_t k = 0; same && k < all.size(); ++k) same = all[k] == a[k] + b[k];
    EXPECT_TRUE(same) << n << " is not the fold of its items' gradients";
    (same ? folded : notFolded) += 1;
  }
  const BackwardResult shuffled = run(request(2, true));
  int permSame = 0, permDiff = 0;
  for (const auto *maps : {&g.inputGrads, &g.weightGrads})
    for (const auto &[n, t] : *maps) {
      const auto &other = maps == &g.inputGrads ? shuffled.inputGrads.at(n) : shuffled.weightGrads.at(n);
      const bool same = t.bytes == other.bytes;
      EXPECT_TRUE(same) << n << " changed under a packed-row permutation";
      (same ? permSame : permDiff) += 1;
    }
  std::printf("%s batch items: %d input gradients equal their own runs'; %d weight gradients the fold of the items' "
              "(%d not)\n", inputsSame == int(g.inputGrads.size()) && notFolded == 0 ? "PASS" : "FAIL", inputsSame,
              folded, notFolded);
  std::printf("%s packed-row permutation: %d gradients byte-equal, %d differ\n", permDiff == 0 ? "PASS" : "FAIL",
              permSame, permDiff);
  EXPECT_GT(folded, 40);
}

namespace {

// The arena the GPU executor lays out for a plan's backward: each slot its own region of its bytes at the request's
// extents (bytes per row x rows x B, plus fixed bytes), rounded up to 256 bytes.
int64_t plannedArena(const plan::Plan &p, const CanonicalRequest &q) {
  const plan::Extents e = q.extents();
  int64_t total = 0;
  for (const plan::Slot &s : p.slots) {
    int64_t b = s.fixedBytes;
    for (const auto &[dom, bpr] : s.bytesPerRow) b += bpr * e.rows(dom) * q.B;
    total += (std::max<int64_t>(b, 1) + 255) / 256 * 256;
  }
  return total;
}

} // namespace

// A checkpointed plan (docs/contract.md section 14) runs the same kernels on the same operands as the plan without
// segments, the recompute's included: every output and gradient byte-equal; and the executor's arena is the
// checkpointed plan's slot table, smaller than the whole-life one.
TEST(GpuBackwardCheckpoint, GradientsByteEqualToTheUnsegmentedPlanInThePlannedArena) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  int pairs = 0;
  for (const char *base : {"tiny-backward", "tiny-backward-lora"}) {
    const std::string ckName = std::string(base) + "-ckpt";
    if (!std::filesystem::exists(planDir(base) / "plan.json") || !std::filesystem::exists(planDir(ckName) / "plan.json")) {
      std::printf("SKIP %s / %s: no plans at %s\n", base, ckName.c_str(), planDir(base).parent_path().c_str());
      continue;
    }
    ++pairs;
    const plan::Plan p = plan::loadPlan(planDir(base)), pc = plan::loadPlan(planDir(ckName));
    ASSERT_TRUE(p.backward()->checkpoints.empty()) << base;
    ASSERT_FALSE(pc.backward()->checkpoints.empty()) << ckName;
    auto weights = makeSyntheticWeights(p.config, 7);
    for (const Request &r : {tinyRequest(p.config, {6, 5, 2, 3, 4}, 1, 9), tinyRequest(p.config, {5, 4, 2, 2, 3}, 2, 3)}) {
      const CanonicalRequest q = canonicalize(r, p.config);
      const OutputGrads dy = lossGrads(q, p.config);
      RunOptions o;
      o.device = "gpu";
      const BackwardResult a = runBackward(p, *weights, r, dy, o), b = runBackward(pc, *weights, r, dy, o);
      bool same = a.outputs.sample.bytes == b.outputs.sample.bytes &&
                  a.outputs.audio_sample.bytes == b.outputs.audio_sample.bytes &&
                  a.inputGrads.size() == b.inputGrads.size() && a.weightGrads.size() == b.weightGrads.size();
      std::string first;
      for (const auto *m : {&a.inputGrads, &a.weightGrads})
        for (const auto &[n, t] : *m) {
          const auto &other = m == &a.inputGrads ? b.inputGrads : b.weightGrads;
          const bool eq = other.count(n) && other.at(n).bytes == t.bytes;
          if (!eq && first.empty()) first = n;
          same &= eq;
        }
      std::printf("%s %s B=%lld: outputs and %zu gradients byte-equal to %s's%s%s\n", same ? "PASS" : "FAIL",
                  ckName.c_str(), (long long)q.B, a.inputGrads.size() + a.weightGrads.size(), base,
                  first.empty() ? "" : ", first different: ", first.c_str());
      EXPECT_TRUE(same) << ckName << " " << first;
      const int64_t want = plannedArena(pc, q), wantWhole = plannedArena(p, q);
      const bool arenaOk = b.arenaBytes == want && a.arenaBytes == wantWhole && want < wantWhole;
      std::printf("%s %s B=%lld: arena %lld bytes, the plan's slots %lld (without segments %lld, the plan's %lld)\n",
                  arenaOk ? "PASS" : "FAIL", ckName.c_str(), (long long)q.B, (long long)b.arenaBytes,
                  (long long)want, (long long)a.arenaBytes, (long long)wantWhole);
      EXPECT_TRUE(arenaOk);
    }
  }
  if (!pairs) GTEST_SKIP() << "no checkpointed plans at " << planDir().parent_path();
}
