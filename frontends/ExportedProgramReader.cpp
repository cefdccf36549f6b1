#include "frontends/ExportedProgramReader.h"

#include "ir/JsonRef.h"
#include "ir/Error.h"

#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace commlens {
namespace {

/// The largest call index of a module ("path@N"): the module's number of calls, index + 1, is an
/// unsigned (ModuleScope::numCalls).
constexpr unsigned kMaxCallIndex = std::numeric_limits<unsigned>::max() - 1;

ScalarType decodeScalarType(const JsonRef &r) {
  // Export schema numbering (torch/_export/serde/schema.py), not c10's.
  switch (r.asInt()) {
  case 0: return ScalarType::Unknown;
  case 1: return ScalarType::Byte;
  case 2: return ScalarType::Char;
  case 3: return ScalarType::Short;
  case 4: return ScalarType::Int;
  case 5: return ScalarType::Long;
  case 6: return ScalarType::Half;
  case 7: return ScalarType::Float;
  case 8: return ScalarType::Double;
  case 9: return ScalarType::ComplexHalf;
  case 10: return ScalarType::ComplexFloat;
  case 11: return ScalarType::ComplexDouble;
  case 12: return ScalarType::Bool;
  case 13: return ScalarType::BFloat16;
  case 28: return ScalarType::UInt16;
  case 29: return ScalarType::Float8_e4m3fn;
  case 30: return ScalarType::Float8_e5m2;
  case 31: return ScalarType::Float8_e4m3fnuz;
  case 32: return ScalarType::Float8_e5m2fnuz;
  case 33: return ScalarType::Float8_e8m0fnu;
  case 34: return ScalarType::UInt32;
  case 35: return ScalarType::UInt64;
  default: r.fail(fmt::format("unknown scalar type {}", r.asInt()));
  }
}

Layout decodeLayout(const JsonRef &r) {
  int64_t v = r.asInt();
  if (v < 0 || v > 7)
    r.fail(fmt::format("unknown layout {}", v));
  return static_cast<Layout>(v); // schema order matches ours
}

MemoryFormat decodeMemoryFormat(const JsonRef &r) {
  int64_t v = r.asInt();
  if (v < 0 || v > 4)
    r.fail(fmt::format("unknown memory format {}", v));
  return static_cast<MemoryFormat>(v);
}

Device decodeDevice(const JsonRef &r) {
  Device d;
  d.type = r.field("type").asString();
  if (auto idx = r.optField("index"))
    d.index = idx->asInt();
  return d;
}

SymInt decodeSymInt(const JsonRef &r) {
  auto [kind, v] = r.variant();
  if (kind == "as_int")
    return SymInt::concrete(v.asInt());
  if (kind == "as_expr") {
    llvm::StringRef expr = v.field("expr_str").asStringRef();
    if (auto hint = v.optField("hint")) {
      if (hint->isInteger()) // older files: a bare int
        return SymInt::symbolic(expr, hint->asInt(), true);
      auto [hk, hv] = hint->variant();
      if (hk == "as_int")
        return SymInt::symbolic(expr, hv.asInt(), true);
    }
    return SymInt::symbolic(expr, 0, false);
  }
  r.fail(fmt::format("unknown SymInt variant '{}'", kind));
}

TensorMeta decodeTensorMeta(const JsonRef &r) {
  TensorMeta m;
  m.dtype = decodeScalarType(r.field("dtype"));
  for (const JsonRef &s : r.field("sizes").items())
    m.sizes.push_back(decodeSymInt(s));
  m.requiresGrad = r.field("requires_grad").asBool();
  m.device = decodeDevice(r.field("device"));
  for (const JsonRef &s : r.field("strides").items())
    m.strides.push_back(decodeSymInt(s));
  m.storageOffset = decodeSymInt(r.field("storage_offset"));
  m.layout = decodeLayout(r.field("layout"));
  return m;
}

class ProgramDecoder {
public:
  ProgramDecoder(ExportedProgram &program, const NodeCheck &check)
      : program_(program), graph_(program.graph()), check_(check) {}

