// MiniMax-H3 checkpoints: open a diffusers or a native (vLLM-Omni / raw release) model folder and read tensors by
// their DIFFUSERS name; the synthetic-weight generator shared with the runtime; the Diffusers <-> native mapping;
// snapshot / check / synth / map as used by `h3c checkpoint`.
//
// Folders: `config.json` (diffusers keys; keys starting with '_' are metadata) plus safetensors files, single or
// sharded with an index (see safetensors.h). The naming is detected from the tensor names (native folders have
// `blocks.N...`, `video_patch_proj...`, `rope.inv_freq`). Folders h3c writes in native naming also carry
// `"_h3c_format": "native"` and `"_h3c_qkv_layout": "interleaved"|"concat"` in config.json.
//
// Native layout (H3-FACTS.md "Native naming"): `attn.qkv_proj.weight` [3*I, H] holds to_q/to_k/to_v. Interleaved
// (the default: the raw release and vLLM-Omni's loader) stores per head h the rows [q_h; k_h; v_h], head_dim rows
// each; concat stores [Q; K; V]. `mlp.fc1.weight` = [gate; value] while diffusers' `ff.net.0.proj.weight` =
// [value; gate].
#pragma once

#include "h3c/models/config.h"
#include "h3c/support/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace h3c::h3 {

enum class QkvLayout { Interleaved, Concat };
QkvLayout parseQkvLayout(const std::string &s);  // "interleaved" | "concat", else throws
const char *qkvLayoutName(QkvLayout l);

enum class CheckpointFormat { Diffusers, Native };
const char *formatName(CheckpointFormat f);

inline constexpr const char *kClassName = "MiniMaxH3Transformer3DModel";
inline constexpr const char *kRopeInvFreq = "rope.inv_freq";

// ---- synthetic weights ------------------------------------------------------------------------------------------
// Element i of tensor `spec` for seed S (synth_rng.h): Init::Normal -> normalish(tensorKey(S, name), i,
// 0.02 * H3C_SYNTH_UNIT_SCALE) (std 0.02), Init::Ones -> 1, Init::Zeros -> 0; stored in spec.dtype (F32, or BF16
// rounded with floatToBf16). Other dtypes are errors.
inline constexpr double kSynthWeightStd = 0.02;
float synthValue(const TensorSpec &spec, uint64_t seed, uint64_t index);  // before the dtype rounding
// Fills `dst` with all numel() elements (numel() * dtypeSize bytes).
void synthTensor(const TensorSpec &spec, uint64_t seed, void *dst);
// Fills `dst` with elements [begin, end) only (so big tensors can be produced in pieces).
void synthTensorRange(const TensorSpec &spec, uint64_t seed, uint64_t begin, uint64_t end, void *dst);

// ---- Diffusers <-> native naming ----------------------------------------------------------------------------------
// 1/theta^(arange(0, 2f, 2) / (2f)) for f = rope_freq_dim in F32 steps like the reference: [rope_freq_dim].
std::vector<float> ropeInvFreq(const Config &c);

// A tensor of one naming assembled from byte ranges of tensors of the other naming, concatenated in order.
struct SourcePiece {
  std::string source;  // tensor name in the other naming
  uint64_t offset = 0, length = 0;  // byte range of the source tensor
};
struct MappedTensor {
  TensorSpec spec;  // name / shape / dtype in the target naming
  std::vector<SourcePiece> pieces;  // empty for rope.inv_freq (computed from the config)
};

// The native tensors (534 + rope.inv_freq for the full config) built from a complete diffusers tensor list (from
// diffusersTensors(c) or a fingerprint). Throws when the list is not the complete, consistent set the config implies
// (an unmapped name, an incomplete q/k/v set, a shape or dtype that disagrees).
std::vector<MappedTensor> nativeFromDiffusers(const std::vector<TensorSpec> &diffusers, const Config &c,
                                              QkvLayout layout);
// The diffusers tensors (638) built from native ones; `pieces` name native tensors. Same list argument and checks.
std::vector<MappedTensor> diffusersFromNative(const std::vector<TensorSpec> &diffusers, const Config &c,
                                              QkvLayout layout);
// Specs only: the native tensor list (rope.inv_freq included).
std::vector<TensorSpec> nativeTensors(const std::vector<TensorSpec> &diffusers, const Config &c);
// True when a stored name is in native naming (decides the folder format).
bool isNativeName(const std::string &name);

