// `h3c request make`: a valid packed request in diffusers' forward-argument names and dtypes (runtime/request.h).
#include "command.h"

#include "h3c/models/config.h"
#include "h3c/runtime/request.h"
#include "h3c/support/error.h"

#include <cstdio>
#include <sstream>

namespace {

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

h3c::tool::Command cmd("request", "Build requests (diffusers forward arguments as safetensors)", [](CLI::App &app) {
  app.require_subcommand(1);
  CLI::App *make = app.add_subcommand("make", "Write a valid synthetic request");
  struct Opts {
    std::string config, video = "0,0,0", out, dtype = "F32";
    long long text = 0, audio = 0, batch = 1, timesteps = 1;
    unsigned long long seed = 0;
    bool shuffle = false;
  };
  auto o = std::make_shared<Opts>();
  make->add_option("--config", o->config, "full, small, tiny or a config.json")->required();
  make->add_option("--text", o->text, "text rows (Nt)");
  make->add_option("--audio", o->audio, "audio rows (Na)");
  make->add_option("--video", o->video, "video token grid T,H,W (Nv = T*H*W rows, positions (t,h,w))");
  make->add_option("--seed", o->seed, "seed of the synthetic values")->required();
  make->add_option("--batch", o->batch, "batch size B (items differ in their values, share the layout)");
  make->add_option("--timesteps", o->timesteps, "number of distinct timesteps T");
  make->add_flag("--shuffle", o->shuffle, "permute the packed rows (indices permuted to match)");
  make->add_option("--dtype", o->dtype, "float dtype of the latent/text inputs: F32 or BF16");
  make->add_option("-o,--out", o->out, "output .safetensors")->required();
  make->callback([o] {
    h3c::h3::Config c = h3c::h3::loadConfig(o->config);
    h3c::rt::RequestShape sh;
    sh.text = o->text;
    sh.audio = o->audio;
    parseVideo(o->video, sh);
    sh.batch = o->batch;
    sh.timesteps = o->timesteps;
    sh.shuffle = o->shuffle;
    if (o->dtype == "F32")
      sh.floatDtype = h3c::DType::F32;
    else if (o->dtype == "BF16")
      sh.floatDtype = h3c::DType::BF16;
    else
      h3c::fail("--dtype", "expected F32 or BF16, got '{}'", o->dtype);
    h3c::rt::Request r = h3c::rt::makeRequest(c, sh, o->seed);
    h3c::rt::canonicalize(r, c, o->out);  // what we write must be what `h3c run` accepts
    h3c::rt::writeRequest(o->out, r);
    std::printf("wrote %s: B=%lld Nt=%lld Nv=%lld Na=%lld T=%lld\n", o->out.c_str(), (long long)sh.batch,
                (long long)sh.text, (long long)(sh.videoT * sh.videoH * sh.videoW), (long long)sh.audio,
                (long long)sh.timesteps);
  });
});

} // namespace