  void decode(const JsonRef &root) {
    JsonRef version = root.field("schema_version");
    // Compared as read, before they are narrowed to the IR's int (2^32 + 8 is not 8).
    int64_t major = version.field("major").asInt(), minor = version.field("minor").asInt();
    if (major != kSupportedSchemaMajor)
      throw ParseError{fmt::format("unsupported export schema version {}.{} (commlens reads major version {})", major,
                                   minor, kSupportedSchemaMajor)};
    if (minor < 0 || minor > std::numeric_limits<int>::max())
      version.field("minor").fail(fmt::format("integer {} is out of range (0 to {})", minor,
                                              std::numeric_limits<int>::max()));
    program_.schemaVersion = {static_cast<int>(major), static_cast<int>(minor)};
    if (auto tv = root.optField("torch_version"))
      program_.torchVersion = tv->asString();
    if (auto verifiers = root.optField("verifiers"))
      for (const JsonRef &v : verifiers->items())
        program_.verifiers.push_back(v.asString());
    if (auto ranges = root.optField("range_constraints"))
      for (const auto &[sym, rc] : ranges->members()) {
        std::optional<int64_t> lo, hi;
        if (auto v = rc.optField("min_val"))
          lo = v->asInt();
        if (auto v = rc.optField("max_val"))
          hi = v->asInt();
        program_.rangeConstraints.emplace_back(sym, lo, hi);
      }

    JsonRef gm = root.field("graph_module");
    JsonRef g = gm.field("graph");
    contexts_.push_back(NameContext{{}, g.field("tensor_values"), g.optField("sym_int_values"), "", {}, true});
    decodeInputs(g.field("inputs"), gm.field("signature").field("input_specs"));
    for (const JsonRef &n : g.field("nodes").items())
      decodeNode(n, {});
    decodeOutputs(g.field("outputs"), gm.field("signature").field("output_specs"));
    // CommDebugMode names its outermost row "Global" and the root module's row by its class.
    if (graph_.scopes().root()->displayName() == "Global")
      throw ParseError{"the root module's class is named 'Global', as CommDebugMode's outermost row: rename the "
                       "class"};
    if (auto calls = gm.optField("module_call_graph"))
      for (const JsonRef &entry : calls->items()) {
        // "path@N" names the module's N-th call; export records one entry per call it preserved.
        std::string fqn = entry.field("fqn").asString();
        auto [path, callText] = llvm::StringRef(fqn).split('@');
        unsigned call = 0;
        if (!callText.empty() && callText.getAsInteger(10, call))
          entry.field("fqn").fail(fmt::format("malformed call index in '{}'", fqn));
        if (call > kMaxCallIndex)
          entry.field("fqn").fail(fmt::format("call index {} is out of range (at most {})", call, kMaxCallIndex));
        if (call == 0)
          program_.modulePaths.push_back(path.str());
        if (auto sig = entry.optField("signature"))
          if (auto decoded = decodeCallSignature(*sig, path.str(), call))
            graph_.addCallSignature(std::move(*decoded));
      }
    addCalledModulesWithoutOps(graph_);
  }

private:
  /// Names are local to a graph: a higher-order op's subgraph reuses its caller's names (its
  /// inputs and outputs are named like the operands and results of the op).
  struct NameContext {
    llvm::StringMap<Value *> names;
    std::optional<JsonRef> tensorValues, symIntValues;
    std::string prefix; // of the IR names of values defined in this graph
    std::optional<bool> gradEnabled; // set inside wrap_with_set_grad_enabled
    bool top = false;
  };
  NameContext &ctx() { return contexts_.back(); }

  Value *define(const std::string &name, ValueKind kind, const JsonRef &where) {
    if (ctx().names.count(name))
      where.fail(fmt::format("value '{}' is defined twice", name));
    std::string irName = ctx().prefix + name;
    Value *v = ctx().top ? graph_.createValue(irName, kind) : graph_.createUniqueValue(irName, kind);
    if (kind == ValueKind::Tensor) {
      std::optional<JsonRef> meta = ctx().tensorValues->optField(name.c_str());
      if (!meta)
        where.fail(fmt::format("tensor '{}' has no entry in graph.tensor_values", name));
      v->setMeta(decodeTensorMeta(*meta));
    } else if (kind == ValueKind::SymInt && ctx().symIntValues) {
      if (std::optional<JsonRef> symbol = ctx().symIntValues->optField(name.c_str()))
        v->setSymbol(decodeSymInt(*symbol));
    }
    ctx().names[name] = v;
    return v;
  }

  Value *use(const std::string &name, const JsonRef &where) {
    Value *v = ctx().names.lookup(name);
    if (!v)
      where.fail(fmt::format("reference to undefined value '{}'", name));
    return v;
  }

