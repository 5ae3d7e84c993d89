// Hostile and careless input through the h3c binary (issue 18): every case here was a silent wrong result, a
// destroyed input or a hang before. Expectations are independent: the same weights read through another layout give
// the same bytes, refused runs leave their inputs byte-identical and write nothing.
#include "test_plans.h"

#include "h3c/support/canonical_json.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include "tool.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;
using namespace h3c;
using h3c::testtool::runTool;

namespace {

// A tiny plan, a request and a synthetic checkpoint of seed 6.
struct Rig : h3c::testtool::TempDir {
  std::string base;
  Rig() : TempDir("h3c_rt_hostile") {
    fs::create_directories(dir / "plan");
    writeFileAtomic(dir / "plan" / "plan.json", rt::testplans::modelPlan(h3::namedConfig("tiny"), true).dump(1));
    std::string out;
    EXPECT_EQ(0, runTool("checkpoint synth --config tiny --seed 6 --out " + *this / "ck", &out)) << out;
    EXPECT_EQ(0, runTool("request make --config tiny --text 3 --audio 2 --video 1,2,2 --seed 2 -o " +
                         *this / "r.safetensors", &out)) << out;
    base = " --config tiny --plan " + *this / "plan" + " --inputs " + *this / "r.safetensors";
  }
  int run(const std::string &weights, const std::string &name, std::string *out, const std::string &extra = "") {
    return runTool("run" + base + " " + weights + " --out " + *this / (name + ".safetensors") + " --ledger " +
                       *this / (name + ".json") + extra, out);
  }
};

// Overwrites element `index` of tensor `name` in a safetensors file with the raw bytes `v`.
void poke(const fs::path &file, const std::string &name, size_t index, const void *v, size_t size) {
  uint64_t at;
  {
    st::File f(file);
    const st::TensorInfo *t = f.find(name);
    ASSERT_NE(t, nullptr) << name;
    at = f.header().dataOffset + t->begin + index * size;
  }
  std::string bytes = readFile(file);
  std::memcpy(bytes.data() + at, v, size);
  writeFileAtomic(file, bytes);
}

} // namespace

// A native folder in the concat q/k/v layout is read as concat (config.json's _h3c_qkv_layout), so its outputs are
// the diffusers folder's bytes; before, it was read as interleaved and every output was wrong with `accepted: yes`.
TEST(HostileCli, ConcatNativeCheckpointReadsCorrectly) {
  Rig s;
  std::string out;
  ASSERT_EQ(0, runTool("checkpoint map --to native --qkv-layout concat " + s / "ck" + " " + s / "concat", &out)) << out;
  ASSERT_EQ(0, runTool("checkpoint map --to native --qkv-layout interleaved " + s / "ck" + " " + s / "inter", &out));
  ASSERT_EQ(0, s.run("--checkpoint " + s / "ck", "a", &out)) << out;
  ASSERT_EQ(0, s.run("--checkpoint " + s / "concat", "b", &out)) << out;
  ASSERT_EQ(0, s.run("--checkpoint " + s / "inter", "c", &out)) << out;
  EXPECT_EQ(readFile(s / "a.safetensors"), readFile(s / "b.safetensors"));
  EXPECT_EQ(readFile(s / "a.safetensors"), readFile(s / "c.safetensors"));
}

