// `h3c checkpoint snapshot | check | map`: hashing a folder's tensors, comparing them with a tensor list, and
// converting between the diffusers and native namings without ever holding more than the memory maps.
#include "h3c/models/checkpoint.h"

#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"
#include "h3c/support/sha256.h"

#include <algorithm>
#include <set>

namespace fs = std::filesystem;

namespace h3c::h3 {

namespace {

std::string specText(DType t, const std::vector<int64_t> &shape) {
  return std::string(dtypeName(t)) + " " + shapeText(shape);
}

// Hashes a mapped range in 64 MB steps (the map is read once, sequentially).
std::string hashRange(const uint8_t *p, uint64_t n) {
  Sha256 h;
  constexpr uint64_t kStep = 64ull << 20;
  for (uint64_t at = 0; at < n; at += kStep)
    h.update(p + at, size_t(std::min(kStep, n - at)));
  return h.hexDigest();
}

// The snapshot's "tensors": name, dtype, shape and sha256 of every stored tensor, in name order.
nlohmann::json tensorHashList(const st::Folder &folder, const std::vector<std::string> &sha) {
  const std::vector<std::string> &names = folder.names();
  if (sha.size() != names.size())
    fail(folder.dir().string(), "internal error: {} tensor hashes for {} stored tensors", sha.size(), names.size());
  nlohmann::json tensors = nlohmann::json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    const auto &e = folder.at(names[i]);
    tensors.push_back({{"name", names[i]},
                       {"dtype", std::string(dtypeName(e.info->dtype))},
                       {"shape", e.info->shape},
                       {"sha256", sha[i]}});
  }
  return tensors;
}

std::string contentSha256Of(const nlohmann::json &tensors) {
  return sha256Hex(canonicalJson(nlohmann::json{{"tensors", tensors}}));
}

} // namespace

std::string contentSha256(const st::Folder &folder, const std::vector<std::string> &tensorSha256) {
  return contentSha256Of(tensorHashList(folder, tensorSha256));
}

nlohmann::json snapshotCheckpoint(const fs::path &dir) {
  st::Folder folder(dir);
  const std::vector<std::string> names = folder.names();  // sorted
  // The tensors' hashes are independent: threads take tensors in turn (largest first, so the last ones are short),
  // and the list is assembled in name order, so the snapshot is the same at any thread count. A 66 GB checkpoint in
  // the page cache hashes at the memory bandwidth of the cores instead of one core's sha256 rate.
  std::vector<std::string> sha(names.size());
  std::vector<size_t> order(names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return folder.at(names[a]).info->nbytes() > folder.at(names[b]).info->nbytes();
  });
  // An error is rethrown on the calling thread (a shard truncated under us is no exception: SIGBUS ends the
  // process, installMappedFileFaultHandler).
  parallelForEach(order.size(), 0, [&](size_t k) {
    const auto &e = folder.at(names[order[k]]);
    sha[order[k]] = hashRange(folder.data(e), e.info->nbytes());
  });
  nlohmann::json tensors = tensorHashList(folder, sha);
  nlohmann::json snap;
  snap["schema"] = "h3c-checkpoint-snapshot-v1";
  snap["format"] = formatName(detectFormat(folder));
  snap["index_sha256"] = folder.indexPath() ? nlohmann::json(sha256File(*folder.indexPath())) : nlohmann::json();
  snap["config_sha256"] =
      fs::is_regular_file(dir / "config.json") ? nlohmann::json(sha256File(dir / "config.json")) : nlohmann::json();
  snap["tensor_count"] = tensors.size();
  snap["content_sha256"] = contentSha256Of(tensors);
  snap["tensors"] = std::move(tensors);
  return snap;
}

void detail::compareSpec(CheckReport &r, const TensorSpec &want, DType dtype, const std::vector<int64_t> &shape,
                         bool castAllowed) {
  if (dtype == want.dtype && shape == want.shape)
    return;
  const bool f32 = castsToBf16(dtype, want.dtype) && shape == want.shape;
  if (f32 && castAllowed) {
    r.cast.push_back(want.name);
    return;
  }
  r.mismatched.push_back(want.name + ": expected " + specText(want.dtype, want.shape) + ", stored " +
                         specText(dtype, shape) +
                         (f32 ? " (F32 is read as BF16 only from a folder in diffusers naming)" : ""));
}

CheckReport compareTensors(const std::vector<TensorSpec> &expected, const st::Folder &stored,
                           CheckpointFormat format) {
  CheckReport r;
  r.expected = expected.size();
  std::set<std::string> want;
  for (const auto &t : expected) {
    want.insert(t.name);
    const auto *e = stored.find(t.name);
    if (!e)
      r.missing.push_back(t.name);
    else
      detail::compareSpec(r, t, e->info->dtype, e->info->shape, format == CheckpointFormat::Diffusers);
  }
  for (const auto &n : stored.names())
    if (!want.count(n))
      r.unexpected.push_back(n);
  return r;
}

