// The sealed JSON writer (canonical_json.h): nlohmann's value tree, Python's float repr.
#include "h3c/support/canonical_json.h"

#include "h3c/support/error.h"

#include <charconv>
#include <cstdio>
#include <cmath>
#include <cstdlib>

namespace h3c {

std::string pythonFloatRepr(double x) {
  if (!std::isfinite(x))
    fail("json", "a non-finite number has no JSON form");
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e(+|-)XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  if (res.ec != std::errc())
    fail("json", "cannot format a double");
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  if (digits.size() > 1)
    digits.erase(1, 1);  // drop the point
  const int exp10 = std::atoi(s.c_str() + e + 1);
  const int decpt = exp10 + 1;  // the decimal point sits after `decpt` digits
  const int n = int(digits.size());
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {  // Python: exponent form when decpt <= -4 or decpt > 16
    if (decpt <= 0)
      out += "0." + std::string(size_t(-decpt), '0') + digits;
    else if (decpt < n)
      out += digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
    else
      out += digits + std::string(size_t(decpt - n), '0') + ".0";
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1)
    out += "." + digits.substr(1);
  const int ex = decpt - 1;
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
  return out + eb;
}

namespace {

void dumpInto(const nlohmann::json &j, int indent, int depth, std::string &out) {
  using V = nlohmann::json::value_t;
  auto newline = [&](int d) {
    if (indent < 0)
      return;
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  switch (j.type()) {
  case V::object: {
    if (j.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {  // std::map order: sorted by key bytes
      if (!first)
        out += ',';
      first = false;
      newline(depth + 1);
      out += nlohmann::json(it.key()).dump();
      out += indent < 0 ? ":" : ": ";
      dumpInto(it.value(), indent, depth + 1, out);
    }
    newline(depth);
    out += '}';
    return;
  }
  case V::array: {
    if (j.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i)
        out += ',';
      newline(depth + 1);
      dumpInto(j[i], indent, depth + 1, out);
    }
    newline(depth);
    out += ']';
    return;
  }
  case V::number_float: {
    const double x = j.get<double>();
    out += std::isfinite(x) ? pythonFloatRepr(x) : std::string("null");
    return;
  }
  default:  // null, booleans, integers, strings: nlohmann's form is Python's
    out += j.dump(-1, ' ', false);
    return;
  }
}

} // namespace

std::string sealedJsonDump(const nlohmann::json &j, int indent) {
  std::string out;
  dumpInto(j, indent, 0, out);
  return out;
}

} // namespace h3c