// The checkpoint's own config.json must exist, parse and describe the plan's model.
TEST(HostileCli, CheckpointConfigJsonIsChecked) {
  Rig s;
  std::string out;
  const std::string cfg = s / "ck/config.json", orig = readFile(cfg);
  nlohmann::json j = nlohmann::json::parse(orig);
  j["norm_eps"] = 1e-3;  // same tensors, another model
  writeFileAtomic(cfg, j.dump());
  EXPECT_EQ(2, s.run("--checkpoint " + s / "ck", "o", &out));
  EXPECT_NE(out.find("norm_eps"), std::string::npos) << out;
  writeFileAtomic(cfg, "{\"hidden_size\": 24,");
  EXPECT_EQ(2, s.run("--checkpoint " + s / "ck", "o", &out));
  EXPECT_NE(out.find("config.json"), std::string::npos) << out;
  fs::remove(cfg);
  EXPECT_EQ(2, s.run("--checkpoint " + s / "ck", "o", &out));
  EXPECT_NE(out.find("config.json"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(s / "o.safetensors"));
}

TEST(HostileCli, OutputsThatAliasInputsAreRefused) {
  Rig s;
  std::string out;
  const std::string req = readFile(s / "r.safetensors"), plan = readFile(s / "plan/plan.json");
  EXPECT_EQ(2, runTool("run" + s.base + " --synthetic 6 --out " + s / "r.safetensors --ledger " + s / "l.json", &out));
  EXPECT_NE(out.find("same file"), std::string::npos) << out;
  EXPECT_EQ(2, runTool("run" + s.base + " --synthetic 6 --out " + s / "o.safetensors --ledger " + s / "plan/plan.json",
                       &out));
  EXPECT_NE(out.find("inside"), std::string::npos) << out;
  EXPECT_EQ(2, runTool("checkpoint snapshot " + s / "ck -o " + s / "ck/config.json", &out));
  EXPECT_EQ(2, runTool("request make --config " + s / "ck/config.json --text 1 --audio 1 --video 1,1,1 --seed 1 -o " +
                       s / "ck/config.json", &out));
  EXPECT_EQ(req, readFile(s / "r.safetensors"));
  EXPECT_EQ(plan, readFile(s / "plan/plan.json"));
  EXPECT_FALSE(fs::exists(s / "o.safetensors"));
}

TEST(HostileCli, BindGlobMatchingNoNodeIsAnError) {
  Rig s;
  std::string out;
  EXPECT_EQ(2, s.run("--synthetic 6", "o", &out, " --mode audit --bind 'transformer_block.*=reference'"));
  EXPECT_NE(out.find("matches no node"), std::string::npos) << out;
  EXPECT_EQ(0, s.run("--synthetic 6", "o", &out, " --mode audit --bind 'transformer_blocks.1.*=reference'")) << out;
}

TEST(HostileCli, SpecialFilesAndThreadsAreRefused) {
  Rig s;
  std::string out;
  ASSERT_EQ(0, ::mkfifo((s.dir / "pipe").c_str(), 0600));
  // `timeout` guards the test itself: before, this hung forever.
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 6 --plan " + s / "plan" + " --inputs " + s / "pipe" + " --out " +
                       s / "o.safetensors --ledger " + s / "l.json", &out, "timeout 60"));
  EXPECT_NE(out.find("named pipe"), std::string::npos) << out;
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 6 --plan " + s / "pipe" + " --inputs " + s / "r.safetensors" +
                       " --out " + s / "o.safetensors --ledger " + s / "l.json", &out, "timeout 60"));
  EXPECT_EQ(2, runTool("ledger verify /dev/zero", &out, "timeout 60"));
  EXPECT_NE(out.find("character device"), std::string::npos) << out;
  EXPECT_EQ(2, s.run("--synthetic 6", "o", &out, " --threads 100000"));
  EXPECT_FALSE(fs::exists(s / "o.safetensors"));
}

