#include "reports/PredictionReport.h"

#include "reports/JsonWriter.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <functional>
#include <future>
#include <map>
#include <optional>

namespace commlens {
namespace {

constexpr const char *kGlobal = "Global";

std::string moduleType(const ModuleScope &s) { return fmt::format("class '{}'", s.type()); }

CommPhase commPhase(Phase p) { return p == Phase::Forward ? CommPhase::Forward : CommPhase::Backward; }

/// Scopes in CommDebugMode's tree order: depth-first, children in order of first execution.
void preOrder(const ModuleScope *s, std::vector<const ModuleScope *> &out) {
  out.push_back(s);
  for (const ModuleScope *c : s->children())
    preOrder(c, out);
}

std::string placementsRepr(const Placements &p) {
  std::string out = "(";
  for (const Placement &x : p)
    out += x.torchStr() + ",";
  return out + ")";
}

/// The member `key`: a double as the reports have always written it (nlohmann's shortest round
/// trip, "12.0" for integral values, as Python's json writes them too); llvm::json would write
/// 17 digits.
void attributeDouble(JsonWriter &j, llvm::StringRef key, double d) {
  j.attributeBegin(key);
  j.rawValue([&](llvm::raw_ostream &os) { os << nlohmann::json(d).dump(); });
  j.attributeEnd();
}

/// A string value. llvm::json quotes byte by byte through the stream (a fifth of the report's
/// time); a string with nothing to escape (printable ASCII but '"' and '\\') is written as is,
/// the same bytes quote() gives.
void stringValue(JsonWriter &j, llvm::StringRef s) {
  if (llvm::all_of(s, [](unsigned char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }))
    j.rawValue([&](llvm::raw_ostream &os) { os << '"' << s << '"'; });
  else
    j.value(s);
}

void stringAttribute(JsonWriter &j, llvm::StringRef key, llvm::StringRef s) {
  j.attributeBegin(key);
  stringValue(j, s);
  j.attributeEnd();
}

/// Each collective record under the module that caused it, in record order.
llvm::DenseMap<const ModuleScope *, std::vector<const CollectiveRecord *>> recordsByModule(const PredictionState &state) {
  llvm::DenseMap<const ModuleScope *, std::vector<const CollectiveRecord *>> own;
  for (const CollectiveRecord &c : state.collectives)
    own[c.module].push_back(&c);
  return own;
}

/// One collective's record. Keys in sorted order here and below: the tree reads as it did when
/// a sorted-map JSON library wrote it.
void writeRecord(JsonWriter &j, const CollectiveRecord &r) {
  j.object([&] {
    if (r.approximate)
      j.attribute("approximate", true);
    stringAttribute(j, "argument", r.argument);
    stringAttribute(j, "aten_op", r.node ? r.node->opString() : "");
    if (!r.bytesKnown) // bytes_per_rank is at the program's dtype, not the run's
      j.attribute("bytes_known", false);
    j.attribute("bytes_per_rank", r.bytesPerRank);
    if (r.bytesRange) // the routing's: bytes_per_rank is the routing model's value
      j.attributeArray("bytes_per_rank_bounds", [&] {
        j.value(r.bytesRange->first);
        j.value(r.bytesRange->second);
      });
    stringAttribute(j, "dst", r.dst.str());
    stringAttribute(j, "from", str(r.fromPlacements));
    j.attributeArray("mesh_dims", [&] {
      for (unsigned d : r.meshDims)
        j.value(static_cast<int64_t>(d));
    });
    stringAttribute(j, "module", r.module ? r.module->displayName() : kGlobal);
    stringAttribute(j, "node", r.node ? r.node->name() : "");
    stringAttribute(j, "op", r.opKey);
    if (r.bytesRange && r.routingSkew != 1.0)
      attributeDouble(j, "routing_skew", r.routingSkew);
    stringAttribute(j, "src", r.src.str());
    if (r.time)
      j.attributeObject("time", [&] {
        j.attribute("algorithm", r.time->algorithm);
        attributeDouble(j, "bus_bandwidth_GBps", r.time->busBandwidthGBps);
        j.attribute("message_bytes", r.time->messageBytes);
        j.attribute("nodes", r.time->nodes);
        j.attribute("ranks", r.time->ranks);
        attributeDouble(j, "us", r.time->us);
      });
    stringAttribute(j, "to", str(r.toPlacements));
    stringAttribute(j, "why", r.why);
  });
}

void add(CommTotals &t, const CollectiveRecord &c) {
  ++t.collectives;
  t.bytesPerRank += c.bytesPerRank;
  if (c.time)
    t.timeUs += c.time->us;
}

} // namespace

std::string formatMicroseconds(double us) {
  if (us >= 1e6)
    return fmt::format("{:.3f} s", us / 1e6);
  if (us >= 1e3)
    return fmt::format("{:.3f} ms", us / 1e3);
  return fmt::format("{:.1f} us", us);
}

std::string routingModel(const CollectiveRecord &c) {
  return c.routingSkew == 1.0 ? "balanced routing" : fmt::format("routing skew {:g}: the busiest rank", c.routingSkew);
}

llvm::Expected<PredictionReport> PredictionReport::build(const ExportedProgram &program, const ShardingPlan &plan,
                                                         const PredictionState &state, bool forward, bool backward,
                                                         const Cluster *cluster) {
  PredictionReport r;
  r.cluster = cluster;
  r.program = &program;
  r.plan = &plan;
  r.state = &state;
  r.forward = forward;
  r.backward = backward;
  std::vector<const ModuleScope *> order;
  preOrder(program.graph().scopes().root(), order);
  for (const InputSpec &in : program.graph().inputs()) {
    const DTensorLayout *l = in.kind == InputKind::Parameter && in.value ? state.layout(in.value) : nullptr;
    if (!l)
      continue;
    // scopes are named on the tree checkpoint_wrapper leaves; parameter targets are not
    std::string target = pathAfterCheckpointWrappers(plan, in.target);
    auto [owner, name] = llvm::StringRef(target).contains('.') ? llvm::StringRef(target).rsplit('.')
                                                               : std::make_pair(llvm::StringRef(), llvm::StringRef(target));
    r.parameters_[owner.str()].emplace_back(name.str(), placementsRepr(l->placements));
  }
  if (auto global = r.counts.addModule(kGlobal, 0); !global)
    return global.takeError();
  for (const ModuleScope *s : order) {
    // One row per name, as CommDebugMode's module tracker names modules: a module that runs under
    // two parents (its path in two places of the tree) adds up under the first. Its subtree then
    // hangs under the deepest row listed. (Without this, fuzz/predict found a program whose second
    // row of one name failed here.)
    if (r.counts.find(s->displayName()))
      continue;
    unsigned depth = std::min(s->depth() + 1, r.counts.modules().back().depth + 1);
    if (auto row = r.counts.addModule(s->displayName(), depth, moduleType(*s)); !row)
      return row.takeError();
  }
  llvm::DenseSet<const CommCell *> unknownBytes; // cells a collective of unknown size joins
  for (const CollectiveRecord &c : state.collectives) {
    if (!r.includes(c))
      continue;
    auto bump = [&](llvm::StringRef fqn) {
      CommCell &cell = r.counts.find(fqn)->phase(commPhase(c.phase))[c.opKey];
      ++cell.count;
      if (!c.bytesKnown)
        unknownBytes.insert(&cell);
      if (unknownBytes.count(&cell)) {
        cell.bytes.reset();
        cell.bytesBounds.reset();
      } else {
        int64_t before = cell.bytes.value_or(0);
        cell.bytes = before + c.bytesPerRank;
        if (c.bytesRange || cell.bytesBounds) { // exact bytes are their own bounds
          auto [lo, hi] = cell.bytesBounds.value_or(std::make_pair(before, before));
          auto [rlo, rhi] = c.bytesRange.value_or(std::make_pair(c.bytesPerRank, c.bytesPerRank));
          cell.bytesBounds = std::make_pair(lo + rlo, hi + rhi);
        }
      }
      if (c.time)
        cell.timeUs = cell.timeUs.value_or(0) + c.time->us;
      cell.approximate |= c.approximate;
    };
    bump(kGlobal);
    for (const ModuleScope *s = c.module; s; s = s->parent())
      bump(s->displayName());
  }
  return r;
}

CommTotals PredictionReport::totals(Phase phase) const {
  CommTotals t;
  for (const CollectiveRecord &c : state->collectives)
    if (c.phase == phase && includes(c))
      add(t, c);
  return t;
}

std::vector<MeshDimTotals> PredictionReport::meshDimTotals() const {
  std::vector<MeshDimTotals> out;
  for (const CollectiveRecord &c : state->collectives) {
    if (!includes(c))
      continue;
    std::string dims = plan->mesh.groupName(c.meshDims);
    auto it = std::find_if(out.begin(), out.end(), [&](const MeshDimTotals &m) { return m.dims == dims; });
    if (it == out.end()) {
      out.push_back({dims, c.time ? c.time->ranks : 1, c.time ? c.time->nodes : 1, {}, {}});
      if (!c.time)
        for (unsigned d : c.meshDims)
          out.back().ranks *= plan->mesh.shape[d];
      it = std::prev(out.end());
    }
    add(c.phase == Phase::Forward ? it->forward : it->backward, c);
  }
  return out;
}

llvm::ArrayRef<std::pair<std::string, std::string>> PredictionReport::dtensorParameters(const ModuleScope &s) const {
  auto it = parameters_.find(s.path());
  if (it == parameters_.end())
    return {};
  return it->second;
}

void PredictionReport::printTable(llvm::raw_ostream &os, int noiseLevel) const {
  auto own = recordsByModule(*state);
  std::vector<const ModuleScope *> order;
  preOrder(program->graph().scopes().root(), order);

  auto section = [&](const ModuleCounts &m, unsigned indent, CommPhase phase, const ModuleScope *scope) {
    const CommCellMap &cells = m.phase(phase);
    bool wanted = phase == CommPhase::Forward ? forward : backward;
    if (!wanted)
      return;
    std::string pad(indent, ' ');
    os << pad << (phase == CommPhase::Forward ? "FORWARD PASS" : "BACKWARD PASS") << "\n";
    for (const auto &[key, cell] : cells) {
      os << pad << "  *" << key << ": " << cell.count << (cell.approximate ? " (approximate)" : "");
      if (cell.timeUs)
        os << "  [" << formatMicroseconds(*cell.timeUs) << "]";
      os << "\n";
    }
    if (noiseLevel >= 1) // scope null: Global's own records (the loss's collectives)
      for (const CollectiveRecord *c : own[scope])
        if (commPhase(c->phase) == phase)
          os << pad << "  **" << c->opKey << " on mesh dim " << fmt::format("{}", fmt::join(c->meshDims, ",")) << ": " << str(c->fromPlacements)
             << " -> " << str(c->toPlacements) << ", " << c->bytesPerRank << " B/rank"
             << (c->bytesRange ? fmt::format(" ({}; {} to {} by the routing)", routingModel(*c), c->bytesRange->first,
                                             c->bytesRange->second)
                               : "")
             << ", "
             << (c->time ? fmt::format("{} ({}, {} ranks on {} node{}), ", formatMicroseconds(c->time->us), c->time->algorithm,
                                       c->time->ranks, c->time->nodes, c->time->nodes == 1 ? "" : "s")
                         : "")
             << c->node->opString() << " '" << c->argument << "' (" << c->why << ")\n";
  };
  const ModuleCounts *global = counts.find(kGlobal);
  os << "Global\n";
  section(*global, 2, CommPhase::Forward, nullptr);
  section(*global, 2, CommPhase::Backward, nullptr);
  for (const ModuleScope *s : order) {
    const ModuleCounts &m = *counts.find(s->displayName());
    std::string pad(2 * (s->depth() + 1), ' ');
    os << pad << s->displayName() << "\n";
    if (noiseLevel >= 1) {
      os << pad << "*module type: " << moduleType(*s) << "\n";
      auto params = dtensorParameters(*s);
      if (!params.empty())
        os << pad << "*Parameter List\n";
      for (const auto &[name, placements] : params)
        os << pad << " *" << name << ": " << placements << "\n";
    }
    section(m, pad.size() + 2, CommPhase::Forward, s);
    section(m, pad.size() + 2, CommPhase::Backward, s);
  }
  if (cluster)
    printTimeSummary(os);
  for (const std::string &w : state->warnings)
    os << "warning: " << w << "\n";
}

void PredictionReport::printTimeSummary(llvm::raw_ostream &os) const {
  os << "communication per step on " << cluster->str() << "\n"
     << "  (collectives back to back, no overlap with compute or each other)\n";
  auto line = [&](const std::string &label, const CommTotals &t) {
    os << fmt::format("  {:<28} {:>6} collectives  {:>14} B/rank  {:>12}\n", label, t.collectives, t.bytesPerRank,
                      formatMicroseconds(t.timeUs));
  };
  CommTotals fw = totals(Phase::Forward), bw = totals(Phase::Backward);
  if (forward)
    line("forward", fw);
  if (backward)
    line("backward", bw);
  line("step", fw + bw);
  for (const MeshDimTotals &m : meshDimTotals())
    line(fmt::format("mesh dim {} ({} ranks, {} node{})", m.dims, m.ranks, m.nodes, m.nodes == 1 ? "" : "s"), m.both());
}

std::string PredictionReport::toJson() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  writeJson(os);
  return out;
}

