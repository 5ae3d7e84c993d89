// safetensors: hand-built malformed files (each rejected with its own message), byte-exact writer output, sharded
// folders and their index, and the Python-written fixtures (test/fixtures/safetensors, made by make_fixtures.py).
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace fs = std::filesystem;
using namespace h3c;

namespace {

// 8-byte little-endian length + header + data, in a buffer of exactly that size (ASan sees any overread).
std::vector<uint8_t> fileBytes(const std::string &header, const std::string &data = "", int64_t lengthOverride = -1) {
  uint64_t n = lengthOverride >= 0 ? uint64_t(lengthOverride) : header.size();
  std::vector<uint8_t> b(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i)
    b[size_t(i)] = uint8_t(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
  return b;
}

std::string errorOf(const std::vector<uint8_t> &bytes) {
  // A heap copy of exactly the file's size, so that one byte too far is an ASan error.
  std::unique_ptr<uint8_t[]> heap(new uint8_t[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty())
    std::memcpy(heap.get(), bytes.data(), bytes.size());
  try {
    st::parseHeader(heap.get(), bytes.size(), "f.safetensors");
  } catch (const Error &e) {
    EXPECT_EQ(e.where(), "f.safetensors");
    return e.message();
  }
  return "<accepted>";
}

#define EXPECT_REJECTS(bytes, text)                                                                                   \
  do {                                                                                                                \
    std::string msg_ = errorOf(bytes);                                                                                \
    EXPECT_NE(msg_.find(text), std::string::npos) << "message: " << msg_ << "\nexpected to contain: " << (text);      \
  } while (0)

std::string zeros(size_t n) { return std::string(n, '\0'); }

struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("h3c-st-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void writeBytes(const fs::path &p, const std::vector<uint8_t> &b) {
  std::ofstream o(p, std::ios::binary);
  o.write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
}

} // namespace

// ---- malformed files: one message each ----------------------------------------------------------------------------

TEST(SafetensorsMalformed, TooSmallForLength) {
  EXPECT_REJECTS(std::vector<uint8_t>{}, "file is 0 bytes, too small for the 8-byte header length");
  EXPECT_REJECTS(std::vector<uint8_t>(7, 0), "file is 7 bytes, too small");
}

TEST(SafetensorsMalformed, HeaderLengthOverLimit) {
  EXPECT_REJECTS(fileBytes("{}", "", 100000001), "header length 100000001 exceeds the limit of 100000000 bytes");
  EXPECT_REJECTS(fileBytes("{}", "", INT64_MAX), "exceeds the limit");
}

TEST(SafetensorsMalformed, HeaderLengthPastEnd) {
  EXPECT_REJECTS(fileBytes("{}", "", 3), "header length 3 runs past the end of the file (10 bytes)");
}

TEST(SafetensorsMalformed, EmptyHeader) { EXPECT_REJECTS(fileBytes(""), "header is empty"); }

TEST(SafetensorsMalformed, InvalidUtf8) {
  EXPECT_REJECTS(fileBytes("{\"a\xff\":{}}"), "header is not valid UTF-8 (byte 3 of the header)");
}

TEST(SafetensorsMalformed, OverlongUtf8) { EXPECT_REJECTS(fileBytes("{\"\xc0\x80\":1}"), "not valid UTF-8"); }

TEST(SafetensorsMalformed, SurrogateUtf8) { EXPECT_REJECTS(fileBytes("{\"\xed\xa0\x80\":1}"), "not valid UTF-8"); }

TEST(SafetensorsMalformed, TruncatedUtf8AtEnd) { EXPECT_REJECTS(fileBytes("{}\xe2\x82"), "not valid UTF-8 (byte 2"); }

TEST(SafetensorsMalformed, NotAnObject) { EXPECT_REJECTS(fileBytes("[1, 2]  "), "header does not start with '{'"); }

TEST(SafetensorsMalformed, LeadingWhitespace) { EXPECT_REJECTS(fileBytes(" {}     "), "does not start with '{'"); }

TEST(SafetensorsMalformed, TruncatedJson) { EXPECT_REJECTS(fileBytes("{\"a\":"), "invalid JSON"); }

TEST(SafetensorsMalformed, TrailingGarbage) { EXPECT_REJECTS(fileBytes("{} x"), "invalid JSON"); }

TEST(SafetensorsMalformed, NulPadding) {
  // nlohmann alone would stop at the NUL and accept the header.
  EXPECT_REJECTS(fileBytes(std::string("{}\0\0\0\0\0\0", 8)), "invalid JSON: NUL byte at byte 2");
  EXPECT_REJECTS(fileBytes(std::string("{\"a\0\":1}", 9)), "NUL byte at byte 3");
}

TEST(SafetensorsMalformed, DuplicateTensorName) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                           "ab"),
                 "duplicate tensor name 'w'");
}

