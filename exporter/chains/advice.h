// The Fix of a chain, built from typed pieces so that no rule can paste a host string into a
// command (issue #35: a cgroup named `x;echo${IFS}INJECTED;#` ran when its Fix line was pasted).
// A line of advice is one of:
//   - a shell command (Command): our own words are Literals, checked at compile time to hold
//     only plain characters; every word from the host (PIDs, cgroup paths, unit, pod and device
//     names) enters through arg(), which makes it exactly one shell word (quoted when needed,
//     $'...' when it holds control bytes), so the line stays one line and bash reads back the
//     bytes intended;
//   - a snippet of code or configuration (Python, YAML, an environment template): a Literal
//     only, so it can carry no host word at all;
//   - a comment, or the "why" of a line: made one printable line there (control bytes and
//     hostile code points escaped as escape_name does).
// Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stallwatch::chains {

// Text written in our source. The constructor is consteval: a runtime string (anything read
// from the host) cannot become a Literal, and a Literal is checked while compiling.
class Literal {
 public:
  template <std::size_t N>
  consteval Literal(const char (&s)[N]) : text_(s, N - 1) {  // NOLINT: implicit on purpose
    for (char c : text_) {
      if (c == '\n' || c == '\r') throw "a Literal is one line";  // fails the build
    }
  }
  std::string_view text() const { return text_; }

 private:
  std::string_view text_;
};

// Our own words of a command: plain characters and single spaces between words; no quote, no
// operator, no expansion. Checked at compile time.
class Words {
 public:
  template <std::size_t N>
  consteval Words(const char (&s)[N]) : text_(s, N - 1) {  // NOLINT: implicit on purpose
    if (text_.empty()) throw "empty words";
    for (char c : text_) {
      const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == ' ' || c == '_' || c == '@' ||
                         c == '%' || c == '+' || c == '=' || c == ':' || c == ',' || c == '.' ||
                         c == '/' || c == '-';
      if (!plain) throw "Words hold plain characters only: use arg() for anything else";
    }
  }
  std::string_view text() const { return text_; }

 private:
  std::string_view text_;
};

// A shell command line: simple commands joined by `;` or `|`, each optionally writing to a file.
class Command {
 public:
  explicit Command(Words program);
  Command& words(Words more);             // more of our own plain words
  Command& arg(std::string_view word);    // one word, from anywhere: quoted as it needs
  Command& number(std::int64_t n);        // a PID, a CPU, a count
  Command& placeholder(Words what);       // '<what>': a person fills it in
  Command& to_file(std::string_view path);  // "> PATH" (quoted)
  Command& then(const Command& next);     // "THIS; NEXT"
  Command& pipe(const Command& next);     // "THIS | NEXT"

  // The line as shown and pasted.
  std::string text() const;
  // Per simple command, its words as bash should read them (a redirection adds ">" and its
  // target), and the same words as written in text(). The tests have bash read the written
  // words back and compare.
  std::vector<std::vector<std::string>> words_intended() const;
  std::vector<std::vector<std::string>> words_written() const;

 private:
  struct Simple {
    std::vector<std::string> words;    // as intended (unquoted)
    std::vector<std::string> written;  // each as written (quoted where needed)
    std::string redirect;              // target path, "" for none
    char joiner = 0;                   // ';' or '|' before the next, 0 for the last
  };
  std::vector<Simple> parts_;
};

// The lines of a chain's Fix. text() is what Chain::recommendation holds.
class Advice {
 public:
  void command(const Command& c, std::string_view why);
  void code(Literal snippet, std::string_view why);
  void note(std::string_view text);  // "# TEXT": escaped, one line
  std::string text() const { return text_; }
  const std::vector<Command>& commands() const { return commands_; }

 private:
  std::string text_;
  std::vector<Command> commands_;
};

}  // namespace stallwatch::chains
