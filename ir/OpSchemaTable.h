// The operator schemas of torch's dispatcher: a static table that ir/gen_op_schemas.py generates
// at build time from the installed torch (OpSchemaTableData.cpp in the build tree), so that
// commlens reads programs without LibTorch. The .pt2 node check (frontends/OpSchemas.cpp) reads
// the arguments and results; InternedOp reads whether an op's result aliases its input. Types come as their kinds (no schema
// strings to parse) and the text schemas spell them with, for messages. Plain C strings, not
// string_view: GCC takes minutes over a table of thousands of constexpr string_views.
#pragma once

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <string_view>

namespace commlens::opschema {

/// The c10::TypeKind of a schema type, as far as the check tells kinds apart.
enum class TypeKind : uint8_t {
  Other, // Generator, Dimname, classes, ...: the check accepts anything
  Optional,
  List,
  Tensor,
  Int,
  SymInt,
  Float,
  SymFloat,
  Bool,
  SymBool,
  Complex,
  Number, // Scalar
  String,
  ScalarType,
  Layout,
  MemoryFormat,
  Device,
};

struct Type {
  const char *text; // as the schema spells it: "SymInt[]", "Tensor?"
  /// The type's kind, then for Optional and List their element's, and so on ("Tensor?[]": List,
  /// Optional, Tensor); Other after the last.
  TypeKind kinds[4];
};

struct Arg {
  const char *name;
  uint16_t type; // index for type()
  bool hasDefault;
};

struct Schema {
  const char *name;     // "aten::add"
  const char *overload; // "Tensor"; empty for the default overload
  uint32_t firstArg;
  uint16_t numArgs;
  uint32_t firstReturn;
  uint16_t numReturns;
  /// The first result may share storage with the first argument (a view, an op that may return
  /// its input such as `contiguous`, an in-place op's self): the schemas' alias annotations.
  bool resultAliasesSelf;
};

/// Every schema, sorted by (name, overload): a name's overloads are adjacent.
llvm::ArrayRef<Schema> schemas();
llvm::ArrayRef<Arg> arguments(const Schema &schema);
/// The type of each result, as indices for type().
llvm::ArrayRef<uint16_t> returns(const Schema &schema);
const Type &type(uint16_t index);

/// The schemas of op `name` ("aten::add"), one per overload.
llvm::ArrayRef<Schema> overloadsOf(std::string_view name);
/// The schema of `name` ("aten::add") and `overload` ("Tensor"; empty or "default" for the
/// default overload); null when the dispatcher registers no such operator.
const Schema *find(std::string_view name, std::string_view overload);

} // namespace commlens::opschema