TEST(SafetensorsMalformed, DuplicateKeyInEntry) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "a"),
                 "duplicate key 'dtype' in 'w'");
}

TEST(SafetensorsMalformed, DuplicateMetadataKey) {
  EXPECT_REJECTS(fileBytes(R"({"__metadata__":{"k":"a","k":"b"}})"), "duplicate key 'k' in '__metadata__'");
}

TEST(SafetensorsMalformed, DuplicateMetadataBlock) {
  EXPECT_REJECTS(fileBytes(R"({"__metadata__":{},"__metadata__":{}})"), "duplicate tensor name '__metadata__'");
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  EXPECT_REJECTS(fileBytes(R"({"w":[1,2]})"), "tensor 'w': entry must be an object with dtype, shape and "
                                              "data_offsets, got array");
}

TEST(SafetensorsMalformed, UnknownKeyInEntry) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"foo":1}})", "a"),
                 "tensor 'w': unknown key 'foo'");
}

TEST(SafetensorsMalformed, MissingDtype) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "a"), "tensor 'w': missing key 'dtype'");
}

TEST(SafetensorsMalformed, MissingShape) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "a"), "tensor 'w': missing key 'shape'");
}

TEST(SafetensorsMalformed, MissingOffsets) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1]}})", "a"), "tensor 'w': missing key 'data_offsets'");
}

TEST(SafetensorsMalformed, DtypeNotString) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,1]}})", "a"),
                 "tensor 'w': dtype must be a string, got 4");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", zeros(16)),
                 "tensor 'w': unknown dtype 'F128'");
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", zeros(4)),
                 "unknown dtype 'f32'");
}

TEST(SafetensorsMalformed, ShapeNotArray) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})", "a"),
                 "tensor 'w': shape must be an array of non-negative integers, got 1");
}

TEST(SafetensorsMalformed, NegativeDimension) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "a"),
                 "shape must be an array of non-negative integers, got [-1]");
}

TEST(SafetensorsMalformed, FloatDimension) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", "a"),
                 "shape must be an array of non-negative integers, got [1.0]");
}

TEST(SafetensorsMalformed, DimensionTooLarge) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}})", "a"),
                 "shape dimension 9223372036854775808 is too large");
}

TEST(SafetensorsMalformed, ElementCountOverflow) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", "a"),
                 "tensor 'w': shape [4294967296,4294967296] x U8 overflows the byte size");
}

TEST(SafetensorsMalformed, ByteSizeOverflow) {
  // 2^62 elements fit in int64, 2^62 * 4 bytes do not fit in uint64.
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})", zeros(4)),
                 "x F32 overflows the byte size");
}

TEST(SafetensorsMalformed, OffsetsWrongArity) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "a"),
                 "tensor 'w': data_offsets must be [begin, end] with non-negative integers, got [0,1,2]");
}

TEST(SafetensorsMalformed, OffsetsNegative) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "a"),
                 "data_offsets must be [begin, end] with non-negative integers, got [-1,0]");
}

TEST(SafetensorsMalformed, OffsetsNotNumbers) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":"0-1"}})", "a"),
                 "data_offsets must be [begin, end]");
}

TEST(SafetensorsMalformed, OffsetsHuge) {
  // Larger than uint64: nlohmann parses it as a float, which is rejected as not an integer.
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}})", "a"),
                 "data_offsets must be [begin, end]");
}

TEST(SafetensorsMalformed, BeginAfterEnd) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[8,4]}})", zeros(8)),
                 "tensor 'w': data_offsets begin 8 is after end 4");
}

TEST(SafetensorsMalformed, SpanDisagreesWithShape) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", zeros(4)),
                 "tensor 'w': data_offsets span 4 bytes but shape [2] x F32 needs 8");
}

TEST(SafetensorsMalformed, EndPastDataSection) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", zeros(4)),
                 "tensor 'w': data_offsets end 8 runs past the data section (4 bytes)");
}

