// Request extents and the small expression language the plan uses for launch grids, scalar kernel arguments and
// tensor-map dimensions: a sum of products of the symbols B, S, Nt, Nv, Na, T, T3, Sr and integer constants, written
// as text ("B*S", "96*B*Nv + 32*B*Na", "56"). A plan is compiled once per shape class; these expressions are what
// turns it into launch parameters for one request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::plan {

// Symbolic row domains (docs/contract.md section 1). `One` is the domain of single-row values ("1"). `Sr` is the
// contiguous range of the packed rows S that one rank holds under sequence parallelism (section 1; only in plans
// with options.sp > 1).
enum class Domain { S, Nt, Nv, Na, T, T3, One, Sr };
const char *domainName(Domain d);
bool parseDomain(const std::string &s, Domain &out);
// True for the token domains (S, Nt, Nv, Na, Sr): the only ones whose values may carry the batch axis.
bool isTokenDomain(Domain d);

// The extents of one request (B items of S packed rows each, T distinct timesteps) as one rank sees them: Sr = the
// rows of S this rank holds (its sequence-parallel range; = S when sp = 1).
struct Extents {
  int64_t B = 1, S = 0, Nt = 0, Nv = 0, Na = 0, T = 0, Sr = 0;
  int64_t rows(Domain d) const;  // rows of one batch item in domain d
  bool operator==(const Extents &o) const {
    return B == o.B && S == o.S && Nt == o.Nt && Nv == o.Nv && Na == o.Na && T == o.T && Sr == o.Sr;
  }
};

class Extent {
public:
  Extent() = default;
  static Extent constant(int64_t v);
  // Parses the text form; throws h3c::Error naming `where` on a syntax error, an unknown symbol or an overflow.
  static Extent parse(const std::string &text, const std::string &where);
  // The rows of a value: B * domain for batched values, the domain alone otherwise ("B*S", "T3", "1").
  static Extent rowsOf(Domain d, bool batch);

  // This extent times a positive constant (every term scaled: k * (a + b) = k*a + k*b).
  Extent scaled(int64_t k) const;
  // This extent plus a non-negative constant (ceil-division grids: (rows + 127) / 128 tiles).
  Extent plus(int64_t c) const;

  // Evaluates on a request; throws on overflow (never wraps).
  int64_t eval(const Extents &e) const;
  const std::string &text() const { return text_; }
  bool operator==(const Extent &o) const { return text_ == o.text_; }

private:
  struct Term {
    int64_t coef = 1;
    std::vector<int> syms;  // indices into the symbol table (extent.cpp)
  };
  std::vector<Term> terms_;
  std::string text_ = "0";
};

} // namespace h3c::plan
