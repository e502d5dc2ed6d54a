#include "core/transport/ucx_info.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::ElementsAre;

// Captured from UCX 1.13.1 (Debian 12).
constexpr char kContextInfo[] = R"(#
# UCP context
#
#     component 0  :  self
#     component 1  :  tcp
#            md 0  :  component 0  self
#            md 1  :  component 1  tcp
#      resource 0  :  md 0  dev 0  flags -- self/memory0
#      resource 1  :  md 1  dev 1  flags -- tcp/lo
#      resource 2  :  md 1  dev 2  flags -- tcp/eth0
#      resource 3  :  md 3  dev 3  flags -- posix/memory
)";

constexpr char kTcpEndpoint[] = R"(# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] am am_bw#0 keepalive wireup
#
#                  rma_bw: mds #
)";

constexpr char kShmEndpoint[] = R"(# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am am_bw#0
#                 lane[1]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]
#
#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)
#                  get[0]: 0..<bcopy>..(inf)
#                  put[1]: 0..<short>..4294967296..<bcopy>..(inf)
#                  get[1]: 0..<bcopy>..(inf)
#
#                  rma_bw: mds #
)";

TEST(UcxInfoTest, ParsesContextResources) {
  UcxContextResources resources = ParseUcxContextResources(kContextInfo);
  EXPECT_THAT(resources.transports, ElementsAre("self", "tcp", "posix"));
  EXPECT_THAT(resources.resources,
              ElementsAre("self/memory0", "tcp/lo", "tcp/eth0", "posix/memory"));
}

TEST(UcxInfoTest, TcpEndpointEmulatesRmaOverItsAmLane) {
  std::vector<UcxLane> lanes = ParseUcxEndpointLanes(kTcpEndpoint);
  ASSERT_EQ(lanes.size(), 1u);
  EXPECT_EQ(lanes[0].transport, "tcp/lo");
  EXPECT_THAT(lanes[0].roles, ElementsAre("am", "am_bw", "keepalive", "wireup"));
  EXPECT_THAT(UcxRmaTransports(lanes), ElementsAre("tcp/lo"));
}

TEST(UcxInfoTest, ShmEndpointHasRmaLanes) {
  std::vector<UcxLane> lanes = ParseUcxEndpointLanes(kShmEndpoint);
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_EQ(lanes[0].transport, "sysv/memory");
  EXPECT_THAT(lanes[0].roles, ElementsAre("am", "am_bw", "rma"));
  EXPECT_THAT(lanes[1].roles, ElementsAre("rma"));
  EXPECT_THAT(UcxRmaTransports(lanes), ElementsAre("sysv/memory", "posix/memory"));
}

TEST(UcxInfoTest, EmptyOrForeignTextYieldsNothing) {
  EXPECT_TRUE(ParseUcxEndpointLanes("").empty());
  EXPECT_TRUE(ParseUcxEndpointLanes("lane[99999]: x\nput[-1]: y\n").empty());
  EXPECT_TRUE(ParseUcxContextResources("resource without dashes").transports.empty());
}

}  // namespace
}  // namespace pdserve
