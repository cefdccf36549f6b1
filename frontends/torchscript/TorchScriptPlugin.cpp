#include "frontends/torchscript/TorchScriptPlugin.h"

#include <sys/types.h> // off_t, which in_memory_adapter.h uses without including it

#include <caffe2/serialize/in_memory_adapter.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>
#include <torch/headeronly/version.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

// Built without fmt: LibTorch's include folder carries its own fmt, which must not meet ours.
namespace {

using json = nlohmann::json;
namespace jit = torch::jit;

/// The example inputs' shapes: an archive extra file that `python -m commlens.export
/// --torchscript` writes (TorchScript code carries no shapes).
constexpr const char *kInputsFile = "commlens_inputs.json";
/// A model's loops unroll into ops; a loop running longer than this is a `while` that never ends.
constexpr int64_t kMaxLoopTrips = 100000;
/// Module, method and function calls nest at most this deep (real models: a few dozen).
constexpr unsigned kMaxCallDepth = 1000;

struct ConversionError {
  std::string message;
};
[[noreturn]] void fail(std::string message) { throw ConversionError{std::move(message)}; }
/// An allocation failed: the worker's memory limit (RLIMIT_AS) ran out. `what`: the request.
struct OutOfMemory {
  std::string what;
};

/// Where the conversion is (commlens_torchscript_set_progress), for a limit that kills the worker.
char *progressBuffer = nullptr;
size_t progressSize = 0;
void setProgress(const std::string &text) {
  if (!progressBuffer || progressSize == 0)
    return;
  size_t n = std::min(text.size(), progressSize - 1);
  std::memcpy(progressBuffer, text.data(), n);
  progressBuffer[n] = '\0';
}

/// LibTorch's text for a failed allocation ("DefaultCPUAllocator: can't allocate memory: you
/// tried to allocate 80000000000 bytes. Error code 12 ...").
bool isOutOfMemory(const std::string &what) {
  return what.find("can't allocate memory") != std::string::npos ||
         what.find("Could not allocate memory") != std::string::npos ||
         what.find("std::bad_alloc") != std::string::npos;
}
std::string allocationOf(const std::string &what) {
  const std::string marker = "you tried to allocate ";
  size_t at = what.find(marker);
  if (at == std::string::npos)
    return "";
  size_t from = at + marker.size(), to = what.find_first_not_of("0123456789", from);
  return "allocating " + what.substr(from, to - from) + " bytes";
}
/// LibTorch's internal checks ("... INTERNAL ASSERT FAILED at ..., please report a bug to PyTorch")
/// fire on arguments its kernels do not expect; their text is no message for a commlens user.
bool isInternalAssert(const std::string &what) {
  return what.find("INTERNAL ASSERT FAILED") != std::string::npos ||
         what.find("please report a bug to PyTorch") != std::string::npos;
}

/// torch.export's serialised ScalarType numbering (torch/_export/serde/schema.py).
int serdeDtype(c10::ScalarType t) {
  switch (t) {
  case c10::kByte: return 1;
  case c10::kChar: return 2;
  case c10::kShort: return 3;
  case c10::kInt: return 4;
  case c10::kLong: return 5;
  case c10::kHalf: return 6;
  case c10::kFloat: return 7;
  case c10::kDouble: return 8;
  case c10::kComplexHalf: return 9;
  case c10::kComplexFloat: return 10;
  case c10::kComplexDouble: return 11;
  case c10::kBool: return 12;
  case c10::kBFloat16: return 13;
  default: fail(std::string("unsupported dtype ") + c10::toString(t));
  }
}

c10::ScalarType dtypeNamed(const std::string &name) {
  static const std::pair<const char *, c10::ScalarType> kNames[] = {
      {"float32", c10::kFloat}, {"float16", c10::kHalf}, {"bfloat16", c10::kBFloat16}, {"float64", c10::kDouble},
      {"int64", c10::kLong},    {"int32", c10::kInt},    {"int16", c10::kShort},       {"int8", c10::kChar},
      {"uint8", c10::kByte},    {"bool", c10::kBool}};
  for (const auto &[n, t] : kNames)
    if (name == n)
      return t;
  fail(std::string(kInputsFile) + ": unknown dtype '" + name + "'");
}

/// "__torch__.torch.nn.modules.linear.___torch_mangle_3.Linear" -> "torch.nn.modules.linear.Linear":
/// the Python class TorchScript compiled, as torch.export's nn_module_stack names it.
std::string pythonTypeName(const c10::ClassTypePtr &type) {
  std::string out;
  const std::vector<std::string> &atoms = type->name()->atoms();
  for (size_t i = 0; i < atoms.size(); ++i) {
    if ((i == 0 && atoms[i] == "__torch__") || atoms[i].rfind("___torch_mangle_", 0) == 0)
      continue;
    out += (out.empty() ? "" : ".") + atoms[i];
  }
  return out;
}

/// The first line with text, trimmed (TorchScript's compiler errors start with a newline).
std::string firstLine(const std::string &text) {
  size_t from = text.find_first_not_of(" \t\r\n");
  if (from == std::string::npos)
    return "";
  size_t to = text.find('\n', from);
  std::string line = text.substr(from, to == std::string::npos ? std::string::npos : to - from);
  return line.substr(0, line.find_last_not_of(" \t\r") + 1);
}

/// A float as torch.export writes it: non-finite values as strings, since JSON has no numbers for them.
json number(double d) {
  if (std::isnan(d))
    return "NaN";
  if (std::isinf(d))
    return d > 0 ? "Infinity" : "-Infinity";
  return d;
}

json intList(c10::IntArrayRef values) {
  json out = json::array();
  for (int64_t v : values)
    out.push_back({{"as_int", v}});
  return out;
}

/// pytree spec of one leaf, and of the (args, kwargs) pair a module call receives.
json leafSpec() { return {{"type", nullptr}, {"context", nullptr}, {"children_spec", json::array()}}; }
/// The out_spec of a call: one leaf (commlens reads only in_spec).
std::string leafOutSpec() { return json::array({1, leafSpec()}).dump(); }
std::string callSpec(const json &argSpecs) {
  json args = {{"type", "builtins.tuple"}, {"context", "null"}, {"children_spec", argSpecs}};
  json kwargs = {{"type", "builtins.dict"}, {"context", "[]"}, {"children_spec", json::array()}};
  return json::array({1, {{"type", "builtins.tuple"}, {"context", "null"}, {"children_spec", {args, kwargs}}}}).dump();
}

/// Runs the module's forward once on the CPU, on zero inputs of the recorded shapes, op by op
/// (module calls, function calls, branches and loops followed: every scalar is known), and writes
/// each ATen op that yields tensors as a node of a torch.export program, in the module scope of its
/// call. (Meta tensors would spare the memory, but most of their kernels are registered from Python.)
class Converter {
public:
  Converter(jit::Module module, const json &inputs) : module_(std::move(module)), inputs_(inputs) {}

