// Unit tier: `stallwatch mcp`'s message handling (cli/mcp_server.h, cli/jsonrpc.h) on its own:
// malformed and hostile messages get the JSON-RPC error they should and never a crash (the
// audit's "jsonrpc": 2, null and 50,000-deep params each get exactly one error and the next
// request is still answered), notifications and responses get no reply, the version is
// negotiated, an unreadable database is a tool error (isError), not a protocol one, and the
// query tool's result stays within its budget on a real store of large blobs. The e2e tier
// drives it with the official SDK client.
#include "cli/mcp.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "cli/mcp_query.h"
#include "common/json.h"
#include "store/schema.h"
#include "store/sqlite.h"

namespace stallwatch::cli {
namespace {

constexpr std::int64_t kNow = 1795183391LL * 1000000000LL;

Json reply(McpServer& s, const std::string& message) {
  auto r = s.handle(message, kNow);
  EXPECT_TRUE(r.has_value()) << message;
  return r ? Json::parse(*r) : Json();
}

McpServer server(const std::string& db = "/nonexistent/stallwatch-mcp-test.db") {
  McpOptions o;
  o.db = db;
  return McpServer(store_tools(o));
}

std::string request(int id, const std::string& method, const std::string& params) {
  return R"({"jsonrpc":"2.0","id":)" + std::to_string(id) + R"(,"method":")" + method +
         R"(","params":)" + params + "}";
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

// Each message of the audit (and its neighbours) is well-formed JSON of the wrong shape: each
// gets exactly one error reply, with the code JSON-RPC gives it, and the server still answers
// the next request.
TEST(McpTest, WronglyTypedMessagesGetOneErrorAndServingGoesOn) {
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  const std::string deep_params = R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":)" +
                                  deep + "}}";
  ASSERT_LT(deep_params.size(), kMaxMcpMessage);
  const std::pair<std::string, int> hostile[] = {
      {R"({"jsonrpc":2,"id":1,"method":"ping"})", -32600},
      {R"({"jsonrpc":null,"id":1,"method":"ping"})", -32600},
      {R"({"jsonrpc":["2.0"],"id":1,"method":"ping"})", -32600},
      {"null", -32600},
      {"true", -32600},
      {R"("2.0")", -32600},
      {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", -32600},
      {R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})", -32600},
      {R"({"jsonrpc":"2.0","id":{},"method":"ping"})", -32600},
      {R"({"jsonrpc":"2.0","id":[1],"method":"ping"})", -32600},
      {R"({"jsonrpc":"2.0","id":1,"method":5})", -32600},
      {R"({"jsonrpc":"2.0","id":1,"method":null})", -32600},
      {R"({"jsonrpc":"2.0","id":1,"method":{"x":1}})", -32600},
      {R"({"jsonrpc":"2.0","id":1,"method":"ping","params":"x"})", -32602},
      {R"({"jsonrpc":"2.0","id":1,"method":"ping","params":null})", -32602},
      {request(1, "initialize", R"({"protocolVersion":7})"), 0},  // ignored: the newest
      {request(1, "initialize", R"({"protocolVersion":null,"capabilities":"x"})"), 0},
      {request(1, "tools/call", R"({"name":5})"), -32602},
      {request(1, "tools/call", R"({"name":null})"), -32602},
      {request(1, "tools/call", R"({"name":["query"]})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":null})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":[]})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":{"sql":5}})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":{"sql":null}})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":{"sql":"SELECT 1","max_rows":"5"}})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":{"sql":"SELECT 1","max_rows":1.5}})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":{"sql":"SELECT 1","max_rows":18446744073709551615}})"), -32602},
      {request(1, "tools/call", R"({"name":"query","arguments":{"sql":"SELECT 1","max_rows":-1}})"), -32602},
      {request(1, "tools/call", R"({"name":"chains","arguments":{"state":1}})"), -32602},
      {request(1, "tools/call", R"({"name":"chains","arguments":{"state":"maybe"}})"), -32602},
      {request(1, "tools/call", R"({"name":"chains","arguments":{"limit":true}})"), -32602},
      {request(1, "tools/call", R"({"name":"explain","arguments":{"per_process":"yes"}})"), -32602},
      {request(1, "tools/call", R"({"name":"explain","arguments":{"since":{}}})"), -32602},
      {request(1, "tools/call", R"({"name":"explain","arguments":{"since":"soon"}})"), -32602},
      {request(1, "tools/call", R"({"name":"sites","arguments":{"since":"-1h"}})"), -32602},
      {request(1, "tools/call", R"({"name":"sites","arguments":{"limit":[]}})"), -32602},
      {deep_params, -32600},
      {std::string(100000, '{'), -32600},
      {"[" + std::string(200, '{') + "\"", -32600},
  };
  McpServer s = server();
  for (const auto& [message, code] : hostile) {
    std::istringstream in(message + "\n" + R"({"jsonrpc":"2.0","id":"next","method":"ping"})" + "\n");
    std::ostringstream out;
    serve_mcp(s, in, out);
    std::istringstream lines(out.str());
    std::string first, second, extra;
    ASSERT_TRUE(std::getline(lines, first)) << message.substr(0, 200);
    ASSERT_TRUE(std::getline(lines, second)) << message.substr(0, 200);
    EXPECT_FALSE(std::getline(lines, extra)) << message.substr(0, 200);
    const Json r = Json::parse(first);
    if (code == 0) {
      EXPECT_TRUE(r.contains("result")) << message << " -> " << first;
    } else {
      EXPECT_EQ(r["error"]["code"], code) << message.substr(0, 200) << " -> " << first;
    }
    EXPECT_EQ(second, R"({"jsonrpc":"2.0","id":"next","result":{}})") << message.substr(0, 200);
  }
}

