// `h3c request make`, `h3c run`, `h3c ledger verify|summary` end to end through the binary (H3C_TOOL), over a
// hand-built plan, and over `h3c compile`'s plan when this h3c has the compiler; then hostile and careless input.
#include "test_plans.h"

#include "h3c/support/canonical_json.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include "f32_folder.h"
#include "tool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <fstream>
#include <sys/stat.h>
#include <sys/wait.h>

namespace fs = std::filesystem;
using namespace h3c;

using h3c::testtool::runTool;

namespace {

struct Tmp {
  fs::path dir;
  Tmp() {
    dir = fs::temp_directory_path() / ("h3c_rt_cli_" + std::to_string(::getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Tmp() { fs::remove_all(dir); }
  std::string operator/(const std::string &f) const { return (dir / f).string(); }
};


void writePlan(const std::string &dir, const nlohmann::json &plan) {
  fs::create_directories(dir);
  writeFileAtomic(dir + "/plan.json", plan.dump(1));
}

std::string bytesOf(const std::string &path) { return readFile(path); }


} // namespace

TEST(RuntimeCli, RequestRunLedgerVerify) {
  Tmp t;
  writePlan(t / "plan", rt::testplans::modelPlan(h3::namedConfig("tiny"), true));
  std::string out;
  ASSERT_EQ(0, runTool("request make --config tiny --text 5 --audio 3 --video 2,2,3 --seed 4 --timesteps 2 -o " +
                   t / "req.safetensors", &out)) << out;
  ASSERT_EQ(0, runTool("request make --config tiny --text 5 --audio 3 --video 2,2,3 --seed 4 --timesteps 2 --shuffle "
                   "-o " + t / "req_shuf.safetensors", &out)) << out;
  ASSERT_EQ(0, runTool("run --config tiny --synthetic 7 --plan " + t / "plan" + " --inputs " + t / "req.safetensors" +
                   " --out " + t / "out.safetensors" + " --device cpu --mode strict --ledger " + t / "ledger.json",
                   &out)) << out;
  ASSERT_EQ(0, runTool("run --config tiny --synthetic 7 --plan " + t / "plan" + " --inputs " + t / "req_shuf.safetensors" +
                   " --out " + t / "out_shuf.safetensors" + " --threads 1 --ledger " + t / "ledger_shuf.json",
                   &out)) << out;
  // Outputs: the two names, F32, the request's shapes; and byte-equal for the permuted request.
  st::File f(t / "out.safetensors");
  ASSERT_NE(f.find("sample"), nullptr);
  ASSERT_NE(f.find("audio_sample"), nullptr);
  EXPECT_EQ(f.find("sample")->shape, (std::vector<int64_t>{1, 12, 16}));
  EXPECT_EQ(f.find("audio_sample")->shape, (std::vector<int64_t>{1, 3, 6}));
  EXPECT_EQ(f.find("sample")->dtype, DType::F32);
  EXPECT_EQ(bytesOf(t / "out.safetensors"), bytesOf(t / "out_shuf.safetensors"));

  EXPECT_EQ(0, runTool("ledger verify " + t / "ledger.json", &out)) << out;
  EXPECT_EQ(0, runTool("ledger summary " + t / "ledger.json", &out)) << out;
  EXPECT_NE(out.find("row"), std::string::npos);
  EXPECT_NE(out.find("accepted: true"), std::string::npos);
  const auto ledger = nlohmann::json::parse(readFile(t / "ledger.json"));
  EXPECT_NE(out.find("weights: sha256 " + ledger["header"]["weights"]["sha256"].get<std::string>()), std::string::npos)
      << out;

  // Tampering: any change breaks the seal -> verify exits 1.
  auto l = nlohmann::json::parse(readFile(t / "ledger.json"));
  l["nodes"][3]["actual"] = "native";
  writeFileAtomic(t / "tampered.json", l.dump());
  EXPECT_EQ(1, runTool("ledger verify " + t / "tampered.json", &out)) << out;
  EXPECT_NE(out.find("seal"), std::string::npos);
  // Resealed after the change: the seal holds but the strict rule fails, naming the node.
  l.erase("seal");
  l["seal"] = sha256Hex(canonicalJson(l));
  writeFileAtomic(t / "resealed.json", l.dump());
  EXPECT_EQ(1, runTool("ledger verify " + t / "resealed.json", &out)) << out;
  EXPECT_NE(out.find(l["nodes"][3]["id"].get<std::string>()), std::string::npos);
}

TEST(RuntimeCli, StrictRunWithReferenceBindingFailsAndWritesNoOutput) {
  Tmp t;
  writePlan(t / "plan", rt::testplans::modelPlan(h3::namedConfig("tiny"), false));
  std::string out;
  ASSERT_EQ(0, runTool("request make --config tiny --text 2 --audio 2 --video 1,2,2 --seed 1 -o " + t / "req.safetensors"));
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 1 --plan " + t / "plan" + " --inputs " + t / "req.safetensors" +
                   " --out " + t / "out.safetensors" + " --bind 'transformer_blocks.0.ff.*=reference' --ledger " +
                   t / "ledger.json", &out));
  EXPECT_NE(out.find("transformer_blocks.0.ff.net.0.proj"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(t / "out.safetensors"));
  EXPECT_EQ(1, runTool("ledger verify " + t / "ledger.json", &out)) << out;  // evidence kept, strict rule violated
  // Audit mode accepts the run (the ledger says what ran) and writes the outputs.
  EXPECT_EQ(0, runTool("run --config tiny --synthetic 1 --plan " + t / "plan" + " --inputs " + t / "req.safetensors" +
                   " --out " + t / "out.safetensors" + " --mode audit --ledger " + t / "ledger_a.json", &out))
      << out;
  EXPECT_TRUE(fs::exists(t / "out.safetensors"));
  auto l = nlohmann::json::parse(readFile(t / "ledger_a.json"));
  EXPECT_TRUE(l["nodes"][5].contains("audit"));
}

TEST(RuntimeCli, BadInputsFailClosed) {
  Tmp t;
  writePlan(t / "plan", rt::testplans::modelPlan(h3::namedConfig("tiny"), false));
  std::string out;
  ASSERT_EQ(0, runTool("request make --config small --text 2 --audio 2 --video 1,2,2 --seed 1 -o " + t / "small.safetensors"));
  // A request of another config: channel counts disagree with the plan's config.
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 1 --plan " + t / "plan" + " --inputs " + t / "small.safetensors" +
                   " --out " + t / "o.safetensors --ledger " + t / "l.json", &out));
  EXPECT_NE(out.find("h3c: error:"), std::string::npos);
  EXPECT_NE(out.find("channels"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(t / "o.safetensors"));
  EXPECT_FALSE(fs::exists(t / "l.json"));
  // Config mismatch with the plan, tp mismatch, missing weights option, bad mode, bad --video.
  ASSERT_EQ(0, runTool("request make --config tiny --text 2 --audio 2 --video 1,2,2 --seed 1 -o " + t / "r.safetensors"));
  std::string base = " --plan " + t / "plan" + " --inputs " + t / "r.safetensors" + " --out " + t / "o.safetensors" +
                     " --ledger " + t / "l.json";
  EXPECT_EQ(2, runTool("run --config small --synthetic 1" + base, &out));
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 1 --tp 2" + base, &out));
  EXPECT_NE(out.find("tp"), std::string::npos);
  EXPECT_EQ(2, runTool("run --config tiny" + base, &out));
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 1 --mode lax" + base, &out));
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 1 --device tpu" + base, &out));
  EXPECT_EQ(2, runTool("request make --config tiny --video 1,2 --seed 1 -o " + t / "x.safetensors", &out));
  // A tampered plan (content changed, hash not updated).
  auto p = nlohmann::json::parse(readFile(t / "plan/plan.json"));
  p["functions"]["forward"]["ops"][1]["order"]["units"] = 2;
  writePlan(t / "plan2", p);
  EXPECT_EQ(2, runTool("run --config tiny --synthetic 1 --plan " + t / "plan2" + " --inputs " + t / "r.safetensors" +
                   " --out " + t / "o.safetensors --ledger " + t / "l.json", &out));
  EXPECT_NE(out.find("plan_sha256"), std::string::npos) << out;
  // A checkpoint folder that does not exist / does not match: the check runs first and fails closed.
  EXPECT_EQ(2, runTool("run --config tiny --checkpoint " + t / "nope" + base, &out));
  EXPECT_FALSE(fs::exists(t / "o.safetensors"));
}

// Synthetic weights and the same weights written by `h3c checkpoint synth` give the same bytes.
TEST(RuntimeCli, CheckpointFolderEqualsSyntheticSeed) {
  Tmp t;
  writePlan(t / "plan", rt::testplans::modelPlan(h3::namedConfig("tiny"), true));
  std::string out;
  if (runTool("checkpoint synth --help", &out) != 0)
    GTEST_SKIP() << "this h3c has no `checkpoint synth`";
  ASSERT_EQ(0, runTool("checkpoint synth --config tiny --seed 6 --shard-size 20000 --out " + t / "ckpt", &out)) << out;
  ASSERT_EQ(0, runTool("request make --config tiny --text 3 --audio 2 --video 1,2,2 --seed 2 -o " + t / "r.safetensors"));
  std::string base = " --plan " + t / "plan" + " --inputs " + t / "r.safetensors";
  ASSERT_EQ(0, runTool("run --config tiny --synthetic 6" + base + " --out " + t / "a.safetensors --ledger " + t / "a.json",
                   &out)) << out;
  ASSERT_EQ(0, runTool("run --config tiny --checkpoint " + t / "ckpt" + base + " --out " + t / "b.safetensors --ledger " +
                   t / "b.json", &out)) << out;
  EXPECT_EQ(bytesOf(t / "a.safetensors"), bytesOf(t / "b.safetensors"));
  // The same weights in the native (vLLM-Omni / release) naming, read through the mapper: same bytes.
  ASSERT_EQ(0, runTool("checkpoint map " + t / "ckpt" + " -o " + t / "native" + " --to native", &out)) << out;
  ASSERT_EQ(0, runTool("run --config tiny --checkpoint " + t / "native" + base + " --out " + t / "c.safetensors --ledger " +
                    t / "c.json", &out)) << out;
  EXPECT_EQ(bytesOf(t / "a.safetensors"), bytesOf(t / "c.safetensors"));
  EXPECT_EQ(nlohmann::json::parse(readFile(t / "c.json"))["header"]["checkpoint"]["format"], "native");
  // A checkpoint of another config fails the check before anything runs.
  ASSERT_EQ(0, runTool("checkpoint synth --config small --seed 6 --out " + t / "small", &out)) << out;
  EXPECT_EQ(2, runTool("run --config tiny --checkpoint " + t / "small" + base + " --out " + t / "d.safetensors --ledger " +
                    t / "d.json", &out));
  EXPECT_FALSE(fs::exists(t / "d.safetensors"));
  auto l = nlohmann::json::parse(readFile(t / "b.json"));
  EXPECT_EQ(l["header"]["checkpoint"]["kind"], "checkpoint");
  EXPECT_EQ(l["header"]["checkpoint"]["content_sha256"].get<std::string>().size(), 64u);
}

// The compiler's plans (when this h3c has `compile`): tp 1/2 and fuse/no-fuse give byte-equal outputs, the hand
// plan's bytes too (same orders by contract), and the ledger is complete.
TEST(RuntimeCli, CompiledPlansRunAndAgree) {
  if (!h3c::testtool::toolHasCompile())
    GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Tmp t;
  std::string out;
  ASSERT_EQ(0, runTool("fingerprint derive --config tiny -o " + t / "fp.json", &out)) << out;
  ASSERT_EQ(0, runTool("request make --config tiny --text 4 --audio 3 --video 2,2,2 --seed 5 --timesteps 2 --shuffle -o " +
                   t / "r.safetensors"));
  std::string first;
  int k = 0;
  for (std::string opts : {"--tp 1", "--tp 1 --no-fuse", "--tp 2", "--tp 2 --no-fuse"}) {
    std::string dir = t / ("plan" + std::to_string(k++));
    ASSERT_EQ(0, runTool("compile " + t / "fp.json " + opts + " -o " + dir, &out)) << opts << "\n" << out;
    std::string o = dir + ".out.safetensors";
    ASSERT_EQ(0, runTool("run --config tiny --synthetic 3 --plan " + dir + " --inputs " + t / "r.safetensors" + " --out " +
                      o + " --ledger " + dir + ".ledger.json", &out)) << opts << "\n" << out;
    EXPECT_EQ(0, runTool("ledger verify " + dir + ".ledger.json", &out)) << out;
    if (first.empty())
      first = bytesOf(o);
    else
      EXPECT_EQ(first, bytesOf(o)) << opts;
  }
  // The hand-written plan of the same config gives the same bytes (same orders by contract).
  writePlan(t / "hand", rt::testplans::modelPlan(h3::namedConfig("tiny"), true));
  ASSERT_EQ(0, runTool("run --config tiny --synthetic 3 --plan " + t / "hand" + " --inputs " + t / "r.safetensors" +
                    " --out " + t / "hand.safetensors --ledger " + t / "hand.json", &out)) << out;
  EXPECT_EQ(first, bytesOf(t / "hand.safetensors"));
}

// ---- Hostile and careless input (issue 18) -------------------------------------------------------------------------
// Every case here was a silent wrong result, a destroyed input or a hang before. Expectations are independent: the
// same weights read through another layout give the same bytes, refused runs leave their inputs byte-identical and
// write nothing. (In this file, not one of its own: test_plans.h is most of a translation unit's compile time.)

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
  ASSERT_EQ(0, runTool("checkpoint map --to native --qkv-layout concat " + s / "ck" + " -o " + s / "concat", &out)) << out;
  ASSERT_EQ(0, runTool("checkpoint map --to native --qkv-layout interleaved " + s / "ck" + " -o " + s / "inter", &out));
  ASSERT_EQ(0, s.run("--checkpoint " + s / "ck", "a", &out)) << out;
  ASSERT_EQ(0, s.run("--checkpoint " + s / "concat", "b", &out)) << out;
  ASSERT_EQ(0, s.run("--checkpoint " + s / "inter", "c", &out)) << out;
  EXPECT_EQ(readFile(s / "a.safetensors"), readFile(s / "b.safetensors"));
  EXPECT_EQ(readFile(s / "a.safetensors"), readFile(s / "c.safetensors"));
}

