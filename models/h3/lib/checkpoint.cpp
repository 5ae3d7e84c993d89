// Opening a checkpoint folder and reading tensors by diffusers name. A diffusers folder is served straight from the
// memory maps; a native folder is validated completely on open (fail closed) and each diffusers tensor is described
// as a list of byte ranges inside the mapped native tensors, assembled on demand.
#include "h3c/models/checkpoint.h"

#include "h3c/support/error.h"
#include "h3c/support/json_read.h"

#include <cmath>
#include <cstring>
#include <set>

namespace fs = std::filesystem;

namespace h3c::h3 {

struct Checkpoint::Slot {
  std::vector<std::pair<const uint8_t *, uint64_t>> pieces;  // mapped byte ranges, concatenated
  uint64_t nbytes = 0;
};

Checkpoint::~Checkpoint() = default;

namespace {

bool startsWith(const std::string &s, const char *p) { return s.rfind(p, 0) == 0; }

bool isDiffusersOnlyName(const std::string &n) {
  for (const char *p : {"transformer_blocks.", "token_refiner.refiner_blocks.", "proj_in.", "audio_proj_in.",
                        "context_embedder.", "time_embedder.linear_1.", "time_embedder.linear_2.", "norm_out.",
                        "proj_out.", "audio_proj_out."})
    if (startsWith(n, p))
      return true;
  return false;
}

} // namespace

CheckpointFormat detectFormat(const st::Folder &folder) {
  const std::string *native = nullptr, *diffusers = nullptr;
  for (const auto &n : folder.names()) {
    if (!native && isNativeName(n))
      native = &n;
    if (!diffusers && isDiffusersOnlyName(n))
      diffusers = &n;
  }
  if (native && diffusers)
    fail(folder.dir().string(), "mixes diffusers names ('{}') and native names ('{}')", *diffusers, *native);
  return native ? CheckpointFormat::Native : CheckpointFormat::Diffusers;
}

nlohmann::json checkpointConfigJson(const Config &c, CheckpointFormat f, QkvLayout layout) {
  nlohmann::json j = configToJson(c);
  j["_class_name"] = kClassName;
  if (f == CheckpointFormat::Native) {
    j["_h3c_format"] = "native";
    j["_h3c_qkv_layout"] = qkvLayoutName(layout);
  }
  return j;
}

namespace {

// config.json of a folder, parsed (depth: the object (1) and patch_size (2)); missing is an error.
nlohmann::json readConfigJson(const fs::path &p) {
  if (!fs::is_regular_file(p))
    fail(p.string(), "missing: a model folder needs config.json (diffusers config keys)");
  nlohmann::json j = parseJson(readFile(p), p.string(), 2);
  if (!j.is_object())
    fail(p.string(), "config must be a JSON object");
  return j;
}

// The keys h3c reads besides the config: _class_name (checked), _h3c_format and _h3c_qkv_layout (returned).
void readMarks(const nlohmann::json &j, const fs::path &p, std::optional<QkvLayout> *qkvLayout,
               std::optional<CheckpointFormat> *format) {
  if (j.contains("_class_name") && j["_class_name"] != kClassName)
    fail(p.string() + "#/_class_name", "expected \"{}\", got {}", kClassName, j["_class_name"].dump());
  if (format)
    format->reset();
  if (j.contains("_h3c_format")) {
    const auto &v = j["_h3c_format"];
    if (!v.is_string() || (v != "native" && v != "diffusers"))
      fail(p.string() + "#/_h3c_format", "expected \"native\" or \"diffusers\", got {}", v.dump());
    if (format)
      *format = v == "native" ? CheckpointFormat::Native : CheckpointFormat::Diffusers;
  }
  if (qkvLayout)
    qkvLayout->reset();
  if (j.contains("_h3c_qkv_layout")) {
    const auto &v = j["_h3c_qkv_layout"];
    if (!v.is_string() || (v != "interleaved" && v != "concat"))
      fail(p.string() + "#/_h3c_qkv_layout", "expected \"interleaved\" or \"concat\", got {}", v.dump());
    if (qkvLayout)
      *qkvLayout = parseQkvLayout(v.get<std::string>());
  }
}

} // namespace

Config readCheckpointConfig(const fs::path &dir, std::optional<QkvLayout> *qkvLayout,
                            std::optional<CheckpointFormat> *format) {
  fs::path p = dir / "config.json";
  nlohmann::json j = readConfigJson(p);
  readMarks(j, p, qkvLayout, format);
  return configFromJson(j, p.string() + "#");
}

std::optional<QkvLayout> checkFolderConfig(const fs::path &dir, const Config &want, const std::string &what) {
  std::optional<QkvLayout> layout;
  const nlohmann::json w = configToJson(want), have = configToJson(readCheckpointConfig(dir, &layout));
  for (auto it = w.begin(); it != w.end(); ++it)
    if (!have.contains(it.key()) || have[it.key()] != it.value())
      fail((dir / "config.json").string() + "#/" + it.key(), "is {} but the plan was compiled for {}: the {} describes "
           "another model", have.contains(it.key()) ? have[it.key()].dump() : "missing", it.value().dump(), what);
  return layout;
}

void detail::checkRecordedFormat(const fs::path &dir, std::optional<CheckpointFormat> recorded,
                                 CheckpointFormat stored) {
  if (recorded && *recorded != stored)
    fail((dir / "config.json").string() + "#/_h3c_format", "says {} but the stored tensors have {} names",
         formatName(*recorded), formatName(stored));
}

fs::path detail::outputFolder(const fs::path &p) {
  fs::path n = p.lexically_normal();
  while (!n.empty() && !n.has_filename() && n.has_parent_path() && n.parent_path() != n)
    n = n.parent_path();
  if (n.empty() || n.filename() == "." || n.filename() == "..")
    fail(p.string(), "not a usable output folder name");
  return n;
}

// Checks a native folder's rope.inv_freq against the config (to 1e-6 relative: it is derived data, and other
// writers may have rounded pow differently by an ulp).
static void checkRope(const st::Folder &folder, const Config &c) {
  const auto *e = folder.find(kRopeInvFreq);
  if (!e)
    return;
  const std::string where = folder.dir().string() + ": " + kRopeInvFreq;
  if (e->info->dtype != DType::F32 || e->info->shape != std::vector<int64_t>{c.rope_freq_dim})
    fail(where, "expected F32 [{}], stored {} {}", c.rope_freq_dim, dtypeName(e->info->dtype),
         shapeText(e->info->shape));
  auto want = ropeInvFreq(c);
  const uint8_t *p = folder.data(*e);
  for (size_t i = 0; i < want.size(); ++i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    if (!(std::fabs(double(v) - double(want[i])) <= 1e-6 * std::fabs(double(want[i]))))
      fail(where, "element {} is {} but rope_theta {} and rope_freq_dim {} give {}", i, v, c.rope_theta,
           c.rope_freq_dim, want[i]);
  }
}

std::unique_ptr<Checkpoint> Checkpoint::open(const fs::path &dir, const OpenOptions &opts) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  std::optional<QkvLayout> recorded;
  std::optional<CheckpointFormat> recordedFormat;
  if (opts.config) {
    // The given config replaces config.json's keys (a raw release's may differ), but never its record of how the
    // tensors are laid out: a concat folder read as interleaved is silently a different model.
    ck->config_ = *opts.config;
    if (fs::exists(dir / "config.json"))
      readMarks(readConfigJson(dir / "config.json"), dir / "config.json", &recorded, &recordedFormat);
  } else
    ck->config_ = readCheckpointConfig(dir, &recorded, &recordedFormat);
  ck->folder_ = std::make_unique<st::Folder>(dir);
  ck->format_ = detectFormat(*ck->folder_);
  detail::checkRecordedFormat(dir, recordedFormat, ck->format_);
  const st::Folder &f = *ck->folder_;
  if (ck->format_ == CheckpointFormat::Diffusers) {
    for (const auto &name : f.names()) {
      const auto &e = f.at(name);
      ck->tensors_.push_back(TensorSpec{name, e.info->shape, e.info->dtype});
      Slot s;
      s.nbytes = e.info->nbytes();
      s.pieces.push_back({f.data(e), s.nbytes});
      ck->slots_.push_back(std::move(s));
    }
  } else {
    if (opts.qkvLayout && recorded && *opts.qkvLayout != *recorded)
      fail(dir.string(), "config.json records qkv layout '{}' but '{}' was asked for", qkvLayoutName(*recorded),
           qkvLayoutName(*opts.qkvLayout));
    ck->layout_ = opts.qkvLayout ? *opts.qkvLayout : recorded.value_or(QkvLayout::Interleaved);
    const auto diffusers = diffusersTensors(ck->config_);
    // Every stored native tensor must be one the config implies, with its shape and dtype.
    std::map<std::string, TensorSpec> native;
    for (auto &t : nativeTensors(diffusers, ck->config_))
      native.emplace(t.name, std::move(t));
    for (const auto &name : f.names()) {
      auto it = native.find(name);
      if (it == native.end())
        fail(dir.string(), "unmapped tensor '{}': not a native MiniMax-H3 tensor of this config", name);
      const auto &e = f.at(name);
      if (e.info->dtype != it->second.dtype || e.info->shape != it->second.shape)
        fail(dir.string(), "tensor '{}': stored {} {} but the config implies {} {}", name, dtypeName(e.info->dtype),
             shapeText(e.info->shape), dtypeName(it->second.dtype), shapeText(it->second.shape));
    }
    checkRope(f, ck->config_);
    for (const auto &m : diffusersFromNative(diffusers, ck->config_, ck->layout_)) {
      Slot s;
      for (const auto &p : m.pieces) {
        const auto *e = f.find(p.source);
        if (!e)
          fail(dir.string(), "native tensor '{}' is missing (diffusers '{}' is built from it)", p.source,
               m.spec.name);
        s.pieces.push_back({f.data(*e) + p.offset, p.length});
        s.nbytes += p.length;
      }
      ck->tensors_.push_back(m.spec);
      ck->slots_.push_back(std::move(s));
    }
  }
  for (size_t i = 0; i < ck->tensors_.size(); ++i)
    ck->byName_.emplace(ck->tensors_[i].name, i);
  return ck;
}

