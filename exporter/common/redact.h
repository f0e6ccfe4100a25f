// Credentials kept out of log lines. The daemon is root on every node and its log is read by
// whoever reads the journal or the pod's logs: an API key echoed by an OTLP receiver, a bearer
// token in a Kubernetes error, a password in a URL must not reach it. Everything a remote
// server or a flag's URL contributes to a log line goes through these first.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace stallwatch {

// scheme://host[:port]/path of a URL: no user:password@ (everything up to the last '@' goes,
// even one in a path: better an odd line than a leaked password holding a raw '/'), no ?query
// or #fragment (either may carry a token), and escaped (common/strings.h escape_name).
std::string redact_url(std::string_view url);

// Whether an HTTP header or parameter name usually carries a credential: it holds key, token,
// secret, passw, auth (authorization), cookie, credential, signature or session, in any case.
bool looks_secret(std::string_view name);

// A remote server's text (an HTTP error body, a curl message) as one log-safe line: each
// occurrence of a value in `secrets` (the headers and token we sent) and of each word of one
// (the token of "Bearer <token>"), those of 4 bytes or more; the credential after Bearer/Basic; and
// the value of every secret-looking key (`key=...`,
// `"api_key": "..."`, `Authorization: ...`) become <redacted>; then escaped (no control, C1 or
// bidi characters) and cut to about `max` bytes with a note of the full size.
std::string redact_text(std::string_view text, const std::vector<std::string>& secrets = {},
                        size_t max = 512);

}  // namespace stallwatch
