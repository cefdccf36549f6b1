#include "passes/ApplyShardingPlan.h"

#include "ir/Error.h"
#include "ir/GraphBuilder.h"
#include "passes/ActivationCheckpoint.h"
#include "passes/FullyShard.h"

#include "llvm/ADT/DenseSet.h"

#include <map>

namespace commlens {
namespace {

bool isLinear(const ModuleScope &s) { return s.type() == "torch.nn.modules.linear.Linear"; }
bool isEmbedding(const ModuleScope &s) { return s.type() == "torch.nn.modules.sparse.Embedding"; }

Argument placementArg(const std::optional<Placement> &p) {
  return p ? Argument(p->str()) : Argument(NoneArg{});
}

std::optional<Placement> first(const std::optional<OptionalPlacements> &list) {
  if (!list || list->empty())
    return std::nullopt;
  return list->front();
}

/// One call of a styled module: its node span, forward inputs and outputs.
struct ModuleCall {
  const ModuleScope *scope = nullptr;
  llvm::SmallVector<unsigned, 4> callPath; // of the module itself
  unsigned firstNode = 0, lastNode = 0;
  llvm::DenseSet<const Node *> nodes;
  std::vector<const Value *> inputs, outputs;
  std::vector<const ParallelStyle *> styles;
  std::optional<unsigned> fsdpUnit; // the fully_shard unit this module is
  bool gradEnabled = true;          // the grad mode the call runs in (its hooks' too)
};

class PlanApplier {
public:
  PlanApplier(PassContext &ctx) : ctx_(ctx), plan_(*ctx.plan), graph_(ctx.program.graph()) {}

  llvm::Error run() {
    if (llvm::Error err = chooseMesh())
      return err;
    if (llvm::Error err = collectStyledModules())
      return err;
    if (llvm::Error err = distributeParameters())
      return err;
    if (llvm::Error err = applyActivationCheckpointing(plan_, ctx_.program.graph(), ctx_.state))
      return err;
    auto units = resolveFsdpUnits(plan_, ctx_.program.graph(), ctx_.state.dtensors);
    if (!units)
      return units.takeError();
    ctx_.state.fsdp.units = std::move(*units);
    for (const FsdpUnit &u : ctx_.state.fsdp.units)
      for (const Value *p : u.params)
        if (const InputSpec *in = explicitlyPlaced_.lookup(p))
          return makeError("placements for '{}': it is already a DTensor after fully_shard ('{}' on {})", in->target,
                           u.spec->pattern, u.scope->displayName());
    for (unsigned i = 0; i < ctx_.state.fsdp.units.size(); ++i)
      fsdpUnitOf_[ctx_.state.fsdp.units[i].scope] = i;
    collectCalls();
    return rewrite();
  }

private:
  /// DTensors of a TP plan live on the 1-D sub-mesh its styles use.
  llvm::Error chooseMesh() {
    std::optional<unsigned> dim;
    for (const ParallelizeStep &step : plan_.steps) {
      if (!step.meshDim)
        continue;
      if (dim && *dim != *step.meshDim)
        return makeError("plans that parallelize on several mesh dims are not supported yet");
      dim = step.meshDim;
    }
    for (const auto &[pattern, spec] : plan_.placements)
      if (!spec.meshDims.empty() && (!dim || spec.meshDims != std::vector<unsigned>{*dim}))
        return makeError("placements of '{}' use mesh dims other than the styles' mesh dim (not supported yet)", pattern);
    if (dim) {
      ctx_.state.dtensorMesh = plan_.mesh.subMesh(*dim);
      ctx_.state.dtensorMeshDims = {*dim};
    } else {
      ctx_.state.dtensorMesh = plan_.mesh;
      for (unsigned i = 0; i < plan_.mesh.ndim(); ++i)
        ctx_.state.dtensorMeshDims.push_back(i);
    }
    return llvm::Error::success();
  }

  llvm::Error collectStyledModules() {
    for (const ParallelizeStep &step : plan_.steps)
      for (const ParallelStyle &style : step.styles)
        for (const ModuleScope *s : graph_.scopes().inForwardOrder())
          if (matchesModulePath(style.pattern, s->path())) {
            if ((style.kind == ParallelStyle::Kind::Colwise || style.kind == ParallelStyle::Kind::Rowwise) &&
                !isLinear(*s) && !isEmbedding(*s))
              return makeError("{} on {} ({}): only nn.Linear and nn.Embedding are supported", name(style.kind).str(),
                               s->displayName(), s->type());
            styles_[s].push_back(&style);
            applications_.emplace_back(s, &style);
          }
    return llvm::Error::success();
  }

