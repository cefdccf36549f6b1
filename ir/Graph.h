// The commlens program graph: values, nodes in execution order, the graph signature and the
// module-scope tree. Owned by ExportedProgram; no LibTorch types.
#pragma once

#include "ir/Argument.h"
#include "ir/BoundaryOps.h"
#include "ir/ModuleScopeTree.h"
#include "ir/Types.h"

#include "llvm/ADT/StringMap.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace commlens {

class Node;
struct ExportedProgram;

enum class ValueKind : uint8_t { Tensor, SymInt, SymBool, SymFloat, CustomObj, Token };

class Value {
public:
  const std::string &name() const { return name_; }
  ValueKind kind() const { return kind_; }
  /// Set for tensors.
  const std::optional<TensorMeta> &meta() const { return meta_; }
  void setMeta(TensorMeta m) { meta_ = std::move(m); }
  /// For symbolic scalars: the expression and hint.
  const SymInt &symbol() const { return symbol_; }
  void setSymbol(SymInt s) { symbol_ = std::move(s); }
  /// Null for graph inputs.
  Node *producer() const { return producer_; }

private:
  friend class Graph;
  std::string name_;
  ValueKind kind_ = ValueKind::Tensor;
  std::optional<TensorMeta> meta_;
  SymInt symbol_;
  Node *producer_ = nullptr;
};

/// An operator name split as the dispatcher spells it: "aten::mm.default".
struct OpName {
  std::string ns, name, overload;
  /// Parses "torch.ops.aten.mm.default" or "aten::mm.default"; anything else (python
  /// callables such as "_operator.getitem") keeps the whole text as `name` with `ns` empty.
  static OpName parse(llvm::StringRef target);
  std::string str() const;
  bool operator==(const OpName &) const = default;
};

/// A node's operator: the parsed name and its text, made once per distinct target and kept for
/// the life of the process (a large model's graphs hold ~40k nodes of a few dozen ops; each node
/// parsing and owning its own copy was 4% of a predict).
struct InternedOp {
  OpName name;
  std::string text; ///< name.str()
  std::optional<BoundaryOp> boundary; ///< a commlens:: op declared in ir/BoundaryOps.def
  /// Its first result may share storage with its first argument (a view, `contiguous`, an
  /// in-place op's self), per torch's schema (ir/OpSchemaTable.h).
  bool resultAliasesSelf = false;
  /// The entry for `target` (as OpName::parse reads it); thread-safe, never moves.
  static const InternedOp &get(llvm::StringRef target);
  /// The entry of the empty target (a node before its op is set).
  static const InternedOp *none();
};

class Node {
public:
  const std::string &name() const { return name_; }
  const OpName &op() const { return op_->name; }
  const std::string &opString() const { return op_->text; }
  /// Which commlens:: boundary op the node is, if it is one.
  std::optional<BoundaryOp> boundaryOp() const { return op_->boundary; }
  /// Whether its first result may share storage with its first argument (InternedOp).
  bool resultAliasesSelf() const { return op_->resultAliasesSelf; }
  llvm::ArrayRef<NamedArgument> inputs() const { return inputs_; }
  llvm::MutableArrayRef<NamedArgument> inputs() { return inputs_; }
  const Argument *input(llvm::StringRef argName) const;
  /// Whether the argument is given and is the bool true.
  bool boolInput(llvm::StringRef argName) const;
  /// Results, shaped as in the schema: a tensor, a tensor list, None, a symbolic int...
  llvm::ArrayRef<Argument> outputs() const { return outputs_; }
  /// Every value this node produces, flattened.
  llvm::SmallVector<Value *, 4> results() const;
  /// Every value this node reads, flattened, in argument order.
  llvm::SmallVector<Value *, 4> operands() const;
  /// operands() that are tensors (what DTensor dispatch and the derivatives see).
  llvm::SmallVector<Value *, 4> tensorOperands() const;
  /// Calls `f` on each of operands(), without building the list (hot in every pass).
  template <typename F> void forEachOperand(F &&f) const {
    for (const NamedArgument &na : inputs_) {
      const Argument &a = na.value;
      if (const auto *s = std::get_if<SymIntArg>(&a.storage())) {
        if (s->value)
          f(s->value);
      } else if (const auto *list = std::get_if<SymIntList>(&a.storage())) {
        for (const SymIntArg &s : *list)
          if (s.value)
            f(s.value);
      } else {
        a.forEachTensor(f);
      }
    }
  }
  ModuleScope *scope() const { return scope_; }
  /// The display name of the module the node runs in ("Global" outside every module).
  std::string moduleName() const;
  /// "node 'NAME' OP in MODULE": how an error names the node.
  std::string where() const;
  /// Call index per level of `scope()`'s ancestry below the root (outermost first).
  llvm::ArrayRef<unsigned> callPath() const { return callPath_; }
  void setScope(ModuleScope *s, llvm::SmallVector<unsigned, 4> callPath) {
    scope_ = s;
    callPath_ = std::move(callPath);
  }
  /// Position in the graph's node list, maintained by Graph.
  unsigned index() const { return index_; }
  /// False inside a no_grad region (export's wrap_with_set_grad_enabled(False, ...)): autograd
  /// records nothing for the node.
  bool gradEnabled() const { return gradEnabled_; }
  void setGradEnabled(bool enabled) { gradEnabled_ = enabled; }
  const llvm::StringMap<std::string> &metadata() const;
  void setMetadata(llvm::StringRef key, std::string value);

private:
  friend class Graph;
  std::string name_;
  const InternedOp *op_ = InternedOp::none();
  llvm::SmallVector<NamedArgument, 4> inputs_;
  llvm::SmallVector<Argument, 1> outputs_;
  ModuleScope *scope_ = nullptr;
  llvm::SmallVector<unsigned, 4> callPath_;
  /// Shared by the copies passes make of the node (an exported node's nn_module_stack text is
  /// hundreds of bytes); setMetadata gives the node a map of its own. Null: none.
  std::shared_ptr<const llvm::StringMap<std::string>> metadata_;
  unsigned index_ = 0;
  bool gradEnabled_ = true;
};

