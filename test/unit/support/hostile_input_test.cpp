// Hostile and careless input to the support layer (issue 18): the one JSON reader policy, safetensors headers of many
// tensors in linear time, inputs that are not regular files, outputs that alias inputs, a mapped file that shrinks.
// Expectations are the rules themselves (json_read.h, files.h), never output captured from this code.
#include "error_of.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/json_read.h"
#include "h3c/support/safetensors.h"

#include "tool.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>

namespace fs = std::filesystem;
using namespace h3c;

namespace {

using Tmp = h3c::testtool::TempDir;

using h3c::testtool::errorOf;

} // namespace

TEST(JsonRead, DeepNestingIsAnErrorNotACrash) {
  // 100,000 levels (the issue's 250 KB file): nlohmann would parse it, and every recursive walk after would overflow.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(errorOf([&] { parseJson(deep, "deep.json"); }).find("nesting deeper than 64"), std::string::npos);
  std::string objs;
  for (int i = 0; i < 100000; ++i) objs += "{\"a\":";
  objs += "1" + std::string(100000, '}');
  EXPECT_NE(errorOf([&] { parseJson(objs, "deep.json"); }).find("nesting deeper"), std::string::npos);
  // Exactly at the limit is fine; one more level is not.
  EXPECT_EQ(parseJson(std::string(3, '[') + std::string(3, ']'), "x", 3), nlohmann::json::parse("[[[]]]"));
  EXPECT_THROW(parseJson(std::string(4, '[') + std::string(4, ']'), "x", 3), Error);
}

TEST(JsonRead, DuplicatesTrailingBytesAndNul) {
  EXPECT_NE(errorOf([] { parseJson(R"({"a": 1, "a": 2})", "f"); }).find("duplicate key 'a'"), std::string::npos);
  EXPECT_NE(errorOf([] { parseJson(R"({"o": {"k": 1, "k": 1}})", "f"); }).find("duplicate key 'k' in 'o'"),
            std::string::npos);
  EXPECT_NE(errorOf([] { parseJson(R"([{"k": 1, "k": 1}])", "f"); }).find("duplicate key 'k'"), std::string::npos);
  EXPECT_THROW(parseJson("{} {}", "f"), Error);
  EXPECT_THROW(parseJson("{}x", "f"), Error);
  EXPECT_THROW(parseJson(std::string("{}\0{}", 5), "f"), Error);
  EXPECT_THROW(parseJson("", "f"), Error);
  EXPECT_THROW(parseJson("{\"a\": \"\xff\"}", "f"), Error);  // invalid UTF-8 in a string
  // Well-formed input gives nlohmann's own tree (an independent reader), keys in any order, whitespace allowed.
  const char *ok = " {\"b\": [1, -2, 3.5, \"x\", null, true, {\"c\": {}}], \"a\": 18446744073709551615} \n";
  EXPECT_EQ(parseJson(ok, "f"), nlohmann::json::parse(ok));
}

TEST(SafetensorsHostile, ManyTensorsParseInLinearTime) {
  // The issue's sizes: 40,000 one-byte tensors took 13 s in the quadratic callback parser, 200,000 over two minutes;
  // linear takes well under a second for 200,000 (the sanitizer build, ~10x slower, parses the smaller one).
#ifdef H3C_SANITIZED
  const int n = 40000;
#else
  const int n = 200000;
#endif
  std::string json = "{";
  for (int i = 0; i < n; ++i)
    json += fmt::format("{}\"t{}\":{{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[{},{}]}}", i ? "," : "", i, i,
                        i + 1);
  json += "}";
  std::string file(8, '\0');
  uint64_t len = json.size();
  std::memcpy(file.data(), &len, 8);
  file += json + std::string(size_t(n), 'x');
  auto t0 = std::chrono::steady_clock::now();
  st::Header h = st::parseHeader(reinterpret_cast<const uint8_t *>(file.data()), file.size(), "many");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(h.tensors.size(), size_t(n));
  const double limit = 8.0;  // linear: ~1-2 s on a loaded machine (either build); quadratic: a minute or more
  EXPECT_LT(s, limit) << "parsing " << n << " entries took " << s << " s";
}

