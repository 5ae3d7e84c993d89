// Ed25519 detached signatures (signature.h) through libcrypto's EVP one-shot DigestSign / DigestVerify.
#include "h3c/support/signature.h"

#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/json_read.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>
#include <vector>

namespace fs = std::filesystem;

namespace h3c {
namespace {

using PKey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

std::string hex(const unsigned char *p, size_t n) {
  static const char *d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

bool unhex(const std::string &s, std::vector<unsigned char> &out) {
  auto v = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (s.size() % 2) return false;
  out.clear();
  for (size_t i = 0; i < s.size(); i += 2) {
    int a = v(s[i]), b = v(s[i + 1]);
    if (a < 0 || b < 0) return false;
    out.push_back(static_cast<unsigned char>(a * 16 + b));
  }
  return true;
}

PKey readKey(const fs::path &pem, bool priv) {
  const std::string text = readFile(pem, 1 << 16);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(text.data(), int(text.size())), BIO_free);
  EVP_PKEY *k = priv ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                     : PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  if (!k)
    fail(pem.string(), "not a PEM {} key", priv ? "private" : "public");
  PKey key(k, EVP_PKEY_free);
  if (EVP_PKEY_id(k) != EVP_PKEY_ED25519)
    fail(pem.string(), "not an Ed25519 key (make one with: openssl genpkey -algorithm ed25519)");
  return key;
}

std::string rawPublic(EVP_PKEY *k) {
  unsigned char buf[32];
  size_t n = sizeof buf;
  if (EVP_PKEY_get_raw_public_key(k, buf, &n) != 1 || n != 32)
    fail("ed25519", "cannot read the raw public key");
  return hex(buf, n);
}

} // namespace

void checkSigningKey(const fs::path &privateKeyPem) { readKey(privateKeyPem, true); }

void writeSignature(const fs::path &signedFile, const std::string &seal, const fs::path &privateKeyPem) {
  PKey key = readKey(privateKeyPem, true);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char sig[64];
  size_t n = sizeof sig;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &n, reinterpret_cast<const unsigned char *>(seal.data()), seal.size()) != 1 ||
      n != 64)
    fail(privateKeyPem.string(), "Ed25519 signing failed");
  nlohmann::json j = {{"schema", kSignatureSchema}, {"alg", "ed25519"},         {"signed_seal", seal},
                      {"public_key", rawPublic(key.get())}, {"signature", hex(sig, n)}};
  writeFileAtomic(signedFile.string() + ".sig", sealedJsonDump(j, 1) + "\n");
}

std::string checkSignature(const fs::path &signedFile, const std::string &seal, const fs::path &publicKeyPem) {
  PKey key = readKey(publicKeyPem, false);
  const fs::path sigFile = signedFile.string() + ".sig";
  std::error_code ec;
  if (!fs::exists(sigFile, ec))
    return "no signature (" + sigFile.string() + " is missing)";
  nlohmann::json j;
  try {
    j = readJsonFile(sigFile.string(), 2);
  } catch (const Error &e) {
    return e.what();
  }
  for (const char *k : {"schema", "alg", "signed_seal", "public_key", "signature"})
    if (!j.is_object() || !j.contains(k) || !j[k].is_string())
      return sigFile.string() + ": missing or mistyped '" + k + "'";
  if (j["schema"] != kSignatureSchema || j["alg"] != "ed25519")
    return sigFile.string() + ": not an h3c-signature-v1 Ed25519 signature";
  if (j["public_key"] != rawPublic(key.get()))
    return sigFile.string() + ": signed by another key (public key " + j["public_key"].get<std::string>() + ")";
  if (j["signed_seal"] != seal)
    return sigFile.string() + ": signs another seal than the file's";
  std::vector<unsigned char> sig;
  if (!unhex(j["signature"].get<std::string>(), sig) || sig.size() != 64)
    return sigFile.string() + ": the signature is not 64 bytes of hex";
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1)
    fail(publicKeyPem.string(), "Ed25519 verification could not start");
  if (EVP_DigestVerify(ctx.get(), sig.data(), sig.size(), reinterpret_cast<const unsigned char *>(seal.data()),
                       seal.size()) != 1)
    return sigFile.string() + ": the signature does not verify";
  return "";
}

} // namespace h3c
