// Typed node arguments: the argument kinds of the export schema that a static analysis needs.
#pragma once

#include "ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <string>
#include <variant>
#include <vector>

namespace commlens {

class Value;

struct NoneArg { bool operator==(const NoneArg &) const = default; };
/// An int that is either a literal or a symbolic value produced by a node (sym_size, ...).
struct SymIntArg {
  Value *value = nullptr; // set when symbolic
  int64_t constant = 0;
  bool isSymbolic() const { return value != nullptr; }
  /// The literal, or the symbolic value's hint.
  int64_t hint() const;
  bool operator==(const SymIntArg &) const = default;
};
struct SymBoolArg { Value *value = nullptr; bool constant = false; bool operator==(const SymBoolArg &) const = default; };
struct SymFloatArg { Value *value = nullptr; double constant = 0; bool operator==(const SymFloatArg &) const = default; };
struct ComplexArg { double real = 0, imag = 0; bool operator==(const ComplexArg &) const = default; };

using TensorList = llvm::SmallVector<Value *, 4>;
/// Optional tensor list entries are null where the list holds None.
struct OptionalTensorList { llvm::SmallVector<Value *, 4> items; bool operator==(const OptionalTensorList &) const = default; };
using IntList = llvm::SmallVector<int64_t, 4>;
using FloatList = std::vector<double>;
using BoolList = std::vector<bool>;
using StringList = std::vector<std::string>;
/// Not a SmallVector, unlike the lists above: only programs with symbolic sizes have these, and
/// four inline entries would make every argument of every node 32 bytes larger.
using SymIntList = std::vector<SymIntArg>;

/// One argument or result. `Value *` is a tensor reference.
class Argument {
public:
  using Storage = std::variant<NoneArg, Value *, TensorList, OptionalTensorList, int64_t, IntList,
                               double, FloatList, bool, BoolList, std::string, StringList, SymIntArg,
                               SymIntList, SymBoolArg, SymFloatArg, ScalarType, MemoryFormat, Layout,
                               Device, ComplexArg>;

  Argument() = default;
  template <typename T>
  Argument(T v) : storage_(std::move(v)) {} // NOLINT: implicit on purpose, arguments are values

  template <typename T> bool is() const { return std::holds_alternative<T>(storage_); }
  template <typename T> const T &get() const { return std::get<T>(storage_); }
  template <typename T> T &get() { return std::get<T>(storage_); }
  const Storage &storage() const { return storage_; }
  Storage &storage() { return storage_; }

  bool isNone() const { return is<NoneArg>(); }
  bool isTensor() const { return is<Value *>(); }
  Value *tensor() const { return get<Value *>(); }
  /// Every tensor this argument refers to (single, list, optional list), in order.
  llvm::SmallVector<Value *, 4> tensors() const;
  /// Calls `f` on each of tensors(), without building the list (hot in every pass).
  template <typename F> void forEachTensor(F &&f) const {
    if (const auto *v = std::get_if<Value *>(&storage_))
      f(*v);
    else if (const auto *list = std::get_if<TensorList>(&storage_))
      for (Value *v : *list)
        f(v);
    else if (const auto *optional = std::get_if<OptionalTensorList>(&storage_))
      for (Value *v : optional->items)
        if (v)
          f(v);
  }
  /// An int (literal or symbolic hint), or the given fallback when the argument is something else.
  std::optional<int64_t> asInt() const;
  /// A list of ints (literal list or symbolic list hints).
  std::optional<IntList> asIntList() const;

  bool operator==(const Argument &) const = default;

private:
  Storage storage_ = NoneArg{};
};

struct NamedArgument {
  std::string name;
  Argument value;
  bool keyword = false;
};

} // namespace commlens
