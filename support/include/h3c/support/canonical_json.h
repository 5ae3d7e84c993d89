// Canonical JSON for hashing and sealing, and the sealed-file form. Every hash h3c prints over JSON (plan, ledger,
// snapshot, trajectory) is sha256 of canonicalJson().
//
// The form is the one Python's `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` writes
// for the same parsed value, byte for byte, so a seal can be re-verified from Python (scripts/h3c_sealed.py):
//   - object keys sorted by their UTF-8 bytes (= Python's code point order), no whitespace;
//   - strings escaped as both libraries do (\" \\ \b \f \n \r \t, other control characters \u00xx, UTF-8 kept);
//   - integers as integers;
//   - floats as Python's repr(): the shortest digit string that reads back to the same double (std::to_chars, the
//     nearest one when several are as short), positional when the decimal exponent is in [-4, 16), with ".0" added to
//     integral values, else d.ddde+XX with at least two exponent digits. nlohmann's own dump is not used for floats:
//     its Grisu2 is not always shortest and it switches to exponent form one decade earlier (1e15 vs Python's
//     1000000000000000.0). Non-finite floats are written as null (nlohmann does the same; JSON has no NaN).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace h3c {

// repr(x) of a finite double as Python 3 writes it ("0.1", "1e-05", "1e+16", "100.0", "-0.0").
std::string pythonFloatRepr(double x);

// `j` in the sealed form: indent < 0 is the compact canonical form; indent >= 0 pretty-prints like nlohmann's
// dump(indent) (and Python's json.dumps(indent=n, separators=(",", ": "))), floats as above.
std::string sealedJsonDump(const nlohmann::json &j, int indent = -1);

inline std::string canonicalJson(const nlohmann::json &j) { return sealedJsonDump(j, -1); }

} // namespace h3c
