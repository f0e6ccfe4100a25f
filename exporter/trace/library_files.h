// CUDA library files on disk (libcudart, libcuda, libnccl): the directories common hosts and
// images keep them in — distribution and CUDA toolkit prefixes, conda, and the nvidia/ and
// torch/ wheels under site-packages — globbed, never recursed, plus directories the caller
// names. Used by `check` to list them and by discovery to attach to them before any process
// maps them (issue #19: no first calls lost between a dlopen and its attach).
// Touches only the filesystem; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "trace/calls.h"

namespace stallwatch::trace {

struct LibraryFile {
  std::string path;  // canonical (symlinks resolved): one entry per file
  Api api;
};

// The standard directories that exist here, then `extra` as given (missing ones skipped).
std::vector<std::string> library_dirs(const std::vector<std::string>& extra = {});

// Regular files named like a CUDA library in `dirs`, one per canonical path, sorted by path
// (libcuda.so -> libcuda.so.1 -> libcuda.so.580.x counts once).
std::vector<LibraryFile> cuda_library_files(const std::vector<std::string>& dirs);

}  // namespace stallwatch::trace
