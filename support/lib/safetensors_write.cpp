// The safetensors writer: the whole header is computed from the tensor declarations up front, so tensors can then be
// streamed one after another (and each in pieces) straight into an AtomicFileWriter without ever holding a file.
#include "h3c/support/safetensors.h"

#include "h3c/support/error.h"

#include <algorithm>

namespace h3c::st {

namespace {

// Position in the reference serializer's Dtype enum (ordered by alignment); it sorts tensors by this, descending,
// then by name, so that every tensor starts at an offset aligned to its element size.
int dtypeRank(DType t) {
  switch (t) {
  case DType::BOOL: return 0;
  case DType::U8: return 1;
  case DType::I8: return 2;
  case DType::I16: return 3;
  case DType::U16: return 4;
  case DType::F16: return 5;
  case DType::BF16: return 6;
  case DType::I32: return 7;
  case DType::U32: return 8;
  case DType::F32: return 9;
  case DType::F64: return 10;
  case DType::I64: return 11;
  case DType::U64: return 12;
  }
  return -1;
}

std::string jsonString(const std::string &s) { return nlohmann::json(s).dump(); }

} // namespace

uint64_t TensorDecl::nbytes() const {
  uint64_t n = dtypeSize(dtype);
  for (auto d : shape) {
    if (d < 0)
      fail(name, "negative dimension {} in the shape", d);
    if (__builtin_mul_overflow(n, uint64_t(d), &n))
      fail(name, "shape overflows the byte size");
  }
  return n;
}

FileLayout planFile(const std::vector<TensorDecl> &tensors, const std::map<std::string, std::string> &metadata,
                    const std::string &where) {
  std::vector<const TensorDecl *> order;
  for (const auto &t : tensors)
    order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorDecl *a, const TensorDecl *b) {
    int ra = dtypeRank(a->dtype), rb = dtypeRank(b->dtype);
    return ra != rb ? ra > rb : a->name < b->name;
  });
  {
    std::vector<std::string> names;
    for (const auto *t : order) {
      if (t->name == "__metadata__")
        fail(where, "'__metadata__' cannot be a tensor name");
      names.push_back(t->name);
    }
    std::sort(names.begin(), names.end());
    auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end())
      fail(where, "duplicate tensor name '{}'", *dup);
  }
  FileLayout l;
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool f2 = true;
    for (const auto &[k, v] : metadata) {
      json += (f2 ? "" : ",") + jsonString(k) + ":" + jsonString(v);
      f2 = false;
    }
    json += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto *t : order) {
    TensorInfo info;
    info.name = t->name;
    info.dtype = t->dtype;
    info.shape = t->shape;
    info.begin = offset;
    uint64_t nb = t->nbytes();
    if (__builtin_add_overflow(offset, nb, &offset))
      fail(where, "total tensor size overflows");
    info.end = offset;
    json += (first ? "" : ",") + jsonString(t->name) + ":{\"dtype\":\"" + std::string(dtypeName(t->dtype)) +
            "\",\"shape\":[";
    for (size_t i = 0; i < t->shape.size(); ++i)
      json += (i ? "," : "") + std::to_string(t->shape[i]);
    json += "],\"data_offsets\":[" + std::to_string(info.begin) + "," + std::to_string(info.end) + "]}";
    first = false;
    l.tensors.push_back(std::move(info));
  }
  json += "}";
  // Pad with spaces so that the data section starts at a multiple of 8 (8 + N with N a multiple of 8).
  while (json.size() % 8)
    json += ' ';
  if (json.size() > kMaxHeaderSize)
    fail(where, "header of {} bytes exceeds the limit of {} bytes", json.size(), kMaxHeaderSize);
  uint64_t n = json.size();
  l.prefix.resize(8);
  for (int i = 0; i < 8; ++i)
    l.prefix[size_t(i)] = char((n >> (8 * i)) & 0xff);
  l.prefix += json;
  l.fileSize = l.prefix.size() + offset;
  return l;
}

Writer::Writer(std::filesystem::path path, const std::vector<TensorDecl> &tensors,
               const std::map<std::string, std::string> &metadata)
    : path_(std::move(path)), layout_(planFile(tensors, metadata, path_.string())), out_(path_) {
  out_.write(layout_.prefix);
}

void Writer::finishCurrent() {
  if (!open_)
    return;
  const auto &t = layout_.tensors[next_ - 1];
  if (have_ != t.nbytes())
    fail(path_.string(), "tensor '{}': {} of {} bytes written", t.name, have_, t.nbytes());
  open_ = false;
}

void Writer::begin(const std::string &name) {
  finishCurrent();
  if (next_ >= layout_.tensors.size())
    fail(path_.string(), "tensor '{}' written, but every declared tensor is already written", name);
  if (layout_.tensors[next_].name != name)
    fail(path_.string(), "tensor '{}' written where '{}' comes next", name, layout_.tensors[next_].name);
  ++next_;
  open_ = true;
  have_ = 0;
}

void Writer::append(const void *data, size_t size) {
  if (!open_)
    fail(path_.string(), "bytes appended with no tensor begun");
  const auto &t = layout_.tensors[next_ - 1];
  if (size > t.nbytes() - have_)
    fail(path_.string(), "tensor '{}': {} bytes appended past its {} bytes", t.name, have_ + size, t.nbytes());
  if (size)
    out_.write(data, size);
  have_ += size;
}

void Writer::commit() {
  finishCurrent();
  if (next_ != layout_.tensors.size())
    fail(path_.string(), "tensor '{}' was never written", layout_.tensors[next_].name);
  if (out_.bytesWritten() != layout_.fileSize)
    fail(path_.string(), "wrote {} bytes, planned {}", out_.bytesWritten(), layout_.fileSize);
  out_.commit();
}

} // namespace h3c::st
