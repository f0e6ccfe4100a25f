#include "cli/mcp_query.h"

#include <algorithm>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <utility>
#include <vector>

#include "cli/query.h"
#include "common/json.h"

namespace stallwatch::cli {
namespace {

// Receives query_main's JSON output ("[", then one row object per line, "]") and keeps rows
// within the budget. Each string is cut while it streams in, so a 10 MB hex cell is never
// held whole here; once the budget is spent the stream fails, which stops query_main's loop.
class RowSink : public std::streambuf {
 public:
  explicit RowSink(const QueryLimits& limits) : limits_(limits) {}

  Json& rows() { return rows_; }
  bool stopped() const { return stopped_; }
  size_t cells_cut() const { return cells_cut_; }
  size_t unreadable() const { return unreadable_; }

 protected:
  int_type overflow(int_type ch) override {
    if (stopped_) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) put(traits_type::to_char_type(ch));
    return stopped_ ? traits_type::eof() : traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; i++) {
      if (stopped_) return i;
      put(s[i]);
    }
    return n;
  }

 private:
  size_t left() const { return limits_.total - std::min(used_, limits_.total); }

  void put(char c) {
    if (!in_string_) {
      if (c == '\n') return end_line();
      line_ += c;
      if (c == '"') {
        in_string_ = true;
        escape_ = 0;
        kept_ = dropped_ = 0;
        // A string may not outgrow the cell limit nor what is left of the whole budget.
        cap_ = std::min(limits_.cell, left() > line_.size() ? left() - line_.size() : 0);
      }
      return;
    }
    const auto u = static_cast<unsigned char>(c);
    if (escape_ == 0 && c == '"') {
      if (dropped_ > 0) {
        line_ += " \xe2\x80\xa6[" + std::to_string(dropped_) + " more bytes cut]";
        ++cells_cut_;
      }
      line_ += c;
      in_string_ = false;
      return;
    }
    // Cut only where a character starts: never inside an escape or a UTF-8 sequence.
    if (escape_ == 0 && (u & 0xc0) != 0x80 && dropped_ == 0 && kept_ >= cap_)
      dropped_ = 1;
    else if (dropped_ > 0)
      ++dropped_;
    if (dropped_ == 0) {
      line_ += c;
      ++kept_;
    }
    if (escape_ == 0) {
      if (c == '\\') escape_ = -1;
    } else if (escape_ == -1) {
      escape_ = c == 'u' ? 4 : 0;
    } else {
      --escape_;
    }
  }

  void end_line() {
    std::string_view line(line_);
    if (!line.empty() && line.front() == '{') {
      if (line.back() == ',') line.remove_suffix(1);
      if (line.size() > left()) {
        stopped_ = true;  // this row would pass the budget: keep none of it, read no more
      } else {
        Json row = Json::parse(line.begin(), line.end(), nullptr, false);
        if (row.is_discarded()) {
          ++unreadable_;
        } else {
          rows_.push_back(std::move(row));
          used_ += line.size() + 1;
        }
      }
    }
    line_.clear();
  }

  QueryLimits limits_;
  Json rows_ = Json::array();
  std::string line_;
  bool in_string_ = false;
  int escape_ = 0;  // 0: none; -1: after a backslash; n > 0: hex digits of \uXXXX left
  size_t cap_ = 0, kept_ = 0, dropped_ = 0;
  size_t used_ = 0;
  bool stopped_ = false;
  size_t cells_cut_ = 0;
  size_t unreadable_ = 0;
};

std::string size_text(size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
                             : std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

ToolOutput query_tool(const std::string& db, const std::string& sql, std::uint64_t max_rows,
                      const QueryLimits& limits) {
  RowSink sink(limits);
  std::ostream rows_out(&sink);
  std::ostringstream errs;
  const int rc = query_main({"--db", db, "--format", "json", "--timeout", "30s", "--max-rows",
                             std::to_string(max_rows), sql},
                            rows_out, errs);
  std::string diag = errs.str();
  const std::string prefix = "stallwatch query: ";
  for (size_t p; (p = diag.find(prefix)) != std::string::npos;) diag.erase(p, prefix.size());
  ToolOutput out;
  if (rc != 0 && !sink.stopped()) {
    out.text = diag.empty() ? "the statement failed" : diag;
    out.is_error = true;
    return out;
  }
  std::vector<std::string> why;
  if (diag.find("--max-rows") != std::string::npos) {
    why.push_back("max_rows " + std::to_string(max_rows) + " reached: more rows were left out");
  }
  if (sink.stopped()) {
    why.push_back("the rows reached " + size_text(limits.total) +
                  ": later rows were left out; select fewer columns or rows, or substr()/length() "
                  "of large values");
  }
  if (sink.cells_cut() > 0) {
    why.push_back(std::to_string(sink.cells_cut()) + " cells longer than " +
                  size_text(limits.cell) + " were cut");
  }
  if (sink.unreadable() > 0) {
    why.push_back(std::to_string(sink.unreadable()) +
                  " rows could not be read back and were left out");
  }
  Json& rows = sink.rows();
  out.text = "[";
  for (size_t i = 0; i < rows.size(); i++) out.text += (i ? ",\n" : "\n") + dump_json(rows[i]);
  out.text += rows.empty() ? "]\n" : "\n]\n";
  out.structured = Json{{"rows", std::move(rows)}, {"truncated", !why.empty()}};
  if (!why.empty()) {
    std::string reason;
    for (const auto& w : why) reason += (reason.empty() ? "" : "; ") + w;
    out.structured["truncated_reason"] = reason;
    out.text += "[truncated: " + reason + "]\n";
  }
  return out;
}

}  // namespace stallwatch::cli
