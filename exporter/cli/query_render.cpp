// Renderers of `stallwatch query` results (query.h): table, CSV and JSON values.
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "cli/query.h"
#include "common/json.h"

namespace stallwatch::cli {
namespace {

static_assert(QueryCell{}.type == SQLITE_NULL);

// One table cell on one line: control characters escaped (recommendations hold newlines).
std::string table_text(const QueryCell& c) {
  if (c.type == SQLITE_NULL) return "NULL";
  std::string out;
  for (unsigned char ch : c.text) {
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out;
}

// Columns on a terminal: UTF-8 code points (continuation bytes take no column).
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string format_real(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
  char buf[40];
  for (int precision = 15; precision <= 17; precision++) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string json_cell(const QueryCell& c) {
  switch (c.type) {
    case SQLITE_INTEGER:
      return c.text;
    case SQLITE_FLOAT:
      return (c.text == "NaN" || c.text.ends_with("Inf")) ? "null" : c.text;
    case SQLITE_NULL:
      return "null";
    default:
      return json_string(c.text);
  }
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

TableWriter::TableWriter(std::vector<std::string> names, std::ostream& out, size_t sample)
    : names_(std::move(names)), out_(out), sample_(std::max<size_t>(sample, 1)) {}

void TableWriter::add(const std::vector<QueryCell>& row) {
  count_++;
  if (!started_) {
    buffered_.push_back(row);
    if (buffered_.size() >= sample_) start();
    return;
  }
  write_row(row);
}

void TableWriter::start() {
  const size_t cols = names_.size();
  width_.assign(cols, 0);
  numeric_.assign(cols, false);
  for (size_t c = 0; c < cols; c++) width_[c] = display_width(names_[c]);
  for (size_t c = 0; c < cols; c++) {
    bool any = false, all = true;
    for (const auto& row : buffered_) {
      if (row[c].type == SQLITE_NULL) continue;
      any = true;
      all = all && (row[c].type == SQLITE_INTEGER || row[c].type == SQLITE_FLOAT);
    }
    numeric_[c] = any && all;
  }
  for (const auto& row : buffered_) {
    for (size_t c = 0; c < cols; c++) {
      width_[c] = std::max(width_[c], display_width(table_text(row[c])));
    }
  }
  started_ = true;
  if (cols > 0) {
    write_line(names_);
    std::vector<std::string> rules;
    for (size_t c = 0; c < cols; c++) rules.emplace_back(width_[c], '-');
    write_line(rules);
  }
  for (const auto& row : buffered_) write_row(row);
  buffered_.clear();
  buffered_.shrink_to_fit();
}

void TableWriter::write_row(const std::vector<QueryCell>& row) {
  std::vector<std::string> cells;
  cells.reserve(row.size());
  for (const auto& cell : row) cells.push_back(table_text(cell));
  write_line(cells);
}

void TableWriter::write_line(const std::vector<std::string>& cells) {
  std::string s;
  const size_t cols = names_.size();
  for (size_t c = 0; c < cols; c++) {
    // A cell wider than the sample's column (a row after the first `sample`) is not cut.
    const size_t w = display_width(cells[c]);
    const size_t pad = width_[c] > w ? width_[c] - w : 0;
    if (c > 0) s += "  ";
    if (numeric_[c]) s.append(pad, ' ');
    s += cells[c];
    if (!numeric_[c] && c + 1 < cols) s.append(pad, ' ');
  }
  out_ << s << "\n";
}

void TableWriter::finish() {
  if (!started_) start();
  out_ << count_ << (count_ == 1 ? " row\n" : " rows\n");
}

std::string render_table(const std::vector<std::string>& names,
                         const std::vector<std::vector<QueryCell>>& rows) {
  std::ostringstream out;
  TableWriter table(names, out, rows.size() + 1);
  for (const auto& row : rows) table.add(row);
  table.finish();
  return out.str();
}

}  // namespace stallwatch::cli
