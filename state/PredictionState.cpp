#include "state/PredictionState.h"

#include "ir/IRPrinter.h"

#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

namespace commlens {

std::string FsdpUnit::label() const {
  if (members.size() <= 1)
    return scope()->displayName();
  std::vector<std::string> names;
  for (const ModuleScope *m : members)
    names.push_back(m->displayName());
  return fmt::format("[{}]", fmt::join(names, ", "));
}

void printAnnotatedGraph(llvm::raw_ostream &os, const Graph &graph, const PredictionState &state) {
  printGraph(os, graph, [&](const Value &v) -> std::string {
    if (const DTensorLayout *l = state.layout(&v)) {
      // the mesh where a plan has several: {S(0) on ep}
      std::string mesh =
          state.dtensorMeshes.size() > 1 ? " on " + llvm::join(state.dtensorMeshes[l->mesh].mesh.dimNames, ",") : "";
      return " {" + str(l->placements).substr(1, str(l->placements).size() - 2) + mesh + "}";
    }
    return "";
  });
}

} // namespace commlens
