#include "tools/role_config.h"

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/flag_struct.h"

namespace pdserve::cli {
namespace {

// Flags of the pdserve CLI that no service process reads: the one-shot commands', the client's,
// the load generator's, and `up`'s own. Every other flag must be in a role's struct.
constexpr std::string_view kNotServiceFlags[] = {
    // generate, eval, bench, calibrate, make-model, convert, quantize, tokenize
    "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "text", "ctx", "prompt_tokens",
    "gen_tokens", "repetitions", "shape", "family", "dim", "hidden_dim", "layers", "heads",
    "kv_heads", "head_dim", "vocab", "seq_len", "untied", "rope_theta", "rope_scaling_factor",
    "out", "format", "dtype", "shards", "type", "decode_context", "batch", "ridge",
    "zack_kept_fraction", "zack_rank_multiple", "calibration_chunks", "compare_to_baseline", "file",
    "json_inputs", "no_bos", "chat",
    // client and loadgen
    "timings", "timeout_seconds", "protocol", "url", "api_model", "rate", "arrival", "concurrency",
    "requests", "warmup", "prompt_tokens_max", "gen_tokens_max", "shared_prefix_tokens",
    "prefix_groups", "conversations", "turns", "turn_tokens", "turn_tokens_max", "think_time",
    "trace", "trace_speedup", "request_timeout", "retries", "duration", "slo_ttft_ms",
    "slo_tpot_ms", "slo_e2e_ms", "slo_attainment", "sweep_rates", "json", "csv", "out_dir",
    "progress", "direct_decode", "overhead_requests",
    // up itself
    "prefill_workers", "decode_workers", "kvstores", "prefill_threads", "decode_threads",
    "startup_seconds", "tls_dir"};

template <typename Config>
void AddNames(std::vector<std::string_view>& names) {
  for (std::string_view name : FlagNames<Config>()) names.push_back(name);
}

TEST(RoleConfigTest, EveryFlagOfTheCliIsInARoleOrListedAsNoServices) {
  std::vector<std::string_view> roles;
  AddNames<RouterConfig>(roles);
  AddNames<KvStoreConfig>(roles);
  AddNames<PrefillConfig>(roles);
  AddNames<DecodeConfig>(roles);
  int checked = 0;
  for (const auto& [absl_name, flag] : absl::GetAllFlags()) {
    const std::string_view name(absl_name.data(), absl_name.size());
    if (!absl::StrContains(flag->Filename(), "tools/")) continue;  // Abseil's own flags
    ++checked;
    const bool in_role = absl::c_linear_search(roles, name);
    const bool listed = absl::c_linear_search(kNotServiceFlags, name);
    EXPECT_TRUE(in_role || listed)
        << "--" << name << " (" << flag->Filename()
        << ") is in no role's struct (tools/role_config.h): `pdserve up` would not forward it; "
           "if no service reads it, list it in kNotServiceFlags";
    EXPECT_FALSE(in_role && listed) << "--" << name << " is both a role's and listed";
  }
  EXPECT_GT(checked, 100);
}

// A value of `flag` other than its default, as the flag would parse it.
template <typename T>
std::string OtherValue(const absl::CommandLineFlag& flag) {
  const T value = *flag.TryGet<T>();
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "false" : "true";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return absl::StrCat(value, "-other");
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return absl::StrCat(absl::StrJoin(value, ","), value.empty() ? "" : ",", "sk-other,sk-more");
  } else if constexpr (std::is_floating_point_v<T>) {
    return absl::StrCat(value + 0.25);
  } else {
    return absl::StrCat(value + 3);
  }
}

void ParseArgs(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    ASSERT_TRUE(absl::StartsWith(arg, "--")) << arg;
    const size_t equals = arg.find('=');
    ASSERT_NE(equals, std::string::npos) << arg;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(arg.substr(2, equals - 2));
    ASSERT_NE(flag, nullptr) << arg;
    std::string error;
    ASSERT_TRUE(flag->ParseFrom(arg.substr(equals + 1), &error)) << arg << ": " << error;
  }
}

// With every flag of `Config` set to a value other than its default, FlagArgs carries each value
// to a process whose flags are at their defaults, which then reads the same struct.
template <typename Config>
void ExpectEveryFieldForwarded() {
  std::vector<std::string> args;
  {
    absl::FlagSaver saver;
    Config().VisitFlags([](const char* name, const auto& field) {
      using T = std::decay_t<decltype(field)>;
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      ASSERT_NE(flag, nullptr) << name;
      std::string error;
      ASSERT_TRUE(flag->ParseFrom(OtherValue<T>(*flag), &error)) << name << ": " << error;
    });
    args = FlagArgs(FlagsTo<Config>());
  }
  ASSERT_EQ(args.size(), FlagNames<Config>().size());
  for (const std::string& arg : args) {
    const std::string name = arg.substr(2, arg.find('=') - 2);
    EXPECT_NE(arg, absl::StrCat("--", name, "=", absl::FindCommandLineFlag(name)->DefaultValue()));
  }
  absl::FlagSaver saver;
  ParseArgs(args);
  EXPECT_EQ(FlagArgs(FlagsTo<Config>()), args);
}

TEST(RoleConfigTest, RouterForwardsEveryField) { ExpectEveryFieldForwarded<RouterConfig>(); }
TEST(RoleConfigTest, KvStoreForwardsEveryField) { ExpectEveryFieldForwarded<KvStoreConfig>(); }
TEST(RoleConfigTest, PrefillForwardsEveryField) { ExpectEveryFieldForwarded<PrefillConfig>(); }
TEST(RoleConfigTest, DecodeForwardsEveryField) { ExpectEveryFieldForwarded<DecodeConfig>(); }

TEST(RoleConfigTest, FlagArgsAreTheCurrentValues) {
  absl::FlagSaver saver;
  std::string error;
  ASSERT_TRUE(absl::FindCommandLineFlag("pool_mib")->ParseFrom("77", &error));
  const std::vector<std::string> args = FlagArgs(FlagsTo<KvStoreConfig>());
  EXPECT_THAT(args, testing::Contains("--pool_mib=77"));
  EXPECT_THAT(args, testing::Contains("--listen=127.0.0.1:0"));
}

}  // namespace
}  // namespace pdserve::cli
