// Linear algebra (torch 2.13 `_ops/_math_ops.py`): single-dim strategies, the implicit
// all-Replicate rule first, no uneven shards.
//   factorizations, solves, inverses, determinants (cholesky ... _linalg_check_errors): the
//     matrices are the last two dims, so per batch dim d of the first operand every result and
//     operand is S(d) alike; ops linear in one operand add rules carrying a Partial through it:
//       linalg_solve_triangular(A, B): [P | R, P] (sum, avg) and [S(d) | R, S(d)] for B's batch
//         dims (B may have more of them than A; where A has the dim too, the local solve raises
//         at runtime when that candidate is selected, and so does the rule);
//       cholesky_solve(B, A): [P | P, R];
//       linalg_lu_solve / linalg_ldl_solve (LU, pivots, B), ormqr (a, tau, C): [P | R, R, P];
//       _linalg_solve_ex(A, B) -> (result, LU, pivots, info): [P, R, R, R | R, P];
//   linalg_pinv.atol_rtol_tensor: [S(d) | S(d), R (atol, rtol)] per batch dim (a non-replicated
//     atol / rtol is refused: DTensor would run it unmoved);
//   linalg_cross: [S(d) | S(d), S(d)] for every dim but the cross-product dim (keyword dim).
// _linalg_svd, linalg_qr and _linalg_eigh replicate everything (TensorRules' replicate-only rule).
#include "dtensor/rules/RuleEngine.h"