  /// The program, and torch.export's weights config (which parameters share storage).
  struct Converted {
    json program, weightsConfig;
  };

  Converted run() {
    for (const jit::NameModule &m : module_.named_modules())
      objectPaths_[m.value._ivalue().get()] = m.name;
    // As torch.export: one placeholder per parameter and buffer name, tied names included (the ops
    // read the last one), and a weights config whose shared record marks the tie.
    json graphInputs = json::array(), inputSpecs = json::array();
    for (const jit::NameTensor &p : module_.named_parameters(/*recurse=*/true)) {
      std::string name = define(p.value, "p_" + underscored(p.name));
      graphInputs.push_back({{"as_tensor", {{"name", name}}}});
      inputSpecs.push_back({{"parameter", {{"arg", {{"name", name}}}, {"parameter_name", p.name}}}});
      addWeight(p.name, p.value, true);
    }
    for (const jit::NameTensor &b : module_.named_buffers(/*recurse=*/true)) {
      std::string name = define(b.value, "b_" + underscored(b.name));
      graphInputs.push_back({{"as_tensor", {{"name", name}}}});
      inputSpecs.push_back({{"buffer", {{"arg", {{"name", name}}}, {"buffer_name", b.name}, {"persistent", true}}}});
      addWeight(b.name, b.value, false);
    }

    jit::Method forward = module_.get_method("forward");
    const std::vector<c10::Argument> &params = forward.function().getSchema().arguments();
    if (!inputs_.contains("inputs") || !inputs_["inputs"].is_array())
      fail(std::string(kInputsFile) + ": expected {\"inputs\": [{\"shape\": [...], \"dtype\": \"...\"}, ...]}");
    const json &shapes = inputs_["inputs"];
    if (shapes.size() + 1 != params.size())
      fail(std::string(kInputsFile) + ": " + std::to_string(shapes.size()) + " inputs for forward's " +
           std::to_string(params.size() - 1) + " arguments");
    setProgress("while creating the inputs " + std::string(kInputsFile) + " describes");
    std::vector<c10::IValue> args{module_._ivalue()};
    json userInputs = json::array(), userSpecs = json::array(), rootLeaves = json::array();
    for (size_t i = 0; i < shapes.size(); ++i) {
      const json &in = shapes[i];
      at::Tensor t = at::zeros(in.at("shape").get<std::vector<int64_t>>(),
                               at::TensorOptions().dtype(dtypeNamed(in.at("dtype").get<std::string>())));
      std::string name = define(t, params[i + 1].name());
      args.push_back(t);
      userInputs.push_back({{"as_tensor", {{"name", name}}}});
      userSpecs.push_back({{"user_input", {{"arg", {{"name", name}}}}}});
      rootLeaves.push_back(leafSpec());
    }
    scopes_.push_back(Scope{"", pythonTypeName(module_.type()), 0});
    std::vector<c10::IValue> results =
        runGraph(*jit::toGraphFunction(forward.function()).graph(), {args, std::vector<bool>(args.size(), false)})
            .values;

    json outputs = json::array(), outputSpecs = json::array();
    for (const c10::IValue &r : results)
      for (const at::Tensor &t : tensorsIn(r)) {
        json arg = {{"as_tensor", {{"name", tensorName(t)}}}};
        outputs.push_back(arg);
        outputSpecs.push_back({{"user_output", {{"arg", arg}}}});
      }
    // Constants lifted while running come after parameters and buffers, before user inputs (torch.export's order).
    for (json &c : liftedInputs_)
      graphInputs.push_back(std::move(c));
    for (json &c : liftedSpecs_)
      inputSpecs.push_back(std::move(c));
    for (size_t i = 0; i < userInputs.size(); ++i) {
      graphInputs.push_back(userInputs[i]);
      inputSpecs.push_back(userSpecs[i]);
    }
    json forwardArgNames = json::array();
    for (size_t i = 1; i < params.size(); ++i)
      forwardArgNames.push_back(params[i].name());
    json rootCall = {{"fqn", ""},
                     {"signature",
                      {{"inputs", json::array()}, {"outputs", json::array()}, {"in_spec", callSpec(rootLeaves)},
                       {"out_spec", leafOutSpec()},
                       {"forward_arg_names", forwardArgNames}}}};
    moduleCalls_.insert(moduleCalls_.begin(), rootCall);
    json graph = {{"inputs", graphInputs},         {"outputs", outputs},
                  {"nodes", nodes_},               {"tensor_values", tensorValues_},
                  {"sym_int_values", json::object()}, {"sym_bool_values", json::object()},
                  {"sym_float_values", json::object()}, {"custom_obj_values", json::object()},
                  {"is_single_tensor_return", false}};
    json program = {{"graph_module",
             {{"graph", graph},
              {"signature", {{"input_specs", inputSpecs}, {"output_specs", outputSpecs}}},
              {"module_call_graph", moduleCalls_},
              {"metadata", json::object()}}},
            {"schema_version", {{"major", 8}, {"minor", 20}}},
            {"opset_version", {{"aten", 10}}},
            {"range_constraints", json::object()},
            {"verifiers", json::array({"TRAINING"})},
            {"torch_version", TORCH_VERSION}};
    return {std::move(program), {{"config", weights_}}};
  }

private:
  struct Scope {
    std::string path, type;
    unsigned call;
  };
  /// A graph's values while it runs, and which of its scalars come from tensor contents (zeros
  /// here, anything at run time): a branch or loop on those is refused, never guessed.
  struct Env {
    std::unordered_map<const jit::Value *, c10::IValue> values;
    std::unordered_set<const jit::Value *> dataDependent;
    const c10::IValue &at(const jit::Value *v) const { return values.at(v); }
    c10::IValue &operator[](const jit::Value *v) { return values[v]; }
    bool tainted(const jit::Value *v) const { return dataDependent.count(v) != 0; }
  };
  struct Values {
    std::vector<c10::IValue> values;
    std::vector<bool> dataDependent;
  };

