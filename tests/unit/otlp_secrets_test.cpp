// Issue 35 row 13: OTLP credentials stay off the command line and out of the log.
// --otlp-headers-file (metrics/otlp/headers_file.h): good files, one clear error line for a
// malformed line (its number, never its value), refused owners and modes, and where its
// headers rank; the warning about a secret-looking --otlp-header on the command line; and the
// redaction (common/redact.h) every receiver or API server text goes through before a log line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "common/redact.h"
#include "metrics/otlp/config.h"
#include "metrics/otlp/headers_file.h"
#include "metrics/otlp/http_client.h"

namespace stallwatch::otlp {
namespace {

namespace fs = std::filesystem;

class HeadersFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sw-otlp-secrets-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

TEST(HeadersFileParse, NameValueLinesCommentsAndBlanks) {
  auto h = parse_headers_file(
      "# Datadog\n"
      "dd-api-key = 0123456789abcdef\r\n"
      "\n"
      "   # indented comment\n"
      "Authorization=Bearer a=b==\n"
      "x-empty=\n"
      "x-tab=\tv\tw",
      "--otlp-headers-file f");
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(*h, (Headers{{"dd-api-key", "0123456789abcdef"},
                         {"Authorization", "Bearer a=b=="},
                         {"x-empty", ""},
                         {"x-tab", "v\tw"}}));
  EXPECT_TRUE(parse_headers_file("", "f")->empty());
}

TEST(HeadersFileParse, AMalformedLineIsOneErrorNamingItsNumberNeverTheValue) {
  auto h = parse_headers_file("a=1\n\ndd-api-key 0123456789abcdef\n", "--otlp-headers-file /x");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().message,
            "--otlp-headers-file /x: line 3 is not name=value (one header a line, e.g. "
            "dd-api-key=<key>; # starts a comment)");
  h = parse_headers_file("=secretvalue\n", "f");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().message.find("secretvalue"), std::string::npos);
  h = parse_headers_file("bad name=secretvalue\n", "f");
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("line 1: the header name"), std::string::npos);
  EXPECT_EQ(h.error().message.find("secretvalue"), std::string::npos);
  h = parse_headers_file("x=secret\x01value\n", "f");  // header injection: refused
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("control character"), std::string::npos);
  EXPECT_EQ(h.error().message.find("secret"), std::string::npos);
  EXPECT_EQ(h.error().message.find('\n'), std::string::npos);
}

TEST(HeadersFileOwner, RootOrTheUserAndNotWritableByOthers) {
  struct stat st {};
  st.st_mode = S_IFREG | 0600;
  st.st_uid = 0;
  EXPECT_TRUE(check_headers_file_owner(st, "f", 1000));
  st.st_uid = 1000;
  EXPECT_TRUE(check_headers_file_owner(st, "f", 1000));
  st.st_mode = S_IFREG | 0644;  // readable is the deployer's call (secret volumes are 0644)
  EXPECT_TRUE(check_headers_file_owner(st, "f", 1000));
  st.st_uid = 1001;
  auto r = check_headers_file_owner(st, "--otlp-headers-file /f", 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "--otlp-headers-file /f is owned by uid 1001, not by root or this user (uid 0); it "
            "holds credentials: chown it to root (or the user stallwatch runs as)");
  st.st_uid = 0;
  for (mode_t m : {0620, 0602, 0666}) {
    st.st_mode = S_IFREG | m;
    r = check_headers_file_owner(st, "--otlp-headers-file /f", 0);
    ASSERT_FALSE(r) << m;
    EXPECT_NE(r.error().message.find("is writable by group or others (mode 0"), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("chmod 600"), std::string::npos);
  }
  st.st_mode = S_IFIFO | 0600;
  EXPECT_FALSE(check_headers_file_owner(st, "f", 0));
}

TEST_F(HeadersFile, ReadChecksTheFileItOpened) {
  const std::string good = write("good", "dd-api-key=k1\n");
  auto h = read_headers_file(good, "--otlp-headers-file");
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(*h, (Headers{{"dd-api-key", "k1"}}));
  // Through a link, as a Kubernetes secret volume presents it.
  fs::create_symlink(good, dir_ + "/link");
  EXPECT_TRUE(read_headers_file(dir_ + "/link", "--otlp-headers-file"));

  const std::string open_to_all = write("open", "dd-api-key=k1\n", 0666);
  h = read_headers_file(open_to_all, "--otlp-headers-file");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().message, "--otlp-headers-file " + open_to_all +
                                   " is writable by group or others (mode 0666); it holds "
                                   "credentials: chmod 600 it");
  h = read_headers_file(dir_ + "/missing", "--otlp-headers-file");
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("No such file or directory"), std::string::npos);
  EXPECT_FALSE(read_headers_file(dir_, "--otlp-headers-file")) << "a directory";
  const std::string big = write("big", std::string(kMaxHeadersFile + 1, '#'));
  EXPECT_NE(read_headers_file(big, "f").error().message.find("larger than 64 KiB"),
            std::string::npos);
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(read_headers_file(dir_ + "/fifo", "f")) << "refused, and no hang";
  if (::geteuid() == 0) {
    const std::string other = write("other", "dd-api-key=k1\n");
    ASSERT_EQ(::chown(other.c_str(), 12345, 12345), 0);
    h = read_headers_file(other, "--otlp-headers-file");
    ASSERT_FALSE(h);
    EXPECT_NE(h.error().message.find("is owned by uid 12345"), std::string::npos);
  }
}