  void setParam(const InputSpec &in, Placement p, std::string origin) {
    ctx_.state.dtensors[in.value] = DTensorLayout{{p}, std::move(origin)};
  }

  llvm::Error distributeParameters() {
    // In plan order: a later style on the same parameter overrides, as re-registration does.
    for (const auto &[scope, style] : applications_) {
      std::string prefix = scope->path().empty() ? "" : scope->path() + ".";
      for (const InputSpec &in : graph_.inputs()) {
        if (in.kind != InputKind::Parameter || !llvm::StringRef(in.target).startswith(prefix) || !in.value)
          continue;
        llvm::StringRef local = llvm::StringRef(in.target).drop_front(prefix.size());
        bool direct = !local.contains('.');
        {
          std::string origin = fmt::format("{} on {}", name(style->kind).str(), scope->displayName());
          switch (style->kind) {
          case ParallelStyle::Kind::Colwise:
            if (direct)
              setParam(in, Placement::shard(isEmbedding(*scope) ? 1 : 0), origin);
            break;
          case ParallelStyle::Kind::Rowwise:
            if (direct)
              setParam(in, isEmbedding(*scope) ? Placement::shard(0)
                                               : (local == "bias" ? Placement::replicate() : Placement::shard(1)),
                       origin);
            break;
          case ParallelStyle::Kind::Sequence: // every parameter below the module, replicated
            setParam(in, Placement::replicate(), origin);
            ctx_.state.retrainedByStyle.insert(in.value);
            break;
          default:
            break;
          }
        }
      }
    }
    // Explicit placements are applied after every parallelize step.
    for (const auto &[pattern, spec] : plan_.placements)
      for (const InputSpec &in : graph_.inputs())
        if ((in.kind == InputKind::Parameter || in.kind == InputKind::Buffer) && in.value &&
            matchesModulePath(pattern, in.target)) {
          if (ctx_.state.dtensors.count(in.value))
            return makeError("placements for '{}': it is already a DTensor after parallelize_module", in.target);
          explicitlyPlaced_[in.value] = &in;
          ctx_.state.dtensors[in.value] =
              DTensorLayout{spec.placements, fmt::format("plan placements for '{}'", pattern)};
        }
    unsigned userIndex = 0;
    for (const InputSpec &in : graph_.inputs()) {
      if (in.kind != InputKind::UserInput)
        continue;
      for (const InputSetting &setting : plan_.inputs)
        if ((setting.key == std::to_string(userIndex) || setting.key == in.target) && setting.placements && in.value)
          ctx_.state.dtensors[in.value] = DTensorLayout{setting.placements->placements,
                                                        fmt::format("plan placements for input '{}'", setting.key)};
      ++userIndex;
    }
    return llvm::Error::success();
  }

