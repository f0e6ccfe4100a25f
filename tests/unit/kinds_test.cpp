// The kinds table (chains/kinds.h): one row per kind in enum order, a rule for each row that
// says it finds that kind, cutoffs that only rise, and a docs/chains.md anchor for every row.
#include "chains/kinds.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "chains/rule.h"

namespace stallwatch::chains {
namespace {

TEST(Kinds, RowsAreInEnumOrderWithUniqueNames) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kKinds.size(); i++) {
    EXPECT_EQ(static_cast<size_t>(kKinds[i].kind), i) << kKinds[i].name;
    EXPECT_TRUE(names.insert(kKinds[i].name).second) << kKinds[i].name;
    EXPECT_EQ(kind_from_name(kKinds[i].name), kKinds[i].kind);
  }
  EXPECT_EQ(kind_from_name("no_such_kind"), std::nullopt);
}

TEST(Kinds, DefaultRulesFollowTheTable) {
  auto rules = default_rules();
  ASSERT_EQ(rules.size(), kKinds.size());
  for (size_t i = 0; i < rules.size(); i++) EXPECT_EQ(rules[i]->kind(), kKinds[i].kind);
}

TEST(Kinds, CutoffsRise) {
  for (const auto& k : kKinds) {
    EXPECT_LE(k.cutoffs.medium, k.cutoffs.high) << k.name;
    EXPECT_LE(k.cutoffs.high, k.cutoffs.critical) << k.name;
  }
  const SeverityCutoffs cpu = kind_info(Kind::kCpuContention).cutoffs;
  EXPECT_EQ(cpu.of(0.09), Severity::kLow);
  EXPECT_EQ(cpu.of(0.10), Severity::kMedium);
  EXPECT_EQ(cpu.of(0.25), Severity::kHigh);
  EXPECT_EQ(cpu.of(0.50), Severity::kCritical);
  EXPECT_EQ(kind_info(Kind::kColdStart).cutoffs.of(1e9), Severity::kLow);
}

TEST(Kinds, EveryAnchorIsInTheDocs) {
  const auto doc = std::filesystem::path(FIXTURES_DIR) / ".." / ".." / "docs" / "chains.md";
  std::ifstream in(doc);
  ASSERT_TRUE(in) << doc;
  std::stringstream ss;
  ss << in.rdbuf();
  for (const auto& k : kKinds) {
    EXPECT_NE(ss.str().find("<a id=\"" + std::string(k.anchor) + "\"></a>"), std::string::npos)
        << k.name;
  }
}

}  // namespace
}  // namespace stallwatch::chains
