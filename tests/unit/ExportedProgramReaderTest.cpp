#include "frontends/ExportedProgramReader.h"
#include "ir/JsonRef.h"
#include "ir/Error.h"

#include <gtest/gtest.h>

#include <regex>

using namespace commlens;

namespace {

// A hand-written program in the torch 2.13 serialized form: y = linear(x, fc.weight) inside
// module "fc" (called for the second time, key suffix @1), then a sym_size node.
constexpr const char *kProgram = R"({
 "graph_module": {
  "graph": {
   "inputs": [{"as_tensor": {"name": "p_fc_weight"}}, {"as_tensor": {"name": "x"}}],
   "outputs": [{"as_tensor": {"name": "linear"}}],
   "nodes": [
    {"target": "torch.ops.aten.linear.default",
     "inputs": [{"name": "input", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                {"name": "weight", "arg": {"as_tensor": {"name": "p_fc_weight"}}, "kind": 1}],
     "outputs": [{"as_tensor": {"name": "linear"}}],
     "metadata": {"nn_module_stack": "L__self__,,__main__.Net;L__self__fc@1,fc,torch.nn.modules.linear.Linear"},
     "is_hop_single_tensor_return": null, "name": "linear"},
    {"target": "torch.ops.aten.sym_size.int",
     "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                {"name": "dim", "arg": {"as_int": 0}, "kind": 1}],
     "outputs": [{"as_sym_int": {"as_name": "sym_size_int"}}],
     "metadata": {}, "is_hop_single_tensor_return": null, "name": "sym_size_int"}
   ],
   "tensor_values": {
    "p_fc_weight": {"dtype": 13, "sizes": [{"as_int": 16}, {"as_int": 8}], "requires_grad": true,
                    "device": {"type": "cpu", "index": null}, "strides": [{"as_int": 8}, {"as_int": 1}],
                    "storage_offset": {"as_int": 0}, "layout": 7},
    "x": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "s0", "hint": {"as_int": 3}}}, {"as_int": 8}],
          "requires_grad": false, "device": {"type": "cpu", "index": null},
          "strides": [{"as_int": 8}, {"as_int": 1}], "storage_offset": {"as_int": 0}, "layout": 7},
    "linear": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "s0", "hint": {"as_int": 3}}}, {"as_int": 16}],
               "requires_grad": true, "device": {"type": "cpu", "index": null},
               "strides": [{"as_int": 16}, {"as_int": 1}], "storage_offset": {"as_int": 0}, "layout": 7}
   },
   "sym_int_values": {"sym_size_int": {"as_expr": {"expr_str": "s0", "hint": {"as_int": 3}}}},
   "sym_bool_values": {}, "is_single_tensor_return": false, "custom_obj_values": {}, "sym_float_values": {}
  },
  "signature": {
   "input_specs": [{"parameter": {"arg": {"name": "p_fc_weight"}, "parameter_name": "fc.weight"}},
                   {"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
   "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "linear"}}}}]
  },
  "module_call_graph": [], "metadata": {}, "treespec_namedtuple_fields": {}
 },
 "opset_version": {"aten": 10}, "range_constraints": {"s0": {"min_val": 2, "max_val": null}},
 "schema_version": {"major": 8, "minor": 20}, "verifiers": ["TRAINING"], "torch_version": "2.13.0+cpu",
 "guards_code": []
})";

std::string replaced(const std::string &from, const std::string &to) {
  std::string doc = kProgram;
  size_t pos = doc.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return doc.replace(pos, from.size(), to);
}

std::string errorOf(const std::string &doc) {
  auto p = parseExportedProgram(doc);
  EXPECT_FALSE(static_cast<bool>(p));
  return p ? std::string() : takeMessage(p.takeError());
}

} // namespace

