// View-like ops (torch 2.13 `_ops/_view_ops.py`, `t` from `_matrix_ops.py`). Each op maps output
// dims to input dims (a DimMap: InputDim, Flatten, Split, Broadcast, Singleton, NewDim, Repeat).
// The strategy has exactly one candidate, derived from the input's current placements:
//   * a sharded input dim that the output keeps 1:1 stays sharded (renumbered);
//   * Flatten: a Shard on the *first* flattened dim stays Shard on the output dim (strict views
//     error when a non-last flattened dim is unevenly sharded); a Shard on a later flattened dim
//     makes 2.13 produce _StridedShard in strict views (view/_unsafe_view) -- commlens refuses
//     that case with an error naming it -- and is replicated first in reshape;
//   * Split: a Shard stays on the first split piece when its size divides the mesh dim size;
//     otherwise strict views raise, reshape replicates first;
//   * dims that disappear (squeeze) or repeat: replicated (strict views raise instead).
// Partial and Replicate placements pass through unchanged.
#include "dtensor/rules/RuleEngine.h"
#include "ir/TensorMetaUtils.h"

#include <memory>
#include <numeric>
#include <set>

#include <fmt/ranges.h>

namespace commlens::rules {

namespace {

struct DimSpec;
using DimPtr = std::shared_ptr<const DimSpec>;

struct DimSpec {
  enum class K : uint8_t { Singleton, InputDim, Broadcast, NewDim, Repeat, Flatten, Split } k = K::Singleton;
  int64_t inputDim = -1;      // InputDim
  DimPtr inner;               // Broadcast / Repeat / Split
  std::vector<DimPtr> dims;   // Flatten
  int64_t size = 0;           // Broadcast dim size, NewDim size, Repeat times
  std::vector<int64_t> group; // Split
  int64_t splitId = 0;        // Split
};

DimPtr singleton() { return std::make_shared<DimSpec>(); }
DimPtr inputDim(int64_t i) {
  auto d = std::make_shared<DimSpec>();
  d->k = DimSpec::K::InputDim;
  d->inputDim = i;
  return d;
}
DimPtr broadcast(DimPtr in, int64_t size) {
  auto d = std::make_shared<DimSpec>();
  d->k = DimSpec::K::Broadcast;
  d->inner = std::move(in);
  d->size = size;
  return d;
}
DimPtr flattenNew(std::vector<DimPtr> dims) {
  if (dims.empty())
    return singleton();
  if (dims.size() == 1)
    return dims[0];
  auto d = std::make_shared<DimSpec>();
  d->k = DimSpec::K::Flatten;
  d->dims = std::move(dims);
  return d;
}
DimPtr splitNew(DimPtr in, const std::vector<int64_t> &group, int64_t idx) {
  if (group.size() == 1)
    return in;
  if (group[idx] == 1)
    return singleton();
  std::vector<int64_t> ng;
  int64_t newIdx = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] == 1)
      continue;
    if (static_cast<int64_t>(i) == idx)
      newIdx = static_cast<int64_t>(ng.size());
    ng.push_back(group[i]);
  }
  auto d = std::make_shared<DimSpec>();
  d->k = DimSpec::K::Split;
  d->inner = std::move(in);
  d->group = std::move(ng);
  d->splitId = newIdx;
  return d;
}

/// Repeat.new: a dim repeated once is itself, a repeated singleton a broadcast.
DimPtr repeatNew(DimPtr in, int64_t times) {
  if (times == 1)
    return in;
  if (in->k == DimSpec::K::Singleton)
    return broadcast(std::move(in), times);
  auto d = std::make_shared<DimSpec>();
  d->k = DimSpec::K::Repeat;
  d->inner = std::move(in);
  d->size = times;
  return d;
}

using DimMap = std::vector<DimPtr>;