Getenv env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST_F(HeadersFile, RanksWithItsLayerAndStaysOutOfDescribe) {
  PushFlags flags, file;
  ASSERT_TRUE(set_push_flag(flags, "otlp-endpoint", "https://intake.example"));
  ASSERT_TRUE(set_push_flag(flags, "otlp-headers-file",
                            write("flag", "dd-api-key=from-flag-file\nx-a=flag-file\n")));
  ASSERT_TRUE(set_push_flag(flags, "otlp-header", "x-a=flag"));
  file.headers_file = write("conf", "x-c=config-file\ndd-api-key=from-config-file\n");
  auto c = resolve_push_config(flags, file, env_of({{"OTEL_EXPORTER_OTLP_HEADERS", "x-c=env"}}),
                               "h", "1");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->delivery.headers,
            (Headers{{"x-c", "env"}, {"dd-api-key", "from-flag-file"}, {"x-a", "flag"}}));
  EXPECT_EQ(describe(*c).find("from-"), std::string::npos) << describe(*c);

  flags.headers_file = write("bad", "dd-api-key: from-flag-file\n");
  c = resolve_push_config(flags, file, env_of({}), "h", "1");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message.find("from-flag-file"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("--otlp-headers-file " + dir_ + "/bad: line 1"),
            std::string::npos)
      << c.error().message;
}

TEST(OtlpSecretFlags, HelpNeverSuggestsAKeyOnTheCommandLine) {
  bool file_flag = false;
  for (const auto& f : push_flag_infos()) {
    const std::string name = f.name, help = f.help;
    if (name == "otlp-header") {
      EXPECT_EQ(help.find("dd-api-key"), std::string::npos) << help;
      EXPECT_NE(help.find("--otlp-headers-file"), std::string::npos) << help;
    }
    file_flag = file_flag || name == "otlp-headers-file";
  }
  EXPECT_TRUE(file_flag);
  PushFlags f;
  f.endpoint = "http://a:4318";
  f.headers = {"no-equals-sign"};
  auto c = resolve_push_config(f, env_of({}), "h", "1");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message.find("dd-api-key="), std::string::npos) << c.error().message;
}

TEST(OtlpSecretFlags, SecretLookingHeadersOnTheCommandLineAreFound) {
  const std::vector<std::string> headers = {"DD-API-KEY=k1", "x-team=ml", "Authorization=Bearer t",
                                            "x-env-token=from-env"};
  const std::vector<std::string> argv = {"stallwatch",
                                         "run",
                                         "--otlp-header",
                                         "DD-API-KEY=k1",
                                         "--otlp-header=Authorization=Bearer t",
                                         "--otlp-header",
                                         "x-team=ml"};
  EXPECT_EQ(secret_headers_on_command_line(headers, argv),
            (std::vector<std::string>{"DD-API-KEY", "Authorization"}))
      << "x-team is no secret; x-env-token came from STALLWATCH_OTLP_HEADER, not argv";
  EXPECT_TRUE(secret_headers_on_command_line({"x-team=ml"}, argv).empty());
}

TEST(Redact, UrlsLoseCredentialsQueriesAndControlCharacters) {
  EXPECT_EQ(redact_url("https://u:p@h:1/v1/metrics?k=v#f"), "https://h:1/v1/metrics");
  EXPECT_EQ(redact_url("https://u:p@ss@h/x"), "https://h/x");
  EXPECT_EQ(redact_url("https://h/a\x1b[2Jb"), "https://h/a\\x1b[2Jb");
  EXPECT_EQ(redact_url("10.0.0.1:443"), "10.0.0.1:443");
}

TEST(Redact, TextLosesTokensKeysAndSentValuesAndStaysOneShortLine) {
  EXPECT_EQ(redact_text("Authorization: Bearer eyJhbGciOi.x-y_z"),
            "Authorization: <redacted> <redacted>");
  EXPECT_EQ(redact_text("invalid bearer abc123"), "invalid bearer <redacted>");
  EXPECT_EQ(redact_text(R"({"code":3,"api_key":"k-123","message":"bad"})"),
            R"({"code":3,"api_key":"<redacted>","message":"bad"})");
  EXPECT_EQ(redact_text("POST /v1/metrics?dd-api-key=abcd&x=1"),
            "POST /v1/metrics?dd-api-key=<redacted>&x=1");
  EXPECT_EQ(redact_text("Invalid API key provided"), "Invalid API key provided");
  EXPECT_EQ(redact_text("key abcdef1234 is not valid", {"abcdef1234", "on"}),
            "key <redacted> is not valid");
  EXPECT_EQ(redact_text("line1\nline2\x1b[31m\xc2\x9b"), "line1\\nline2\\x1b[31m\\u009b");
  const std::string cut = redact_text(std::string(2000, 'x'), {}, 100);
  EXPECT_EQ(cut, std::string(100, 'x') + "\xe2\x80\xa6 (2000 bytes)");
  EXPECT_TRUE(looks_secret("DD-API-KEY"));
  EXPECT_TRUE(looks_secret("Authorization"));
  EXPECT_TRUE(looks_secret("x-auth-token"));
  EXPECT_FALSE(looks_secret("x-scope-orgid"));
}

TEST(Redact, ReceiverAnswersInOtlpLogLinesLoseTheHeadersWeSent) {
  const Headers sent = {{"dd-api-key", "0123456789abcdef"}, {"x-team", "ml"}};
  const std::string line =
      printable("403 Forbidden: API key 0123456789abcdef is invalid\r\n\x1b]0;owned\x07", sent);
  EXPECT_EQ(line, "403 Forbidden: API key <redacted> is invalid\\x0d\\n\\x1b]0;owned\\x07");
  EXPECT_EQ(printable("token t0ps3cret expired", {{"Authorization", "Bearer t0ps3cret"}}),
            "token <redacted> expired");
}

}  // namespace
}  // namespace stallwatch::otlp