const Checkpoint::Slot &Checkpoint::slot(const std::string &name) const {
  auto it = byName_.find(name);
  if (it == byName_.end())
    fail(folder_->dir().string(), "tensor '{}' is not in the checkpoint", name);
  return slots_[it->second];
}

CheckReport compareTensors(const std::vector<TensorSpec> &expected, const Checkpoint &ck) {
  CheckReport r;
  r.expected = expected.size();
  std::set<std::string> want;
  for (const auto &t : expected) {
    want.insert(t.name);
    const TensorSpec *s = ck.find(t.name);
    if (!s)
      r.missing.push_back(t.name);
    else
      detail::compareSpec(r, t, s->dtype, s->shape, ck.format() == CheckpointFormat::Diffusers);
  }
  for (const auto &s : ck.tensors())
    if (!want.count(s.name))
      r.unexpected.push_back(s.name);
  return r;
}

const TensorSpec *Checkpoint::find(const std::string &name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

uint64_t Checkpoint::nbytes(const std::string &name) const { return slot(name).nbytes; }

const uint8_t *Checkpoint::view(const std::string &name) const {
  const Slot &s = slot(name);
  return s.pieces.size() == 1 ? s.pieces[0].first : nullptr;
}

void Checkpoint::read(const std::string &name, uint64_t offset, uint64_t size, void *dst) const {
  const Slot &s = slot(name);
  if (offset > s.nbytes || size > s.nbytes - offset)
    fail(name, "read of bytes [{}, {}) outside the tensor's {} bytes", offset, offset + size, s.nbytes);
  uint8_t *out = static_cast<uint8_t *>(dst);
  uint64_t at = 0;  // start of the current piece within the tensor
  for (const auto &[p, len] : s.pieces) {
    if (size == 0)
      break;
    if (offset < at + len) {
      uint64_t skip = offset - at, n = std::min<uint64_t>(len - skip, size);
      std::memcpy(out, p + skip, n);
      out += n;
      offset += n;
      size -= n;
    }
    at += len;
  }
}

TensorBytes Checkpoint::bytes(const std::string &name) const {
  const Slot &s = slot(name);
  TensorBytes b;
  b.size = s.nbytes;
  if (s.pieces.size() == 1) {
    b.data = s.pieces[0].first;
    return b;
  }
  b.owned.resize(s.nbytes);
  read(name, 0, s.nbytes, b.owned.data());
  b.data = b.owned.data();
  return b;
}

} // namespace h3c::h3
