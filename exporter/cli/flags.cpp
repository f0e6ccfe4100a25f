#include "cli/flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>

#include "common/duration.h"
#include "common/strings.h"

namespace stallwatch::cli {

namespace {

// Reaches the substitutions of a Boost error (protected) to scrub them.
struct Substitutions : po::error_with_option_name {
  static void scrub(po::error_with_option_name& e) {
    for (auto& [name, value] : e.*(&Substitutions::m_substitutions)) {
      std::replace(value.begin(), value.end(), '%', '?');
    }
  }
};

}  // namespace

std::string po_error_message(const po::error& e) {
  if (const auto* named = dynamic_cast<const po::error_with_option_name*>(&e)) {
    // The caught exception object is not itself const.
    Substitutions::scrub(const_cast<po::error_with_option_name&>(*named));
  }
  return e.what();
}

Result<po::variables_map> parse_flags(const std::vector<std::string>& args,
                                      const po::options_description& desc,
                                      const po::positional_options_description* positional,
                                      int style, bool last_wins) {
  po::variables_map vm;
  try {
    po::command_line_parser parser(args);
    parser.options(desc).style(style);
    if (positional) parser.positional(*positional);
    po::parsed_options parsed = parser.run();
    // Without a positional description Boost drops bare arguments silently; name them.
    for (const auto& opt : parsed.options) {
      if (opt.position_key >= 0 && opt.string_key.empty()) {
        return make_error("unexpected argument '" +
                          (opt.value.empty() ? std::string() : opt.value.front()) + "'");
      }
    }
    if (last_wins) {
      // Boost refuses a second --window; the last one wins, as in most tools (and as scripts
      // that append to a base command line expect). Repeatable options keep every value.
      auto& opts = parsed.options;
      for (size_t i = opts.size(); i-- > 0;) {
        if (opts[i].position_key >= 0) continue;  // bare arguments are the caller's to count
        const po::option_description* d = desc.find_nothrow(opts[i].string_key, false);
        if (!d || d->semantic()->is_composing()) continue;
        const auto later =
            std::find_if(opts.begin() + static_cast<std::ptrdiff_t>(i) + 1, opts.end(),
                         [&](const po::option& o) { return o.string_key == opts[i].string_key; });
        if (later != opts.end()) opts.erase(opts.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    po::store(parsed, vm);
  } catch (const po::error& e) {
    return make_error(po_error_message(e));
  }
  return vm;
}

std::string env_var_name(std::string_view prefix, std::string_view flag) {
  std::string name(prefix);
  for (char c : flag) {
    name += (c == '.' || c == '-') ? '_'
                                   : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

Result<po::variables_map> parse_environment(const std::vector<std::string>& env,
                                            const po::options_description& desc,
                                            std::string_view prefix,
                                            const std::vector<std::string>& skip) {
  std::map<std::string, const po::option_description*> by_var;
  for (const auto& d : desc.options()) {
    const std::string& name = d->long_name();
    if (name.empty() || std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    by_var.emplace(env_var_name(prefix, name), d.get());
  }
  po::variables_map vm;
  for (const std::string& entry : env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string var = entry.substr(0, eq);
    const auto it = by_var.find(var);
    if (it == by_var.end()) continue;
    const std::string value(trim(std::string_view(entry).substr(eq + 1)));
    if (value.empty()) continue;  // as OTEL_* variables: empty is unset

    const po::option_description& d = *it->second;
    po::option opt;
    opt.string_key = d.long_name();
    opt.original_tokens = {var};
    if (d.semantic()->max_tokens() == 0) {  // a switch
      std::string v = value;
      std::transform(v.begin(), v.end(), v.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (v == "false" || v == "0" || v == "no") continue;
      if (v != "true" && v != "1" && v != "yes") {
        return make_error(var + ": expected true or false (the switch --" + d.long_name() +
                          "); fix or unset the variable");
      }
    } else if (d.semantic()->is_composing() || d.semantic()->max_tokens() > 1) {
      size_t start = 0;
      while (start <= value.size()) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos) comma = value.size();
        const std::string item(trim(std::string_view(value).substr(start, comma - start)));
        if (!item.empty()) opt.value.push_back(item);
        start = comma + 1;
      }
      if (opt.value.empty()) continue;
    } else {
      opt.value = {value};
    }
    po::parsed_options parsed(&desc, po::command_line_style::allow_long);
    parsed.options.push_back(std::move(opt));
    try {
      po::store(parsed, vm);
    } catch (const po::error& e) {
      return make_error(var + ": " + po_error_message(e) + "; fix or unset the variable");
    }
  }
  return vm;
}

void LayeredFlags::add(po::variables_map vm, std::string env_prefix) {
  layers_.push_back({std::move(vm), std::move(env_prefix), {}, {}});
}

void LayeredFlags::add_file(po::variables_map vm, std::string file,
                            std::map<std::string, int> lines) {
  layers_.push_back({std::move(vm), {}, std::move(file), std::move(lines)});
}

std::string LayeredFlags::source(size_t i, const std::string& name) const {
  if (!layers_[i].file.empty()) {
    auto it = layers_[i].lines.find(name);
    return layers_[i].file + (it != layers_[i].lines.end() ? ":" + std::to_string(it->second) : "") +
           ": " + name;
  }
  const std::string& prefix = layers_[i].env_prefix;
  return prefix.empty() ? "--" + name : env_var_name(prefix, name);
}

const po::variable_value* LayeredFlags::find(const std::string& name, std::string* source) const {
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto it = layers_[i].vm.find(name);
    if (it == layers_[i].vm.end() || it->second.empty()) continue;
    if (source) *source = this->source(i, name);
    return &it->second;
  }
  return nullptr;
}

std::string LayeredFlags::relabel(const std::string& message, const std::string& name,
                                  const std::string& source) {
  const std::string flag = "--" + name;
  if (source == flag || !message.starts_with(flag)) return message;
  return source + message.substr(flag.size());
}

void add_help_flags(po::options_description& desc) {
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("version", "print the version, revision, build date, compiler and platform");
  // clang-format on
}

int usage_error(std::ostream& err, std::string_view command, std::string_view problem) {
  // The problem may quote what was typed (an argument holding a newline or ESC): one line still.
  err << "stallwatch " << command << ": " << escape_line(problem) << " (see `stallwatch " << command
      << " --help`)\n";
  return 2;
}

void add_log_flags(po::options_description& desc) {
  // clang-format off
  desc.add_options()
    ("log.level", po::value<std::string>()->value_name("LEVEL"),
     "debug, info, warn or error (default info)")
    ("log.format", po::value<std::string>()->value_name("FORMAT"),
     "logfmt or json, one line per message (default: plain `TIME level: message`)")
    ("verbose,v", "debug logging, including libbpf's (= --log.level=debug)");
  // clang-format on
}

Result<LogSettings> log_settings(const LayeredFlags& flags) {
  LogSettings s;
  bool have_level = false, have_format = false;
  for (size_t i = 0; i < flags.layers(); ++i) {
    const po::variables_map& vm = flags.layer(i);
    if (!have_level && (vm.count("log.level") || vm.count("verbose"))) {
      have_level = true;
      s.level = LogLevel::kDebug;
      if (vm.count("log.level")) {
        const std::string text = vm["log.level"].as<std::string>();
        auto level = parse_log_level(text);
        if (!level) {
          return make_error(LayeredFlags::relabel(level.error().message, "log.level",
                                                  flags.source(i, "log.level")));
        }
        if (vm.count("verbose") && *level != LogLevel::kDebug) {
          const std::string v = flags.source(i, "verbose");
          return make_error((v == "--verbose" ? "-v/--verbose" : v) + " means " +
                            flags.source(i, "log.level") + "=debug, not " + text +
                            "; drop one of them");
        }
        s.level = *level;
      }
    }
    if (!have_format && vm.count("log.format")) {
      have_format = true;
      auto format = parse_log_format(vm["log.format"].as<std::string>());
      if (!format) {
        return make_error(LayeredFlags::relabel(format.error().message, "log.format",
                                                flags.source(i, "log.format")));
      }
      s.format = *format;
    }
  }
  return s;
}

Result<LogSettings> log_settings(const po::variables_map& vm) {
  LayeredFlags flags;
  flags.add(vm);
  return log_settings(flags);
}

Result<std::chrono::nanoseconds> read_timeout(const std::string& text, std::string_view flag) {
  if (text == "0") return std::chrono::nanoseconds(0);
  auto d = parse_duration(text);
  if (!d) return make_error(std::string(flag) + ": " + d.error().message);
  if (d->count() != 0 && (*d < std::chrono::milliseconds(100) || *d > std::chrono::hours(24))) {
    return make_error(std::string(flag) + " " + text +
                      " is out of range: use 100ms to 24h, or 0 for no limit");
  }
  return *d;
}

Result<int> read_pid(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long pid = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || pid < 1 || pid > 4194304) {
    return make_error("--pid '" + text + "' is not a process id (1 to 4194304)");
  }
  return static_cast<int>(pid);
}

}  // namespace stallwatch::cli
