// An update read from safetensors files (weight_update.h, openUpdateFiles).
#include "h3c/runtime/weight_update.h"

#include "h3c/support/error.h"

#include <algorithm>

namespace fs = std::filesystem;

namespace h3c::rt {

UpdateFiles openUpdateFiles(const fs::path &path, const h3::Config &c) {
  UpdateFiles u;
  u.path = path;
  auto add = [&](const std::string &name, const st::TensorInfo &info, const uint8_t *data) {
    u.inputs.push_back({name, info.dtype, info.shape, data, 0});
  };
  if (fs::is_regular_file(path)) {
    u.file = std::make_unique<st::File>(path);
    for (const auto &t : u.file->tensors()) add(t.name, t, u.file->data(t));
    std::sort(u.inputs.begin(), u.inputs.end(), [](const WeightInput &a, const WeightInput &b) { return a.name < b.name; });
    return u;
  }
  if (!fs::is_directory(path)) fail(path.string(), "--update must be a .safetensors file or a folder of them");
  if (fs::exists(path / "config.json"))
    if (const std::optional<h3::QkvLayout> layout = h3::checkFolderConfig(path, c, "update")) u.layout = *layout;
  u.folder = std::make_unique<st::Folder>(path);
  for (const auto &name : u.folder->names()) {
    const st::Folder::Entry &e = u.folder->at(name);
    add(name, *e.info, u.folder->data(e));
  }
  return u;
}

} // namespace h3c::rt