  /// A reference that must name a value of `kind` (a tensor argument naming a SymInt would leave
  /// the consumers without tensor metadata).
  Value *use(const std::string &name, const JsonRef &where, ValueKind kind) {
    Value *v = use(name, where);
    if (v->kind() != kind)
      where.fail(fmt::format("'{}' is {}, expected {}", name, kindName(v->kind()), kindName(kind)));
    return v;
  }

  static const char *kindName(ValueKind k) {
    switch (k) {
    case ValueKind::Tensor: return "a tensor";
    case ValueKind::SymInt: return "a SymInt";
    case ValueKind::SymBool: return "a SymBool";
    case ValueKind::SymFloat: return "a SymFloat";
    case ValueKind::CustomObj: return "a custom object";
    case ValueKind::Token: return "a token";
    }
    return "a value";
  }

  Value *useTensor(const JsonRef &tensorArg) {
    return use(tensorArg.field("name").asString(), tensorArg, ValueKind::Tensor);
  }

  SymIntArg decodeSymIntArg(const JsonRef &r) {
    auto [kind, v] = r.variant();
    if (kind == "as_int")
      return SymIntArg{nullptr, v.asInt()};
    if (kind == "as_name")
      return SymIntArg{use(v.asString(), v, ValueKind::SymInt), 0};
    r.fail(fmt::format("unknown SymInt argument variant '{}'", kind));
  }

  Value *decodeOptionalTensor(const JsonRef &r) {
    auto [kind, v] = r.variant();
    if (kind == "as_tensor")
      return useTensor(v);
    if (kind == "as_none")
      return nullptr;
    r.fail(fmt::format("unknown optional tensor variant '{}'", kind));
  }

  Argument decodeArgument(const JsonRef &r) {
    auto [kind, v] = r.variant();
    if (kind == "as_none")
      return NoneArg{};
    if (kind == "as_tensor")
      return useTensor(v);
    if (kind == "as_tensors") {
      TensorList list;
      for (const JsonRef &t : v.items())
        list.push_back(useTensor(t));
      return list;
    }
    if (kind == "as_optional_tensor") {
      Value *t = decodeOptionalTensor(v);
      return t ? Argument(t) : Argument(NoneArg{});
    }
    if (kind == "as_optional_tensors") {
      OptionalTensorList list;
      for (const JsonRef &t : v.items())
        list.items.push_back(decodeOptionalTensor(t));
      return list;
    }
    if (kind == "as_int")
      return v.asInt();
    if (kind == "as_ints") {
      IntList list;
      for (const JsonRef &i : v.items())
        list.push_back(i.asInt());
      return list;
    }
    if (kind == "as_float")
      return v.asFloat();
    if (kind == "as_floats") {
      FloatList list;
      for (const JsonRef &f : v.items())
        list.push_back(f.asFloat());
      return list;
    }
    if (kind == "as_bool")
      return v.asBool();
    if (kind == "as_bools") {
      BoolList list;
      for (const JsonRef &b : v.items())
        list.push_back(b.asBool());
      return list;
    }
    if (kind == "as_string")
      return v.asString();
    if (kind == "as_strings") {
      StringList list;
      for (const JsonRef &s : v.items())
        list.push_back(s.asString());
      return list;
    }
    if (kind == "as_sym_int")
      return decodeSymIntArg(v);
    if (kind == "as_sym_ints") {
      SymIntList list;
      for (const JsonRef &s : v.items())
        list.push_back(decodeSymIntArg(s));
      return list;
    }
    if (kind == "as_sym_bool") {
      auto [bk, bv] = v.variant();
      if (bk == "as_bool")
        return SymBoolArg{nullptr, bv.asBool()};
      if (bk == "as_name")
        return SymBoolArg{use(bv.asString(), bv, ValueKind::SymBool), false};
      v.fail(fmt::format("unknown SymBool argument variant '{}'", bk));
    }
    if (kind == "as_sym_float") {
      auto [fk, fv] = v.variant();
      if (fk == "as_float")
        return SymFloatArg{nullptr, fv.asFloat()};
      if (fk == "as_name")
        return SymFloatArg{use(fv.asString(), fv, ValueKind::SymFloat), 0};
      v.fail(fmt::format("unknown SymFloat argument variant '{}'", fk));
    }
    if (kind == "as_scalar_type")
      return decodeScalarType(v);
    if (kind == "as_memory_format")
      return decodeMemoryFormat(v);
    if (kind == "as_layout")
      return decodeLayout(v);
    if (kind == "as_device")
      return decodeDevice(v);
    if (kind == "as_complex")
      return ComplexArg{v.field("real").asFloat(), v.field("imag").asFloat()};
    static const char *kKnownUnsupported[] = {"as_graph",         "as_custom_obj",    "as_operator",
                                              "as_nested_tensors", "as_int_lists",     "as_string_to_argument",
                                              "as_float_lists",   "as_sym_bools",     "as_sym_floats"};
    for (const char *k : kKnownUnsupported)
      if (kind == k)
        r.fail(fmt::format("argument variant '{}' is not supported by commlens", kind));
    r.fail(fmt::format("unknown argument variant '{}'", kind));
  }

