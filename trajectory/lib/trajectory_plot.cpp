// `h3c trajectory drift --plot`: a small self-contained SVG, written by hand (no plotting dependency). x = step,
// y = log10 of the per-step max abs difference; four series (latent / velocity x video / audio). Equal steps sit on
// the bottom line ("0"), steps whose tensors were not saved are left out, the first differing step is marked.
#include "h3c/trajectory/trajectory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace h3c::rt {
namespace {

std::string xmlEscape(const std::string &s) {
  std::string o;
  for (char c : s) {
    switch (c) {
    case '&': o += "&amp;"; break;
    case '<': o += "&lt;"; break;
    case '>': o += "&gt;"; break;
    case '"': o += "&quot;"; break;
    default: o += c;
    }
  }
  return o;
}

} // namespace

std::string driftSvg(const DriftReport &r, const std::string &title) {
  const double W = 760, H = 400, left = 70, right = 170, top = 40, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  // The y range: decades spanning every positive finite value.
  double lo = INFINITY, hi = -INFINITY;
  for (const auto &p : r.points)
    for (int m = 0; m < kTrajModalities; ++m)
      for (double v : {p.latent[m], p.velocity[m]})
        if (v > 0 && std::isfinite(v)) {
          lo = std::min(lo, std::floor(std::log10(v)));
          hi = std::max(hi, std::ceil(std::log10(v)));
        }
  if (!std::isfinite(lo)) {
    lo = -8;
    hi = 0;
  }
  if (hi <= lo)
    hi = lo + 1;
  const double zeroY = top + ph;          // exact zeros
  const double yLo = top + ph - 14;       // the lowest decade sits just above the zero line
  const int64_t n = std::max<int64_t>(1, int64_t(r.points.size()));
  auto X = [&](int64_t step) { return left + (n == 1 ? pw / 2 : pw * double(step) / double(n - 1)); };
  auto Y = [&](double v) { return v == 0 ? zeroY : yLo - (yLo - top) * (std::log10(v) - lo) / (hi - lo); };

  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  s += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"14\">{}</text>\n", left, xmlEscape(title));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", left, top,
                   pw, ph);
  for (double d = lo; d <= hi + 0.5; d += 1) {
    double y = Y(std::pow(10.0, d));
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", left, y, left + pw, y);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">1e{}</text>\n", left - 6, y + 4, int(d));
  }
  s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">0</text>\n", left - 6, zeroY + 4);
  const int64_t tickEvery = std::max<int64_t>(1, n / 10);
  for (int64_t i = 0; i < n; i += tickEvery)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(i), top + ph + 16, i);
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", left + pw / 2, H - 12);
  s += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">max |A - B|</text>\n",
                   top + ph / 2, top + ph / 2);
  if (!r.identical && r.step >= 0 && r.step < n && r.kind != "header") {
    double x = X(r.step);
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#d62728\" "
                     "stroke-dasharray=\"2,3\"/>\n<text x=\"{0:.1f}\" y=\"{3}\" fill=\"#d62728\" "
                     "text-anchor=\"middle\">first: {4} {5}</text>\n",
                     x, top, top + ph, top - 4, xmlEscape(r.kind), xmlEscape(r.modality));
  }
  struct Series {
    const char *label, *color, *dash;
    bool latent;
    int m;
  } series[] = {{"latent video", "#1f77b4", "", true, 0},
                {"latent audio", "#ff7f0e", "", true, 1},
                {"velocity video", "#1f77b4", "5,4", false, 0},
                {"velocity audio", "#ff7f0e", "5,4", false, 1}};
  int row = 0;
  for (const auto &se : series) {
    std::string path, dots;
    bool pen = false;
    for (const auto &p : r.points) {
      double v = se.latent ? p.latent[se.m] : p.velocity[se.m];
      if (v < 0 || !std::isfinite(v)) {  // unknown (no tensors) or NaN: a gap
        pen = false;
        continue;
      }
      path += fmt::format("{}{:.1f},{:.1f} ", pen ? "L" : "M", X(p.step), Y(v));
      dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2\" fill=\"{}\"/>", X(p.step), Y(v), se.color);
      pen = true;
    }
    if (!path.empty())
      s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{}/>\n{}\n", path, se.color,
                       *se.dash ? fmt::format(" stroke-dasharray=\"{}\"", se.dash) : std::string(), dots);
    double ly = top + 12 + 18 * row++;
    s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>"
                     "<text x=\"{5}\" y=\"{6}\">{7}</text>\n",
                     left + pw + 12, ly, left + pw + 40, se.color,
                     *se.dash ? fmt::format(" stroke-dasharray=\"{}\"", se.dash) : std::string(), left + pw + 46,
                     ly + 4, se.label);
  }
  s += "</svg>\n";
  return s;
}

} // namespace h3c::rt
