#include "reports/InspectReport.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "llvm/ADT/DenseMap.h"

namespace commlens {
namespace {

std::string shapeString(const Value *v) {
  if (!v || !v->meta())
    return "?";
  std::string s = "[";
  for (size_t i = 0; i < v->meta()->sizes.size(); ++i)
    s += (i ? ", " : "") + v->meta()->sizes[i].str();
  return s + "]";
}

nlohmann::json shapeJson(const Value *v) {
  nlohmann::json shape = nlohmann::json::array();
  if (v && v->meta())
    for (const SymInt &s : v->meta()->sizes)
      shape.push_back(s.isSymbolic() ? nlohmann::json(s.expr().str()) : nlohmann::json(s.hint));
  return shape;
}

std::string dtypeName(const Value *v) { return v && v->meta() ? torchName(v->meta()->dtype).substr(6) : "?"; }

} // namespace

InspectReport InspectReport::build(const ExportedProgram &program) {
  const Graph &g = program.graph();
  InspectReport r;
  llvm::DenseMap<const ModuleScope *, size_t> rowOf;
  for (const ModuleScope *s : g.scopes().inForwardOrder()) {
    rowOf[s] = r.modules.size();
    r.modules.push_back({s});
  }
  llvm::DenseMap<const Value *, const Node *> firstUse;
  for (const auto &n : g.nodes()) {
    ++r.modules[rowOf[n->scope()]].ownNodes;
    for (const ModuleScope *s = n->scope(); s; s = s->parent())
      ++r.modules[rowOf[s]].inclusiveNodes;
    for (Value *v : n->operands())
      firstUse.try_emplace(v, n.get());
  }
  llvm::StringMap<const Value *> aliasValue;
  for (const InputSpec &in : g.inputs()) {
    if (in.kind == InputKind::Parameter && !in.aliasOf.empty()) {
      r.aliases.emplace_back(in.target, in.aliasOf);
      aliasValue[in.aliasOf] = in.value;
      continue;
    }
    if (in.kind == InputKind::Parameter || in.kind == InputKind::Buffer) {
      TensorRow row{in.target, in.value, in.value ? firstUse.lookup(in.value) : nullptr};
      (in.kind == InputKind::Parameter ? r.parameters : r.buffers).push_back(row);
      if (in.kind == InputKind::Parameter && in.value && in.value->meta()) {
        r.parameterNumel += in.value->meta()->numel();
        r.parameterBytes += in.value->meta()->nbytes();
      }
    } else if (in.kind == InputKind::UserInput && in.value) {
      r.userInputs.push_back(in.value);
    }
  }
  // A tied parameter is first used where any of its names is.
  for (TensorRow &p : r.parameters)
    if (const Value *alias = aliasValue.lookup(p.fqn))
      if (const Node *use = firstUse.lookup(alias); use && (!p.firstUse || use->index() < p.firstUse->index()))
        p.firstUse = use;
  for (const TensorRow &p : r.parameters)
    if (p.firstUse)
      r.parameterExecutionOrder.push_back(&p);
  std::stable_sort(r.parameterExecutionOrder.begin(), r.parameterExecutionOrder.end(),
                   [](const TensorRow *a, const TensorRow *b) { return a->firstUse->index() < b->firstUse->index(); });
  return r;
}

void InspectReport::printText(llvm::raw_ostream &os, const ExportedProgram &program) const {
  os << fmt::format("program: torch {}, export schema {}.{}", program.torchVersion, program.schemaVersion.major,
                    program.schemaVersion.minor);
  for (const std::string &v : program.verifiers)
    os << ", dialect " << v;
  os << "\n\nmodules (forward order)                                   own  incl  calls  type\n";
  for (const ModuleRow &m : modules) {
    std::string name = std::string(2 * m.scope->depth(), ' ') + m.scope->displayName();
    os << fmt::format("  {:<54} {:>5} {:>5} {:>6}  {}\n", name, m.ownNodes, m.inclusiveNodes, m.scope->numCalls(),
                      m.scope->type());
  }
  os << "\nparameters\n";
  for (const TensorRow &p : parameters)
    os << fmt::format("  {:<48} {:<16} {:<9} first use: {}\n", p.fqn, shapeString(p.value), dtypeName(p.value),
                      p.firstUse ? fmt::format("{} in {}", p.firstUse->name(), p.firstUse->scope()->displayName())
                                 : std::string("unused"));
  for (const auto &[alias, target] : aliases)
    os << fmt::format("  {:<48} tied to {}\n", alias, target);
  if (!buffers.empty()) {
    os << "\nbuffers\n";
    for (const TensorRow &b : buffers)
      os << fmt::format("  {:<48} {:<16} {}\n", b.fqn, shapeString(b.value), dtypeName(b.value));
  }
  os << "\nuser inputs\n";
  for (const Value *v : userInputs)
    os << fmt::format("  {:<48} {:<16} {}\n", v->name(), shapeString(v), dtypeName(v));
  os << "\nparameter execution order\n";
  for (size_t i = 0; i < parameterExecutionOrder.size(); ++i)
    os << fmt::format("  {:>4}  {}\n", i, parameterExecutionOrder[i]->fqn);
  os << fmt::format("\ntotals: {} nodes, {} modules, {} parameters ({} elements, {} bytes), {} buffers\n",
                    program.graph().numNodes(), modules.size(), parameters.size(), parameterNumel, parameterBytes,
                    buffers.size());
}

std::string InspectReport::toJson(const ExportedProgram &program) const {
  using nlohmann::json;
  json j;
  j["format"] = "commlens-inspect";
  j["version"] = 1;
  j["program"] = {{"torch_version", program.torchVersion},
                  {"schema_version", fmt::format("{}.{}", program.schemaVersion.major, program.schemaVersion.minor)},
                  {"verifiers", program.verifiers}};
  json mods = json::array(), order = json::array();
  for (const ModuleRow &m : modules) {
    mods.push_back({{"fqn", m.scope->displayName()},
                    {"path", m.scope->path()},
                    {"type", m.scope->type()},
                    {"parent", m.scope->parent() ? json(m.scope->parent()->displayName()) : json(nullptr)},
                    {"depth", m.scope->depth()},
                    {"calls", m.scope->numCalls()},
                    {"nodes_own", m.ownNodes},
                    {"nodes_inclusive", m.inclusiveNodes}});
    order.push_back(m.scope->displayName());
  }
  j["modules"] = mods;
  j["forward_order"] = order;
  auto tensorRows = [&](const std::vector<TensorRow> &rows) {
    json out = json::array();
    for (const TensorRow &p : rows) {
      json row = {{"fqn", p.fqn}, {"shape", shapeJson(p.value)}, {"dtype", dtypeName(p.value)}};
      if (p.value && p.value->meta())
        row["numel"] = p.value->meta()->numel();
      row["first_use"] = p.firstUse ? json{{"node", p.firstUse->name()}, {"module", p.firstUse->scope()->displayName()}}
                                    : json(nullptr);
      out.push_back(row);
    }
    return out;
  };
  j["parameters"] = tensorRows(parameters);
  j["buffers"] = tensorRows(buffers);
  json tied = json::object();
  for (const auto &[alias, target] : aliases)
    tied[alias] = target;
  j["parameter_aliases"] = tied;
  json inputs = json::array();
  for (const Value *v : userInputs)
    inputs.push_back({{"name", v->name()}, {"shape", shapeJson(v)}, {"dtype", dtypeName(v)}});
  j["user_inputs"] = inputs;
  json execOrder = json::array();
  for (const TensorRow *p : parameterExecutionOrder)
    execOrder.push_back(p->fqn);
  j["parameter_execution_order"] = execOrder;
  j["totals"] = {{"nodes", program.graph().numNodes()},   {"modules", modules.size()},
                 {"parameters", parameters.size()},     {"parameter_numel", parameterNumel},
                 {"parameter_bytes", parameterBytes},   {"buffers", buffers.size()}};
  return j.dump(2) + "\n";
}

} // namespace commlens
