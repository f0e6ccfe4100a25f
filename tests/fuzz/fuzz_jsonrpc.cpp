// The MCP message handler (cli/mcp_server.h McpServer::handle, the function stdin's lines go
// to) with stub tools: any line gets at most one reply, which is one line of JSON with the
// JSON-RPC 2.0 shape, and never a crash, an escaped exception or a stack overflow. The first
// bytes pick the state (initialized or not) so both paths are reached; a stub tool answers a
// large result so the text bound is exercised.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cli/mcp_server.h"

namespace {

stallwatch::Result<stallwatch::cli::ToolOutput> stub(const std::string& name,
                                                     const stallwatch::Json& args, std::int64_t) {
  if (name == "sites") return stallwatch::make_error("since: not a duration", -32602);
  stallwatch::cli::ToolOutput out;
  out.text = std::string(name == "query" ? 300000 : 10, 'x');
  out.structured = stallwatch::Json{{"echo", args}};
  out.is_error = name == "check";
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  stallwatch::cli::McpServer server({stub, {"cpu_contention", "io_stall"}});
  if (!text.empty() && text.front() == 'I') {
    (void)server.handle(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":)"
                        R"({"protocolVersion":"2025-06-18"}})",
                        0);
  }
  const auto reply = server.handle(text, 0);
  if (!reply) return 0;
  if (reply->find('\n') != std::string::npos) std::abort();  // one line of the transport
  const auto j = stallwatch::Json::parse(*reply, nullptr, false);
  if (!j.is_object() || !j.contains("id") || (j.contains("result") == j.contains("error"))) {
    std::abort();
  }
  return 0;
}