TEST(ExportedProgramReader, ReadsGraphSignatureScopesAndShapes) {
  auto p = parseExportedProgram(kProgram);
  ASSERT_TRUE(static_cast<bool>(p)) << takeMessage(p.takeError());
  const ExportedProgram &prog = **p;
  EXPECT_EQ(prog.schemaVersion.major, 8);
  EXPECT_EQ(prog.schemaVersion.minor, 20);
  EXPECT_EQ(prog.torchVersion, "2.13.0+cpu");
  ASSERT_EQ(prog.rangeConstraints.size(), 1u);
  EXPECT_EQ(std::get<1>(prog.rangeConstraints[0]), 2);
  EXPECT_FALSE(std::get<2>(prog.rangeConstraints[0]).has_value());

  const Graph &g = prog.graph();
  ASSERT_EQ(g.inputs().size(), 2u);
  EXPECT_EQ(g.inputs()[0].kind, InputKind::Parameter);
  EXPECT_EQ(g.inputs()[0].target, "fc.weight");
  EXPECT_EQ(g.inputs()[0].value->meta()->dtype, ScalarType::BFloat16); // schema 13, not c10's 15
  EXPECT_EQ(g.inputs()[1].kind, InputKind::UserInput);
  EXPECT_EQ(g.inputs()[1].value->meta()->str(), "f32[s0=3, 8]");

  ASSERT_EQ(g.numNodes(), 2u);
  const Node &lin = *g.nodes()[0];
  EXPECT_EQ(lin.opString(), "aten::linear.default");
  EXPECT_EQ(lin.scope()->displayName(), "Net.fc");
  EXPECT_EQ(lin.scope()->type(), "torch.nn.modules.linear.Linear");
  ASSERT_EQ(lin.callPath().size(), 1u);
  EXPECT_EQ(lin.callPath()[0], 1u);
  EXPECT_EQ(lin.input("weight")->tensor(), g.inputs()[0].value);
  EXPECT_EQ(lin.results()[0]->producer(), &lin);

  const Node &size = *g.nodes()[1];
  EXPECT_EQ(size.scope(), g.scopes().root()); // no nn_module_stack: the root
  Value *sym = size.results()[0];
  EXPECT_EQ(sym->kind(), ValueKind::SymInt);
  EXPECT_EQ(sym->symbol().expr(), "s0");
  EXPECT_EQ(sym->symbol().hint, 3);
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0].value.tensor(), lin.results()[0]);
}

TEST(ExportedProgramReader, ModuleStackParsing) {
  auto s = parseModuleStack("L__self__,,__main__.M;L__self__layers.0.fc@2,layers.0.fc,torch.nn.Linear");
  ASSERT_TRUE(static_cast<bool>(s));
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].path, "");
  EXPECT_EQ((*s)[0].type, "__main__.M");
  EXPECT_EQ((*s)[1].path, "layers.0.fc");
  EXPECT_EQ((*s)[1].callIndex, 2u);
  auto bad = parseModuleStack("L__self__,__main__.M");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(takeMessage(bad.takeError()), "malformed entry 'L__self__,__main__.M' (expected key,path,type)");
  // the module's call count, index + 1, must fit its unsigned
  auto last = parseModuleStack("L__self__fc@4294967294,fc,torch.nn.Linear");
  ASSERT_TRUE(static_cast<bool>(last));
  EXPECT_EQ((*last)[0].callIndex, 4294967294u);
  auto past = parseModuleStack("L__self__fc@4294967295,fc,torch.nn.Linear");
  ASSERT_FALSE(static_cast<bool>(past));
  EXPECT_EQ(takeMessage(past.takeError()),
            "call index 4294967295 in key 'L__self__fc@4294967295' is out of range (at most 4294967294)");
}

TEST(ExportedProgramReader, RejectsOtherSchemaMajors) {
  EXPECT_EQ(errorOf(replaced(R"("major": 8)", R"("major": 9)")),
            "models/model.json: unsupported export schema version 9.20 (commlens reads major version 8)");
  // compared before it is narrowed to an int: 2^32 + 8 is not 8
  EXPECT_EQ(errorOf(replaced(R"("major": 8)", R"("major": 4294967304)")),
            "models/model.json: unsupported export schema version 4294967304.20 (commlens reads major version 8)");
  EXPECT_EQ(errorOf(replaced(R"("minor": 20)", R"("minor": 4294967316)")),
            "models/model.json: schema_version.minor: integer 4294967316 is out of range (0 to 2147483647)");
}

TEST(ExportedProgramReader, SyntaxErrorNamesTheRecordAndPosition) {
  std::string msg = errorOf("{\"graph_module\": ");
  EXPECT_TRUE(msg.rfind("models/model.json: invalid JSON: parse error at line 1, column 18", 0) == 0) << msg; // 17 characters read, then end of input
}

