// `stallwatch mcp [--db PATH]`: a Model Context Protocol server over stdio, so an on-call
// assistant can ask why a job is slow and get the chain, its contributors and the fix instead
// of writing SQL. The protocol (JSON-RPC 2.0 on stdin/stdout, version negotiation, argument
// checking, hostile messages) is cli/mcp_server.h; this file holds the tools over the store:
// explain, chains, sites, query (cli/mcp_query.h, bounded) and check. Diagnostics go to stderr.
// Read-only on the store, like explain and query; needs no root. No network transport: it would
// expose SQL over the network.
//
// Names from the host (processes, threads, cgroups, units) reach the assistant as data: JSON
// strings in structured content, escaped (common/strings.h escape_name) in text, and every
// tool description says they are untrusted.
// Thread-safety: the runner is reentrant; one McpServer per thread.
#pragma once

#include <string>
#include <vector>

#include "cli/mcp_server.h"

namespace stallwatch::cli {

struct McpOptions {
  std::string db = "/var/lib/stallwatch/stallwatch.db";
  std::string hostname;  // shown in explain's header
  bool help = false;
};

// The tools over the store at o.db, for McpServer.
McpTools store_tools(McpOptions o);

// Exit codes: 0 at the end of input; 2 bad usage.
int mcp_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
