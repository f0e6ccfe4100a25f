#include "cli/options.h"

#include <boost/program_options.hpp>
#include <fstream>
#include <sstream>

#include "common/duration.h"
#include "common/size.h"

namespace stallwatch::cli {
namespace po = boost::program_options;

namespace {

Result<std::chrono::nanoseconds> duration_flag(const po::variables_map& vm, const char* name,
                                               std::chrono::nanoseconds fallback,
                                               bool zero_ok = false) {
  if (!vm.count(name)) return fallback;
  auto d = parse_duration(vm[name].as<std::string>());
  if (!d) return make_error("--" + std::string(name) + ": " + d.error().message);
  if (d->count() == 0 && !zero_ok) return make_error("--" + std::string(name) + " must be greater than 0");
  return *d;
}

bool valid_listen(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 >= s.size()) return false;
  std::string port = s.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5) return false;
  int p = std::stoi(port);
  return p > 0 && p < 65536;
}

}  // namespace

Result<RunOptions> parse_run_options(const std::vector<std::string>& args, std::string* usage) {
  RunOptions o;
  po::options_description desc(
      "stallwatch run [options]\n\nTrace CUDA calls and the scheduler; "
      "serve /metrics, /healthz and /debug/snapshot; push OTLP when configured.\n\nOptions",
      100, 50);
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("config", po::value<std::string>(), "read options from FILE (`name = value` lines; flags win)")
    ("listen", po::value<std::string>(), "ADDR:PORT for /metrics, /healthz (default 0.0.0.0:9464)")
    ("db", po::value<std::string>(), "chain store path (default /var/lib/stallwatch/stallwatch.db; "
     "\"none\" keeps no store)")
    ("max-db", po::value<std::string>(), "prune the oldest data past this size: 2GiB, 500MiB "
     "(default 2GiB)")
    ("retention", po::value<std::string>(), "delete data older than this: 12h, 7d (default 7d)")
    ("window", po::value<std::string>(), "snapshot window: 500ms, 5s, 1m (default 5s)")
    ("outlier-threshold", po::value<std::string>(),
     "calls at least this long are sent to user space one by one (default 1ms)")
    ("rescan-interval", po::value<std::string>(),
     "full /proc rescan for CUDA libraries (default 30s; mappings are also caught as they happen)")
    ("detach-linger", po::value<std::string>(),
     "keep probes on a library this long after the last process unmapped it (default 30s)")
    ("max-cgroups", po::value<size_t>(), "cgroups with their own series; the rest fold into "
     "cgroup=\"_overflow\" (default 256)")
    ("kube-api", po::value<std::string>(), "Kubernetes API server for pod/namespace/container "
     "names (default: in a pod, the in-cluster address; \"none\" turns it off)")
    ("kube-node", po::value<std::string>(), "this node's name, whose pods are listed (default "
     "$NODE_NAME, else the hostname)")
    ("kube-refresh", po::value<std::string>(), "list the node's pods this often (default 60s; a "
     "new pod is looked up at once, at most every 5s)")
    ("verbose,v", "debug logging, including libbpf's");
  // clang-format on
  for (const auto& f : otlp::push_flag_infos()) {
    if (f.repeatable) {
      desc.add_options()(f.name, po::value<std::vector<std::string>>()->composing(), f.help);
    } else {
      desc.add_options()(f.name, po::value<std::string>(), f.help);
    }
  }
  std::ostringstream u;
  u << desc;
  if (usage) *usage = u.str();

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("config")) {
      o.config = vm["config"].as<std::string>();
      std::ifstream in(o.config);
      if (!in) {
        return make_error("cannot read config file " + o.config +
                          " (check the path and permissions)");
      }
      po::store(po::parse_config_file(in, desc), vm);  // stored later: command line wins
    }
    po::notify(vm);
  } catch (const po::error& e) {
    return make_error(std::string(e.what()) + " (see `stallwatch run --help`)");
  }
  if (vm.count("help")) {
    o.help = true;
    return o;
  }
  if (vm.count("listen")) o.listen = vm["listen"].as<std::string>();
  if (!valid_listen(o.listen)) {
    return make_error("--listen " + o.listen + ": expected ADDR:PORT, e.g. 127.0.0.1:9464");
  }
  if (vm.count("db")) o.db = vm["db"].as<std::string>();
  if (vm.count("max-db")) {
    auto size = parse_size(vm["max-db"].as<std::string>());
    if (!size) return make_error("--max-db: " + size.error().message);
    if (*size < (1u << 20)) return make_error("--max-db must be at least 1MiB");
    o.max_db = *size;
  }
  auto retention = duration_flag(vm, "retention", o.retention);
  if (!retention) return retention.error();
  o.retention = *retention;
  if (vm.count("max-cgroups")) o.max_cgroups = vm["max-cgroups"].as<size_t>();
  o.verbose = vm.count("verbose") > 0;
  auto window = duration_flag(vm, "window", o.window);
  if (!window) return window.error();
  o.window = *window;
  auto outlier = duration_flag(vm, "outlier-threshold", o.outlier_threshold);
  if (!outlier) return outlier.error();
  o.outlier_threshold = *outlier;
  auto rescan = duration_flag(vm, "rescan-interval", o.rescan_interval);
  if (!rescan) return rescan.error();
  o.rescan_interval = *rescan;
  if (vm.count("kube-api")) o.kube_api = vm["kube-api"].as<std::string>();
  if (vm.count("kube-node")) o.kube_node = vm["kube-node"].as<std::string>();
  auto kube_refresh = duration_flag(vm, "kube-refresh", o.kube_refresh);
  if (!kube_refresh) return kube_refresh.error();
  if (*kube_refresh < std::chrono::seconds(1)) return make_error("--kube-refresh must be at least 1s");
  o.kube_refresh = *kube_refresh;
  auto linger = duration_flag(vm, "detach-linger", o.detach_linger, true);
  if (!linger) return linger.error();
  o.detach_linger = *linger;
  for (const auto& f : otlp::push_flag_infos()) {
    if (!vm.count(f.name)) continue;
    std::vector<std::string> values;
    if (f.repeatable) {
      values = vm[f.name].as<std::vector<std::string>>();
    } else {
      values.push_back(vm[f.name].as<std::string>());
    }
    for (const auto& v : values) {
      auto set = otlp::set_push_flag(o.otlp, f.name, v);
      if (!set) return set.error();
    }
  }
  return o;
}

}  // namespace stallwatch::cli