  void collectCalls() {
    std::map<std::pair<const ModuleScope *, unsigned>, size_t> index;
    for (const auto &n : graph_.nodes()) {
      for (const ModuleScope *s = n->scope(); s; s = s->parent()) {
        auto styled = styles_.find(s);
        auto unit = fsdpUnitOf_.find(s);
        if (styled == styles_.end() && unit == fsdpUnitOf_.end())
          continue;
        unsigned depth = s->depth(); // the root (plan key "") is called once, at depth 0
        unsigned call = depth > 0 && depth <= n->callPath().size() ? n->callPath()[depth - 1] : 0;
        auto [it, fresh] = index.try_emplace({s, call}, calls_.size());
        if (fresh) {
          ModuleCall c;
          c.scope = s;
          c.callPath.assign(n->callPath().begin(), n->callPath().begin() + std::min<size_t>(depth, n->callPath().size()));
          c.firstNode = n->index();
          c.gradEnabled = n->gradEnabled();
          if (styled != styles_.end())
            c.styles = styled->second;
          if (unit != fsdpUnitOf_.end())
            c.fsdpUnit = unit->second;
          calls_.push_back(std::move(c));
        }
        ModuleCall &c = calls_[it->second];
        c.lastNode = n->index();
        c.nodes.insert(n.get());
      }
    }
    llvm::DenseMap<const Value *, const InputSpec *> inputSpecOf;
    for (const InputSpec &in : graph_.inputs())
      if (in.value)
        inputSpecOf[in.value] = &in;
    llvm::DenseMap<const Value *, llvm::SmallVector<const Node *, 2>> users;
    for (const auto &n : graph_.nodes())
      for (Value *v : n->operands())
        users[v].push_back(n.get());
    llvm::DenseSet<const Value *> graphOutputs;
    for (const OutputSpec &o : graph_.outputs())
      for (Value *v : o.value.tensors())
        graphOutputs.insert(v);

    for (ModuleCall &c : calls_) {
      std::string prefix = c.scope->path().empty() ? "" : c.scope->path() + ".";
      llvm::DenseSet<const Value *> seen;
      for (unsigned i = c.firstNode; i <= c.lastNode; ++i) {
        const Node &n = *graph_.nodes()[i];
        if (!c.nodes.count(&n))
          continue;
        for (Value *v : n.operands()) {
          if (v->kind() != ValueKind::Tensor || seen.count(v))
            continue;
          if (v->producer() && c.nodes.count(v->producer()))
            continue;
          if (const InputSpec *spec = inputSpecOf.lookup(v))
            if (spec->kind == InputKind::Parameter ||
                ((spec->kind == InputKind::Buffer || spec->kind == InputKind::TensorConstant) &&
                 llvm::StringRef(pathAfterCheckpointWrappers(plan_, spec->target)).startswith(prefix)))
              continue; // module state (parameters, own buffers), not a forward argument
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

  Value *emitHook(GraphBuilder &b, const ModuleCall &c, llvm::StringRef op, Value *x,
                  llvm::SmallVector<NamedArgument, 4> extra, llvm::StringRef tag) {
    Value *out = b.tensor((x->name() + "_" + tag).str(), *x->meta());
    llvm::SmallVector<NamedArgument, 4> args{{"self", x, false}};
    args.append(extra.begin(), extra.end());
    args.push_back({"module", c.scope->displayName(), true});
    Node *n = b.graph().appendNode(out->name(), op, std::move(args), {out});
    n->setScope(const_cast<ModuleScope *>(c.scope), c.callPath);
    n->setGradEnabled(c.gradEnabled);
    return out;
  }

  /// FSDP's forward hooks: identities over the call's tensor inputs (pre: fully_shard's pre-hook
  /// is prepended, so it runs before the styles' and wraps the raw inputs in its post-backward
  /// Function) or outputs (post: registered after the styles' output hooks).
  void fsdpHook(GraphBuilder &b, const ModuleCall &c, llvm::StringRef op, std::vector<Value *> &values,
                llvm::StringRef tag) {
    TensorList in, out;
    for (Value *v : values) {
      in.push_back(v);
      out.push_back(b.tensor((v->name() + "_" + tag).str(), *v->meta()));
    }
    Node *n = b.graph().appendNode(
        fmt::format("fsdp_{}_{}", tag, c.scope->path().empty() ? "root" : c.scope->path()), op,
        {{"inputs", in, false}, {"unit", static_cast<int64_t>(*c.fsdpUnit), true},
         {"module", c.scope->displayName(), true}},
        {Argument(out)});
    n->setScope(const_cast<ModuleScope *>(c.scope), c.callPath);
    n->setGradEnabled(c.gradEnabled);
    values.assign(out.begin(), out.end());
  }

  /// The pre-hooks of one call, in registration order; returns the value each input becomes.
  llvm::Error preHooks(GraphBuilder &b, const ModuleCall &c, std::vector<Value *> &inputs) {
    if (c.fsdpUnit)
      fsdpHook(b, c, "commlens::fsdp_pre_forward", inputs, "pre");
    for (const ParallelStyle *style : c.styles) {
      switch (style->kind) {
      case ParallelStyle::Kind::Colwise:
      case ParallelStyle::Kind::Rowwise: {
        if (inputs.empty())
          return makeError("{} on {}: the module call has no tensor input", name(style->kind).str(), c.scope->displayName());
        std::optional<Placement> desired = first(style->desiredInputLayouts);
        if (!desired) // RowwiseParallel picks it per module type when applied
          desired = isEmbedding(*c.scope) ? Placement::replicate() : Placement::shard(-1);
        inputs[0] = emitHook(b, c, "commlens::annotate", inputs[0],
                             {{"layout", placementArg(first(style->inputLayouts)), false},
                              {"desired", placementArg(desired), false},
                              {"use_local_output", false, false}},
                             "in");
        break;
      }
      case ParallelStyle::Kind::Sequence:
        if (inputs.empty())
          return makeError("SequenceParallel on {}: the module call has no tensor input", c.scope->displayName());
        inputs[0] = emitHook(b, c, "commlens::sequence_parallel_input", inputs[0],
                             {{"sharding", placementArg(style->sequenceSharding), false}}, "in");
        break;
      case ParallelStyle::Kind::PrepareModuleInput:
      case ParallelStyle::Kind::PrepareModuleInputOutput: {
        if (!style->inputLayouts)
          break;
        if (style->inputLayouts->size() != inputs.size())
          return makeError("{} on {}: {} input_layouts for {} tensor inputs found in the graph (inputs are taken in "
                           "order of first use)",
                           name(style->kind).str(), c.scope->displayName(), style->inputLayouts->size(), inputs.size());
        bool useLocal = style->kind == ParallelStyle::Kind::PrepareModuleInput ? style->useLocalOutput : style->useLocalInput;
        for (size_t i = 0; i < inputs.size(); ++i) {
          const std::optional<Placement> &layout = (*style->inputLayouts)[i];
          if (!layout)
            continue;
          std::optional<Placement> desired =
              style->desiredInputLayouts && i < style->desiredInputLayouts->size() ? (*style->desiredInputLayouts)[i]
                                                                                   : std::nullopt;
          inputs[i] = emitHook(b, c, "commlens::annotate", inputs[i],
                               {{"layout", placementArg(layout), false},
                                {"desired", placementArg(desired), false},
                                {"use_local_output", useLocal, false}},
                               "in");
        }
        break;
      }
      case ParallelStyle::Kind::PrepareModuleOutput:
        break;
      }
    }
    return llvm::Error::success();
  }

  llvm::Error postHooks(GraphBuilder &b, const ModuleCall &c, std::vector<Value *> &outputs) {
    for (const ParallelStyle *style : c.styles) {
      switch (style->kind) {
      case ParallelStyle::Kind::Colwise:
      case ParallelStyle::Kind::Rowwise:
      case ParallelStyle::Kind::Sequence: {
        if (outputs.size() != 1)
          return makeError("{} on {}: expected one tensor output, found {}", name(style->kind).str(),
                           c.scope->displayName(), outputs.size());
        std::optional<Placement> layout =
            style->kind == ParallelStyle::Kind::Sequence ? std::nullopt : first(style->outputLayouts);
        outputs[0] = emitHook(b, c, "commlens::redistribute_output", outputs[0],
                              {{"layout", placementArg(layout), false}, {"use_local_output", style->useLocalOutput, false}},
                              "out");
        break;
      }
      case ParallelStyle::Kind::PrepareModuleOutput:
      case ParallelStyle::Kind::PrepareModuleInputOutput: {
        if (!style->outputLayouts)
          break;
        if (style->outputLayouts->size() != outputs.size())
          return makeError("{} on {}: {} output_layouts for {} tensor outputs found in the graph", name(style->kind).str(),
                           c.scope->displayName(), style->outputLayouts->size(), outputs.size());
        for (size_t i = 0; i < outputs.size(); ++i) {
          const std::optional<Placement> &layout = (*style->outputLayouts)[i];
          if (!layout)
            continue;
          std::optional<Placement> desired =
              style->desiredOutputLayouts && i < style->desiredOutputLayouts->size() ? (*style->desiredOutputLayouts)[i]
                                                                                     : std::nullopt;
          outputs[i] = emitHook(b, c, "commlens::annotate", outputs[i],
                                {{"layout", placementArg(layout), false},
                                 {"desired", placementArg(desired), false},
                                 {"use_local_output", style->useLocalOutput, false}},
                                "out");
        }
        break;
      }
      default:
        break;
      }
    }
    if (c.fsdpUnit)
      fsdpHook(b, c, "commlens::fsdp_post_forward", outputs, "post");
    return llvm::Error::success();
  }

  /// Tied parameters reach the graph through one placeholder, but parallelize_module gives each
  /// module its own (it re-registers the parameters it distributes, which unties them). A use
  /// in module M reads the tied name registered on M (or its nearest ancestor).
  void untieParameters() {
    std::map<std::string, std::vector<const InputSpec *>> groups; // canonical FQN -> members
    for (const InputSpec &in : graph_.inputs())
      if (in.kind == InputKind::Parameter && in.value)
        groups[in.aliasOf.empty() ? in.target : in.aliasOf].push_back(&in);
    for (auto &[canonical, members] : groups) {
      if (members.size() < 2)
        continue;
      for (const InputSpec *m : members)
        tiedGroup_[m->value] = members;
    }
  }

  const Value *ownerOfUse(const Value *v, const ModuleScope *scope) const {
    auto it = tiedGroup_.find(v);
    if (it == tiedGroup_.end())
      return v;
    const InputSpec *best = nullptr;
    size_t bestLen = 0;
    for (const ModuleScope *s = scope; s; s = s->parent()) {
      std::string prefix = s->path().empty() ? "" : s->path() + ".";
      for (const InputSpec *m : it->second)
        if (std::string target = pathAfterCheckpointWrappers(plan_, m->target);
            llvm::StringRef(target).startswith(prefix) && !llvm::StringRef(target).drop_front(prefix.size()).contains('.') &&
            (!best || prefix.size() > bestLen)) {
          best = m;
          bestLen = prefix.size();
        }
      if (best)
        break;
    }
    return best ? best->value : v;
  }

  llvm::Error rewrite() {
    untieParameters();
    GraphBuilder b(graph_);
    // Calls starting / ending at each node: outer calls open first and close last.
    std::multimap<unsigned, ModuleCall *> opening, closing;
    for (ModuleCall &c : calls_) {
      opening.emplace(c.firstNode, &c);
      closing.emplace(c.lastNode, &c);
    }
    struct Saved {
      const ModuleCall *call;
      std::vector<std::pair<const Value *, Value *>> inputs;
    };
    std::vector<Saved> open;
    for (const auto &n : graph_.nodes()) {
      auto [ob, oe] = opening.equal_range(n->index());
      std::vector<ModuleCall *> starting;
      for (auto it = ob; it != oe; ++it)
        starting.push_back(it->second);
      std::sort(starting.begin(), starting.end(),
                [](const ModuleCall *a, const ModuleCall *b) { return a->scope->depth() < b->scope->depth(); });
      for (ModuleCall *c : starting) {
        Saved saved{c, {}};
        std::vector<Value *> inputs;
        for (const Value *v : c->inputs) {
          saved.inputs.emplace_back(v, b.map(v));
          inputs.push_back(b.map(v));
        }
        if (llvm::Error err = preHooks(b, *c, inputs))
          return err;
        for (size_t i = 0; i < inputs.size(); ++i)
          b.bind(c->inputs[i], inputs[i]);
        open.push_back(std::move(saved));
      }
      // Uses of a tied parameter read the copy registered on the using module.
      std::vector<std::pair<const Value *, Value *>> untied;
      for (Value *v : n->operands())
        if (const Value *owner = ownerOfUse(v, n->scope()); owner != v) {
          untied.emplace_back(v, b.map(v));
          b.bind(v, b.map(owner));
        }
      b.copy(*n);
      for (const auto &[v, mapped] : untied)
        b.bind(v, mapped);
      auto [cb, ce] = closing.equal_range(n->index());
      std::vector<ModuleCall *> ending;
      for (auto it = cb; it != ce; ++it)
        ending.push_back(it->second);
      std::sort(ending.begin(), ending.end(),
                [](const ModuleCall *a, const ModuleCall *b) { return a->scope->depth() > b->scope->depth(); });
      for (ModuleCall *c : ending) {
        assert(!open.empty() && open.back().call == c && "module calls nest");
        for (const auto &[old, mapped] : open.back().inputs)
          b.bind(old, mapped);
        open.pop_back();
        std::vector<Value *> outputs;
        for (const Value *v : c->outputs)
          outputs.push_back(b.map(v));
        if (llvm::Error err = postHooks(b, *c, outputs))
          return err;
        for (size_t i = 0; i < outputs.size(); ++i)
          b.bind(c->outputs[i], outputs[i]);
      }
    }
    // Parameter and input layouts were keyed by the old graph's values.
    llvm::DenseMap<const Value *, DTensorLayout> remapped;
    for (auto &[v, layout] : ctx_.state.dtensors)
      remapped[b.map(v)] = layout;
    ctx_.state.dtensors = std::move(remapped);
    for (FsdpUnit &u : ctx_.state.fsdp.units)
      for (const Value *&p : u.params)
        p = b.map(p);
    llvm::DenseSet<const Value *> retrained;
    for (const Value *v : ctx_.state.retrainedByStyle)
      retrained.insert(b.map(v));
    ctx_.state.retrainedByStyle = std::move(retrained);
    ctx_.program.replaceGraph(b.finish());
    return llvm::Error::success();
  }

  PassContext &ctx_;
  const ShardingPlan &plan_;
  const Graph &graph_;
  std::map<const ModuleScope *, std::vector<const ParallelStyle *>> styles_;
  std::map<const ModuleScope *, unsigned> fsdpUnitOf_;
  llvm::DenseMap<const Value *, const InputSpec *> explicitlyPlaced_; // by the plan's `placements`
  std::vector<std::pair<const ModuleScope *, const ParallelStyle *>> applications_;
  std::vector<ModuleCall> calls_;
  llvm::DenseMap<const Value *, std::vector<const InputSpec *>> tiedGroup_;
};

} // namespace

llvm::Error ApplyShardingPlan::run(PassContext &ctx) {
  if (!ctx.plan)
    return makeError("apply-plan needs a plan");
  return PlanApplier(ctx).run();
}

} // namespace commlens
