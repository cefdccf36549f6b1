#include "dtensor/ShardingRules.h"

#include "ir/Error.h"
#include "dtensor/rules/RuleEngine.h"

#include <fmt/format.h>

#include <algorithm>

namespace commlens {

using namespace rules;

namespace {

const RuleTable &table() {
  static const RuleTable t = [] {
    RuleTable t;
    registerMatrixRules(t);
    registerPointwiseRules(t);
    registerViewRules(t);
    registerTensorRules(t);
    registerReductionRules(t);
    registerNormEmbeddingRules(t);
    registerBackwardRules(t);
    registerSpatialRules(t);
    registerConvolutionRules(t);
    registerLinalgRules(t);
    registerAttentionRules(t);
    registerDecompositionRules(t);
    return t;
  }();
  return t;
}

} // namespace

const ShardingRules &ShardingRules::get() {
  static const ShardingRules r;
  return r;
}

bool ShardingRules::supports(llvm::StringRef op) const { return table().count(op) != 0; }

bool ShardingRules::isPointwise(llvm::StringRef op) const { return rules::isPointwiseOp(op); }

std::vector<std::string> ShardingRules::supportedOps() const {
  std::vector<std::string> out;
  for (const auto &e : table())
    out.push_back(e.getKey().str());
  std::sort(out.begin(), out.end());
  return out;
}

llvm::Expected<ShardingDecision> ShardingRules::decide(const Node &node,
                                                       llvm::ArrayRef<std::optional<DTensorSpec>> operands,
                                                       const DeviceMesh &mesh) const {
  std::string op = node.op().str();
  OpCall call;
  call.node = &node;
  call.op = op;
  call.mesh = &mesh;
  for (Value *r : node.results())
    if (r->kind() == ValueKind::Tensor)
      call.results.push_back(r);

  llvm::SmallVector<Value *, 4> tensorOperands = node.tensorOperands();
  if (tensorOperands.size() != operands.size())
    return makeError("{}: {} operand specs given for {} tensor operands", op, operands.size(), tensorOperands.size());

  ShardingDecision d;
  bool anyDTensor = llvm::any_of(operands, [](const std::optional<DTensorSpec> &s) { return s.has_value(); });
  if (!anyDTensor) {
    // No DTensor operand: the op never reaches DTensor's dispatcher.
    d.operandPlacements.assign(operands.size(), std::nullopt);
    d.resultPlacements.assign(call.results.size(), std::nullopt);
    d.why = op + ": no DTensor operand, runs as a plain tensor op";
    return d;
  }
  auto it = table().find(op);
  if (it == table().end())
    return makeError("{}: no sharding rule (op not supported by commlens)", op);

  for (size_t i = 0; i < operands.size(); ++i) {
    OpInput in;
    in.value = tensorOperands[i];
    if (operands[i]) {
      if (operands[i]->placements.size() != mesh.ndim())
        return makeError("{}: operand {} has {} placements on a {}-D mesh", op, i, operands[i]->placements.size(),
                         mesh.ndim());
      in.meta = operands[i]->meta;
      in.placements = normalized(operands[i]->placements, in.meta.rank());
      for (const Placement &p : in.placements)
        if (p.kind == Placement::Kind::StridedShard && it->second != rules::followInputRule)
          return makeError("{}: operand {} is _StridedShard ({}); strided-shard propagation is not modelled", op, i,
                           str(in.placements));
    } else {
      const std::optional<TensorMeta> &m = tensorOperands[i]->meta();
      if (!m)
        return makeError("{}: operand {} has no tensor meta", op, i);
      // OpDispatcher: a plain tensor with one element is treated as a replicated DTensor; any
      // other plain tensor mixed with DTensors is an error.
      if (m->numel() != 1)
        return makeError("{}: got mixed torch.Tensor and DTensor (operand {} '{}' {} is a plain tensor)", op, i,
                         tensorOperands[i]->name(), m->str());
      in.meta = *m;
      in.placements = replicatePlacements(mesh);
      in.isDTensor = false;
    }
    call.inputs.push_back(std::move(in));
  }

  llvm::Expected<llvm::SmallVector<Candidate, 8>> cands = it->second(call);
  if (!cands)
    return cands.takeError();
  if (cands->empty())
    return makeError("{}: no valid sharding strategy for inputs {}", op, [&] {
      std::string s;
      for (const OpInput &in : call.inputs)
        s += (s.empty() ? "" : ", ") + str(in.placements);
      return s;
    }());
  SelectReason reason;
  size_t pick = selectMinCost(call, *cands, &reason);
  const Candidate &c = (*cands)[pick];
  for (size_t i = 0; i < call.inputs.size(); ++i)
    d.operandPlacements.push_back(call.inputs[i].isDTensor ? std::optional<Placements>(c.inputs[i]) : std::nullopt);
  for (size_t i = 0; i < call.results.size(); ++i)
    d.resultPlacements.push_back(i < c.outputs.size() ? c.outputs[i] : std::nullopt);
  d.why = fmt::format("{}: candidate {}/{} {} ({}, cost {:.4g})", op, pick + 1, cands->size(), c.str(), name(reason),
                      c.totalCost());
  return d;
}

} // namespace commlens