// nlohmann's parser throws out_of_range, not parse_error, for a number past double's range.
TEST(ExportedProgramReader, NumberOverflowIsInvalidJson) {
  EXPECT_EQ(errorOf(R"({"graph_module": -1e400})"), "models/model.json: invalid JSON: number overflow parsing '-1e400'");
}

TEST(ExportedProgramReader, MissingFieldNamesThePath) {
  EXPECT_EQ(errorOf(replaced(R"("requires_grad": false,)", "")),
            "models/model.json: graph_module.graph.tensor_values.x: missing required field 'requires_grad'");
}

TEST(ExportedProgramReader, UnknownArgumentVariantNamesNodeAndModule) {
  EXPECT_EQ(errorOf(replaced(R"({"as_int": 0}, "kind")", R"({"as_widget": 0}, "kind")")),
            "models/model.json: graph_module.graph.nodes[1].inputs[1].arg: unknown argument variant 'as_widget' "
            "(node 'sym_size_int' torch.ops.aten.sym_size.int in Net)");
  EXPECT_EQ(errorOf(replaced(R"({"as_int": 0}, "kind")", R"({"as_graph": {}}, "kind")")),
            "models/model.json: graph_module.graph.nodes[1].inputs[1].arg: argument variant 'as_graph' is not "
            "supported by commlens (node 'sym_size_int' torch.ops.aten.sym_size.int in Net)");
}

TEST(ExportedProgramReader, UndefinedValueIsAnError) {
  EXPECT_EQ(errorOf(replaced(R"("arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                {"name": "weight")",
                             R"("arg": {"as_tensor": {"name": "nope"}}, "kind": 1},
                {"name": "weight")")),
            "models/model.json: graph_module.graph.nodes[0].inputs[0].arg.as_tensor: reference to undefined value "
            "'nope' (node 'linear' torch.ops.aten.linear.default in Net.fc)");
}

TEST(ExportedProgramReader, WeightsConfigReadsMetadataOnly) {
  auto p = parseExportedProgram(kProgram);
  ASSERT_TRUE(static_cast<bool>(p));
  const char *config = R"({"config": {"fc.weight": {"path_name": "weight_0", "is_param": true, "use_pickle": false,
    "tensor_meta": {"dtype": 7, "sizes": [{"as_int": 16}, {"as_int": 8}], "requires_grad": true,
    "device": {"type": "cuda", "index": 0}, "strides": [{"as_int": 8}, {"as_int": 1}],
    "storage_offset": {"as_int": 0}, "layout": 7}}}})";
  ASSERT_FALSE(static_cast<bool>(parseWeightsConfig(config, **p)));
  ASSERT_EQ((*p)->weights.size(), 1u);
  EXPECT_EQ((*p)->weights[0].fqn, "fc.weight");
  EXPECT_EQ((*p)->weights[0].record, "weight_0");
  EXPECT_EQ((*p)->weights[0].meta.device.str(), "cuda:0");
  EXPECT_EQ(takeMessage(parseWeightsConfig(R"({"config": {"w": {"is_param": true}}})", **p)),
            "data/weights/model_weights_config.json: config.w: missing required field 'path_name'");
}

