// Shell-style name patterns: '*' any run of characters (also none), '?' one character, everything else itself. One
// matcher for every option that selects names by glob (`--bind GLOB=...` over node ids, `h3c compile --trainable`
// over weight tensors).
#pragma once

#include <string>

namespace h3c {

inline bool globMatch(const std::string &g, const std::string &t) {
  // Iterative '*' / '?' matching with backtracking to the last star.
  size_t gi = 0, ti = 0, star = std::string::npos, mark = 0;
  while (ti < t.size()) {
    if (gi < g.size() && (g[gi] == '?' || g[gi] == t[ti])) {
      ++gi;
      ++ti;
    } else if (gi < g.size() && g[gi] == '*') {
      star = gi++;
      mark = ti;
    } else if (star != std::string::npos) {
      gi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (gi < g.size() && g[gi] == '*')
    ++gi;
  return gi == g.size();
}

} // namespace h3c
