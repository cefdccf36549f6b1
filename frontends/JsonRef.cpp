#include "frontends/JsonRef.h"

#include "ir/Error.h"

namespace commlens {

namespace {

/// Whether arrays and objects nest deeper than kMaxJsonDepth outside strings: checked by a scan
/// before parsing, since nlohmann's depth callback makes the parser walk every object it closes
/// (half of an 8 MB program's load time).
bool nestsTooDeep(llvm::StringRef text) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

} // namespace

llvm::Expected<json> parseJsonText(llvm::StringRef text, llvm::StringRef recordName) {
  if (nestsTooDeep(text))
    return makeError("{}: invalid JSON: nested deeper than {} levels", recordName.str(), kMaxJsonDepth);
  try {
    return json::parse(text.begin(), text.end());
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
