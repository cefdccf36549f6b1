#include "passes/Autodiff.h"

#include "ir/Error.h"
#include "ir/GraphBuilder.h"
#include "passes/ActivationCheckpoint.h"
#include "passes/DecomposeToRuntimeOps.h"

#include "llvm/ADT/DenseSet.h"

#include <map>
#include <numeric>
#include <queue>

namespace commlens {

bool fnmatchWhole(llvm::StringRef p, llvm::StringRef t) {
  if (p.empty())
    return t.empty();
  if (p.front() == '*') {
    for (size_t i = 0; i <= t.size(); ++i)
      if (fnmatchWhole(p.drop_front(), t.drop_front(i)))
        return true;
    return false;
  }
  if (t.empty())
    return false;
  if (p.front() == '[') {
    size_t close = p.find(']', 1);
    if (close != llvm::StringRef::npos) {
      llvm::StringRef set = p.slice(1, close);
      bool negate = !set.empty() && (set.front() == '!' || set.front() == '^');
      if (negate)
        set = set.drop_front();
      bool hit = false;
      for (size_t i = 0; i < set.size(); ++i) {
        if (i + 2 < set.size() && set[i + 1] == '-') {
          hit |= t.front() >= set[i] && t.front() <= set[i + 2];
          i += 2;
        } else {
          hit |= t.front() == set[i];
        }
      }
      return hit != negate && fnmatchWhole(p.drop_front(close + 1), t.drop_front());
    }
  }
  if (p.front() != '?' && p.front() != t.front())
    return false;
  return fnmatchWhole(p.drop_front(), t.drop_front());
}

namespace {

bool isFloating(ScalarType t) {
  switch (t) {
  case ScalarType::Half: case ScalarType::Float: case ScalarType::Double: case ScalarType::BFloat16:
  case ScalarType::ComplexHalf: case ScalarType::ComplexFloat: case ScalarType::ComplexDouble:
  case ScalarType::Float8_e4m3fn: case ScalarType::Float8_e5m2: case ScalarType::Float8_e4m3fnuz:
  case ScalarType::Float8_e5m2fnuz:
    return true;
  default:
    return false;
  }
}

llvm::SmallVector<int64_t, 4> sizesOf(const TensorMeta &m) {
  llvm::SmallVector<int64_t, 4> out;
  for (const SymInt &s : m.sizes)
    out.push_back(s.hint);
  return out;
}

llvm::SmallVector<int64_t, 4> stridesOf(const TensorMeta &m) {
  llvm::SmallVector<int64_t, 4> out;
  for (const SymInt &s : m.strides)
    out.push_back(s.hint);
  if (out.size() != m.sizes.size()) { // unknown: contiguous
    out.clear();
    for (const SymInt &s : contiguousStrides(sizesOf(m)))
      out.push_back(s.hint);
  }
  return out;
}

TensorMeta metaOf(ScalarType dtype, llvm::ArrayRef<int64_t> sizes, const Device &device,
                  std::optional<llvm::ArrayRef<int64_t>> strides = std::nullopt) {
  TensorMeta m;
  m.dtype = dtype;
  m.device = device;
  for (int64_t s : sizes)
    m.sizes.push_back(SymInt::concrete(s));
  if (strides)
    for (int64_t s : *strides)
      m.strides.push_back(SymInt::concrete(s));
  else
    m.strides = contiguousStrides(sizes);
  m.storageOffset = SymInt::concrete(0);
  return m;
}

StringList placementsList(const Placements &p) {
  StringList out;
  for (const Placement &x : p)
    out.push_back(x.str());
  return out;
}

/// The tensor operands of a node (Node::operands() restricted to tensors).
llvm::SmallVector<Value *, 4> tensorOperands(const Node &n) {
  llvm::SmallVector<Value *, 4> out;
  for (Value *v : n.operands())
    if (v->kind() == ValueKind::Tensor)
      out.push_back(v);
  return out;
}

// ------------------------------------------------------------------------------------------------
// loss
// ------------------------------------------------------------------------------------------------

class LossBuilder {
public:
  explicit LossBuilder(PassContext &ctx) : ctx_(ctx), g_(ctx.program.graph()) {}

  llvm::Error run() {
    std::vector<Value *> outs;
    for (const OutputSpec &o : g_.outputs())
      if (o.kind == OutputKind::UserOutput)
        for (Value *v : o.value.tensors())
          if (v && v->meta())
            outs.push_back(v);
    if (outs.empty())
      return makeError("the model output contains no tensor to compute a loss from");
    const LossSpec &loss = ctx_.plan->loss;
    if (loss.kind == LossSpec::Kind::Sum) {
      Value *total = nullptr;
      for (Value *t : outs) {
        Value *s = emit("aten::sum.default", {{"self", t, false}}, scalar(*t->meta()), "loss_sum");
        total = total ? emit("aten::add.Tensor", {{"self", total, false}, {"other", s, false}}, scalar(*t->meta()),
                             "loss_add")
                      : s;
      }
      ctx_.state.loss = total;
      return llvm::Error::success();
    }
    Value *logits = outs.front();
    const TensorMeta &lm = *logits->meta();
    if (lm.rank() < 2)
      return makeError("cross_entropy loss needs logits of rank >= 2, got {}", lm.str());
    auto sizes = sizesOf(lm);
    int64_t classes = sizes.back(), rows = 1;
    for (size_t i = 0; i + 1 < sizes.size(); ++i)
      rows *= sizes[i];
    Value *flat = logits;
    if (lm.rank() > 2)
      flat = emit("aten::view.default", {{"self", logits, false}, {"size", IntList{rows, classes}, false}},
                  metaOf(lm.dtype, {rows, classes}, lm.device), "loss_logits");
    // Targets: a plain int64 tensor of the logits' leading shape (random or a user input).
    Value *targets = nullptr;
    if (llvm::StringRef(loss.targets).startswith("input:")) {
      unsigned k = 0;
      llvm::StringRef(loss.targets).drop_front(6).getAsInteger(10, k);
      unsigned idx = 0;
      for (const InputSpec &in : g_.inputs())
        if (in.kind == InputKind::UserInput) {
          if (idx++ == k)
            targets = in.value;
        }
      if (!targets)
        return makeError("cross_entropy targets '{}': no such user input", loss.targets);
    } else {
      targets = g_.createUniqueValue("loss_targets", ValueKind::Tensor);
      targets->setMeta(metaOf(ScalarType::Long, llvm::ArrayRef<int64_t>(sizes).drop_back(), lm.device));
    }
    // from_local(targets, Replicate) when the logits are a DTensor (decided at propagation).
    Value *tdt = emit("commlens::loss_targets", {{"self", targets, false}, {"logits", logits, false},
                                                 {"loss_parallel", ctx_.plan->lossParallel, false}},
                      *targets->meta(), "loss_targets_dt");
    Value *tflat = tdt;
    if (targets->meta()->rank() != 1)
      tflat = emit("aten::view.default", {{"self", tdt, false}, {"size", IntList{rows}, false}},
                   metaOf(ScalarType::Long, {rows}, lm.device), "loss_targets_flat");
    Value *logp = emit("aten::_log_softmax.default",
                       {{"self", flat, false}, {"dim", int64_t(1), false}, {"half_to_float", false, false}},
                       metaOf(lm.dtype, {rows, classes}, lm.device), "loss_log_softmax");
    int64_t reduction = loss.reduction == "none" ? 0 : loss.reduction == "sum" ? 2 : 1;
    Value *out = g_.createUniqueValue("loss", ValueKind::Tensor);
    out->setMeta(reduction == 0 ? metaOf(lm.dtype, {rows}, lm.device) : scalar(lm));
    Value *totalWeight = g_.createUniqueValue("loss_total_weight", ValueKind::Tensor);
    totalWeight->setMeta(scalar(lm));
    Node *n = g_.appendNode("loss", "aten::nll_loss_forward.default",
                            {{"self", logp, false}, {"target", tflat, false}, {"weight", NoneArg{}, false},
                             {"reduction", reduction, false}, {"ignore_index", loss.ignoreIndex, false}},
                            {Argument(out), Argument(totalWeight)});
    n->setScope(nullptr, {});
    if (reduction == 0)
      out = emit("aten::sum.default", {{"self", out, false}}, scalar(lm), "loss_sum");
    ctx_.state.loss = out;
    return llvm::Error::success();
  }

private:
  static TensorMeta scalar(const TensorMeta &like) { return metaOf(like.dtype, {}, like.device); }

