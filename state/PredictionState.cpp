#include "state/PredictionState.h"

#include "ir/IRPrinter.h"

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
    if (const DTensorLayout *l = state.layout(&v))
      return " {" + str(l->placements).substr(1, str(l->placements).size() - 2) + "}";
    return "";
  });
}

} // namespace commlens
