// Building small programs by hand for the pass tests: tensor metadata and a builder that adds
// parameters, user inputs and ops in module scopes.
#pragma once

#include "ir/Graph.h"
#include "ir/TensorMetaUtils.h"
#include "autograd/Derivatives.h"
#include "passes/PassManager.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace commlens::test {

inline TensorMeta f32(std::initializer_list<int64_t> sizes, std::optional<std::vector<int64_t>> strides = std::nullopt) {
  std::optional<llvm::ArrayRef<int64_t>> st;
  if (strides)
    st = llvm::ArrayRef<int64_t>(*strides);
  return metaOf(ScalarType::Float, llvm::ArrayRef<int64_t>(sizes.begin(), sizes.size()), Device{}, st);
}

constexpr const char *kLinear = "torch.nn.modules.linear.Linear";

/// A program built node by node; module stacks give each op its scope.
struct TestProgram {
  ExportedProgram p;
  Graph &g = p.graph();

  explicit TestProgram(llvm::StringRef rootType) { g.scopes().setRootType(rootType); }
  Value *param(llvm::StringRef fqn, TensorMeta m) {
    std::string name = "p_" + fqn.str();
    std::replace(name.begin(), name.end(), '.', '_');
    Value *v = g.createValue(name, ValueKind::Tensor);
    v->setMeta(std::move(m));
    g.inputs().push_back({InputKind::Parameter, v, fqn.str(), true, ""});
    return v;
  }
  Value *input(llvm::StringRef name, TensorMeta m) {
    Value *v = g.createValue(name, ValueKind::Tensor);
    v->setMeta(std::move(m));
    g.inputs().push_back({InputKind::UserInput, v, name.str(), true, ""});
    return v;
  }
  Value *op(llvm::StringRef name, llvm::StringRef target, llvm::SmallVector<NamedArgument, 4> args, TensorMeta out,
            llvm::ArrayRef<ModuleStackEntry> stack = {}) {
    Value *v = g.createValue(name, ValueKind::Tensor);
    v->setMeta(std::move(out));
    Node *n = g.appendNode(name, target, std::move(args), {v});
    ModuleScope *s = g.scopes().getOrCreate(stack);
    llvm::SmallVector<unsigned, 4> calls;
    for (const ModuleStackEntry &e : stack)
      calls.push_back(e.callIndex);
    n->setScope(s, calls);
    return v;
  }
  void output(Value *v) { g.outputs().push_back({OutputKind::UserOutput, v, ""}); }
};

/// The whole prediction pipeline (forward and backward) on `p`: every collective in issue order
/// as "op phase @module" (phase fwd/bwd; " bytes" per rank appended with `bytes`).
inline llvm::Expected<std::vector<std::string>> predictCollectives(ExportedProgram &p, const ShardingPlan &plan,
                                                                   bool bytes) {
  PassManager pm;
  buildPipeline(pm, /*backward=*/true);
  PassContext ctx{p, &plan, {}, PredictionState()};
  if (llvm::Error err = pm.run(ctx))
    return err;
  std::vector<std::string> out;
  for (const CollectiveRecord &r : ctx.state.collectives)
    out.push_back(fmt::format("{} {} @{}", r.opKey, r.phase == Phase::Forward ? "fwd" : "bwd",
                              r.module ? r.module->displayName() : "Global") +
                  (bytes ? fmt::format(" {}", r.bytesPerRank) : ""));
  return out;
}

} // namespace commlens::test