  static std::string underscored(std::string s) {
    for (char &c : s)
      if (c == '.')
        c = '_';
    return s;
  }

  /// The weights config entry of a parameter or buffer; tensors sharing storage share the record.
  void addWeight(const std::string &fqn, const at::Tensor &t, bool isParameter) {
    stateTensors_.insert(t.unsafeGetTensorImpl());
    const void *storage = t.storage().unsafeGetStorageImpl();
    auto [it, fresh] = records_.emplace(storage, "weight_" + std::to_string(records_.size()));
    weights_[fqn] = {{"path_name", it->second},
                     {"is_param", isParameter},
                     {"use_pickle", false},
                     {"tensor_meta", tensorValues_[names_.at(t.unsafeGetTensorImpl())]}};
  }

  /// A fresh program value name for `t` (torch.export's style: the op's name, then _1, _2, ...).
  std::string define(const at::Tensor &t, const std::string &hint) {
    unsigned &n = nameCounts_[hint];
    std::string name = n == 0 ? hint : hint + "_" + std::to_string(n);
    ++n;
    names_[t.unsafeGetTensorImpl()] = name;
    alive_.emplace_back(t); // no other tensor may reuse its TensorImpl address while we map it
    json meta = {{"dtype", serdeDtype(t.scalar_type())},
                 {"sizes", intList(t.sizes())},
                 {"strides", intList(t.strides())},
                 {"storage_offset", {{"as_int", t.storage_offset()}}},
                 {"device", {{"type", "cpu"}, {"index", nullptr}}},
                 {"layout", 7},
                 {"requires_grad", t.requires_grad()}};
    tensorValues_[name] = std::move(meta);
    return name;
  }

  /// The program value of a tensor; one no traced op made (a constant of the code, a number
  /// turned into a tensor) becomes a lifted constant input, as torch.export lifts them.
  std::string tensorName(const at::Tensor &t) {
    auto it = names_.find(t.unsafeGetTensorImpl());
    if (it != names_.end())
      return it->second;
    std::string target = "lifted_tensor_" + std::to_string(liftedSpecs_.size());
    std::string name = define(t, "c_" + target);
    liftedInputs_.push_back({{"as_tensor", {{"name", name}}}});
    liftedSpecs_.push_back({{"tensor_constant", {{"arg", {{"name", name}}}, {"tensor_constant_name", target}}}});
    return name;
  }

  static std::vector<at::Tensor> tensorsIn(const c10::IValue &v) {
    std::vector<at::Tensor> out;
    if (v.isTensor())
      out.push_back(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor &t : v.toTensorVector())
        out.push_back(t);
    else if (v.isTuple())
      for (const c10::IValue &e : v.toTupleRef().elements())
        for (const at::Tensor &t : tensorsIn(e))
          out.push_back(t);
    else if (v.isList())
      for (const c10::IValue &e : v.toListRef())
        for (const at::Tensor &t : tensorsIn(e))
          out.push_back(t);
    return out;
  }

