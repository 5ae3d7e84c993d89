// The pipeline's packed layouts (request_layout.h). Expected values were computed with Python floats by a separate
// transcription of diffusers' before_denoise.py (numpy.linspace and numpy's pairwise sum written out, CPython 3.12's
// Neumaier sum), not by this code; scripts/diffusers_layout_check.py compares against diffusers itself.
#include "h3c/runtime/request_layout.h"

#include "h3c/support/error.h"

#include <gtest/gtest.h>

using namespace h3c;
using namespace h3c::rt;

namespace {

struct Row {
  double t, h, w;
};

void expectRows(const PackedLayout &L, const std::vector<std::pair<int64_t, Row>> &rows) {
  for (auto [r, e] : rows) {
    EXPECT_EQ(L.positions[size_t(r * 3)], e.t) << "row " << r << " t";
    EXPECT_EQ(L.positions[size_t(r * 3 + 1)], e.h) << "row " << r << " h";
    EXPECT_EQ(L.positions[size_t(r * 3 + 2)], e.w) << "row " << r << " w";
  }
}

std::vector<int64_t> range(int64_t a, int64_t b) {
  std::vector<int64_t> v;
  for (int64_t i = a; i < b; ++i)
    v.push_back(i);
  return v;
}

} // namespace

// t2va: 3 text rows, latents 2 x 4 x 6 (patch 2 x 2: 6 rows per frame), 2 audio latents per channel.
TEST(RequestLayout, T2vaMatchesThePipeline) {
  const h3::Config c = h3::namedConfig("tiny");
  LayoutSpec sp;
  sp.textTags = {1, 1, 1};
  sp.latentFrames = 2;
  sp.latentHeight = 4;
  sp.latentWidth = 6;
  sp.audioLatents = 2;
  PackedLayout L = buildLayout(c, sp);
  ASSERT_EQ(L.S(), 19);
  const double w0 = -3.5959179422654266, w1 = 9.468027352578194, w2 = 22.531972647421814;
  const double h0 = 2.9360547051563817, h1 = 16.0;
  expectRows(L, {{0, {0, 0, 0}},
                 {2, {2, 0, 0}},
                 {3, {3, 0, w0}},  // audio channel 0 at the first width coordinate
                 {4, {4, 0, w0}},
                 {5, {3, 0, w2}},  // channel 1 at the last
                 {6, {4, 0, w2}},
                 {7, {3, h0, w0}},
                 {8, {3, h0, w1}},
                 {12, {3, h1, w2}},
                 {13, {4.666666666666667, h0, w0}},  // Nt + 5/3
                 {18, {4.666666666666667, h1, w2}}});
  EXPECT_EQ(L.textIndices, range(0, 3));
  EXPECT_EQ(L.audioIndices, range(3, 7));
  EXPECT_EQ(L.videoIndices, range(7, 19));
  EXPECT_EQ(L.conditionVideoRows, 0);
  EXPECT_EQ(L.conditionAudioRows, 0);
  for (int64_t r = 0; r < 19; ++r)
    EXPECT_EQ(L.tags[size_t(r)], r < 3 ? 1 : r < 7 ? 2 : 0);
}

// fl2va: the keyframe blocks sit between the text and the audio; "last" is anchored with numpy's pairwise sum.
TEST(RequestLayout, Fl2vaKeyframeAnchors) {
  const h3::Config c = h3::namedConfig("tiny");
  LayoutSpec sp;
  sp.layout = "fl2va";
  sp.textTags = {1, 0};  // a vision block in the prompt: tagged video
  sp.latentFrames = 6;
  sp.latentHeight = 4;
  sp.latentWidth = 4;
  sp.audioLatents = 1;
  sp.keyframes = {"first", "last"};
  PackedLayout L = buildLayout(c, sp);
  ASSERT_EQ(L.S(), 2 + 8 + 2 + 24);
  expectRows(L, {{2, {2, 0, 0}}, {5, {2, 16, 16}}, {6, {30.333333333333332, 0, 0}}, {9, {30.333333333333332, 16, 16}}});
  EXPECT_EQ(L.conditionVideoRows, 8);
  std::vector<int64_t> vi = range(2, 10), tail = range(12, 36);
  vi.insert(vi.end(), tail.begin(), tail.end());
  EXPECT_EQ(L.videoIndices, vi);
  EXPECT_EQ(L.audioIndices, range(10, 12));
  EXPECT_EQ(L.tags[0], 1);
  EXPECT_EQ(L.tags[1], 0);
  // numpy's pairwise sum differs from a sequential one from 16 frames on; both anchors as numpy computes them
  // (Nt = 3): 16 -> 88.0 (sequential: 88.00000000000001), 17 -> 94.66666666666667, 40 -> 228.00000000000003,
  // 130 (the recursive split) -> 738.0 (sequential: 737.9999999999993).
  for (auto [frames, anchor] : std::vector<std::pair<int64_t, double>>{
           {16, 88.0}, {17, 94.66666666666667}, {40, 228.00000000000003}, {130, 738.0}}) {
    LayoutSpec s2 = sp;
    s2.textTags = {1, 1, 1};
    s2.latentFrames = frames;
    s2.latentHeight = 2;
    s2.latentWidth = 2;
    s2.keyframes = {"last"};
    PackedLayout K = buildLayout(c, s2);
    EXPECT_EQ(K.positions[3 * 3], anchor) << frames << " frames";
  }
}

