// CommCounts loaders (CommDebugMode tree, commlens-counts), writers and CompareReport on small
// hand-written documents.
#include "ir/Error.h"
#include "reports/CommCounts.h"
#include "reports/CompareReport.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

using namespace commlens;

namespace {

constexpr CommPhase FW = CommPhase::Forward;
constexpr CommPhase BW = CommPhase::Backward;
constexpr const char *AR = "c10d_functional.all_reduce";
constexpr const char *AG = "c10d_functional.all_gather_into_tensor";
constexpr const char *RS = "c10d_functional.reduce_scatter_tensor";

// The shape of a real CommDebugMode dump (MLP, w1 Colwise, w2 Rowwise, tp=4, input requiring
// grad), trimmed: operations_* and parameters are ignored by the loader.
constexpr const char *kTree = R"j({
  "fqn": "Global", "module_type": "", "parameters": [],
  "children": [{
    "fqn": "MLP", "module_type": "class '__main__.MLP'", "parameters": [],
    "children": [
      {"fqn": "MLP.w1", "module_type": "class 'torch.nn.modules.linear.Linear'",
       "parameters": [["weight", "(Shard(dim=0),)"]], "children": [],
       "collectives_forward": [], "collectives_backward": [["c10d_functional.all_reduce", 1]],
       "operations_forward": [{"name": "aten.mm.default"}], "operations_backward": []},
      {"fqn": "MLP.w2", "module_type": "class 'torch.nn.modules.linear.Linear'", "parameters": [],
       "children": [], "collectives_forward": [["c10d_functional.all_reduce", 1]],
       "collectives_backward": []}
    ],
    "collectives_forward": [["c10d_functional.all_reduce", 1]],
    "collectives_backward": [["c10d_functional.all_reduce", 1]]
  }],
  "collectives_forward": [["c10d_functional.all_reduce", 1]],
  "collectives_backward": [["c10d_functional.all_reduce", 1]],
  "some_future_key": {"ignored": true}
})j";

constexpr const char *kFlat = R"({
  "format": "commlens-counts", "version": 1, "source": "measure", "world_size": 4,
  "modules": [
    {"fqn": "Global", "forward": {"c10d_functional.all_reduce": 1}, "backward": {"c10d_functional.all_reduce": 1}},
    {"fqn": "MLP", "forward": {"c10d_functional.all_reduce": 1}, "backward": {"c10d_functional.all_reduce": 1}},
    {"fqn": "MLP.w1", "forward": {}, "backward": {"c10d_functional.all_reduce": 1}},
    {"fqn": "MLP.w2", "forward": {"c10d_functional.all_reduce": 1}, "backward": {}}
  ]
})";

CommCounts parseOk(const std::string &text) {
  auto c = parseCommCounts(text);
  if (!c) {
    ADD_FAILURE() << takeMessage(c.takeError());
    return {};
  }
  return std::move(*c);
}

std::string parseError(const std::string &text) {
  auto c = parseCommCounts(text);
  if (c)
    return "(parsed)";
  return takeMessage(c.takeError());
}

void expectMlp(const CommCounts &c) {
  ASSERT_EQ(c.modules().size(), 4u);
  EXPECT_EQ(c.modules()[0].fqn, "Global");
  EXPECT_EQ(c.modules()[1].fqn, "MLP");
  EXPECT_EQ(c.modules()[2].fqn, "MLP.w1");
  EXPECT_EQ(c.modules()[3].fqn, "MLP.w2");
  EXPECT_EQ(c.modules()[0].depth, 0u);
  EXPECT_EQ(c.modules()[1].depth, 1u);
  EXPECT_EQ(c.modules()[2].depth, 2u);
  EXPECT_EQ(c.modules()[3].depth, 2u);
  EXPECT_EQ(c.find("MLP.w1")->count(FW, AR), 0);
  EXPECT_EQ(c.find("MLP.w1")->count(BW, AR), 1);
  EXPECT_EQ(c.find("MLP.w2")->count(FW, AR), 1);
  EXPECT_EQ(c.find("MLP.w2")->count(BW, AR), 0);
  EXPECT_EQ(c.total(FW), 1);
  EXPECT_EQ(c.total(BW), 1);
  EXPECT_EQ(c.find("MLP.w3"), nullptr);
}