enum class InputKind : uint8_t { UserInput, Parameter, Buffer, TensorConstant, CustomObj, Token, ConstantInput };
llvm::StringRef name(InputKind k);

struct InputSpec {
  InputKind kind = InputKind::UserInput;
  Value *value = nullptr;    // null for constant inputs
  std::string target;        // parameter / buffer / constant FQN, or the user input's name
  bool persistent = true;    // buffers
  /// For a parameter that is the same tensor as an earlier one (tied weights): that one's FQN.
  std::string aliasOf;
};

enum class OutputKind : uint8_t {
  UserOutput, LossOutput, BufferMutation, GradientToParameter, GradientToUserInput,
  UserInputMutation, Token, ParameterMutation
};
llvm::StringRef name(OutputKind k);

struct OutputSpec {
  OutputKind kind = OutputKind::UserOutput;
  Argument value;
  std::string target;
};

/// How one module call received its arguments, from the exporter's module_call_graph: recorded
/// for the root always and for a submodule when export preserved its call signature
/// (commlens.export preserves every submodule's). Forward hooks see exactly these arguments, so
/// they say which graph value is which positional or keyword input of the call.
struct CallSignature {
  std::string path;  // attribute path; "" is the root
  unsigned call = 0; // the N of "path@N": the module's N-th call in the forward
  /// One entry per argument, in call order: the tensor, a constant, None, or (a list, tuple or
  /// dict argument) a TensorList of its tensors.
  std::vector<Argument> args;
  std::vector<std::pair<std::string, Argument>> kwargs;
};

class Graph {
public:
  /// A graph with a fresh module-scope tree, or one sharing `scopes` (a rewritten graph keeps
  /// the scopes of the graph it came from).
  explicit Graph(std::shared_ptr<ModuleScopeTree> scopes = std::make_shared<ModuleScopeTree>())
      : scopes_(std::move(scopes)) {}
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  /// Creates a value; names are unique within the graph.
  Value *createValue(llvm::StringRef name, ValueKind kind);
  /// Creates a value named `hint`, or `hint_1`, `hint_2`, ... when taken.
  Value *createUniqueValue(llvm::StringRef hint, ValueKind kind);
  Value *lookupValue(llvm::StringRef name) const;

  /// Appends a node; `outputs` reference values created beforehand, whose producer becomes it.
  Node *appendNode(llvm::StringRef name, llvm::StringRef target, llvm::SmallVector<NamedArgument, 4> &&inputs,
                   llvm::SmallVector<Argument, 1> &&outputs, llvm::StringMap<std::string> metadata = {});
  /// Appends a node with the op and metadata of `like` (a node of this or another graph), which
  /// is not parsed again.
  Node *appendNodeLike(llvm::StringRef name, const Node &like, llvm::SmallVector<NamedArgument, 4> &&inputs,
                       llvm::SmallVector<Argument, 1> &&outputs);

  llvm::ArrayRef<std::unique_ptr<Node>> nodes() const { return nodes_; }
  size_t numNodes() const { return nodes_.size(); }
  size_t numValues() const { return values_.size(); }
  /// Makes room for about this many values and nodes (a pass's rewrite of a graph of that size),
  /// so that the name table is not rehashed as it grows.
  void reserve(size_t values, size_t nodes);