  std::string where() const {
    const Scope &s = scopes_.back();
    return s.path.empty() ? s.type : s.path + " (" + s.type + ")";
  }

  std::string moduleStack() const {
    std::string out;
    for (const Scope &s : scopes_)
      out += (out.empty() ? "" : ";") + std::string("L__self__") + s.path +
             (s.call ? "@" + std::to_string(s.call) : "") + "," + s.path + "," + s.type;
    return out;
  }

  Values runGraph(jit::Graph &g, const Values &args) {
    // Each call nests this interpreter's frames; a model nesting calls without end (an archive's
    // code may call itself) is refused before the worker's stack runs out.
    if (depth_ == kMaxCallDepth)
      fail("calls nest deeper than " + std::to_string(kMaxCallDepth) + " in " + where() +
           " (a function or module that calls itself?)");
    ++depth_;
    struct Leave {
      unsigned &depth;
      ~Leave() { --depth; }
    } leave{depth_};
    Env env;
    if (args.values.size() != g.inputs().size())
      fail("a call with " + std::to_string(args.values.size()) + " arguments to a graph of " +
           std::to_string(g.inputs().size()) + " inputs in " + where());
    bind(g.inputs(), args, env);
    runBlock(*g.block(), env);
    return valuesOf(g.outputs(), env);
  }

  void runBlock(jit::Block &b, Env &env) {
    for (jit::Node *n : b.nodes())
      runNode(*n, env);
  }

  static Values valuesOf(jit::ArrayRef<jit::Value *> values, const Env &env, size_t from = 0) {
    Values out;
    for (size_t i = from; i < values.size(); ++i) {
      out.values.push_back(env.at(values[i]));
      out.dataDependent.push_back(env.tainted(values[i]));
    }
    return out;
  }

  static bool anyTainted(jit::ArrayRef<jit::Value *> values, const Env &env) {
    for (const jit::Value *v : values)
      if (env.tainted(v))
        return true;
    return false;
  }

  static void bind(jit::ArrayRef<jit::Value *> values, const Values &results, Env &env) {
    for (size_t i = 0; i < values.size(); ++i) {
      env[values[i]] = results.values.at(i);
      if (results.dataDependent.at(i))
        env.dataDependent.insert(values[i]);
      else
        env.dataDependent.erase(values[i]);
    }
  }

  /// Binds one result computed from `inputs`: data-dependent when any of them is.
  static void bindFrom(jit::Value *out, c10::IValue value, jit::ArrayRef<jit::Value *> inputs, Env &env) {
    bind(jit::ArrayRef<jit::Value *>(out), Values{{std::move(value)}, {anyTainted(inputs, env)}}, env);
  }

  void refuseDataDependent(const jit::Value *v, const Env &env, const char *what) const {
    if (env.tainted(v))
      fail(std::string("the ") + what + " in " + where() +
           " depends on tensor values, which commlens cannot know before the run");
  }

  void runNode(jit::Node &n, Env &env) {
    const c10::Symbol kind = n.kind();
    if (kind == c10::prim::Constant) {
      env[n.output()] = jit::toIValue(n.output()).value_or(c10::IValue());
    } else if (kind == c10::prim::GetAttr) {
      env[n.output()] = env.at(n.input(0)).toObject()->getAttr(n.s(c10::attr::name));
    } else if (kind == c10::prim::CallMethod) {
      callMethod(n, env);
    } else if (kind == c10::prim::CallFunction) {
      auto fn = n.input(0)->type()->expect<c10::FunctionType>()->function();
      bind(n.outputs(), runGraph(*jit::toGraphFunction(*fn).graph(), valuesOf(n.inputs(), env, 1)), env);
    } else if (kind == c10::prim::If) {
      refuseDataDependent(n.input(0), env, "condition of an if");
      jit::Block *taken = n.blocks()[env.at(n.input(0)).toBool() ? 0 : 1];
      runBlock(*taken, env);
      bind(n.outputs(), valuesOf(taken->outputs(), env), env);
    } else if (kind == c10::prim::Loop) {
      refuseDataDependent(n.input(0), env, "trip count of a loop");
      refuseDataDependent(n.input(1), env, "condition of a loop");
      int64_t trips = env.at(n.input(0)).toInt();
      bool go = env.at(n.input(1)).toBool();
      Values carried = valuesOf(n.inputs(), env, 2);
      jit::Block *body = n.blocks()[0];
      for (int64_t i = 0; go && i < trips; ++i) {
        if (i == kMaxLoopTrips)
          fail("a loop in " + where() + " runs more than " + std::to_string(kMaxLoopTrips) + " times");
        bind(body->inputs().slice(0, 1), Values{{c10::IValue(i)}, {false}}, env);
        bind(body->inputs().slice(1), carried, env);
        runBlock(*body, env);
        refuseDataDependent(body->outputs()[0], env, "condition of a loop");
        go = env.at(body->outputs()[0]).toBool();
        carried = valuesOf(body->outputs(), env, 1);
      }
      bind(n.outputs(), carried, env);
    } else if (kind == c10::prim::ListConstruct) {
      c10::impl::GenericList list(n.output()->type()->expectRef<c10::ListType>().getElementType());
      for (const jit::Value *v : n.inputs())
        list.push_back(env.at(v));
      bindFrom(n.output(), std::move(list), n.inputs(), env);
    } else if (kind == c10::prim::TupleConstruct) {
      bindFrom(n.output(), c10::ivalue::Tuple::create(valuesOf(n.inputs(), env).values), n.inputs(), env);
    } else if (kind == c10::prim::ListUnpack || kind == c10::prim::TupleUnpack) {
      const c10::IValue &packed = env.at(n.input(0));
      std::vector<c10::IValue> items = packed.isTuple() ? packed.toTupleRef().elements().vec() : packed.toListRef().vec();
      bind(n.outputs(), Values{items, std::vector<bool>(items.size(), env.tainted(n.input(0)))}, env);
    } else if (kind == c10::prim::TupleIndex) {
      bindFrom(n.output(), env.at(n.input(0)).toTupleRef().elements().at(env.at(n.input(1)).toInt()), n.inputs(), env);
    } else if (kind == c10::prim::unchecked_cast) {
      bindFrom(n.output(), env.at(n.input(0)), n.inputs(), env);
    } else if (kind == c10::prim::Uninitialized) {
      env[n.output()] = c10::IValue();
    } else if (kind == c10::prim::RaiseException) {
      fail("the model raises an exception in " + where() + " for these input shapes");
    } else {
      runOp(n, env);
    }
  }