TEST(McpTest, NestingIsLimitedOutsideStringsOnly) {
  McpServer s = server();
  // 64 levels of arguments are fine (the tool refuses the unknown argument, not the nesting)...
  std::string ok_depth = std::string(60, '[') + std::string(60, ']');
  EXPECT_EQ(reply(s, request(1, "tools/call", R"({"name":"check","arguments":{"x":)" + ok_depth + "}}"))
                ["error"]["message"],
            "unknown argument 'x'");
  // ...and brackets inside strings are text, not nesting.
  Json r = reply(s, request(2, "tools/call", R"({"name":"query","arguments":{"sql":")" +
                                                 std::string(1000, '[') + R"("}})"));
  EXPECT_TRUE(r.contains("result")) << r.dump().substr(0, 300);
  r = reply(s, R"({"jsonrpc":"2.0","id":"\"[[[[","method":"ping"})");
  EXPECT_EQ(r["id"], "\"[[[[");
  // One level more than the limit is refused.
  const std::string deeper = std::string(65, '[') + std::string(65, ']');
  EXPECT_EQ(reply(s, request(3, "ping", R"({"x":)" + deeper + "}"))["error"]["code"], -32600);
}

TEST(McpTest, NotificationsNeverGetAReplyEvenMalformed) {
  McpServer s = server();
  EXPECT_FALSE(s.handle(R"({"jsonrpc":2,"method":"notifications/initialized"})", kNow));
  EXPECT_FALSE(s.handle(R"({"jsonrpc":"2.0","method":5})", kNow));
  EXPECT_FALSE(s.handle(R"({"jsonrpc":"2.0","method":"x","params":"y"})", kNow));
}

