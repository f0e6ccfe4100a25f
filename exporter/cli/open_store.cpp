#include "cli/open_store.h"

#include <sys/stat.h>

#include <cerrno>

#include "common/strings.h"

namespace stallwatch::cli {

std::string no_database_message(const std::string& path, std::string_view command) {
  const std::string cmd(command);
  return "no database at " + escape_line(path) + "; start `stallwatch run`, or pass --db (to try " +
         cmd + " without a daemon: `stallwatch demo incident --fast --db " + kDemoHintDb +
         "`, then `stallwatch " + cmd + " --db " + kDemoHintDb + "`)";
}

Result<store::ReportDb> open_store(const std::string& path, std::string_view command) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
    return make_error(no_database_message(path, command), ENOENT);
  }
  return store::open_report_db(path);
}

}  // namespace stallwatch::cli
