#include "frontends/JsonRef.h"

#include "ir/Error.h"

namespace commlens {

namespace {
struct TooDeep {};
} // namespace

llvm::Expected<json> parseJsonText(llvm::StringRef text, llvm::StringRef recordName) {
  // The parser reports each array and object start with its depth; stop at the first too deep.
  json::parser_callback_t limitDepth = [](int depth, json::parse_event_t event, json &) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw TooDeep{};
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limitDepth);
  } catch (const TooDeep &) {
    return makeError("{}: invalid JSON: nested deeper than {} levels", recordName.str(), kMaxJsonDepth);
  } catch (const json::parse_error &e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> keep the tail
    if (auto p = what.find("] "); p != std::string::npos)
      what = what.substr(p + 2);
    return makeError("{}: invalid JSON: {}", recordName.str(), what);
  } catch (const json::exception &e) {
    // A number the parser cannot hold (out_of_range.406: "number overflow parsing '1e999'").
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos)
      what = what.substr(p + 2);
    return makeError("{}: invalid JSON: {}", recordName.str(), what);
  }
}

} // namespace commlens