CheckReport checkCheckpoint(const fs::path &dir, const ExpectedTensors *expected) {
  st::Folder folder(dir);
  ExpectedTensors fromConfig;
  if (!expected) {
    fromConfig.config = readCheckpointConfig(dir);
    fromConfig.tensors = diffusersTensors(fromConfig.config);
    expected = &fromConfig;
  }
  if (detectFormat(folder) == CheckpointFormat::Native)
    return compareTensors(nativeTensors(expected->tensors, expected->config), folder, CheckpointFormat::Native);
  return compareTensors(expected->tensors, folder, CheckpointFormat::Diffusers);
}

void mapCheckpoint(const fs::path &in, const fs::path &out, CheckpointFormat to, std::optional<QkvLayout> layoutOpt,
                   uint64_t shardSize, const std::optional<Config> &configOpt, const WriteProgress &progress) {
  std::optional<QkvLayout> recorded;
  std::optional<CheckpointFormat> recordedFormat;
  const Config cfg = configOpt ? *configOpt : readCheckpointConfig(in, &recorded, &recordedFormat);
  st::Folder folder(in);
  const CheckpointFormat from = detectFormat(folder);
  detail::checkRecordedFormat(in, recordedFormat, from);
  if (from == to)
    fail(in.string(), "is already in {} naming", formatName(to));
  if (from == CheckpointFormat::Native && layoutOpt && recorded && *layoutOpt != *recorded)
    fail(in.string(), "config.json records qkv layout '{}' but --qkv-layout {} was given", qkvLayoutName(*recorded),
         qkvLayoutName(*layoutOpt));
  QkvLayout layout = layoutOpt ? *layoutOpt
                               : (from == CheckpointFormat::Native ? recorded.value_or(QkvLayout::Interleaved)
                                                                   : QkvLayout::Interleaved);
  const auto diffusers = diffusersTensors(cfg);
  // The input must hold exactly the tensors of its naming, with the config's shapes and dtypes: anything else
  // (an unmapped name, a missing piece of a q/k/v set, a wrong shape or dtype) fails before OUT is created.
  std::vector<TensorSpec> inputList =
      from == CheckpointFormat::Native ? nativeTensors(diffusers, cfg) : diffusers;
  std::set<std::string> inputNames;
  for (const auto &t : inputList) {
    inputNames.insert(t.name);
    const auto *e = folder.find(t.name);
    if (!e) {
      if (t.name == kRopeInvFreq)
        continue;  // derived data: recomputed from the config when absent
      bool qkv = t.name.find(".attn.to_q.") != std::string::npos || t.name.find(".attn.to_k.") != std::string::npos ||
                 t.name.find(".attn.to_v.") != std::string::npos;
      fail(in.string(), "{}tensor '{}' is missing", qkv ? "incomplete q/k/v set: " : "", t.name);
    }
    if (e->info->dtype != t.dtype || e->info->shape != t.shape)
      fail(in.string(), "tensor '{}': stored {} but the config implies {}", t.name,
           specText(e->info->dtype, e->info->shape), specText(t.dtype, t.shape));
  }
  for (const auto &n : folder.names())
    if (!inputNames.count(n))
      fail(in.string(), "unmapped tensor '{}': not a {} MiniMax-H3 tensor of this config", n, formatName(from));
  std::vector<MappedTensor> plan = to == CheckpointFormat::Native ? nativeFromDiffusers(diffusers, cfg, layout)
                                                                  : diffusersFromNative(diffusers, cfg, layout);
  if (from == CheckpointFormat::Native) {
    // Validates rope.inv_freq when present (Checkpoint::open performs the same check).
    OpenOptions o;
    o.config = cfg;
    o.qkvLayout = layout;
    Checkpoint::open(in, o);
  }
  std::map<std::string, const MappedTensor *> byName;
  std::vector<st::TensorDecl> decls;
  for (const auto &m : plan) {
    byName[m.spec.name] = &m;
    decls.push_back(st::TensorDecl{m.spec.name, m.spec.dtype, m.spec.shape});
  }
  const std::vector<float> rope = ropeInvFreq(cfg);
  AtomicDirectory dir(detail::outputFolder(out));
  writeFileAtomic(dir.tempPath() / "config.json", checkpointConfigJson(cfg, to, layout).dump(2) + "\n");
  size_t done = 0;
  uint64_t written = 0;
  st::writeFolder(dir.tempPath(), to == CheckpointFormat::Native ? kNativePrefix : st::kDiffusersPrefix, decls,
                  shardSize, {{"format", "pt"}}, [&](const st::TensorInfo &info, st::Writer &w) {
                    const MappedTensor &m = *byName.at(info.name);
                    if (m.spec.name == kRopeInvFreq && m.pieces.empty()) {
                      w.append(rope.data(), rope.size() * sizeof(float));
                    } else {
                      for (const auto &p : m.pieces) {
                        const auto &e = folder.at(p.source);
                        if (p.offset > e.info->nbytes() || p.length > e.info->nbytes() - p.offset)
                          fail(p.source, "internal error: piece outside the tensor");
                        w.append(folder.data(e) + p.offset, p.length);
                      }
                    }
                    written += info.nbytes();
                    if (progress) progress(++done, decls.size(), written);
                  });
  dir.commit();
}

} // namespace h3c::h3
