#include "reports/HtmlReport.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace commlens {
namespace {

std::string escape(llvm::StringRef s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    case '\'': out += "&#39;"; break;
    default: out += c;
    }
  }
  return out;
}

/// JSON inside <script type="application/json">: "</" would end the element.
std::string scriptSafe(llvm::StringRef json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    out += json[i];
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/')
      out += "\\";
  }
  return out;
}

constexpr const char *kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.sub{color:#5b6475;margin-bottom:16px}
table{border-collapse:collapse;margin:4px 0 12px}th,td{padding:3px 10px;border-bottom:1px solid #e3e6ec;text-align:left;vertical-align:top}
th{background:#f3f5f8;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.totals td{font-weight:600}.ops{color:#3d4a61;font-size:12px}
tr.match td{background:#eaf7ee}tr.differ td{background:#fde8e8}tr.approx td{background:#fff6df}
.why{color:#5b6475;font-size:12px;max-width:520px}
svg text{font:12px system-ui,sans-serif;fill:#1d2330}.bar{fill:#4c78a8}.bar.bw{fill:#f58518}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
)";

std::string page(llvm::StringRef title, llvm::StringRef body, llvm::StringRef dataJson) {
  return fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                     "<meta name=\"generator\" content=\"commlens\">\n<title>{}</title>\n<style>{}</style></head>\n"
                     "<body>\n{}\n<script type=\"application/json\" id=\"commlens-data\">{}</script>\n</body></html>\n",
                     escape(title), kStyle, body.str(), scriptSafe(dataJson));
}

std::string cellsText(const CommCellMap &cells) {
  std::string out;
  for (const auto &[op, cell] : cells) {
    if (!out.empty())
      out += ", ";
    llvm::StringRef shortName = llvm::StringRef(op).rsplit('.').second;
    out += fmt::format("{} &times;{}{}", escape(shortName.empty() ? op : shortName), cell.count,
                       cell.approximate ? " (approx.)" : "");
  }
  return out;
}

struct PhaseSums {
  int64_t count = 0, bytes = 0;
  double us = 0;
  bool bytesKnown = true, timed = false, routed = false; // routed: some bytes are the routing's
};

PhaseSums sums(const CommCellMap &cells) {
  PhaseSums s;
  for (const auto &[op, cell] : cells) {
    s.count += cell.count;
    if (cell.bytes)
      s.bytes += *cell.bytes;
    else if (cell.count)
      s.bytesKnown = false;
    s.routed |= cell.bytesBounds.has_value();
    if (cell.timeUs) {
      s.us += *cell.timeUs;
      s.timed = true;
    }
  }
  return s;
}

/// A module's bytes in one phase: "?" where unknown, "~" before a value under the routing model.
std::string bytesText(const PhaseSums &s) {
  if (!s.bytesKnown)
    return "?";
  return (s.routed ? "~" : "") + std::to_string(s.bytes);
}

/// A horizontal bar chart: one row per label, forward and backward stacked.
std::string barChart(const std::string &id, const std::vector<std::tuple<std::string, double, double>> &rows,
                     llvm::StringRef unit) {
  if (rows.empty())
    return "<p>(nothing to chart)</p>";
  double maxValue = 0;
  for (const auto &[label, fw, bw] : rows)
    maxValue = std::max(maxValue, fw + bw);
  constexpr int labelWidth = 330, barWidth = 420, rowHeight = 20;
  int height = static_cast<int>(rows.size()) * rowHeight + 8;
  std::string svg = fmt::format("<svg id=\"{}\" width=\"{}\" height=\"{}\" role=\"img\">", id,
                                labelWidth + barWidth + 120, height);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto &[label, fw, bw] = rows[i];
    int y = static_cast<int>(i) * rowHeight + 4;
    double scale = maxValue > 0 ? barWidth / maxValue : 0;
    int wf = static_cast<int>(fw * scale + 0.5), wb = static_cast<int>(bw * scale + 0.5);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", labelWidth - 6, y + 13, escape(label));
    svg += fmt::format("<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\"/>", labelWidth, y, wf);
    svg += fmt::format("<rect class=\"bar bw\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\"/>", labelWidth + wf, y, wb);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" data-value=\"{}\">{}</text>", labelWidth + wf + wb + 6, y + 13,
                       fw + bw, unit == "us" ? escape(formatMicroseconds(fw + bw)) : fmt::format("{:.0f} B", fw + bw));
  }
  return svg + "</svg><div class=\"legend\"><span class=\"bar\" style=\"background:#4c78a8\"></span>forward"
               "<span style=\"background:#f58518\"></span>backward</div>";
}

} // namespace

std::string predictionHtml(const PredictionReport &report, llvm::StringRef title) {
  const bool timed = report.cluster != nullptr;
  std::string body = fmt::format("<h1>{}</h1>\n<div class=\"sub\">{} &middot; phases: {}{}</div>\n", escape(title),
                                 escape(report.plan->mesh.str()),
                                 report.inference ? "inference (no-grad forward)"
                                 : report.forward && report.backward ? "forward + backward"
                                                                     : (report.forward ? "forward" : "backward"),
                                 timed ? " &middot; cluster " + escape(report.cluster->str()) : "");
  // Step totals.
  CommTotals fw = report.totals(Phase::Forward), bw = report.totals(Phase::Backward);
  body += "<h2>Per step</h2>\n<table id=\"totals\"><tr><th></th><th class=\"num\">collectives</th>"
          "<th class=\"num\">bytes / rank</th>";
  body += timed ? "<th class=\"num\">time (back to back)</th></tr>\n" : "</tr>\n";
  auto totalsRow = [&](const char *name, const CommTotals &t, const char *cls) {
    body += fmt::format("<tr class=\"{}\" data-phase=\"{}\"><td>{}</td><td class=\"num\" data-collectives=\"{}\">{}</td>"
                        "<td class=\"num\" data-bytes=\"{}\">{}</td>",
                        cls, name, name, t.collectives, t.collectives, t.bytesPerRank, t.bytesPerRank);
    body += timed ? fmt::format("<td class=\"num\" data-time-us=\"{}\">{}</td></tr>\n", t.timeUs,
                                escape(formatMicroseconds(t.timeUs)))
                  : "</tr>\n";
  };
  if (report.forward)
    totalsRow("forward", fw, "");
  if (report.backward)
    totalsRow("backward", bw, "");
  totalsRow("step", fw + bw, "totals");
  body += "</table>\n";
  // Per mesh dim.
  body += "<table id=\"mesh-dims\"><tr><th>mesh dim</th><th class=\"num\">ranks</th><th class=\"num\">nodes</th>"
          "<th class=\"num\">collectives</th><th class=\"num\">bytes / rank</th>";
  body += timed ? "<th class=\"num\">time</th></tr>\n" : "</tr>\n";
  for (const MeshDimTotals &d : report.meshDimTotals()) {
    CommTotals both = d.both();
    body += fmt::format("<tr data-dims=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                        "<td class=\"num\">{}</td><td class=\"num\">{}</td>",
                        escape(d.dims), escape(d.dims), d.ranks, d.nodes, both.collectives, both.bytesPerRank);
    body += timed ? fmt::format("<td class=\"num\">{}</td></tr>\n", escape(formatMicroseconds(both.timeUs)))
                  : "</tr>\n";
  }
  body += "</table>\n";

  // Charts: own (exclusive) time or bytes per module, and per collective kind.
  std::map<std::string, std::pair<double, double>> perModule, perKind;
  std::vector<std::string> moduleOrder;
  for (const CollectiveRecord &c : report.state->collectives) {
    if (!report.includes(c))
      continue;
    bool forward = c.phase == Phase::Forward;
    double v = timed ? (c.time ? c.time->us : 0) : static_cast<double>(c.bytesPerRank);
    std::string m = c.module ? c.module->displayName() : "Global";
    if (!perModule.count(m))
      moduleOrder.push_back(m);
    (forward ? perModule[m].first : perModule[m].second) += v;
    (forward ? perKind[c.opKey].first : perKind[c.opKey].second) += v;
  }
  std::vector<std::tuple<std::string, double, double>> moduleRows, kindRows;
  for (const std::string &m : moduleOrder)
    moduleRows.emplace_back(m, perModule[m].first, perModule[m].second);
  for (const auto &[k, v] : perKind)
    kindRows.emplace_back(k, v.first, v.second);
  const char *unit = timed ? "us" : "B";
  body += fmt::format("<h2>{} per module (its own collectives)</h2>\n", timed ? "Time" : "Bytes per rank");
  body += barChart("chart-modules", moduleRows, unit);
  body += fmt::format("<h2>{} per collective</h2>\n", timed ? "Time" : "Bytes per rank");
  body += barChart("chart-collectives", kindRows, unit);

  // The module tree (inclusive counts, as CommDebugMode charges them).
  body += "<h2>Modules</h2>\n<table id=\"modules\"><tr><th>module</th><th>forward</th><th>backward</th>"
          "<th class=\"num\">bytes fw</th><th class=\"num\">bytes bw</th>";
  body += timed ? "<th class=\"num\">time fw</th><th class=\"num\">time bw</th></tr>\n" : "</tr>\n";
  for (const ModuleCounts &m : report.counts.modules()) {
    PhaseSums f = sums(m.phase(CommPhase::Forward)), b = sums(m.phase(CommPhase::Backward));
    body += fmt::format("<tr data-fqn=\"{}\" data-forward=\"{}\" data-backward=\"{}\"><td style=\"padding-left:{}px\">"
                        "{}</td><td class=\"ops\">{}</td><td class=\"ops\">{}</td><td class=\"num\">{}</td>"
                        "<td class=\"num\">{}</td>",
                        escape(m.fqn), f.count, b.count, 10 + 16 * m.depth, escape(m.fqn),
                        cellsText(m.phase(CommPhase::Forward)), cellsText(m.phase(CommPhase::Backward)),
                        bytesText(f), bytesText(b));
    body += timed ? fmt::format("<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
                                f.timed ? escape(formatMicroseconds(f.us)) : "", b.timed ? escape(formatMicroseconds(b.us)) : "")
                  : "</tr>\n";
  }
  body += "</table>\n";
  auto routed = llvm::find_if(report.state->collectives, [](const CollectiveRecord &c) { return c.bytesRange.has_value(); });
  if (routed != report.state->collectives.end())
    body += fmt::format("<p class=\"why\">~: bytes under {} of MoE tokens (expert-parallel all-to-alls); the "
                        "collectives below give each one's bounds.</p>\n",
                        escape(routingModel(*routed)));

  // Every collective, with why.
  body += "<h2>Collectives</h2>\n<table id=\"collectives\"><tr><th>phase</th><th>module</th><th>collective</th>"
          "<th>mesh dims</th><th>placements</th><th class=\"num\">bytes / rank</th>";
  body += timed ? "<th class=\"num\">time</th>" : "";
  body += "<th>op, operand</th><th>why</th></tr>\n";
  for (const CollectiveRecord &c : report.state->collectives) {
    if (!report.includes(c))
      continue;
    bool forward = c.phase == Phase::Forward;
    std::string dims = fmt::format("{}", fmt::join(c.meshDims, ","));
    body += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} &rarr; {}</td><td class=\"num\">{}</td>",
                        forward ? "forward" : "backward", escape(c.module ? c.module->displayName() : "Global"),
                        escape(c.opKey), dims, escape(str(c.fromPlacements)), escape(str(c.toPlacements)),
                        c.bytesRange ? fmt::format("{} ({}; {}&ndash;{} by the routing)", c.bytesPerRank,
                                                   escape(routingModel(c)), c.bytesRange->first, c.bytesRange->second)
                                     : std::to_string(c.bytesPerRank));
    if (timed)
      body += fmt::format("<td class=\"num\">{}</td>",
                          c.time ? escape(fmt::format("{} ({})", formatMicroseconds(c.time->us), c.time->algorithm))
                                 : "");
    body += fmt::format("<td>{} &lsquo;{}&rsquo;</td><td class=\"why\">{}</td></tr>\n",
                        escape(c.node ? c.node->opString() : ""), escape(c.argument), escape(c.why));
  }
  body += "</table>\n";
  for (const std::string &w : report.state->warnings)
    body += "<p class=\"why\">warning: " + escape(w) + "</p>\n";
  return page(title, body, report.toJson());
}

