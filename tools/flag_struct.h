// Flag structs: a struct of flag values that lists its fields once, in
//
//   template <typename Visitor> void VisitFlags(Visitor&& visit) {
//     visit("threads", threads);   // the flag's name (as defined, underscores) and its field
//     nested.VisitFlags(visit);    // a nested flag struct
//   }
//
// and gets, from that one list, its values from the parsed flags (FlagsTo) and the command-line
// arguments that give a child process the same values (FlagArgs). `pdserve up` starts each role
// with FlagArgs of that role's struct, so every flag the role reads reaches it by construction.
// Each field's type must be the flag's own type (a mismatch is a programming error and aborts).
#ifndef PDSERVE_TOOLS_FLAG_STRUCT_H_
#define PDSERVE_TOOLS_FLAG_STRUCT_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"

namespace pdserve::cli {

// The current value of every flag `Config` visits.
template <typename Config>
Config FlagsTo() {
  Config config;
  config.VisitFlags([](const char* name, auto& field) {
    using T = std::decay_t<decltype(field)>;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    auto value = flag == nullptr ? decltype(flag->TryGet<T>()){} : flag->TryGet<T>();
    if (!value.has_value()) {
      std::fprintf(stderr, "flag struct field '%s' names no flag of its type\n", name);
      std::abort();
    }
    field = *std::move(value);
  });
  return config;
}

// "--name=value" for every field of `config`, in the order VisitFlags lists them.
template <typename Config>
std::vector<std::string> FlagArgs(Config config) {
  std::vector<std::string> args;
  config.VisitFlags([&args](const char* name, const auto& field) {
    args.push_back(absl::StrCat("--", name, "=", absl::UnparseFlag(field)));
  });
  return args;
}

// The names of the flags `Config` visits.
template <typename Config>
std::vector<std::string_view> FlagNames() {
  std::vector<std::string_view> names;
  Config().VisitFlags([&names](const char* name, const auto&) { names.push_back(name); });
  return names;
}

}  // namespace pdserve::cli

#endif  // PDSERVE_TOOLS_FLAG_STRUCT_H_
