#include "state/PredictionState.h"

#include "ir/IRPrinter.h"

namespace commlens {

void printAnnotatedGraph(llvm::raw_ostream &os, const Graph &graph, const PredictionState &state) {
  printGraph(os, graph, [&](const Value &v) -> std::string {
    if (const DTensorLayout *l = state.layout(&v))
      return " {" + str(l->placements).substr(1, str(l->placements).size() - 2) + "}";
    return "";
  });
}

} // namespace commlens