TEST(CommCounts, LoadsCommDebugModeTree) {
  CommCounts c = parseOk(kTree);
  EXPECT_EQ(c.format, CountsFormat::CommDebugModeTree);
  expectMlp(c);
  EXPECT_EQ(c.find("MLP.w2")->moduleType, "class 'torch.nn.modules.linear.Linear'");
  EXPECT_FALSE(c.find("MLP.w2")->phase(FW).at(AR).approximate);
}

TEST(CommCounts, LoadsFlatCounts) {
  CommCounts c = parseOk(kFlat);
  EXPECT_EQ(c.format, CountsFormat::CommlensCounts);
  expectMlp(c);
}

TEST(CommCounts, FlatDepthFollowsDottedPrefixes) {
  CommCounts c = parseOk(R"({"format": "commlens-counts", "version": 1, "modules": [
    {"fqn": "Global", "forward": {}, "backward": {}},
    {"fqn": "T", "forward": {}, "backward": {}},
    {"fqn": "T.layers.0", "forward": {}, "backward": {}},
    {"fqn": "T.layers.0.attn", "forward": {}, "backward": {}},
    {"fqn": "T.layers.1", "forward": {}, "backward": {}},
    {"fqn": "T.norm", "forward": {}, "backward": {}}]})");
  std::vector<unsigned> depths;
  for (const ModuleCounts &m : c.modules())
    depths.push_back(m.depth);
  EXPECT_EQ(depths, (std::vector<unsigned>{0, 1, 2, 3, 2, 2}));
}

TEST(CommCounts, RepeatedModuleCallsAppearOnce) {
  // A module called twice is listed twice by CommDebugMode, with the same counts.
  CommCounts c = parseOk(R"({"fqn": "Global", "children": [
      {"fqn": "M", "children": [], "collectives_forward": [["c10d_functional.all_reduce", 2]], "collectives_backward": []},
      {"fqn": "M", "children": [], "collectives_forward": [["c10d_functional.all_reduce", 2]], "collectives_backward": []}],
    "collectives_forward": [["c10d_functional.all_reduce", 2]], "collectives_backward": []})");
  ASSERT_EQ(c.modules().size(), 2u);
  EXPECT_EQ(c.find("M")->count(FW, AR), 2);
  EXPECT_EQ(parseError(R"({"fqn": "Global", "children": [
      {"fqn": "M", "children": [], "collectives_forward": [["c10d_functional.all_reduce", 2]], "collectives_backward": []},
      {"fqn": "M", "children": [], "collectives_forward": [], "collectives_backward": []}],
    "collectives_forward": [], "collectives_backward": []})"),
            "children[1]: module 'M' appears twice with different collective counts");
}

TEST(CommCounts, ApproximateCells) {
  CommCounts c = parseOk(R"({"fqn": "Global", "children": [],
    "collectives_forward": [["c10d_functional.all_reduce", 3]], "collectives_backward": [],
    "approximate_forward": ["c10d_functional.all_reduce"],
    "approximate_backward": ["c10d_functional.reduce_scatter_tensor"]})");
  const ModuleCounts *g = c.find("Global");
  EXPECT_EQ(g->phase(FW).at(AR), (CommCell{3, true, std::nullopt, std::nullopt}));
  EXPECT_EQ(g->phase(BW).at(RS), (CommCell{0, true, std::nullopt, std::nullopt}));
}

