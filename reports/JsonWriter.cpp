// Compiled as C++17 (reports/CMakeLists.txt): see JsonWriter.h.
#include "reports/JsonWriter.h"

#include "llvm/Support/JSON.h"

namespace commlens {

JsonWriter::JsonWriter(llvm::raw_ostream &os, unsigned indent)
    : out_(std::make_unique<llvm::json::OStream>(os, indent)) {}
JsonWriter::~JsonWriter() = default;

void JsonWriter::objectBegin() { out_->objectBegin(); }
void JsonWriter::objectEnd() { out_->objectEnd(); }
void JsonWriter::arrayBegin() { out_->arrayBegin(); }
void JsonWriter::arrayEnd() { out_->arrayEnd(); }
void JsonWriter::attributeBegin(llvm::StringRef key) { out_->attributeBegin(key); }
void JsonWriter::attributeEnd() { out_->attributeEnd(); }
void JsonWriter::rawValue(llvm::function_ref<void(llvm::raw_ostream &)> contents) { out_->rawValue(contents); }
void JsonWriter::value(llvm::StringRef s) { out_->value(s); }
void JsonWriter::value(bool b) { out_->value(b); }
void JsonWriter::integer(int64_t i) { out_->value(i); }

} // namespace commlens