  void callMethod(jit::Node &n, Env &env) {
    c10::intrusive_ptr<c10::ivalue::Object> self = env.at(n.input(0)).toObject();
    const std::string method = n.s(c10::attr::name);
    Values args = valuesOf(n.inputs(), env);
    auto path = objectPaths_.find(self.get());
    bool moduleCall = method == "forward" && path != objectPaths_.end();
    if (moduleCall) {
      unsigned call = callCounts_[path->second]++;
      scopes_.push_back(Scope{path->second, pythonTypeName(self->type()), call});
      recordCall(path->second, call, args.values);
    }
    jit::Function &fn = self->type()->getMethod(method);
    bind(n.outputs(), runGraph(*jit::toGraphFunction(fn).graph(), args), env);
    if (moduleCall)
      scopes_.pop_back();
  }

  /// The module call's signature (torch.export's module_call_graph entry), for the plan's input
  /// hooks. The tracer passes a parameter that another module owns (tied weights) to the module's
  /// traced forward as an extra argument, which the Python forward does not take: parameters and
  /// buffers are left out.
  void recordCall(const std::string &path, unsigned call, const std::vector<c10::IValue> &args) {
    json inputs = json::array(), specs = json::array();
    for (size_t i = 1; i < args.size(); ++i) {
      const c10::IValue &a = args[i];
      if (a.isTensor() && stateTensors_.count(a.toTensor().unsafeGetTensorImpl()))
        continue;
      if (a.isTensorList() || (a.isList() && !a.isIntList() && !a.isDoubleList() && !a.isBoolList())) {
        json children = json::array();
        for (const at::Tensor &t : tensorsIn(a)) {
          inputs.push_back({{"as_tensor", {{"name", tensorName(t)}}}});
          children.push_back(leafSpec());
        }
        specs.push_back({{"type", "builtins.list"}, {"context", "null"}, {"children_spec", children}});
      } else {
        inputs.push_back(argument(c10::TensorType::get(), a));
        specs.push_back(leafSpec());
      }
    }
    moduleCalls_.push_back({{"fqn", call ? path + "@" + std::to_string(call) : path},
                            {"signature",
                             {{"inputs", inputs},
                              {"outputs", json::array()},
                              {"in_spec", callSpec(specs)},
                              {"out_spec", leafOutSpec()},
                              {"forward_arg_names", json::array()}}}});
  }

  /// Ops whose result is a fact about a tensor, not about its contents.
  static bool readsMetadataOnly(const std::string &op) {
    static const char *const kOps[] = {"aten::size",         "aten::dim",        "aten::numel",
                                       "aten::len",          "aten::stride",     "aten::is_floating_point",
                                       "aten::is_complex",   "aten::is_contiguous", "aten::__is__",
                                       "aten::__isnot__",    "prim::dtype",      "prim::device",
                                       "prim::layout",       "prim::requires_grad", "prim::is_cuda",
                                       "prim::is_cpu",       "prim::is_meta",    "prim::shape"};
    for (const char *o : kOps)
      if (op == o)
        return true;
    return false;
  }

  /// Ops whose output shape depends on tensor contents (torch.export refuses them as well).
  static bool shapeFromContents(const std::string &op, const std::vector<c10::IValue> &in) {
    static const char *const kOps[] = {"aten::nonzero",          "aten::nonzero_numpy", "aten::masked_select",
                                       "aten::unique_consecutive", "aten::unique_dim",  "aten::_unique",
                                       "aten::_unique2",         "aten::bincount",      "aten::argwhere"};
    for (const char *o : kOps)
      if (op == o)
        return true;
    if (op == "aten::repeat_interleave" && !in.empty() && in[0].isTensor() && in.size() > 1 && in[1].isTensor())
      return true;
    if (op == "aten::index" && in.size() > 1 && in[1].isList()) // a boolean mask selects by value
      for (const c10::IValue &i : in[1].toListRef())
        if (i.isTensor() && (i.toTensor().scalar_type() == c10::kBool || i.toTensor().scalar_type() == c10::kByte))
          return true;
    return false;
  }