TEST(SafetensorsMalformed, HugeOffsetsPastEnd) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,)"
                           R"(18446744073709551615]}})",
                           "a"),
                 "runs past the data section (1 bytes)");
}

TEST(SafetensorsMalformed, GapAtStart) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}})", zeros(5)),
                 "gap of 4 bytes in the data section before tensor 'w' (data_offsets [4, 5])");
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  EXPECT_REJECTS(fileBytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                           R"("b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}})",
                           zeros(4)),
                 "gap of 1 bytes in the data section before tensor 'b'");
}

TEST(SafetensorsMalformed, Overlap) {
  EXPECT_REJECTS(fileBytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                           R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
                           zeros(3)),
                 "tensor 'b' (data_offsets [1, 3]) overlaps tensor 'a' (data_offsets [0, 2])");
}

TEST(SafetensorsMalformed, SameRangeTwice) {
  EXPECT_REJECTS(fileBytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                           R"("b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                           zeros(2)),
                 "tensor 'b' (data_offsets [0, 2]) overlaps tensor 'a'");
}

TEST(SafetensorsMalformed, TrailingBytes) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", zeros(3)),
                 "file has 2 trailing bytes after the last tensor (data section 3 bytes, tensors end at 1)");
  EXPECT_REJECTS(fileBytes("{}", "x"), "file has 1 trailing bytes");
}

TEST(SafetensorsMalformed, MetadataNotObject) {
  EXPECT_REJECTS(fileBytes(R"({"__metadata__":"pt"})"), "__metadata__ must be an object of strings, got string");
  EXPECT_REJECTS(fileBytes(R"({"__metadata__":null})"), "__metadata__ must be an object of strings, got null");
}

TEST(SafetensorsMalformed, MetadataValueNotString) {
  EXPECT_REJECTS(fileBytes(R"({"__metadata__":{"n":1}})"), "__metadata__ value for 'n' must be a string, got 1");
}

TEST(SafetensorsMalformed, NestingTooDeep) {
  EXPECT_REJECTS(fileBytes(R"({"w":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", "a"),
                 "JSON nesting deeper than 3 levels");
  EXPECT_REJECTS(fileBytes("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
                 "JSON nesting deeper than 3 levels");
}

// ---- valid files ----------------------------------------------------------------------------------------------------

TEST(Safetensors, ParsesValidFile) {
  // Tensors listed out of data order; scalar, empty tensor, metadata.
  std::string h = R"({"b":{"dtype":"F32","shape":[],"data_offsets":[2,6]},)"
                  R"("e":{"dtype":"BF16","shape":[0,3],"data_offsets":[6,6]},)"
                  R"("a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"__metadata__":{"format":"pt"}}  )";
  std::string data = std::string("\x80\x3f", 2) + std::string("\x00\x00\x60\x40", 4);  // bf16 1.0, f32 3.5
  auto bytes = fileBytes(h, data);
  st::Header hd = st::parseHeader(bytes.data(), bytes.size(), "x");
  ASSERT_EQ(hd.tensors.size(), 3u);
  EXPECT_EQ(hd.tensors[0].name, "a");
  EXPECT_EQ(hd.tensors[1].name, "b");
  EXPECT_EQ(hd.tensors[2].name, "e");
  EXPECT_EQ(hd.dataOffset, 8 + h.size());
  EXPECT_EQ(hd.find("b")->numel(), 1);
  EXPECT_EQ(hd.find("e")->numel(), 0);
  EXPECT_EQ(hd.find("e")->nbytes(), 0u);
  EXPECT_EQ(hd.metadata.at("format"), "pt");
  float f;
  std::memcpy(&f, bytes.data() + hd.dataOffset + hd.find("b")->begin, 4);
  EXPECT_EQ(f, 3.5f);
  EXPECT_EQ(hd.find("zzz"), nullptr);
}

TEST(Safetensors, EmptyHeaderObjectIsValid) {
  auto bytes = fileBytes("{}      ");
  EXPECT_TRUE(st::parseHeader(bytes.data(), bytes.size(), "x").tensors.empty());
}