llvm::Expected<DimMap> viewGroups(const OpCall &call, llvm::ArrayRef<int64_t> from, IntList to) {
  int64_t nelem = 1;
  for (int64_t s : from)
    nelem *= s;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer != -1)
        return call.error("can only infer one size");
      infer = static_cast<int64_t>(i);
    } else
      known *= to[i];
  }
  if (infer != -1) {
    if (known == 0 || nelem % known != 0)
      return call.error("size inferred for -1 is not integral");
    to[infer] = nelem / known;
  } else if (known != nelem)
    return call.error("sizes do not match {} vs {}", nelem, known);

  DimMap result;
  size_t fi = 0, ti = 0, fl = from.size(), tl = to.size();
  while (fi < fl || ti < tl) {
    std::vector<int64_t> fromGroup, toGroup;
    int64_t f, t;
    if (fi >= fl)
      f = 1;
    else {
      f = from[fi];
      fromGroup.push_back(static_cast<int64_t>(fi++));
    }
    if (ti >= tl)
      t = 1;
    else {
      t = to[ti];
      toGroup.push_back(to[ti++]);
    }
    if (f == 1 && t != 1) {
      --ti;
      toGroup.clear();
    } else if (f != 1 && t == 1) {
      --fi;
      fromGroup.clear();
    } else {
      while (f != t) {
        if (fi < fl && (ti >= tl || t % f == 0 || t > f)) {
          f *= from[fi];
          fromGroup.push_back(static_cast<int64_t>(fi++));
        } else if (ti < tl && (fi >= fl || f % t == 0 || f > t)) {
          t *= to[ti];
          toGroup.push_back(to[ti++]);
        } else
          break;
      }
    }
    if (!toGroup.empty()) {
      std::vector<DimPtr> ins;
      for (int64_t d : fromGroup)
        if (from[d] >= 1)
          ins.push_back(inputDim(d));
      DimPtr flat = flattenNew(ins);
      for (size_t i = 0; i < toGroup.size(); ++i)
        result.push_back(splitNew(flat, toGroup, static_cast<int64_t>(i)));
    }
  }
  return result;
}

llvm::Expected<DimMap> expandMap(const OpCall &call, llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> shape) {
  if (shape.size() < in.size())
    return call.error("expand to fewer dims than the input has");
  DimMap m;
  size_t pad = shape.size() - in.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    DimPtr p = i < pad ? singleton() : inputDim(static_cast<int64_t>(i - pad));
    int64_t desired = shape[i];
    int64_t actual = i < pad ? 1 : in[i - pad];
    if (i >= pad && !(actual == 1 || desired == -1 || desired == actual))
      return call.error("cannot expand size {} to {}", actual, desired);
    m.push_back(desired == 1 || desired == -1 || desired == actual ? p : broadcast(p, desired));
  }
  return m;
}

/// The view sharding propagator (analyze + rewrite_output_placements) for plain Shard inputs.
class ViewPropagator {
public:
  ViewPropagator(const OpCall &call, llvm::ArrayRef<Placement> src, llvm::ArrayRef<int64_t> shape, const DimMap &rule,
                 bool strict)
      : call_(call), src_(src), shape_(shape), rule_(rule), strict_(strict) {
    for (int64_t s : call.mesh->shape)
      meshSizes_.push_back(s);
  }

