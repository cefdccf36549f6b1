// A streaming JSON writer for the reports: llvm::json::OStream behind a small interface.
//
// Only JsonWriter.cpp includes llvm/Support/JSON.h, and compiles as C++17: under clang in C++20
// with libstdc++ 12, LLVM 14's JSON.h does not compile (its json::Array's inline members use
// std::vector<json::Value> members, constexpr in C++20, which clang instantiates while Value is
// still incomplete), and the fuzz build (scripts/fuzz.sh) is a clang build.
#pragma once

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace llvm::json {
class OStream;
}

namespace commlens {

class JsonWriter {
public:
  /// Writes to `os`, `indent` spaces per level (0: on one line).
  JsonWriter(llvm::raw_ostream &os, unsigned indent);
  ~JsonWriter();
  JsonWriter(const JsonWriter &) = delete;
  JsonWriter &operator=(const JsonWriter &) = delete;

  void objectBegin();
  void objectEnd();
  void arrayBegin();
  void arrayEnd();
  void attributeBegin(llvm::StringRef key);
  void attributeEnd();
  /// A value written by `contents` as it is (the caller makes it valid JSON).
  void rawValue(llvm::function_ref<void(llvm::raw_ostream &)> contents);

  void value(llvm::StringRef s);
  void value(const char *s) { value(llvm::StringRef(s)); }
  void value(const std::string &s) { value(llvm::StringRef(s)); }
  void value(bool b);
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  void value(T i) {
    integer(static_cast<int64_t>(i));
  }

  template <typename F> void object(F &&contents) {
    objectBegin();
    contents();
    objectEnd();
  }
  template <typename F> void array(F &&contents) {
    arrayBegin();
    contents();
    arrayEnd();
  }
  template <typename T> void attribute(llvm::StringRef key, const T &v) {
    attributeBegin(key);
    value(v);
    attributeEnd();
  }
  template <typename F> void attributeObject(llvm::StringRef key, F &&contents) {
    attributeBegin(key);
    object(contents);
    attributeEnd();
  }
  template <typename F> void attributeArray(llvm::StringRef key, F &&contents) {
    attributeBegin(key);
    array(contents);
    attributeEnd();
  }

private:
  void integer(int64_t i);

  std::unique_ptr<llvm::json::OStream> out_;
};

} // namespace commlens