namespace commlens::rules {

namespace {

using RP = RulePlacement;
using Rules = std::vector<SingleDimRule>;

struct BatchOp {
  unsigned numOutputs, numInputs;
};

const llvm::StringMap<BatchOp> &batchOps() {
  static const llvm::StringMap<BatchOp> m = {
      {"aten::cholesky.default", {1, 1}},
      {"aten::cholesky_inverse.default", {1, 1}},
      {"aten::linalg_matrix_exp.default", {1, 1}},
      {"aten::cholesky_solve.default", {1, 2}},
      {"aten::linalg_householder_product.default", {1, 2}},
      {"aten::linalg_solve_triangular.default", {1, 2}},
      {"aten::linalg_ldl_solve.default", {1, 3}},
      {"aten::linalg_lu_solve.default", {1, 3}},
      {"aten::ormqr.default", {1, 3}},
      {"aten::geqrf.default", {2, 1}},
      {"aten::linalg_cholesky_ex.default", {2, 1}},
      {"aten::linalg_eig.default", {2, 1}},
      {"aten::linalg_inv_ex.default", {2, 1}},
      {"aten::triangular_solve.default", {2, 2}},
      {"aten::_linalg_det.default", {3, 1}},
      {"aten::linalg_ldl_factor_ex.default", {3, 1}},
      {"aten::linalg_lu.default", {3, 1}},
      {"aten::linalg_lu_factor_ex.default", {3, 1}},
      {"aten::lu_unpack.default", {3, 2}},
      {"aten::_linalg_slogdet.default", {4, 1}},
      {"aten::_linalg_solve_ex.default", {4, 2}},
      {"aten::_linalg_check_errors.default", {0, 1}},
  };
  return m;
}

/// [S(d) x n] for every batch dim d of the first operand (all but its last two dims).
Rules batchDimRules(const OpCall &call, size_t n) {
  Rules rules;
  for (int64_t d = 0; d < call.rank(0) - 2; ++d)
    rules.push_back(SingleDimRule(n, RP::ph(d)));
  return rules;
}

/// linalg_solve_triangular's [S(d) | R, S(d)] on a batch dim d of B that A, broadcast from the
/// right, has too (size > 1): the local solve meets A's whole batch with B's shard and raises.
/// DTensor selects such a candidate and fails at runtime; so do we.
llvm::Error checkSolveTriangularBatch(const OpCall &call, const Candidate &c) {
  auto a = call.shape(0), b = call.shape(1);
  int64_t offset = static_cast<int64_t>(b.size()) - static_cast<int64_t>(a.size());
  for (size_t k = 0; k < c.inputs[1].size(); ++k) {
    const Placement &p = c.inputs[1][k];
    int64_t ad = p.dim - offset;
    if (p.isShard() && p.dim < static_cast<int64_t>(b.size()) - 2 && ad >= 0 && a[ad] != 1 &&
        !c.inputs[0][k].isShard(ad))
      return call.error("B is sharded on batch dim {} while A keeps its whole batch there: the local solve raises "
                        "at runtime in DTensor (batch sizes differ)",
                        p.dim);
  }
  return llvm::Error::success();
}

llvm::Expected<Cands> batchRule(const OpCall &call) {
  BatchOp op = batchOps().lookup(call.op);
  if (call.inputs.size() != op.numInputs)
    return call.error("expected {} tensor operands, got {}", op.numInputs, call.inputs.size());
  Rules rules = batchDimRules(call, op.numOutputs + op.numInputs);
  RP P = RP::P(), R = RP::R();
  llvm::StringRef name = call.op;
  if (name == "aten::linalg_solve_triangular.default") {
    rules.push_back({P, R, P});
    rules.push_back({RP::P(ReduceOp::Avg), R, RP::P(ReduceOp::Avg)});
    for (int64_t d = 0; d < call.rank(1) - 2; ++d)
      rules.push_back({RP::ph(d), R, RP::ph(d)});
  } else if (name == "aten::cholesky_solve.default") {
    rules.push_back({P, P, R});
  } else if (name == "aten::linalg_lu_solve.default" || name == "aten::linalg_ldl_solve.default" ||
             name == "aten::ormqr.default") {
    rules.push_back({P, R, R, P});
  } else if (name == "aten::_linalg_solve_ex.default") {
    rules.push_back({P, R, R, R, R, P});
  }
  ExpandOptions opts;
  opts.numOutputs = op.numOutputs;
  Cands cands = expandSingleDim(call, std::move(rules), opts);
  if (name == "aten::linalg_solve_triangular.default" && !cands.empty())
    if (llvm::Error e = checkSolveTriangularBatch(call, cands[selectMinCost(call, cands)]))
      return e;
  return cands;
}

/// atol / rtol are keyword tensors, which DTensor never redistributes (it runs them as they are,
/// though it prices them as R): only a replicated or plain one is modelled.
llvm::Expected<Cands> pinvRule(const OpCall &call) {
  if (call.inputs.empty())
    return call.error("no tensor operands");
  for (size_t k = 1; k < call.inputs.size(); ++k)
    if (call.inputs[k].placements != replicatePlacements(*call.mesh))
      return call.error("keyword tensor operand {} is {}: DTensor runs keyword tensors without redistributing "
                        "them, which is not modelled",
                        k, str(call.inputs[k].placements));
  Rules rules = batchDimRules(call, 2);
  for (SingleDimRule &r : rules)
    r.append(call.inputs.size() - 1, RP::R()); // atol, rtol: scalar tensors
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

llvm::Expected<Cands> crossRule(const OpCall &call) {
  if (call.inputs.size() != 2)
    return call.error("expected two tensor operands, got {}", call.inputs.size());
  int64_t rank = call.rank(0), crossDim = -1;
  for (const NamedArgument &na : call.node->inputs()) // keyword-only, read from the kwargs
    if (na.keyword && na.name == "dim")
      crossDim = na.value.asInt().value_or(-1);
  crossDim = ((crossDim % rank) + rank) % rank;
  Rules rules;
  for (int64_t d = 0; d < rank; ++d)
    if (d != crossDim)
      rules.push_back(SingleDimRule(3, RP::ph(d)));
  return expandSingleDim(call, std::move(rules), ExpandOptions{});
}

} // namespace

void registerLinalgRules(RuleTable &t) {
  for (const auto &e : batchOps())
    t[e.getKey()] = batchRule;
  t["aten::linalg_pinv.atol_rtol_tensor"] = pinvRule;
  t["aten::linalg_cross.default"] = crossRule;
}

} // namespace commlens::rules