  /// A module call's arguments: its in_spec (a serialized pytree spec, "[1, {...}]", of the
  /// (args, kwargs) pair) over its flattened inputs. The root records no inputs; its leaves are
  /// the graph's user and constant inputs, in order. None when export could not resolve the
  /// call's inputs (a call inside a higher-order region records none).
  std::optional<CallSignature> decodeCallSignature(const JsonRef &sig, std::string path, unsigned call) {
    CallSignature out{std::move(path), call, {}, {}};
    std::vector<Argument> leaves;
    if (out.path.empty()) {
      for (const InputSpec &in : graph_.inputs())
        if (in.kind == InputKind::UserInput || in.kind == InputKind::ConstantInput)
          leaves.push_back(in.value ? Argument(in.value) : Argument(NoneArg{}));
    } else {
      for (const JsonRef &in : sig.field("inputs").items())
        leaves.push_back(decodeArgument(in));
    }
    JsonRef specText = sig.field("in_spec");
    auto parsed = parseJsonText(specText.asString(), specText.path());
    if (!parsed)
      specText.fail(takeMessage(parsed.takeError()));
    JsonRef spec = (*parsed)->root(specText.path());
    if (!spec.isArray() || spec.size() != 2)
      spec.fail("expected [protocol, treespec]");
    JsonRef top = spec.at(1);
    std::vector<JsonRef> halves = top.field("children_spec").items();
    if (!top.field("type").isString("builtins.tuple") || halves.size() != 2)
      top.fail("expected the pytree spec of an (args, kwargs) pair");
    if (!out.path.empty() && leaves.empty() && countLeaves(top) > 0)
      return std::nullopt;
    size_t next = 0;
    // One argument: a leaf is the flattened input itself; a container keeps its tensors.
    auto takeArgument = [&](const JsonRef &child) -> Argument {
      size_t n = countLeaves(child);
      if (next + n > leaves.size())
        child.fail(fmt::format("the spec has more leaves than the {} recorded inputs", leaves.size()));
      size_t first = next;
      next += n;
      if (child.field("type").isNull())
        return leaves[first];
      TensorList tensors;
      for (size_t i = first; i < next; ++i)
        for (Value *v : leaves[i].tensors())
          tensors.push_back(v);
      return tensors;
    };
    for (const JsonRef &arg : halves[0].field("children_spec").items())
      out.args.push_back(takeArgument(arg));
    std::vector<JsonRef> kwargValues = halves[1].field("children_spec").items();
    JsonRef keysText = halves[1].field("context");
    auto keys = parseJsonText(keysText.asString(), keysText.path());
    if (!keys)
      keysText.fail(takeMessage(keys.takeError()));
    JsonRef keyList = (*keys)->root(keysText.path());
    if (!keyList.isArray() || keyList.size() != kwargValues.size())
      keysText.fail(fmt::format("expected {} keyword names", kwargValues.size()));
    for (size_t i = 0; i < kwargValues.size(); ++i)
      out.kwargs.emplace_back(keyList.at(i).asString(), takeArgument(kwargValues[i]));
    if (next != leaves.size())
      specText.fail(fmt::format("the spec has {} leaves for {} recorded inputs", next, leaves.size()));
    return out;
  }

  static size_t countLeaves(const JsonRef &spec) {
    if (spec.field("type").isNull())
      return 1;
    size_t n = 0;
    for (const JsonRef &child : spec.field("children_spec").items())
      n += countLeaves(child);
    return n;
  }