TEST(CommCounts, Errors) {
  EXPECT_EQ(parseError("{\"fqn\": "), "invalid JSON: parse error at line 1, column 9: syntax error while parsing "
                                      "value - unexpected end of input; expected '[', '{', or a literal");
  EXPECT_EQ(parseError("[1, 2]"), "unknown format: expected a JSON object (a CommDebugMode generate_json_dump tree "
                                  "or a commlens-counts file), got [1,2]");
  EXPECT_EQ(parseError("{\"a\": 1}"), "unknown format: neither a CommDebugMode generate_json_dump tree (no 'fqn') "
                                      "nor a commlens-counts file (no 'format')");
  EXPECT_EQ(parseError(R"({"format": "commlens-plan", "version": 1})"),
            "format: unknown format \"commlens-plan\" (expected \"commlens-counts\")");
  EXPECT_EQ(parseError(R"({"format": "commlens-counts", "version": 2, "modules": []})"),
            "version: unsupported commlens-counts version 2 (commlens reads version 1)");
  EXPECT_EQ(parseError(R"({"format": "commlens-counts", "version": 1})"), "missing required field 'modules'");
  EXPECT_EQ(parseError(R"({"format": "commlens-counts", "version": 1, "modules": [{"fqn": "G", "forward": {}}]})"),
            "modules[0]: missing required field 'backward'");
  EXPECT_EQ(parseError(R"({"format": "commlens-counts", "version": 1, "modules": [
              {"fqn": "G", "forward": {"c10d_functional.all_reduce": -1}, "backward": {}}]})"),
            "modules[0].forward[\"c10d_functional.all_reduce\"]: expected a non-negative integer count, got -1");
  EXPECT_EQ(parseError(R"({"format": "commlens-counts", "version": 1, "modules": [
              {"fqn": "G", "forward": {}, "backward": {}}, {"fqn": "G", "forward": {}, "backward": {}}]})"),
            "modules[1].fqn: duplicate module 'G'");
  EXPECT_EQ(parseError(R"({"fqn": "Global", "children": [], "collectives_forward": []})"),
            "missing required field 'collectives_backward'");
  EXPECT_EQ(parseError(R"({"fqn": "Global", "children": [{"fqn": "A", "children": [],
              "collectives_forward": [["c10d_functional.all_reduce", "2"]], "collectives_backward": []}],
              "collectives_forward": [], "collectives_backward": []})"),
            "children[0].collectives_forward[0][1]: expected a non-negative integer count, got \"2\"");
  EXPECT_EQ(parseError(R"({"fqn": "Global", "children": [], "collectives_forward": [["x"]], "collectives_backward": []})"),
            "collectives_forward[0]: expected an [op, count] pair, got [\"x\"]");
  EXPECT_EQ(parseError(R"({"fqn": "Global", "children": [], "collectives_backward": [],
              "collectives_forward": [["c10d_functional.all_reduce", 1], ["c10d_functional.all_reduce", 1]]})"),
            "collectives_forward[1]: duplicate collective 'c10d_functional.all_reduce'");
  EXPECT_EQ(parseError(R"({"fqn": 3, "children": []})"), "fqn: expected a string, got 3");
}

