// Small string helpers shared by the /proc parsers and the OTLP configuration and delivery.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stallwatch {

// Space-separated fields of a line (runs of spaces separate; no empty fields).
std::vector<std::string_view> split_fields(std::string_view line);

// What isspace() accepts in the C locale.
inline constexpr std::string_view kAsciiWhitespace = " \t\n\v\f\r";

// `s` without the leading (trim_left), trailing (trim_right) or both (trim) characters that are
// in `chars`. A view into `s`: it lives as long as what `s` views.
std::string_view trim_left(std::string_view s, std::string_view chars = kAsciiWhitespace);
std::string_view trim_right(std::string_view s, std::string_view chars = kAsciiWhitespace);
std::string_view trim(std::string_view s, std::string_view chars = kAsciiWhitespace);

// Length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no overlongs, no
// surrogates, at most U+10FFFF), 0 when it does not start with one (ASCII included).
size_t utf8_sequence(std::string_view s);
bool is_valid_utf8(std::string_view s);
// `s` with each byte of an invalid UTF-8 sequence replaced by U+FFFD. Prometheus rejects a
// whole scrape with one invalid label value, and protobuf strings must be UTF-8: every label
// value and OTLP string from the host (cgroup directory names, comms) goes through this.
std::string to_valid_utf8(std::string_view s);

// Code points that change what a terminal shows without being seen themselves: C1 controls
// (U+0080..U+009F; U+009B is CSI, as ESC [ is), bidi embeddings, overrides, isolates and marks
// (a name that reads "txt.exe" backwards), and the Unicode line and paragraph separators.
bool is_hostile_code_point(std::uint32_t cp);

// A name from the host (a process's comm, a thread's name, a unit) made safe to show: one line
// of printable, valid UTF-8. Control characters become \n, \t or \xNN, a backslash \\, each
// byte of an invalid UTF-8 sequence \xNN, and each hostile code point above \uXXXX; everything
// else is kept. Any local user can
// name a process `x\nsh /tmp/p #` or put ESC sequences in it: what is shown to a person, logged
// or stored goes through this first.
std::string escape_name(std::string_view s);

// escape_name's treatment, but a backslash kept as is: one printable line from text that may
// hold names already escaped where they were read (comms are), without escaping them twice.
// Every log line's message and every host word in a line of CLI output goes through this.
std::string escape_line(std::string_view s);
// The same for text of several lines (a rendered report): a newline is kept too. A name must
// still be escaped with escape_line where it enters the text, or it could start a line of its own.
std::string escape_text(std::string_view s);

// `s` as one shell word: single-quoted, a ' inside written '\''; where `s` holds a control
// byte, invalid UTF-8 or a hostile code point, ANSI-C quoted instead ($'...' with \xNN), so the
// word stays on one printable line and bash still reads back exactly the bytes of `s`. For
// names that must appear in a command a person is told to paste (systemctl set-property 'UNIT').
std::string shell_quote(std::string_view s);
// The same, but left bare when every byte is plain ([A-Za-z0-9_@%+=:,./-]): "4242", "0-3".
std::string shell_word(std::string_view s);

}  // namespace stallwatch
