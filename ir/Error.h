// Errors as values: llvm::Error / llvm::Expected carrying one-line messages that name the
// node and module (or file and field) at fault.
#pragma once

#include "llvm/Support/Error.h"

#include <fmt/format.h>

#include <string>

namespace commlens {

template <typename... Args>
llvm::Error makeError(fmt::format_string<Args...> format, Args &&...args) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), fmt::format(format, std::forward<Args>(args)...));
}

/// The message of an error, consuming it.
inline std::string takeMessage(llvm::Error err) { return llvm::toString(std::move(err)); }

} // namespace commlens