TEST(CommCounts, LoadFileNamesTheFile) {
  auto missing = loadCommCounts("/nonexistent/x.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(takeMessage(missing.takeError()), "/nonexistent/x.json: cannot open file");
  std::string path = ::testing::TempDir() + "commcounts_bad.json";
  std::ofstream(path) << "{\"fqn\": \"Global\"}";
  auto bad = loadCommCounts(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(takeMessage(bad.takeError()), path + ": missing required field 'collectives_forward'");
}

TEST(CommCounts, PhaseField) {
  EXPECT_EQ(parseOk(kFlat).onlyPhase, std::nullopt);
  EXPECT_EQ(parseOk(R"({"format": "commlens-counts", "version": 1, "phase": "both", "modules": []})").onlyPhase,
            std::nullopt);
  EXPECT_EQ(parseOk(R"({"format": "commlens-counts", "version": 1, "phase": "forward", "modules": []})").onlyPhase,
            CommPhase::Forward);
  EXPECT_EQ(parseOk(R"({"fqn": "Global", "phase": "backward", "children": [], "collectives_forward": [],
                        "collectives_backward": []})")
                .onlyPhase,
            CommPhase::Backward);
  EXPECT_EQ(parseError(R"({"format": "commlens-counts", "version": 1, "phase": "sideways", "modules": []})"),
            "phase: expected \"forward\", \"backward\", \"both\" or \"inference\", got \"sideways\"");
  CommCounts c = parseOk(kTree);
  c.onlyPhase = CommPhase::Backward;
  EXPECT_EQ(parseOk(c.toCountsJson()).onlyPhase, CommPhase::Backward);
  EXPECT_EQ(parseOk(c.toTreeJson()).onlyPhase, CommPhase::Backward);
}

// "inference": a no-grad forward's counts, in the forward maps; compare tells them from a
// training forward's by `inference`, and a file without "phase" (CommDebugMode's dump) by phaseStated.
TEST(CommCounts, InferencePhase) {
  CommCounts flat = parseOk(R"({"format": "commlens-counts", "version": 1, "phase": "inference", "modules": []})");
  EXPECT_EQ(flat.onlyPhase, CommPhase::Forward);
  EXPECT_TRUE(flat.inference);
  EXPECT_TRUE(flat.phaseStated);
  EXPECT_EQ(flat.phaseLabel(), "inference");
  CommCounts forward = parseOk(R"({"format": "commlens-counts", "version": 1, "phase": "forward", "modules": []})");
  EXPECT_FALSE(forward.inference);
  EXPECT_EQ(forward.phaseLabel(), "forward");
  CommCounts tree = parseOk(kTree);
  EXPECT_FALSE(tree.phaseStated);
  EXPECT_EQ(tree.phaseLabel(), "both");
  tree.onlyPhase = CommPhase::Forward;
  tree.inference = true;
  for (const std::string &text : {tree.toCountsJson(), tree.toTreeJson()}) {
    CommCounts back = parseOk(text);
    EXPECT_TRUE(back.inference);
    EXPECT_EQ(back.onlyPhase, CommPhase::Forward);
  }
}

TEST(CommCounts, WritersRoundTrip) {
  CommCounts c = parseOk(kTree);
  c.find("MLP.w2")->phase(BW)[RS] = CommCell{0, true, std::nullopt, std::nullopt};
  c.find("MLP.w2")->phase(FW)[AR].approximate = true;
  CommCounts flat = parseOk(c.toCountsJson());
  CommCounts tree = parseOk(c.toTreeJson());
  EXPECT_EQ(flat.format, CountsFormat::CommlensCounts);
  EXPECT_EQ(tree.format, CountsFormat::CommDebugModeTree);
  for (const CommCounts *other : {&flat, &tree}) {
    ASSERT_EQ(other->modules().size(), c.modules().size());
    for (size_t i = 0; i < c.modules().size(); ++i) {
      EXPECT_EQ(other->modules()[i].fqn, c.modules()[i].fqn);
      EXPECT_EQ(other->modules()[i].depth, c.modules()[i].depth);
      EXPECT_EQ(other->modules()[i].phases, c.modules()[i].phases) << c.modules()[i].fqn;
    }
  }
}

TEST(CompareReport, IdenticalAcrossFormats) {
  CompareReport r = CompareReport::build(parseOk(kTree), parseOk(kFlat));
  EXPECT_TRUE(r.identical());
  ASSERT_EQ(r.cells.size(), 6u); // Global fw+bw, MLP fw+bw, w1 bw, w2 fw
  EXPECT_EQ(r.predictedTotal, 2);
  EXPECT_EQ(r.measuredTotal, 2);
  std::string text;
  llvm::raw_string_ostream os(text);
  r.printText(os);
  EXPECT_EQ(os.str(), "module      collective                  phase     predicted  measured  diff\n"
                      "Global      c10d_functional.all_reduce  forward           1         1     0\n"
                      "Global      c10d_functional.all_reduce  backward          1         1     0\n"
                      "  MLP       c10d_functional.all_reduce  forward           1         1     0\n"
                      "  MLP       c10d_functional.all_reduce  backward          1         1     0\n"
                      "    MLP.w1  c10d_functional.all_reduce  backward          1         1     0\n"
                      "    MLP.w2  c10d_functional.all_reduce  forward           1         1     0\n"
                      "summary: 6 cells, 0 differ; collectives predicted 2, measured 2 (forward+backward)\n");
}

TEST(CompareReport, DifferencesAndModuleOrder) {
  CommCounts measured = parseOk(kFlat);
  CommCounts predicted = parseOk(R"({"format": "commlens-counts", "version": 1, "modules": [
    {"fqn": "Global", "forward": {"c10d_functional.all_reduce": 1, "c10d_functional.all_gather_into_tensor": 1},
     "backward": {"c10d_functional.all_reduce": 1}},
    {"fqn": "MLP", "forward": {"c10d_functional.all_reduce": 1, "c10d_functional.all_gather_into_tensor": 1},
     "backward": {"c10d_functional.all_reduce": 1}},
    {"fqn": "MLP.w1", "forward": {"c10d_functional.all_gather_into_tensor": 1}, "backward": {},
     "approximate_forward": ["c10d_functional.all_gather_into_tensor"]},
    {"fqn": "MLP.act", "forward": {}, "backward": {"c10d_functional.all_reduce": 1}},
    {"fqn": "MLP.w2", "forward": {"c10d_functional.all_reduce": 1}, "backward": {}}]})");
  CompareReport r = CompareReport::build(predicted, measured);
  EXPECT_FALSE(r.identical());
  EXPECT_EQ(r.numDiffering(), 5u);
  EXPECT_EQ(r.numApproximate(), 1u);
  std::string text;
  llvm::raw_string_ostream os(text);
  r.printText(os);
  EXPECT_EQ(os.str(),
            "module       collective                              phase     predicted  measured  diff\n"
            "Global       c10d_functional.all_gather_into_tensor  forward           1         0    +1  MISMATCH\n"
            "Global       c10d_functional.all_reduce              forward           1         1     0\n"
            "Global       c10d_functional.all_reduce              backward          1         1     0\n"
            "  MLP        c10d_functional.all_gather_into_tensor  forward           1         0    +1  MISMATCH\n"
            "  MLP        c10d_functional.all_reduce              forward           1         1     0\n"
            "  MLP        c10d_functional.all_reduce              backward          1         1     0\n"
            "    MLP.w1   c10d_functional.all_gather_into_tensor  forward          ~1         0    +1  MISMATCH\n"
            "    MLP.w1   c10d_functional.all_reduce              backward          0         1    -1  MISMATCH\n"
            "    MLP.act  c10d_functional.all_reduce              backward          1         0    +1  MISMATCH\n"
            "    MLP.w2   c10d_functional.all_reduce              forward           1         1     0\n"
            "~: approximate prediction (depends on ops commlens does not model)\n"
            "summary: 10 cells, 5 differ, 1 approximate; collectives predicted 3, measured 2 (forward+backward)\n");

  CompareReport fw = CompareReport::build(predicted, measured, CommPhase::Forward);
  EXPECT_EQ(fw.cells.size(), 6u);
  EXPECT_EQ(fw.numDiffering(), 3u);
  EXPECT_EQ(fw.summaryLine(), "summary: 6 cells, 3 differ, 1 approximate; collectives predicted 2, measured 1 (forward)");
  CompareReport bw = CompareReport::build(predicted, measured, CommPhase::Backward);
  EXPECT_EQ(bw.numDiffering(), 2u);
  EXPECT_EQ(bw.numApproximate(), 0u);
}

