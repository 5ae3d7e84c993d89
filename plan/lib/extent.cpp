// Extents: parsing, printing and overflow-checked evaluation of the launch-size expressions (extent.h).
#include "h3c/plan/extent.h"

#include "h3c/support/error.h"

#include <cctype>

namespace h3c::plan {

namespace {

// The symbols an extent may name, in a fixed order (Term::syms index into it).
const char *const kSyms[] = {"B", "S", "Nt", "Nv", "Na", "T", "T3", "Sr"};
constexpr int kNumSyms = 8;

int64_t symValue(int s, const Extents &e) {
  switch (s) {
  case 0: return e.B;
  case 1: return e.S;
  case 2: return e.Nt;
  case 3: return e.Nv;
  case 4: return e.Na;
  case 5: return e.T;
  case 6: return 3 * e.T;
  default: return e.Sr;
  }
}

bool mulOk(int64_t a, int64_t b, int64_t &r) { return !__builtin_mul_overflow(a, b, &r); }

} // namespace

const char *domainName(Domain d) {
  switch (d) {
  case Domain::S: return "S";
  case Domain::Nt: return "Nt";
  case Domain::Nv: return "Nv";
  case Domain::Na: return "Na";
  case Domain::T: return "T";
  case Domain::T3: return "T3";
  case Domain::One: return "1";
  case Domain::Sr: return "Sr";
  }
  return "?";
}

bool parseDomain(const std::string &s, Domain &out) {
  for (Domain d : {Domain::S, Domain::Nt, Domain::Nv, Domain::Na, Domain::T, Domain::T3, Domain::One, Domain::Sr})
    if (s == domainName(d)) {
      out = d;
      return true;
    }
  return false;
}

bool isTokenDomain(Domain d) {
  return d == Domain::S || d == Domain::Nt || d == Domain::Nv || d == Domain::Na || d == Domain::Sr;
}

int64_t Extents::rows(Domain d) const {
  switch (d) {
  case Domain::S: return S;
  case Domain::Nt: return Nt;
  case Domain::Nv: return Nv;
  case Domain::Na: return Na;
  case Domain::T: return T;
  case Domain::T3: return 3 * T;
  case Domain::One: return 1;
  case Domain::Sr: return Sr;
  }
  return 0;
}

Extent Extent::constant(int64_t v) { return parse(std::to_string(v), "extent"); }

Extent Extent::rowsOf(Domain d, bool batch) {
  std::string t = domainName(d);
  return parse(batch ? "B*" + t : t, "extent");
}

Extent Extent::parse(const std::string &text, const std::string &where) {
  Extent e;
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  if (s.empty()) fail(where, "empty extent expression");
  size_t i = 0;
  while (i <= s.size()) {
    Term t;
    bool factor = false;
    while (true) {
      if (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
        int64_t v = 0;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
          if (!mulOk(v, 10, v) || __builtin_add_overflow(v, int64_t(s[i] - '0'), &v))
            fail(where, "constant overflows in extent '{}'", text);
          ++i;
        }
        if (!mulOk(t.coef, v, t.coef)) fail(where, "constant overflows in extent '{}'", text);
      } else {
        int sym = -1;
        size_t len = 0;
        for (int k = 0; k < kNumSyms; ++k) {
          size_t n = std::char_traits<char>::length(kSyms[k]);
          // Longest match ("T3" before "T").
          if (s.compare(i, n, kSyms[k]) == 0 && n > len && (i + n == s.size() || !std::isalnum(static_cast<unsigned char>(s[i + n])))) {
            sym = k;
            len = n;
          }
        }
        if (sym < 0)
          fail(where, "extent '{}': expected a symbol (B, S, Nt, Nv, Na, T, T3, Sr) or an integer at '{}'", text,
               s.substr(i));
        t.syms.push_back(sym);
        i += len;
      }
      factor = true;
      if (i < s.size() && s[i] == '*') {
        ++i;
        continue;
      }
      break;
    }
    if (!factor) fail(where, "extent '{}': empty term", text);
    e.terms_.push_back(t);
    if (i == s.size()) break;
    if (s[i] != '+') fail(where, "extent '{}': unexpected '{}'", text, s[i]);
    ++i;
    if (i == s.size()) fail(where, "extent '{}': ends with '+'", text);
  }
  // Canonical text: terms joined by " + ", factors by "*" (coefficient first, omitted when 1 and symbols follow).
  std::string out;
  for (size_t k = 0; k < e.terms_.size(); ++k) {
    const Term &t = e.terms_[k];
    if (k) out += " + ";
    std::string f;
    if (t.coef != 1 || t.syms.empty()) f = std::to_string(t.coef);
    for (int sym : t.syms) f += (f.empty() ? "" : "*") + std::string(kSyms[sym]);
    out += f;
  }
  e.text_ = out;
  return e;
}

Extent Extent::scaled(int64_t k) const {
  if (k <= 0) fail("extent " + text_, "scale factor must be positive, got {}", k);
  std::string t;
  for (size_t i = 0; i < terms_.size(); ++i) {
    int64_t c;
    if (__builtin_mul_overflow(terms_[i].coef, k, &c)) fail("extent " + text_, "overflows when scaled by {}", k);
    std::string f = std::to_string(c);
    for (int sym : terms_[i].syms) f += std::string("*") + kSyms[sym];
    t += (i ? " + " : "") + f;
  }
  return parse(t, "extent " + text_);
}

Extent Extent::plus(int64_t c) const {
  if (c < 0) fail("extent " + text_, "added constant must not be negative, got {}", c);
  return c == 0 ? *this : parse(text_ + " + " + std::to_string(c), "extent " + text_);
}

int64_t Extent::eval(const Extents &x) const {
  int64_t sum = 0;
  for (const Term &t : terms_) {
    int64_t p = t.coef;
    for (int s : t.syms)
      if (!mulOk(p, symValue(s, x), p)) fail("extent " + text_, "overflows for this request");
    if (__builtin_add_overflow(sum, p, &sum)) fail("extent " + text_, "overflows for this request");
  }
  return sum;
}

} // namespace h3c::plan