TEST(Safetensors, WriterBytesAreExact) {
  TempDir t;
  fs::path p = t.path / "w.safetensors";
  // Declared in an order the writer must change: F32 first (larger alignment), then names.
  std::vector<st::TensorDecl> decls = {{"z", DType::BF16, {2}}, {"y", DType::F32, {1}}, {"a", DType::BF16, {1}}};
  st::Writer w(p, decls, {{"format", "pt"}});
  ASSERT_EQ(w.order().size(), 3u);
  EXPECT_EQ(w.order()[0].name, "y");
  EXPECT_EQ(w.order()[1].name, "a");
  EXPECT_EQ(w.order()[2].name, "z");
  float one = 1.0f;
  w.write("y", &one, 4);
  uint16_t a = 0x4000;
  w.write("a", &a, 2);
  uint16_t z[2] = {0x3f80, 0xbf80};
  w.begin("z");
  w.append(&z[0], 2);  // in pieces
  w.append(&z[1], 2);
  w.commit();
  std::string json = R"({"__metadata__":{"format":"pt"},"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("a":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},)"
                     R"("z":{"dtype":"BF16","shape":[2],"data_offsets":[6,10]}})";
  while (json.size() % 8)
    json += ' ';
  std::string data("\x00\x00\x80\x3f\x00\x40\x80\x3f\x80\xbf", 10);
  auto expect = fileBytes(json, data);
  std::string got = readFile(p);
  ASSERT_EQ(got.size(), expect.size());
  EXPECT_EQ(0, std::memcmp(got.data(), expect.data(), got.size()));
  EXPECT_EQ((got.size() - data.size()) % 8, 0u);
  // And reads back.
  st::File f(p);
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
}

TEST(Safetensors, WriterRejectsMisuse) {
  TempDir t;
  std::vector<st::TensorDecl> decls = {{"a", DType::U8, {2}}, {"b", DType::U8, {1}}};
  {
    st::Writer w(t.path / "x.safetensors", decls);
    try {
      w.begin("b");
      FAIL();
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("tensor 'b' written where 'a' comes next"), std::string::npos);
    }
  }
  {
    st::Writer w(t.path / "x.safetensors", decls);
    w.begin("a");
    uint8_t three[3] = {1, 2, 3};
    EXPECT_THROW(w.append(three, 3), Error);  // past the tensor
    w.append(three, 1);
    EXPECT_THROW(w.begin("b"), Error);  // 'a' incomplete
  }
  {
    st::Writer w(t.path / "x.safetensors", decls);
    uint8_t two[2] = {1, 2};
    w.write("a", two, 2);
    EXPECT_THROW(w.commit(), Error);  // 'b' never written
  }
  EXPECT_FALSE(fs::exists(t.path / "x.safetensors"));  // nothing half-written
  std::vector<st::TensorDecl> dup = {{"a", DType::U8, {1}}, {"a", DType::F32, {1}}};
  EXPECT_THROW(st::Writer(t.path / "y.safetensors", dup), Error);
  std::vector<st::TensorDecl> neg = {{"a", DType::U8, {-1}}};
  EXPECT_THROW(st::Writer(t.path / "y.safetensors", neg), Error);
}

// ---- folders --------------------------------------------------------------------------------------------------------

namespace {

// Four U8 tensors of 4, 4, 4, 6 bytes holding their index, written with a 8-byte cap: 3 shards ([a b] [c] [d]).
void writeSample(const fs::path &dir, uint64_t cap) {
  std::vector<st::TensorDecl> decls = {{"a", DType::U8, {4}}, {"b", DType::U8, {4}}, {"c", DType::U8, {4}},
                                       {"d", DType::U8, {2, 3}}};
  st::writeFolder(dir, st::kDiffusersPrefix, decls, cap, {{"format", "pt"}},
                  [](const st::TensorInfo &info, st::Writer &w) {
                    std::vector<uint8_t> v(info.nbytes(), uint8_t(info.name[0]));
                    w.append(v.data(), v.size());
                  });
}

std::string folderError(const fs::path &dir) {
  try {
    st::Folder f(dir);
  } catch (const Error &e) {
    return e.what();
  }
  return "<accepted>";
}

} // namespace