  Value *emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args, TensorMeta meta, llvm::StringRef hint) {
    Value *v = g_.createUniqueValue(hint, ValueKind::Tensor);
    v->setMeta(std::move(meta));
    Node *n = g_.appendNode(v->name(), op, std::move(args), {Argument(v)});
    n->setScope(nullptr, {}); // outside every module: Global
    return v;
  }

  PassContext &ctx_;
  Graph &g_;
};

// ------------------------------------------------------------------------------------------------
// autograd graph
// ------------------------------------------------------------------------------------------------

struct AGNode;
struct Edge {
  AGNode *node = nullptr;
  unsigned slot = 0;
  explicit operator bool() const { return node != nullptr; }
};

struct AGNode {
  enum class Kind : uint8_t { Op, Boundary, HookIn, HookOut, Accumulate, FsdpPostBackward };
  Kind kind = Kind::Op;
  uint64_t seq = 0;
  const Node *fwd = nullptr;           // Op, Boundary
  BoundaryStep step;                   // Boundary
  const ModuleScope *module = nullptr; // hooks
  llvm::SmallVector<const Value *, 2> slots; // the forward value each input slot is the grad of
  llvm::SmallVector<Edge, 4> next;     // Op: per tensor operand; others: per slot
  const Value *leaf = nullptr;         // Accumulate
  unsigned fsdpUnit = 0;               // FsdpPostBackward
  /// FSDP units whose pre-backward hook is a tensor hook on one of this node's inputs: it runs
  /// just before the node does.
  llvm::SmallVector<unsigned, 1> fsdpPreBackward;
  // engine state
  unsigned deps = 0;
  llvm::SmallVector<Value *, 2> buffer;
  bool queued = false;
};

/// One module call: its node range in the forward graph, pre/post hook boundary nodes excluded
/// from the body.
struct Call {
  const ModuleScope *scope = nullptr;
  llvm::SmallVector<unsigned, 4> key;
  unsigned first = 0, last = 0, bodyStart = 0;
  llvm::DenseSet<const Node *> nodes;
  std::vector<const Value *> inputs, outputs;
};

/// One call of a checkpointed module: its autograd nodes, and whether backward recomputed it.
struct Region {
  const Call *call;
  const ActivationCheckpointUnit *unit;
  std::vector<AGNode *> ops;
  bool recomputed;
};

bool isPreHookOp(const Node &n) {
  return n.op().ns == "commlens" && (n.op().name == "annotate" || n.op().name == "sequence_parallel_input" ||
                                     n.op().name == "fsdp_pre_forward");
}

class AutodiffBuilder {
public:
  explicit AutodiffBuilder(PassContext &ctx)
      : ctx_(ctx), state_(ctx.state), fwd_(ctx.program.graph()),
        bw_(std::make_shared<Graph>(ctx.program.graph().sharedScopes())) {}

  llvm::Error run() {
    markLeaves();
    collectCalls();
    collectCheckpointRegions();
    if (llvm::Error err = record())
      return err;
    if (llvm::Error err = execute())
      return err;
    state_.backward = bw_;
    return llvm::Error::success();
  }

private:
  // ---- forward recording ----------------------------------------------------------------------

  void markLeaves() {
    for (const InputSpec &in : fwd_.inputs()) {
      if (!in.value || !in.value->meta() || !isFloating(in.value->meta()->dtype))
        continue;
      if (in.kind == InputKind::Parameter) {
        bool frozen = false;
        for (const std::string &p : ctx_.plan->frozen)
          frozen |= fnmatchWhole(p, in.target) || (!in.aliasOf.empty() && fnmatchWhole(p, in.aliasOf));
        frozen &= !state_.retrainedByStyle.count(in.value);
        for (const std::string &p : ctx_.plan->frozenAfterParallelize)
          frozen |= fnmatchWhole(p, in.target) || (!in.aliasOf.empty() && fnmatchWhole(p, in.aliasOf));
        if (!frozen)
          leaves_.insert(in.value);
      } else if (in.kind == InputKind::UserInput) {
        for (const InputSetting &s : ctx_.plan->inputs)
          if (s.requiresGrad) {
            std::optional<Argument> input = fwd_.userInput(s.key);
            if (input && input->isTensor() && input->tensor() == in.value)
              leaves_.insert(in.value);
          }
      }
    }
    for (const InputSpec &in : fwd_.inputs())
      if (in.value && (in.kind == InputKind::Parameter || in.kind == InputKind::Buffer ||
                       in.kind == InputKind::TensorConstant))
        state_values_.insert(in.value);
  }

  void collectCalls() {
    std::map<std::pair<const ModuleScope *, llvm::SmallVector<unsigned, 4>>, size_t> index;
    for (const auto &n : fwd_.nodes()) {
      for (const ModuleScope *s = n->scope(); s; s = s->parent()) {
        unsigned depth = s->depth();
        llvm::SmallVector<unsigned, 4> key(n->callPath().begin(),
                                           n->callPath().begin() + std::min<size_t>(depth, n->callPath().size()));
        auto [it, fresh] = index.try_emplace({s, key}, calls_.size());
        if (fresh) {
          Call c;
          c.scope = s;
          c.key = key;
          c.first = n->index();
          calls_.push_back(std::move(c));
        }
        Call &c = calls_[it->second];
        c.last = n->index();
        c.nodes.insert(n.get());
      }
    }
    llvm::DenseMap<const Value *, llvm::SmallVector<const Node *, 2>> users;
    for (const auto &n : fwd_.nodes())
      for (Value *v : n->operands())
        users[v].push_back(n.get());
    llvm::DenseSet<const Value *> graphOutputs;
    for (const OutputSpec &o : fwd_.outputs())
      for (Value *v : o.value.tensors())
        graphOutputs.insert(v);
    for (Call &c : calls_) {
      c.bodyStart = c.first;
      while (c.bodyStart < c.last) {
        const Node &n = *fwd_.nodes()[c.bodyStart];
        if (c.nodes.count(&n) && !(n.scope() == c.scope && isPreHookOp(n)))
          break;
        ++c.bodyStart;
      }
      llvm::DenseSet<const Value *> seen;
      for (unsigned i = c.first; i <= c.last; ++i) {
        const Node &n = *fwd_.nodes()[i];
        if (!c.nodes.count(&n))
          continue;
        bool pre = i < c.bodyStart;
        if (!pre)
          for (Value *v : n.operands()) {
            if (v->kind() != ValueKind::Tensor || seen.count(v) || state_values_.count(v))
              continue;
            const Node *p = v->producer();
            if (p && c.nodes.count(p) && p->index() >= c.bodyStart)
              continue;
            seen.insert(v);
            c.inputs.push_back(v);
          }
        for (Value *v : n.results()) {
          if (v->kind() != ValueKind::Tensor)
            continue;
          bool escapes = graphOutputs.count(v);
          for (const Node *u : users.lookup(v))
            escapes |= !c.nodes.count(u);
          if (escapes)
            c.outputs.push_back(v);
        }
      }
    }
  }

  /// The calls of checkpointed modules (passes/ActivationCheckpoint.h).
  void collectCheckpointRegions() {
    for (const Call &c : calls_) {
      auto unit = state_.checkpointed.find(c.scope);
      if (unit == state_.checkpointed.end())
        continue;
      for (const Node *n : c.nodes)
        regionOf_[n] = static_cast<unsigned>(regions_.size());
      regions_.push_back(Region{&c, unit->second, {}, false});
    }
    if (regions_.empty())
      return;
    for (const InputSpec &in : fwd_.inputs())
      if (in.value)
        forwardValues_.insert(in.value);
    for (const auto &n : fwd_.nodes())
      for (Value *v : n->results())
        forwardValues_.insert(v);
  }

