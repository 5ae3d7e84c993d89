// The unmerged LoRA slots of a plan and their values (lora_slots.h; docs/contract.md section 13).
#include "h3c/runtime/lora_slots.h"

#include "h3c/support/error.h"

#include <cmath>
#include <cstring>

namespace h3c::rt {

std::map<std::string, LoraSlotTarget> loraSlotTargets(const plan::Plan &p) {
  std::map<std::string, std::string> downSlotOf;  // lora_down output value -> its down slot
  std::map<std::string, LoraSlotTarget> out;
  for (const auto &[name, fn] : p.functions)
    for (const plan::Op &op : fn.ops) {
      if (op.kind == plan::OpKind::LoraDown) {
        downSlotOf[op.out.at(0)] = op.weights.at(0);
        continue;
      }
      if (!plan::takesLora(op.kind) || op.attrs.loraK == 0) continue;
      // (the plan reader checked the shapes and that lora_t is a lora_down output: checkLoraOperands)
      const size_t groups = op.kind == plan::OpKind::QkvLinear ? 3 : 1;
      int64_t row = 0;
      for (size_t g = 0; g < groups; ++g) {
        const plan::WeightTensor &w = p.weightTensor(op.weights.at(g));
        LoraSlotTarget t;
        t.down = downSlotOf.at(op.in.back());
        t.up = op.weights.back();
        t.group = int64_t(g);
        t.groups = int64_t(groups);
        t.rank = op.attrs.loraK / int64_t(groups);
        t.rowOffset = row;
        t.rows = w.shape.at(0);
        t.cols = w.shape.at(1);
        row += t.rows;
        if (!out.emplace(w.name, t).second) fail(op.where, "weight '{}' has two unmerged LoRA paths", w.name);
      }
    }
  return out;
}

std::map<std::string, Tensor> loraSlotValues(const plan::Plan &p, const std::map<std::string, LoraSlotTarget> &targets,
                                             const LoadedAdapters &adapters) {
  std::map<std::string, Tensor> slots;
  std::map<std::string, int64_t> used;  // base weight -> ranks taken by earlier modules
  auto slot = [&](const std::string &name) -> Tensor & {
    auto it = slots.find(name);
    if (it == slots.end()) {
      const plan::WeightTensor &t = p.weightTensor(name);
      it = slots.emplace(name, Tensor::zeros(DType::BF16, t.shape)).first;
    }
    return it->second;
  };
  auto put = [](Tensor &t, int64_t r, int64_t c, float v) {
    const uint16_t b = floatToBf16(v);
    std::memcpy(t.bytes.data() + size_t(r * t.shape[1] + c) * 2, &b, 2);
  };
  for (const auto &[adapter, scale] : adapters)
    for (const LoraModule &m : adapter->modules) {
      const std::string where = "lora:" + adapter->path + ":" + m.target;
      auto it = targets.find(m.target);
      if (it == targets.end()) continue;  // no slot serves it: the engine merges it (section 12)
      const LoraSlotTarget &t = it->second;
      if (m.down.shape != std::vector<int64_t>{m.rank, t.cols} || m.up.shape != std::vector<int64_t>{t.rows, m.rank} ||
          m.down.dtype != DType::F32 || m.up.dtype != DType::F32)
        fail(where, "factors {} and {} do not fit the weight [{}, {}] (F32 lora_A [rank, in], lora_B [out, rank])",
             shapeText(m.down.shape), shapeText(m.up.shape), t.rows, t.cols);
      int64_t &off = used[m.target];
      if (off + m.rank > t.rank)
        fail(where, "rank {} after {} loaded before exceeds the plan's LoRA slot rank {} (compile with a larger "
             "--lora-rank)", m.rank, off, t.rank);
      const float s = loraTermScale(m, scale);
      const std::vector<float> down = m.down.toFloats(), up = m.up.toFloats();
      Tensor &d = slot(t.down), &u = slot(t.up);
      const int64_t c0 = t.group * t.rank + off;
      for (int64_t k = 0; k < m.rank; ++k)
        for (int64_t j = 0; j < t.cols; ++j) put(d, c0 + k, j, down[size_t(k * t.cols + j)]);
      for (int64_t i = 0; i < t.rows; ++i)
        for (int64_t k = 0; k < m.rank; ++k) {
          const float v = s * up[size_t(i * m.rank + k)];  // one rounded float multiply (-ffp-contract=off)
          if (!std::isfinite(roundBf16(v)))
            fail(where, "the scaled lora_B element [{}, {}] ({} x {}) is not finite in BF16", i, k, s,
                 up[size_t(i * m.rank + k)]);
          put(u, t.rowOffset + i, c0 + k, v);
        }
      off += m.rank;
    }
  return slots;
}

} // namespace h3c::rt
