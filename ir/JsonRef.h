// A JSON node with its path, so every decoding error names where it happened
// ("graph_module.graph.nodes[3].inputs[1].arg: unknown argument variant 'as_foo'").
#pragma once

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/Error.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

/// Decoding failure at a JSON path; converted to llvm::Error at the API boundary.
struct ParseError {
  std::string message;
};

class JsonDocument;

/// One step of a node's path: a member key or an array index, below its parent's step. Steps
/// live in their document's arena and are made only for nodes that hand out children, so a
/// decoder that reads a leaf pays nothing for the path it would print on failure.
struct JsonPathStep {
  const JsonPathStep *parent;
  llvm::StringRef key; // empty for an index step
  size_t index;
  bool isIndex;
};

/// A JSON node of a JsonDocument together with its path, so every error names where it
/// happened. Valid while its document lives.
class JsonRef {
public:
  /// The node `e` of `doc`, reached by `at` (its key or index below its parent's step).
  JsonRef(simdjson::dom::element e, JsonDocument &doc, JsonPathStep at) : e_(e), doc_(&doc), at_(at) {}

  /// "graph_module.graph.nodes[3]"; "" for a root read without a prefix.
  std::string path() const;

  [[noreturn]] void fail(const std::string &what) const;

  bool isNull() const { return e_.is_null(); }
  bool isArray() const { return e_.is_array(); }
  bool isBool() const { return e_.is_bool(); }
  bool isInteger() const {
    return e_.type() == simdjson::dom::element_type::INT64 || e_.type() == simdjson::dom::element_type::UINT64;
  }
  /// Whether the node is the string `s`.
  bool isString(llvm::StringRef s) const {
    std::string_view v;
    return e_.get_string().get(v) == simdjson::SUCCESS && llvm::StringRef(v.data(), v.size()) == s;
  }
  /// The node as compact JSON text, for messages.
  std::string dump() const { return simdjson::minify(e_); }

  JsonRef field(const char *name) const {
    simdjson::dom::element v;
    if (!lookup(object(), name, v))
      fail(fmt::format("missing required field '{}'", name));
    return member(name, v);
  }
  bool has(const char *name) const {
    simdjson::dom::element v;
    return present(name, v);
  }
  /// The member `name`, or nothing when it is absent or null (or this is not an object).
  std::optional<JsonRef> optField(const char *name) const {
    simdjson::dom::element v;
    if (!present(name, v))
      return std::nullopt;
    return member(name, v);
  }
  /// The i-th element of an array.
  JsonRef at(size_t i) const {
    simdjson::dom::element v;
    if (array().at(i).get(v) != simdjson::SUCCESS)
      fail(fmt::format("expected at least {} elements", i + 1));
    return element(i, v);
  }
  /// Elements of an array or members of an object.
  size_t size() const;

  std::vector<JsonRef> items() const {
    simdjson::dom::array a = array();
    std::vector<JsonRef> out;
    out.reserve(a.size());
    size_t i = 0;
    for (simdjson::dom::element v : a)
      out.push_back(element(i++, v));
    return out;
  }
  /// The members of an object in key order (not the writer's), as the decoders have always
  /// read them: what they build does not depend on how a writer ordered its keys.
  std::vector<std::pair<llvm::StringRef, JsonRef>> members() const;
  /// The single key of a union object ({"as_tensor": {...}}).
  std::pair<llvm::StringRef, JsonRef> variant() const {
    simdjson::dom::object o;
    if (e_.get_object().get(o) != simdjson::SUCCESS || o.size() != 1)
      fail("expected an object with exactly one variant key");
    auto kv = *o.begin();
    llvm::StringRef key(kv.key.data(), kv.key.size());
    return {key, member(key, kv.value)};
  }

  /// Fails on the first member, in key order, whose key is not in `known`.
  void rejectUnknownKeys(std::initializer_list<const char *> known) const;