std::string compareHtml(const CompareReport &report) {
  std::string title = fmt::format("commlens compare: {} vs {}", report.predictedPath, report.measuredPath);
  std::string body = fmt::format("<h1>Predicted vs measured</h1>\n<div class=\"sub\">predicted {} ({}) &middot; "
                                 "measured {} ({})</div>\n<p id=\"summary\">{}</p>\n",
                                 escape(report.predictedPath), escape(formatName(report.predictedFormat)),
                                 escape(report.measuredPath), escape(formatName(report.measuredFormat)),
                                 escape(report.summaryLine()));
  body += "<table id=\"cells\"><tr><th>module</th><th>collective</th><th>phase</th><th class=\"num\">predicted</th>"
          "<th class=\"num\">measured</th><th class=\"num\">bytes predicted</th><th class=\"num\">bytes measured</th>"
          "</tr>\n";
  for (const CompareCell &c : report.cells) {
    const char *cls = c.differs() ? "differ" : (c.approximate ? "approx" : "match");
    auto bytes = [](const std::optional<int64_t> &b) { return b ? std::to_string(*b) : std::string(); };
    body += fmt::format("<tr class=\"{}\" data-module=\"{}\" data-collective=\"{}\" data-phase=\"{}\" "
                        "data-predicted=\"{}\" data-measured=\"{}\"><td style=\"padding-left:{}px\">{}</td><td>{}</td>"
                        "<td>{}</td><td class=\"num\">{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                        "<td class=\"num\">{}</td></tr>\n",
                        cls, escape(c.module), escape(c.collective), phaseName(c.phase).str(), c.predicted, c.measured,
                        10 + 16 * c.depth, escape(c.module), escape(c.collective), phaseName(c.phase).str(),
                        c.approximate ? "~" : "", c.predicted, c.measured, bytes(c.predictedBytes),
                        bytes(c.measuredBytes));
  }
  body += "</table>\n";
  return page(title, body, report.toJson());
}

} // namespace commlens
