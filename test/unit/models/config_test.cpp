// Config and tensor-list facts from H3-FACTS.md, checked against independently written numbers.
#include "h3c/models/config.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"
#include "h3c/support/synth_rng.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace h3c;

TEST(Config, FullHas638TensorsAnd33BParameters) {
  auto t = h3::diffusersTensors(h3::namedConfig("full"));
  EXPECT_EQ(t.size(), 638u);
  EXPECT_EQ(h3::parameterCount(t), 33122992896LL);
}

TEST(Config, MixedPrecisionMap) {
  for (const auto &s : h3::diffusersTensors(h3::namedConfig("full"))) {
    bool f32 = s.name.rfind("proj_in.", 0) == 0 || s.name.rfind("audio_proj_in.", 0) == 0 ||
               s.name.rfind("time_embedder.", 0) == 0 || s.name.rfind("proj_out.", 0) == 0 ||
               s.name.rfind("audio_proj_out.", 0) == 0;
    EXPECT_EQ(s.dtype, f32 ? DType::F32 : DType::BF16) << s.name;
  }
}

TEST(Config, TinyMatchesDiffusersTestConfig) {
  auto c = h3::namedConfig("tiny");
  EXPECT_EQ(c.innerDim(), 32);
  EXPECT_EQ(c.rotaryDim(), 12);  // 12 of 16 head channels rotate
  EXPECT_EQ(c.videoPatchDim(), 16);
}

TEST(Config, RejectsUnknownKeyAndBadValues) {
  nlohmann::json j = h3::configToJson(h3::namedConfig("tiny"));
  j["bogus"] = 1;
  EXPECT_THROW(h3::configFromJson(j, "cfg"), Error);
  j = h3::configToJson(h3::namedConfig("tiny"));
  j["rope_freq_dim"] = 3;  // 18 rotated channels > head_dim 16
  EXPECT_THROW(h3::configFromJson(j, "cfg"), Error);
  EXPECT_THROW(h3::namedConfig("huge"), Error);
}

// Integers are range-checked before they are narrowed (issue 18): 2^32 + 24 was read as 24.
TEST(Config, IntegersAreRangeChecked) {
  nlohmann::json j = h3::configToJson(h3::namedConfig("tiny"));
  auto refused = [&](const char *key, nlohmann::json v) {
    nlohmann::json k = j;
    k[key] = v;
    EXPECT_THROW(h3::configFromJson(k, "cfg#"), Error) << key << " = " << v.dump();
  };
  refused("hidden_size", 4294967296ull + 24);
  refused("hidden_size", -24);
  refused("num_layers", 18446744073709551615ull);
  refused("ffn_dim", int64_t(1) << 40);
  refused("num_attention_heads", 1 << 20);  // heads x head_dim beyond any width h3c forms
  refused("rope_theta", 1e308 * 10);        // inf (JSON itself cannot say it; a parsed 1e999 can)
  nlohmann::json p = j;
  p["patch_size"] = {1, 4294967298ull, 2};
  EXPECT_THROW(h3::configFromJson(p, "cfg#"), Error);
  EXPECT_NO_THROW(h3::configFromJson(j, "cfg#"));
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half way between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is half way between 1+2^-7 and 1+2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
  EXPECT_EQ(floatToBf16(INFINITY), 0x7f80);
}

TEST(SynthRng, MomentsAndRange) {
  auto key = synth::tensorKey(7, "w", 1);
  const double stdv = 0.02, scale = stdv * H3C_SYNTH_UNIT_SCALE;
  double s = 0, s2 = 0, mx = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double v = synth::normalish(key, i, scale);
    s += v;
    s2 += v * v;
    mx = std::max(mx, std::fabs(v));
  }
  EXPECT_NEAR(s / n, 0.0, 5e-4 * stdv * 100);
  EXPECT_NEAR(std::sqrt(s2 / n), stdv, 0.01 * stdv);
  EXPECT_LE(mx, 2 * std::sqrt(3.0) * stdv);
  // Keyed by name and seed: different keys give different streams.
  EXPECT_NE(synth::normalish(key, 0, scale), synth::normalish(synth::tensorKey(8, "w", 1), 0, scale));
}