namespace {

/// Writes the generate_json_dump tree of a report. The module subtrees are independent, and a
/// large model's tree is megabytes of per-op records: a second writer renders a share of them on
/// another thread at the same time (both only read the report), and the first writes that text
/// where it belongs.
class JsonTreeWriter {
public:
  /// What every writer of one report reads.
  struct Inputs {
    const PredictionReport &report;
    llvm::DenseMap<const ModuleScope *, std::vector<const CollectiveRecord *>> own;
    /// Backward ATen ops per module, as CommDebugMode lists them (name, DTensor input shardings).
    llvm::DenseMap<const ModuleScope *, std::vector<const Node *>> bwOps;
  };
  class Handover;

  JsonTreeWriter(const Inputs &in, JsonWriter &j, Handover *handover = nullptr)
      : in_(in), r_(in.report), j(j), handover_(handover) {}

  void module(const ModuleScope *s) {
    const ModuleCounts &m = *r_.counts.find(s->displayName());
    j.object([&] {
      approximate(m);
      j.attributeArray("children", [&] {
        for (const ModuleScope *c : s->children())
          child(c);
      });
      counts(m, s, true);
      j.attribute("fqn", s->displayName());
      j.attribute("module_type", moduleType(*s));
      ops(s);
      j.attributeArray("parameters", [&] {
        for (const auto &parameter : r_.dtensorParameters(*s)) // named: clang before 16 captures no binding
          j.array([&] {
            j.value(parameter.first);
            j.value(parameter.second);
          });
      });
    });
  }

  void child(const ModuleScope *c);

  void ops(const ModuleScope *s) {
    // CommDebugMode's lists: the backward ops, and apart those run while recomputation is tracked
    auto list = [&](const char *key, bool checkpointing) {
      j.attributeArray(key, [&] {
        auto it = in_.bwOps.find(s);
        if (it == in_.bwOps.end())
          return;
        for (const Node *n : it->second)
          if (r_.state->checkpointingOps.contains(n) == checkpointing)
            op(n);
      });
    };
    list("operations_backward", false);
    list("operations_checkpointing", true);
    j.attributeArray("operations_forward", [] {});
  }

  void op(const Node *n) {
    llvm::SmallVector<const Value *, 4> sharded;
    n->forEachOperand([&](const Value *v) {
      if (v->kind() == ValueKind::Tensor && r_.state->layout(v))
        sharded.push_back(v);
    });
    j.object([&] {
      j.attributeArray("input_shape", [&] {
        for (const Value *v : sharded)
          stringValue(j, v->meta() ? v->meta()->str() : "");
      });
      j.attributeArray("input_sharding", [&] {
        for (const Value *v : sharded)
          stringValue(j, placementsRepr(r_.state->layout(v)->placements));
      });
      j.attribute("is_bw", true);
      stringAttribute(j, "name", "aten." + n->op().name + "." + n->op().overload);
    });
  }

  void approximate(const ModuleCounts &m) {
    for (CommPhase p : kPhases)
      if (llvm::any_of(m.phase(p), [](const auto &entry) { return entry.second.approximate; }))
        j.attributeArray(phaseKey("approximate_", p), [&] {
          for (const auto &[op, cell] : m.phase(p))
            if (cell.approximate)
              j.value(op);
        });
  }

  /// collective_bytes_*, collective_time_us_*, collectives_* and (modules) their detail records.
  void counts(const ModuleCounts &m, const ModuleScope *s, bool details) {
    for (CommPhase p : kPhases) // unknown bytes where an operand's run-time dtype is (FSDP mixed precision)
      j.attributeObject(phaseKey("collective_bytes_", p), [&] {
        for (const auto &[op, cell] : m.phase(p))
          if (cell.bytes)
            j.attribute(op, *cell.bytes);
      });
    for (CommPhase p : kPhases) // only cells whose bytes depend on an MoE layer's routing
      if (llvm::any_of(m.phase(p), [](const auto &kv) { return kv.second.bytes && kv.second.bytesBounds; }))
        j.attributeObject(phaseKey("collective_bytes_bounds_", p), [&] {
          for (const auto &[op, cell] : m.phase(p))
            if (cell.bytes && cell.bytesBounds)
              j.attributeArray(op, [&] {
                j.value(cell.bytesBounds->first);
                j.value(cell.bytesBounds->second);
              });
        });
    if (r_.cluster)
      for (CommPhase p : kPhases)
        j.attributeObject(phaseKey("collective_time_us_", p), [&] {
          for (const auto &[op, cell] : m.phase(p))
            if (cell.timeUs)
              attributeDouble(j, op, *cell.timeUs);
        });
    for (CommPhase p : kPhases) {
      j.attributeArray(phaseKey("collectives_", p), [&] {
        for (const auto &entry : m.phase(p)) // named: clang before 16 captures no binding
          j.array([&] {
            stringValue(j, entry.first);
            j.value(entry.second.count);
          });
      });
      if (details)
        j.attributeArray(phaseKey("collectives_", p) + "_detail", [&] {
          auto it = in_.own.find(s);
          if (it != in_.own.end())
            for (const CollectiveRecord *c : it->second)
              if (commPhase(c->phase) == p)
                writeRecord(j, *c);
        });
    }
  }

private:
  static constexpr CommPhase kPhases[] = {CommPhase::Backward, CommPhase::Forward}; // in key order
  static std::string phaseKey(const char *prefix, CommPhase p) { return fmt::format("{}{}", prefix, phaseName(p).str()); }