  int64_t asInt() const {
    int64_t v;
    if (e_.get_int64().get(v) == simdjson::SUCCESS)
      return v;
    uint64_t u; // a value past INT64_MAX
    if (e_.get_uint64().get(u) == simdjson::SUCCESS)
      fail(fmt::format("integer {} is out of range", u));
    fail("expected an integer");
  }
  bool asBool() const {
    bool v;
    if (e_.get_bool().get(v) != simdjson::SUCCESS)
      fail("expected a boolean");
    return v;
  }
  double asFloat() const;
  std::string asString() const { return std::string(asStringRef()); }
  llvm::StringRef asStringRef() const {
    std::string_view v;
    if (e_.get_string().get(v) != simdjson::SUCCESS)
      fail("expected a string");
    return llvm::StringRef(v.data(), v.size());
  }

private:
  simdjson::dom::object object() const {
    simdjson::dom::object o;
    if (e_.get_object().get(o) != simdjson::SUCCESS)
      fail("expected an object");
    return o;
  }
  simdjson::dom::array array() const {
    simdjson::dom::array a;
    if (e_.get_array().get(a) != simdjson::SUCCESS)
      fail("expected an array");
    return a;
  }
  /// The member `name` of `o`; objects with many members are looked up in an index the document
  /// builds once (a simdjson object is a list: a 10,000-entry tensor_values read by name would
  /// be quadratic).
  bool lookup(simdjson::dom::object o, llvm::StringRef name, simdjson::dom::element &out) const;
  /// Whether this is an object with a non-null member `name` (then in `out`).
  bool present(const char *name, simdjson::dom::element &out) const {
    simdjson::dom::object o;
    return e_.get_object().get(o) == simdjson::SUCCESS && lookup(o, name, out) && !out.is_null();
  }
  /// This node's path step in the document's arena, made on first use.
  const JsonPathStep *step() const;
  JsonRef member(llvm::StringRef key, simdjson::dom::element v) const {
    return JsonRef(v, *doc_, JsonPathStep{step(), key, 0, false});
  }
  JsonRef element(size_t i, simdjson::dom::element v) const {
    return JsonRef(v, *doc_, JsonPathStep{step(), {}, i, true});
  }

  simdjson::dom::element e_;
  JsonDocument *doc_;
  JsonPathStep at_;
  mutable const JsonPathStep *step_ = nullptr;
};

/// A parsed JSON text: owns the parse and the path steps of the nodes read from it.
class JsonDocument {
public:
  /// The root node; `path` prefixes every path below it ("" names none).
  JsonRef root(llvm::StringRef path = "");

private:
  friend class JsonRef;
  friend llvm::Expected<std::unique_ptr<JsonDocument>> parseJsonText(llvm::StringRef, llvm::StringRef, bool);
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
  llvm::BumpPtrAllocator steps_;
  /// Member indexes of the large objects looked up by key, by the address of their first key
  /// (inside the parse, unique per object).
  llvm::DenseMap<const char *, llvm::StringMap<simdjson::dom::element>> indexes_;
};

/// The deepest nesting of arrays and objects the readers accept. Real documents nest a few
/// levels (a counts tree: one level per module); the limit keeps hostile input from exhausting
/// the stack in the recursive code that walks or prints JSON values.
inline constexpr int kMaxJsonDepth = 256;

/// How many readable bytes must follow a JSON text for the parser to read it where it lies.
inline constexpr size_t kJsonPadding = simdjson::SIMDJSON_PADDING;

/// Parses JSON text; a syntax error names the record and the position. Nesting deeper than
/// kMaxJsonDepth is refused. `padded`: kJsonPadding readable bytes follow the text, so it is parsed
/// in place rather than copied into a padded buffer.
llvm::Expected<std::unique_ptr<JsonDocument>> parseJsonText(llvm::StringRef text, llvm::StringRef recordName,
                                                            bool padded = false);

} // namespace commlens
