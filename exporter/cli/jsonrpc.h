// JSON-RPC 2.0 framing for `stallwatch mcp` (cli/mcp_server.h): one message (a line of the
// stdio transport) in, a checked request or the error reply out. Whoever can write to the
// server's stdin chooses every byte, so nothing here trusts a type: each member is read through
// the typed accessors below, which answer "absent" for a member of the wrong type instead of
// throwing (nlohmann::json's get<>() and value() throw type_error, and an escaped exception
// ends the process). Nesting is limited before parsing: nlohmann's parser keeps its own stack,
// but destroying and dumping a value recurse once per level, so 50,000 brackets in a 100 KB
// line would overflow the thread's stack.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"

namespace stallwatch::cli::jsonrpc {

// JSON-RPC 2.0 error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

// A message longer than this is refused (-32700) without being parsed.
inline constexpr size_t kMaxMessage = 4u << 20;
// Arrays and objects nested deeper than this are refused (-32600) without being parsed. MCP's
// own messages nest about 6 deep; tool arguments a few more.
inline constexpr size_t kMaxDepth = 64;

// True when no array or object in `text` is nested deeper than `limit` (brackets inside JSON
// strings do not count). Linear, no allocation; meant for text that is then parsed.
bool nesting_within(std::string_view text, size_t limit);

// The member `key` of `object` when `object` is an object holding it with that type, else
// nullptr / nullopt. integer() accepts any JSON integer that fits int64 (nlohmann keeps
// non-negative ones as unsigned).
const Json* member(const Json& object, std::string_view key);
const std::string* string_member(const Json& object, std::string_view key);
const Json* object_member(const Json& object, std::string_view key);
std::optional<bool> bool_member(const Json& object, std::string_view key);
std::optional<std::int64_t> integer_member(const Json& object, std::string_view key);
std::optional<std::int64_t> as_integer(const Json& value);

Json error_reply(const Json& id, int code, const std::string& message);

struct Request {
  Json id;  // a string or an integer
  std::string method;
  Json params = Json::object();  // always an object
};

// What one message is: a request to answer, or the reply to send at once (an error), or
// neither (a response to us, or a notification: nothing to do).
struct Reading {
  std::optional<Request> request;
  std::optional<std::string> reply;
};

// Checks size, nesting, JSON syntax and the JSON-RPC 2.0 shape of `message`. A notification
// (no id) never gets a reply, even a malformed one, as JSON-RPC 2.0 says; a request with a
// usable id gets its error with that id, else with a null id.
Reading read_request(std::string_view message);

}  // namespace stallwatch::cli::jsonrpc
