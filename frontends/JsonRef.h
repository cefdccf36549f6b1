// A JSON node with its path, so every decoding error names where it happened
// ("graph_module.graph.nodes[3].inputs[1].arg: unknown argument variant 'as_foo'").
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

using json = nlohmann::json;

/// Decoding failure at a JSON path; converted to llvm::Error at the API boundary.
struct ParseError {
  std::string message;
};

/// A JSON node together with its path, so every error names where it happened.
class JsonRef {
public:
  JsonRef(const json &j, std::string path) : j_(&j), path_(std::move(path)) {}

  const json &raw() const { return *j_; }
  const std::string &path() const { return path_; }

  [[noreturn]] void fail(const std::string &what) const {
    throw ParseError{path_.empty() ? what : fmt::format("{}: {}", path_, what)};
  }

  JsonRef field(const char *name) const {
    if (!j_->is_object())
      fail("expected an object");
    auto it = j_->find(name);
    if (it == j_->end())
      fail(fmt::format("missing required field '{}'", name));
    return JsonRef(*it, child(name));
  }
  bool has(const char *name) const { return j_->is_object() && j_->contains(name) && !(*j_)[name].is_null(); }
  std::optional<JsonRef> optField(const char *name) const {
    if (!has(name))
      return std::nullopt;
    return JsonRef((*j_)[name], child(name));
  }
  JsonRef at(size_t i) const { return JsonRef((*j_)[i], fmt::format("{}[{}]", path_, i)); }
  size_t size() const { return j_->size(); }

  std::vector<JsonRef> items() const {
    if (!j_->is_array())
      fail("expected an array");
    std::vector<JsonRef> out;
    for (size_t i = 0; i < j_->size(); ++i)
      out.push_back(at(i));
    return out;
  }
  std::vector<std::pair<std::string, JsonRef>> members() const {
    if (!j_->is_object())
      fail("expected an object");
    std::vector<std::pair<std::string, JsonRef>> out;
    for (auto it = j_->begin(); it != j_->end(); ++it)
      out.emplace_back(it.key(), JsonRef(it.value(), child(it.key())));
    return out;
  }
  /// The single key of a union object ({"as_tensor": {...}}).
  std::pair<std::string, JsonRef> variant() const {
    if (!j_->is_object() || j_->size() != 1)
      fail("expected an object with exactly one variant key");
    auto it = j_->begin();
    return {it.key(), JsonRef(it.value(), child(it.key()))};
  }

  /// Fails on the first member whose key is not in `known`.
  void rejectUnknownKeys(std::initializer_list<const char *> known) const {
    for (const auto &member : members()) { // not a structured binding: clang 14 cannot capture one
      const std::string &key = member.first;
      if (std::none_of(known.begin(), known.end(), [&](const char *k) { return key == k; }))
        fail(fmt::format("unknown key '{}'", key));
    }
  }

  int64_t asInt() const {
    if (!j_->is_number_integer())
      fail("expected an integer");
    // Unsigned first: a value past INT64_MAX would read as negative.
    if (j_->is_number_unsigned() && j_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(fmt::format("integer {} is out of range", j_->get<uint64_t>()));
    return j_->get<int64_t>();
  }
  bool asBool() const {
    if (!j_->is_boolean())
      fail("expected a boolean");
    return j_->get<bool>();
  }
  double asFloat() const {
    if (j_->is_number())
      return j_->get<double>();
    if (j_->is_string()) { // the serializer writes non-finite floats as strings
      const auto &s = j_->get_ref<const std::string &>();
      if (s == "Infinity" || s == "inf")
        return std::numeric_limits<double>::infinity();
      if (s == "-Infinity" || s == "-inf")
        return -std::numeric_limits<double>::infinity();
      if (s == "NaN" || s == "nan")
        return std::numeric_limits<double>::quiet_NaN();
    }
    fail("expected a number");
  }
  std::string asString() const {
    if (!j_->is_string())
      fail("expected a string");
    return j_->get<std::string>();
  }

private:
  std::string child(const std::string &name) const { return path_.empty() ? name : path_ + "." + name; }
  const json *j_;
  std::string path_;
};

/// The deepest nesting of arrays and objects the readers accept. Real documents nest a few
/// levels (a counts tree: one level per module); the limit keeps hostile input from exhausting
/// the stack in the recursive code that walks or prints JSON values.
inline constexpr int kMaxJsonDepth = 256;

/// Parses JSON text; a syntax error names the record and the position. Nesting deeper than
/// kMaxJsonDepth is refused.
llvm::Expected<json> parseJsonText(llvm::StringRef text, llvm::StringRef recordName);

} // namespace commlens
