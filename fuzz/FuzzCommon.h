// Shared by the libFuzzer targets (fuzz/*.cpp): bad input must come back as an llvm::Error with
// a one-line message (what the CLI prints as `commlens: error: <file>: <what>` with exit 2);
// anything else (a crash, an escaped exception, a sanitizer report) is a bug.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace commlens::fuzz {

inline llvm::StringRef asText(const uint8_t *data, size_t size) {
  return llvm::StringRef(reinterpret_cast<const char *>(data), size);
}

/// The expected outcome for bad input: an error with a message. An empty message is a bug (the
/// CLI would print "commlens: error: <file>: " and nothing to act on).
/// COMMLENS_FUZZ_VERBOSE=1 prints each error (to see what seeds reach, with -runs=0).
inline void expectMessage(llvm::Error err) {
  std::string message = llvm::toString(std::move(err));
  static const bool verbose = std::getenv("COMMLENS_FUZZ_VERBOSE") != nullptr;
  if (verbose)
    std::fprintf(stderr, "fuzz: error: %s\n", message.c_str());
  if (message.empty()) {
    std::fprintf(stderr, "fuzz: error without a message\n");
    std::abort();
  }
}

template <typename T> inline bool expectMessage(llvm::Expected<T> &value) {
  if (value)
    return true;
  expectMessage(value.takeError());
  return false;
}

} // namespace commlens::fuzz