  llvm::Error run(Placements &inTgt, Placements &out) {
    std::set<int64_t> inRule;
    std::function<void(const DimPtr &)> walk = [&](const DimPtr &d) {
      if (d->k == DimSpec::K::InputDim)
        inRule.insert(d->inputDim);
      if (d->inner)
        walk(d->inner);
      for (const DimPtr &x : d->dims)
        walk(x);
    };
    for (const DimPtr &d : rule_)
      walk(d);
    for (int64_t d = 0; d < static_cast<int64_t>(shape_.size()); ++d)
      allowed_[d] = std::vector<bool>(meshSizes_.size(), inRule.count(d) != 0);

    std::map<int64_t, std::vector<int64_t>> inToOut;
    for (size_t od = 0; od < rule_.size(); ++od) {
      const DimPtr &cmd = rule_[od];
      auto inDims = analyzeDim(cmd);
      if (!inDims)
        return inDims.takeError();
      if (cmd->k == DimSpec::K::Flatten) {
        for (int64_t d : *inDims)
          inToOut[d] = {static_cast<int64_t>(od)};
      } else if (!inDims->empty()) {
        inToOut[(*inDims)[0]].push_back(static_cast<int64_t>(od));
      } else if (cmd->k == DimSpec::K::Split) {
        DimPtr root = cmd->inner;
        while (root->k == DimSpec::K::Flatten || root->k == DimSpec::K::Split)
          root = root->k == DimSpec::K::Flatten ? root->dims[0] : root->inner;
        if (root->k == DimSpec::K::InputDim && inToOut.count(root->inputDim))
          inToOut[root->inputDim].push_back(static_cast<int64_t>(od));
      }
    }

    inTgt.clear();
    for (size_t m = 0; m < src_.size(); ++m) {
      const Placement &p = src_[m];
      if (p.isShard() && !allowed_[p.dim][m]) {
        if (strict_ && !fallback_.count({p.dim, static_cast<int64_t>(m)}))
          return call_.error("This operation would remove or reshape sharded dimension {}, which requires "
                             "redistribution. Please redistribute the input first. (DTensor raises)",
                             p.dim);
        inTgt.push_back(Placement::replicate());
      } else
        inTgt.push_back(p);
    }

    out.clear();
    llvm::SmallVector<int64_t, 4> local(shape_.begin(), shape_.end());
    for (size_t m = 0; m < inTgt.size(); ++m) {
      const Placement &p = inTgt[m];
      if (!p.isShard()) {
        out.push_back(p);
        continue;
      }
      auto it = inToOut.find(p.dim);
      if (it == inToOut.end() || it->second.empty())
        return call_.error("no output dim for Shard({}) on mesh dim {} (DTensor asserts)", p.dim, m);
      int64_t tgt = -1;
      if (it->second.size() == 1)
        tgt = it->second[0];
      else
        for (int64_t d : it->second)
          if (rule_[d]->k == DimSpec::K::Split && rule_[d]->splitId == 0) {
            tgt = d;
            break;
          }
      if (tgt < 0)
        return call_.error("no Split(split_id=0) output dim for Shard({}) (DTensor asserts)", p.dim);
      const DimPtr &cmd = rule_[tgt];
      if (cmd->k == DimSpec::K::Split && cmd->inner->k == DimSpec::K::Flatten) {
        const DimPtr &first = cmd->inner->dims[0];
        if (first->k == DimSpec::K::InputDim && p.dim != first->inputDim)
          return call_.error("Shard({}) inside a flatten-then-split view (DTensor asserts)", p.dim);
      }
      if (cmd->k == DimSpec::K::Split || cmd->k == DimSpec::K::InputDim) {
        out.push_back(Placement::shard(tgt));
        local[p.dim] /= meshSizes_[m];
        continue;
      }
      if (cmd->k != DimSpec::K::Flatten)
        return call_.error("unexpected dim rule for Shard({}) (DTensor asserts)", p.dim);
      int64_t start = cmd->dims.front()->inputDim, end = cmd->dims.back()->inputDim + 1;
      if (p.dim != start) {
        int64_t sf = 1;
        for (int64_t d = start; d < p.dim; ++d)
          sf *= local[d];
        return call_.error("flattening tensor dim {} sharded on mesh dim {} behind leading dim(s) of the flatten "
                           "gives _StridedShard(dim={}, split_factor={}) in torch 2.13; strided-shard propagation "
                           "is not modelled",
                           p.dim, m, tgt, sf);
      }
      bool lastInRange = true;
      for (size_t k = m + 1; k < inTgt.size(); ++k)
        if (inTgt[k].isShard() && inTgt[k].dim >= start && inTgt[k].dim < end && inTgt[k].dim >= p.dim)
          lastInRange = false;
      if (local[p.dim] % meshSizes_[m] != 0 && !lastInRange)
        return call_.error("Cannot shard unevenly distributed tensor: dimension {} (size {}) is not evenly divisible "
                           "by mesh dimension {} (size {}). (DTensor raises)",
                           p.dim, local[p.dim], m, meshSizes_[m]);
      out.push_back(Placement::shard(tgt));
      local[p.dim] /= meshSizes_[m];
    }
    return llvm::Error::success();
  }

private:
  std::optional<unsigned> findPlainShard(int64_t dim) const {
    for (size_t m = 0; m < src_.size(); ++m)
      if (src_[m].isShard(dim))
        return static_cast<unsigned>(m);
    return std::nullopt;
  }