  Edge edgeOf(const Value *v) {
    auto it = edges_.find(v);
    if (it != edges_.end())
      return it->second;
    if (!leaves_.count(v))
      return {};
    auto acc = accumulators_.find(v);
    if (acc != accumulators_.end())
      return {acc->second, 0};
    AGNode *n = newNode(AGNode::Kind::Accumulate, UINT64_MAX);
    n->leaf = v;
    n->slots.push_back(v);
    accumulators_[v] = n;
    return {n, 0};
  }

  AGNode *newNode(AGNode::Kind kind, uint64_t seq) {
    nodes_.push_back(std::make_unique<AGNode>());
    AGNode *n = nodes_.back().get();
    n->kind = kind;
    n->seq = seq;
    return n;
  }

  static bool differentiable(const Node &n) {
    static const llvm::StringSet<> kNonDiff = {
        "aten::arange.default", "aten::arange.start", "aten::ones.default", "aten::zeros.default",
        "aten::full.default", "aten::empty.memory_format", "aten::randint.default", "aten::eq.Scalar",
        "aten::eq.Tensor", "aten::ne.Scalar", "aten::lt.Scalar", "aten::gt.Scalar", "aten::le.Scalar",
        "aten::ge.Scalar", "aten::logical_not.default", "aten::argmax.default", "aten::sym_size.int"};
    return !kNonDiff.count(n.opString());
  }

  llvm::Error record() {
    // Calls opening (body start) and closing (last node) at each node index.
    std::multimap<unsigned, Call *> opening, closing;
    for (Call &c : calls_) {
      opening.emplace(c.bodyStart, &c);
      closing.emplace(c.last, &c);
    }
    struct Saved {
      Call *call;
      std::vector<std::pair<const Value *, std::optional<Edge>>> inputs;
    };
    std::vector<Saved> open;
    for (const auto &np : fwd_.nodes()) {
      const Node &n = *np;
      auto [ob, oe] = opening.equal_range(n.index());
      std::vector<Call *> starting;
      for (auto it = ob; it != oe; ++it)
        starting.push_back(it->second);
      std::sort(starting.begin(), starting.end(),
                [](const Call *a, const Call *b) { return a->scope->depth() < b->scope->depth(); });
      for (Call *c : starting) {
        Saved saved{c, {}};
        // BackwardHookFunction on the call's tensor inputs (after its forward pre-hooks).
        std::vector<const Value *> rg;
        for (const Value *v : c->inputs)
          if (edgeOf(v))
            rg.push_back(v);
        if (!rg.empty()) {
          AGNode *h = newNode(AGNode::Kind::HookIn, ++seq_);
          h->module = c->scope;
          for (const Value *v : rg) {
            h->slots.push_back(v);
            h->next.push_back(edgeOf(v));
            auto it = edges_.find(v);
            saved.inputs.emplace_back(v, it == edges_.end() ? std::nullopt : std::optional<Edge>(it->second));
            edges_[v] = Edge{h, static_cast<unsigned>(h->slots.size() - 1)};
          }
        }
        open.push_back(std::move(saved));
      }

      if (n.op().ns == "commlens") {
        if (llvm::Error err = recordBoundary(n))
          return err;
      } else {
        recordOp(n);
      }

      auto [cb, ce] = closing.equal_range(n.index());
      std::vector<Call *> ending;
      for (auto it = cb; it != ce; ++it)
        ending.push_back(it->second);
      std::sort(ending.begin(), ending.end(),
                [](const Call *a, const Call *b) { return a->scope->depth() > b->scope->depth(); });
      for (Call *c : ending) {
        // Restore the edges the call's input hook had replaced.
        for (auto it = open.rbegin(); it != open.rend(); ++it)
          if (it->call == c) {
            for (auto &[v, old] : it->inputs) {
              if (old)
                edges_[v] = *old;
              else
                edges_.erase(v);
            }
            open.erase(std::next(it).base());
            break;
          }
        // BackwardHookFunction on the call's outputs (after its forward hooks): its backward is
        // where CommDebugMode's full-backward pre-hook names the module.
        std::vector<const Value *> rg;
        for (const Value *v : c->outputs)
          if (edgeOf(v))
            rg.push_back(v);
        if (rg.empty())
          continue;
        AGNode *h = newNode(AGNode::Kind::HookOut, ++seq_);
        h->module = c->scope;
        for (const Value *v : rg) {
          h->slots.push_back(v);
          h->next.push_back(edgeOf(v));
          edges_[v] = Edge{h, static_cast<unsigned>(h->slots.size() - 1)};
        }
      }
    }
    return llvm::Error::success();
  }

  /// fully_shard's forward hooks. Pre-forward wraps the grad-requiring inputs in one
  /// RegisterPostBackwardFunction (its backward is the unit's post-backward); post-forward hooks
  /// each grad-requiring output (`register_hook`: it runs before the output's grad_fn).
  void recordFsdpHook(const Node &n) {
    unsigned unit = static_cast<unsigned>(*n.input("unit")->asInt());
    auto in = n.input("inputs")->tensors();
    auto out = n.results();
    if (n.op().name == "fsdp_post_forward") {
      for (size_t i = 0; i < in.size() && i < out.size(); ++i)
        if (Edge e = edgeOf(in[i])) {
          if (!llvm::is_contained(e.node->fsdpPreBackward, unit))
            e.node->fsdpPreBackward.push_back(unit);
          edges_[out[i]] = e;
        }
      return;
    }
    AGNode *f = nullptr;
    for (size_t i = 0; i < in.size() && i < out.size(); ++i) {
      Edge e = edgeOf(in[i]);
      if (!e)
        continue;
      if (!f) {
        f = newNode(AGNode::Kind::FsdpPostBackward, ++seq_);
        f->fsdpUnit = unit;
      }
      f->slots.push_back(out[i]);
      f->next.push_back(e);
      edges_[out[i]] = Edge{f, static_cast<unsigned>(f->slots.size() - 1)};
    }
  }

  llvm::Error recordBoundary(const Node &n) {
    if (n.op().name == "loss_targets" || !n.gradEnabled())
      return llvm::Error::success(); // integer targets / under no_grad: no autograd Function, no grad
    if (n.op().name == "fsdp_pre_forward" || n.op().name == "fsdp_post_forward") {
      recordFsdpHook(n);
      return llvm::Error::success();
    }
    const Value *x = n.input("self")->tensor();
    const Value *out = n.results()[0];
    Edge e = edgeOf(x);
    auto it = state_.boundarySteps.find(&n);
    if (e && it != state_.boundarySteps.end())
      for (const BoundaryStep &s : it->second) {
        AGNode *b = newNode(AGNode::Kind::Boundary, ++seq_);
        b->fwd = &n;
        b->step = s;
        b->slots.push_back(out);
        b->next.push_back(e);
        e = Edge{b, 0};
      }
    if (e)
      edges_[out] = e;
    return llvm::Error::success();
  }

  void recordOp(const Node &n) {
    auto operands = tensorOperands(n);
    bool any = false;
    for (Value *v : operands)
      any |= static_cast<bool>(edgeOf(v));
    if (!any || !differentiable(n) || !n.gradEnabled())
      return;
    AGNode *a = newNode(AGNode::Kind::Op, ++seq_);
    a->fwd = &n;
    if (auto r = regionOf_.find(&n); r != regionOf_.end())
      regions_[r->second].ops.push_back(a);
    for (Value *v : operands)
      a->next.push_back(edgeOf(v));
    for (Value *r : n.results()) {
      if (r->kind() != ValueKind::Tensor)
        continue;
      a->slots.push_back(r);
      if (r->meta() && isFloating(r->meta()->dtype))
        edges_[r] = Edge{a, static_cast<unsigned>(a->slots.size() - 1)};
    }
  }

  // ---- engine -----------------------------------------------------------------------------------

  struct Later {
    bool operator()(const AGNode *a, const AGNode *b) const { return a->seq < b->seq; }
  };

