// The safetensors reader: validates a whole file before any tensor is handed out. Every offset is checked against
// the mapped size with overflow-safe arithmetic, so a hostile header can never make us read outside the map.
#include "h3c/support/safetensors.h"

#include "h3c/support/error.h"
#include "h3c/support/json_read.h"

#include <algorithm>

namespace h3c::st {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

const TensorInfo *Header::find(const std::string &name) const {
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : &tensors[it->second];
}


namespace {

uint64_t readLe64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

// Returns the offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or npos when the whole text is valid.
size_t invalidUtf8At(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else
      return i;
    if (n - i < len)
      return i;
    if (s[i + 1] < lo || s[i + 1] > hi)
      return i;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF)
        return i;
    i += len;
  }
  return std::string::npos;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorInfo parseEntry(const std::string &name, const nlohmann::json &e, const std::string &where) {
  if (!e.is_object())
    fail(where, "tensor '{}': entry must be an object with dtype, shape and data_offsets, got {}", name,
         e.type_name());
  for (auto it = e.begin(); it != e.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      fail(where, "tensor '{}': unknown key '{}' (expected dtype, shape, data_offsets)", name, it.key());
  for (const char *k : {"dtype", "shape", "data_offsets"})
    if (!e.contains(k))
      fail(where, "tensor '{}': missing key '{}'", name, k);
  TensorInfo t;
  t.name = name;
  const auto &dt = e["dtype"];
  if (!dt.is_string())
    fail(where, "tensor '{}': dtype must be a string, got {}", name, dt.dump());
  if (!parseDType(dt.get<std::string>(), t.dtype))
    fail(where, "tensor '{}': unknown dtype '{}'", name, dt.get<std::string>());
  const auto &sh = e["shape"];
  if (!sh.is_array())
    fail(where, "tensor '{}': shape must be an array of non-negative integers, got {}", name, sh.dump());
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto &d : sh) {
    if (!d.is_number_unsigned())
      fail(where, "tensor '{}': shape must be an array of non-negative integers, got {}", name, sh.dump());
    uint64_t v = d.get<uint64_t>();
    if (v > uint64_t(INT64_MAX))
      fail(where, "tensor '{}': shape dimension {} is too large", name, v);
    t.shape.push_back(int64_t(v));
    if (__builtin_mul_overflow(numel, v, &numel))
      overflow = true;
  }
  // A zero dimension makes the product 0 regardless of an intermediate overflow, as in the reference.
  bool hasZero = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
  if (hasZero) {
    numel = 0;
    overflow = false;
  }
  uint64_t nbytes = 0;
  if (overflow || numel > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, uint64_t(dtypeSize(t.dtype)), &nbytes))
    fail(where, "tensor '{}': shape {} x {} overflows the byte size", name, sh.dump(), dtypeName(t.dtype));
  const auto &off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(where, "tensor '{}': data_offsets must be [begin, end] with non-negative integers, got {}", name,
         off.dump());
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.begin > t.end)
    fail(where, "tensor '{}': data_offsets begin {} is after end {}", name, t.begin, t.end);
  if (t.end - t.begin != nbytes)
    fail(where, "tensor '{}': data_offsets span {} bytes but shape {} x {} needs {}", name, t.end - t.begin,
         shapeText(t.shape), dtypeName(t.dtype), nbytes);
  return t;
}

} // namespace

Header parseHeader(const uint8_t *bytes, size_t size, const std::string &where) {
  if (size < 8)
    fail(where, "file is {} bytes, too small for the 8-byte header length", size);
  Header h;
  h.headerSize = readLe64(bytes);
  if (h.headerSize > kMaxHeaderSize)
    fail(where, "header length {} exceeds the limit of {} bytes", h.headerSize, kMaxHeaderSize);
  if (h.headerSize > size - 8)
    fail(where, "header length {} runs past the end of the file ({} bytes)", h.headerSize, size);
  h.dataOffset = 8 + h.headerSize;
  const uint8_t *hp = bytes + 8;
  if (h.headerSize == 0)
    fail(where, "header is empty (expected a JSON object)");
  size_t bad = invalidUtf8At(hp, h.headerSize);
  if (bad != std::string::npos)
    fail(where, "header is not valid UTF-8 (byte {} of the header)", bad);
  if (hp[0] != '{')
    fail(where, "header does not start with '{{' (expected a JSON object)");
  std::string_view text(reinterpret_cast<const char *>(hp), h.headerSize);
  // Depth: the object (1), a tensor entry (2), its shape / data_offsets arrays (3).
  nlohmann::json j = parseJson(text, where, 3, "duplicate tensor name");
  if (!j.is_object())
    fail(where, "header must be a JSON object");
  const uint64_t dataSize = size - h.dataOffset;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        fail(where, "__metadata__ must be an object of strings, got {}", it->type_name());
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          fail(where, "__metadata__ value for '{}' must be a string, got {}", m.key(), m->dump());
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorInfo t = parseEntry(it.key(), *it, where);
    if (t.end > dataSize)
      fail(where, "tensor '{}': data_offsets end {} runs past the data section ({} bytes)", t.name, t.end, dataSize);
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo &a, const TensorInfo &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t expected = 0;
  const TensorInfo *prev = nullptr;
  for (const auto &t : h.tensors) {
    if (t.begin > expected)
      fail(where, "gap of {} bytes in the data section before tensor '{}' (data_offsets [{}, {}])", t.begin - expected,
           t.name, t.begin, t.end);
    if (t.begin < expected)
      fail(where, "tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' (data_offsets [{}, {}])", t.name, t.begin,
           t.end, prev->name, prev->begin, prev->end);
    expected = t.end;
    prev = &t;
  }
  if (expected != dataSize)
    fail(where, "file has {} trailing bytes after the last tensor (data section {} bytes, tensors end at {})",
         dataSize - expected, dataSize, expected);
  for (size_t i = 0; i < h.tensors.size(); ++i)
    h.byName.emplace(h.tensors[i].name, i);
  return h;
}

File::File(const std::filesystem::path &path) : map_(path) {
  header_ = parseHeader(map_.data(), map_.size(), path.string());
}

const uint8_t *File::data(const TensorInfo &t) const {
  // Validated: dataOffset + end <= size. An empty tensor at the very end yields the one-past-the-end pointer.
  return map_.data() + header_.dataOffset + t.begin;
}

} // namespace h3c::st