TEST(FilesHostile, SpecialFilesAreRefusedWithoutBlocking) {
  Tmp t("h3c_hostile");
  const fs::path fifo = t.dir / "pipe";
  ASSERT_EQ(0, ::mkfifo(fifo.c_str(), 0600));
  // Opening a FIFO with no writer would block forever; reading /dev/zero would never end.
  EXPECT_NE(errorOf([&] { readFile(fifo); }).find("named pipe"), std::string::npos);
  EXPECT_NE(errorOf([&] { MappedFile m(fifo); }).find("named pipe"), std::string::npos);
  EXPECT_NE(errorOf([&] { st::File f(fifo); }).find("named pipe"), std::string::npos);
  EXPECT_NE(errorOf([] { readFile("/dev/zero"); }).find("character device"), std::string::npos);
  EXPECT_NE(errorOf([] { MappedFile m("/dev/zero"); }).find("character device"), std::string::npos);
  EXPECT_NE(errorOf([&] { readFile(t.dir); }).find("folder"), std::string::npos);
  // A size limit is checked before reading.
  writeFileAtomic(t.dir / "big.json", std::string(100, ' '));
  EXPECT_NE(errorOf([&] { readFile(t.dir / "big.json", 99); }).find("more than the 99 bytes"), std::string::npos);
  EXPECT_EQ(readFile(t.dir / "big.json", 100).size(), 100u);
}

TEST(FilesHostile, OutputsNeverAliasInputs) {
  Tmp t("h3c_hostile");
  writeFileAtomic(t.dir / "req.safetensors", "r");
  fs::create_directories(t.dir / "plan");
  writeFileAtomic(t.dir / "plan" / "plan.json", "{}");
  fs::create_symlink(t.dir / "req.safetensors", t.dir / "link.safetensors");
  ASSERT_EQ(0, ::link((t.dir / "req.safetensors").c_str(), (t.dir / "hard.safetensors").c_str()));
  auto refused = [&](std::vector<PathArg> in, std::vector<PathArg> out, const char *why) {
    std::string e = errorOf([&] { checkOutputsApart(in, out); });
    EXPECT_NE(e.find(why), std::string::npos) << e;
  };
  const fs::path req = t.dir / "req.safetensors";
  refused({{"--inputs", req}}, {{"--out", req}}, "same file");
  refused({{"--inputs", req}}, {{"--out", t.dir / "." / "req.safetensors"}}, "same file");
  refused({{"--inputs", req}}, {{"--out", t.dir / "link.safetensors"}}, "same file");
  refused({{"--inputs", req}}, {{"--out", t.dir / "hard.safetensors"}}, "same file");  // by inode
  refused({{"--plan", t.dir / "plan"}}, {{"--ledger", t.dir / "plan" / "plan.json"}}, "lies inside");
  refused({{"--plan", t.dir / "plan"}}, {{"--ledger", t.dir / "plan" / "new.json"}}, "lies inside");
  refused({{"IN", t.dir / "plan" / "plan.json"}}, {{"-o", t.dir / "plan"}}, "holds");
  refused({}, {{"--out", t.dir / "o.safetensors"}, {"--ledger", t.dir / "o.safetensors"}}, "also given");
  refused({}, {{"--out", t.dir / "traj"}, {"--ledger", t.dir / "traj" / "ledgers"}}, "nest");
  // Apart: siblings, a named config that is not a file, empty (not given) paths.
  EXPECT_NO_THROW(checkOutputsApart({{"--inputs", req}, {"--config", "tiny"}, {"--checkpoint", ""}},
                                    {{"--out", t.dir / "out.safetensors"}, {"--ledger", t.dir / "ledger.json"}}));
}

TEST(FilesHostileDeathTest, ShrunkMappedFileIsAnErrorExit) {
  Tmp t("h3c_hostile");
  const fs::path f = t.dir / "shrinks.bin";
  writeFileAtomic(f, std::string(1 << 16, 'a'));
  EXPECT_EXIT(
      {
        installMappedFileFaultHandler();
        MappedFile m(f);
        ::truncate(f.c_str(), 0);  // another process truncates the checkpoint under a running command
        volatile uint8_t x = m.data()[1 << 15];
        (void)x;
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kExitError), "shrank while it was read");
}