  /// x[a:b] over a whole dim with step 1: Python's indexing returns x itself without dispatching
  /// (unless tracing, so traced graphs and TorchScript code have the slice; DTensor never sees it).
  static bool isWholeSlice(const std::string &op, const std::vector<c10::IValue> &in) {
    if (op != "aten::slice" || in.size() != 5 || !in[0].isTensor() || !in[1].isInt())
      return false;
    const at::Tensor &self = in[0].toTensor();
    int64_t dim = c10::maybe_wrap_dim(in[1].toInt(), self.dim());
    bool fromStart = in[2].isNone() || (in[2].isInt() && in[2].toInt() == 0);
    bool toEnd = in[3].isNone() || (in[3].isInt() && in[3].toInt() >= self.size(dim));
    return fromStart && toEnd && in[4].isInt() && in[4].toInt() == 1;
  }

  /// Ops whose only effect is outside the tensors (text on stderr): not run, the model goes on.
  static bool isInert(const std::string &op) {
    return op == "prim::Print" || op == "aten::warn" || op == "aten::_print";
  }

  /// Why an op is never run: it reaches past the worker (files, network, process-wide state).
  static const char *refusedBecause(const jit::Node &n, const std::string &op) {
    static const std::pair<const char *, const char *> kRefused[] = {
        {"aten::from_file", "reads a file"},
        {"aten::save", "writes a file"},
        {"prim::rpc_async", "calls over the network (RPC)"},
        {"prim::rpc_sync", "calls over the network (RPC)"},
        {"prim::rpc_remote", "calls over the network (RPC)"},
        {"aten::manual_seed", "writes the random number generator's state"},
        {"aten::seed", "writes the random number generator's state"},
        {"aten::wait", "waits for an asynchronous task"},
        {"prim::awaitable_wait", "waits for an asynchronous task"},
        {"prim::awaitable_nowait", "starts an asynchronous task"},
    };
    for (const auto &[name, why] : kRefused)
      if (op == name)
        return why;
    if (!n.kind().is_aten() && !n.kind().is_prim())
      return "is not an aten or prim op (commlens runs no other namespace: distributed, quantized or custom ops)";
    return nullptr;
  }

  void runOp(jit::Node &n, Env &env) {
    const std::string op = n.kind().toQualString();
    setProgress("in '" + op + "' in " + where());
    if (isInert(op) && n.outputs().empty())
      return;
    if (const char *why = refusedBecause(n, op))
      fail("'" + op + "' in " + where() + " " + why + ": commlens never runs it");
    if (!n.maybeOperator())
      fail("TorchScript op '" + op + "' in " + where() + " is not supported by commlens");
    std::vector<c10::IValue> in = valuesOf(n.inputs(), env).values;
    if (shapeFromContents(op, in))
      fail("'" + op + "' in " + where() + ": its output shape depends on tensor values, which commlens cannot " +
           "know before the run");
    jit::Stack stack(in.begin(), in.end());
    // A vararg op (prim::Print, aten::format) takes its input count on top of the stack, as the
    // JIT's interpreter pushes it.
    if (const c10::FunctionSchema *schema = n.maybeSchema(); schema && schema->is_vararg())
      stack.emplace_back(static_cast<int64_t>(in.size()));
    try {
      n.getOperation()(stack);
    } catch (const std::bad_alloc &) {
      throw OutOfMemory{""};
    } catch (const std::exception &e) {
      std::string what = e.what();
      if (const auto *c10e = dynamic_cast<const c10::Error *>(&e))
        what = c10e->what_without_backtrace();
      if (isOutOfMemory(what))
        throw OutOfMemory{allocationOf(what)};
      if (isInternalAssert(what))
        fail("'" + op + "' in " + where() + " failed a LibTorch internal check on its arguments (commlens cannot " +
             "run it)");
      fail("'" + op + "' in " + where() + " failed: " + firstLine(what));
    }
    std::vector<c10::IValue> out(stack.end() - static_cast<std::ptrdiff_t>(n.outputs().size()), stack.end());
    // A number read out of a tensor (item, Bool, Int of a computed tensor) is as unknown as the
    // tensor's contents; numbers made into tensors (NumToTensor) stay known.
    bool readsContents = false;
    if (!readsMetadataOnly(op))
      for (const c10::IValue &v : in)
        for (const at::Tensor &t : tensorsIn(v))
          readsContents |= !knownScalars_.count(t.unsafeGetTensorImpl());
    bool tainted = anyTainted(n.inputs(), env);
    Values results;
    bool yieldsTensors = false;
    for (const c10::IValue &v : out) {
      std::vector<at::Tensor> tensors = tensorsIn(v);
      yieldsTensors |= !tensors.empty();
      results.values.push_back(v);
      results.dataDependent.push_back(tainted || (readsContents && tensors.empty()));
      if (n.kind() == c10::prim::NumToTensor && !tainted)
        knownScalars_.insert(v.toTensor().unsafeGetTensorImpl());
      for (at::Tensor &t : tensors)
        alive_.push_back(std::move(t)); // keeps TensorImpl addresses unique while they are mapped
    }
    bind(n.outputs(), results, env);
    if (!n.kind().is_aten())
      return; // prim:: plumbing (lists, tuples, numbers) is folded into the arguments of the ops
    if (isWholeSlice(op, in)) { // eager indexing returns self for these; the tracer records them
      names_[out[0].toTensor().unsafeGetTensorImpl()] = tensorName(in[0].toTensor());
      return;
    }
    if (yieldsTensors)
      emit(n, in, out);
  }

