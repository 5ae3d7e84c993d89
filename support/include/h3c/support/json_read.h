// The one JSON reader policy of h3c: every JSON file h3c reads (plans, fingerprints, configs, ledgers, trajectories,
// safetensors headers and indexes) goes through parseJson, so hostile or careless files meet the same rules:
//   - nesting deeper than `maxDepth` levels (the top-level value is level 1) is an error. Every later walk over a
//     parsed value (nlohmann's copy, dump, compare; our canonical writer and hashing) recurses once per level, so the
//     limit is what keeps a 100,000-level file from overflowing the stack;
//   - a key repeated in one object is an error (nlohmann keeps the last one silently; Python keeps the last one too,
//     so a seal could cover a value another reader never sees);
//   - bytes after the value (other than whitespace) and NUL bytes anywhere are errors;
//   - the tree is built by a SAX handler with an explicit stack, in time linear in the input (nlohmann's callback
//     parser rescans the parent object after every member: quadratic over a safetensors header of many tensors).
// Errors are h3c::Error(where, ...).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace h3c {

inline constexpr int kJsonMaxDepth = 64;

// `topDuplicate` words the message for a key repeated at the top level ("<topDuplicate> 'k'"); a nested duplicate
// says "duplicate key 'k' in '<key of the enclosing object>'".
nlohmann::json parseJson(std::string_view text, const std::string &where, int maxDepth = kJsonMaxDepth,
                         const std::string &topDuplicate = "duplicate key");

// readFile (bounded, regular files only: files.h) + parseJson.
nlohmann::json readJsonFile(const std::string &path, int maxDepth = kJsonMaxDepth);

} // namespace h3c
