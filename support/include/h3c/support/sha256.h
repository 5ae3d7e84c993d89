// SHA-256 through OpenSSL's EVP interface (Debian's libssl-dev), streamed or one-shot, as lowercase hex.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace h3c {

class Sha256 {
public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256 &) = delete;
  Sha256 &operator=(const Sha256 &) = delete;
  void update(const void *data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hexDigest();  // finishes the hash; the object cannot be updated afterwards

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256Hex(std::string_view bytes);
std::string sha256File(const std::filesystem::path &path);

} // namespace h3c