TEST(CompareReport, Json) {
  CommCounts measured = parseOk(kTree);
  CommCounts predicted = parseOk(kTree);
  predicted.find("MLP.w2")->phase(FW)[AR] = CommCell{2, true, std::nullopt, std::nullopt};
  CompareReport r = CompareReport::build(predicted, measured, CommPhase::Forward);
  r.predictedPath = "p.json";
  r.measuredPath = "m.json";
  std::string j = r.toJson();
  EXPECT_NE(j.find("\"format\": \"commlens-compare\""), std::string::npos);
  EXPECT_NE(j.find("\"module\": \"MLP.w2\",\n      \"depth\": 2,\n      \"collective\": \"c10d_functional.all_reduce\","
                   "\n      \"phase\": \"forward\",\n      \"predicted\": 2,\n      \"measured\": 1,\n      \"diff\": 1,"
                   "\n      \"approximate\": true,\n      \"match\": false"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"differ\": 1"), std::string::npos);
}

// Bytes are compared where both sides record them: equal counts with different bytes differ.
TEST(CompareReport, BytesDifferWithEqualCounts) {
  auto counts = [](const char *bytes) {
    return std::string(R"({"format": "commlens-counts", "version": 1, "modules": [
      {"fqn": "Global", "forward": {"c10d_functional.all_reduce": 2}, "backward": {},
       "forward_bytes": {"c10d_functional.all_reduce": )") + bytes + "}}]}";
  };
  CommCounts measured = parseOk(counts("2048"));
  ASSERT_EQ(measured.find("Global")->phase(FW).at(AR).bytes, std::optional<int64_t>(2048));
  for (auto [predictedBytes, differ] : {std::pair{"2048", false}, std::pair{"1024", true}}) {
    CommCounts predicted = parseOk(counts(predictedBytes));
    CompareReport r = CompareReport::build(predicted, measured, CommPhase::Forward);
    EXPECT_EQ(r.numDiffering(), differ ? 1u : 0u);
    std::string text;
    llvm::raw_string_ostream os(text);
    r.printText(os);
    EXPECT_EQ(os.str().find("MISMATCH (bytes 1024 predicted, 2048 measured)") != std::string::npos, differ) << text;
    EXPECT_NE(text.find("; bytes compared on 1 cells"), std::string::npos) << text;
  }
  // bytes for a collective without a count are refused
  auto bad = parseCommCounts(R"({"format": "commlens-counts", "version": 1, "modules": [
    {"fqn": "Global", "forward": {}, "backward": {}, "forward_bytes": {"c10d_functional.all_reduce": 8}}]})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(takeMessage(bad.takeError()), "modules[0].forward_bytes[\"c10d_functional.all_reduce\"]: bytes for "
                                          "collective 'c10d_functional.all_reduce', which has no count");
}

