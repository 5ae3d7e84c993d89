// Typed field access for the plan reader: every accessor names the JSON pointer of what it rejects.
#pragma once

#include "h3c/support/error.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

namespace h3c::plan::detail {

using nlohmann::json;

inline const json &member(const json &j, const std::string &key, const std::string &where) {
  if (!j.is_object()) fail(where, "expected an object");
  auto it = j.find(key);
  if (it == j.end()) fail(where + "/" + key, "missing");
  return *it;
}

inline std::string str(const json &j, const std::string &where) {
  if (!j.is_string()) fail(where, "expected a string, got {}", j.dump());
  return j.get<std::string>();
}

inline int64_t integer(const json &j, const std::string &where) {
  if (!j.is_number_integer()) fail(where, "expected an integer, got {}", j.dump());
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX)) fail(where, "integer out of range");
  return j.get<int64_t>();
}

inline int64_t positive(const json &j, const std::string &where, int64_t max = int64_t(1) << 40) {
  int64_t v = integer(j, where);
  if (v <= 0 || v > max) fail(where, "expected an integer in [1, {}], got {}", max, v);
  return v;
}

inline int64_t nonNegative(const json &j, const std::string &where, int64_t max = int64_t(1) << 40) {
  int64_t v = integer(j, where);
  if (v < 0 || v > max) fail(where, "expected an integer in [0, {}], got {}", max, v);
  return v;
}

inline double number(const json &j, const std::string &where) {
  if (!j.is_number()) fail(where, "expected a number, got {}", j.dump());
  return j.get<double>();
}

inline bool boolean(const json &j, const std::string &where) {
  if (!j.is_boolean()) fail(where, "expected true or false, got {}", j.dump());
  return j.get<bool>();
}

inline const json &array(const json &j, const std::string &where) {
  if (!j.is_array()) fail(where, "expected an array, got {}", j.dump().substr(0, 80));
  return j;
}

inline std::vector<std::string> strList(const json &j, const std::string &where) {
  array(j, where);
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i) out.push_back(str(j[i], where + "/" + std::to_string(i)));
  return out;
}

inline void onlyKeys(const json &j, const std::set<std::string> &allowed, const std::string &where) {
  if (!j.is_object()) fail(where, "expected an object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key())) fail(where + "/" + it.key(), "unknown field");
}

} // namespace h3c::plan::detail
