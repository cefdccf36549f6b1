#include "frontends/JsonRef.h"

#include "ir/Error.h"

namespace commlens {

llvm::Expected<json> parseJsonText(llvm::StringRef text, llvm::StringRef recordName) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error &e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> keep the tail
    if (auto p = what.find("] "); p != std::string::npos)
      what = what.substr(p + 2);
    return makeError("{}: invalid JSON: {}", recordName.str(), what);
  }
}

} // namespace commlens