TEST(CompareReport, RoutedBytesWithinTheirBounds) {
  // An expert-parallel layer: 3 all-to-alls whose bytes depend on the routing, predicted 65600
  // (balanced) within [32832, 98368]; measured bytes inside the bounds match, outside differ.
  constexpr const char *A2A = "c10d_functional.all_to_all_single";
  auto counts = [](const std::string &bytes, const char *bounds) {
    return std::string(R"({"format": "commlens-counts", "version": 1, "modules": [
      {"fqn": "Global", "forward": {"c10d_functional.all_to_all_single": 3}, "backward": {},
       "forward_bytes": {"c10d_functional.all_to_all_single": )") + bytes + "}" + bounds + "}]}";
  };
  CommCounts predicted =
      parseOk(counts("65600", R"(, "forward_bytes_bounds": {"c10d_functional.all_to_all_single": [32832, 98368]})"));
  ASSERT_EQ(predicted.find("Global")->phase(FW).at(A2A).bytesBounds, std::make_optional(std::pair<int64_t, int64_t>{
                                                                          32832, 98368}));
  for (auto [measuredBytes, differ] : {std::pair{"69696", false}, std::pair{"32832", false},
                                       std::pair{"98368", false}, std::pair{"98432", true}}) {
    CompareReport r = CompareReport::build(predicted, parseOk(counts(measuredBytes, "")), CommPhase::Forward);
    EXPECT_EQ(r.numDiffering(), differ ? 1u : 0u) << measuredBytes;
    std::string text;
    llvm::raw_string_ostream os(text);
    r.printText(os);
    EXPECT_EQ(os.str().find("MISMATCH (bytes 98432 measured, outside the routing's bounds [32832, 98368])") !=
                  std::string::npos,
              differ)
        << text;
  }
  // the bounds survive both writers
  for (const std::string &json : {predicted.toCountsJson(), predicted.toTreeJson()})
    EXPECT_EQ(parseOk(json).find("Global")->phase(FW).at(A2A).bytesBounds, predicted.find("Global")->phase(FW).at(A2A).bytesBounds)
        << json;
  // bounds that leave out the bytes, or name a cell without bytes, are refused
  auto error = [&](const std::string &bytes, const char *bounds) {
    auto bad = parseCommCounts(counts(bytes, bounds));
    return bad ? std::string("parsed") : takeMessage(bad.takeError());
  };
  EXPECT_EQ(error("65600", R"(, "forward_bytes_bounds": {"c10d_functional.all_to_all_single": [70000, 98368]})"),
            "modules[0].forward_bytes_bounds[\"c10d_functional.all_to_all_single\"]: bytes 65600 are not within their "
            "bounds [70000, 98368]");
  EXPECT_EQ(error("65600", R"(, "forward_bytes_bounds": {"c10d_functional.all_to_all_single": [1]})"),
            "modules[0].forward_bytes_bounds[\"c10d_functional.all_to_all_single\"]: expected [fewest, most] bytes, "
            "got [1]");
  EXPECT_EQ(error("65600", R"(, "backward_bytes_bounds": {"c10d_functional.all_to_all_single": [1, 2]})"),
            "modules[0].backward_bytes_bounds[\"c10d_functional.all_to_all_single\"]: bytes bounds for collective "
            "'c10d_functional.all_to_all_single', which has no bytes");
}

} // namespace

