#include "services/common/bearer_keys.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(BearerKeysTest, MatchesEachKeyByIndexAndNothingElse) {
  absl::StatusOr<BearerKeys> keys = BearerKeys::Create({"sk-first-key", "sk-second-key"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_FALSE(keys->open());
  EXPECT_EQ(keys->Match("Bearer sk-first-key"), 0);
  EXPECT_EQ(keys->Match("Bearer sk-second-key"), 1);
  EXPECT_EQ(keys->Match("bearer   sk-second-key "), 1);  // scheme case, spaces
  EXPECT_EQ(keys->Match("Bearer sk-first-ke"), std::nullopt);
  EXPECT_EQ(keys->Match("Bearer sk-first-keyX"), std::nullopt);
  EXPECT_EQ(keys->Match("sk-first-key"), std::nullopt);  // no scheme
  EXPECT_EQ(keys->Match("Basic sk-first-key"), std::nullopt);
  EXPECT_EQ(keys->Match("Bearer "), std::nullopt);
  EXPECT_EQ(keys->Match(""), std::nullopt);
}

TEST(BearerKeysTest, NoKeysIsOpen) {
  EXPECT_TRUE(BearerKeys().open());
  absl::StatusOr<BearerKeys> keys = BearerKeys::Create({});
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->open());
}

TEST(BearerKeysTest, RefusesBadKeysWithoutEchoingThem) {
  for (const std::string& bad : {std::string("short"), std::string("has space in it"),
                                 std::string("tab\tinside!"), std::string(513, 'k')}) {
    absl::StatusOr<BearerKeys> keys = BearerKeys::Create({"sk-good-key", bad});
    ASSERT_FALSE(keys.ok()) << bad;
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(keys.status().message(), HasSubstr("key 2 of 2"));
    EXPECT_THAT(keys.status().message(), Not(HasSubstr(bad)));
  }
  absl::StatusOr<BearerKeys> twice = BearerKeys::Create({"sk-same-key", "sk-same-key"});
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("repeats"));
}

TEST(BearerKeysTest, ReadsAKeyFileBeforeTheFlagKeys) {
  const std::string path = ::testing::TempDir() + "/bearer_keys_test.keys";
  {
    std::ofstream out(path);
    out << "# team A\nsk-from-file-1\n\n  sk-from-file-2  \n";
  }
  absl::StatusOr<BearerKeys> keys = BearerKeys::FromFlags({"sk-from-flag"}, path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 3u);
  EXPECT_EQ(keys->Match("Bearer sk-from-file-2"), 1);
  EXPECT_EQ(keys->Match("Bearer sk-from-flag"), 2);
  EXPECT_EQ(keys->Match("Bearer # team A"), std::nullopt);

  absl::StatusOr<BearerKeys> missing = BearerKeys::FromFlags({}, path + ".missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  {
    std::ofstream out(path);
    out << "# only a comment\n";
  }
  absl::StatusOr<BearerKeys> empty = BearerKeys::FromFlags({}, path);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve
