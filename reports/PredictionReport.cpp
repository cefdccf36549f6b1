#include "reports/PredictionReport.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <functional>
#include <map>

namespace commlens {
namespace {

using nlohmann::json;

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

json recordJson(const CollectiveRecord &r) {
  json j = {{"op", r.opKey},
            {"mesh_dims", std::vector<unsigned>(r.meshDims.begin(), r.meshDims.end())},
            {"src", r.src.str()},
            {"dst", r.dst.str()},
            {"from", str(r.fromPlacements)},
            {"to", str(r.toPlacements)},
            {"bytes_per_rank", r.bytesPerRank},
            {"aten_op", r.node ? r.node->opString() : ""},
            {"node", r.node ? r.node->name() : ""},
            {"argument", r.argument},
            {"module", r.module ? r.module->displayName() : kGlobal},
            {"why", r.why}};
  if (r.approximate)
    j["approximate"] = true;
  if (!r.bytesKnown) // bytes_per_rank is at the program's dtype, not the run's
    j["bytes_known"] = false;
  if (r.time)
    j["time"] = {{"us", r.time->us},
                 {"algorithm", r.time->algorithm},
                 {"ranks", r.time->ranks},
                 {"nodes", r.time->nodes},
                 {"message_bytes", r.time->messageBytes},
                 {"bus_bandwidth_GBps", r.time->busBandwidthGBps}};
  return j;
}

/// "tp", "dp,tp": the plan mesh's names of a collective's dims (indices where unnamed).
std::string dimNames(const DeviceMesh &mesh, llvm::ArrayRef<unsigned> dims) {
  std::string out;
  for (unsigned d : dims) {
    if (!out.empty())
      out += ",";
    out += d < mesh.dimNames.size() && !mesh.dimNames[d].empty() ? mesh.dimNames[d] : std::to_string(d);
  }
  return out;
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

PredictionReport PredictionReport::build(const ExportedProgram &program, const ShardingPlan &plan,
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
  (void)llvm::cantFail(r.counts.addModule(kGlobal, 0));
  for (const ModuleScope *s : order) {
    // One row per name, as CommDebugMode's module tracker names modules: a module that runs under
    // two parents (its path in two places of the tree) adds up under the first. Its subtree then
    // hangs under the deepest row listed. (cantFail here aborted on such a program: fuzz/predict.)
    if (r.counts.find(s->displayName()))
      continue;
    unsigned depth = std::min(s->depth() + 1, r.counts.modules().back().depth + 1);
    (void)llvm::cantFail(r.counts.addModule(s->displayName(), depth, moduleType(*s)));
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
      if (unknownBytes.count(&cell))
        cell.bytes.reset();
      else
        cell.bytes = cell.bytes.value_or(0) + c.bytesPerRank;
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
    std::string dims = dimNames(plan->mesh, c.meshDims);
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
  std::map<const ModuleScope *, std::vector<const CollectiveRecord *>> own;
  for (const CollectiveRecord &c : state->collectives)
    own[c.module].push_back(&c);
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
    if (noiseLevel >= 1 && scope)
      for (const CollectiveRecord *c : own[scope])
        if (commPhase(c->phase) == phase)
          os << pad << "  **" << c->opKey << " on mesh dim " << c->meshDims.front() << ": " << str(c->fromPlacements)
             << " -> " << str(c->toPlacements) << ", " << c->bytesPerRank << " B/rank, "
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
  std::map<const ModuleScope *, std::vector<const CollectiveRecord *>> own;
  for (const CollectiveRecord &c : state->collectives)
    own[c.module].push_back(&c);
  // Backward ATen ops per module, as CommDebugMode lists them (name, DTensor input shardings).
  std::map<const ModuleScope *, json> bwOps;
  if (backward && state->backward)
    for (const auto &n : state->backward->nodes()) {
      if (n->op().ns != "aten")
        continue;
      json sharding = json::array(), shapes = json::array();
      for (Value *v : n->operands())
        if (v->kind() == ValueKind::Tensor)
          if (const DTensorLayout *l = state->layout(v)) {
            sharding.push_back(placementsRepr(l->placements));
            shapes.push_back(v->meta() ? v->meta()->str() : "");
          }
      json &list = bwOps[n->scope()];
      if (list.is_null())
        list = json::array();
      list.push_back({{"name", "aten." + n->op().name + "." + n->op().overload},
                      {"input_shape", shapes},
                      {"input_sharding", sharding},
                      {"is_bw", true}});
    }
  auto opsOf = [&](const ModuleScope *s) {
    auto it = bwOps.find(s);
    return it == bwOps.end() ? json::array() : it->second;
  };
  auto cellsJson = [&](const ModuleCounts &m, CommPhase p, json &node) {
    json list = json::array(), approx = json::array(), bytes = json::object(), times = json::object();
    for (const auto &[op, cell] : m.phase(p)) {
      list.push_back({op, cell.count});
      if (cell.approximate)
        approx.push_back(op);
      if (cell.bytes) // unknown where an operand's run-time dtype is (FSDP mixed precision)
        bytes[op] = *cell.bytes;
      if (cell.timeUs)
        times[op] = *cell.timeUs;
    }
    std::string phase = phaseName(p).str();
    node["collectives_" + phase] = list;
    node["collective_bytes_" + phase] = bytes;
    if (cluster)
      node["collective_time_us_" + phase] = times;
    if (!approx.empty())
      node["approximate_" + phase] = approx;
  };
  std::function<json(const ModuleScope *)> moduleJson = [&](const ModuleScope *s) {
    const ModuleCounts &m = *counts.find(s->displayName());
    json params = json::array();
    for (const auto &[name, placements] : dtensorParameters(*s))
      params.push_back({name, placements});
    json node = {{"fqn", s->displayName()}, {"module_type", moduleType(*s)}, {"parameters", params}};
    json children = json::array();
    for (const ModuleScope *c : s->children())
      children.push_back(moduleJson(c));
    node["children"] = children;
    cellsJson(m, CommPhase::Forward, node);
    cellsJson(m, CommPhase::Backward, node);
    node["operations_forward"] = json::array();
    node["operations_backward"] = opsOf(s);
    json fwd = json::array(), bwd = json::array();
    for (const CollectiveRecord *c : own[s])
      (c->phase == Phase::Forward ? fwd : bwd).push_back(recordJson(*c));
    node["collectives_forward_detail"] = fwd;
    node["collectives_backward_detail"] = bwd;
    return node;
  };
  const ModuleCounts &global = *counts.find(kGlobal);
  json root = {{"fqn", kGlobal}, {"module_type", ""}, {"parameters", json::array()}};
  root["children"] = json::array({moduleJson(program->graph().scopes().root())});
  cellsJson(global, CommPhase::Forward, root);
  cellsJson(global, CommPhase::Backward, root);
  root["operations_forward"] = json::array();
  root["operations_backward"] = opsOf(nullptr);
  root["phase"] = forward && backward ? "both" : (forward ? "forward" : "backward");
  root["commlens"] = {{"source", "predict"},
                      {"phases", forward && backward ? "both" : (forward ? "forward" : "backward")},
                      {"mesh", plan->mesh.str()},
                      {"warnings", state->warnings}};
  if (cluster) {
    auto totalsJson = [](const CommTotals &t) {
      return json{{"collectives", t.collectives}, {"bytes_per_rank", t.bytesPerRank}, {"time_us", t.timeUs}};
    };
    CommTotals fw = totals(Phase::Forward), bw = totals(Phase::Backward);
    json dims = json::array();
    for (const MeshDimTotals &m : meshDimTotals())
      dims.push_back({{"dims", m.dims},
                      {"ranks", m.ranks},
                      {"nodes", m.nodes},
                      {"forward", totalsJson(m.forward)},
                      {"backward", totalsJson(m.backward)}});
    root["commlens"]["cluster"] = cluster->str();
    root["commlens"]["step"] = {{"forward", totalsJson(fw)},
                                {"backward", totalsJson(bw)},
                                {"time_us", fw.timeUs + bw.timeUs},
                                {"mesh_dims", dims}};
  }
  return root.dump(2) + "\n";
}

} // namespace commlens
