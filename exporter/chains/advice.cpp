#include "chains/advice.h"

#include "common/strings.h"

namespace stallwatch::chains {

Command::Command(Words program) {
  parts_.emplace_back();
  words(program);
}

Command& Command::words(Words more) {
  Simple& s = parts_.back();
  std::string_view t = more.text();
  while (!t.empty()) {
    const size_t sp = t.find(' ');
    const std::string_view w = t.substr(0, sp);
    if (!w.empty()) {
      s.words.emplace_back(w);
      s.written.emplace_back(w);
    }
    if (sp == std::string_view::npos) break;
    t.remove_prefix(sp + 1);
  }
  return *this;
}

Command& Command::arg(std::string_view word) {
  Simple& s = parts_.back();
  s.words.emplace_back(word);
  s.written.push_back(shell_word(word));
  return *this;
}

Command& Command::number(std::int64_t n) { return arg(std::to_string(n)); }

Command& Command::placeholder(Words what) {
  return arg("<" + std::string(what.text()) + ">");
}

Command& Command::to_file(std::string_view path) {
  parts_.back().redirect = std::string(path);
  return *this;
}

Command& Command::then(const Command& next) {
  parts_.back().joiner = ';';
  parts_.insert(parts_.end(), next.parts_.begin(), next.parts_.end());
  return *this;
}

Command& Command::pipe(const Command& next) {
  parts_.back().joiner = '|';
  parts_.insert(parts_.end(), next.parts_.begin(), next.parts_.end());
  return *this;
}

std::string Command::text() const {
  std::string out;
  for (const Simple& s : parts_) {
    for (size_t i = 0; i < s.written.size(); ++i) out += (i ? " " : "") + s.written[i];
    if (!s.redirect.empty()) out += " > " + shell_word(s.redirect);
    if (s.joiner == ';') out += "; ";
    if (s.joiner == '|') out += " | ";
  }
  return out;
}

std::vector<std::vector<std::string>> Command::words_intended() const {
  std::vector<std::vector<std::string>> out;
  for (const Simple& s : parts_) {
    out.push_back(s.words);
    if (!s.redirect.empty()) {
      out.back().push_back(">");
      out.back().push_back(s.redirect);
    }
  }
  return out;
}

std::vector<std::vector<std::string>> Command::words_written() const {
  std::vector<std::vector<std::string>> out;
  for (const Simple& s : parts_) {
    out.push_back(s.written);
    if (!s.redirect.empty()) {
      out.back().push_back(">");
      out.back().push_back(shell_word(s.redirect));
    }
  }
  return out;
}

void Advice::command(const Command& c, std::string_view why) {
  text_ += c.text() + "   # " + escape_line(why) + "\n";
  commands_.push_back(c);
}

void Advice::code(Literal snippet, std::string_view why) {
  text_ += std::string(snippet.text()) + "   # " + escape_line(why) + "\n";
}

void Advice::note(std::string_view text) { text_ += "# " + escape_line(text) + "\n"; }

}  // namespace stallwatch::chains
