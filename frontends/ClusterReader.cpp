#include "frontends/ClusterReader.h"

#include "ir/JsonRef.h"
#include "ir/Error.h"
#include "ir/InputFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>

namespace commlens {
namespace {

double positive(const JsonRef &r) {
  double v = r.asFloat();
  if (!(v > 0) || !std::isfinite(v))
    r.fail(fmt::format("expected a positive number, got {}", r.dump()));
  return v;
}

int64_t positiveInt(const JsonRef &r, int64_t max) {
  int64_t v = r.asInt();
  if (v < 1 || v > max)
    r.fail(fmt::format("expected an integer from 1 to {}, got {}", max, v));
  return v;
}

Link decodeLink(const JsonRef &r, Link base) {
  r.rejectUnknownKeys({"link", "bus_bandwidth_GBps"});
  if (auto k = r.optField("link")) {
    auto kind = linkKindByName(k->asString());
    if (!kind)
      k->fail(fmt::format("unknown link '{}' (expected nvlink, pcie, infiniband, roce or ethernet)", k->asString()));
    base.kind = *kind;
  }
  if (auto bw = r.optField("bus_bandwidth_GBps"))
    base.busBandwidthGBps = positive(*bw);
  return base;
}

llvm::Expected<std::string> readText(llvm::StringRef path) {
  if (llvm::Error err = checkInputFile(path, kMaxTextFileBytes))
    return err;
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf)
    return makeError("cannot open file: {}", buf.getError().message());
  return (*buf)->getBuffer().str();
}

Calibration decodeCalibration(const JsonRef &r, llvm::StringRef baseDir) {
  r.rejectUnknownKeys({"collective", "ranks", "nodes", "samples", "nccl_tests"});
  Calibration cal;
  JsonRef coll = r.field("collective");
  auto kind = collectiveKindByName(coll.asString());
  if (!kind)
    coll.fail(fmt::format("unknown collective '{}' (expected all_reduce, all_gather, reduce_scatter or all_to_all)",
                          coll.asString()));
  cal.collective = *kind;
  cal.ranks = positiveInt(r.field("ranks"), int64_t{1} << 20);
  if (cal.ranks < 2)
    r.field("ranks").fail("a collective needs at least 2 ranks");
  cal.nodes = r.has("nodes") ? positiveInt(r.field("nodes"), cal.ranks) : 1;
  bool rows = r.has("samples"), file = r.has("nccl_tests");
  if (rows == file)
    r.fail("expected exactly one of 'samples' ([[size, busbw GB/s], ...]) or 'nccl_tests' (a file)");
  if (rows) {
    double factor = busBandwidthFactor(cal.collective, cal.ranks);
    for (const JsonRef &row : r.field("samples").items()) {
      if (!row.isArray() || row.size() != 2)
        row.fail("expected [size in bytes, bus bandwidth in GB/s]");
      int64_t bytes = positiveInt(row.at(0), int64_t{1} << 50);
      double busbw = positive(row.at(1));
      cal.samples.push_back({bytes, static_cast<double>(bytes) * factor / (1000.0 * busbw)});
    }
  } else {
    JsonRef f = r.field("nccl_tests");
    llvm::SmallString<256> path(f.asString());
    if (llvm::sys::path::is_relative(path) && !baseDir.empty()) {
      path = baseDir;
      llvm::sys::path::append(path, f.asString());
    }
    auto text = readText(path);
    if (!text)
      f.fail(fmt::format("{}: {}", path.str(), takeMessage(text.takeError())));
    auto samples = parseNcclTestsOutput(*text);
    if (!samples)
      f.fail(fmt::format("{}: {}", path.str(), takeMessage(samples.takeError())));
    cal.samples = std::move(*samples);
  }
  if (cal.samples.empty())
    r.fail("no samples");
  std::sort(cal.samples.begin(), cal.samples.end(),
            [](const MeasuredTime &a, const MeasuredTime &b) { return a.bytes < b.bytes; });
  for (size_t i = 1; i < cal.samples.size(); ++i)
    if (cal.samples[i].bytes == cal.samples[i - 1].bytes)
      r.fail(fmt::format("two samples for size {}", cal.samples[i].bytes));
  return cal;
}

Cluster decodeCluster(const JsonRef &root, llvm::StringRef baseDir) {
  root.rejectUnknownKeys({"format", "version", "name", "base", "gpu", "gpus_per_node", "channels", "intra", "inter",
                           "mesh_dims", "calibration"});
  if (root.field("format").asString() != "commlens-cluster")
    root.field("format").fail(fmt::format("expected \"commlens-cluster\", got \"{}\"", root.field("format").asString()));
  if (root.field("version").asInt() != 1)
    root.field("version").fail(fmt::format("unsupported version {} (expected 1)", root.field("version").asInt()));
  Cluster c;
  if (auto base = root.optField("base")) {
    auto preset = clusterByName(base->asString());
    if (!preset)
      base->fail(takeMessage(preset.takeError()));
    c = *preset;
  }
  c.name = root.has("name") ? root.field("name").asString() : (c.name.empty() ? "custom" : c.name + "+file");
  if (auto g = root.optField("gpu")) {
    auto gen = gpuGenerationByName(g->asString());
    if (!gen)
      g->fail(fmt::format("unknown GPU generation '{}' (expected volta, ampere, hopper or blackwell)", g->asString()));
    c.gpu = *gen;
  }
  if (auto n = root.optField("gpus_per_node"))
    c.gpusPerNode = positiveInt(*n, 1024);
  if (auto n = root.optField("channels"))
    c.channels = positiveInt(*n, 64);
  if (auto l = root.optField("intra"))
    c.intra = decodeLink(*l, c.intra);
  if (auto l = root.optField("inter"))
    c.inter = decodeLink(*l, c.inter);
  if (auto dims = root.optField("mesh_dims"))
    for (const auto &[dim, where] : dims->members()) {
      std::string w = where.asString();
      if (w != "intra" && w != "inter")
        where.fail(fmt::format("expected \"intra\" or \"inter\", got \"{}\"", w));
      c.dimPlacement[dim.str()] = w == "intra" ? DimPlacement::IntraNode : DimPlacement::InterNode;
    }
  if (auto cals = root.optField("calibration"))
    for (const JsonRef &cal : cals->items())
      c.calibrations.push_back(decodeCalibration(cal, baseDir));
  return c;
}

} // namespace