  json argument(const c10::TypePtr &type, const c10::IValue &v) {
    c10::TypePtr t = type->kind() == c10::TypeKind::OptionalType ? type->expectRef<c10::OptionalType>().getElementType()
                                                                 : type;
    if (v.isNone())
      return {{"as_none", true}};
    if (v.isTensor())
      return {{"as_tensor", {{"name", tensorName(v.toTensor())}}}};
    if (v.isInt()) {
      if (t->kind() == c10::TypeKind::ScalarTypeType)
        return {{"as_scalar_type", serdeDtype(static_cast<c10::ScalarType>(v.toInt()))}};
      if (t->kind() == c10::TypeKind::LayoutType)
        return {{"as_layout", v.toInt() == static_cast<int64_t>(c10::kStrided) ? 7 : 0}};
      if (t->kind() == c10::TypeKind::MemoryFormatType) {
        switch (static_cast<c10::MemoryFormat>(v.toInt())) {
        case c10::MemoryFormat::Contiguous: return {{"as_memory_format", 1}};
        case c10::MemoryFormat::ChannelsLast: return {{"as_memory_format", 2}};
        case c10::MemoryFormat::ChannelsLast3d: return {{"as_memory_format", 3}};
        case c10::MemoryFormat::Preserve: return {{"as_memory_format", 4}};
        default: return {{"as_memory_format", 0}};
        }
      }
      return {{"as_int", v.toInt()}};
    }
    if (v.isDouble())
      return {{"as_float", number(v.toDouble())}};
    if (v.isBool())
      return {{"as_bool", v.toBool()}};
    if (v.isString())
      return {{"as_string", v.toStringRef()}};
    if (v.isDevice()) {
      c10::Device d = v.toDevice();
      return {{"as_device",
               {{"type", c10::DeviceTypeName(d.type(), /*lower_case=*/true)},
                {"index", d.has_index() ? json(d.index()) : json(nullptr)}}}};
    }
    if (v.isIntList())
      return {{"as_ints", v.toIntVector()}};
    if (v.isDoubleList()) {
      json out = json::array();
      for (double d : v.toDoubleVector())
        out.push_back(number(d));
      return {{"as_floats", out}};
    }
    if (v.isBoolList()) {
      json out = json::array();
      for (bool b : v.toBoolList())
        out.push_back(b);
      return {{"as_bools", out}};
    }
    if (v.isTensorList()) {
      json out = json::array();
      for (const at::Tensor &e : v.toTensorVector())
        out.push_back({{"name", tensorName(e)}});
      return {{"as_tensors", out}};
    }
    if (v.isList()) { // Tensor?[] (index) or a list of numbers
      json out = json::array();
      bool optionalTensors = true;
      for (const c10::IValue &e : v.toListRef())
        optionalTensors &= e.isNone() || e.isTensor();
      if (!optionalTensors)
        fail("unsupported list argument " + v.tagKind());
      for (const c10::IValue &e : v.toListRef())
        out.push_back(e.isNone() ? json{{"as_none", true}} : json{{"as_tensor", {{"name", tensorName(e.toTensor())}}}});
      return {{"as_optional_tensors", out}};
    }
    fail("unsupported argument of kind " + v.tagKind());
  }

  /// The overload eager Python dispatches where TorchScript picks a Scalar one: Python has no
  /// binding for add/sub/mul/div's Scalar overloads (torchgen skips them), so `x * 0.5` reaches
  /// DTensor as mul.Tensor with the number in the tensor slot, as torch.export records it.
  static std::string eagerOverload(const std::string &op, const std::string &overload) {
    bool binary = op == "add" || op == "add_" || op == "sub" || op == "sub_" || op == "mul" || op == "mul_" ||
                  op == "div" || op == "div_";
    if (binary && overload == "Scalar")
      return "Tensor";
    if ((op == "div" || op == "div_") && overload == "Scalar_mode")
      return "Tensor_mode";
    return overload.empty() ? "default" : overload;
  }