  void decodeInputs(const JsonRef &inputs, const JsonRef &specs) {
    std::vector<JsonRef> args = inputs.items();
    std::vector<JsonRef> specList = specs.items();
    if (args.size() != specList.size())
      specs.fail(fmt::format("{} input specs for {} graph inputs", specList.size(), args.size()));
    for (size_t i = 0; i < args.size(); ++i) {
      auto [specKind, spec] = specList[i].variant();
      InputSpec in;
      // Named variables, not a structured binding: the lambda below captures them, which C++20
      // allows but clang before 16 rejects.
      std::pair<llvm::StringRef, JsonRef> argVariant = args[i].variant();
      llvm::StringRef argKind = argVariant.first;
      const JsonRef &arg = argVariant.second;
      auto defineArg = [&]() -> Value * {
        if (argKind == "as_tensor")
          return define(arg.field("name").asString(), ValueKind::Tensor, arg);
        if (argKind == "as_sym_int")
          return define(arg.field("as_name").asString(), ValueKind::SymInt, arg);
        if (argKind == "as_custom_obj")
          return define(arg.field("name").asString(), ValueKind::CustomObj, arg);
        if (argKind == "as_none" || argKind == "as_int" || argKind == "as_float" || argKind == "as_bool" ||
            argKind == "as_string")
          return nullptr; // constant inputs carry no value
        args[i].fail(fmt::format("unsupported graph input variant '{}'", argKind));
      };
      if (specKind == "user_input") {
        in.kind = InputKind::UserInput;
        in.value = defineArg();
        in.target = in.value ? in.value->name() : std::string();
      } else if (specKind == "parameter") {
        in.kind = InputKind::Parameter;
        in.value = defineArg();
        in.target = spec.field("parameter_name").asString();
      } else if (specKind == "buffer") {
        in.kind = InputKind::Buffer;
        in.value = defineArg();
        in.target = spec.field("buffer_name").asString();
        if (auto p = spec.optField("persistent"))
          in.persistent = p->asBool();
      } else if (specKind == "tensor_constant") {
        in.kind = InputKind::TensorConstant;
        in.value = defineArg();
        in.target = spec.field("tensor_constant_name").asString();
      } else if (specKind == "custom_obj") {
        in.kind = InputKind::CustomObj;
        in.value = defineArg();
        in.target = spec.field("custom_obj_name").asString();
      } else if (specKind == "token") {
        in.kind = InputKind::Token;
        in.value = define(spec.field("arg").field("name").asString(), ValueKind::Token, spec);
      } else if (specKind == "constant_input") {
        in.kind = InputKind::ConstantInput;
        in.target = spec.field("name").asString();
      } else {
        specList[i].fail(fmt::format("unknown input spec variant '{}'", specKind));
      }
      graph_.inputs().push_back(std::move(in));
    }
  }

  void decodeOutputs(const JsonRef &outputs, const JsonRef &specs) {
    std::vector<JsonRef> args = outputs.items();
    std::vector<JsonRef> specList = specs.items();
    if (args.size() != specList.size())
      specs.fail(fmt::format("{} output specs for {} graph outputs", specList.size(), args.size()));
    static const std::pair<const char *, OutputKind> kKinds[] = {
        {"user_output", OutputKind::UserOutput},
        {"loss_output", OutputKind::LossOutput},
        {"buffer_mutation", OutputKind::BufferMutation},
        {"gradient_to_parameter", OutputKind::GradientToParameter},
        {"gradient_to_user_input", OutputKind::GradientToUserInput},
        {"user_input_mutation", OutputKind::UserInputMutation},
        {"token", OutputKind::Token},
        {"parameter_mutation", OutputKind::ParameterMutation}};
    for (size_t i = 0; i < args.size(); ++i) {
      auto [specKind, spec] = specList[i].variant();
      OutputSpec out;
      bool known = false;
      for (const auto &[n, k] : kKinds)
        if (specKind == n) {
          out.kind = k;
          known = true;
        }
      if (!known)
        specList[i].fail(fmt::format("unknown output spec variant '{}'", specKind));
      for (const char *targetField : {"buffer_name", "parameter_name", "user_input_name"})
        if (auto t = spec.optField(targetField))
          out.target = t->asString();
      if (out.kind == OutputKind::Token)
        out.value = NoneArg{};
      else
        out.value = decodeArgument(args[i]);
      graph_.outputs().push_back(std::move(out));
    }
  }

