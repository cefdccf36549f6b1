// Reads the IR text IRPrinter writes back into a program (no LibTorch), so that passes can be
// tested on small hand-written graphs (commlens-opt, tests/lit).
//
// One construct per line; blank lines and lines starting with "//" are skipped.
//
//   program torch VERSION schema MAJOR.MINOR [dialect NAME]...     (optional, first)
//   scope DISPLAY : TYPE [in @PARENT]       module scopes in forward order, the root first; the
//                                           root's DISPLAY is its class name, a child's is the root
//                                           class name "." attribute path; "?" is an unknown TYPE;
//                                           the parent is the longest declared path prefix
//                                           unless `in` names another
//   input [RESULT] KIND "TARGET" [alias "FQN"] [non_persistent]
//   RESULTS = OP(ARG, NAME=ARG, ...) [no_grad] [@SCOPE[#K | #I.J.K]] [name "NODE"]
//   output KIND ARG ["TARGET"]
//   call @SCOPE[#K](ARG, ..., NAME=ARG, ...)  a module call's signature
//
// RESULT is %name [: TYPE] [{annotation}], TYPE one of DTYPE[SIZE, ...] [strides [S, ...]]
// [device "D"] (sizes are integers or symbolic "expr=hint"), SymInt(SIZE), SymBool, SymFloat,
// Token, CustomObj. RESULTS is () or a comma-separated list of RESULTs, [RESULT, ...] lists
// and constants. ARG is %value, an int, a float (with "." or "e", inf, nan), True/False, None,
// a "string", torch.DTYPE / torch.LAYOUT / torch.MEMORY_FORMAT, device("D"),
// complex(RE, IM), or a [list] of those. `#K` is the call index of the innermost module, the
// full call path is written I.J.K. A node's name defaults to its first result's name. Values
// must be defined (as an input or a node result) before they are used, except in `call` lines.
//
// Untyped text leaves some choices to defaults: a literal int is an int (not a SymInt
// constant), a list of tensors without None a tensor list, an empty list an int list.
// Node metadata is not part of the text.
#pragma once

#include "ir/Graph.h"

#include "llvm/Support/Error.h"

#include <memory>

namespace commlens {

/// Parses IR text. Errors are one line, "line N: <what is wrong>".
llvm::Expected<std::unique_ptr<ExportedProgram>> parseProgram(llvm::StringRef text);

/// Reads and parses a file ("-" is stdin); the message does not name the file (the caller does).
llvm::Expected<std::unique_ptr<ExportedProgram>> parseProgramFile(llvm::StringRef path);

} // namespace commlens
