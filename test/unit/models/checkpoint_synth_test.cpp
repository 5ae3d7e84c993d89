// `h3c checkpoint synth` with tensors larger than one generation piece (1M elements), which several threads generate
// in parts: every stored tensor must equal the whole tensor generated in one call on one thread.
#include "h3c/models/checkpoint.h"
#include "h3c/support/safetensors.h"

#include "tool.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace h3c;

TEST(CheckpointSynth, ParallelPiecesEqualOneCall) {
  testtool::TempDir t;
  h3::Config c = h3::namedConfig("tiny");
  c.hidden_size = 1024;
  c.ffn_dim = 2560;  // ff weights of 2.6M elements: three pieces, the last one short
  c.time_embed_hidden_dim = 1024;
  h3::synthCheckpoint(c, 11, t.dir / "ck");
  st::Folder f(t.dir / "ck");
  size_t big = 0;
  for (const auto &spec : h3::diffusersTensors(c)) {
    const auto &e = f.at(spec.name);
    std::vector<uint8_t> want(size_t(spec.numel()) * dtypeSize(spec.dtype));
    h3::synthTensor(spec, 11, want.data());
    ASSERT_EQ(e.info->nbytes(), want.size()) << spec.name;
    EXPECT_EQ(std::memcmp(f.data(e), want.data(), want.size()), 0) << spec.name;
    big += spec.numel() > (1 << 20);
  }
  EXPECT_GT(big, 2u);
}