  Argument defineOutput(const JsonRef &r) {
    auto [kind, v] = r.variant();
    if (kind == "as_tensor")
      return define(v.field("name").asString(), ValueKind::Tensor, v);
    if (kind == "as_tensors") {
      TensorList list;
      for (const JsonRef &t : v.items())
        list.push_back(define(t.field("name").asString(), ValueKind::Tensor, t));
      return list;
    }
    if (kind == "as_optional_tensors") {
      OptionalTensorList list;
      for (const JsonRef &t : v.items()) {
        auto [tk, tv] = t.variant();
        list.items.push_back(tk == "as_tensor" ? define(tv.field("name").asString(), ValueKind::Tensor, tv) : nullptr);
      }
      return list;
    }
    if (kind == "as_none")
      return NoneArg{};
    if (kind == "as_sym_int")
      return SymIntArg{define(v.field("as_name").asString(), ValueKind::SymInt, v), 0};
    if (kind == "as_sym_bool")
      return SymBoolArg{define(v.field("as_name").asString(), ValueKind::SymBool, v), false};
    if (kind == "as_sym_float")
      return SymFloatArg{define(v.field("as_name").asString(), ValueKind::SymFloat, v), 0};
    r.fail(fmt::format("unsupported node output variant '{}'", kind));
  }

  /// `inherited`: the module stack of the higher-order op whose subgraph holds the node (used
  /// when the node has none of its own).
  void decodeNode(const JsonRef &n, llvm::ArrayRef<ModuleStackEntry> inherited) {
    std::string target = n.field("target").asString();
    std::string name;
    if (auto nm = n.optField("name"))
      name = nm->asString();
    llvm::StringMap<std::string> metadata;
    for (const auto &[k, v] : n.field("metadata").members())
      metadata[k] = v.asString();

    // Scope first, so that argument errors can name the module. Consecutive nodes mostly share
    // one module stack text: it is parsed and looked up once per run of them.
    llvm::SmallVector<ModuleStackEntry, 4> stack(inherited.begin(), inherited.end());
    ModuleScope *scope = nullptr;
    if (auto it = metadata.find("nn_module_stack"); it != metadata.end()) {
      if (!lastStack_ || lastStack_->text != it->second) {
        auto parsed = parseModuleStack(it->second);
        if (!parsed)
          n.fail(fmt::format("metadata.nn_module_stack: {}", takeMessage(parsed.takeError())));
        lastStack_ = ParsedStack{it->second, std::move(*parsed), nullptr};
        lastStack_->scope = graph_.scopes().getOrCreate(lastStack_->entries);
      }
      stack = lastStack_->entries;
      scope = lastStack_->scope;
    } else {
      scope = graph_.scopes().getOrCreate(stack);
    }
    llvm::SmallVector<unsigned, 4> callPath;
    for (const ModuleStackEntry &e : stack)
      if (!e.path.empty())
        callPath.push_back(e.callIndex);

    try {
      if (target == "torch.ops.higher_order._export_tracepoint") {
        aliasTracepoint(n);
        return;
      }
      if (llvm::StringRef(target).startswith("torch.ops.higher_order.")) {
        inlineHigherOrderOp(n, target, stack);
        return;
      }
      // commlens::* are the boundary ops apply-plan inserts (its passes trust their arguments);
      // torch.export writes none.
      if (OpName::parse(target).ns == "commlens")
        n.field("target").fail("commlens:: ops are commlens' own plan-boundary ops, not ops of an exported program");
      llvm::SmallVector<NamedArgument, 4> inputs;
      for (const JsonRef &in : n.field("inputs").items()) {
        NamedArgument a;
        a.name = in.field("name").asString();
        a.value = decodeArgument(in.field("arg"));
        if (auto kind = in.optField("kind"))
          a.keyword = kind->asInt() == 2;
        inputs.push_back(std::move(a));
      }
      llvm::SmallVector<Argument, 1> outputs;
      for (const JsonRef &out : n.field("outputs").items())
        outputs.push_back(defineOutput(out));
      if (name.empty()) { // older minors have no Node.name: use the first result's name
        for (const Argument &o : outputs)
          for (Value *v : o.tensors())
            if (name.empty())
              name = v->name();
        if (name.empty())
          name = fmt::format("node{}", graph_.numNodes());
      }
      if (!nodeNames_.insert(ctx().prefix + name).second)
        n.fail(fmt::format("node name '{}' is used twice", ctx().prefix + name));
      Node *node = graph_.appendNode(ctx().prefix + name, target, std::move(inputs), std::move(outputs),
                                     std::move(metadata));
      node->setScope(scope, std::move(callPath));
      node->setGradEnabled(ctx().gradEnabled.value_or(true));
      if (check_)
        if (llvm::Error err = check_(*node))
          n.fail(takeMessage(std::move(err)));
    } catch (ParseError &e) {
      e.message += fmt::format(" (node '{}' {} in {})", name.empty() ? "?" : name, target, scope->displayName());
      throw;
    }
  }

