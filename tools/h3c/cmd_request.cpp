// `h3c request make`: a valid packed request in diffusers' forward-argument names and dtypes (runtime/request.h);
// with --layout t2va|fl2va|ref2va, the packed layout diffusers' MiniMax-H3 pipeline builds (runtime/request_layout.h).
#include "command.h"

#include "h3c/models/config.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/request_layout.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <cstdio>
#include <sstream>

namespace cmd_request {

void parseVideo(const std::string &s, h3c::rt::RequestShape &sh) {
  long long t = 0, h = 0, w = 0;
  char c1 = 0, c2 = 0, extra = 0;
  std::istringstream in(s);
  if (!(in >> t >> c1 >> h >> c2 >> w) || c1 != ',' || c2 != ',' || (in >> extra) || t < 0 || h < 0 || w < 0)
    h3c::fail("--video", "expected T,H,W (the video token grid, non-negative integers), got '{}'", s);
  sh.videoT = t;
  sh.videoH = h;
  sh.videoW = w;
}

long long parseCount(const std::string &s, const std::string &where) {
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0)
    h3c::fail(where, "expected a non-negative integer, got '{}'", s);
  return v;
}

std::vector<long long> parseList(const std::string &s, size_t n, const std::string &where) {
  std::vector<long long> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(parseCount(s.substr(start, comma - start), where));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (out.size() != n)
    h3c::fail(where, "expected {} comma-separated integers, got '{}'", n, s);
  return out;
}

// --ref image:H,W | audio:L | video:F,H,W | video:F,H,W+audio:L (latent geometry; L audio latents per channel)
h3c::rt::LayoutReference parseRef(const std::string &s) {
  using K = h3c::rt::LayoutReference::Kind;
  h3c::rt::LayoutReference r;
  const std::string where = "--ref " + s;
  auto colon = s.find(':');
  if (colon == std::string::npos)
    h3c::fail(where, "expected image:H,W, audio:L, video:F,H,W or video:F,H,W+audio:L");
  const std::string kind = s.substr(0, colon), rest = s.substr(colon + 1);
  if (kind == "image") {
    auto v = parseList(rest, 2, where);
    r.kind = K::Image;
    r.height = v[0];
    r.width = v[1];
  } else if (kind == "audio") {
    r.kind = K::Audio;
    r.audioLatents = parseCount(rest, where);
  } else if (kind == "video") {
    r.kind = K::Video;
    std::string geo = rest;
    auto plus = rest.find("+audio:");
    if (plus != std::string::npos) {
      geo = rest.substr(0, plus);
      r.audioLatents = parseCount(rest.substr(plus + 7), where);
    }
    auto v = parseList(geo, 3, where);
    r.frames = v[0];
    r.height = v[1];
    r.width = v[2];
  } else {
    h3c::fail(where, "unknown reference kind '{}' (image, audio, video)", kind);
  }
  return r;
}

h3c::DType parseFloatDtype(const std::string &s) {
  if (s == "F32")
    return h3c::DType::F32;
  if (s == "BF16")
    return h3c::DType::BF16;
  h3c::fail("--dtype", "expected F32 or BF16, got '{}'", s);
}