// A real store with 20 rows of 2 MB blobs: the query tool keeps at most 1 MiB of rows, cuts
// each cell at 64 KiB, and says the result was truncated and why.
class McpQueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "stallwatch-mcp-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    db_ = dir_ + "/sw.db";
    auto db = store::open_db(db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(store::migrate(db->get()).ok());
    ASSERT_TRUE(store::exec(db->get(),
                            "CREATE TABLE big(id INTEGER, data BLOB, note TEXT);"
                            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                            "WHERE i < 20) INSERT INTO big SELECT i, zeroblob(2000000), "
                            "'row ' || i FROM n")
                    .ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_, db_;
};

TEST_F(McpQueryTest, LargeBlobsAreCutAndTheWholeResultBounded) {
  McpServer s = server(db_);
  reply(s, request(1, "initialize", R"({"protocolVersion":"2025-06-18"})"));
  const std::string r = *s.handle(
      request(2, "tools/call", R"({"name":"query","arguments":{"sql":"SELECT * FROM big","max_rows":100}})"),
      kNow);
  // 20 rows of 4 MB of hex each would be 80 MB; the reply holds at most the 1 MiB of rows,
  // the 256 KiB text and their JSON escaping.
  EXPECT_LT(r.size(), 2u << 20);
  const Json j = Json::parse(r);
  const Json& sc = j["result"]["structuredContent"];
  EXPECT_EQ(sc["truncated"], true);
  const std::string why = sc["truncated_reason"].get<std::string>();
  EXPECT_NE(why.find("reached 1 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("longer than 64 KiB were cut"), std::string::npos) << why;
  ASSERT_GE(sc["rows"].size(), 1u);
  EXPECT_LT(sc["rows"].size(), 20u);
  const Json& first = sc["rows"][0];
  EXPECT_EQ(first["id"], 1);
  EXPECT_EQ(first["note"], "row 1");
  const std::string cell = first["data"].get<std::string>();
  EXPECT_LE(cell.size(), (64u << 10) + 40);
  EXPECT_EQ(cell.substr(0, 8), "00000000");
  EXPECT_NE(cell.find("[3934464 more bytes cut]"), std::string::npos) << cell.substr(65500);
  EXPECT_EQ(j["result"].value("isError", false), false);
}

TEST_F(McpQueryTest, BlobsMadeByTheStatementAreBoundedToo) {
  // The audit's reproduction: 100 rows of 5 MB blobs, here from randomblob() over the store.
  const ToolOutput out = query_tool(
      db_,
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) "
      "SELECT i, randomblob(5000000) AS b FROM n",
      10000);
  EXPECT_FALSE(out.is_error) << out.text;
  EXPECT_LT(dump_json(out.structured).size(), (1u << 20) + 4096);
  EXPECT_EQ(out.structured["truncated"], true);
  EXPECT_LT(out.structured["rows"].size(), 100u);
}

TEST_F(McpQueryTest, SmallResultsAreWholeAndMaxRowsIsReported) {
  QueryLimits small;
  small.total = 300;
  small.cell = 8;
  ToolOutput out = query_tool(db_, "SELECT id, note FROM big ORDER BY id", 3);
  EXPECT_FALSE(out.is_error) << out.text;
  EXPECT_EQ(dump_json(out.structured),
            R"({"rows":[{"id":1,"note":"row 1"},{"id":2,"note":"row 2"},{"id":3,"note":"row 3"}],)"
            R"("truncated":true,"truncated_reason":"max_rows 3 reached: more rows were left out"})");
  out = query_tool(db_, "SELECT id, note FROM big WHERE id <= 2 ORDER BY id", 10);
  EXPECT_EQ(dump_json(out.structured),
            R"({"rows":[{"id":1,"note":"row 1"},{"id":2,"note":"row 2"}],"truncated":false})");
  EXPECT_EQ(out.text, "[\n{\"id\":1,\"note\":\"row 1\"},\n{\"id\":2,\"note\":\"row 2\"}\n]\n");
  // A cut never splits a UTF-8 character or an escape.
  out = query_tool(db_, "SELECT 'abcdefg\xc3\xa9\xc3\xa9\xc3\xa9' AS a, 'abcdef\"\\\\\"x\"' AS b", 10, small);
  EXPECT_EQ(out.structured["rows"][0]["a"], "abcdefg\xc3\xa9 \xe2\x80\xa6[4 more bytes cut]");
  EXPECT_EQ(out.structured["rows"][0]["b"], "abcdef\" \xe2\x80\xa6[9 more bytes cut]");
  // A refused statement is still a tool error.
  out = query_tool(db_, "DELETE FROM big", 10);
  EXPECT_TRUE(out.is_error);
}

}  // namespace
}  // namespace stallwatch::cli
