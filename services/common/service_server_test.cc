#include "services/common/service_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "core/base/mutex.h"
#include "pdserve/v1/decode.grpc.pb.h"

namespace pdserve {
namespace {

// A Decode stream that writes one message, then holds its call open until Release.
class HeldDecode : public v1::Decode::Service {
 public:
  grpc::Status Decode(grpc::ServerContext*, const v1::DecodeRequest*,
                      grpc::ServerWriter<v1::DecodeResponse>* writer) override {
    v1::DecodeResponse first;
    first.add_tokens(1);
    writer->Write(first);
    {
      MutexLock lock(&mu_);
      while (!released_) released_cv_.Wait(&mu_);
    }
    v1::DecodeResponse last;
    last.add_tokens(2);
    last.set_done(true);
    writer->Write(last);
    return grpc::Status::OK;
  }

  void Release() {
    MutexLock lock(&mu_);
    released_ = true;
    released_cv_.SignalAll();
  }

 private:
  Mutex mu_;
  CondVar released_cv_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// The drain's order, seen from a client: while a call runs, the server's Shutdown keeps the
// connection open (no GOAWAY, so the channel stays READY); the call then ends whole, with its
// status; only then does the connection go. A server that sent its GOAWAY at once would close the
// connection as the call's last bytes left, which is how a peer still writing (window updates,
// pings) gets a reset and can lose that call's trailers.
TEST(ServiceServerTest, ShutdownLetsRunningCallsEndBeforeTheConnectionGoes) {
  HeldDecode service;
  absl::StatusOr<std::unique_ptr<ServiceServer>> server =
      ServiceServer::Start("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::Decode::Stub> stub = v1::Decode::NewStub(channel);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::DecodeResponse>> reader =
      stub->Decode(&context, v1::DecodeRequest());
  v1::DecodeResponse response;
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);

  std::thread shutdown([&] { (*server)->Shutdown(absl::Seconds(60)); });
  // A GOAWAY takes the channel out of READY within a round trip on loopback; a second's watch
  // that sees no change is what the ordering promises (not a wait for something to happen).
  EXPECT_FALSE(channel->WaitForStateChange(GRPC_CHANNEL_READY,
                                           absl::ToChronoTime(absl::Now() + absl::Seconds(1))))
      << "the channel left READY while a call was running: state " << channel->GetState(false);

  service.Release();
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_TRUE(response.done());
  EXPECT_FALSE(reader->Read(&response));
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  shutdown.join();
}

}  // namespace
}  // namespace pdserve
