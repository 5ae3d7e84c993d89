// Model folders: a single `<prefix>.safetensors`, or `<prefix>.safetensors.index.json` naming numbered shards (the
// layout huggingface_hub's split_torch_state_dict_into_shards gives diffusers' save_pretrained).
#include "h3c/support/safetensors.h"

#include "h3c/support/error.h"
#include "h3c/support/json_read.h"

#include <algorithm>
#include <set>

namespace fs = std::filesystem;

namespace h3c::st {

std::string shardFileName(const std::string &prefix, int index, int count) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors", prefix, index, count);
}
std::string singleFileName(const std::string &prefix) { return prefix + ".safetensors"; }
std::string indexFileName(const std::string &prefix) { return prefix + ".safetensors.index.json"; }

Index parseIndex(const std::string &text, const std::string &where) {
  // Depth: the object (1), metadata / weight_map (2); nothing nests deeper.
  nlohmann::json j = parseJson(text, where, 2);
  if (!j.is_object())
    fail(where, "index must be a JSON object with metadata and weight_map");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "metadata" && it.key() != "weight_map")
      fail(where + "#/" + it.key(), "unknown key (expected metadata, weight_map)");
  if (!j.contains("metadata") || !j["metadata"].is_object())
    fail(where + "#/metadata", "expected an object with total_size");
  if (!j["metadata"].contains("total_size") || !j["metadata"]["total_size"].is_number_unsigned())
    fail(where + "#/metadata/total_size", "expected a non-negative integer");
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    fail(where + "#/weight_map", "expected an object of tensor name -> shard file");
  Index idx;
  idx.totalSize = j["metadata"]["total_size"].get<uint64_t>();
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string())
      fail(where + "#/weight_map/" + it.key(), "expected a shard file name, got {}", it->dump());
    std::string f = it->get<std::string>();
    // A plain file name in the folder: no path separators, no "." / "..", so an index can never point outside.
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
        f.find('\0') != std::string::npos)
      fail(where + "#/weight_map/" + it.key(), "shard '{}' is not a plain file name in the folder", f);
    idx.weightMap[it.key()] = f;
  }
  return idx;
}

std::string indexToJson(const Index &index) {
  nlohmann::json wm = nlohmann::json::object();
  for (const auto &[k, v] : index.weightMap)
    wm[k] = v;
  nlohmann::json j = {{"metadata", {{"total_size", index.totalSize}}}, {"weight_map", wm}};
  return j.dump(2) + "\n";
}

Folder::Folder(const fs::path &dir) : dir_(dir) {
  if (!fs::is_directory(dir))
    fail(dir.string(), "not a folder");
  std::vector<std::string> found;  // candidate layouts present
  for (const char *prefix : {kDiffusersPrefix, "model"}) {
    if (fs::exists(dir / indexFileName(prefix)))
      found.push_back(indexFileName(prefix));
    if (fs::exists(dir / singleFileName(prefix)))
      found.push_back(singleFileName(prefix));
  }
  if (found.empty())
    fail(dir.string(), "no {0}.safetensors, {0}.safetensors.index.json, model.safetensors or "
                       "model.safetensors.index.json in the folder",
         kDiffusersPrefix);
  if (found.size() > 1)
    fail(dir.string(), "ambiguous folder: both {} and {} are present", found[0], found[1]);
  const std::string &which = found[0];
  if (which.size() > 5 && which.compare(which.size() - 5, 5, ".json") == 0) {
    indexPath_ = dir / which;
    std::string where = indexPath_->string();
    Index idx = parseIndex(readFile(*indexPath_), where);
    std::map<std::string, const File *> byFile;
    for (const auto &[name, shard] : idx.weightMap) {
      if (!byFile.count(shard)) {
        if (!fs::is_regular_file(dir / shard))
          fail(where + "#/weight_map/" + name, "shard '{}' does not exist", shard);
        files_.push_back(std::make_unique<File>(dir / shard));
        byFile[shard] = files_.back().get();
      }
      const File *f = byFile[shard];
      const TensorInfo *t = f->find(name);
      if (!t)
        fail(where + "#/weight_map/" + name, "shard '{}' does not contain this tensor", shard);
      entries_.emplace(name, Entry{f, t});
    }
    uint64_t total = 0;
    for (const auto &[shard, f] : byFile) {
      for (const auto &t : f->tensors()) {
        auto it = idx.weightMap.find(t.name);
        if (it == idx.weightMap.end())
          fail(where, "shard '{}' holds tensor '{}', which the index does not list", shard, t.name);
        if (it->second != shard)
          fail(where, "tensor '{}' is in shard '{}' but the index lists it in '{}'", t.name, shard, it->second);
        total += t.nbytes();
      }
    }
    // A stray shard of this prefix that the index forgot would silently drop its tensors: refuse it.
    const std::string prefix = which.substr(0, which.size() - std::string(".safetensors.index.json").size());
    for (const auto &de : fs::directory_iterator(dir)) {
      const std::string fn = de.path().filename().string();
      if (fn.rfind(prefix + "-", 0) == 0 && fn.size() > 12 && fn.compare(fn.size() - 12, 12, ".safetensors") == 0 &&
          !byFile.count(fn))
        fail(where, "shard file '{}' is in the folder but not in the index", fn);
    }
    if (total != idx.totalSize)
      fail(where + "#/metadata/total_size", "is {} but the shards hold {} bytes of tensor data", idx.totalSize,
           total);
  } else {
    files_.push_back(std::make_unique<File>(dir / which));
    for (const auto &t : files_.back()->tensors())
      entries_.emplace(t.name, Entry{files_.back().get(), &t});
  }
  for (const auto &[name, e] : entries_)
    names_.push_back(name);
}

const Folder::Entry *Folder::find(const std::string &name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

const Folder::Entry &Folder::at(const std::string &name) const {
  const Entry *e = find(name);
  if (!e)
    fail(dir_.string(), "tensor '{}' is not in the checkpoint", name);
  return *e;
}

void writeFolder(const fs::path &dir, const std::string &prefix, const std::vector<TensorDecl> &tensors,
                 uint64_t shardSize, const std::map<std::string, std::string> &metadata, const FillFn &fill) {
  if (shardSize == 0)
    fail(dir.string(), "shard size must be positive");
  // Greedy, in the given order: a new shard starts when the next tensor would push the current one past the cap.
  std::vector<std::vector<TensorDecl>> shards(1);
  uint64_t cur = 0;
  for (const auto &t : tensors) {
    uint64_t nb = t.nbytes();
    if (!shards.back().empty() && (cur + nb > shardSize || cur + nb < cur)) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(t);
    cur += nb;
  }
  const int n = int(shards.size());
  Index idx;
  for (int i = 0; i < n; ++i) {
    std::string file = n == 1 ? singleFileName(prefix) : shardFileName(prefix, i + 1, n);
    Writer w(dir / file, shards[size_t(i)], metadata);
    for (const auto &info : w.order()) {
      w.begin(info.name);
      fill(info, w);
      idx.weightMap[info.name] = file;
      idx.totalSize += info.nbytes();
    }
    w.commit();
  }
  if (n > 1)
    writeFileAtomic(dir / indexFileName(prefix), indexToJson(idx));
}

} // namespace h3c::st
