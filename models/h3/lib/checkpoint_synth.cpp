// Synthetic checkpoints: every element comes from synth_rng.h's counter-based generator keyed by (seed, tensor name,
// element index), so the runtime can produce the very same bits on the GPU without a file. Files are written tensor
// by tensor and piece by piece, so memory stays at one small buffer whatever the model size.
#include "h3c/models/checkpoint.h"

#include "h3c/support/error.h"
#include "h3c/support/synth_rng.h"

#include <cstring>

namespace fs = std::filesystem;

namespace h3c::h3 {

namespace {

void checkDtype(const TensorSpec &spec) {
  if (spec.dtype != DType::F32 && spec.dtype != DType::BF16)
    fail(spec.name, "synthetic values exist for F32 and BF16 only, not {}", dtypeName(spec.dtype));
}

} // namespace

float synthValue(const TensorSpec &spec, uint64_t seed, uint64_t index) {
  switch (spec.init) {
  case TensorSpec::Init::Ones: return 1.0f;
  case TensorSpec::Init::Zeros: return 0.0f;
  case TensorSpec::Init::Normal: break;
  }
  const auto key = synth::tensorKey(seed, spec.name.data(), spec.name.size());
  return synth::normalish(key, index, kSynthWeightStd * H3C_SYNTH_UNIT_SCALE);
}

void synthTensorRange(const TensorSpec &spec, uint64_t seed, uint64_t begin, uint64_t end, void *dst) {
  checkDtype(spec);
  if (begin > end || end > uint64_t(spec.numel()))
    fail(spec.name, "element range [{}, {}) outside the tensor's {} elements", begin, end, spec.numel());
  const bool bf16 = spec.dtype == DType::BF16;
  uint8_t *out = static_cast<uint8_t *>(dst);
  auto store = [&](uint64_t i, float v) {
    if (bf16) {
      uint16_t b = floatToBf16(v);
      std::memcpy(out + 2 * (i - begin), &b, 2);
    } else {
      std::memcpy(out + 4 * (i - begin), &v, 4);
    }
  };
  if (spec.init != TensorSpec::Init::Normal) {
    const float v = spec.init == TensorSpec::Init::Ones ? 1.0f : 0.0f;
    for (uint64_t i = begin; i < end; ++i)
      store(i, v);
    return;
  }
  const auto key = synth::tensorKey(seed, spec.name.data(), spec.name.size());
  const double scale = kSynthWeightStd * H3C_SYNTH_UNIT_SCALE;
  for (uint64_t i = begin; i < end; ++i)
    store(i, synth::normalish(key, i, scale));
}

void synthTensor(const TensorSpec &spec, uint64_t seed, void *dst) {
  synthTensorRange(spec, seed, 0, uint64_t(spec.numel()), dst);
}

void synthCheckpoint(const Config &c, uint64_t seed, const fs::path &out, uint64_t shardSize,
                     const WriteProgress &progress) {
  c.validate("config");
  const auto specs = diffusersTensors(c);
  std::map<std::string, const TensorSpec *> byName;
  std::vector<st::TensorDecl> decls;
  for (const auto &s : specs) {
    checkDtype(s);
    byName[s.name] = &s;
    decls.push_back(st::TensorDecl{s.name, s.dtype, s.shape});
  }
  AtomicDirectory dir(detail::outputFolder(out));
  writeFileAtomic(dir.tempPath() / "config.json",
                  checkpointConfigJson(c, CheckpointFormat::Diffusers, QkvLayout::Interleaved).dump(2) + "\n");
  constexpr uint64_t kPiece = 1 << 20;  // elements per piece: at most 4 MB of buffer
  std::vector<uint8_t> buf;
  size_t done = 0;
  uint64_t written = 0;
  st::writeFolder(dir.tempPath(), st::kDiffusersPrefix, decls, shardSize, {{"format", "pt"}},
                  [&](const st::TensorInfo &info, st::Writer &w) {
                    const TensorSpec &s = *byName.at(info.name);
                    const uint64_t n = uint64_t(s.numel()), es = dtypeSize(s.dtype);
                    buf.resize(std::min(n, kPiece) * es);
                    for (uint64_t b = 0; b < n; b += kPiece) {
                      uint64_t e = std::min(n, b + kPiece);
                      synthTensorRange(s, seed, b, e, buf.data());
                      w.append(buf.data(), (e - b) * es);
                    }
                    written += n * es;
                    if (progress) progress(++done, decls.size(), written);
                  });
  dir.commit();
}

} // namespace h3c::h3