namespace {
// module_call_graph as torch 2.13 writes it when export preserves call signatures: the root's
// in_spec covers the user inputs (here x, plus a keyword input "mask" that is x again), fc's
// second call ("fc@1") was made as fc(x, None, scale=2, pair=[x, linear]).
constexpr const char *kCallGraph = R"("module_call_graph": [
  {"fqn": "", "signature": {"inputs": [], "outputs": [],
   "in_spec": "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": [{\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": [{\"type\": null, \"context\": null, \"children_spec\": []}]}, {\"type\": \"builtins.dict\", \"context\": \"[]\", \"children_spec\": []}]}]",
   "out_spec": "", "forward_arg_names": ["x"]}},
  {"fqn": "fc", "signature": null},
  {"fqn": "fc@1", "signature": {
   "inputs": [{"as_tensor": {"name": "x"}}, {"as_none": true}, {"as_int": 2}, {"as_tensor": {"name": "x"}},
              {"as_tensor": {"name": "linear"}}],
   "outputs": [{"as_tensor": {"name": "linear"}}],
   "in_spec": "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": [{\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": [{\"type\": null, \"context\": null, \"children_spec\": []}, {\"type\": null, \"context\": null, \"children_spec\": []}]}, {\"type\": \"builtins.dict\", \"context\": \"[\\\"scale\\\", \\\"pair\\\"]\", \"children_spec\": [{\"type\": null, \"context\": null, \"children_spec\": []}, {\"type\": \"builtins.list\", \"context\": \"null\", \"children_spec\": [{\"type\": null, \"context\": null, \"children_spec\": []}, {\"type\": null, \"context\": null, \"children_spec\": []}]}]}]}]",
   "out_spec": "", "forward_arg_names": null}}
 ])";
} // namespace

TEST(ExportedProgramReader, DecodesModuleCallSignatures) {
  auto p = parseExportedProgram(replaced(R"("module_call_graph": [])", kCallGraph));
  ASSERT_TRUE(static_cast<bool>(p)) << takeMessage(p.takeError());
  const Graph &g = (*p)->graph();
  EXPECT_EQ((*p)->modulePaths, (std::vector<std::string>{"", "fc"})); // one path per module, not per call
  ASSERT_EQ(g.callSignatures().size(), 2u);
  Value *x = g.lookupValue("x"), *linear = g.lookupValue("linear");

  const CallSignature *root = g.callSignature("", 0);
  ASSERT_NE(root, nullptr);
  ASSERT_EQ(root->args.size(), 1u);
  EXPECT_EQ(root->args[0].tensor(), x);
  EXPECT_TRUE(root->kwargs.empty());
  EXPECT_EQ(g.userInput("0")->tensor(), x);
  EXPECT_FALSE(g.userInput("1"));
  EXPECT_FALSE(g.userInput("x")); // by position only: x is not a keyword input

  EXPECT_EQ(g.callSignature("fc", 0), nullptr); // not preserved
  const CallSignature *second = g.callSignature("fc", 1);
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(second->args.size(), 2u);
  EXPECT_EQ(second->args[0].tensor(), x);
  EXPECT_TRUE(second->args[1].is<NoneArg>());
  ASSERT_EQ(second->kwargs.size(), 2u);
  EXPECT_EQ(second->kwargs[0].first, "scale");
  EXPECT_EQ(second->kwargs[0].second.get<int64_t>(), 2);
  EXPECT_EQ(second->kwargs[1].first, "pair");
  EXPECT_EQ(second->kwargs[1].second.tensors(), (llvm::SmallVector<Value *, 4>{x, linear}));
}

TEST(ExportedProgramReader, CallSignatureLeafCountMustMatchItsInputs) {
  std::string doc = replaced(R"("module_call_graph": [])", kCallGraph);
  std::string from = R"({"as_tensor": {"name": "x"}}, {"as_none": true}, )";
  doc.replace(doc.find(from), from.size(), R"({"as_tensor": {"name": "x"}}, )");
  std::string err = errorOf(doc);
  EXPECT_NE(err.find("module_call_graph[2].signature.in_spec"), std::string::npos) << err;
  EXPECT_NE(err.find("more leaves than the 4 recorded inputs"), std::string::npos) << err;
}

TEST(ExportedProgramReader, WithoutARootSignatureUserInputsAreTakenInOrder) {
  auto p = parseExportedProgram(kProgram);
  ASSERT_TRUE(static_cast<bool>(p)) << takeMessage(p.takeError());
  const Graph &g = (*p)->graph();
  EXPECT_EQ(g.userInput("0")->tensor(), g.lookupValue("x"));
  EXPECT_EQ(g.userInput("x")->tensor(), g.lookupValue("x"));
  EXPECT_FALSE(g.userInput("1"));
}

// parseJsonText's depth limit: exactly kMaxJsonDepth containers nest, one more is refused, and
// brackets inside strings (escaped quotes included) do not count.
TEST(JsonText, DepthLimitCountsContainersOutsideStrings) {
  auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_TRUE(static_cast<bool>(parseJsonText(nested(kMaxJsonDepth), "r")));
  auto deep = parseJsonText(nested(kMaxJsonDepth + 1), "r");
  ASSERT_FALSE(static_cast<bool>(deep));
  EXPECT_EQ(llvm::toString(deep.takeError()), "r: invalid JSON: nested deeper than 256 levels");
  std::string inString = "[\"" + std::string(300, '[') + "\\\"" + std::string(300, '{') + "\"]";
  auto parsed = parseJsonText(inString, "r");
  ASSERT_TRUE(static_cast<bool>(parsed));
  EXPECT_EQ((*parsed)->root().at(0).asString().size(), 601u);
}
