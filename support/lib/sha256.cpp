#include "h3c/support/sha256.h"

#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <openssl/evp.h>

namespace h3c {

struct Sha256::Impl {
  EVP_MD_CTX *ctx = nullptr;
  bool done = false;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1)
    fail("sha256", "OpenSSL could not start a SHA-256 digest");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(const void *data, size_t size) {
  if (impl_->done)
    fail("sha256", "update after hexDigest");
  if (size && EVP_DigestUpdate(impl_->ctx, data, size) != 1)
    fail("sha256", "OpenSSL digest update failed");
}

std::string Sha256::hexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (impl_->done || EVP_DigestFinal_ex(impl_->ctx, md, &len) != 1)
    fail("sha256", "OpenSSL digest final failed");
  impl_->done = true;
  static const char *hex = "0123456789abcdef";
  std::string out(len * 2, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  return out;
}

std::string sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hexDigest();
}

std::string sha256File(const std::filesystem::path &path) {
  MappedFile f(path);
  Sha256 h;
  // Hash in 64 MiB pieces so huge mapped files page through without one giant call.
  constexpr size_t kPiece = size_t(64) << 20;
  for (size_t off = 0; off < f.size(); off += kPiece)
    h.update(f.data() + off, std::min(kPiece, f.size() - off));
  return h.hexDigest();
}

} // namespace h3c
