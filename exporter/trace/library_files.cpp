#include "trace/library_files.h"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>

namespace stallwatch::trace {

std::vector<std::string> library_dirs(const std::vector<std::string>& extra) {
  static constexpr const char* kDirs[] = {
      "/usr/lib/x86_64-linux-gnu",
      "/usr/lib/aarch64-linux-gnu",
      "/usr/lib64",
      "/usr/local/cuda*/lib64",
      "/usr/local/cuda*/lib",
      "/usr/local/cuda*/targets/*/lib",
      "/usr/local/lib",
      "/opt/conda/lib",
      "/opt/conda/envs/*/lib",
  };
  static constexpr const char* kSitePackages[] = {
      "/usr/lib/python3*/site-packages",         "/usr/lib/python3*/dist-packages",
      "/usr/local/lib/python3*/site-packages",   "/usr/local/lib/python3*/dist-packages",
      "/opt/conda/lib/python3*/site-packages",   "/opt/conda/envs/*/lib/python3*/site-packages",
      "/root/.local/lib/python3*/site-packages", "/home/*/.local/lib/python3*/site-packages",
  };
  std::vector<std::string> patterns(std::begin(kDirs), std::end(kDirs));
  for (const char* sp : kSitePackages) {
    patterns.push_back(std::string(sp) + "/nvidia/*/lib");
    patterns.push_back(std::string(sp) + "/torch/lib");
  }
  std::vector<std::string> dirs;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    if (glob(pattern.c_str(), GLOB_ONLYDIR | GLOB_NOSORT, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) dirs.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  for (const auto& d : extra) {
    struct stat st {};
    if (stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) dirs.push_back(d);
  }
  return dirs;
}

std::vector<LibraryFile> cuda_library_files(const std::vector<std::string>& dirs) {
  std::map<std::string, Api> found;
  for (const std::string& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = readdir(d)) {
      const std::optional<Api> api = api_of_library(e->d_name);
      if (!api) continue;
      const std::string path = dir + "/" + e->d_name;
      struct stat st {};
      if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      char* real = realpath(path.c_str(), nullptr);
      if (real == nullptr) continue;
      found.emplace(real, *api);
      std::free(real);
    }
    closedir(d);
  }
  std::vector<LibraryFile> out;
  for (auto& [path, api] : found) out.push_back({path, api});
  return out;
}

}  // namespace stallwatch::trace
