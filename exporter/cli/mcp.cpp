#include "cli/mcp.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <utility>

#include "chains/kinds.h"
#include "cli/check.h"
#include "cli/explain.h"
#include "cli/explain_render.h"
#include "cli/flags.h"
#include "cli/jsonrpc.h"
#include "cli/mcp_query.h"
#include "cli/open_store.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/result.h"
#include "common/strings.h"
#include "store/report.h"
#include "store/schema.h"
#include "store/sqlite.h"

namespace stallwatch::cli {
namespace {

constexpr const char* kUsage =
    "usage: stallwatch mcp [--db PATH]\n"
    "\n"
    "A Model Context Protocol server on stdin/stdout (JSON-RPC 2.0, one message per line) for\n"
    "an assistant: tools explain, chains, sites, query and check over the stallwatch database,\n"
    "read-only. Started by the assistant, not by hand; diagnostics go to stderr.\n"
    "\n"
    "options:\n"
    "  --db PATH   the database (default /var/lib/stallwatch/stallwatch.db)\n"
    "  -h, --help  this text\n"
    "  --version   the version (as `stallwatch version`)\n"
    "\n"
    "Register it with an assistant (the README has the snippet):\n"
    "  {\"mcpServers\": {\"stallwatch\": {\"command\": \"stallwatch\", \"args\": [\"mcp\"]}}}\n";

constexpr auto kToolTimeout = std::chrono::seconds(30);
constexpr std::int64_t kDefaultQueryRows = 200;

// Readers of arguments McpServer has checked against the schema: a value of the wrong type
// cannot arrive here, but reading stays typed, so one could not throw either.
std::string str(const Json& args, const char* key, const char* fallback) {
  const std::string* s = jsonrpc::string_member(args, key);
  return s ? *s : fallback;
}
std::int64_t integer(const Json& args, const char* key, std::int64_t fallback) {
  return jsonrpc::integer_member(args, key).value_or(fallback);
}
Result<std::chrono::nanoseconds> period(const Json& args, const char* key, const char* fallback) {
  auto d = parse_duration(str(args, key, fallback));
  if (!d) return make_error(std::string(key) + ": " + d.error().message, jsonrpc::kInvalidParams);
  if (d->count() <= 0) {
    return make_error(std::string(key) + " must be longer than 0", jsonrpc::kInvalidParams);
  }
  return *d;
}

ToolOutput failure(std::string text) { return ToolOutput{std::move(text), Json(), true}; }

Result<store::Report> load(const std::string& db_path, store::ReportQuery q, std::string* note) {
  auto db = open_store(db_path, "mcp");
  if (!db) return db.error();
  *note = db->note;
  const store::StatementDeadline deadline(db->db.get(), kToolTimeout);
  auto report = store::load_report(db->db.get(), q);
  if (!report && deadline.expired()) {
    return make_error("stopped after 30s; ask for a shorter period (since) or one cgroup");
  }
  if (!report) return make_error("reading " + db_path + ": " + report.error().message);
  return report;
}

// The sites tool: outlier_sites grouped by call and site line, most stalled time first.
ToolOutput sites_tool(const std::string& path, std::chrono::nanoseconds since, std::int64_t limit,
                      std::int64_t now_ns) {
  ToolOutput out;
  auto db = open_store(path, "mcp");
  if (!db) return failure(db.error().message);
  auto version = store::schema_version(db->db.get());
  if (!version) return failure("reading " + path + ": " + version.error().message);
  if (*version < 8) {
    out.text = "No call sites: this store predates them (schema " + std::to_string(*version) +
               "; they came with schema 8). Use explain or chains for the slow calls.\n";
    out.structured = Json{{"sites", Json::array()}, {"stacks_recorded", false}};
  } else {
    store::ReportQuery q;
    q.now_ns = now_ns;
    q.since_ns = since.count();
    Json sites = Json::array();
    std::string text;
    const store::StatementDeadline deadline(db->db.get(), kToolTimeout);
    auto done = store::each_period_row(
        db->db.get(),
        "SELECT call, function, file, line, site, sum(count), sum(stalled_ns), "
        "count(DISTINCT pid) FROM outlier_sites WHERE ts_ns > ?1 AND ts_ns <= ?2 GROUP BY call, "
        "site ORDER BY 7 DESC LIMIT " + std::to_string(limit),
        q, [&](const store::Stmt& row) {
          const double stalled_s = static_cast<double>(row.int64(6)) / 1e9;
          Json j = {{"call", row.text(0)},
                    {"function", row.text(1)},
                    {"file", row.text(2)},
                    {"line", row.is_null(3) ? Json(nullptr) : Json(row.int64(3))},
                    {"site", row.text(4)},
                    {"count", row.int64(5)},
                    {"stalled_s", stalled_s},
                    {"processes", row.int64(7)}};
          text += row.text(4) + "   " + row.text(0) + ": " + std::to_string(row.int64(5)) +
                  " slow calls, " + format_duration(std::chrono::nanoseconds(row.int64(6))) +
                  " stalled\n";
          sites.push_back(std::move(j));
        });
    if (!done) {
      return failure(deadline.expired() ? "stopped after 30s; ask for a shorter period"
                                             : "reading " + path + ": " + done.error().message);
    }
    out.text = sites.empty() ? "No call sites in the period (" + format_duration(since) +
                                   "): no call reached the daemon's --outlier-threshold.\n"
                             : "Top call sites by stalled time, " + format_duration(since) +
                                   " up to now:\n" + text;
    out.structured = Json{{"sites", std::move(sites)}, {"stacks_recorded", true}};
  }
  return out;
}

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t start = 0; start <= s.size();) {
    const size_t nl = s.find('\n', start);
    const size_t end = nl == std::string_view::npos ? s.size() : nl;
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

int severity_rank(const std::string& name) {
  auto s = chains::severity_from_name(name);
  return s ? static_cast<int>(*s) : -1;
}

std::string chain_line(const Json& c) {
  auto text = [&](const char* k) {
    const std::string* s = jsonrpc::string_member(c, k);
    return s ? *s : std::string();
  };
  // Each line escaped on its own: the fix is several commands, one per line.
  auto lines = [](const std::string& s, const char* indent) {
    std::string out;
    for (auto l : split_lines(s)) {
      if (!l.empty()) out += std::string("\n") + indent + escape_name(l);
    }
    return out;
  };
  std::string line = "- [" + escape_name(text("severity")) + "] " + escape_name(text("kind")) +
                     " (" + (jsonrpc::bool_member(c, "open").value_or(false) ? "open" : "closed") + ") cgroup \"" +
                     escape_name(text("cgroup")) + "\"";
  if (!text("call").empty()) line += ", call " + escape_name(text("call"));
  line += ", opened " + escape_name(text("opened"));
  line += lines(text("summary"), "  ");
  if (!text("recommendation").empty()) line += "\n  Fix:" + lines(text("recommendation"), "    ");
  return line + "\n";
}

// explain and chains: the report of the period, whole (explain) or as a filtered list (chains).
Result<ToolOutput> report_tool(const McpOptions& o, bool is_chains, const Json& args,
                               std::int64_t now_ns) {
  auto since = period(args, "since", is_chains ? "24h" : "1h");
  if (!since) return since.error();
  store::ReportQuery q;
  q.now_ns = now_ns;
  q.since_ns = since->count();
  q.cgroup = str(args, "cgroup", "");
  q.per_process = !is_chains && jsonrpc::bool_member(args, "per_process").value_or(false);
  std::string note;
  auto report = load(o.db, q, &note);
  if (!report) return failure(report.error().message);
  report->host.hostname = o.hostname;
  ToolOutput out;
  Json doc = Json::parse(render_explain_json(*report), nullptr, false);
  if (!is_chains) {
    out.text = render_explain_text(*report);
    out.structured = std::move(doc);
  } else {
    const std::string state = str(args, "state", "any"), kind = str(args, "kind", "");
    const std::string severity = str(args, "severity", "");
    const auto limit = static_cast<size_t>(integer(args, "limit", 50));
    const int floor = severity.empty() ? -1 : severity_rank(severity);
    Json picked = Json::array();
    const Json* chains = jsonrpc::member(doc, "chains");
    for (const auto& c : chains && chains->is_array() ? *chains : Json::array()) {
      const bool open = jsonrpc::bool_member(c, "open").value_or(false);
      if ((state == "open" && !open) || (state == "closed" && open)) continue;
      const std::string* k = jsonrpc::string_member(c, "kind");
      if (!kind.empty() && (!k || *k != kind)) continue;
      const std::string* s = jsonrpc::string_member(c, "severity");
      if (severity_rank(s ? *s : "") < floor) continue;
      if (picked.size() >= limit) break;
      picked.push_back(c);
    }
    out.text = picked.empty() ? "No chain matches (" + format_duration(*since) + " up to now).\n"
                              : std::to_string(picked.size()) +
                                    (picked.size() == 1 ? " chain" : " chains") + ", " +
                                    format_duration(*since) + " up to now:\n";
    for (const auto& c : picked) out.text += chain_line(c);
    out.structured = Json{{"chains", std::move(picked)}};
  }
  if (!note.empty()) out.text = "Note: " + note + "\n" + out.text;
  return out;
}

Result<ToolOutput> run_tool(const McpOptions& o, const std::string& name, const Json& args,
                            std::int64_t now_ns) {
  if (name == "explain" || name == "chains") return report_tool(o, name == "chains", args, now_ns);
  if (name == "sites") {
    auto since = period(args, "since", "1h");
    if (!since) return since.error();
    return sites_tool(o.db, *since, integer(args, "limit", 10), now_ns);
  }
  if (name == "query") {
    return query_tool(o.db, str(args, "sql", ""),
                      static_cast<std::uint64_t>(integer(args, "max_rows", kDefaultQueryRows)));
  }
  // check
  RunOptions run;
  run.db = o.db;
  const CheckReport report = run_checks(run);
  ToolOutput out;
  out.text = render_text(report);
  out.structured = Json::parse(render_json(report), nullptr, false);
  return out;
}

}  // namespace

McpTools store_tools(McpOptions o) {
  McpTools tools;
  tools.run = [o = std::move(o)](const std::string& name, const Json& args, std::int64_t now_ns) {
    return run_tool(o, name, args, now_ns);
  };
  for (const auto& k : chains::kKinds) tools.chain_kinds.emplace_back(k.name);
  return tools;
}

int mcp_main(const std::vector<std::string>& args) {
  po::options_description desc;
  // clang-format off
  add_help_flags(desc);
  desc.add_options()
    ("db", po::value<std::string>(), "");
  // clang-format on
  auto vm = parse_flags(args, desc, nullptr);
  if (!vm) return usage_error(std::cerr, "mcp", vm.error().message);
  if (vm->count("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (vm->count("version")) {
    std::cout << version_text();
    return 0;
  }
  McpOptions o;
  if (vm->count("db")) o.db = (*vm)["db"].as<std::string>();
  if (o.db.empty()) return usage_error(std::cerr, "mcp", "--db needs a path");
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) o.hostname = host;
  std::ios::sync_with_stdio(false);
  McpServer server(store_tools(std::move(o)));
  serve_mcp(server, std::cin, std::cout);
  return 0;
}

}  // namespace stallwatch::cli