  llvm::Expected<std::vector<int64_t>> analyzeFlatten(const DimSpec &cmd) {
    std::vector<int64_t> sharded;
    size_t n = cmd.dims.size();
    for (size_t i = 0; i < n; ++i) {
      int64_t d = cmd.dims[i]->inputDim;
      auto m = findPlainShard(d);
      if (!m)
        continue;
      int64_t tsize = shape_[d], msize = meshSizes_[*m];
      bool can = true;
      if (strict_) {
        if (i != n - 1 && tsize % msize != 0)
          return call_.error("Cannot flatten unevenly sharded tensor: dimension {} (size {}) is not evenly divisible "
                             "by mesh dimension {} (size {}). (DTensor raises)",
                             d, tsize, *m, msize);
        sharded.push_back(d);
      } else {
        if (i == 0) {
          sharded.push_back(d);
          if (tsize % msize != 0)
            can = false;
        } else
          can = false;
      }
      allowed_[d] = std::vector<bool>(meshSizes_.size(), can);
    }
    if (!sharded.empty())
      return sharded;
    return std::vector<int64_t>{cmd.dims[0]->inputDim};
  }

  llvm::Expected<std::vector<int64_t>> analyzeSplit(const DimSpec &cmd) {
    auto ins = analyzeDim(cmd.inner);
    if (!ins)
      return ins.takeError();
    if (ins->empty())
      return std::vector<int64_t>{};
    int64_t in = (*ins)[0];
    if (cmd.inner->k == DimSpec::K::Flatten)
      for (size_t i = 1; i < cmd.inner->dims.size(); ++i) {
        int64_t fd = cmd.inner->dims[i]->inputDim;
        for (size_t m = 0; m < src_.size(); ++m)
          if (src_[m].isShard(fd)) {
            allowed_[fd][m] = false;
            fallback_.insert({fd, static_cast<int64_t>(m)});
          }
      }
    int64_t outSize = cmd.group[cmd.splitId];
    if (cmd.splitId == 0) {
      std::vector<bool> a;
      for (int64_t ms : meshSizes_)
        a.push_back(outSize % ms == 0);
      allowed_[in] = a;
      auto pm = findPlainShard(in);
      if (strict_ && pm && !allowed_[in][*pm])
        return call_.error("Cannot unflatten unevenly sharded tensor: output dimension {} (size {}) is not evenly "
                           "divisible by mesh dimension {} (size {}). (DTensor raises)",
                           cmd.splitId, outSize, *pm, meshSizes_[*pm]);
      return std::vector<int64_t>{in};
    }
    return std::vector<int64_t>{};
  }

  llvm::Expected<std::vector<int64_t>> analyzeDim(const DimPtr &cmd) {
    switch (cmd->k) {
    case DimSpec::K::InputDim: return std::vector<int64_t>{cmd->inputDim};
    case DimSpec::K::Flatten: return analyzeFlatten(*cmd);
    case DimSpec::K::Split: return analyzeSplit(*cmd);
    case DimSpec::K::Repeat: {
      auto ins = analyzeDim(cmd->inner);
      if (!ins)
        return ins.takeError();
      for (int64_t d : *ins)
        allowed_[d] = std::vector<bool>(meshSizes_.size(), false);
      return std::vector<int64_t>{};
    }
    default: return std::vector<int64_t>{};
    }
  }

  const OpCall &call_;
  llvm::ArrayRef<Placement> src_;
  llvm::ArrayRef<int64_t> shape_;
  const DimMap &rule_;
  bool strict_;
  std::vector<int64_t> meshSizes_;
  std::map<int64_t, std::vector<bool>> allowed_;
  std::set<std::pair<int64_t, int64_t>> fallback_;
};

