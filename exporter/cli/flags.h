// What every subcommand's flag parsing shares, so each one parses the same way: Boost's
// Program_options with one command-line style, the exporters' logging flags, STALLWATCH_*
// environment variables and a layered lookup (command line > environment > config file).
// Each subcommand owns its options_description; this file owns none. Pure: the environment
// is passed in ("NAME=value" strings, as in environ). Thread-safety: reentrant.
#pragma once

#include <boost/program_options.hpp>
#include <chrono>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/result.h"

namespace stallwatch::cli {

namespace po = boost::program_options;

// --flag VALUE, --flag=VALUE, -h and `--` (the rest is positional); flags are spelled out in
// full (no abbreviations).
inline constexpr int kFlagStyle =
    po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

// The one line of a Boost error. Boost's error_with_option_name::what() fills its template's
// %placeholders% with the option's name and value in a loop that never ends when that text
// holds the placeholder itself (a config line or variable naming an option
// '%canonical_option%' hung the parser: fuzz_run_config); '%' in them becomes '?' first.
std::string po_error_message(const po::error& e);

// The command line into a variables_map. `positional` names where bare arguments go; without it
// a bare argument is an error naming it. A flag given twice: the last one wins (`last_wins`),
// else it is an error. Errors are one line (Boost's, e.g. "unrecognised option '--x'", "the
// required argument for option '--db' is missing").
Result<po::variables_map> parse_flags(
    const std::vector<std::string>& args, const po::options_description& desc,
    const po::positional_options_description* positional = nullptr, int style = kFlagStyle,
    bool last_wins = true);

// STALLWATCH_LOG_LEVEL for "log.level": `prefix`, then the long name in upper case with '.'
// and '-' as '_'.
std::string env_var_name(std::string_view prefix, std::string_view flag);

// The variables of `env` ("NAME=value") that name a long option of `desc` (env_var_name with
// `prefix`), except those in `skip`; other variables are ignored, and so is an empty value.
// A repeatable option takes a comma-separated list; a switch takes true/1/yes or false/0/no.
// An error names the variable (never its value, which may be a secret).
Result<po::variables_map> parse_environment(const std::vector<std::string>& env,
                                            const po::options_description& desc,
                                            std::string_view prefix,
                                            const std::vector<std::string>& skip = {});

// Variables maps in precedence order (first wins), each with how its values are named in
// errors: "--window" for the command line and a config file, "STALLWATCH_WINDOW" for the
// environment.
class LayeredFlags {
 public:
  // `env_prefix` empty: values are named --flag; else by env_var_name(env_prefix, flag).
  void add(po::variables_map vm, std::string env_prefix = "");
  // A config file's values: named FILE:LINE: name in messages (`lines`: each name's line).
  void add_file(po::variables_map vm, std::string file, std::map<std::string, int> lines);

  // The value from the first layer holding `name`, or nullptr; `source` gets its name.
  const po::variable_value* find(const std::string& name, std::string* source = nullptr) const;
  // `message` about `--name` (it starts with "--name"), with the flag replaced by `source`.
  static std::string relabel(const std::string& message, const std::string& name,
                             const std::string& source);

  size_t layers() const { return layers_.size(); }
  const po::variables_map& layer(size_t i) const { return layers_[i].vm; }
  std::string source(size_t i, const std::string& name) const;

 private:
  struct Layer {
    po::variables_map vm;
    std::string env_prefix;
    std::string file;  // a config file's path, when the layer is one
    std::map<std::string, int> lines;
  };
  std::vector<Layer> layers_;
};

// --timeout of the store readers (`query`, `explain`): a duration from 100ms to 24h, or 0 for
// none; the error names `flag` and the range.
inline constexpr std::chrono::seconds kDefaultReadTimeout{30};
Result<std::chrono::nanoseconds> read_timeout(const std::string& text, std::string_view flag);

// --pid of the store readers (`export`, `stacks`): 1 to 4194304 (PID_MAX_LIMIT).
Result<int> read_pid(const std::string& text);

// -h/--help and --version, which every command takes.
void add_help_flags(po::options_description& desc);

// A usage error, one line on `err` whatever the command:
//   stallwatch CMD: PROBLEM (see `stallwatch CMD --help`)
// Returns 2, the exit code of bad usage (and of bad configuration).
int usage_error(std::ostream& err, std::string_view command, std::string_view problem);

// --log.level, --log.format and -v/--verbose (an alias of --log.level=debug).
void add_log_flags(po::options_description& desc);
// The settings from the first layer that sets --log.level or -v, and the first that sets
// --log.format; defaults otherwise. Errors name the flag or variable and the choices.
Result<LogSettings> log_settings(const LayeredFlags& flags);
Result<LogSettings> log_settings(const po::variables_map& vm);

}  // namespace stallwatch::cli
