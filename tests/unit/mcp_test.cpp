// Unit tier: `stallwatch mcp`'s message handling (cli/mcp.h) on its own: malformed and hostile
// messages get the JSON-RPC error they should and never a crash, notifications and responses get
// no reply, the version is negotiated, and an unreadable database is a tool error (isError),
// not a protocol one. The e2e tier drives it with the official SDK client.
#include "cli/mcp.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "common/json.h"

namespace stallwatch::cli {
namespace {

constexpr std::int64_t kNow = 1795183391LL * 1000000000LL;

Json reply(McpServer& s, const std::string& message) {
  auto r = s.handle(message, kNow);
  EXPECT_TRUE(r.has_value()) << message;
  return r ? Json::parse(*r) : Json();
}

McpServer server() {
  McpOptions o;
  o.db = "/nonexistent/stallwatch-mcp-test.db";
  return McpServer(o);
}

TEST(McpTest, MalformedMessagesGetTheirErrors) {
  McpServer s = server();
  EXPECT_EQ(reply(s, "{")["error"]["code"], -32700);
  EXPECT_EQ(reply(s, "[]")["error"]["code"], -32600);
  EXPECT_EQ(reply(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]")["error"]["code"], -32600);
  EXPECT_EQ(reply(s, "42")["error"]["code"], -32600);
  EXPECT_EQ(reply(s, R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})")["error"]["code"], -32600);
  EXPECT_EQ(reply(s, R"({"jsonrpc":"1.0","id":1,"method":"ping"})")["error"]["code"], -32600);
  EXPECT_EQ(reply(s, R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})")["error"]["code"],
            -32602);
  EXPECT_EQ(reply(s, R"({"jsonrpc":"2.0","id":"x","method":"nope"})")["error"]["code"], -32601);
  EXPECT_EQ(reply(s, R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}})")["error"]["code"],
            -32602);
  EXPECT_EQ(reply(s, R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"query","arguments":"x"}})")
                ["error"]["code"],
            -32602);
  // The id comes back as sent, string or number.
  EXPECT_EQ(reply(s, R"({"jsonrpc":"2.0","id":"abc","method":"ping"})")["id"], "abc");
  EXPECT_EQ(reply(s, R"({"jsonrpc":"2.0","id":7,"method":"ping"})")["id"], 7);
  // Too large: refused before parsing.
  EXPECT_EQ(reply(s, std::string(kMaxMcpMessage + 1, ' '))["error"]["code"], -32700);
}

TEST(McpTest, NotificationsAndResponsesGetNoReply) {
  McpServer s = server();
  EXPECT_FALSE(s.handle(R"({"jsonrpc":"2.0","method":"notifications/initialized"})", kNow));
  EXPECT_FALSE(s.handle(R"({"jsonrpc":"2.0","method":"tools/call","params":{"name":"query"}})", kNow));
  EXPECT_FALSE(s.handle(R"({"jsonrpc":"2.0","id":3,"result":{}})", kNow));
}

TEST(McpTest, VersionNegotiationAndStructuredContent) {
  McpServer s = server();
  EXPECT_EQ(s.version(), "");
  Json r = reply(s, R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}})");
  EXPECT_EQ(r["result"]["protocolVersion"], "2025-03-26");
  EXPECT_EQ(r["result"]["serverInfo"]["name"], "stallwatch");
  r = reply(s, R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"check","arguments":{}}})");
  EXPECT_FALSE(r["result"].contains("structuredContent")) << "2025-03-26 has none";
  r = reply(s, R"({"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})");
  r = reply(s, R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"check","arguments":{}}})");
  EXPECT_TRUE(r["result"]["structuredContent"].contains("checks")) << r.dump();
  r = reply(s, R"({"jsonrpc":"2.0","id":5,"method":"initialize","params":{}})");
  EXPECT_EQ(r["result"]["protocolVersion"], kMcpVersions[0]);
}

TEST(McpTest, AMissingDatabaseIsAToolErrorNotAProtocolOne) {
  McpServer s = server();
  for (const char* call : {R"({"name":"explain","arguments":{}})", R"({"name":"chains","arguments":{}})",
                           R"({"name":"sites","arguments":{}})",
                           R"({"name":"query","arguments":{"sql":"SELECT 1"}})"}) {
    Json r = reply(s, std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":)") + call + "}");
    ASSERT_TRUE(r.contains("result")) << r.dump();
    EXPECT_EQ(r["result"]["isError"], true) << call;
    EXPECT_NE(r["result"]["content"][0]["text"].get<std::string>().find("stallwatch-mcp-test.db"),
              std::string::npos)
        << r.dump();
  }
}

TEST(McpTest, ServeReadsLinesAndSkipsBlankOnes) {
  McpServer s = server();
  std::istringstream in("\n  \n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n"
                        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");  // no final newline
  std::ostringstream out;
  serve_mcp(s, in, out);
  EXPECT_EQ(out.str(),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n");
}

}  // namespace
}  // namespace stallwatch::cli