/// DTensor runs the view on local shards with the local output shape of the global result: with
/// nested uneven sharding the element counts disagree on some rank and the local view raises
/// ("shape '[..]' is invalid for input of size N"). Reports that runtime failure.
llvm::Error checkLocalView(const OpCall &call, llvm::ArrayRef<int64_t> inShape, llvm::ArrayRef<Placement> in,
                           llvm::ArrayRef<Placement> out) {
  auto outShape = call.resultShape(0);
  if (outShape.empty() && !call.results.empty() && !call.results[0]->meta())
    return llvm::Error::success();
  const DeviceMesh &mesh = *call.mesh;
  return forEachMeshCoordinate(mesh, [&](llvm::ArrayRef<int64_t> coord) -> llvm::Error {
    int64_t a = numelOf(localShape(inShape, in, mesh, coord)), b = numelOf(localShape(outShape, out, mesh, coord));
    if (a != b)
      return call.error("the local view fails on the rank at mesh coordinate [{}]: local shape of {} elements is "
                        "invalid for input of size {} (nested uneven sharding; DTensor raises at runtime)",
                        fmt::join(coord, ", "), b, a);
    return llvm::Error::success();
  });
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> viewStrategy(const OpCall &call, const DimMap &rule, bool strict,
                                                             bool checkLocal = false) {
  Placements inTgt, out;
  auto shape = call.shape(0);
  ViewPropagator prop(call, call.inputs[0].placements, shape, rule, strict);
  if (llvm::Error e = prop.run(inTgt, out))
    return e;
  if (checkLocal)
    if (llvm::Error e = checkLocalView(call, shape, inTgt, out))
      return e;
  llvm::SmallVector<Candidate, 8> cands;
  cands.push_back(followCandidate(call, inTgt, out));
  return cands;
}

llvm::Error needOneInput(const OpCall &call) {
  if (call.inputs.size() != 1)
    return call.error("expected one tensor operand, got {}", call.inputs.size());
  return llvm::Error::success();
}

template <bool Strict> llvm::Expected<llvm::SmallVector<Candidate, 8>> viewRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  auto size = call.intListArg("size", 1);
  if (!size) {
    size = call.intListArg("shape", 1);
    if (!size)
      return call.error("missing size argument");
  }
  auto rule = viewGroups(call, call.shape(0), *size);
  if (!rule)
    return rule.takeError();
  return viewStrategy(call, *rule, Strict, /*checkLocal=*/true);
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> expandRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  auto size = call.intListArg("size", 1);
  if (!size)
    return call.error("missing size argument");
  auto rule = expandMap(call, call.shape(0), *size);
  if (!rule)
    return rule.takeError();
  return viewStrategy(call, *rule, false);
}

/// repeat (dim_repeat): leading new dims broadcast, each repeated input dim replicated.
llvm::Expected<llvm::SmallVector<Candidate, 8>> repeatRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  auto repeats = call.intListArg("repeats", 1);
  if (!repeats)
    return call.error("missing repeats argument");
  int64_t nd = call.rank(0);
  if (static_cast<int64_t>(repeats->size()) < nd)
    return call.error("{} repeats for a {}-D tensor", repeats->size(), nd);
  size_t pad = repeats->size() - static_cast<size_t>(nd);
  DimMap rule;
  for (size_t i = 0; i < repeats->size(); ++i)
    rule.push_back(repeatNew(i < pad ? singleton() : inputDim(static_cast<int64_t>(i - pad)), (*repeats)[i]));
  return viewStrategy(call, rule, false);
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> unsqueezeRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  auto dim = call.intArg("dim", 1);
  if (!dim)
    return call.error("missing dim argument");
  int64_t nd = call.rank(0), d = *dim < 0 ? *dim + nd + 1 : *dim;
  DimMap rule;
  for (int64_t i = 0; i < nd; ++i)
    rule.push_back(inputDim(i));
  rule.insert(rule.begin() + d, singleton());
  return viewStrategy(call, rule, false);
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> squeezeRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  auto shape = call.shape(0);
  int64_t nd = call.rank(0);
  std::set<int64_t> targets;
  if (call.op == "aten::squeeze.default") {
    for (int64_t i = 0; i < nd; ++i)
      targets.insert(i);
  } else {
    auto dims = call.intListArg("dim", 1);
    if (!dims)
      return call.error("missing dim argument");
    for (int64_t d : *dims)
      targets.insert(normDim(d, nd));
  }
  DimMap rule;
  for (int64_t i = 0; i < nd; ++i)
    if (shape[i] > 1 || !targets.count(i))
      rule.push_back(inputDim(i));
  return viewStrategy(call, rule, true);
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> permuteRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  auto dims = call.intListArg("dims", 1);
  if (!dims)
    return call.error("missing dims argument");
  DimMap rule;
  for (int64_t d : *dims)
    rule.push_back(inputDim(normDim(d, call.rank(0))));
  return viewStrategy(call, rule, false);
}