TEST(SafetensorsFolder, ShardedRoundTrip) {
  TempDir t;
  writeSample(t.path, 8);
  EXPECT_TRUE(fs::exists(t.path / "diffusion_pytorch_model-00001-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(t.path / "diffusion_pytorch_model-00003-of-00003.safetensors"));
  st::Index idx = st::parseIndex(readFile(t.path / "diffusion_pytorch_model.safetensors.index.json"), "i");
  EXPECT_EQ(idx.totalSize, 18u);
  EXPECT_EQ(idx.weightMap.at("a"), "diffusion_pytorch_model-00001-of-00003.safetensors");
  EXPECT_EQ(idx.weightMap.at("b"), "diffusion_pytorch_model-00001-of-00003.safetensors");
  EXPECT_EQ(idx.weightMap.at("c"), "diffusion_pytorch_model-00002-of-00003.safetensors");
  EXPECT_EQ(idx.weightMap.at("d"), "diffusion_pytorch_model-00003-of-00003.safetensors");
  st::Folder f(t.path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "c", "d"}));
  ASSERT_TRUE(f.indexPath().has_value());
  const auto &d = f.at("d");
  EXPECT_EQ(d.info->shape, (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(f.data(d)[i], 'd');
  EXPECT_THROW(f.at("nope"), Error);
}

TEST(SafetensorsFolder, SingleFileWhenItFits) {
  TempDir t;
  writeSample(t.path, 1000);
  EXPECT_TRUE(fs::exists(t.path / "diffusion_pytorch_model.safetensors"));
  EXPECT_FALSE(fs::exists(t.path / "diffusion_pytorch_model.safetensors.index.json"));
  st::Folder f(t.path);
  EXPECT_EQ(f.names().size(), 4u);
  EXPECT_FALSE(f.indexPath().has_value());
}

TEST(SafetensorsFolder, RejectsBadIndexes) {
  TempDir t;
  writeSample(t.path, 8);
  const fs::path ip = t.path / "diffusion_pytorch_model.safetensors.index.json";
  const std::string good = readFile(ip);
  const std::string s1 = "diffusion_pytorch_model-00001-of-00003.safetensors";
  const std::string s2 = "diffusion_pytorch_model-00002-of-00003.safetensors";
  const std::string s3 = "diffusion_pytorch_model-00003-of-00003.safetensors";
  auto withIndex = [&](const std::string &text) {
    writeFileAtomic(ip, text);
    return folderError(t.path);
  };
  auto wm = [&](const std::string &entries, uint64_t total = 18) {
    return "{\"metadata\":{\"total_size\":" + std::to_string(total) + "},\"weight_map\":{" + entries + "}}";
  };
  const std::string all = "\"a\":\"" + s1 + "\",\"b\":\"" + s1 + "\",\"c\":\"" + s2 + "\",\"d\":\"" + s3 + "\"";
  EXPECT_EQ(withIndex(wm(all)), "<accepted>");
  EXPECT_NE(withIndex(wm(all, 17)).find("#/metadata/total_size: is 17 but the shards hold 18 bytes"),
            std::string::npos);
  EXPECT_NE(withIndex(wm(all + ",\"a\":\"" + s1 + "\"")).find("duplicate key 'a' in 'weight_map'"),
            std::string::npos);
  EXPECT_NE(withIndex(wm("\"a\":\"" + s1 + "\",\"c\":\"" + s2 + "\",\"d\":\"" + s3 + "\"", 14))
                .find("shard '" + s1 + "' holds tensor 'b', which the index does not list"),
            std::string::npos);
  EXPECT_NE(withIndex(wm("\"a\":\"" + s1 + "\",\"b\":\"" + s1 + "\",\"c\":\"" + s2 + "\"", 12))
                .find("shard file '" + s3 + "' is in the folder but not in the index"),
            std::string::npos);
  EXPECT_NE(withIndex(wm("\"a\":\"" + s2 + "\",\"b\":\"" + s1 + "\",\"c\":\"" + s2 + "\",\"d\":\"" + s3 + "\""))
                .find("#/weight_map/a: shard '" + s2 + "' does not contain this tensor"),
            std::string::npos);
  EXPECT_NE(withIndex(wm(all + ",\"e\":\"" + s1 + "\"")).find("does not contain this tensor"), std::string::npos);
  EXPECT_NE(withIndex(wm(all + ",\"e\":\"missing.safetensors\"")).find("shard 'missing.safetensors' does not exist"),
            std::string::npos);
  EXPECT_NE(withIndex(wm(all + ",\"e\":\"../x.safetensors\"")).find("is not a plain file name"), std::string::npos);
  EXPECT_NE(withIndex("{\"weight_map\":{}}").find("#/metadata: expected an object with total_size"),
            std::string::npos);
  EXPECT_NE(withIndex("{\"metadata\":{\"total_size\":-1},\"weight_map\":{}}").find("#/metadata/total_size"),
            std::string::npos);
  EXPECT_NE(withIndex(wm(all) + " ").find("<accepted>"), std::string::npos);
  EXPECT_NE(withIndex("{\"metadata\":{\"total_size\":18},\"weight_map\":{},\"x\":1}").find("#/x: unknown key"),
            std::string::npos);
  EXPECT_NE(withIndex("{\"metadata\":{\"total_size\":18},\"weight_map\":{\"a\":5}}").find("expected a shard file"),
            std::string::npos);
  EXPECT_NE(withIndex("not json").find("invalid JSON"), std::string::npos);
  writeFileAtomic(ip, good);
  EXPECT_EQ(folderError(t.path), "<accepted>");
  // A corrupt shard is reported by its path.
  writeBytes(t.path / s2, {1, 2, 3});
  EXPECT_NE(folderError(t.path).find(s2 + ": file is 3 bytes"), std::string::npos);
}

TEST(SafetensorsFolder, RejectsMissingOrAmbiguousLayouts) {
  TempDir t;
  EXPECT_NE(folderError(t.path).find("no diffusion_pytorch_model.safetensors"), std::string::npos);
  EXPECT_NE(folderError(t.path / "nope").find("not a folder"), std::string::npos);
  writeSample(t.path, 1000);
  fs::copy_file(t.path / "diffusion_pytorch_model.safetensors", t.path / "model.safetensors");
  EXPECT_NE(folderError(t.path).find("ambiguous folder"), std::string::npos);
}

// ---- files written by Python (safetensors + torch), see test/fixtures/safetensors/make_fixtures.py ----------------

namespace {
fs::path fixtureDir() { return fs::path(H3C_SOURCE_DIR) / "test" / "fixtures" / "safetensors"; }

template <typename T> T at(const st::File &f, const std::string &name, size_t i) {
  const auto *t = f.find(name);
  T v;
  std::memcpy(&v, f.data(*t) + i * sizeof(T), sizeof(T));
  return v;
}
} // namespace

TEST(SafetensorsPython, ReadsTorchWrittenFiles) {
  const fs::path p = fixtureDir() / "py_mixed.safetensors";
  if (!fs::exists(p))
    GTEST_SKIP() << "no Python fixtures (run make_fixtures.py on a machine with torch + safetensors)";
  st::File f(p);
  // The formulas make_fixtures.py uses (exactly representable values).
  const auto *w = f.find("w_bf16");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::BF16);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{3, 5}));
  for (size_t i = 0; i < 15; ++i)
    EXPECT_EQ(bf16ToFloat(at<uint16_t>(f, "w_bf16", i)), (double(i) - 7.0) * 0.125) << i;
  const auto *b = f.find("b_f32");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{4}));
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(at<float>(f, "b_f32", i), float(i) * 0.5f - 1.0f);
  const auto *idx = f.find("idx_i64");
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->dtype, DType::I64);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(at<int64_t>(f, "idx_i64", i), int64_t(i) * 1000000007LL - 3);
  const auto *e = f.find("empty_f32");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(e->nbytes(), 0u);
  const auto *s = f.find("scalar_f32");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(at<float>(f, "scalar_f32", 0), 3.5f);
  EXPECT_EQ(f.header().metadata.at("producer"), "make_fixtures.py");
  EXPECT_EQ((f.header().dataOffset) % 8, 0u);
}

TEST(SafetensorsPython, ReadsTorchWrittenShardedFolder) {
  const fs::path d = fixtureDir() / "py_sharded";
  if (!fs::exists(d))
    GTEST_SKIP() << "no Python fixtures (run make_fixtures.py on a machine with torch + safetensors)";
  st::Folder f(d);
  // make_fixtures.py: tensors t0..t5, F32 [16], value t_k[i] = k * 100 + i, split by huggingface_hub into shards.
  ASSERT_EQ(f.names().size(), 6u);
  for (int k = 0; k < 6; ++k) {
    const auto &e = f.at("t" + std::to_string(k));
    EXPECT_EQ(e.info->shape, (std::vector<int64_t>{16}));
    for (int i = 0; i < 16; ++i) {
      float v;
      std::memcpy(&v, f.data(e) + 4 * i, 4);
      EXPECT_EQ(v, float(k * 100 + i));
    }
  }
}
