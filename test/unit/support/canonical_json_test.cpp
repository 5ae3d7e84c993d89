// The sealed JSON form against Python 3's own output: every expected string below is what CPython 3.11 prints for
// repr(x) / json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False) of the same value (written by
// hand from Python, not from this code). scripts/h3c_sealed.py re-checks whole sealed files from Python (ctest
// h3c_sealed_python).
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using h3c::canonicalJson;
using h3c::pythonFloatRepr;
using nlohmann::json;

TEST(CanonicalJson, FloatsAreWrittenAsPythonRepr) {
  const std::pair<double, const char *> cases[] = {
      {0.1, "0.1"},
      {1.0, "1.0"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {100.0, "100.0"},
      {1234.5, "1234.5"},
      {1.0 / 3.0, "0.3333333333333333"},
      {2.0 / 3.0, "0.6666666666666666"},
      {double(0.1f), "0.10000000149011612"},
      {1e-05, "1e-05"},
      {0.0001, "0.0001"},
      {0.00012345, "0.00012345"},
      {1.5e-07, "1.5e-07"},
      {1e15, "1000000000000000.0"},  // nlohmann writes 1e+15
      {9007199254740993.0, "9007199254740992.0"},
      {1e16, "1e+16"},
      {12345678901234567.0, "1.2345678901234568e+16"},
      {1e22, "1e+22"},
      {1e23, "1e+23"},  // Grisu2 writes 9.999999999999999e+22
      {-2.5e-300, "-2.5e-300"},
      {5e-324, "5e-324"},
      {std::numeric_limits<double>::max(), "1.7976931348623157e+308"},
      {-123.456, "-123.456"},
  };
  for (auto [x, want] : cases)
    EXPECT_EQ(pythonFloatRepr(x), want) << want;
  EXPECT_THROW(pythonFloatRepr(NAN), h3c::Error);
}

TEST(CanonicalJson, CompactSortedAndPythonIdentical) {
  json j = json::parse(R"({"b": [1, 2.5, -3, 1e-5, 1e15], "a": {"z": null, "y": true, "x": "é\n\"q\""}, "c": 1e23})");
  EXPECT_EQ(canonicalJson(j),
            "{\"a\":{\"x\":\"é\\n\\\"q\\\"\",\"y\":true,\"z\":null},\"b\":[1,2.5,-3,1e-05,1000000000000000.0],"
            "\"c\":1e+23}");
  EXPECT_EQ(canonicalJson(json{{"b", 1}, {"a", {1, 2}}}), "{\"a\":[1,2],\"b\":1}");
  EXPECT_EQ(canonicalJson(json::object()), "{}");
  EXPECT_EQ(canonicalJson(json::array()), "[]");
  EXPECT_EQ(canonicalJson(json(NAN)), "null");
  EXPECT_EQ(canonicalJson(json(uint64_t(18446744073709551615ull))), "18446744073709551615");
}

TEST(CanonicalJson, IndentedFormMatchesNlohmannLayout) {
  json j = {{"k", {1, 2, {{"x", "s"}}}}, {"e", json::object()}, {"f", json::array()}, {"n", 3}};
  EXPECT_EQ(h3c::sealedJsonDump(j, 1), j.dump(1));  // no floats: layout only
  json g = {{"v", 0.1}, {"w", {1e15}}};
  EXPECT_EQ(h3c::sealedJsonDump(g, 1), "{\n \"v\": 0.1,\n \"w\": [\n  1000000000000000.0\n ]\n}");
}
