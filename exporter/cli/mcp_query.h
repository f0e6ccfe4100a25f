// The MCP `query` tool (cli/mcp.h): one read-only statement through query_main (so every check
// of `stallwatch query` applies), its rows kept within a budget. Whoever can write to the store
// or pick the statement (SELECT randomblob(5000000) ...) chooses how large a row is; the
// assistant's context and this process's memory are not disks. At most max_rows rows and
// QueryLimits::total bytes of rows are kept, each string cell (blobs come as hex) is cut at
// QueryLimits::cell bytes, and reading stops once the budget is spent; the result says
// "truncated": true and why. Memory stays about one row plus the budget.
// Thread-safety: reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cli/mcp_server.h"

namespace stallwatch::cli {

struct QueryLimits {
  size_t total = 1u << 20;  // bytes of JSON rows in the structured result
  size_t cell = 64u << 10;  // bytes of one string cell (as JSON text)
};

// structuredContent {"rows": [...], "truncated": bool, "truncated_reason": "..." (when
// truncated)}; the text is the same rows, one per line. A refused or failed statement is a
// tool error (is_error) with query's one-line message.
ToolOutput query_tool(const std::string& db, const std::string& sql, std::uint64_t max_rows,
                      const QueryLimits& limits = {});

}  // namespace stallwatch::cli
