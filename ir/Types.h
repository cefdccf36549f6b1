// Scalar and tensor metadata of the commlens IR. Enumerations are keyed by name, not by the
// numbering of any serialization format (the export schema numbers dtypes differently from c10).
#pragma once

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace commlens {

enum class ScalarType : uint8_t {
  Unknown, Byte, Char, Short, Int, Long, Half, Float, Double, ComplexHalf, ComplexFloat,
  ComplexDouble, Bool, BFloat16, UInt16, Float8_e4m3fn, Float8_e5m2, Float8_e4m3fnuz,
  Float8_e5m2fnuz, Float8_e8m0fnu, UInt32, UInt64,
};
/// Short name used in the IR text ("f32", "bf16", "i64", ...).
llvm::StringRef shortName(ScalarType t);
/// torch spelling ("torch.float32").
std::string torchName(ScalarType t);
std::optional<ScalarType> scalarTypeFromShortName(llvm::StringRef s);
/// Bytes per element (sub-byte types do not exist in this set).
int64_t elementSize(ScalarType t);

enum class Layout : uint8_t { Unknown, SparseCoo, SparseCsr, SparseCsc, SparseBsr, SparseBsc, Mkldnn, Strided };
llvm::StringRef name(Layout l);

enum class MemoryFormat : uint8_t { Unknown, Contiguous, ChannelsLast, ChannelsLast3d, Preserve };
llvm::StringRef name(MemoryFormat m);

struct Device {
  std::string type = "cpu";
  std::optional<int64_t> index;
  bool operator==(const Device &) const = default;
  std::string str() const;
};

/// A size that may be symbolic. Concrete sizes have no expression; symbolic ones keep the sympy
/// expression text and the example value the exporter saw (its hint), when it had one. The text
/// is interned (symbolic()): every pass copies the sizes and strides of the values it rewrites,
/// and a SymInt without a string of its own copies as plain words.
struct SymInt {
  int64_t hint = 0;
  bool hasHint = true;

  static SymInt concrete(int64_t v) { return SymInt{v, true, nullptr}; }
  /// A symbolic size; `expr` is copied into a process-wide table of expression texts.
  static SymInt symbolic(llvm::StringRef expr, int64_t hint, bool hasHint);
  /// The expression text ("s0 + 1"); empty for a concrete size.
  llvm::StringRef expr() const { return exprText ? llvm::StringRef(exprText) : llvm::StringRef(); }
  bool isSymbolic() const { return exprText != nullptr; }
  bool operator==(const SymInt &o) const { return hint == o.hint && exprText == o.exprText && hasHint == o.hasHint; }
  std::string str() const;

  const char *exprText = nullptr; ///< interned (symbolic()), NUL-terminated; null when concrete
};

struct TensorMeta {
  ScalarType dtype = ScalarType::Float;
  llvm::SmallVector<SymInt, 4> sizes;
  llvm::SmallVector<SymInt, 4> strides;
  SymInt storageOffset;
  Device device;
  Layout layout = Layout::Strided;
  bool requiresGrad = false;

  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  /// Number of elements, using hints for symbolic sizes.
  int64_t numel() const;
  int64_t nbytes() const { return numel() * elementSize(dtype); }
  /// "f32[2, 4, 8]" (symbolic sizes print their expression).
  std::string str() const;
};

} // namespace commlens
