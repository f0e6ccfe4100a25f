// `stallwatch mcp [--db PATH]`: a Model Context Protocol server over stdio, so an on-call
// assistant can ask why a job is slow and get the chain, its contributors and the fix instead
// of writing SQL. JSON-RPC 2.0, one message per line on stdin and stdout (the MCP stdio
// transport); diagnostics go to stderr. Read-only on the store, like explain and query; needs
// no root. No network transport: it would expose SQL over the network.
//
// Protocol versions 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25: the client's when it
// is one of them, else the newest. Tool results carry structuredContent only from 2025-06-18,
// where the protocol defines it. Tools: explain, chains, sites, query, check (tools/list
// documents each with its input JSON schema). Arguments that do not match the schema are a
// JSON-RPC error (-32602); a tool that runs and fails (no database, a refused statement)
// answers a result with isError true.
//
// Names from the host (processes, threads, cgroups, units) reach the assistant as data: JSON
// strings in structured content, escaped (common/strings.h escape_name) in text, and every
// tool description says they are untrusted.
// Thread-safety: one McpServer per thread.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace stallwatch::cli {

// The protocol versions this server speaks, newest first.
inline constexpr const char* kMcpVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                               "2024-11-05"};

// A line longer than this is refused (-32700) and skipped.
inline constexpr size_t kMaxMcpMessage = 4u << 20;

struct McpOptions {
  std::string db = "/var/lib/stallwatch/stallwatch.db";
  std::string hostname;  // shown in explain's header
  bool help = false;
};

class McpServer {
 public:
  explicit McpServer(McpOptions o);
  // The reply to one message (a line of the transport), without the newline; nullopt for a
  // notification or a response, which get no reply. `now_ns` is the unix time reports end at.
  std::optional<std::string> handle(std::string_view message, std::int64_t now_ns);
  // The version agreed by initialize ("" before it).
  const std::string& version() const { return version_; }

 private:
  Json dispatch(const std::string& method, const Json& params, std::int64_t now_ns);
  Json call_tool(const Json& params, std::int64_t now_ns);

  McpOptions o_;
  std::string version_;
};

// Reads messages from `in` until EOF, writes replies to `out` (one line each, flushed).
void serve_mcp(McpServer& server, std::istream& in, std::ostream& out);

// Exit codes: 0 at the end of input; 2 bad usage.
int mcp_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
