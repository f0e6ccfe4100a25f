// Renderers of `stallwatch query` results (query.h): table, CSV and JSON values.
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

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

std::string render_table(const std::vector<std::string>& names,
                         const std::vector<std::vector<QueryCell>>& rows) {
  std::string out;
  const size_t cols = names.size();
  std::vector<size_t> width(cols);
  std::vector<bool> numeric(cols, false);
  std::vector<std::vector<std::string>> texts;
  for (size_t c = 0; c < cols; c++) width[c] = display_width(names[c]);
  for (size_t c = 0; c < cols; c++) {
    bool any = false, all = true;
    for (const auto& row : rows) {
      if (row[c].type == SQLITE_NULL) continue;
      any = true;
      all = all && (row[c].type == SQLITE_INTEGER || row[c].type == SQLITE_FLOAT);
    }
    numeric[c] = any && all;
  }
  for (const auto& row : rows) {
    std::vector<std::string> t;
    for (size_t c = 0; c < cols; c++) {
      t.push_back(table_text(row[c]));
      width[c] = std::max(width[c], display_width(t.back()));
    }
    texts.push_back(std::move(t));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cols; c++) {
      const size_t pad = width[c] - display_width(cells[c]);
      if (c > 0) s += "  ";
      if (numeric[c]) s.append(pad, ' ');
      s += cells[c];
      if (!numeric[c] && c + 1 < cols) s.append(pad, ' ');
    }
    out += s + "\n";
  };
  if (cols > 0) {
    line(names);
    std::vector<std::string> rules;
    for (size_t c = 0; c < cols; c++) rules.emplace_back(width[c], '-');
    line(rules);
    for (const auto& t : texts) line(t);
  }
  out += std::to_string(rows.size()) + (rows.size() == 1 ? " row\n" : " rows\n");
  return out;
}

}  // namespace stallwatch::cli
