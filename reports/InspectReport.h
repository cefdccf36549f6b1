// `commlens inspect`: the module tree in forward order with node counts, parameters, the module
// forward order and the parameter execution order (first use in graph order, which is what
// FSDP's execution-order tracer records).
#pragma once

#include "ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace commlens {

struct InspectReport {
  struct ModuleRow {
    const ModuleScope *scope;
    unsigned ownNodes = 0;
    unsigned inclusiveNodes = 0;
  };
  struct TensorRow {
    std::string fqn;
    const Value *value = nullptr;
    const Node *firstUse = nullptr; // null when unused
  };

  std::vector<ModuleRow> modules;        // forward order
  std::vector<TensorRow> parameters;     // signature order, tied parameters once
  std::vector<std::pair<std::string, std::string>> aliases; // tied name -> canonical name
  std::vector<TensorRow> buffers;        // signature order
  std::vector<const TensorRow *> parameterExecutionOrder;
  std::vector<const Value *> userInputs;
  int64_t parameterNumel = 0, parameterBytes = 0;

  static InspectReport build(const ExportedProgram &program);
  void printText(llvm::raw_ostream &os, const ExportedProgram &program) const;
  std::string toJson(const ExportedProgram &program) const;
};

} // namespace commlens