// ref2va: image (4 x 4), audio (3 latents), video (2 x 4 x 6 with a 2-latent soundtrack), then the target.
TEST(RequestLayout, Ref2vaAdvancesTheRotaryClock) {
  const h3::Config c = h3::namedConfig("tiny");
  LayoutSpec sp;
  sp.layout = "ref2va";
  sp.textTags = {1, 1};
  sp.latentFrames = 2;
  sp.latentHeight = 4;
  sp.latentWidth = 4;
  sp.audioLatents = 1;
  LayoutReference img, aud, vid;
  img.kind = LayoutReference::Kind::Image;
  img.height = 4;
  img.width = 4;
  aud.kind = LayoutReference::Kind::Audio;
  aud.audioLatents = 3;
  vid.kind = LayoutReference::Kind::Video;
  vid.frames = 2;
  vid.height = 4;
  vid.width = 6;
  vid.audioLatents = 2;
  sp.references = {img, aud, vid};
  PackedLayout L = buildLayout(c, sp);
  ASSERT_EQ(L.S(), 38);
  EXPECT_EQ(L.conditionVideoRows, 16);
  EXPECT_EQ(L.conditionAudioRows, 10);
  std::vector<int64_t> vi = range(2, 6), v2 = range(16, 28), v3 = range(30, 38);
  vi.insert(vi.end(), v2.begin(), v2.end());
  vi.insert(vi.end(), v3.begin(), v3.end());
  EXPECT_EQ(L.videoIndices, vi);
  std::vector<int64_t> ai = range(6, 16), a2 = range(28, 30);
  ai.insert(ai.end(), a2.begin(), a2.end());
  EXPECT_EQ(L.audioIndices, ai);
  const double w0 = -3.5959179422654266, w2 = 22.531972647421814, h0 = 2.9360547051563817;
  expectRows(L, {{2, {2, 0, 0}},
                 {5, {2, 16, 16}},
                 {6, {3, 0, 0}},  // the audio reference on the target's width grid
                 {8, {5, 0, 0}},
                 {9, {3, 0, 16}},
                 {12, {6, 0, w0}},  // the video reference's soundtrack on its own grid
                 {15, {7, 0, w2}},
                 {16, {6, h0, w0}},
                 {22, {7.666666666666667, h0, w0}},
                 {28, {14.333333333333334, 0, 0}},  // target: 6 + max(2, 5/3 + 20/3)
                 {29, {14.333333333333334, 0, 16}},
                 {30, {14.333333333333334, 0, 0}},
                 {37, {16, 16, 16}}});
}

TEST(RequestLayout, RowTimestepsAndGeometry) {
  // build_row_timesteps: rows 0..1 text, video [2, 3 | 4] (2 conditioning), audio [5 | 6, 7] (1 reference).
  RowTimesteps r = rowTimesteps(8, {2, 3, 4}, {5, 6, 7}, 2, 1, 0.25f, 0.5f, conditionVideoTimestep(0.25f), 1.0f);
  EXPECT_EQ(r.timestep, (std::vector<float>{0.25f, 0.5f, 0.999f, 1.0f}));
  EXPECT_EQ(r.index, (std::vector<int64_t>{0, 0, 2, 2, 0, 3, 1, 1}));
  EXPECT_EQ(conditionVideoTimestep(0.9995f), 0.9995f);
  RowTimesteps same = rowTimesteps(4, {1}, {2, 3}, 0, 0, 0.0f, 0.0f, 0.999f, 1.0f);
  EXPECT_EQ(same.timestep, (std::vector<float>{0.0f}));
  // The pipeline's pixel geometry: 120 frames snap to 124 = 17*7 + 5 -> 37 latent frames, 207 audio latents.
  LayoutSpec sp;
  pipelineLatentGeometry(120, 768, 1344, sp);
  EXPECT_EQ(sp.latentFrames, 37);
  EXPECT_EQ(sp.latentHeight, 48);
  EXPECT_EQ(sp.latentWidth, 84);
  EXPECT_EQ(sp.audioLatents, 207);
  EXPECT_THROW(pipelineLatentGeometry(120, 770, 1344, sp), Error);
}

TEST(RequestLayout, RequestsAreValidAndRejectBadSpecs) {
  const h3::Config c = h3::namedConfig("tiny");
  LayoutSpec sp;
  sp.layout = "fl2va";
  sp.textTags = {1, 1, 0};
  sp.latentFrames = 2;
  sp.latentHeight = 4;
  sp.latentWidth = 4;
  sp.audioLatents = 2;
  sp.keyframes = {"first"};
  Request r = makeLayoutRequest(c, sp, 2, 5, DType::F32, 0.25f, 0.5f);
  EXPECT_EQ(r.tensors.at("position_ids").dtype, DType::F64);
  EXPECT_EQ(r.metadata.at("h3c_condition_video_rows"), "4");
  CanonicalRequest q = canonicalize(r, c);
  EXPECT_EQ(q.B, 2);
  EXPECT_EQ(q.T, 3);  // 0.25 (text, video), 0.5 (audio), 0.999 (the keyframe); no reference audio
  int64_t cv = -1, ca = -1;
  conditionRows(r, cv, ca, "req");
  EXPECT_EQ(cv, 4);
  EXPECT_EQ(ca, 0);

  auto bad = [&](LayoutSpec s, const char *needle) {
    try {
      buildLayout(c, s);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  LayoutSpec b = sp;
  b.keyframes = {"middle"};
  bad(b, "'first' or 'last'");
  b = sp;
  b.layout = "t2va";
  bad(b, "t2va has no keyframes");
  b = sp;
  b.layout = "i2v";
  b.keyframes.clear();
  bad(b, "t2va, fl2va or ref2va");
  b = sp;
  b.textTags = {1, 2};
  bad(b, "tagged 1 (text) or 0");
  b = sp;
  b.layout = "ref2va";
  b.keyframes.clear();
  bad(b, "at least one reference");
  Request m = r;
  m.metadata["h3c_condition_video_rows"] = "99";
  EXPECT_THROW(conditionRows(m, cv, ca, "req"), Error);
}