llvm::Expected<std::vector<MeasuredTime>> parseNcclTestsOutput(llvm::StringRef text) {
  llvm::SmallVector<llvm::StringRef, 64> lines;
  text.split(lines, '\n');
  int sizeCol = -1, timeCol = -1;
  std::vector<MeasuredTime> out;
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef, 16> tok;
    llvm::StringRef body = line.trim();
    if (body.consume_front("#")) {
      body.split(tok, ' ', -1, false);
      auto size = std::find(tok.begin(), tok.end(), "size");
      auto time = std::find(tok.begin(), tok.end(), "time");
      if (size != tok.end() && time != tok.end()) { // the first "time" is out-of-place
        sizeCol = static_cast<int>(size - tok.begin());
        timeCol = static_cast<int>(time - tok.begin());
      }
      continue;
    }
    body.split(tok, ' ', -1, false);
    int64_t bytes = 0;
    if (tok.empty() || tok[0].getAsInteger(10, bytes))
      continue; // banners, "Avg bus bandwidth", device lines
    if (sizeCol < 0)
      return makeError("no '# size ... time' header before the first row");
    double us = 0;
    if (timeCol >= static_cast<int>(tok.size()) || tok[sizeCol].getAsInteger(10, bytes) ||
        tok[timeCol].getAsDouble(us) || !(us > 0))
      return makeError("bad row '{}'", line.trim());
    if (bytes > 0)
      out.push_back({bytes, us});
  }
  if (out.empty())
    return makeError("no nccl-tests rows");
  return out;
}

llvm::Expected<Cluster> parseCluster(llvm::StringRef text, llvm::StringRef baseDir) {
  auto doc = parseJsonText(text, "cluster");
  if (!doc)
    return doc.takeError();
  try {
    return decodeCluster((*doc)->root(), baseDir);
  } catch (const ParseError &e) {
    return makeError("{}", e.message);
  }
}

llvm::Expected<Cluster> readClusterFile(llvm::StringRef path) {
  auto text = readText(path);
  if (!text)
    return text.takeError();
  return parseCluster(*text, llvm::sys::path::parent_path(path));
}

llvm::Expected<Cluster> resolveCluster(llvm::StringRef nameOrPath) {
  if (nameOrPath.contains('/') || nameOrPath.endswith(".json")) {
    auto c = readClusterFile(nameOrPath);
    if (!c)
      return makeError("{}: {}", nameOrPath, takeMessage(c.takeError()));
    return c;
  }
  return clusterByName(nameOrPath);
}

} // namespace commlens
