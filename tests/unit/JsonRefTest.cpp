// JsonRef over a simdjson document: paths in messages, member order, the index of large objects,
// number typing, and parse errors as the readers have always reported them.
#include "ir/JsonRef.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

using namespace commlens;

namespace {

std::unique_ptr<JsonDocument> parse(const std::string &text) {
  auto doc = parseJsonText(text, "r");
  if (!doc) {
    ADD_FAILURE() << llvm::toString(doc.takeError());
    return nullptr;
  }
  return std::move(*doc);
}

template <typename F> std::string failure(F &&f) {
  try {
    f();
  } catch (const ParseError &e) {
    return e.message;
  }
  return "(no error)";
}

std::string parseError(const std::string &text) {
  auto doc = parseJsonText(text, "r");
  return doc ? "(parsed)" : llvm::toString(doc.takeError());
}

} // namespace

// A path names every key and index from the root, after the root's own prefix when it has one;
// nodes that are only read (leaves) have no step of their own, but their paths are the same.
TEST(JsonRef, PathsNameKeysAndIndexes) {
  auto doc = parse(R"({"graph": {"nodes": [{"name": "a"}, {"name": 7}]}})");
  JsonRef root = doc->root();
  JsonRef second = root.field("graph").field("nodes").items()[1];
  EXPECT_EQ(second.path(), "graph.nodes[1]");
  EXPECT_EQ(failure([&] { second.field("name").asString(); }), "graph.nodes[1].name: expected a string");
  EXPECT_EQ(failure([&] { second.field("target"); }), "graph.nodes[1]: missing required field 'target'");
  EXPECT_EQ(failure([&] { root.field("graph").field("nodes").at(2); }), "graph.nodes: expected at least 3 elements");
  EXPECT_EQ(failure([&] { root.field("graph").items(); }), "graph: expected an array");
  JsonRef prefixed = doc->root("model.json:signature");
  EXPECT_EQ(failure([&] { prefixed.field("graph").field("nodes").at(0).field("name").asInt(); }),
            "model.json:signature.graph.nodes[0].name: expected an integer");
  EXPECT_EQ(failure([&] { doc->root().field("x"); }), "missing required field 'x'");
}

// Members come in key order, whatever order the writer used; the first unknown key in that
// order is the one reported.
TEST(JsonRef, MembersInKeyOrder) {
  auto doc = parse(R"({"b": 1, "c": 2, "a": 3})");
  std::string keys;
  for (const auto &[k, v] : doc->root().members())
    keys += fmt::format("{}={} ", k.str(), v.asInt());
  EXPECT_EQ(keys, "a=3 b=1 c=2 ");
  EXPECT_EQ(failure([&] { doc->root().rejectUnknownKeys({"a"}); }), "unknown key 'b'");
  auto single = parse(R"({"as_int": 4})");
  auto [key, value] = single->root().variant();
  EXPECT_EQ(key, "as_int");
  EXPECT_EQ(value.path(), "as_int");
  EXPECT_EQ(failure([&] { doc->root().variant(); }), "expected an object with exactly one variant key");
}

// Objects of 32 members and more are looked up through an index built once: every key is
// found, a missing one is reported, a null member counts as absent for has(), and the first of
// duplicate keys wins, as in a scan.
TEST(JsonRef, LargeObjectLookup) {
  std::string text = "{";
  for (int i = 0; i < 100; ++i)
    text += fmt::format("\"t{}\": {}, ", i, i * 10);
  text += R"("nothing": null, "t5": -1})";
  auto doc = parse(text);
  JsonRef root = doc->root();
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(root.field(fmt::format("t{}", i).c_str()).asInt(), i * 10);
  EXPECT_FALSE(root.has("nothing"));
  EXPECT_FALSE(root.has("t100"));
  EXPECT_EQ(failure([&] { root.field("t100"); }), "missing required field 't100'");
  auto small = parse(R"({"t5": 50, "t5": -1})");
  EXPECT_EQ(small->root().field("t5").asInt(), 50);
}

TEST(JsonRef, Numbers) {
  auto doc = parse(R"([9223372036854775807, 18446744073709551615, 1.5, 2, "Infinity", "-inf", true])");
  JsonRef r = doc->root();
  EXPECT_EQ(r.at(0).asInt(), 9223372036854775807);
  EXPECT_EQ(failure([&] { r.at(1).asInt(); }), "[1]: integer 18446744073709551615 is out of range");
  EXPECT_EQ(failure([&] { r.at(2).asInt(); }), "[2]: expected an integer");
  EXPECT_DOUBLE_EQ(r.at(2).asFloat(), 1.5);
  EXPECT_DOUBLE_EQ(r.at(3).asFloat(), 2.0);
  EXPECT_TRUE(r.at(3).isInteger());
  EXPECT_FALSE(r.at(2).isInteger());
  EXPECT_EQ(r.at(4).asFloat(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.at(5).asFloat(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(failure([&] { r.at(6).asFloat(); }), "[6]: expected a number");
  EXPECT_EQ(r.at(6).dump(), "true");
  EXPECT_EQ(r.dump(), R"([9223372036854775807,18446744073709551615,1.5,2,"Infinity","-inf",true])");
}

// simdjson reports no position; a rejected document keeps the message with line and column.
TEST(JsonRef, ParseErrorsKeepTheirPosition) {
  EXPECT_EQ(parseError(R"({"a": [1, 2,]})"),
            "r: invalid JSON: parse error at line 1, column 13: syntax error while parsing value - unexpected ']'; "
            "expected '[', '{', or a literal");
  EXPECT_EQ(parseError("[1e999]"), "r: invalid JSON: number overflow parsing '1e999'");
  EXPECT_EQ(parseError("{\"a\": \"\xff\"}"),
            "r: invalid JSON: parse error at line 1, column 8: syntax error while parsing value - invalid string: "
            "ill-formed UTF-8 byte; last read: '\"\xff'");
  EXPECT_EQ(parseError(""), "r: invalid JSON: parse error at line 1, column 1: syntax error while parsing value - "
                            "unexpected end of input; expected '[', '{', or a literal");
}