// ---- opening a checkpoint ---------------------------------------------------------------------------------------
struct OpenOptions {
  std::optional<Config> config;        // default: DIR/config.json
  std::optional<QkvLayout> qkvLayout;  // native folders: default config.json's _h3c_qkv_layout, else interleaved
};

// The bytes of one tensor: `data` points into the mapped file (zero-copy) or into `owned` (assembled from native
// pieces).
struct TensorBytes {
  const uint8_t *data = nullptr;
  size_t size = 0;
  std::vector<uint8_t> owned;
  bool zeroCopy() const { return owned.empty() && size > 0; }
};

class Checkpoint {
public:
  // Opens and validates DIR. A diffusers folder exposes every stored tensor. A native folder must be complete: every
  // stored name maps (rope.inv_freq must equal ropeInvFreq(config) to 1e-6 relative), every diffusers tensor of
  // the config can be assembled with its shape and dtype; otherwise an error names the tensor.
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path &dir, const OpenOptions &opts = {});

  CheckpointFormat format() const { return format_; }
  const Config &config() const { return config_; }
  QkvLayout qkvLayout() const { return layout_; }
  const st::Folder &storage() const { return *folder_; }

  // Tensors by diffusers name: a diffusers folder in storage-name order, a native folder in diffusersTensors order.
  const std::vector<TensorSpec> &tensors() const { return tensors_; }
  const TensorSpec *find(const std::string &diffusersName) const;
  uint64_t nbytes(const std::string &diffusersName) const;
  // The stored bytes when the tensor is one contiguous stored range (always for diffusers folders; for native
  // folders the renamed tensors and, with the concat layout, q/k/v), else nullptr.
  const uint8_t *view(const std::string &diffusersName) const;
  // Copies bytes [offset, offset + size) of the tensor (in diffusers layout) to dst; works for every tensor.
  void read(const std::string &diffusersName, uint64_t offset, uint64_t size, void *dst) const;
  void read(const std::string &diffusersName, void *dst) const { read(diffusersName, 0, nbytes(diffusersName), dst); }
  TensorBytes bytes(const std::string &diffusersName) const;

  ~Checkpoint();

private:
  Checkpoint() = default;
  struct Slot;
  const Slot &slot(const std::string &name) const;
  CheckpointFormat format_ = CheckpointFormat::Diffusers;
  Config config_;
  QkvLayout layout_ = QkvLayout::Interleaved;
  std::unique_ptr<st::Folder> folder_;
  std::vector<TensorSpec> tensors_;
  std::vector<Slot> slots_;  // parallel to tensors_
  std::unordered_map<std::string, size_t> byName_;
};

// Detects the naming of a folder's stored tensors (throws when it mixes both).
CheckpointFormat detectFormat(const st::Folder &folder);
// config.json of a folder: the diffusers config keys + _class_name (+ _h3c_format/_h3c_qkv_layout when native).
nlohmann::json checkpointConfigJson(const Config &c, CheckpointFormat f, QkvLayout layout);
// Reads DIR/config.json (checks _class_name when present); `qkvLayout` / `format` receive _h3c_qkv_layout /
// _h3c_format when present. A recorded format must agree with the stored names (checked by open and map).
Config readCheckpointConfig(const std::filesystem::path &dir, std::optional<QkvLayout> *qkvLayout = nullptr,
                            std::optional<CheckpointFormat> *format = nullptr);

struct CheckReport;
// Reads DIR/config.json and checks that it describes `want`, key by key: the first key that differs is an error
// naming it ("DIR/config.json#/num_layers: is 40 but the plan was compiled for 50: the <what> describes another
// model"). Returns the native q/k/v layout it records, when it records one.
std::optional<QkvLayout> checkFolderConfig(const std::filesystem::path &dir, const Config &want,
                                           const std::string &what);

namespace detail {
// Adds how a stored tensor (`dtype`, `shape`) compares with `want` to `r`: nothing when equal, a cast (F32 for BF16,
// same shape, when `castAllowed`), else a mismatch.
void compareSpec(CheckReport &r, const TensorSpec &want, DType dtype, const std::vector<int64_t> &shape,
                 bool castAllowed);
// Throws when config.json's _h3c_format (when recorded) disagrees with the naming of the stored tensors.
void checkRecordedFormat(const std::filesystem::path &dir, std::optional<CheckpointFormat> recorded,
                         CheckpointFormat stored);
// "out/" -> "out", "a/./b" -> "a/b": an output folder path with a file name, so that AtomicDirectory's temp sibling
// lands beside it, not inside it.
std::filesystem::path outputFolder(const std::filesystem::path &p);
} // namespace detail