  const Inputs &in_;
  const PredictionReport &r_;
  JsonWriter &j;
  Handover *handover_;
};

/// Module subtrees rendered by a second writer on another thread, started at construction.
class JsonTreeWriter::Handover {
public:
  Handover(const Inputs &in, std::vector<const ModuleScope *> subtrees)
      : modules_(subtrees.begin(), subtrees.end()),
        rendering_(std::async(std::launch::async, [&in, subtrees = std::move(subtrees)] { return render(in, subtrees); })) {}

  /// The text of `s`'s value when it is one of the subtrees (waiting for the rendering).
  std::optional<llvm::StringRef> text(const ModuleScope *s) {
    if (!modules_.count(s))
      return std::nullopt;
    if (!rendered_)
      rendered_ = rendering_.get();
    auto [begin, size] = rendered_->ranges.lookup(s);
    return llvm::StringRef(rendered_->text).substr(begin, size);
  }

private:
  struct Rendered {
    std::string text;
    llvm::DenseMap<const ModuleScope *, std::pair<size_t, size_t>> ranges; // each value's, in text
  };

  /// The subtrees (siblings, in order) as a writer at their depth in the tree writes them.
  static Rendered render(const Inputs &in, llvm::ArrayRef<const ModuleScope *> subtrees) {
    Rendered out;
    llvm::raw_string_ostream os(out.text);
    os.SetBuffered(); // as the file a report goes to: unbuffered, each token was an append
    JsonWriter j(os, 2);
    // The containers around a module's object: per level above it an object and its "children"
    // array, and Global's. Indentation depends on their number only.
    unsigned enclosing = 2 * (subtrees.front()->depth() + 1);
    for (unsigned i = 0; i < enclosing; ++i)
      j.arrayBegin();
    JsonTreeWriter writer(in, j);
    for (const ModuleScope *s : subtrees) {
      size_t before = os.tell();
      writer.module(s);
      os.flush();
      size_t begin = out.text.find('{', before); // past the separator and indentation before it
      out.ranges[s] = {begin, out.text.size() - begin};
    }
    for (unsigned i = 0; i < enclosing; ++i)
      j.arrayEnd();
    os.flush();
    return out;
  }

  llvm::DenseSet<const ModuleScope *> modules_;
  std::future<Rendered> rendering_;
  std::optional<Rendered> rendered_;
};

void JsonTreeWriter::child(const ModuleScope *c) {
  if (handover_)
    if (std::optional<llvm::StringRef> text = handover_->text(c)) {
      j.rawValue([&](llvm::raw_ostream &os) { os << *text; });
      return;
    }
  module(c);
}

/// The siblings whose subtrees hold about half of the tree's records (op records and collective
/// records, the bulk of its text): the last children of the deepest module holding more than
/// half. None when there is nothing below the root to share.
std::vector<const ModuleScope *> halfOfTheTree(const JsonTreeWriter::Inputs &in, const ModuleScope *root) {
  llvm::DenseMap<const ModuleScope *, size_t> weight;
  std::function<size_t(const ModuleScope *)> measure = [&](const ModuleScope *s) {
    size_t w = 1;
    if (auto it = in.bwOps.find(s); it != in.bwOps.end())
      w += it->second.size();
    if (auto it = in.own.find(s); it != in.own.end())
      w += it->second.size();
    for (const ModuleScope *c : s->children())
      w += measure(c);
    return weight[s] = w;
  };
  size_t total = measure(root);
  const ModuleScope *parent = root;
  for (;;) {
    const ModuleScope *heaviest = nullptr;
    for (const ModuleScope *c : parent->children())
      if (!heaviest || weight[c] > weight[heaviest])
        heaviest = c;
    if (!heaviest || 2 * weight[heaviest] <= total)
      break;
    parent = heaviest;
  }
  std::vector<const ModuleScope *> half;
  size_t taken = 0;
  for (auto it = parent->children().rbegin(); it != parent->children().rend() && 2 * taken < total; ++it) {
    half.insert(half.begin(), *it);
    taken += weight[*it];
  }
  return half;
}

} // namespace

