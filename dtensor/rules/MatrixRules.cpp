// mm / addmm / bmm / baddbmm: torch 2.13 registers both an op strategy and a single-dim
// strategy for these; the single-dim one takes precedence. Candidates come from an einsum
// description, per mesh dim (before placeholder filling and the implicit all-R rule 0):
//   batch dims:        [S(b) | S(b), S(b)]
//   contracting dims:  [P(sum) | S(k_lhs), S(k_rhs)]
//   lhs-only dims:     [S(m) | S(m), R]
//   rhs-only dims:     [S(n) | R, S(n)]
//   per-input linearity, for sum then avg: [P | P, R], [P | R, P]
// Dims are visited in sorted letter order within each class. addmm/baddbmm insert the bias
// placement after the output, derived from the output through broadcasting (a broadcast dim is
// R, a Partial output asks the bias for the same Partial: R -> P is a local divide, no comm).
// _foreach_mm runs mm per list element. dot keeps 2.13's older full-mesh einsum strategy (no
// linearity rules).
#include "dtensor/rules/RuleEngine.h"
#include "ir/TensorMetaUtils.h"

#include <fmt/ranges.h>

#include <set>

namespace commlens::rules {

namespace {

struct Einsum {
  std::string lhs, rhs, out;
  std::vector<char> batch, contracting, lhsOnly, rhsOnly;
};

Einsum parseEinsum(llvm::StringRef lhs, llvm::StringRef rhs, llvm::StringRef out) {
  Einsum e{lhs.str(), rhs.str(), out.str(), {}, {}, {}, {}};
  std::set<char> all(e.lhs.begin(), e.lhs.end());
  all.insert(e.rhs.begin(), e.rhs.end());
  for (char c : all) { // sorted, as EinsumDims.parse_dims
    bool inL = e.lhs.find(c) != std::string::npos, inR = e.rhs.find(c) != std::string::npos;
    bool inO = e.out.find(c) != std::string::npos;
    if (inL && inR && !inO)
      e.contracting.push_back(c);
    else if (inL && inR && inO)
      e.batch.push_back(c);
    else if (inO && inL)
      e.lhsOnly.push_back(c);
    else if (inO && inR)
      e.rhsOnly.push_back(c);
  }
  return e;
}

std::vector<SingleDimRule> einsumRules(const Einsum &e, std::optional<llvm::SmallVector<int64_t, 4>> biasShape) {
  auto pos = [](const std::string &s, char c) { return static_cast<int64_t>(s.find(c)); };
  std::vector<SingleDimRule> rules;
  auto add = [&](SingleDimRule r) {
    if (biasShape) {
      const RulePlacement &o = r[0];
      RulePlacement b = o;
      if (o.kind == RulePlacement::Kind::Placeholder) {
        int64_t pad = static_cast<int64_t>(e.out.size()) - static_cast<int64_t>(biasShape->size());
        int64_t bd = o.dim - pad;
        if (o.dim < pad || (*biasShape)[bd] == 1)
          b = RulePlacement::R();
        else
          b = RulePlacement::ph(bd);
      }
      r.insert(r.begin() + 1, b);
    }
    rules.push_back(std::move(r));
  };
  using RP = RulePlacement;
  for (char c : e.batch)
    add({RP::ph(pos(e.out, c)), RP::ph(pos(e.lhs, c)), RP::ph(pos(e.rhs, c))});
  for (char c : e.contracting)
    add({RP::P(), RP::ph(pos(e.lhs, c)), RP::ph(pos(e.rhs, c))});
  for (char c : e.lhsOnly)
    add({RP::ph(pos(e.out, c)), RP::ph(pos(e.lhs, c)), RP::R()});
  for (char c : e.rhsOnly)
    add({RP::ph(pos(e.out, c)), RP::R(), RP::ph(pos(e.rhs, c))});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    add({RP::P(op), RP::P(op), RP::R()});
    add({RP::P(op), RP::R(), RP::P(op)});
  }
  if (e.contracting.empty() && e.lhsOnly.empty() && e.rhsOnly.empty())
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
      add({RP::P(op), RP::P(op), RP::P(op)});
  return rules;
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> einsumStrategy(const OpCall &call, llvm::StringRef lhs,
                                                               llvm::StringRef rhs, llvm::StringRef out,
                                                               bool hasBias) {
  size_t want = hasBias ? 3 : 2;
  if (call.inputs.size() != want)
    return call.error("expected {} tensor operands, got {}", want, call.inputs.size());
  size_t first = hasBias ? 1 : 0;
  if (call.rank(first) != static_cast<int64_t>(lhs.size()) || call.rank(first + 1) != static_cast<int64_t>(rhs.size()))
    return call.error("operand ranks {} and {} do not match '{},{}->{}'", call.rank(first), call.rank(first + 1), lhs,
                      rhs, out);
  std::optional<llvm::SmallVector<int64_t, 4>> bias;
  if (hasBias)
    bias = call.shape(0);
  ExpandOptions opts;
  opts.numOutputs = 1;
  return expandSingleDim(call, einsumRules(parseEinsum(lhs, rhs, out), bias), opts);
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> mmRule(const OpCall &c) { return einsumStrategy(c, "mk", "kn", "mn", false); }
llvm::Expected<llvm::SmallVector<Candidate, 8>> addmmRule(const OpCall &c) { return einsumStrategy(c, "mk", "kn", "mn", true); }
llvm::Expected<llvm::SmallVector<Candidate, 8>> bmmRule(const OpCall &c) { return einsumStrategy(c, "bmk", "bkn", "bmn", false); }
llvm::Expected<llvm::SmallVector<Candidate, 8>> baddbmmRule(const OpCall &c) {
  return einsumStrategy(c, "bmk", "bkn", "bmn", true);
}

/// dot: the full-mesh einsum strategy 'i,i->' (gen_einsum_strategies): per mesh dim [R | R, R] and
/// [P(sum) | S(0), S(0)]; no Partial input is kept.
llvm::Expected<Cands> dotRule(const OpCall &c) {
  if (c.inputs.size() != 2 || c.rank(0) != 1 || c.rank(1) != 1)
    return c.error("expected two 1-D tensor operands");
  using RP = RulePlacement;
  Placement s0 = Placement::shard(0);
  return expandSingleDim(c, {{RP::P(), RP::of(s0), RP::of(s0)}}, ExpandOptions());
}

/// _foreach_mm(self[], mat2[]): mm per list element.
llvm::Expected<Cands> foreachMmRule(const OpCall &c) { return perElement(c, "aten::mm.default", mmRule); }

} // namespace

/// _grouped_mm(self, mat2, offs?, bias?) (torch 2.13 _matrix_ops.py grouped_mm_strategy): explicit
/// per-mesh-dim lists [out | self, mat2, (offs R)]: all R, [P | P, R], [P | R, P], then by ranks
/// 2x3: [S(1) | R, S(2)], [P | S(1), S(1)]; 3x2: [P | S(2), S(0)], [S(0) | S(1), R]; 2x2:
/// [S(2) | R, S(1)], [S(1) | S(0), R]; 3x3: [S(2) | R, S(2)], [S(1) | S(1), R], [P | S(2), S(1)],
/// [S(0) | S(0), S(0)]. A combination whose local operands the kernel cannot take is dropped
/// (is_valid_strategy_cb): on rank 0's shard, with strides laid out in the global tensor's order
/// (compute_local_stride), one of the last two dims must have stride 1 and the other a stride of
/// at least that dim's size and a multiple of 16 bytes. A bias DTensor raises on is refused.
llvm::Expected<Cands> groupedMmRule(const OpCall &c) {
  const Argument *bias = c.arg("bias", 3);
  if (bias && !bias->isNone())
    return c.error("a bias (DTensor's strategy raises: grouped_mm doesn't support bias yet)");
  if (c.inputs.size() < 2 || c.inputs.size() > 3)
    return c.error("expected self, mat2 and an optional offs, got {} tensor operands", c.inputs.size());
  using RP = RulePlacement;
  auto S = [](int64_t d) { return RP::of(Placement::shard(d)); };
  bool offs = c.inputs.size() == 3;
  auto rule = [&](RP out, RP self, RP mat2) {
    SingleDimRule r{out, self, mat2};
    if (offs)
      r.push_back(RP::R());
    return r;
  };
  std::vector<SingleDimRule> rules{rule(RP::R(), RP::R(), RP::R()), rule(RP::P(), RP::P(), RP::R()),
                                   rule(RP::P(), RP::R(), RP::P())};
  int64_t r1 = c.rank(0), r2 = c.rank(1);
  if (r1 == 2 && r2 == 3)
    rules.insert(rules.end(), {rule(S(1), RP::R(), S(2)), rule(RP::P(), S(1), S(1))});
  if (r1 == 3 && r2 == 2)
    rules.insert(rules.end(), {rule(RP::P(), S(2), S(0)), rule(S(0), S(1), RP::R())});
  if (r1 == 2 && r2 == 2)
    rules.insert(rules.end(), {rule(S(2), RP::R(), S(1)), rule(S(1), S(0), RP::R())});
  if (r1 == 3 && r2 == 3)
    rules.insert(rules.end(),
                 {rule(S(2), RP::R(), S(2)), rule(S(1), S(1), RP::R()), rule(RP::P(), S(2), S(1)), rule(S(0), S(0), S(0))});
  ExpandOptions opts;
  opts.numOutputs = 1;
  opts.insertReplicate = false; // the list starts with its own all-Replicate entry
  opts.fillPlaceholders = false;
  Cands cands = expandSingleDim(c, std::move(rules), opts);
  for (unsigned i = 0; i < 2; ++i) // DTensor's shape propagation runs the meta kernel on the globals
    if (!groupedMmTakesStrides(c.shape(i), stridesOf(c.inputs[i].meta), c.inputs[i].meta.dtype))
      return c.error("{} of sizes [{}] has strides [{}] the kernel rejects (DTensor raises: invalid strides)",
                     i == 0 ? "self" : "mat2", fmt::join(c.shape(i), ", "), fmt::join(stridesOf(c.inputs[i].meta), ", "));
  llvm::SmallVector<int64_t, 4> rank0(c.mesh->shape.size(), 0);
  auto validLocal = [&](unsigned i, const Placements &pl) {
    auto local = localShape(c.shape(i), pl, *c.mesh, rank0);
    return groupedMmTakesStrides(local, localStrides(local, stridesOf(c.inputs[i].meta)), c.inputs[i].meta.dtype);
  };
  Cands valid;
  for (Candidate &cand : cands)
    if (validLocal(0, cand.inputs[0]) && validLocal(1, cand.inputs[1]))
      valid.push_back(std::move(cand));
  if (valid.empty())
    return c.error("no sharding of self {} and mat2 {} leaves local operands the kernel takes (their strides are not "
                   "16-byte aligned)", str(c.inputs[0].placements), str(c.inputs[1].placements));
  return valid;
}

/// _scaled_mm(self, mat2, scale_a, scale_b, bias?, scale_result?, ...) (torch 2.13
/// scaled_mm_single_dim_strategy): mm's single-dim einsum rules, each extended by the scales'
/// placements derived from their operand's (_scaled_mm_scale_placement): a one-element scale R, a
/// 2-D (row- or column-wise) scale its operand's placement. 1-D blockwise (MX) scales have no CPU
/// kernel to check DTensor's mapping against: refused by name, as are a bias and scale_result
/// (DTensor raises). The strategy reads bias and scale_result positionally, which the dispatcher
/// leaves out of the arguments when every argument after scale_b is its default: DTensor then
/// raises too ("tuple index out of range").
llvm::Expected<Cands> scaledMmRule(const OpCall &c) {
  for (auto [name, pos] : {std::pair{"bias", 4u}, std::pair{"scale_result", 5u}})
    if (const Argument *a = c.arg(name, pos); a && !a->isNone())
      return c.error("a {} (DTensor's strategy raises: _scaled_mm on DTensors doesn't support it)", name);
  const Argument *outDtype = c.arg("out_dtype", 6), *fastAccum = c.arg("use_fast_accum", 7);
  if ((!outDtype || outDtype->isNone()) && (!fastAccum || (fastAccum->is<bool>() && !fastAccum->get<bool>())))
    return c.error("no out_dtype nor use_fast_accum (DTensor's strategy raises: it reads bias and scale_result, "
                   "which the call leaves out, by position)");
  if (c.inputs.size() != 4)
    return c.error("expected self, mat2, scale_a and scale_b, got {} tensor operands", c.inputs.size());
  for (unsigned i : {2u, 3u})
    if (c.rank(i) == 1 && numelOf(c.shape(i)) != 1)
      return c.error("a 1-D blockwise scale ({} of {} elements) is not modelled", i == 2 ? "scale_a" : "scale_b",
                     numelOf(c.shape(i)));
  using RP = RulePlacement;
  auto scalePlacement = [&](const RP &data, unsigned scale) { return numelOf(c.shape(scale)) == 1 ? RP::R() : data; };
  std::vector<SingleDimRule> rules = einsumRules(parseEinsum("mk", "kn", "mn"), std::nullopt);
  for (SingleDimRule &r : rules) {
    RP a = scalePlacement(r[1], 2), b = scalePlacement(r[2], 3); // copies: the appends may reallocate r
    r.append({a, b});
  }
  ExpandOptions opts;
  opts.numOutputs = 1;
  return expandSingleDim(c, std::move(rules), opts);
}

void registerMatrixRules(RuleTable &t) {
  t["aten::_scaled_mm.default"] = scaledMmRule;
  t["aten::_grouped_mm.default"] = groupedMmRule;
  t["aten::mm.default"] = mmRule;
  t["aten::addmm.default"] = addmmRule;
  t["aten::bmm.default"] = bmmRule;
  t["aten::baddbmm.default"] = baddbmmRule;
  t["aten::_foreach_mm.default"] = foreachMmRule;
  t["aten::dot.default"] = dotRule;
}

} // namespace commlens::rules