  void emit(jit::Node &n, const std::vector<c10::IValue> &in, const std::vector<c10::IValue> &out) {
    const c10::FunctionSchema &schema = n.schema();
    std::string opName = schema.name().substr(schema.name().find("::") + 2);
    std::string target = "torch.ops.aten." + opName + "." + eagerOverload(opName, schema.overload_name());
    json inputs = json::array();
    const std::vector<c10::Argument> &formal = schema.arguments();
    for (size_t i = 0; i < formal.size() && i < in.size(); ++i)
      inputs.push_back({{"name", formal[i].name()},
                        {"arg", argument(formal[i].real_type(), in[i])},
                        {"kind", formal[i].kwarg_only() ? 2 : 1}});
    json outputs = json::array();
    std::string first;
    for (const c10::IValue &v : out) {
      if (v.isTensor()) {
        std::string name = define(v.toTensor(), opName);
        outputs.push_back({{"as_tensor", {{"name", name}}}});
        first = first.empty() ? name : first;
      } else if (v.isTensorList()) {
        json names = json::array();
        for (const at::Tensor &t : v.toTensorVector()) {
          std::string name = define(t, opName);
          names.push_back({{"name", name}});
          first = first.empty() ? name : first;
        }
        outputs.push_back({{"as_tensors", names}});
      } else if (v.isNone()) {
        outputs.push_back({{"as_none", true}});
      } else {
        fail("'" + schema.name() + "' in " + where() + " returns a " + v.tagKind() + " beside tensors");
      }
    }
    nodes_.push_back({{"target", target},
                      {"name", first},
                      {"inputs", inputs},
                      {"outputs", outputs},
                      {"metadata", {{"nn_module_stack", moduleStack()}}}});
  }

  jit::Module module_;
  json inputs_;
  std::unordered_map<const c10::ivalue::Object *, std::string> objectPaths_;
  std::unordered_map<const c10::TensorImpl *, std::string> names_;
  std::vector<at::Tensor> alive_;
  std::unordered_map<const void *, std::string> records_; // storage -> weight record
  json weights_ = json::object();
  std::unordered_set<const c10::TensorImpl *> stateTensors_; // parameters and buffers
  std::unordered_set<const c10::TensorImpl *> knownScalars_; // NumToTensor of known numbers
  std::unordered_map<std::string, unsigned> nameCounts_, callCounts_;
  std::vector<Scope> scopes_;
  unsigned depth_ = 0;
  json tensorValues_ = json::object(), nodes_ = json::array(), moduleCalls_ = json::array();
  json liftedInputs_ = json::array(), liftedSpecs_ = json::array();
};

char *copyOut(const std::string &s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

Converter::Converted convert(const char *bytes, size_t size) {
  jit::ExtraFilesMap extra{{kInputsFile, ""}};
  jit::Module module;
  setProgress("while loading the archive (TorchScript's unpickler)");
  try { // read in place: the archive holds the model's weights
    module = jit::load(std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes, static_cast<off_t>(size)),
                       c10::Device(c10::kCPU), extra);
  } catch (const std::bad_alloc &) {
    throw OutOfMemory{""};
  } catch (const std::exception &e) { // c10::Error, or the compiler's ErrorReport on the archive's code
    std::string what = e.what();
    if (const auto *c10e = dynamic_cast<const c10::Error *>(&e))
      what = c10e->what_without_backtrace();
    if (isOutOfMemory(what))
      throw OutOfMemory{allocationOf(what)};
    if (isInternalAssert(what))
      fail("not a loadable TorchScript archive (LibTorch failed an internal check reading it)");
    fail("not a loadable TorchScript archive: " + firstLine(what));
  }
  setProgress("while reading " + std::string(kInputsFile));
  if (extra[kInputsFile].empty())
    fail(std::string("archive without ") + kInputsFile +
         " (the example inputs' shapes): save it with `python -m commlens.export ... --torchscript`");
  json inputs = json::parse(extra[kInputsFile], nullptr, /*allow_exceptions=*/false);
  if (inputs.is_discarded())
    fail(std::string(kInputsFile) + ": not JSON");
  return Converter(std::move(module), inputs).run();
}

} // namespace

extern "C" int commlens_torchscript_to_program_json(const char *bytes, size_t size, char **programJson,
                                                    char **weightsConfigJson, char **error) {
  try {
    Converter::Converted out = convert(bytes, size);
    *programJson = copyOut(out.program.dump());
    *weightsConfigJson = copyOut(out.weightsConfig.dump());
    return 0;
  } catch (const ConversionError &e) {
    *error = copyOut(e.message);
  } catch (const OutOfMemory &e) {
    *error = copyOut(e.what);
    return 2;
  } catch (const std::bad_alloc &) {
    *error = copyOut("");
    return 2;
  } catch (const json::exception &e) {
    *error = copyOut(std::string(kInputsFile) + ": " + firstLine(e.what()));
  } catch (const std::exception &e) {
    std::string what = e.what();
    if (isOutOfMemory(what)) {
      *error = copyOut(allocationOf(what));
      return 2;
    }
    *error = copyOut(isInternalAssert(what) ? "LibTorch failed an internal check on this model" : firstLine(what));
  }
  return 1;
}

extern "C" void commlens_torchscript_free(char *p) { std::free(p); }

extern "C" void commlens_torchscript_set_progress(char *buffer, size_t size) {
  progressBuffer = buffer;
  progressSize = size;
}

extern "C" void commlens_torchscript_init(void) {
  // A parallel op starts the intra-op thread pool, whose threads then exist before the limits.
  (void)at::ones({1 << 16}).sum().item<float>();
}
