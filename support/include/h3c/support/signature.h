// Optional Ed25519 signatures of sealed files (ledgers, trajectories), through OpenSSL's libcrypto. A sha256 seal
// proves a file was not changed since it was sealed, not who sealed it; a signature over the seal proves that the
// holder of a private key sealed it.
//
// Detached form: beside the signed file F, "F.sig" holds
//   {"schema": "h3c-signature-v1", "alg": "ed25519", "signed_seal": "<the seal, 64 hex>",
//    "public_key": "<32-byte raw public key, hex>", "signature": "<64-byte Ed25519 signature of signed_seal, hex>"}
// Keys are PEM files as `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout` write them.
#pragma once

#include <filesystem>
#include <string>

namespace h3c {

inline constexpr const char *kSignatureSchema = "h3c-signature-v1";

// Signs `seal` with the Ed25519 private key in `privateKeyPem` and writes `signedFile` + ".sig" atomically.
void writeSignature(const std::filesystem::path &signedFile, const std::string &seal,
                    const std::filesystem::path &privateKeyPem);

// Throws unless `privateKeyPem` holds an Ed25519 private key (to refuse a bad key before a long run).
void checkSigningKey(const std::filesystem::path &privateKeyPem);

// Checks `signedFile`.sig against `seal` (the file's seal, recomputed by the caller) and the public key in
// `publicKeyPem`. Returns "" when the signature holds, else what is wrong (missing, another key, another seal, bad
// signature).
std::string checkSignature(const std::filesystem::path &signedFile, const std::string &seal,
                           const std::filesystem::path &publicKeyPem);

} // namespace h3c