  /// Export strips the markers preserve_module_call_signature puts around each module call,
  /// except inside higher-order regions: there each result is its tensor operand.
  void aliasTracepoint(const JsonRef &n) {
    std::vector<Value *> operands;
    for (const JsonRef &in : n.field("inputs").items())
      if (auto [kind, v] = in.field("arg").variant(); kind == "as_tensor")
        operands.push_back(useTensor(v));
    std::vector<JsonRef> outs = n.field("outputs").items();
    if (outs.size() != operands.size())
      n.field("outputs").fail(fmt::format("_export_tracepoint with {} results for {} tensor operands", outs.size(),
                                          operands.size()));
    for (size_t i = 0; i < outs.size(); ++i) {
      auto [kind, v] = outs[i].variant();
      if (kind != "as_tensor")
        outs[i].fail(fmt::format("_export_tracepoint result variant '{}' is not supported by commlens", kind));
      std::string name = v.field("name").asString();
      if (ctx().names.count(name))
        outs[i].fail(fmt::format("value '{}' is defined twice", name));
      ctx().names[name] = operands[i];
    }
  }

  /// Higher-order ops that only change a mode around a region are inlined: their subgraph's
  /// nodes join the graph (module scope kept), the op's results are the subgraph's outputs.
  /// wrap_with_set_grad_enabled(enabled, subgraph, *operands) marks its nodes' grad mode;
  /// wrap_with_autocast(device, dtype, enabled, cache, subgraph, *operands) keeps the dtypes
  /// export recorded. Any other higher-order op is refused by name.
  void inlineHigherOrderOp(const JsonRef &n, const std::string &target, llvm::ArrayRef<ModuleStackEntry> stack) {
    llvm::StringRef op = llvm::StringRef(target).drop_front(strlen("torch.ops.higher_order."));
    if (op != "wrap_with_set_grad_enabled" && op != "wrap_with_autocast")
      n.fail(fmt::format("higher-order op '{}' is not supported by commlens yet", op));
    std::vector<JsonRef> inputs = n.field("inputs").items();
    size_t graphAt = inputs.size();
    for (size_t i = 0; i < inputs.size() && graphAt == inputs.size(); ++i)
      if (inputs[i].field("arg").variant().first == "as_graph")
        graphAt = i;
    if (graphAt == inputs.size())
      n.field("inputs").fail(fmt::format("{} without a subgraph argument", op));
    std::optional<bool> gradEnabled = ctx().gradEnabled;
    program_.autocastRegions |= op == "wrap_with_autocast";
    if (op == "wrap_with_set_grad_enabled") {
      if (graphAt != 1)
        n.field("inputs").fail("wrap_with_set_grad_enabled expects (enabled, subgraph, *operands)");
      gradEnabled = inputs[0].field("arg").variant().second.asBool();
    }
    std::vector<Argument> operands;
    for (size_t i = graphAt + 1; i < inputs.size(); ++i)
      operands.push_back(decodeArgument(inputs[i].field("arg")));
    JsonRef sub = inputs[graphAt].field("arg").variant().second;
    JsonRef g = sub.field("graph");
    std::string name = n.optField("name") ? n.field("name").asString() : sub.field("name").asString();

    contexts_.push_back(NameContext{{}, g.field("tensor_values"), g.optField("sym_int_values"),
                                    ctx().prefix + name + ".", gradEnabled, false});
    std::vector<JsonRef> params = g.field("inputs").items();
    if (params.size() != operands.size())
      g.field("inputs").fail(fmt::format("{} subgraph inputs for {} operands", params.size(), operands.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      auto [kind, v] = params[i].variant();
      if (kind == "as_tensor" && operands[i].isTensor())
        ctx().names[v.field("name").asString()] = operands[i].tensor();
      else if (kind == "as_sym_int" && operands[i].is<SymIntArg>() && operands[i].get<SymIntArg>().isSymbolic())
        ctx().names[v.field("as_name").asString()] = operands[i].get<SymIntArg>().value;
      else
        params[i].fail(fmt::format("subgraph input variant '{}' does not match its operand", kind));
    }
    for (const JsonRef &inner : g.field("nodes").items())
      decodeNode(inner, stack);
    std::vector<Value *> results;
    for (const JsonRef &out : g.field("outputs").items()) {
      auto [kind, v] = out.variant();
      if (kind != "as_tensor")
        out.fail(fmt::format("subgraph output variant '{}' is not supported by commlens", kind));
      results.push_back(use(v.field("name").asString(), v));
    }
    contexts_.pop_back();

    std::vector<JsonRef> outs = n.field("outputs").items();
    std::vector<std::string> outNames;
    for (const JsonRef &out : outs) {
      auto [kind, v] = out.variant();
      if (kind == "as_tensor")
        outNames.push_back(v.field("name").asString());
      else if (kind == "as_tensors")
        for (const JsonRef &t : v.items())
          outNames.push_back(t.field("name").asString());
      else
        out.fail(fmt::format("{} output variant '{}' is not supported by commlens", op, kind));
    }
    if (outNames.size() != results.size())
      n.field("outputs").fail(fmt::format("{} results for {} subgraph outputs", outNames.size(), results.size()));
    for (size_t i = 0; i < outNames.size(); ++i) {
      if (ctx().names.count(outNames[i]))
        n.field("outputs").fail(fmt::format("value '{}' is defined twice", outNames[i]));
      ctx().names[outNames[i]] = results[i];
    }
  }

  ExportedProgram &program_;
  Graph &graph_;
  const NodeCheck &check_;
  std::vector<NameContext> contexts_;
  llvm::StringSet<> nodeNames_; // IR names of the nodes so far
  struct ParsedStack {
    std::string text; // metadata.nn_module_stack as written
    llvm::SmallVector<ModuleStackEntry, 4> entries;
    ModuleScope *scope;
  };
  std::optional<ParsedStack> lastStack_; // the previous node's
};

} // namespace

llvm::Expected<llvm::SmallVector<ModuleStackEntry, 4>> parseModuleStack(llvm::StringRef text) {
  llvm::SmallVector<ModuleStackEntry, 4> out;
  llvm::SmallVector<llvm::StringRef, 8> entries;
  text.split(entries, ';', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef entry : entries) {
    llvm::SmallVector<llvm::StringRef, 3> parts;
    entry.split(parts, ',');
    if (parts.size() != 3)
      return makeError("malformed entry '{}' (expected key,path,type)", entry.str());
    ModuleStackEntry e;
    e.path = parts[1].str();
    e.type = parts[2].str();
    auto [key, call] = parts[0].rsplit('@');
    unsigned idx = 0;
    if (!call.empty() && key != parts[0] && call.getAsInteger(10, idx))
      return makeError("malformed call index in key '{}'", parts[0].str());
    if (idx > kMaxCallIndex)
      return makeError("call index {} in key '{}' is out of range (at most {})", idx, parts[0].str(), kMaxCallIndex);
    e.callIndex = idx;
    out.push_back(std::move(e));
  }
  return out;
}

llvm::Expected<std::unique_ptr<ExportedProgram>> parseExportedProgram(llvm::StringRef modelJson,
                                                                      llvm::StringRef recordName,
                                                                      const NodeCheck &check, bool padded) {
  auto doc = parseJsonText(modelJson, recordName, padded);
  if (!doc)
    return doc.takeError();
  auto program = std::make_unique<ExportedProgram>();
  try {
    ProgramDecoder(*program, check).decode((*doc)->root());
  } catch (const ParseError &e) {
    return makeError("{}: {}", recordName.str(), e.message);
  }
  return program;
}

llvm::Error parseWeightsConfig(llvm::StringRef configJson, ExportedProgram &program, llvm::StringRef recordName) {
  auto doc = parseJsonText(configJson, recordName);
  if (!doc)
    return doc.takeError();
  try {
    JsonRef root = (*doc)->root();
    for (const auto &[fqn, payload] : root.field("config").members()) {
      WeightInfo w;
      w.fqn = fqn.str();
      w.record = payload.field("path_name").asString();
      w.isParameter = payload.field("is_param").asBool();
      if (auto meta = payload.optField("tensor_meta"))
        w.meta = decodeTensorMeta(*meta);
      program.weights.push_back(std::move(w));
    }
  } catch (const ParseError &e) {
    return makeError("{}: {}", recordName.str(), e.message);
  }
  return llvm::Error::success();
}

} // namespace commlens
