// Files whose contents decide what the daemon, root on every node, runs or believes: its config
// file, the NVML library it loads (--nvml-library), the web config (users, TLS keys) and the
// OTLP headers file. A user who can write one of them, or rename another file into its place,
// sets options or runs code as root (issue #49: a world-writable config ran a user's library
// constructor as uid 0). Such a file must be a regular file owned by root or by the user the
// daemon runs as and writable by no one else, in directories that hold: each ancestor owned by
// root or that user, writable by no one else unless sticky (as /tmp, whose other users cannot
// rename what root owns there).
// Thread-safety: stateless; safe from any thread.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.h"

namespace stallwatch {

// "0644": the permission bits, as chmod takes them.
std::string octal_mode(mode_t m);

// The file's own owner and mode. `source` names it in the message ("--config /etc/x.conf");
// `holds` says why it matters ("it decides what stallwatch runs as root").
Result<Ok> check_file_owner(const struct stat& st, const std::string& source, uid_t euid,
                            std::string_view holds);
// Each directory above `path` (canonical), to the root.
Result<Ok> check_parent_dirs(const std::string& path, const std::string& source, uid_t euid);
// Opens `path` (O_NONBLOCK: a FIFO cannot hang the start; O_CLOEXEC) and checks the file it
// opened and its directories: the descriptor, for the caller to read or load and close.
Result<int> open_trusted_file(const std::string& path, const std::string& source,
                              std::string_view holds);

}  // namespace stallwatch