TEST(CommCounts, RangeAndDepthLimits) {
  const std::string flat = R"({"format": "commlens-counts", "version": 1, "modules": [{"fqn": "Global", "forward": )"
                           R"({"x": COUNT}, "backward": {}}]})";
  auto withCount = [&](const std::string &count) {
    std::string text = flat;
    text.replace(text.find("COUNT"), 5, count);
    return parseError(text);
  };
  // counts are 64-bit, bounded like bytes by the largest integer a double holds exactly
  EXPECT_EQ(withCount("4294967296"), "(parsed)");
  EXPECT_EQ(withCount("9007199254740991"), "(parsed)");
  EXPECT_EQ(withCount("9007199254740992"),
            "modules[0].forward.x: count 9007199254740992 is out of range (at most 9007199254740991)");
  EXPECT_EQ(withCount("18446744073709551615"),
            "modules[0].forward.x: count 18446744073709551615 is out of range (at most 9007199254740991)");
  // and summed over the file: no total (Global's, a parent's inclusive count) can overflow
  std::string two = R"({"format": "commlens-counts", "version": 1, "modules": [{"fqn": "Global", "forward": )"
                    R"({"x": 9007199254740991}, "backward": {"x": 1}}]})";
  EXPECT_EQ(parseError(two), "modules[0].backward.x: count 1 takes the file's total past 9007199254740991");
  std::string deep = R"({"fqn": "Global", "phase": )" + std::string(300, '[') + std::string(300, ']') + "}";
  EXPECT_EQ(parseError(deep), "invalid JSON: nested deeper than 256 levels");
}

// Bytes are 64-bit: a 405B-shaped Llama's all-gather cell is 8,751,939,584 (> 2^32); a cell and
// the file's sum are bounded by 2^53 - 1 (exact as a double).
TEST(CommCounts, BytesPastTwoToThe32) {
  auto withBytes = [](const std::string &ag, const std::string &ar) {
    return R"({"format": "commlens-counts", "version": 1, "modules": [{"fqn": "Global", "forward": )"
           R"({"ag": 1, "ar": 1}, "backward": {}, "forward_bytes": {"ag": )" +
           ag + R"(, "ar": )" + ar + "}}]}";
  };
  CommCounts counts = parseOk(withBytes("8751939584", "9007190502801407"));
  EXPECT_EQ(counts.find("Global")->phase(FW).at("ag").bytes, std::optional<int64_t>(8751939584));
  EXPECT_EQ(parseError(withBytes("0", "9007199254740992")),
            "modules[0].forward_bytes.ar: bytes 9007199254740992 is out of range (at most 9007199254740991)");
  EXPECT_EQ(parseError(withBytes("8751939584", "9007190502801408")),
            "modules[0].forward_bytes.ar: bytes 9007190502801408 take the file's total past 9007199254740991");
}

// A number past double's range is an out_of_range exception in nlohmann's parser, not a
// parse_error: it is bad input all the same (found by fuzz/counts).
TEST(CommCounts, NumberOverflowIsInvalidJson) {
  EXPECT_EQ(parseError(R"({"fqn": "Global", "collectives_forward": [["c10d_functional.all_reduce", 1e999]]})"),
            "invalid JSON: number overflow parsing '1e999'");
  EXPECT_EQ(parseError(R"({"format": "commlens-counts", "version": -1)" + std::string(400, '0') + "}"),
            "invalid JSON: number overflow parsing '-1" + std::string(400, '0') + "'");
}
