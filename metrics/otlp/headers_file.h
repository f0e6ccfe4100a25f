// --otlp-headers-file PATH: the OTLP request headers that carry credentials (dd-api-key,
// Authorization), kept out of the command line, which every local user can read in
// /proc/PID/cmdline. One `name=value` a line; blank lines and lines starting with '#' are
// skipped; blanks around the name and the value are trimmed; the value is taken as written (no
// percent-decoding, unlike OTEL_EXPORTER_OTLP_HEADERS).
// The file must be a regular file owned by root or by the user running stallwatch and not
// writable by group or others: whoever can write it chooses where our credentials go and what
// the daemon sends. Links are followed (a Kubernetes secret volume's files are links).
// Errors are one line naming the path, the line number and the fix, never a value.
// Thread-safety: reentrant.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.h"
#include "metrics/otlp/delivery.h"

namespace stallwatch::otlp {

// A headers file holds a few lines; anything larger is not one.
inline constexpr size_t kMaxHeadersFile = 64 * 1024;

// The headers of `text`; `source` (e.g. "--otlp-headers-file /etc/stallwatch/otlp-headers")
// starts each error.
Result<Headers> parse_headers_file(std::string_view text, const std::string& source);

// Whether a file with this stat may hold our credentials when we run as `euid`.
Result<Ok> check_headers_file_owner(const struct stat& st, const std::string& source, uid_t euid);

// Opens, checks (owner, mode, size) and parses the file at `path`; `flag` names where the path
// came from in errors ("--otlp-headers-file", or the config file's).
Result<Headers> read_headers_file(const std::string& path, const std::string& flag);

}  // namespace stallwatch::otlp
