#include "cli/jsonrpc.h"

#include <limits>
#include <utility>

namespace stallwatch::cli::jsonrpc {

bool nesting_within(std::string_view text, size_t limit) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;  // unbalanced text is the parser's to refuse
    }
  }
  return true;
}

const Json* member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

const std::string* string_member(const Json& object, std::string_view key) {
  const Json* v = member(object, key);
  return v && v->is_string() ? v->get_ptr<const std::string*>() : nullptr;
}

const Json* object_member(const Json& object, std::string_view key) {
  const Json* v = member(object, key);
  return v && v->is_object() ? v : nullptr;
}

std::optional<bool> bool_member(const Json& object, std::string_view key) {
  const Json* v = member(object, key);
  if (!v || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

std::optional<std::int64_t> as_integer(const Json& value) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<std::int64_t>();
  return std::nullopt;
}

std::optional<std::int64_t> integer_member(const Json& object, std::string_view key) {
  const Json* v = member(object, key);
  return v ? as_integer(*v) : std::nullopt;
}

Json error_reply(const Json& id, int code, const std::string& message) {
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

namespace {

Reading refuse(const Json& id, int code, const std::string& message) {
  return Reading{std::nullopt, dump_json(error_reply(id, code, message))};
}

}  // namespace

Reading read_request(std::string_view message) {
  if (message.size() > kMaxMessage)
    return refuse(nullptr, kParseError, "message larger than 4 MiB");
  if (!nesting_within(message, kMaxDepth)) {
    return refuse(nullptr, kInvalidRequest, "JSON nested deeper than 64 levels");
  }
  Json msg = Json::parse(message.begin(), message.end(), nullptr, false);
  if (msg.is_discarded()) return refuse(nullptr, kParseError, "not JSON");
  if (msg.is_array()) return refuse(nullptr, kInvalidRequest, "batches are not supported");
  if (!msg.is_object()) return refuse(nullptr, kInvalidRequest, "not an object");

  const Json* id = member(msg, "id");
  if (id && !id->is_string() && !as_integer(*id)) {
    // null is JSON-RPC's "id unknown", which MCP forbids in a request.
    return refuse(nullptr, kInvalidRequest, "id must be a string or an integer");
  }
  const Json reply_id = id ? *id : Json();
  if (!member(msg, "method")) return {};  // a response to us: we send no requests
  const std::string* version = string_member(msg, "jsonrpc");
  const std::string* method = string_member(msg, "method");
  if (!id) return {};  // notifications (initialized, cancelled) need nothing from us
  if (!version || *version != "2.0" || !method) {
    return refuse(reply_id, kInvalidRequest,
                  "not a JSON-RPC 2.0 request: needs \"jsonrpc\": \"2.0\" and a string method");
  }
  Request r{reply_id, *method, Json::object()};
  if (const Json* params = member(msg, "params")) {
    if (!params->is_object()) return refuse(reply_id, kInvalidParams, "params must be an object");
    r.params = std::move(msg["params"]);
  }
  return Reading{std::move(r), {}};
}

}  // namespace stallwatch::cli::jsonrpc