// ---- the `h3c checkpoint` operations -----------------------------------------------------------------------------
// Snapshot: {"schema": "h3c-checkpoint-snapshot-v1", "format", "index_sha256" (null when single-file),
// "tensors": [{"name", "dtype", "shape", "sha256"} sorted by name], "content_sha256"}; content_sha256 = sha256 of
// canonicalJson({"tensors": [...]}), independent of the sharding.
nlohmann::json snapshotCheckpoint(const std::filesystem::path &dir);
// The snapshot's content_sha256 from the sha256 of every stored tensor of `folder` (in names() order), as a load
// that hashes the tensors while it reads them computes it: no byte is read again.
std::string contentSha256(const st::Folder &folder, const std::vector<std::string> &tensorSha256);

// Float32 folders: a diffusers folder saved in float32 (save_pretrained without torch_dtype, what a trainer holding
// float32 master weights writes) stores F32 where the config implies BF16. Such a tensor, with exactly the implied
// shape, is read as BF16 rounded to nearest even (floatToBf16: torch's .to(torch.bfloat16) for every non-NaN value;
// NaN stays NaN), and NaN / Inf are judged after that rounding. Only F32 -> BF16 and only in diffusers naming: every
// other dtype difference, and an F32 tensor of a native-named folder, is a mismatch.
inline bool castsToBf16(DType stored, DType expected) { return stored == DType::F32 && expected == DType::BF16; }

struct CheckReport {
  std::vector<std::string> missing;     // expected, not stored
  std::vector<std::string> unexpected;  // stored, not expected
  std::vector<std::string> mismatched;  // "name: expected BF16 [..], stored F16 [..]"
  std::vector<std::string> cast;        // stored F32 where BF16 is expected (diffusers naming): read as BF16
  size_t expected = 0;                  // how many tensors were expected
  // A cast is no difference: the folder loads (the load records the cast).
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};
// Compares stored tensors (by stored name and layout) with `expected` diffusers specs (mapped to native names when the
// folder is native). Without `expected`, diffusersTensors(DIR/config.json). F32 stored for BF16 is a cast in a
// diffusers folder, a mismatch (that says why) in a native one.
struct ExpectedTensors {
  Config config;  // for the native mapping (heads, head_dim, ffn, rope)
  std::vector<TensorSpec> tensors;  // diffusers naming
};
CheckReport checkCheckpoint(const std::filesystem::path &dir, const ExpectedTensors *expected = nullptr);
// `format`: the naming of `stored` (decides whether F32 for BF16 is a cast).
CheckReport compareTensors(const std::vector<TensorSpec> &expected, const st::Folder &stored,
                           CheckpointFormat format);
// The same by diffusers name for an opened checkpoint (what the runtime checks against a fingerprint's tensors).
CheckReport compareTensors(const std::vector<TensorSpec> &expected, const Checkpoint &ck);

// Writes a diffusers folder with synthetic weights (config.json, shards, index), streaming: memory stays bounded by
// 4 MB per generating thread (at most 16) whatever the model size. OUT must not exist; it appears complete or not at
// all.
// `progress` (optional) is called after every tensor written: tensors done, of total, bytes written so far.
using WriteProgress = std::function<void(size_t done, size_t total, uint64_t bytes)>;
void synthCheckpoint(const Config &c, uint64_t seed, const std::filesystem::path &out,
                     uint64_t shardSize = st::kDefaultShardSize, const WriteProgress &progress = {});

// Converts IN (either naming) to OUT in naming `to`, streaming tensor by tensor, shard by shard. Bitwise: map to
// native and back gives the same tensor bytes. Fails closed (no OUT) on anything that does not map exactly.
// `layout`: the native qkv layout to write, or to read (default: IN's config.json _h3c_qkv_layout, else
// interleaved; an explicit layout that contradicts the recorded one is an error).
// `config`: use this config instead of IN/config.json (e.g. for a raw native release whose config.json has other
// keys); OUT/config.json is always written in h3c's form.
void mapCheckpoint(const std::filesystem::path &in, const std::filesystem::path &out, CheckpointFormat to,
                   std::optional<QkvLayout> layout = std::nullopt, uint64_t shardSize = st::kDefaultShardSize,
                   const std::optional<Config> &config = std::nullopt, const WriteProgress &progress = {});
// Native folders h3c writes use the huggingface_hub default prefix "model" (model.safetensors[.index.json]).
inline constexpr const char *kNativePrefix = "model";

} // namespace h3c::h3