llvm::StringRef PredictionReport::phaseName() const {
  if (inference)
    return "inference";
  return forward && backward ? "both" : (forward ? "forward" : "backward");
}

void PredictionReport::writeJson(llvm::raw_ostream &os) const {
  JsonTreeWriter::Inputs in{*this, recordsByModule(*state), llvm::DenseMap<const ModuleScope *, std::vector<const Node *>>()};
  if (backward && state->backward)
    for (const auto &n : state->backward->nodes())
      if (n->op().ns == "aten")
        in.bwOps[n->scope()].push_back(n.get());

  const ModuleScope *root = program->graph().scopes().root();
  std::optional<JsonTreeWriter::Handover> handover;
  if (std::vector<const ModuleScope *> half = halfOfTheTree(in, root); !half.empty())
    handover.emplace(in, std::move(half));

  JsonWriter j(os, 2);
  JsonTreeWriter writer(in, j, handover ? &*handover : nullptr);
  const ModuleCounts &global = *counts.find(kGlobal);
  llvm::StringRef phase = phaseName();
  j.object([&] {
    writer.approximate(global);
    j.attributeArray("children", [&] { writer.child(root); });
    // Global's own records (the loss's collectives, outside every module) where there are any.
    writer.counts(global, nullptr, in.own.count(nullptr) != 0);
    j.attributeObject("commlens", [&] {
      auto writeTotals = [&](llvm::StringRef key, const CommTotals &t) {
        j.attributeObject(key, [&] {
          j.attribute("bytes_per_rank", t.bytesPerRank);
          j.attribute("collectives", t.collectives);
          attributeDouble(j, "time_us", t.timeUs);
        });
      };
      if (cluster)
        j.attribute("cluster", cluster->str());
      j.attribute("mesh", plan->mesh.str());
      // Each user output's DTensor placements as torch writes them (null: a plain tensor or no
      // tensor): what the forward hands back, which the OpInfo sweep checks against DTensor's.
      j.attributeArray("outputs", [&] {
        for (const OutputSpec &o : program->graph().outputs()) {
          if (o.kind != OutputKind::UserOutput)
            continue;
          const DTensorLayout *layout = o.value.isTensor() ? state->layout(o.value.tensor()) : nullptr;
          if (!layout) {
            j.rawValue([](llvm::raw_ostream &os) { os << "null"; });
            continue;
          }
          j.array([&] {
            for (const Placement &p : layout->placements)
              j.value(p.torchStr());
          });
        }
      });
      j.attribute("phases", phase);
      j.attribute("source", "predict");
      if (cluster)
        j.attributeObject("step", [&] {
          CommTotals fw = totals(Phase::Forward), bw = totals(Phase::Backward);
          writeTotals("backward", bw);
          writeTotals("forward", fw);
          j.attributeArray("mesh_dims", [&] {
            for (const MeshDimTotals &m : meshDimTotals())
              j.object([&] {
                writeTotals("backward", m.backward);
                j.attribute("dims", m.dims);
                writeTotals("forward", m.forward);
                j.attribute("nodes", m.nodes);
                j.attribute("ranks", m.ranks);
              });
          });
          attributeDouble(j, "time_us", fw.timeUs + bw.timeUs);
        });
      j.attributeArray("warnings", [&] {
        for (const std::string &w : state->warnings)
          j.value(w);
      });
    });
    j.attribute("fqn", kGlobal);
    j.attribute("module_type", "");
    writer.ops(nullptr);
    j.attributeArray("parameters", [] {});
    j.attribute("phase", phase);
  });
  os << "\n";
}

} // namespace commlens