h3c::tool::Command cmd("request", "Build requests (diffusers forward arguments as safetensors)", [](CLI::App &app) {
  app.require_subcommand(1);
  CLI::App *make = app.add_subcommand("make", "Write a valid synthetic request");
  struct Opts {
    std::string config, video = "0,0,0", out, dtype = "F32", layout, latent, keyframes;
    std::vector<std::string> refs, vision;
    long long text = 0, audio = 0, batch = 1, timesteps = 1, audioLatents = -1, numFrames = -1, height = -1,
              width = -1;
    double tVideo = 0.0, tAudio = 0.0;
    unsigned long long seed = 0;
    bool shuffle = false;
  };
  auto o = std::make_shared<Opts>();
  make->add_option("--config", o->config, "full, small, tiny or a config.json")->required();
  make->add_option("--text", o->text, "text rows (Nt)");
  auto *au = make->add_option("--audio", o->audio, "audio rows (Na)");
  auto *vi = make->add_option("--video", o->video, "video token grid T,H,W (Nv = T*H*W rows, positions (t,h,w))");
  make->add_option("--seed", o->seed, "seed of the synthetic values")->required();
  make->add_option("--batch", o->batch, "batch size B (items differ in their values, share the layout)");
  auto *ts = make->add_option("--timesteps", o->timesteps, "number of distinct timesteps T");
  auto *sh = make->add_flag("--shuffle", o->shuffle, "permute the packed rows (indices permuted to match)");
  make->add_option("--dtype", o->dtype, "float dtype of the latent/text inputs: F32 or BF16");
  make->add_option("-o,--out", o->out, "output .safetensors")->required();
  // The pipeline's layouts.
  auto *ly = make->add_option("--layout", o->layout, "t2va | fl2va | ref2va: the packed layout diffusers' pipeline builds");
  auto *la = make->add_option("--latent", o->latent, "layout: generated video latents F,H,W (frames, latent height, width)");
  auto *al = make->add_option("--audio-latents", o->audioLatents, "layout: generated audio latents per channel (2 channels)");
  auto *nf = make->add_option("--num-frames", o->numFrames, "layout: pixel frames (snapped to 17n+5) instead of --latent");
  auto *hh = make->add_option("--height", o->height, "layout: pixel height (multiple of 32)");
  auto *ww = make->add_option("--width", o->width, "layout: pixel width (multiple of 32)");
  auto *kf = make->add_option("--keyframes", o->keyframes, "fl2va: first | last | first,last");
  auto *rf = make->add_option("--ref", o->refs, "ref2va reference (repeatable, in order): image:H,W | audio:L | video:F,H,W[+audio:L]");
  auto *vs = make->add_option("--text-vision", o->vision, "layout: text rows A:B (half-open) of a vision block, tagged video (repeatable)");
  auto *tv = make->add_option("--t-video", o->tVideo, "layout: timestep of the generated video and text rows (default 0)");
  auto *ta = make->add_option("--t-audio", o->tAudio, "layout: timestep of the generated audio rows (default 0)");
  for (auto *opt : {au, vi, ts, sh})
    ly->excludes(opt);
  for (auto *opt : {la, al, nf, hh, ww, kf, rf, vs, tv, ta})
    opt->needs(ly);
  la->excludes(nf);
  make->callback([o] {
    h3c::checkOutputsApart({{"--config", o->config}}, {{"-o", o->out}});
    h3c::h3::Config c = h3c::h3::loadConfig(o->config);
    const h3c::DType dt = parseFloatDtype(o->dtype);
    h3c::rt::Request r;
    if (!o->layout.empty()) {
      h3c::rt::LayoutSpec sp;
      sp.layout = o->layout;
      sp.textTags.assign(size_t(o->text), 1);
      for (const auto &v : o->vision) {
        auto colon = v.find(':');
        long long a = parseCount(v.substr(0, colon), "--text-vision " + v),
                  b = colon == std::string::npos ? -1 : parseCount(v.substr(colon + 1), "--text-vision " + v);
        if (b < a || b > o->text)
          h3c::fail("--text-vision " + v, "expected A:B with 0 <= A <= B <= --text ({})", o->text);
        for (long long i = a; i < b; ++i)
          sp.textTags[size_t(i)] = 0;
      }
      if (o->numFrames >= 0 || o->height >= 0 || o->width >= 0) {
        if (o->numFrames < 0 || o->height < 0 || o->width < 0)
          h3c::fail("--num-frames", "give --num-frames, --height and --width together");
        h3c::rt::pipelineLatentGeometry(o->numFrames, o->height, o->width, sp);
      } else if (!o->latent.empty()) {
        auto v = parseList(o->latent, 3, "--latent");
        sp.latentFrames = v[0];
        sp.latentHeight = v[1];
        sp.latentWidth = v[2];
      }
      if (o->audioLatents >= 0)
        sp.audioLatents = o->audioLatents;
      if (!o->keyframes.empty()) {
        size_t start = 0;
        while (true) {
          size_t comma = o->keyframes.find(',', start);
          sp.keyframes.push_back(o->keyframes.substr(start, comma - start));
          if (comma == std::string::npos)
            break;
          start = comma + 1;
        }
      }
      for (const auto &s : o->refs)
        sp.references.push_back(parseRef(s));
      for (double t : {o->tVideo, o->tAudio})
        if (!(t >= 0.0 && t <= 1.0))
          h3c::fail("--t-video/--t-audio", "timesteps lie in [0, 1], got {}", t);
      r = h3c::rt::makeLayoutRequest(c, sp, o->batch, o->seed, dt, float(o->tVideo), float(o->tAudio));
    } else {
      h3c::rt::RequestShape sh;
      sh.text = o->text;
      sh.audio = o->audio;
      parseVideo(o->video, sh);
      sh.batch = o->batch;
      sh.timesteps = o->timesteps;
      sh.shuffle = o->shuffle;
      sh.floatDtype = dt;
      r = h3c::rt::makeRequest(c, sh, o->seed);
    }
    h3c::rt::CanonicalRequest q = h3c::rt::canonicalize(r, c, o->out);  // what we write must be what `h3c run` accepts
    h3c::rt::writeRequest(o->out, r);
    std::printf("wrote %s: %sB=%lld Nt=%lld Nv=%lld Na=%lld T=%lld\n", o->out.c_str(),
                o->layout.empty() ? "" : (o->layout + " ").c_str(), (long long)q.B, (long long)q.Nt,
                (long long)q.Nv, (long long)q.Na, (long long)q.T);
  });
});

} // namespace cmd_request
