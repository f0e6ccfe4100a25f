// The store as the read-only commands open it (explain, stacks, export, mcp; query opens its
// own): store::open_report_db, with a missing database said the command line's way. The hint
// never names the path that was missing as a place for the demo to write: that is, by default,
// the daemon's own store, and a demo's fake incident there would read as a real one.
// Pure apart from the stat() and what store::open_report_db does; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "store/report.h"

namespace stallwatch::cli {

// Where the hint sends the demo: a file of its own under /tmp.
inline constexpr const char* kDemoHintDb = "/tmp/stallwatch-demo.db";

// "no database at PATH; start `stallwatch run`, or pass --db (to try COMMAND without a daemon:
// `stallwatch demo incident --fast --db /tmp/stallwatch-demo.db`, then `stallwatch COMMAND --db
// /tmp/stallwatch-demo.db`)"
std::string no_database_message(const std::string& path, std::string_view command);

// store::open_report_db(path), but a path that does not exist is no_database_message (ENOENT).
Result<store::ReportDb> open_store(const std::string& path, std::string_view command);

}  // namespace stallwatch::cli