  std::vector<InputSpec> &inputs() { return inputs_; }
  const std::vector<InputSpec> &inputs() const { return inputs_; }
  std::vector<OutputSpec> &outputs() { return outputs_; }
  const std::vector<OutputSpec> &outputs() const { return outputs_; }
  ModuleScopeTree &scopes() { return *scopes_; }
  const ModuleScopeTree &scopes() const { return *scopes_; }
  const std::shared_ptr<ModuleScopeTree> &sharedScopes() const { return scopes_; }

  /// Input spec of a parameter by FQN, or null.
  const InputSpec *parameter(llvm::StringRef fqn) const;

  const std::vector<CallSignature> &callSignatures() const { return callSignatures_; }
  void addCallSignature(CallSignature sig);
  /// The recorded signature of a module's call (the first recorded for it), or null.
  const CallSignature *callSignature(llvm::StringRef path, unsigned call) const;
  /// The user input a plan names by position ("0") or keyword ("mask"): by the root's call
  /// signature; in a graph without one, the N-th user input or the one of that name. Null when
  /// the model has no such input; a non-tensor argument for an input that is a constant.
  std::optional<Argument> userInput(llvm::StringRef key) const;

private:
  friend std::unique_ptr<ExportedProgram> cloneProgram(const ExportedProgram &src);
  /// A new value, named by its (just claimed) entry in valuesByName_.
  Value *define(llvm::StringMapEntry<Value *> &entry, ValueKind kind);
  /// A node without its op, named, in the graph's root scope.
  Node *append(llvm::StringRef name, llvm::SmallVector<NamedArgument, 4> &&inputs, llvm::SmallVector<Argument, 1> &&outputs);

  std::vector<std::unique_ptr<Value>> values_;
  llvm::StringMap<Value *> valuesByName_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<InputSpec> inputs_;
  std::vector<OutputSpec> outputs_;
  std::vector<CallSignature> callSignatures_;
  /// path -> call -> index of its first signature in callSignatures_ (a deep model has thousands,
  /// looked up per module call).
  llvm::StringMap<std::map<unsigned, size_t>> callSignatureIndex_;
  std::shared_ptr<ModuleScopeTree> scopes_;
  unsigned uniqueCounter_ = 0;
};

/// Puts the modules the graph's call signatures record but no node ran (nn.Identity, a module
/// returning its input) into the scope tree, where they were called: after the scopes that ran
/// before the call's inputs existed, under the nearest recorded ancestor. CommDebugMode lists them.
void addCalledModulesWithoutOps(Graph &graph);

struct SchemaVersion {
  int major = 0, minor = 0;
};

/// Metadata of a weight record of the archive (the bytes are never read).
struct WeightInfo {
  std::string fqn;
  std::string record; // e.g. "weight_0"; tied weights share a record
  bool isParameter = true;
  TensorMeta meta;
};

/// A loaded program: the graph plus what the archive says about it. (cloneProgram, in
/// ir/GraphBuilder.h, copies every field: a new one goes there too.)
struct ExportedProgram {
  Graph &graph() { return *graph_; }
  const Graph &graph() const { return *graph_; }
  /// Passes may replace the graph with a rewritten one (sharing the module-scope tree).
  void replaceGraph(std::unique_ptr<Graph> g) { graph_ = std::move(g); }
  SchemaVersion schemaVersion;
  std::string torchVersion;
  std::vector<std::string> verifiers;
  std::vector<WeightInfo> weights;
  /// The parameters are on the meta device and no commlens tie record came with them: the archive
  /// gives every meta tensor one weight record, so tied parameters cannot be told apart (they are
  /// taken as untied).
  bool tiedParametersUnknown = false;
  /// Whether regions ran under torch.autocast (wrap_with_autocast): autocast casts operands at
  /// run time, which the program's recorded dtypes do not show for every tensor.
  bool autocastRegions = false;
  /// The graph already holds the ops the CPU dispatcher runs (the `decompose` pass ran for a CPU
  /// plan): `commlens rank` decomposes once for all of its CPU plans, and the pass leaves such a
  /// program as it is.
  bool decomposedForCpu = false;
  /// Attribute paths of the modules the exporter recorded (module_call_graph), including
  /// modules that produced no node, e.g. containers; "" is the root.
  std::vector<std::string> modulePaths;
  /// Symbol ranges, e.g. "s0" -> [2, 1024]; absent bounds are unbounded.
  std::vector<std::tuple<std::string, std::optional<int64_t>, std::optional<int64_t>>> rangeConstraints;

private:
  std::unique_ptr<Graph> graph_ = std::make_unique<Graph>();
};

} // namespace commlens