// A float32 diffusers folder (save_pretrained without torch_dtype; mixed: a fifth of the BF16 tensors left BF16)
// runs, and its outputs are byte for byte those of the BF16 folder holding the reference-rounded values
// (f32_folder.h), not those of the folder it was widened from (a truncating cast would give those); the ledger
// records the cast and the stored bytes' content hash (`h3c checkpoint snapshot`'s); `h3c checkpoint check` calls
// the folder loadable with a cast.
TEST(HostileCli, Float32FolderRunsAsItsRoundedBf16) {
  Rig s;
  std::string out;
  size_t k = 0;
  const auto w32 = testf32::writeF32Folder(s.dir / "ck", s.dir / "f32", h3::namedConfig("tiny"),
                                           [&](const std::string &) { return k++ % 5 != 0; }, "", 0, s.dir / "rounded");
  ASSERT_GT(w32.cast.size(), 10u);
  ASSERT_EQ(0, s.run("--checkpoint " + s / "f32", "f32", &out)) << out;
  ASSERT_EQ(0, s.run("--checkpoint " + s / "rounded", "rounded", &out)) << out;
  ASSERT_EQ(0, s.run("--checkpoint " + s / "ck", "widened_from", &out)) << out;
  EXPECT_EQ(readFile(s / "f32.safetensors"), readFile(s / "rounded.safetensors"));
  EXPECT_NE(readFile(s / "f32.safetensors"), readFile(s / "widened_from.safetensors"));
  EXPECT_EQ(0, runTool("ledger verify " + s / "f32.json", &out)) << out;
  const nlohmann::json ck = nlohmann::json::parse(readFile(s / "f32.json"))["header"]["checkpoint"];
  EXPECT_EQ(ck["cast"], (nlohmann::json{{"from", "F32"}, {"to", "BF16"}, {"rounding", "nearest-even"},
                                        {"tensors", w32.cast.size()}}));
  ASSERT_EQ(0, runTool("checkpoint snapshot " + s / "f32 -o " + s / "snap.json", &out)) << out;
  EXPECT_EQ(ck["content_sha256"], nlohmann::json::parse(readFile(s / "snap.json"))["content_sha256"]);
  EXPECT_FALSE(nlohmann::json::parse(readFile(s / "rounded.json"))["header"]["checkpoint"].contains("cast"));
  ASSERT_EQ(0, runTool("checkpoint check --json " + s / "f32", &out)) << out;
  const nlohmann::json rep = nlohmann::json::parse(out);
  EXPECT_EQ(rep["ok"], true);
  EXPECT_TRUE(rep["mismatched"].empty());
  EXPECT_EQ(rep["cast"].get<std::set<std::string>>(), w32.cast);
  EXPECT_EQ(rep["cast"].size(), w32.cast.size());
  ASSERT_EQ(0, runTool("checkpoint check " + s / "f32", &out)) << out;
  EXPECT_NE(out.find("ok: all 62 tensors match, " + std::to_string(w32.cast.size()) +
                     " of them stored as F32 where BF16 is expected"),
            std::string::npos)
      << out;
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
  // A new file inside the checkpoint folder is a file the folder did not have: `checkpoint check` fails after.
  EXPECT_EQ(2, runTool("checkpoint snapshot " + s / "ck -o " + s / "ck/snapshot.json", &out));
  EXPECT_NE(out.find("inside"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(s / "ck/snapshot.json"));
  EXPECT_EQ(2, runTool("request make --config " + s / "ck/config.json --text 1 --audio 1 --video 1,1,1 --seed 1 -o " +
                       s / "ck/config.json", &out));
  EXPECT_EQ(req, readFile(s / "r.safetensors"));
  EXPECT_EQ(plan, readFile(s / "plan/plan.json"));
  EXPECT_FALSE(fs::exists(s / "o.safetensors"));
  // `trajectory drift --plot` into a trajectory it compares: a file there is one the verifier does not expect.
  ASSERT_EQ(0, runTool("generate --config tiny --synthetic 6 --plan " + s / "plan" + " --inputs " +
                       s / "r.safetensors --steps 2 --seed 1 --out " + s / "traj", &out)) << out;
  const std::string header = readFile(s / "traj/header.json");
  EXPECT_EQ(2, runTool("trajectory drift " + s / "traj" + " " + s / "traj --plot " + s / "traj/drift.svg", &out));
  EXPECT_NE(out.find("inside"), std::string::npos) << out;
  EXPECT_EQ(2, runTool("trajectory drift " + s / "traj" + " " + s / "traj --plot " + s / "traj/header.json", &out));
  EXPECT_FALSE(fs::exists(s / "traj/drift.svg"));
  EXPECT_EQ(header, readFile(s / "traj/header.json"));
  EXPECT_EQ(0, runTool("trajectory verify " + s / "traj", &out)) << out;
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

// 100,000 levels of nesting in a 200 KB file, given to every command that reads a JSON file: each is refused with
// the depth error. Before, each one crashed with a stack overflow (a signal, not exit 2).
TEST(HostileCli, DeeplyNestedJsonIsRefusedByEveryReader) {
  Rig s;
  std::string out;
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  writeFileAtomic(s.dir / "deep.json", deep);
  fs::create_directories(s.dir / "deepplan");
  writeFileAtomic(s.dir / "deepplan" / "plan.json", deep);
  fs::create_directories(s.dir / "traj");
  writeFileAtomic(s.dir / "traj" / "header.json", deep);
  const std::string r = " --inputs " + s / "r.safetensors" + " --out " + s / "o.safetensors --ledger " + s / "l.json";
  for (const std::string &cmd :
       {"fingerprint validate " + s / "deep.json", "ledger verify " + s / "deep.json",
        "ledger summary " + s / "deep.json", "run --config tiny --synthetic 6 --plan " + s / "deepplan" + r,
        "run --config " + s / "deep.json" + " --synthetic 6 --plan " + s / "plan" + r,
        "request make --config " + s / "deep.json" + " --text 1 --audio 1 --video 1,1,1 --seed 1 -o " + s / "q.st",
        "trajectory verify " + s / "traj"}) {
    const int rc = runTool(cmd, &out, "timeout 60");
    EXPECT_TRUE(rc == 1 || rc == 2) << cmd << " exited " << rc << ": " << out;
    EXPECT_NE(out.find("nesting deeper"), std::string::npos) << cmd << ": " << out;
  }
  EXPECT_FALSE(fs::exists(s / "o.safetensors"));
  EXPECT_FALSE(fs::exists(s / "l.json"));
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
  EXPECT_NE(out.find("1 Inf (first: element 3, +Inf)"), std::string::npos) << out;
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

  const std::string gen = "generate --config tiny --synthetic 6 --plan " + s / "plan" + " --inputs " +
                          s / "r.safetensors" + " --steps 3 --seed 1 --sign-key " + s / "key.pem --out ";
  // Interrupted (nothing signed yet), resumed with the key: signed when it finishes.
  ASSERT_EQ(0, runTool(gen + s / "traj", &out, "H3C_GENERATE_STOP_AFTER=1")) << out;
  EXPECT_EQ(1, runTool("trajectory verify " + s / "traj --public-key " + s / "key.pub", &out)) << out;
  ASSERT_EQ(0, runTool("generate --resume " + s / "traj --sign-key " + s / "key.pem", &out)) << out;
  EXPECT_EQ(0, runTool("trajectory verify " + s / "traj --public-key " + s / "key.pub", &out)) << out;
  EXPECT_NE(out.find("signature: ok"), std::string::npos) << out;
  EXPECT_EQ(1, runTool("trajectory verify " + s / "traj --public-key " + s / "other.pub", &out)) << out;
}