llvm::Expected<llvm::SmallVector<Candidate, 8>> transposeRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  auto d0 = call.intArg("dim0", 1), d1 = call.intArg("dim1", 2);
  if (!d0 || !d1)
    return call.error("missing dim0/dim1 arguments");
  int64_t nd = call.rank(0);
  DimMap rule;
  for (int64_t i = 0; i < nd; ++i)
    rule.push_back(inputDim(i));
  if (nd > 0) { // a 0-dim tensor transposes to itself (dims 0 / -1, as torch wraps them)
    int64_t a = normDim(*d0, nd), b = normDim(*d1, nd);
    if (a < 0 || a >= nd || b < 0 || b >= nd)
      return call.error("dims ({}, {}) out of range for a {}-D tensor", *d0, *d1, nd);
    std::swap(rule[a], rule[b]);
  }
  return viewStrategy(call, rule, false);
}

/// t(): one candidate following the input, Shard(0) <-> Shard(1) for a 2-D input.
llvm::Expected<llvm::SmallVector<Candidate, 8>> tRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  Placements out;
  for (Placement p : call.inputs[0].placements) {
    if (call.rank(0) == 2 && p.isShard())
      p.dim = 1 - p.dim;
    out.push_back(p);
  }
  llvm::SmallVector<Candidate, 8> cands;
  cands.push_back(followCandidate(call, call.inputs[0].placements, out));
  return cands;
}

/// view_as_real: every dim follows its input dim, the complex last dim splits into (size, 2)
/// (torch 2.13 `_view_ops.py` dim_view_as_real).
llvm::Expected<llvm::SmallVector<Candidate, 8>> viewAsRealRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  int64_t nd = call.rank(0);
  if (nd == 0)
    return call.error("expected a tensor of at least one dim");
  DimMap rule;
  for (int64_t i = 0; i + 1 < nd; ++i)
    rule.push_back(inputDim(i));
  std::vector<int64_t> group{call.shape(0)[nd - 1], 2};
  rule.push_back(splitNew(inputDim(nd - 1), group, 0));
  rule.push_back(splitNew(inputDim(nd - 1), group, 1));
  return viewStrategy(call, rule, false);
}

/// view_as_complex (torch 2.13 `_view_ops.py` view_as_complex_single_dim_strategy): Shard of
/// every dim but the (real, imag) pair follows, Partial sum and avg pass through (max and min do
/// not: complex numbers have no order).
llvm::Expected<llvm::SmallVector<Candidate, 8>> viewAsComplexRule(const OpCall &call) {
  if (llvm::Error e = needOneInput(call))
    return e;
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d + 1 < call.rank(0); ++d)
    rules.push_back({RulePlacement::ph(d), RulePlacement::ph(d)});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
    rules.push_back({RulePlacement::P(op), RulePlacement::P(op)});
  return expandSingleDim(call, std::move(rules), ExpandOptions());
}

} // namespace

void registerViewRules(RuleTable &t) {
  t["aten::view_as_real.default"] = viewAsRealRule;
  t["aten::view_as_complex.default"] = viewAsComplexRule;
  t["aten::view.default"] = viewRule<true>;
  t["aten::_unsafe_view.default"] = viewRule<true>;
  t["aten::reshape.default"] = viewRule<false>;
  t["aten::view_copy.default"] = viewRule<false>;
  t["aten::expand.default"] = expandRule;
  t["aten::expand_copy.default"] = expandRule; // the same Tensor.expand dim map in DTensor
  t["aten::repeat.default"] = repeatRule;
  t["aten::unsqueeze.default"] = unsqueezeRule;
  t["aten::squeeze.dim"] = squeezeRule;
  t["aten::squeeze_.dim"] = squeezeRule; // in place: self takes the reindexed placements (1-D matmul's)
  t["aten::squeeze.dims"] = squeezeRule;
  t["aten::squeeze.default"] = squeezeRule;
  t["aten::permute.default"] = permuteRule;
  t["aten::transpose.int"] = transposeRule;
  t["aten::t.default"] = tRule;
}

} // namespace commlens::rules