  llvm::Error execute() {
    const Value *loss = state_.loss;
    if (!loss)
      return makeError("autodiff needs a loss (the loss pass)");
    Edge root = edgeOf(loss);
    if (!root)
      return llvm::Error::success(); // nothing requires grad: backward() would raise; no ops
    // Dependencies: every edge of every node reachable from the root.
    std::vector<AGNode *> stack{root.node};
    llvm::DenseSet<AGNode *> seen{root.node};
    while (!stack.empty()) {
      AGNode *n = stack.back();
      stack.pop_back();
      n->buffer.assign(n->slots.size(), nullptr);
      for (const Edge &e : n->next) {
        if (!e)
          continue;
        ++e.node->deps;
        if (seen.insert(e.node).second)
          stack.push_back(e.node);
      }
    }
    // loss.backward(): a ones_like gradient (Partial normalised to Replicate).
    Value *seed = bw_->createUniqueValue("grad_loss", ValueKind::Tensor);
    seed->setMeta(metaOf(loss->meta()->dtype, sizesOf(*loss->meta()), loss->meta()->device));
    if (const DTensorLayout *l = state_.layout(loss)) {
      Placements p;
      for (const Placement &x : l->placements)
        p.push_back(x.isPartial() ? Placement::replicate() : x);
      state_.dtensors[seed] = DTensorLayout{p, "ones_like(loss)"};
    }
    root.node->buffer[root.slot] = seed;
    std::priority_queue<AGNode *, std::vector<AGNode *>, Later> ready;
    ready.push(root.node);
    root.node->queued = true;
    while (!ready.empty()) {
      AGNode *n = ready.top();
      ready.pop();
      for (unsigned unit : n->fsdpPreBackward)
        fsdpPreBackward(unit);
      if (n->kind == AGNode::Kind::Op)
        if (auto r = regionOf_.find(n->fwd); r != regionOf_.end() && !regions_[r->second].recomputed &&
                                             savesTensors(*n))
          recompute(regions_[r->second]);
      auto grads = apply(*n);
      if (!grads)
        return grads.takeError();
      // validate_outputs: every broadcast gradient is reduced before any is routed.
      if (n->kind == AGNode::Kind::Op)
        for (size_t i = 0; i < n->next.size() && i < grads->size(); ++i)
          if (n->next[i] && (*grads)[i])
            (*grads)[i] = sumTo((*grads)[i], *n->next[i].node->slots[n->next[i].slot]->meta(), *n->fwd);
      for (size_t i = 0; i < n->next.size(); ++i) {
        const Edge &e = n->next[i];
        if (!e)
          continue;
        Value *g = i < grads->size() ? (*grads)[i] : nullptr;
        if (g) {
          Value *&slot = e.node->buffer[e.slot];
          slot = slot ? emit("aten::add.Tensor", {{"self", slot, false}, {"other", g, false}}, *slot->meta(),
                             "grad_acc")
                      : g;
        }
        if (--e.node->deps == 0 && !e.node->queued) {
          e.node->queued = true;
          ready.push(e.node);
        }
      }
    }
    // FSDP's final callback (queued by the first pre-backward): the post-backward of every unit
    // whose inputs needed no gradient, in the root's named_modules order (forward order here).
    if (fsdpCallbackQueued_) {
      std::vector<unsigned> units(state_.fsdp.units.size());
      std::iota(units.begin(), units.end(), 0u);
      llvm::stable_sort(units, [&](unsigned a, unsigned b) {
        return state_.fsdp.units[a].scope->forwardIndex() < state_.fsdp.units[b].scope->forwardIndex();
      });
      for (unsigned unit : units)
        fsdpPostBackward(unit);
    }
    return llvm::Error::success();
  }

  // ---- activation checkpointing ------------------------------------------------------------------

  /// Whether the node's autograd Function saved a tensor: its backward formula reads a forward
  /// value (emitted into a scratch graph to find out).
  bool savesTensors(AGNode &a) {
    auto scratch = std::make_shared<Graph>(fwd_.sharedScopes());
    std::swap(bw_, scratch);
    llvm::SmallVector<Value *, 2> buffer = a.buffer;
    a.buffer.resize(a.slots.size(), nullptr);
    for (size_t i = 0; i < a.slots.size(); ++i)
      if (!a.buffer[i] && a.slots[i]->meta()) {
        a.buffer[i] = bw_->createUniqueValue("grad", ValueKind::Tensor);
        a.buffer[i]->setMeta(like(a.slots[i]));
      }
    auto grads = opBackward(a, llvm::SmallVector<Value *, 4>(a.next.size(), nullptr));
    if (!grads)
      llvm::consumeError(grads.takeError()); // the real application reports it
    a.buffer = std::move(buffer);
    std::swap(bw_, scratch);
    for (const auto &n : scratch->nodes())
      for (Value *v : n->operands())
        if (forwardValues_.count(v))
          return true;
    return false;
  }

  /// Non-reentrant checkpoint's recomputation, at the first unpack of a tensor the call saved:
  /// its forward nodes again, up to the one whose autograd Function saved last (early stop).
  /// Copies read values from outside the call as they are and each other's results inside; they
  /// keep their forward modules (CommDebugMode charges those, in backward). fully_shard's hooks
  /// skip recomputation (FSDP2 unshards in its pre-backward instead); so do the ops a selective
  /// policy kept (later copies read the forward's outputs), and the collectives it kept.
  void recompute(Region &r) {
    r.recomputed = true;
    unsigned stop = 0;
    for (AGNode *a : r.ops)
      if (savesTensors(*a))
        stop = std::max(stop, a->fwd->index());
    llvm::DenseMap<const Value *, Value *> copies;
    auto operand = [&](const Value *v) { return copies.count(v) ? copies[v] : const_cast<Value *>(v); };
    for (unsigned i = r.call->first; i <= stop; ++i) {
      const Node &n = *fwd_.nodes()[i];
      if (!r.call->nodes.count(&n))
        continue;
      if (n.op().ns == "commlens" && llvm::StringRef(n.op().name).startswith("fsdp_")) {
        auto in = n.input("inputs")->tensors();
        auto out = n.results();
        for (size_t k = 0; k < in.size() && k < out.size(); ++k)
          copies[out[k]] = operand(in[k]);
        continue;
      }
      bool hook = n.op().ns == "commlens";
      if (!hook && keptByCheckpoint(*r.unit, n.opString()))
        continue;
      Node *copy = copyNodeInto(*bw_, n, "recompute_" + n.name(), operand,
                   [&](const Value *old) {
                     Value *v = bw_->createUniqueValue("recompute_" + old->name(), old->kind());
                     if (old->meta())
                       v->setMeta(*old->meta());
                     v->setSymbol(old->symbol());
                     copies[old] = v;
                     return v;
                   });
      if (std::string kept = keptCollectives(*r.unit); hook && !kept.empty())
        copy->setMetadata(kKeptCollectives, std::move(kept));
    }
  }

  /// Emits an FSDP hook (once per unit) into the backward graph, in the current module.
  void emitFsdpHook(llvm::StringRef op, unsigned unit, llvm::SmallVector<NamedArgument, 4> args) {
    args.push_back({"unit", static_cast<int64_t>(unit), true});
    Node *n = bw_->appendNode(fmt::format("{}_{}", op.rsplit(':').second, unit), op, std::move(args), {});
    n->setScope(const_cast<ModuleScope *>(current_), {});
  }

  void fsdpPreBackward(unsigned unit) {
    if (!fsdpPreBackwardDone_.insert(unit).second)
      return;
    fsdpCallbackQueued_ = true;
    emitFsdpHook("commlens::fsdp_pre_backward", unit, {});
  }

  /// The unit's post-backward, with the gradients its parameters received so far.
  void fsdpPostBackward(unsigned unit) {
    if (!fsdpPostBackwardDone_.insert(unit).second)
      return;
    TensorList grads, params;
    for (const Value *p : state_.fsdp.units[unit].params)
      if (Value *g = leafGrads_.lookup(p)) {
        grads.push_back(g);
        params.push_back(const_cast<Value *>(p));
      }
    emitFsdpHook("commlens::fsdp_post_backward", unit, {{"grads", grads, false}, {"params", params, false}});
  }

