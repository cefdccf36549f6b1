// The tie record commlens.export writes (extra/commlens_tied_parameters.json): which parameters
// are one nn.Parameter, read where the archive cannot say it (meta-device weights share one record).
#include "frontends/Pt2Loader.h"

#include "ir/Error.h"

#include <gtest/gtest.h>

#include <string>

using namespace commlens;

namespace {

ExportedProgram program(std::initializer_list<const char *> params) {
  ExportedProgram p;
  for (const char *fqn : params) {
    Value *v = p.graph().createValue(std::string("p_") + fqn, ValueKind::Tensor);
    p.graph().inputs().push_back({InputKind::Parameter, v, fqn, true, ""});
  }
  Value *x = p.graph().createValue("x", ValueKind::Tensor);
  p.graph().inputs().push_back({InputKind::UserInput, x, "x", false, ""});
  return p;
}

std::string aliasOf(ExportedProgram &p, llvm::StringRef fqn) {
  for (const InputSpec &in : p.graph().inputs())
    if (in.target == fqn)
      return in.aliasOf;
  return "?";
}

std::string apply(ExportedProgram &p, llvm::StringRef json) {
  llvm::Error err = applyTiedParameters(p, json, "tied.json");
  return err ? takeMessage(std::move(err)) : "ok";
}

TEST(TiedParameters, MembersAliasTheFirstInInputOrder) {
  ExportedProgram p = program({"tok.weight", "mid.weight", "head.weight"});
  // Listed head first: the alias still names the parameter the program takes first.
  EXPECT_EQ(apply(p, R"({"format": "commlens-tied-parameters", "version": 1, "groups": [["head.weight", "tok.weight"]]})"),
            "ok");
  EXPECT_EQ(aliasOf(p, "head.weight"), "tok.weight");
  EXPECT_EQ(aliasOf(p, "tok.weight"), "");
  EXPECT_EQ(aliasOf(p, "mid.weight"), "");
}

TEST(TiedParameters, NoGroupsMeansNoTies) {
  ExportedProgram p = program({"a.weight", "b.weight"});
  EXPECT_EQ(apply(p, R"({"format": "commlens-tied-parameters", "version": 1, "groups": []})"), "ok");
  EXPECT_EQ(aliasOf(p, "b.weight"), "");
}

TEST(TiedParameters, BadRecordsNameWhatIsWrong) {
  ExportedProgram p = program({"a.weight", "b.weight", "c.weight"});
  EXPECT_EQ(apply(p, R"({"format": "commlens-tied-parameters", "version": 1, "groups": [["a.weight", "x"]]})"),
            "tied.json: groups[0][1]: 'x' is not a parameter of the program");
  EXPECT_EQ(apply(p, R"({"format": "commlens-tied-parameters", "version": 1, "groups": [["a.weight", "b.weight"], ["c.weight", "a.weight"]]})"),
            "tied.json: groups[1][1]: 'a.weight' is in two groups");
  EXPECT_EQ(apply(p, R"({"format": "commlens-tied-parameters", "version": 1, "groups": [["a.weight"]]})"),
            "tied.json: groups[0]: a group of tied parameters needs at least two names");
  EXPECT_EQ(apply(p, R"({"format": "commlens-plan", "version": 1, "groups": []})"),
            "tied.json: format: 'commlens-plan' is not 'commlens-tied-parameters'");
  EXPECT_EQ(apply(p, R"({"format": "commlens-tied-parameters", "version": 2, "groups": []})"),
            "tied.json: version: version 2 is not supported (expected 1)");
  EXPECT_EQ(apply(p, R"({"format": "commlens-tied-parameters", "version": 1})"),
            "tied.json: missing required field 'groups'");
  EXPECT_EQ(apply(p, R"({"format": )"),
            "tied.json: invalid JSON: parse error at line 1, column 12: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal");
}

} // namespace
