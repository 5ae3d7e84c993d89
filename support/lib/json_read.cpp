// The one JSON reader (json_read.h): nlohmann's lexer and parser (both iterative) drive a SAX handler that builds the
// tree with an explicit stack and enforces the depth, duplicate-key and trailing-byte rules as it goes.
#include "h3c/support/json_read.h"

#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <vector>

namespace h3c {
namespace {

using json = nlohmann::json;

class Builder {
public:
  Builder(int maxDepth, const std::string &topDuplicate) : maxDepth_(maxDepth), topDuplicate_(topDuplicate) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t &) { return put(json(v)); }
  bool string(json::string_t &v) { return put(json(std::move(v))); }
  bool binary(json::binary_t &) { return refuse("binary values are not JSON"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t &k) {
    Frame &f = stack_.back();
    if (f.value->contains(k)) {
      if (stack_.size() == 1)
        return refuse(fmt::format("{} '{}'", topDuplicate_, k));
      return refuse(fmt::format("duplicate key '{}' in '{}'", k, f.name));
    }
    f.key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &e) {
    if (error_.empty())
      error_ = fmt::format("invalid JSON: {}", e.what());
    return false;
  }

  json root;
  std::string error_;

private:
  struct Frame {
    json *value;
    std::string key;   // the pending key (objects)
    std::string name;  // the key this container is stored under in its parent object ("" otherwise)
  };

  bool refuse(std::string why) {
    if (error_.empty())
      error_ = std::move(why);
    return false;
  }
  // Stores `v` where the parser is: the root, the next array element, or the pending key's member.
  json *place(json &&v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Frame &f = stack_.back();
    if (f.value->is_array()) {
      f.value->push_back(std::move(v));
      return &f.value->back();
    }
    json &slot = (*f.value)[f.key];
    slot = std::move(v);
    return &slot;
  }
  bool put(json &&v) {
    place(std::move(v));
    return true;
  }
  bool open(json &&container) {
    if (int(stack_.size()) + 1 > maxDepth_)
      return refuse(fmt::format("JSON nesting deeper than {} levels", maxDepth_));
    std::string name = !stack_.empty() && stack_.back().value->is_object() ? stack_.back().key : std::string();
    json *p = place(std::move(container));
    stack_.push_back(Frame{p, {}, std::move(name)});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  int maxDepth_;
  const std::string &topDuplicate_;
  std::vector<Frame> stack_;
};

} // namespace

json parseJson(std::string_view text, const std::string &where, int maxDepth, const std::string &topDuplicate) {
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0<anything>" would parse: JSON text never
  // contains a raw NUL (not even inside strings), so refuse it up front.
  size_t nul = text.find('\0');
  if (nul != std::string_view::npos)
    fail(where, "invalid JSON: NUL byte at byte {}", nul);
  Builder b(maxDepth, topDuplicate);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &b, json::input_format_t::json, /*strict=*/true,
                         /*ignore_comments=*/false);
  } catch (const json::exception &e) {  // e.g. invalid UTF-8 inside a string
    fail(where, "invalid JSON: {}", e.what());
  }
  if (!ok || !b.error_.empty())
    fail(where, "{}", b.error_.empty() ? std::string("invalid JSON") : b.error_);
  return std::move(b.root);
}

json readJsonFile(const std::string &path, int maxDepth) { return parseJson(readFile(path), path, maxDepth); }

} // namespace h3c