  /// Emits one backward runtime op in the current module; returns its single result.
  Value *emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args, TensorMeta meta, llvm::StringRef hint) {
    Value *v = bw_->createUniqueValue(hint, ValueKind::Tensor);
    v->setMeta(std::move(meta));
    Node *n = bw_->appendNode(v->name(), op, std::move(args), {Argument(v)});
    n->setScope(const_cast<ModuleScope *>(current_), {});
    return v;
  }

  TensorMeta like(const Value *v) const { return metaOf(v->meta()->dtype, sizesOf(*v->meta()), v->meta()->device); }

  Value *t(Value *x) {
    auto s = sizesOf(*x->meta());
    auto st = stridesOf(*x->meta());
    std::swap(s[0], s[1]);
    std::swap(st[0], st[1]);
    return emit("aten::t.default", {{"self", x, false}}, metaOf(x->meta()->dtype, s, x->meta()->device, st), "grad_t");
  }
  Value *transpose(Value *x, int64_t d0, int64_t d1) {
    auto s = sizesOf(*x->meta());
    auto st = stridesOf(*x->meta());
    int64_t r = static_cast<int64_t>(s.size());
    d0 = d0 < 0 ? d0 + r : d0;
    d1 = d1 < 0 ? d1 + r : d1;
    std::swap(s[d0], s[d1]);
    std::swap(st[d0], st[d1]);
    return emit("aten::transpose.int", {{"self", x, false}, {"dim0", d0, false}, {"dim1", d1, false}},
                metaOf(x->meta()->dtype, s, x->meta()->device, st), "grad_transpose");
  }
  Value *mm(Value *a, Value *b) {
    auto sa = sizesOf(*a->meta()), sb = sizesOf(*b->meta());
    return emit("aten::mm.default", {{"self", a, false}, {"mat2", b, false}},
                metaOf(a->meta()->dtype, {sa[0], sb[1]}, a->meta()->device), "grad_mm");
  }
  Value *bmm(Value *a, Value *b) {
    auto sa = sizesOf(*a->meta()), sb = sizesOf(*b->meta());
    return emit("aten::bmm.default", {{"self", a, false}, {"mat2", b, false}},
                metaOf(a->meta()->dtype, {sa[0], sa[1], sb[2]}, a->meta()->device), "grad_bmm");
  }
  /// Tensor.reshape: a view when the strides allow one, else clone + _unsafe_view.
  Value *reshape(Value *x, llvm::ArrayRef<int64_t> sizes) {
    if (sizesOf(*x->meta()) == llvm::SmallVector<int64_t, 4>(sizes.begin(), sizes.end()))
      return emit("aten::view.default", {{"self", x, false}, {"size", IntList(sizes.begin(), sizes.end()), false}},
                  metaOf(x->meta()->dtype, sizes, x->meta()->device, stridesOf(*x->meta())), "grad_view");
    if (auto st = viewStrides(*x->meta(), sizes))
      return emit("aten::view.default", {{"self", x, false}, {"size", IntList(sizes.begin(), sizes.end()), false}},
                  metaOf(x->meta()->dtype, sizes, x->meta()->device, *st), "grad_view");
    Value *c = emit("aten::clone.default", {{"self", x, false}, {"memory_format", MemoryFormat::Contiguous, true}},
                    like(x), "grad_clone");
    return emit("aten::_unsafe_view.default", {{"self", c, false}, {"size", IntList(sizes.begin(), sizes.end()), false}},
                metaOf(x->meta()->dtype, sizes, x->meta()->device), "grad_view");
  }
  /// at::sum_to, as the engine's validate_outputs applies it to a broadcast input's gradient.
  Value *sumTo(Value *g, const TensorMeta &target, const Node &) {
    auto gs = sizesOf(*g->meta());
    auto ts = sizesOf(target);
    if (gs == ts || gs.size() < ts.size())
      return g;
    size_t leading = gs.size() - ts.size();
    IntList dims;
    for (size_t i = 0; i < leading; ++i)
      dims.push_back(static_cast<int64_t>(i));
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i] == 1 && gs[leading + i] != 1)
        dims.push_back(static_cast<int64_t>(leading + i));
    if (dims.empty())
      return g;
    llvm::SmallVector<int64_t, 4> kept = gs;
    for (int64_t d : dims)
      kept[d] = 1;
    Value *r = emit("aten::sum.dim_IntList", {{"self", g, false}, {"dim", dims, false}, {"keepdim", true, false}},
                    metaOf(g->meta()->dtype, kept, g->meta()->device), "grad_sum");
    if (leading > 0)
      r = emit("aten::view.default", {{"self", r, false}, {"size", IntList(ts.begin(), ts.end()), false}},
               metaOf(g->meta()->dtype, ts, g->meta()->device), "grad_view");
    return r;
  }

  static bool columnMajor(const Value *v) {
    if (!v->meta() || v->meta()->rank() != 2)
      return false;
    auto s = sizesOf(*v->meta());
    auto st = stridesOf(*v->meta());
    if (v->producer() && (v->producer()->opString() == "aten::t.default" ||
                          v->producer()->opString() == "aten::transpose.int"))
      return true;
    return st[0] == 1 && st[1] == s[0];
  }

  /// mm_mat1_backward (FunctionsManual.cpp): a column-major mat1 gets its grad column-major.
  Value *mmMat1Backward(Value *g, Value *mat2, const Value *mat1) {
    if (columnMajor(mat1))
      return t(mm(mat2, t(g)));
    return mm(g, t(mat2));
  }
  Value *mmMat2Backward(Value *g, Value *mat1, const Value *mat2) {
    if (columnMajor(mat2))
      return t(mm(t(g), mat1));
    return mm(t(mat1), g);
  }

  std::optional<int64_t> intArg(const Node &n, llvm::StringRef name, std::optional<int64_t> dflt = std::nullopt) {
    const Argument *a = n.input(name);
    if (!a || a->isNone())
      return dflt;
    return a->asInt();
  }

  Value *operand(const Node &n, llvm::StringRef name) {
    const Argument *a = n.input(name);
    return a && a->isTensor() ? a->tensor() : nullptr;
  }

  /// Index of the named argument's tensor among the node's tensor operands.
  static int operandIndex(const Node &n, llvm::StringRef name) {
    int i = 0;
    for (const NamedArgument &a : n.inputs())
      for (Value *v : a.value.tensors()) {
        if (v->kind() != ValueKind::Tensor)
          continue;
        if (a.name == name)
          return i;
        ++i;
      }
    return -1;
  }

  /// Runs one autograd node; returns the gradient per next edge (null: undefined).
  llvm::Expected<llvm::SmallVector<Value *, 4>> apply(AGNode &a) {
    llvm::SmallVector<Value *, 4> out(a.next.size(), nullptr);
    switch (a.kind) {
    case AGNode::Kind::HookOut:
      current_ = a.module; // CommDebugMode's global full-backward pre-hook
      [[fallthrough]];
    case AGNode::Kind::HookIn:
      for (size_t i = 0; i < a.buffer.size() && i < out.size(); ++i)
        out[i] = a.buffer[i];
      return out;
    case AGNode::Kind::Accumulate:
      if (a.buffer[0]) {
        emit("aten::detach.default", {{"self", a.buffer[0], false}}, like(a.buffer[0]), "grad_leaf");
        leafGrads_[a.leaf] = a.buffer[0];
      }
      return out;
    case AGNode::Kind::FsdpPostBackward:
      for (size_t i = 0; i < a.buffer.size() && i < out.size(); ++i)
        out[i] = a.buffer[i];
      fsdpPostBackward(a.fsdpUnit);
      return out;
    case AGNode::Kind::Boundary: {
      Value *g = a.buffer[0];
      if (!g)
        return out;
      const char *op = a.step.kind == BoundaryStep::Kind::FromLocal      ? "commlens::from_local_backward"
                       : a.step.kind == BoundaryStep::Kind::Redistribute ? "commlens::redistribute_backward"
                                                                         : "commlens::to_local_backward";
      const Placements &p = a.step.kind == BoundaryStep::Kind::FromLocal ? a.step.to : a.step.from;
      std::string module = a.fwd->input("module") && a.fwd->input("module")->is<std::string>()
                               ? a.fwd->input("module")->get<std::string>()
                               : (a.fwd->scope() ? a.fwd->scope()->displayName() : "Global");
      // The gradient keeps its strides: to_local / from_local wrap the same local tensor.
      out[0] = emit(op, {{"self", g, false}, {"placements", placementsList(p), false}, {"module", module, true}},
                    metaOf(g->meta()->dtype, sizesOf(*g->meta()), g->meta()->device, stridesOf(*g->meta())),
                    "grad_boundary");
      return out;
    }
    case AGNode::Kind::Op:
      return opBackward(a, out);
    }
    return out;
  }

  llvm::Expected<llvm::SmallVector<Value *, 4>> opBackward(AGNode &a, llvm::SmallVector<Value *, 4> out) {
    const Node &n = *a.fwd;
    llvm::StringRef op = n.opString();
    Value *g = a.buffer.empty() ? nullptr : a.buffer[0];
    auto want = [&](llvm::StringRef name) -> int {
      int i = operandIndex(n, name);
      return i >= 0 && i < static_cast<int>(a.next.size()) && a.next[i] ? i : -1;
    };
    auto set = [&](llvm::StringRef name, Value *v) {
      if (int i = operandIndex(n, name); i >= 0 && i < static_cast<int>(out.size()))
        out[i] = v;
    };
    const Value *result = n.results().empty() ? nullptr : n.results()[0];
    if (op == "aten::native_layer_norm.default") {
      if (!g)
        return out;
      Value *input = operand(n, "input"), *weight = operand(n, "weight"), *bias = operand(n, "bias");
      llvm::SmallVector<Argument, 1> results;
      Value *gi = bw_->createUniqueValue("grad_layer_norm_input", ValueKind::Tensor);
      gi->setMeta(like(input));
      results.push_back(gi);
      Value *gw = nullptr, *gb = nullptr;
      if (weight) {
        gw = bw_->createUniqueValue("grad_layer_norm_weight", ValueKind::Tensor);
        gw->setMeta(like(weight));
        results.push_back(gw);
      } else {
        results.push_back(NoneArg{});
      }
      if (bias) {
        gb = bw_->createUniqueValue("grad_layer_norm_bias", ValueKind::Tensor);
        gb->setMeta(like(bias));
        results.push_back(gb);
      } else {
        results.push_back(NoneArg{});
      }
      BoolList mask{want("input") >= 0, weight && want("weight") >= 0, bias && want("bias") >= 0};
      Node *b = bw_->appendNode(gi->name(), "aten::native_layer_norm_backward.default",
                                {{"grad_out", g, false},
                                 {"input", input, false},
                                 {"normalized_shape", *n.input("normalized_shape"), false},
                                 {"mean", n.results()[1], false},
                                 {"rstd", n.results()[2], false},
                                 {"weight", weight ? Argument(weight) : Argument(NoneArg{}), false},
                                 {"bias", bias ? Argument(bias) : Argument(NoneArg{}), false},
                                 {"output_mask", mask, false}},
                                results);
      b->setScope(const_cast<ModuleScope *>(current_), {});
      set("input", gi);
      if (gw)
        set("weight", gw);
      if (gb)
        set("bias", gb);
      return out;
    }
    if (op == "aten::_fused_rms_norm.default") {
      if (!g)
        return out;
      Value *input = operand(n, "input"), *weight = operand(n, "weight");
      Value *gi = bw_->createUniqueValue("grad_rms_norm_input", ValueKind::Tensor);
      gi->setMeta(like(input));
      llvm::SmallVector<Argument, 1> results{gi};
      Value *gw = nullptr;
      if (weight) {
        gw = bw_->createUniqueValue("grad_rms_norm_weight", ValueKind::Tensor);
        gw->setMeta(like(weight));
        results.push_back(gw);
      } else {
        results.push_back(NoneArg{});
      }
      BoolList mask{want("input") >= 0, weight && want("weight") >= 0};
      Node *b = bw_->appendNode(gi->name(), "aten::_fused_rms_norm_backward.default",
                                {{"grad_out", g, false},
                                 {"input", input, false},
                                 {"normalized_shape", *n.input("normalized_shape"), false},
                                 {"rstd", n.results()[1], false},
                                 {"weight", weight ? Argument(weight) : Argument(NoneArg{}), false},
                                 {"output_mask", mask, false}},
                                results);
      b->setScope(const_cast<ModuleScope *>(current_), {});
      set("input", gi);
      if (gw)
        set("weight", gw);
      return out;
    }
    if (op == "aten::_scaled_dot_product_flash_attention_for_cpu.default") {
      if (!g)
        return out;
      Value *q = operand(n, "query"), *k = operand(n, "key"), *v = operand(n, "value");
      Value *gq = bw_->createUniqueValue("grad_sdpa_q", ValueKind::Tensor);
      Value *gk = bw_->createUniqueValue("grad_sdpa_k", ValueKind::Tensor);
      Value *gv = bw_->createUniqueValue("grad_sdpa_v", ValueKind::Tensor);
      gq->setMeta(like(q));
      gk->setMeta(like(k));
      gv->setMeta(like(v));
      llvm::SmallVector<NamedArgument, 4> args{{"grad_out", g, false}, {"query", q, false}, {"key", k, false},
                                               {"value", v, false}, {"out", n.results()[0], false},
                                               {"logsumexp", n.results()[1], false}};
      for (llvm::StringRef name : {"dropout_p", "is_causal", "attn_mask", "scale"})
        if (const Argument *x = n.input(name))
          args.push_back({name.str(), *x, true});
      Node *b = bw_->appendNode(gq->name(), "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default",
                                std::move(args), {Argument(gq), Argument(gk), Argument(gv)});
      b->setScope(const_cast<ModuleScope *>(current_), {});
      set("query", gq);
      set("key", gk);
      set("value", gv);
      return out;
    }
    if (!g)
      return out;
    Value *self = operand(n, "self");
    if (op == "aten::view.default" || op == "aten::_unsafe_view.default" || op == "aten::reshape.default" ||
        op == "aten::view_copy.default") {
      set("self", reshape(g, sizesOf(*self->meta())));
    } else if (op == "aten::t.default") {
      set("self", t(g));
    } else if (op == "aten::transpose.int") {
      set("self", transpose(g, *intArg(n, "dim0"), *intArg(n, "dim1")));
    } else if (op == "aten::expand.default") {
      set("self", sumTo(g, *self->meta(), n));
    } else if (op == "aten::_to_copy.default") {
      // ToCopyBackward0: the gradient goes back to the input's dtype (a copy only if it differs)
      set("self", g->meta()->dtype == self->meta()->dtype
                      ? g
                      : emit("aten::_to_copy.default", {{"self", g, false}, {"dtype", self->meta()->dtype, true}},
                             like(self), "grad_to_copy"));
    } else if (op == "aten::neg.default") {
      set("self", emit("aten::neg.default", {{"self", g, false}}, like(g), "grad_neg"));
    } else if (op == "aten::exp.default") {
      set("self", emit("aten::mul.Tensor", {{"self", g, false}, {"other", const_cast<Value *>(result), false}}, like(g),
                       "grad_exp"));
    } else if (op == "aten::tanh.default" || op == "aten::sigmoid.default") {
      bool tanh = op == "aten::tanh.default";
      set("self", emit(tanh ? "aten::tanh_backward.default" : "aten::sigmoid_backward.default",
                       {{"grad_output", g, false}, {"output", const_cast<Value *>(result), false}}, like(g),
                       tanh ? "grad_tanh" : "grad_sigmoid"));
    } else if (op == "aten::sqrt.default") {
      // grad / (2 * result)
      Value *two = emit("aten::mul.Scalar", {{"self", const_cast<Value *>(result), false}, {"other", int64_t(2), false}},
                        like(result), "grad_sqrt_scale");
      set("self", emit("aten::div.Tensor", {{"self", g, false}, {"other", two, false}}, like(g), "grad_sqrt"));
    } else if (op == "aten::log.default") {
      set("self", emit("aten::div.Tensor", {{"self", g, false}, {"other", self, false}}, like(g), "grad_log"));
    } else if (op == "aten::div.Tensor") {
      const Argument &other = *n.input("other");
      if (want("self") >= 0)
        set("self", emit("aten::div.Tensor", {{"self", g, false}, {"other", other, false}}, like(g), "grad_div"));
      if (want("other") >= 0 && other.isTensor()) {
        // -grad * ((self / other) / other)
        Value *ng = emit("aten::neg.default", {{"self", g, false}}, like(g), "grad_neg");
        Value *q = emit("aten::div.Tensor", {{"self", self, false}, {"other", other, false}}, like(g), "grad_div");
        Value *q2 = emit("aten::div.Tensor", {{"self", q, false}, {"other", other, false}}, like(g), "grad_div");
        set("other", emit("aten::mul.Tensor", {{"self", ng, false}, {"other", q2, false}}, like(g), "grad_mul"));
      }
    } else if (op == "aten::permute.default") {
      IntList dims = *n.input("dims")->asIntList();
      int64_t rank = static_cast<int64_t>(dims.size());
      IntList inverse(dims.size());
      for (int64_t i = 0; i < rank; ++i)
        inverse[dims[i] < 0 ? dims[i] + rank : dims[i]] = i;
      auto gs = sizesOf(*g->meta());
      auto gst = stridesOf(*g->meta());
      llvm::SmallVector<int64_t, 4> sz, st;
      for (int64_t d : inverse) {
        sz.push_back(gs[d]);
        st.push_back(gst[d]);
      }
      set("self", emit("aten::permute.default", {{"self", g, false}, {"dims", inverse, false}},
                       metaOf(g->meta()->dtype, sz, g->meta()->device, st), "grad_permute"));
    } else if (op == "aten::squeeze.dim") {
      auto s0 = sizesOf(*self->meta());
      int64_t d = *intArg(n, "dim");
      d = d < 0 ? d + static_cast<int64_t>(s0.size()) : d;
      set("self", s0[d] == 1 ? emit("aten::unsqueeze.default", {{"self", g, false}, {"dim", d, false}}, like(self),
                                    "grad_unsqueeze")
                             : g);
    } else if (op == "aten::native_dropout.default") {
      double p = n.input("p") && n.input("p")->is<double>() ? n.input("p")->get<double>() : 0.0;
      set("input", emit("aten::native_dropout_backward.default",
                        {{"grad_output", g, false}, {"mask", n.results()[1], false},
                         {"scale", p == 1.0 ? 0.0 : 1.0 / (1.0 - p), false}},
                        like(g), "grad_dropout"));
    } else if (op == "aten::clone.default" || op == "aten::alias.default" || op == "aten::contiguous.default" ||
               op == "aten::add.Scalar" || op == "aten::add_.Scalar" ||
               op == "aten::sub.Scalar" || op == "aten::positive.default" || op == "aten::lift_fresh_copy.default") {
      set("self", g);
    } else if (op == "aten::addmm.default") {
      set("self", g);
      if (want("mat1") >= 0)
        set("mat1", mmMat1Backward(g, operand(n, "mat2"), operand(n, "mat1")));
      if (want("mat2") >= 0)
        set("mat2", mmMat2Backward(g, operand(n, "mat1"), operand(n, "mat2")));
    } else if (op == "aten::mm.default") {
      if (want("self") >= 0)
        set("self", mmMat1Backward(g, operand(n, "mat2"), self));
      if (want("mat2") >= 0)
        set("mat2", mmMat2Backward(g, self, operand(n, "mat2")));
    } else if (op == "aten::bmm.default") {
      Value *mat2 = operand(n, "mat2");
      if (want("self") >= 0)
        set("self", bmm(g, transpose(mat2, 1, 2)));
      if (want("mat2") >= 0)
        set("mat2", bmm(transpose(self, 1, 2), g));
    } else if (op == "aten::relu.default") {
      set("self", emit("aten::threshold_backward.default",
                       {{"grad_output", g, false}, {"self", const_cast<Value *>(result), false}, {"threshold", int64_t(0), false}},
                       like(g), "grad_relu"));
    } else if (op == "aten::gelu.default") {
      llvm::SmallVector<NamedArgument, 4> args{{"grad_output", g, false}, {"self", self, false}};
      if (const Argument *x = n.input("approximate"))
        args.push_back({"approximate", *x, true});
      set("self", emit("aten::gelu_backward.default", std::move(args), like(g), "grad_gelu"));
    } else if (op == "aten::silu.default") {
      set("self", emit("aten::silu_backward.default", {{"grad_output", g, false}, {"self", self, false}}, like(g),
                       "grad_silu"));
    } else if (op == "aten::_softmax.default" || op == "aten::_log_softmax.default") {
      bool log = op == "aten::_log_softmax.default";
      Value *gi = emit(log ? "aten::_log_softmax_backward_data.default" : "aten::_softmax_backward_data.default",
                       {{"grad_output", g, false},
                        {"output", const_cast<Value *>(result), false},
                        {"dim", *intArg(n, "dim"), false},
                        {"input_dtype", self->meta()->dtype, false}},
                       like(self), log ? "grad_log_softmax" : "grad_softmax");
      if (log && ctx_.plan->lossParallel && state_.layout(self)) {
        // loss_parallel's handler returns grad_output.to(input_dtype) (nll_loss_backward already
        // computed the fused gradient): DTensor dispatches to.dtype and, the dtype unchanged, a
        // detach of the same tensor.
        Value *c = emit("aten::to.dtype", {{"self", g, false}, {"dtype", self->meta()->dtype, false}}, like(g),
                        "grad_log_softmax_to");
        gi = emit("aten::detach.default", {{"self", c, false}}, like(g), "grad_log_softmax");
      }
      set("self", gi);
    } else if (op == "aten::add.Tensor" || op == "aten::add_.Tensor") {
      set("self", g);
      set("other", g);
    } else if (op == "aten::sub.Tensor") {
      set("self", g);
      if (want("other") >= 0)
        set("other", emit("aten::neg.default", {{"self", g, false}}, like(g), "grad_neg"));
    } else if (op == "aten::mul.Tensor" || op == "aten::mul_.Tensor") {
      const Argument &other = *n.input("other"); // a tensor or a wrapped number
      if (want("self") >= 0)
        set("self", emit("aten::mul.Tensor", {{"self", g, false}, {"other", other, false}}, like(g), "grad_mul"));
      if (want("other") >= 0)
        set("other", emit("aten::mul.Tensor", {{"self", g, false}, {"other", self, false}}, like(g), "grad_mul"));
    } else if (op == "aten::mul.Scalar" || op == "aten::div.Scalar") {
      set("self", emit(op, {{"self", g, false}, {"other", *n.input("other"), false}}, like(g), "grad_scale"));
    } else if (op == "aten::masked_fill.Scalar") {
      set("self", emit("aten::masked_fill.Scalar",
                       {{"self", g, false}, {"mask", operand(n, "mask"), false}, {"value", int64_t(0), false}}, like(g),
                       "grad_masked_fill"));
    } else if (op == "aten::embedding.default") {
      Value *weight = operand(n, "weight"), *indices = operand(n, "indices");
      set("weight", emit("aten::embedding_dense_backward.default",
                         {{"grad_output", g, false},
                          {"indices", indices, false},
                          {"num_weights", sizesOf(*weight->meta())[0], false},
                          {"padding_idx", intArg(n, "padding_idx", -1).value_or(-1), false},
                          {"scale_grad_by_freq", false, false}},
                         like(weight), "grad_embedding"));
    } else if (op == "aten::sum.default") {
      auto s = sizesOf(*self->meta());
      set("self", emit("aten::expand.default", {{"self", g, false}, {"size", IntList(s.begin(), s.end()), false}},
                       metaOf(g->meta()->dtype, s, g->meta()->device, llvm::SmallVector<int64_t, 4>(s.size(), 0)),
                       "grad_expand"));
    } else if (op == "aten::pow.Tensor_Scalar") {
      // pow_backward: grad * (exponent * self.pow(exponent - 1))
      const Argument &e = *n.input("exponent");
      double ex = e.is<double>() ? e.get<double>() : static_cast<double>(e.asInt().value_or(1));
      Value *p = emit("aten::pow.Tensor_Scalar", {{"self", self, false}, {"exponent", ex - 1, false}}, like(self),
                      "grad_pow");
      Value *m = emit("aten::mul.Scalar", {{"self", p, false}, {"other", e, false}}, like(self), "grad_pow_scale");
      set("self", emit("aten::mul.Tensor", {{"self", g, false}, {"other", m, false}}, like(g), "grad_mul"));
    } else if (op == "aten::rsqrt.default") {
      // -0.5 * grad * result.pow(3); the saved result is unpacked as a detached alias (a detach
      // DTensor dispatches, as CommDebugMode's backward op lists show).
      Value *saved = emit("aten::detach.default", {{"self", const_cast<Value *>(result), false}}, like(result),
                          "grad_rsqrt_result");
      Value *p = emit("aten::pow.Tensor_Scalar", {{"self", saved, false}, {"exponent", 3.0, false}}, like(result),
                      "grad_rsqrt_pow");
      Value *a0 = emit("aten::mul.Scalar", {{"self", g, false}, {"other", -0.5, false}}, like(g), "grad_rsqrt_scale");
      set("self", emit("aten::mul.Tensor", {{"self", a0, false}, {"other", p, false}}, like(g), "grad_mul"));
    } else if (op == "aten::mean.dim" || op == "aten::sum.dim_IntList") {
      // sum_backward (unsqueeze the reduced dims unless keepdim, expand), then / numel for mean
      auto sizes = sizesOf(*self->meta());
      int64_t rank = static_cast<int64_t>(sizes.size());
      std::optional<IntList> dims = n.input("dim") ? n.input("dim")->asIntList() : std::nullopt;
      bool keepdim = n.input("keepdim") && n.input("keepdim")->is<bool>() && n.input("keepdim")->get<bool>();
      IntList ds;
      if (dims && !dims->empty())
        for (int64_t d : *dims)
          ds.push_back(d < 0 ? d + rank : d);
      else
        for (int64_t d = 0; d < rank; ++d)
          ds.push_back(d);
      std::sort(ds.begin(), ds.end());
      Value *x = g;
      if (!keepdim)
        for (int64_t d : ds) {
          auto xs = sizesOf(*x->meta());
          xs.insert(xs.begin() + d, 1);
          x = emit("aten::unsqueeze.default", {{"self", x, false}, {"dim", d, false}},
                   metaOf(x->meta()->dtype, xs, x->meta()->device), "grad_unsqueeze");
        }
      x = emit("aten::expand.default", {{"self", x, false}, {"size", IntList(sizes.begin(), sizes.end()), false}},
               metaOf(x->meta()->dtype, sizes, x->meta()->device), "grad_expand");
      if (op == "aten::mean.dim") {
        int64_t count = 1;
        for (int64_t d : ds)
          count *= sizes[d];
        x = emit("aten::div.Scalar", {{"self", x, false}, {"other", static_cast<double>(count), false}}, like(self),
                 "grad_mean");
      }
      set("self", x);
    } else if (op == "aten::unsqueeze.default") {
      auto s0 = sizesOf(*self->meta());
      set("self", emit("aten::squeeze.dim", {{"self", g, false}, {"dim", *intArg(n, "dim"), false}},
                       metaOf(g->meta()->dtype, s0, g->meta()->device), "grad_squeeze"));
    } else if (op == "aten::select.int") {
      auto s0 = sizesOf(*self->meta());
      set("self", emit("aten::select_backward.default",
                       {{"grad_output", g, false}, {"input_sizes", IntList(s0.begin(), s0.end()), false},
                        {"dim", *intArg(n, "dim"), false}, {"index", *intArg(n, "index"), false}},
                       like(self), "grad_select"));
    } else if (op == "aten::slice.Tensor") {
      auto s0 = sizesOf(*self->meta());
      set("self", emit("aten::slice_backward.default",
                       {{"grad_output", g, false}, {"input_sizes", IntList(s0.begin(), s0.end()), false},
                        {"dim", intArg(n, "dim", 0).value_or(0), false}, {"start", intArg(n, "start", 0).value_or(0), false},
                        {"end", intArg(n, "end", INT64_MAX).value_or(INT64_MAX), false},
                        {"step", intArg(n, "step", 1).value_or(1), false}},
                       like(self), "grad_slice"));
    } else if (op == "aten::stack.default" || op == "aten::cat.default") {
      // stack: grad.unbind(dim); cat: grad.split_with_sizes(sizes, dim)
      llvm::SmallVector<Value *, 4> parts = n.input("tensors")->tensors();
      int64_t dim = intArg(n, "dim", 0).value_or(0);
      int64_t rank = g->meta()->rank();
      dim = dim < 0 ? dim + rank : dim;
      llvm::SmallVector<Argument, 1> results;
      TensorList items;
      for (Value *p : parts) {
        Value *r = bw_->createUniqueValue("grad_part", ValueKind::Tensor);
        r->setMeta(like(p));
        items.push_back(r);
      }
      results.push_back(items);
      llvm::SmallVector<NamedArgument, 4> args{{"self", g, false}};
      if (op == "aten::stack.default") {
        args.push_back({"dim", dim, false});
      } else {
        IntList sizes;
        for (Value *p : parts)
          sizes.push_back(sizesOf(*p->meta())[dim]);
        args.push_back({"split_sizes", sizes, false});
        args.push_back({"dim", dim, false});
      }
      Node *b = bw_->appendNode(items.front()->name(),
                                op == "aten::stack.default" ? "aten::unbind.int" : "aten::split_with_sizes.default",
                                std::move(args), results);
      b->setScope(const_cast<ModuleScope *>(current_), {});
      for (size_t i = 0; i < parts.size() && i < out.size(); ++i)
        out[i] = items[i];
    } else if (op == "aten::nll_loss_forward.default") {
      llvm::SmallVector<NamedArgument, 4> args{{"grad_output", g, false},
                                               {"self", self, false},
                                               {"target", operand(n, "target"), false},
                                               {"weight", *n.input("weight"), false},
                                               {"reduction", *n.input("reduction"), false},
                                               {"ignore_index", *n.input("ignore_index"), false},
                                               {"total_weight", n.results()[1], false}};
      set("self", emit("aten::nll_loss_backward.default", std::move(args), like(self), "grad_nll_loss"));
    } else {
      return makeError("autodiff: no derivative formula for {} (node '{}' in {})", op.str(), n.name(),
                       n.scope() ? n.scope()->displayName() : "Global");
    }
    return out;
  }

  PassContext &ctx_;
  PredictionState &state_;
  const Graph &fwd_;
  std::shared_ptr<Graph> bw_;
  llvm::DenseSet<const Value *> leaves_, state_values_;
  std::vector<Call> calls_;
  std::vector<std::unique_ptr<AGNode>> nodes_;
  llvm::DenseMap<const Value *, Edge> edges_;
  llvm::DenseMap<const Value *, AGNode *> accumulators_;
  uint64_t seq_ = 0;
  const ModuleScope *current_ = nullptr; // Global until the first module output hook fires
  llvm::DenseMap<const Value *, Value *> leafGrads_; // parameter -> the gradient AccumulateGrad got
  llvm::DenseSet<unsigned> fsdpPreBackwardDone_, fsdpPostBackwardDone_;
  std::vector<Region> regions_;
  llvm::DenseMap<const Node *, unsigned> regionOf_;
  llvm::DenseSet<const Value *> forwardValues_;
  bool fsdpCallbackQueued_ = false;
};

} // namespace

llvm::Error AppendLoss::run(PassContext &ctx) {
  if (!ctx.plan)
    return makeError("loss needs a plan");
  return LossBuilder(ctx).run();
}

llvm::Error Autodiff::run(PassContext &ctx) {
  if (!ctx.plan)
    return makeError("autodiff needs a plan");
  return AutodiffBuilder(ctx).run();
}

} // namespace commlens
