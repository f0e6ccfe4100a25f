// The protocol half of `stallwatch mcp` (cli/mcp.h has the tools and the command): MCP over
// JSON-RPC 2.0, one message per line on stdin and stdout (the MCP stdio transport).
//
// Protocol versions 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25: the client's when it
// is one of them, else the newest. Tool results carry structuredContent only from 2025-06-18,
// where the protocol defines it. tools/list documents each tool with its input JSON schema;
// arguments that do not match it (unknown, missing, of the wrong type, out of range) are a
// JSON-RPC error (-32602) before any tool runs, so a tool reads only checked arguments. A tool
// that runs and fails (no database, a refused statement) answers a result with isError true.
//
// Hostile input (whoever writes to stdin): every message is read through cli/jsonrpc.h (typed
// access, a size and a nesting limit), and whatever a message does, it gets at most one reply
// and the server goes on with the next; nothing in handle() lets an exception out.
// Depends on no store, rule or kernel code, so tests/fuzz/fuzz_jsonrpc.cpp drives it with stub
// tools. Thread-safety: one McpServer per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/jsonrpc.h"
#include "common/json.h"
#include "common/result.h"

namespace stallwatch::cli {

// The protocol versions this server speaks, newest first.
inline constexpr const char* kMcpVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                               "2024-11-05"};

inline constexpr size_t kMaxMcpMessage = jsonrpc::kMaxMessage;

// What a tool answers: text for every client, structured content (an object, or null for none)
// for those from 2025-06-18.
struct ToolOutput {
  std::string text;
  Json structured;
  bool is_error = false;
};

// Runs tool `name` with `args`, which have passed the tool's schema (mcp_tool_list()). An
// Error is an argument the schema cannot express (a duration that does not parse): -32602.
using ToolRunner = std::function<Result<ToolOutput>(const std::string& name, const Json& args,
                                                    std::int64_t now_ns)>;

struct McpTools {
  ToolRunner run;
  std::vector<std::string> chain_kinds;  // the values the chains tool's `kind` accepts
};

// The tools and their input schemas, as tools/list answers them.
Json mcp_tool_list(const std::vector<std::string>& chain_kinds);

class McpServer {
 public:
  explicit McpServer(McpTools tools);
  // The reply to one message (a line of the transport), without the newline; nullopt for a
  // notification or a response, which get no reply. `now_ns` is the unix time reports end at.
  std::optional<std::string> handle(std::string_view message, std::int64_t now_ns);
  // The version agreed by initialize ("" before it).
  const std::string& version() const { return version_; }

 private:
  Result<Json> dispatch(const jsonrpc::Request& r, std::int64_t now_ns);
  Result<Json> call_tool(const Json& params, std::int64_t now_ns);

  ToolRunner tools_;
  Json tool_list_;
  std::string version_;
};

// Reads messages from `in` until EOF, writes replies to `out` (one line each, flushed). A line
// longer than kMaxMcpMessage is answered -32700 and skipped without keeping its bytes.
void serve_mcp(McpServer& server, std::istream& in, std::ostream& out);

}  // namespace stallwatch::cli
