#include "ir/JsonRef.h"

#include "ir/Error.h"

#include "llvm/ADT/STLExtras.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace commlens {

std::string JsonRef::path() const {
  llvm::SmallVector<const JsonPathStep *, 16> steps{&at_};
  for (const JsonPathStep *s = at_.parent; s; s = s->parent)
    steps.push_back(s);
  std::string out;
  for (const JsonPathStep *s : llvm::reverse(steps)) {
    if (s->isIndex)
      out += fmt::format("[{}]", s->index);
    else if (out.empty())
      out = s->key.str();
    else
      out += fmt::format(".{}", s->key.str());
  }
  return out;
}

void JsonRef::fail(const std::string &what) const {
  std::string where = path();
  throw ParseError{where.empty() ? what : fmt::format("{}: {}", where, what)};
}

const JsonPathStep *JsonRef::step() const {
  if (!step_)
    step_ = new (doc_->steps_.Allocate<JsonPathStep>()) JsonPathStep(at_);
  return step_;
}

bool JsonRef::lookup(simdjson::dom::object o, llvm::StringRef name, simdjson::dom::element &out) const {
  constexpr size_t kIndexedSize = 32; // below this a scan is as fast as hashing
  std::string_view key(name.data(), name.size());
  if (o.size() < kIndexedSize)
    return o.at_key(key).get(out) == simdjson::SUCCESS;
  auto [it, added] = doc_->indexes_.try_emplace((*o.begin()).key.data());
  if (added)
    for (auto kv : o)
      it->second.try_emplace(llvm::StringRef(kv.key.data(), kv.key.size()), kv.value); // first wins, as at_key
  auto found = it->second.find(name);
  if (found == it->second.end())
    return false;
  out = found->second;
  return true;
}

size_t JsonRef::size() const {
  simdjson::dom::array a;
  if (e_.get_array().get(a) == simdjson::SUCCESS)
    return a.size();
  return object().size();
}

std::vector<std::pair<llvm::StringRef, JsonRef>> JsonRef::members() const {
  simdjson::dom::object o = object();
  std::vector<std::pair<llvm::StringRef, JsonRef>> out;
  out.reserve(o.size());
  for (auto kv : o) {
    llvm::StringRef key(kv.key.data(), kv.key.size());
    out.emplace_back(key, member(key, kv.value));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
  return out;
}

void JsonRef::rejectUnknownKeys(std::initializer_list<const char *> known) const {
  for (const auto &member : members()) { // not a structured binding: clang 14 cannot capture one
    llvm::StringRef key = member.first;
    if (std::none_of(known.begin(), known.end(), [&](const char *k) { return key == k; }))
      fail(fmt::format("unknown key '{}'", key.str()));
  }
}

double JsonRef::asFloat() const {
  double v;
  if (e_.get_double().get(v) == simdjson::SUCCESS)
    return v;
  std::string_view s;
  if (e_.get_string().get(s) == simdjson::SUCCESS) { // the serializer writes non-finite floats as strings
    if (s == "Infinity" || s == "inf")
      return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf")
      return -std::numeric_limits<double>::infinity();
    if (s == "NaN" || s == "nan")
      return std::numeric_limits<double>::quiet_NaN();
  }
  fail("expected a number");
}

JsonRef JsonDocument::root(llvm::StringRef path) {
  llvm::StringRef kept; // the caller's path may not outlive the document
  if (!path.empty()) {
    char *copy = steps_.Allocate<char>(path.size());
    std::copy(path.begin(), path.end(), copy);
    kept = llvm::StringRef(copy, path.size());
  }
  return JsonRef(root_, *this, JsonPathStep{nullptr, kept, 0, false});
}

namespace {

/// Why nlohmann's parser rejects `text` ("parse error at line 1, column 2: ..."), or nothing when
/// it accepts it: simdjson reports an error without its position, so a rejected document is read
/// again for the message users have always had.
std::optional<std::string> positionedParseError(llvm::StringRef text) {
  try {
    [[maybe_unused]] nlohmann::json parsed = nlohmann::json::parse(text.begin(), text.end());
    return std::nullopt;
  } catch (const nlohmann::json::exception &e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> keep the tail;
    // also a number the parser cannot hold ("number overflow parsing '1e999'").
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos)
      what = what.substr(p + 2);
    return what;
  }
}

} // namespace

llvm::Expected<std::unique_ptr<JsonDocument>> parseJsonText(llvm::StringRef text, llvm::StringRef recordName,
                                                            bool padded) {
  auto doc = std::make_unique<JsonDocument>();
  simdjson::error_code err = doc->parser_.allocate(text.size(), kMaxJsonDepth);
  if (!err)
    err = doc->parser_.parse(text.data(), text.size(), /*realloc_if_needed=*/!padded).get(doc->root_);
  if (!err)
    return doc;
  if (err == simdjson::DEPTH_ERROR)
    return makeError("{}: invalid JSON: nested deeper than {} levels", recordName.str(), kMaxJsonDepth);
  if (err == simdjson::MEMALLOC)
    return makeError("{}: cannot allocate memory to parse {} bytes of JSON", recordName.str(), text.size());
  std::optional<std::string> why = positionedParseError(text);
  return makeError("{}: invalid JSON: {}", recordName.str(), why ? *why : simdjson::error_message(err));
}

} // namespace commlens
