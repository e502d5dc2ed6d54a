#include "core/transport/ucx_info.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace pdserve {
namespace {

template <typename PrintFn>
std::string Capture(PrintFn print) {
  char* buffer = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&buffer, &size);
  if (stream == nullptr) return "";
  print(stream);
  std::fclose(stream);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

void AddUnique(std::vector<std::string>& names, std::string name) {
  for (const std::string& existing : names) {
    if (existing == name) return;
  }
  names.push_back(std::move(name));
}

// "put[3]:" -> 3; -1 when `token` is not "<prefix>[N]:".
int IndexedToken(absl::string_view token, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&token, prefix) || !absl::ConsumePrefix(&token, "[") ||
      !absl::ConsumeSuffix(&token, "]:")) {
    return -1;
  }
  int index = -1;
  return absl::SimpleAtoi(token, &index) && index >= 0 && index < 64 ? index : -1;
}

}  // namespace

UcxContextResources ParseUcxContextResources(const std::string& context_info) {
  UcxContextResources out;
  for (absl::string_view line : absl::StrSplit(context_info, '\n')) {
    if (line.find(" resource ") == absl::string_view::npos) continue;
    size_t dashes = line.find("-- ");
    if (dashes == absl::string_view::npos) continue;
    std::string resource(absl::StripAsciiWhitespace(line.substr(dashes + 3)));
    if (resource.empty()) continue;
    AddUnique(out.transports, resource.substr(0, resource.find('/')));
    AddUnique(out.resources, resource);
  }
  return out;
}

UcxContextResources ReadUcxContextResources(ucp_context_h context) {
  return ParseUcxContextResources(
      Capture([context](FILE* stream) { ucp_context_print_info(context, stream); }));
}

std::string PrintUcxEndpoint(ucp_ep_h ep) {
  return Capture([ep](FILE* stream) { ucp_ep_print_info(ep, stream); });
}

std::vector<UcxLane> ParseUcxEndpointLanes(const std::string& ep_info) {
  std::vector<UcxLane> lanes;
  std::vector<int> rma_lanes;
  for (absl::string_view line : absl::StrSplit(ep_info, '\n')) {
    std::vector<absl::string_view> tokens =
        absl::StrSplit(line, absl::ByAnyChar(" \t#"), absl::SkipEmpty());
    if (tokens.empty()) continue;
    if (int i = IndexedToken(tokens[0], "put"); i >= 0) rma_lanes.push_back(i);
    if (int i = IndexedToken(tokens[0], "get"); i >= 0) rma_lanes.push_back(i);
    int index = IndexedToken(tokens[0], "lane");
    if (index < 0 || tokens.size() < 2) continue;
    // "3:sysv/memory.0" -> "sysv/memory"
    absl::string_view resource = tokens[1];
    if (size_t colon = resource.find(':'); colon != absl::string_view::npos) {
      resource.remove_prefix(colon + 1);
    }
    if (size_t dot = resource.rfind('.'); dot != absl::string_view::npos) {
      resource = resource.substr(0, dot);
    }
    if (lanes.size() <= static_cast<size_t>(index)) lanes.resize(index + 1);
    UcxLane& lane = lanes[index];
    lane.transport = std::string(resource);
    bool after_remote = false;
    for (size_t t = 2; t < tokens.size(); ++t) {
      if (tokens[t] == "->") {
        ++t;  // the remote md/transport token
        after_remote = true;
        continue;
      }
      if (!after_remote) continue;
      // "am_bw" then "0" (the "#0" priority, split on '#'): keep the names only.
      if (!tokens[t].empty() && absl::ascii_isdigit(tokens[t][0])) continue;
      AddUnique(lane.roles, std::string(tokens[t]));
    }
  }
  for (int index : rma_lanes) {
    if (static_cast<size_t>(index) < lanes.size()) AddUnique(lanes[index].roles, "rma");
  }
  return lanes;
}

std::vector<std::string> UcxRmaTransports(const std::vector<UcxLane>& lanes) {
  std::vector<std::string> rma;
  std::vector<std::string> am;
  for (const UcxLane& lane : lanes) {
    for (const std::string& role : lane.roles) {
      if (role == "rma" || role == "rma_bw") AddUnique(rma, lane.transport);
      if (role == "am" || role == "am_bw") AddUnique(am, lane.transport);
    }
  }
  return rma.empty() ? am : rma;
}

}  // namespace pdserve