// NaN / Inf: an error in strict mode naming where, recorded (and not accepted) in audit mode.
TEST(HostileCli, NonFiniteWeightsAndInputs) {
  Rig s;
  std::string out;
  const uint16_t nan = 0x7FC0;  // a BF16 quiet NaN
  poke(fs::path(s / "ck") / st::singleFileName(st::kDiffusersPrefix), "transformer_blocks.1.attn.to_k.weight", 5, &nan,
       2);
  EXPECT_EQ(2, s.run("--checkpoint " + s / "ck", "o", &out));
  EXPECT_NE(out.find("transformer_blocks.1.attn.to_k.weight"), std::string::npos) << out;
  EXPECT_NE(out.find("non-finite"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(s / "o.safetensors"));
  ASSERT_EQ(0, s.run("--checkpoint " + s / "ck", "a", &out, " --mode audit")) << out;
  EXPECT_EQ(1, runTool("ledger verify " + s / "a.json", &out));
  EXPECT_NE(out.find("non-finite weight transformer_blocks.1.attn.to_k.weight"), std::string::npos) << out;
  EXPECT_NE(out.find("non-finite output sample"), std::string::npos) << out;
  nlohmann::json l = nlohmann::json::parse(readFile(s / "a.json"));
  EXPECT_EQ(l["accepted"], false);

  const float inf = INFINITY;
  poke(s / "r.safetensors", "hidden_states", 3, &inf, 4);
  EXPECT_EQ(2, s.run("--synthetic 6", "o", &out));
  EXPECT_NE(out.find("hidden_states"), std::string::npos) << out;
  EXPECT_NE(out.find("1 Inf (first: element 3)"), std::string::npos) << out;
}

// Optional Ed25519 signatures (keys made by the openssl tool, an independent implementation): a seal proves
// integrity, the signature proves who sealed.
TEST(HostileCli, SignedLedgersAndTrajectories) {
  Rig s;
  std::string out;
  for (const char *k : {"key", "other"})
    ASSERT_EQ(0, std::system(("openssl genpkey -algorithm ed25519 -out " + s / (std::string(k) + ".pem") +
                              " && openssl pkey -in " + s / (std::string(k) + ".pem") + " -pubout -out " +
                              s / (std::string(k) + ".pub") + " 2>/dev/null")
                                 .c_str()));
  ASSERT_EQ(0, s.run("--synthetic 6", "a", &out, " --sign-key " + s / "key.pem")) << out;
  EXPECT_EQ(0, runTool("ledger verify " + s / "a.json --public-key " + s / "key.pub", &out)) << out;
  EXPECT_NE(out.find("signature: ok"), std::string::npos) << out;
  EXPECT_EQ(1, runTool("ledger verify " + s / "a.json --public-key " + s / "other.pub", &out));
  EXPECT_NE(out.find("another key"), std::string::npos) << out;
  // Changed and resealed by someone without the key: the seal holds, the signature does not.
  nlohmann::json l = nlohmann::json::parse(readFile(s / "a.json"));
  l["header"]["threads"] = 99;
  l.erase("seal");
  l["seal"] = sha256Hex(canonicalJson(l));
  writeFileAtomic(s / "a.json", l.dump());
  EXPECT_EQ(1, runTool("ledger verify " + s / "a.json --public-key " + s / "key.pub", &out));
  EXPECT_NE(out.find("another seal"), std::string::npos) << out;
  fs::remove(s / "a.json.sig");
  EXPECT_EQ(1, runTool("ledger verify " + s / "a.json --public-key " + s / "key.pub", &out));
  // A public key is not a signing key: refused before the run.
  EXPECT_EQ(2, s.run("--synthetic 6", "b", &out, " --sign-key " + s / "key.pub"));
  EXPECT_FALSE(fs::exists(s / "b.json"));

  const std::string gen = "generate --config tiny --synthetic 6 --plan " + s / "plan" + " --request " +
                          s / "r.safetensors" + " --steps 3 --seed 1 --sign-key " + s / "key.pem --out ";
  // Interrupted (nothing signed yet), resumed with the key: signed when it finishes.
  ASSERT_EQ(0, runTool(gen + s / "traj", &out, "H3C_GENERATE_STOP_AFTER=1")) << out;
  EXPECT_EQ(1, runTool("trajectory verify " + s / "traj --public-key " + s / "key.pub", &out)) << out;
  ASSERT_EQ(0, runTool("generate --resume " + s / "traj --sign-key " + s / "key.pem", &out)) << out;
  EXPECT_EQ(0, runTool("trajectory verify " + s / "traj --public-key " + s / "key.pub", &out)) << out;
  EXPECT_NE(out.find("signature: ok"), std::string::npos) << out;
  EXPECT_EQ(1, runTool("trajectory verify " + s / "traj --public-key " + s / "other.pub", &out)) << out;
}
