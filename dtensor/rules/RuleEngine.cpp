#include "dtensor/rules/RuleEngine.h"

#include "dtensor/RedistributePlanner.h"
#include "ir/TensorMetaUtils.h"

#include <cmath>
#include <set>

namespace commlens::rules {

// ------------------------------------------------------------------ OpCall

const Argument *OpCall::arg(llvm::StringRef name, unsigned pos) const {
  llvm::ArrayRef<NamedArgument> ins = node->inputs();
  for (const NamedArgument &na : ins)
    if (na.name == name)
      return &na.value;
  if (pos < ins.size() && !ins[pos].keyword)
    return &ins[pos].value;
  return nullptr;
}

std::optional<int64_t> OpCall::intArg(llvm::StringRef name, unsigned pos) const {
  const Argument *a = arg(name, pos);
  if (!a || a->isNone())
    return std::nullopt;
  return a->asInt();
}

std::optional<IntList> OpCall::intListArg(llvm::StringRef name, unsigned pos) const {
  const Argument *a = arg(name, pos);
  if (!a || a->isNone())
    return std::nullopt;
  if (auto l = a->asIntList())
    return l;
  if (auto i = a->asInt())
    return IntList{*i};
  return std::nullopt;
}

llvm::SmallVector<int64_t, 4> OpCall::shape(unsigned i) const { return sizesOf(inputs[i].meta); }

llvm::SmallVector<int64_t, 4> OpCall::resultShape(unsigned i) const {
  if (i < results.size() && results[i]->meta())
    return sizesOf(*results[i]->meta());
  return {};
}

// ------------------------------------------------------------------ Candidate

double Candidate::totalCost() const {
  double s = 0;
  for (double c : costs)
    s += c;
  return s;
}

std::string Candidate::str() const {
  std::string s = "[";
  for (size_t i = 0; i < outputs.size(); ++i)
    s += (i ? ", " : "") + (outputs[i] ? commlens::str(*outputs[i]) : std::string("None"));
  s += " | ";
  for (size_t i = 0; i < inputs.size(); ++i)
    s += (i ? ", " : "") + commlens::str(inputs[i]);
  return s + "]";
}

// ------------------------------------------------------------------ cost model

namespace {
bool isShardLike(const Placement &p) { return p.kind == Placement::Kind::Shard || p.kind == Placement::Kind::StridedShard; }
} // namespace

double specRedistributeCost(const DeviceMesh &mesh, const TensorMeta &meta, llvm::ArrayRef<Placement> current,
                            llvm::ArrayRef<Placement> target) {
  // RedistributePlanner's model of DTensor's redistribute_cost (devices per host: 1 on a CPU mesh,
  // as torch.cpu.device_count(); 8 assumed for CUDA). Cases it cannot plan cost infinity.
  llvm::Expected<double> c = redistributeCost(mesh, meta, current, target);
  if (!c) {
    llvm::consumeError(c.takeError());
    return kInfCost;
  }
  return *c;
}

void assignCosts(const OpCall &call, Candidate &c) {
  c.costs.clear();
  for (size_t i = 0; i < call.inputs.size(); ++i)
    c.costs.push_back(specRedistributeCost(*call.mesh, call.inputs[i].meta, call.inputs[i].placements, c.inputs[i]));
}

Cands singleCandidate(const OpCall &call, Candidate c) {
  assignCosts(call, c);
  Cands cs;
  cs.push_back(std::move(c));
  return cs;
}

llvm::StringRef name(SelectReason r) {
  switch (r) {
  case SelectReason::Only: return "only candidate";
  case SelectReason::NegativeCost: return "negative cost";
  case SelectReason::NoRedistribute: return "no redistribution";
  case SelectReason::ZeroCost: return "zero cost";
  case SelectReason::MinCost: return "minimum cost";
  }
  return "?";
}

size_t selectMinCost(const OpCall &call, llvm::ArrayRef<Candidate> cands, SelectReason *reason) {
  auto setReason = [&](SelectReason r) {
    if (reason)
      *reason = r;
  };
  if (cands.size() == 1) {
    setReason(SelectReason::Only);
    return 0;
  }
  int negative = -1, noRedistribute = -1, zero = -1;
  llvm::SmallVector<double, 8> costs;
  for (size_t i = 0; i < cands.size(); ++i) {
    double c = cands[i].totalCost();
    costs.push_back(c);
    if (c < 0) {
      if (negative == -1 || c < costs[negative])
        negative = static_cast<int>(i);
    } else if (c == 0) {
      bool needs = false;
      for (size_t k = 0; k < call.inputs.size(); ++k)
        if (call.inputs[k].placements != cands[i].inputs[k]) {
          needs = true;
          break;
        }
      if (!needs)
        noRedistribute = static_cast<int>(i); // the last one wins, as in DTensor
      else if (zero == -1)
        zero = static_cast<int>(i);
    }
  }
  if (negative != -1) {
    setReason(SelectReason::NegativeCost);
    return negative;
  }
  if (noRedistribute != -1) {
    setReason(SelectReason::NoRedistribute);
    return noRedistribute;
  }
  if (zero != -1) {
    setReason(SelectReason::ZeroCost);
    return zero;
  }
  setReason(SelectReason::MinCost);
  size_t best = 0;
  for (size_t i = 1; i < costs.size(); ++i)
    if (costs[i] < costs[best])
      best = i;
  return best;
}

// ------------------------------------------------------------------ shardability

bool isShardable(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<Placement> placements, const DeviceMesh &mesh) {
  llvm::SmallVector<int64_t, 4> numShards(shape.size(), 1);
  for (size_t k = 0; k < placements.size(); ++k) {
    const Placement &p = placements[k];
    if (!isShardLike(p))
      continue;
    if (p.dim < 0 || p.dim >= static_cast<int64_t>(shape.size()))
      return false;
    numShards[p.dim] *= mesh.shape[k];
    int64_t lower = numShards[p.dim] * (p.kind == Placement::Kind::StridedShard ? p.splitFactor : 1);
    if (shape[p.dim] < lower)
      return false;
  }
  return true;
}

bool isEvenlyShardableOnDim(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<Placement> placements,
                            const DeviceMesh &mesh, int64_t dim) {
  int64_t n = 1;
  for (size_t k = 0; k < placements.size(); ++k)
    if (isShardLike(placements[k]) && placements[k].dim == dim)
      n *= mesh.shape[k];
  return shape[dim] % n == 0;
}

// ------------------------------------------------------------------ single-dim expansion

namespace {

/// (kind, reduce op) pairs of the Partial placements of one spec; mixed ones are skipped unless
/// they are exactly {sum, avg} of the same kind.
bool hasMixedPartial(llvm::ArrayRef<Placement> ps) {
  std::set<std::pair<int, int>> kinds;
  for (const Placement &p : ps)
    if (p.isPartial())
      kinds.insert({static_cast<int>(p.kind), static_cast<int>(p.reduceOp)});
  if (kinds.size() <= 1)
    return false;
  std::set<int> types, ops;
  for (auto &[t, o] : kinds) {
    types.insert(t);
    ops.insert(o);
  }
  std::set<int> sumAvg = {static_cast<int>(ReduceOp::Sum), static_cast<int>(ReduceOp::Avg)};
  return !(types.size() == 1 && ops == sumAvg);
}

} // namespace

llvm::SmallVector<Candidate, 8> expandSingleDim(const OpCall &call, std::vector<SingleDimRule> rules,
                                                const ExpandOptions &opts) {
  const DeviceMesh &mesh = *call.mesh;
  size_t nOut = opts.numOutputs, nIn = call.inputs.size();
  if (opts.insertReplicate) {
    bool hasAllReplicate = false;
    for (const SingleDimRule &r : rules)
      if (llvm::all_of(r, [](const RulePlacement &rp) {
            return rp.kind == RulePlacement::Kind::None ||
                   (rp.kind == RulePlacement::Kind::Concrete && rp.p.isReplicate());
          }))
        hasAllReplicate = true;
    if (!hasAllReplicate)
      rules.insert(rules.begin(), SingleDimRule(nOut + nIn, RulePlacement::R()));
  }
  // Placeholders are filled with the sharding kinds the inputs use (only plain Shard here:
  // _StridedShard inputs are refused before rules run); without a sharded input they vanish.
  bool anyShard = false;
  for (const OpInput &in : call.inputs)
    for (const Placement &p : in.placements)
      anyShard |= p.isShard();
  std::vector<llvm::SmallVector<std::optional<Placement>, 6>> perDim;
  for (const SingleDimRule &r : rules) {
    bool hasPh = llvm::any_of(r, [](const RulePlacement &rp) { return rp.kind == RulePlacement::Kind::Placeholder; });
    if (hasPh && opts.fillPlaceholders && !anyShard)
      continue;
    llvm::SmallVector<std::optional<Placement>, 6> row;
    for (const RulePlacement &rp : r) {
      switch (rp.kind) {
      case RulePlacement::Kind::None: row.push_back(std::nullopt); break;
      case RulePlacement::Kind::Concrete: row.push_back(rp.p); break;
      case RulePlacement::Kind::Placeholder: row.push_back(Placement::shard(rp.dim)); break;
      }
    }
    perDim.push_back(std::move(row));
  }

  llvm::SmallVector<Candidate, 8> out;
  size_t nd = mesh.ndim(), nr = perDim.size();
  if (nr == 0)
    return out;
  llvm::SmallVector<size_t, 2> idx(nd, 0);
  while (true) {
    // Build one combination: slot s, mesh dim k -> perDim[idx[k]][s].
    size_t nSlots = nOut + nIn;
    llvm::SmallVector<std::optional<Placements>, 6> slots(nSlots);
    for (size_t s = 0; s < nSlots; ++s) {
      if (!perDim[idx[0]][s])
        continue; // None (masked output) on mesh dim 0 decides the slot
      Placements ps;
      for (size_t k = 0; k < nd; ++k)
        ps.push_back(perDim[idx[k]][s].value_or(Placement::replicate()));
      slots[s] = std::move(ps);
    }
    bool ok = true;
    for (auto &s : slots)
      if (s && hasMixedPartial(*s))
        ok = false;
    if (ok) {
      Candidate c;
      for (size_t s = 0; s < nOut; ++s)
        c.outputs.push_back(slots[s]);
      for (size_t s = nOut; s < nSlots; ++s)
        c.inputs.push_back(slots[s].value_or(replicatePlacements(mesh)));
      if (opts.inplace && nIn > 0) {
        const Placements &self = call.inputs[0].placements;
        if (c.inputs[0] != self || (nOut > 0 && c.outputs[0] && *c.outputs[0] != self))
          ok = false;
      }
      for (size_t i = 0; ok && i < nIn; ++i) {
        llvm::SmallVector<int64_t, 4> shape = call.shape(i);
        if (!isShardable(shape, c.inputs[i], mesh) &&
            !(opts.allowUneven && call.inputs[i].placements == c.inputs[i]))
          ok = false;
      }
      if (ok) {
        assignCosts(call, c);
        out.push_back(std::move(c));
      }
    }
    // next combination: last mesh dim varies fastest (itertools.product)
    size_t k = nd;
    while (k > 0) {
      --k;
      if (++idx[k] < nr)
        break;
      idx[k] = 0;
      if (k == 0) {
        k = nd + 1;
        break;
      }
    }
    if (k == nd + 1 || nd == 0)
      break;
  }
  return out;
}

// ------------------------------------------------------------------ list ops

llvm::Expected<Cands> perElement(const OpCall &call, llvm::StringRef elementOp, StrategyFn elementRule) {
  // Where each tensor argument starts in call.inputs; an empty list is no operand (DTensor keeps it
  // out of the TupleStrategy).
  struct Slot {
    size_t first;
    bool list;
  };
  llvm::SmallVector<Slot, 6> slots;
  size_t next = 0, length = 0;
  for (const NamedArgument &na : call.node->inputs()) {
    size_t n = na.value.tensors().size();
    bool list = na.value.is<TensorList>();
    if (na.value.is<OptionalTensorList>())
      return call.error("an optional tensor list operand of a list op is not modelled");
    if (n == 0)
      continue;
    if (list) {
      if (length != 0 && n != length)
        return call.error("tensor lists of different lengths ({} and {})", length, n);
      length = n;
    }
    slots.push_back({next, list});
    next += n;
  }
  if (length == 0)
    return call.error("no non-empty tensor list operand (DTensor asserts one)");
  if (call.results.size() % length != 0)
    return call.error("{} results do not split into lists of {}", call.results.size(), length);
  size_t numLists = call.results.size() / length;

  Candidate out;
  out.inputs.resize(call.inputs.size());
  out.outputs.resize(call.results.size());
  for (size_t i = 0; i < length; ++i) {
    OpCall el;
    el.node = call.node;
    el.op = elementOp.str();
    el.mesh = call.mesh;
    for (const Slot &s : slots)
      el.inputs.push_back(call.inputs[s.list ? s.first + i : s.first]);
    for (size_t l = 0; l < numLists; ++l)
      el.results.push_back(call.results[l * length + i]);
    llvm::Expected<Cands> cands = elementRule(el);
    if (!cands)
      return cands.takeError();
    if (cands->empty())
      return call.error("no valid sharding strategy for list element {}", i);
    const Candidate &c = (*cands)[selectMinCost(el, *cands)];
    for (size_t k = 0; k < slots.size(); ++k)
      if (slots[k].list || i == 0)
        out.inputs[slots[k].list ? slots[k].first + i : slots[k].first] = c.inputs[k];
    for (size_t l = 0; l < numLists && l < c.outputs.size(); ++l)
      out.outputs[l * length + i] = c.outputs[l];
  }
  return singleCandidate(call, std::move(out));
}

// ------------------------------------------------------------------ helpers

int64_t normDim(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

Placements replicatePlacements(const DeviceMesh &mesh) { return Placements(mesh.ndim(), Placement::replicate()); }

Placements unshardDim(llvm::ArrayRef<Placement> ps, int64_t dim) {
  Placements out;
  for (const Placement &p : ps)
    out.push_back(isShardLike(p) && p.dim == dim ? Placement::replicate() : p);
  return out;
}

Placements shiftAfterRemove(llvm::ArrayRef<Placement> ps, int64_t removed) {
  Placements out;
  for (Placement p : ps) {
    if (isShardLike(p) && p.dim > removed)
      --p.dim;
    out.push_back(p);
  }
  return out;
}

bool isDimSharded(llvm::ArrayRef<Placement> ps, int64_t dim) {
  return llvm::any_of(ps, [&](const Placement &p) { return isShardLike(p) && p.dim == dim; });
}

Candidate followCandidate(const OpCall &call, Placements in, Placements out) {
  Candidate c;
  c.inputs.push_back(std::move(in));
  for (size_t i = 0; i < call.results.size(); ++i)
    c.outputs.push_back(out);
  assignCosts(call, c);
  return c;
}

bool isInplaceName(llvm::StringRef op) {
  // DTensor's OpSchema.is_inplace_op: the schema name ends with '_' ("aten::add_.Tensor"). The
  // dunder ops (__lshift__, __xor__, ...) count too, so their Partial inputs cannot be kept.
  llvm::StringRef base = op.split("::").second.split('.').first;
  return base.endswith("_");
}

} // namespace commlens::rules
