#include "ir/Types.h"

#include "llvm/ADT/StringSet.h"

#include <fmt/format.h>

#include <array>
#include <mutex>

namespace commlens {
namespace {
struct ScalarTypeInfo {
  ScalarType type;
  const char *shortName;
  const char *torchName;
  int64_t size;
};
constexpr std::array<ScalarTypeInfo, 22> kScalarTypes = {{
    {ScalarType::Unknown, "unknown", "unknown", 0},
    {ScalarType::Byte, "u8", "uint8", 1},
    {ScalarType::Char, "i8", "int8", 1},
    {ScalarType::Short, "i16", "int16", 2},
    {ScalarType::Int, "i32", "int32", 4},
    {ScalarType::Long, "i64", "int64", 8},
    {ScalarType::Half, "f16", "float16", 2},
    {ScalarType::Float, "f32", "float32", 4},
    {ScalarType::Double, "f64", "float64", 8},
    {ScalarType::ComplexHalf, "c32", "complex32", 4},
    {ScalarType::ComplexFloat, "c64", "complex64", 8},
    {ScalarType::ComplexDouble, "c128", "complex128", 16},
    {ScalarType::Bool, "b8", "bool", 1},
    {ScalarType::BFloat16, "bf16", "bfloat16", 2},
    {ScalarType::UInt16, "u16", "uint16", 2},
    {ScalarType::Float8_e4m3fn, "f8e4m3fn", "float8_e4m3fn", 1},
    {ScalarType::Float8_e5m2, "f8e5m2", "float8_e5m2", 1},
    {ScalarType::Float8_e4m3fnuz, "f8e4m3fnuz", "float8_e4m3fnuz", 1},
    {ScalarType::Float8_e5m2fnuz, "f8e5m2fnuz", "float8_e5m2fnuz", 1},
    {ScalarType::Float8_e8m0fnu, "f8e8m0fnu", "float8_e8m0fnu", 1},
    {ScalarType::UInt32, "u32", "uint32", 4},
    {ScalarType::UInt64, "u64", "uint64", 8},
}};
const ScalarTypeInfo &info(ScalarType t) { return kScalarTypes[static_cast<size_t>(t)]; }
} // namespace

llvm::StringRef shortName(ScalarType t) { return info(t).shortName; }
std::string torchName(ScalarType t) { return std::string("torch.") + info(t).torchName; }
int64_t elementSize(ScalarType t) { return info(t).size; }

std::optional<ScalarType> scalarTypeFromShortName(llvm::StringRef s) {
  for (const auto &i : kScalarTypes)
    if (s == i.shortName)
      return i.type;
  return std::nullopt;
}

llvm::StringRef name(Layout l) {
  static constexpr const char *kNames[] = {"unknown", "sparse_coo", "sparse_csr", "sparse_csc",
                                           "sparse_bsr", "sparse_bsc", "mkldnn", "strided"};
  return kNames[static_cast<size_t>(l)];
}

llvm::StringRef name(MemoryFormat m) {
  static constexpr const char *kNames[] = {"unknown", "contiguous_format", "channels_last",
                                           "channels_last_3d", "preserve_format"};
  return kNames[static_cast<size_t>(m)];
}

std::string Device::str() const { return index ? fmt::format("{}:{}", type, *index) : type; }

SymInt SymInt::symbolic(llvm::StringRef expr, int64_t hint, bool hasHint) {
  // Few distinct texts per process ("s0", "s0 + 1"); kept for its lifetime.
  static std::mutex lock;
  static llvm::StringSet<> texts; // entries never move: the keys stay valid
  if (expr.empty())
    return SymInt{hint, hasHint, nullptr};
  std::lock_guard<std::mutex> guard(lock);
  return SymInt{hint, hasHint, texts.insert(expr).first->getKeyData()};
}

std::string SymInt::str() const {
  if (!isSymbolic())
    return std::to_string(hint);
  return hasHint ? fmt::format("{}={}", exprText, hint) : std::string(exprText);
}

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (const SymInt &s : sizes)
    n *= s.hint;
  return n;
}

std::string TensorMeta::str() const {
  fmt::memory_buffer out; // one string per call: reports print the shape of every operand
  fmt::format_to(std::back_inserter(out), "{}[", std::string_view(shortName(dtype)));
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i)
      out.append(std::string_view(", "));
    if (sizes[i].isSymbolic())
      fmt::format_to(std::back_inserter(out), "{}", sizes[i].str());
    else
      fmt::format_to(std::back_inserter(out), "{}", sizes[i].hint);
  }
  out.push_back(']');
  return fmt::to_string(out);
}

} // namespace commlens
