// safetensors files and folders: a validating reader over a read-only memory map, a streaming writer, and the
// sharded folder layout of diffusers / huggingface_hub (`<prefix>.safetensors.index.json` + numbered shards).
//
// File format (H3-FACTS.md "safetensors"): 8-byte little-endian header length N (N <= 100,000,000), N bytes of UTF-8
// JSON object: name -> {"dtype", "shape", "data_offsets": [begin, end)} relative to the data section, and an optional
// "__metadata__" object of string -> string. Sorted by offset the tensors start at 0 and tile the data section with
// no gap and no overlap, end - begin = elements * dtype size, and the file ends exactly at the last end.
//
// The reader enforces every one of those rules, and more strictly than the reference: duplicate keys (at any level)
// and unknown keys in a tensor entry are errors. Nothing is ever read outside the mapped bytes. Errors are h3c::Error
// with `where` = the file path and a message naming the tensor.
#pragma once

#include "h3c/support/dtype.h"
#include "h3c/support/files.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace h3c::st {

inline constexpr uint64_t kMaxHeaderSize = 100000000;
// huggingface_hub / diffusers default: "5GB" = 5 * 10^9 bytes.
inline constexpr uint64_t kDefaultShardSize = 5000000000ull;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // [begin, end) relative to the data section
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

struct Header {
  uint64_t headerSize = 0;  // N
  uint64_t dataOffset = 0;  // 8 + N: where the data section starts in the file
  std::vector<TensorInfo> tensors;  // sorted by offset (the file's data order)
  std::map<std::string, std::string> metadata;
  const TensorInfo *find(const std::string &name) const;

  std::unordered_map<std::string, size_t> byName;  // name -> index into tensors
};

// Parses and validates a whole safetensors file held in `bytes` (`size` bytes). `where` names it in errors.
Header parseHeader(const uint8_t *bytes, size_t size, const std::string &where);

// One mapped, validated file.
class File {
public:
  explicit File(const std::filesystem::path &path);
  const Header &header() const { return header_; }
  const std::vector<TensorInfo> &tensors() const { return header_.tensors; }
  const TensorInfo *find(const std::string &name) const { return header_.find(name); }
  // The tensor's bytes inside the map (nbytes() of them). For an empty tensor the pointer may be one past the end.
  const uint8_t *data(const TensorInfo &t) const;
  const std::filesystem::path &path() const { return map_.path(); }
  uint64_t fileSize() const { return map_.size(); }

private:
  MappedFile map_;
  Header header_;
};

// A tensor to be written.
struct TensorDecl {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;  // throws on overflow / negative dims
};

// The byte-exact plan of a file: the order tensors are stored in (dtype alignment, largest first, then name, as the
// reference serializer does), their offsets, and the header bytes including the 8-byte length prefix (JSON padded
// with spaces to a multiple of 8). Throws on duplicate names.
struct FileLayout {
  std::string prefix;               // 8-byte length + header JSON + padding
  std::vector<TensorInfo> tensors;  // in storage order
  uint64_t fileSize = 0;
};
FileLayout planFile(const std::vector<TensorDecl> &tensors, const std::map<std::string, std::string> &metadata,
                    const std::string &where);

// Streams one file through an AtomicFileWriter: tensors must be written in order() (begin, then append their bytes in
// one or more pieces); commit() checks everything was written and renames the file into place.
class Writer {
public:
  Writer(std::filesystem::path path, const std::vector<TensorDecl> &tensors,
         const std::map<std::string, std::string> &metadata = {});
  const std::vector<TensorInfo> &order() const { return layout_.tensors; }
  void begin(const std::string &name);  // must be the next tensor of order()
  void append(const void *data, size_t size);
  void write(const std::string &name, const void *data, size_t size) {
    begin(name);
    append(data, size);
  }
  void commit();

private:
  void finishCurrent();
  std::filesystem::path path_;
  FileLayout layout_;
  AtomicFileWriter out_;
  size_t next_ = 0;     // index of the next tensor to begin
  bool open_ = false;   // a tensor is being appended to (tensor next_ - 1)
  uint64_t have_ = 0;   // bytes appended to the current tensor
};

// ---- folders ----------------------------------------------------------------------------------------------------
inline constexpr const char *kDiffusersPrefix = "diffusion_pytorch_model";
// "diffusion_pytorch_model-00001-of-00003.safetensors" (1-based, 5 digits, like huggingface_hub).
std::string shardFileName(const std::string &prefix, int index, int count);
std::string singleFileName(const std::string &prefix);  // "<prefix>.safetensors"
std::string indexFileName(const std::string &prefix);   // "<prefix>.safetensors.index.json"

// The index file: {"metadata": {"total_size": N, ...}, "weight_map": {name: shard file}}.
struct Index {
  uint64_t totalSize = 0;
  std::map<std::string, std::string> weightMap;
};
Index parseIndex(const std::string &text, const std::string &where);
std::string indexToJson(const Index &index);

// A model folder: either one `<prefix>.safetensors` or `<prefix>.safetensors.index.json` + its shards, for the
// prefixes "diffusion_pytorch_model" and "model". All files are mapped and validated on open; the index must agree
// exactly with the shards (every tensor listed once, in the shard it names, total_size = sum of tensor bytes).
class Folder {
public:
  explicit Folder(const std::filesystem::path &dir);
  struct Entry {
    const File *file;
    const TensorInfo *info;
  };
  const std::filesystem::path &dir() const { return dir_; }
  const std::vector<std::string> &names() const { return names_; }  // sorted
  const Entry *find(const std::string &name) const;
  const Entry &at(const std::string &name) const;  // throws naming the tensor
  const uint8_t *data(const Entry &e) const { return e.file->data(*e.info); }
  // The index file, when the folder is sharded.
  const std::optional<std::filesystem::path> &indexPath() const { return indexPath_; }
  const std::vector<std::unique_ptr<File>> &files() const { return files_; }

private:
  std::filesystem::path dir_;
  std::optional<std::filesystem::path> indexPath_;
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> names_;
};

// Writes a folder: tensors split greedily into shards of at most `shardSize` bytes of tensor data in the given order
// (a tensor larger than the cap gets a shard of its own); one shard is written as `<prefix>.safetensors` without an
// index. `fill` is called once per tensor, shard by shard, in each shard's storage order, after w.begin(info.name):
// it appends the tensor's bytes (w.append, in pieces). `dir` must exist (typically an AtomicDirectory's temp path).
using FillFn = std::function<void(const TensorInfo &info, Writer &w)>;
void writeFolder(const std::filesystem::path &dir, const std::string &prefix, const std::vector<TensorDecl> &tensors,
                 uint64_t shardSize, const std::map<std::string, std::string> &metadata, const FillFn &fill);

} // namespace h3c::st
