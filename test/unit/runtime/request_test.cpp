// Requests: what `request make` builds, canonical row order, and every way a request can be invalid.
#include "h3c/runtime/request.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

using namespace h3c;
using namespace h3c::rt;

namespace {

Request req(const h3::Config &c, bool shuffle = false, int64_t batch = 1, DType floats = DType::F32) {
  RequestShape sh;
  sh.floatDtype = floats;
  sh.text = 3;
  sh.audio = 2;
  sh.videoT = 2;
  sh.videoH = 2;
  sh.videoW = 2;
  sh.timesteps = 2;
  sh.batch = batch;
  sh.shuffle = shuffle;
  return makeRequest(c, sh, 42);
}

void setInts(Request &r, const std::string &name, std::vector<int64_t> v) {
  auto shape = r.tensors.at(name).shape;
  r.tensors[name] = Tensor::fromInts(shape, v.data());
}

// Expects canonicalize() to throw an Error whose text contains `needle`.
void rejects(const Request &r, const h3::Config &c, const std::string &needle) {
  try {
    canonicalize(r, c, "req");
    ADD_FAILURE() << "accepted an invalid request (expected: " << needle << ")";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

} // namespace

TEST(Request, MakeBuildsTheDiffusersArguments) {
  h3::Config c = h3::namedConfig("tiny");
  Request r = req(c, false, 3);
  EXPECT_EQ(r.tensors.size(), 10u);
  EXPECT_EQ(r.tensors.at("hidden_states").shape, (std::vector<int64_t>{3, 8, 16}));
  EXPECT_EQ(r.tensors.at("audio_hidden_states").shape, (std::vector<int64_t>{3, 2, 6}));
  EXPECT_EQ(r.tensors.at("encoder_hidden_states").shape, (std::vector<int64_t>{3, 3, 8}));
  EXPECT_EQ(r.tensors.at("timestep").dtype, DType::F32);
  EXPECT_EQ(r.tensors.at("position_ids").shape, (std::vector<int64_t>{13, 3}));
  for (const char *n : {"timestep_indices", "token_tags", "position_ids", "video_indices"})
    EXPECT_EQ(r.tensors.at(n).dtype, DType::I64) << n;
  // Video rows carry the (t, h, w) grid: the last video row is (1, 1, 1), the first (0, 0, 0).
  auto pos = r.tensors.at("position_ids").toInts();
  auto vi = r.tensors.at("video_indices").toInts();
  EXPECT_EQ(pos[size_t(vi[7] * 3)], 1);
  EXPECT_EQ(pos[size_t(vi[7] * 3 + 1)], 1);
  EXPECT_EQ(pos[size_t(vi[7] * 3 + 2)], 1);
  EXPECT_EQ(pos[size_t(vi[2] * 3 + 1)], 1);  // row 2 = (0, 1, 0)
  EXPECT_EQ(pos[size_t(vi[2] * 3 + 2)], 0);
  auto ts = r.tensors.at("timestep").toFloats();
  EXPECT_NE(ts[0], ts[1]);
  CanonicalRequest q = canonicalize(r, c);
  EXPECT_EQ(q.S, 13);
  EXPECT_EQ(q.T, 2);
  EXPECT_EQ(q.B, 3);
}

TEST(Request, CanonicalOrderIsTextVideoAudioInTensorOrder) {
  h3::Config c = h3::namedConfig("tiny");
  Request r = req(c, true);
  CanonicalRequest q = canonicalize(r, c);
  auto ti = r.tensors.at("text_indices").toInts(), vi = r.tensors.at("video_indices").toInts(),
       ai = r.tensors.at("audio_indices").toInts();
  auto tags = r.tensors.at("token_tags").toInts(), tsi = r.tensors.at("timestep_indices").toInts();
  auto pos = r.tensors.at("position_ids").toInts();
  std::vector<int64_t> expect;
  expect.insert(expect.end(), ti.begin(), ti.end());
  expect.insert(expect.end(), vi.begin(), vi.end());
  expect.insert(expect.end(), ai.begin(), ai.end());
  ASSERT_EQ(q.packedRow, expect);
  for (int64_t c2 = 0; c2 < q.S; ++c2) {
    int64_t p = expect[size_t(c2)];
    EXPECT_EQ(q.tags[size_t(c2)], tags[size_t(p)]);
    EXPECT_EQ(q.tsIndex[size_t(c2)], tsi[size_t(p)]);
    EXPECT_EQ(q.positions[size_t(c2 * 3 + 1)], pos[size_t(p * 3 + 1)]);
    EXPECT_EQ(q.tags[size_t(c2)], c2 < 3 ? 1 : c2 < 11 ? 0 : 2);
  }
  // The shuffled request canonicalizes to the same metadata as the unshuffled one.
  CanonicalRequest u = canonicalize(req(c, false), c);
  EXPECT_EQ(u.positions, q.positions);
  EXPECT_EQ(u.tags, q.tags);
  EXPECT_EQ(u.tsIndex, q.tsIndex);
  EXPECT_EQ(u.video, q.video);
  EXPECT_NE(u.packedRow, q.packedRow);
}

TEST(Request, RejectsBadIndices) {
  h3::Config c = h3::namedConfig("tiny");
  Request r = req(c);
  auto vi = r.tensors.at("video_indices").toInts();
  Request a = r;
  vi[0] = 13;
  setInts(a, "video_indices", vi);
  rejects(a, c, "out of range");
  Request b = r;
  vi[0] = -1;
  setInts(b, "video_indices", vi);
  rejects(b, c, "out of range");
  Request d = r;
  vi = r.tensors.at("video_indices").toInts();
  vi[1] = vi[0];  // overlap; position vi[1] is then uncovered
  setInts(d, "video_indices", vi);
  rejects(d, c, "overlaps");
  Request e = r;
  auto ai = r.tensors.at("audio_indices").toInts();
  ai[0] = r.tensors.at("text_indices").toInts()[0];  // audio claims a text row
  setInts(e, "audio_indices", ai);
  rejects(e, c, "overlaps");
  Request f = r;
  auto tsi = r.tensors.at("timestep_indices").toInts();
  tsi[4] = 2;  // T = 2
  setInts(f, "timestep_indices", tsi);
  rejects(f, c, "timestep_indices");
  Request g = r;
  auto tags = r.tensors.at("token_tags").toInts();
  tags[0] = 2;  // packed row 0 is text
  setInts(g, "token_tags", tags);
  rejects(g, c, "tag must be 1 (or 0 for a vision block)");
  Request h = r;
  tags = r.tensors.at("token_tags").toInts();
  tags[3] = 1;  // packed row 3 is video
  setInts(h, "token_tags", tags);
  rejects(h, c, "tag must be 0");
  // A text row of a vision block carries the video tag, as the pipeline's presentation does.
  Request v = r;
  tags = r.tensors.at("token_tags").toInts();
  tags[1] = 0;
  setInts(v, "token_tags", tags);
  EXPECT_EQ(canonicalize(v, c).tags[1], 0);
}

// position_ids may be F64 (the pipeline), F32 (diffusers' tests) or I64, with any real values: the canonical
// positions are position_ids.to(float32), round to nearest even.
TEST(Request, PositionIdsInF64F32AndI64) {
  h3::Config c = h3::namedConfig("tiny");
  Request r = req(c, true);
  const int64_t S = 13;
  std::vector<double> d(size_t(S * 3));
  for (int64_t k = 0; k < S * 3; ++k)
    d[size_t(k)] = 0.1 * double(k) + 1.0 / 3.0 + (k % 5 == 0 ? 1e-9 : 0.0);  // fractional, not all F32-exact
  Tensor f64;
  f64.dtype = DType::F64;
  f64.shape = {S, 3};
  f64.bytes.resize(d.size() * 8);
  std::memcpy(f64.bytes.data(), d.data(), f64.bytes.size());
  Request a = r;
  a.tensors["position_ids"] = f64;
  CanonicalRequest qa = canonicalize(a, c);
  CanonicalRequest q0 = canonicalize(r, c);
  for (int64_t cr = 0; cr < S; ++cr)
    for (int ax = 0; ax < 3; ++ax)
      EXPECT_EQ(qa.positions[size_t(cr * 3 + ax)], static_cast<float>(d[size_t(q0.packedRow[size_t(cr)] * 3 + ax)]));
  // The same values as F32 give the same canonical positions; I64 integers convert exactly.
  std::vector<float> f(d.begin(), d.end());
  Request b = r;
  b.tensors["position_ids"] = Tensor::fromFloats(DType::F32, {S, 3}, f.data());
  EXPECT_EQ(canonicalize(b, c).positions, qa.positions);
  auto ints = r.tensors.at("position_ids").toInts();
  for (int64_t cr = 0; cr < S; ++cr)
    EXPECT_EQ(q0.positions[size_t(cr * 3 + 2)], float(ints[size_t(q0.packedRow[size_t(cr)] * 3 + 2)]));
  // A permutation moves whole rows and keeps the dtype.
  std::vector<int64_t> perm(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i)
    perm[size_t(i)] = (i * 5) % S;
  Request p = permuteRequest(a, perm);
  EXPECT_EQ(p.tensors.at("position_ids").dtype, DType::F64);
  EXPECT_EQ(canonicalize(p, c).positions, qa.positions);
  // Other dtypes and non-finite coordinates are refused.
  Request e = r;
  e.tensors["position_ids"] = Tensor::zeros(DType::BF16, {S, 3});
  rejects(e, c, "expected F64, F32 or I64");
  Request g = a;
  d[7] = INFINITY;
  std::memcpy(g.tensors["position_ids"].bytes.data(), d.data(), d.size() * 8);
  rejects(g, c, "position_ids[2][1]");
  d[7] = 1e300;  // finite in F64, not in F32
  std::memcpy(g.tensors["position_ids"].bytes.data(), d.data(), d.size() * 8);
  rejects(g, c, "finite (as float32)");
}

TEST(Request, RejectsShapeDtypeAndValueMismatches) {
  h3::Config c = h3::namedConfig("tiny");
  Request r = req(c);
  rejects(r, h3::namedConfig("small"), "channels");  // 16 video channels vs small's 96
  Request a = r;
  a.tensors["hidden_states"] = Tensor::zeros(DType::F32, {2, 8, 16});  // batch 2 vs 1
  rejects(a, c, "batch sizes disagree");
  Request b = r;
  b.tensors["video_indices"] = Tensor::zeros(DType::I64, {7});
  rejects(b, c, "video_indices");
  Request d = r;
  d.tensors["token_tags"] = Tensor::zeros(DType::I32, {13});
  rejects(d, c, "expected I64");
  Request e = r;
  e.tensors["hidden_states"] = Tensor::zeros(DType::F64, {1, 8, 16});
  rejects(e, c, "F32 or BF16");
  Request f = r;
  float bad[2] = {0.5f, 1.5f};
  f.tensors["timestep"] = Tensor::fromFloats(DType::F32, {2}, bad);
  rejects(f, c, "[0, 1]");
  float dup[2] = {0.5f, 0.5f};
  f.tensors["timestep"] = Tensor::fromFloats(DType::F32, {2}, dup);
  rejects(f, c, "distinct");
  Request g = r;
  g.tensors.erase("position_ids");
  rejects(g, c, "position_ids");
  Request h = r;
  h.tensors["position_ids"] = Tensor::zeros(DType::I64, {13, 2});
  rejects(h, c, "position_ids");
  Request i = r;
  std::vector<float> nan(8 * 16, 0.f);
  nan[5] = NAN;
  i.tensors["hidden_states"] = Tensor::fromFloats(DType::F32, {1, 8, 16}, nan.data());
  rejects(i, c, "finite");
}

TEST(Request, Bf16InputsAndFileRoundTrip) {
  h3::Config c = h3::namedConfig("tiny");
  RequestShape sh;
  sh.text = 2;
  sh.videoT = sh.videoH = sh.videoW = 1;
  sh.audio = 1;
  sh.floatDtype = DType::BF16;
  Request r = makeRequest(c, sh, 1);
  EXPECT_EQ(r.tensors.at("hidden_states").dtype, DType::BF16);
  auto path = std::filesystem::temp_directory_path() / ("h3c_req_" + std::to_string(::getpid()) + ".safetensors");
  writeRequest(path, r);
  Request back = loadRequest(path);
  std::filesystem::remove(path);
  for (const auto &[n, t] : r.tensors) {
    EXPECT_EQ(back.tensors.at(n).bytes, t.bytes) << n;
    EXPECT_EQ(back.tensors.at(n).shape, t.shape) << n;
  }
  CanonicalRequest q = canonicalize(back, c);
  EXPECT_EQ(q.videoDtype, DType::BF16);
}

TEST(Request, PermuteAndBatchItemHelpers) {
  h3::Config c = h3::namedConfig("tiny");
  Request r = req(c, false, 2);
  EXPECT_THROW(permuteRequest(r, {0, 1, 2}), Error);
  std::vector<int64_t> perm(13);
  for (int i = 0; i < 13; ++i)
    perm[size_t(i)] = (i * 5) % 13;  // 5 is invertible mod 13
  Request p = permuteRequest(r, perm);
  auto tags = r.tensors.at("token_tags").toInts(), ptags = p.tensors.at("token_tags").toInts();
  for (int i = 0; i < 13; ++i)
    EXPECT_EQ(ptags[size_t(perm[size_t(i)])], tags[size_t(i)]);
  Request one = batchItem(r, 1);
  EXPECT_EQ(one.tensors.at("hidden_states").shape[0], 1);
  EXPECT_EQ(one.tensors.at("hidden_states").getFloat(0), r.tensors.at("hidden_states").getFloat(8 * 16));
  EXPECT_THROW(batchItem(r, 2), Error);
}

// The engine's form: the activations borrowed from the request (no float copies) and every other field as the
// copying form gives it; activationFloats() is the same floats either way (BF16 widened exactly).
TEST(Request, BorrowedActivationsAreTheRequestsOwnTensors) {
  const h3::Config c = h3::namedConfig("tiny");
  for (const DType dt : {DType::F32, DType::BF16}) {
    const Request r = req(c, /*shuffle=*/true, /*batch=*/2, dt);
    const CanonicalRequest copied = canonicalize(r, c, "req");
    const CanonicalRequest borrowed = canonicalize(r, c, "req", Activations::Borrowed);
    EXPECT_TRUE(borrowed.text.empty() && borrowed.video.empty() && borrowed.audio.empty());
    EXPECT_EQ(borrowed.textIn, &r.tensors.at("encoder_hidden_states"));
    EXPECT_EQ(borrowed.videoIn, &r.tensors.at("hidden_states"));
    EXPECT_EQ(borrowed.audioIn, &r.tensors.at("audio_hidden_states"));
    EXPECT_EQ(copied.textIn, nullptr);
    EXPECT_EQ(borrowed.positions, copied.positions);
    EXPECT_EQ(borrowed.tags, copied.tags);
    EXPECT_EQ(borrowed.tsIndex, copied.tsIndex);
    EXPECT_EQ(borrowed.packedRow, copied.packedRow);
    EXPECT_EQ(borrowed.timestep, copied.timestep);
    EXPECT_EQ(borrowed.videoDtype, dt);
    for (const char *m : {"text", "video", "audio"}) {
      EXPECT_EQ(activationFloats(borrowed, m), activationFloats(copied, m)) << m;
      EXPECT_FALSE(activationFloats(borrowed, m).empty()) << m;
    }
    // The floats are the request's values: element 1 of hidden_states as its dtype stores it.
    EXPECT_EQ(activationFloats(borrowed, "video")[1], r.tensors.at("hidden_states").getFloat(1));
    EXPECT_THROW(activationFloats(borrowed, "pixels"), Error);
  }
}

// Repeated timesteps are named against the first entry that held the value (-0 and +0 are one value, as == says);
// many distinct timesteps are accepted.
TEST(Request, RepeatedTimestepNamesTheFirstEntry) {
  const h3::Config c = h3::namedConfig("tiny");
  Request r = req(c);
  auto message = [&](const std::vector<float> &ts) {
    r.tensors["timestep"] = Tensor::fromFloats(DType::F32, {int64_t(ts.size())}, ts.data());
    setInts(r, "timestep_indices", std::vector<int64_t>(13, 0));
    try {
      canonicalize(r, c, "req");
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({0.25f, 0.5f, 0.75f, 0.5f, 0.25f}),
            "req:timestep[3]: timesteps must be distinct; 0.5 repeats entry 1");
  EXPECT_EQ(message({0.f, 0.5f, -0.f}), "req:timestep[2]: timesteps must be distinct; -0 repeats entry 0");
  std::vector<float> many(5000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = float(i) / float(many.size());
  EXPECT_EQ(message(many), "accepted");
}
