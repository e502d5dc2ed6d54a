// DecodeStream: the channel between the decode scheduler (producer) and the gRPC handler
// (consumer) of one request. The scheduler pushes tokens and finishes it exactly once; the handler
// takes tokens as they come and may cancel. Thread-safe.
#ifndef PDSERVE_SERVICES_DECODE_DECODE_STREAM_H_
#define PDSERVE_SERVICES_DECODE_DECODE_STREAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"
#include "pdserve/v1/common.pb.h"

namespace pdserve {

class DecodeStream {
 public:
  struct Taken {
    std::vector<int32_t> tokens;
    bool finished = false;  // no more tokens will come
    v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
    absl::Status status;  // not OK when the request failed
  };

  void Push(int32_t token);
  // Pushes the last token and finishes at once, so the consumer sees them together.
  void PushLast(int32_t token, v1::FinishReason reason);
  void Fail(const absl::Status& status);
  // Waits until tokens are available, the stream is finished, or `deadline`; takes the tokens.
  Taken Take(absl::Time deadline);

  void Cancel();
  bool cancelled() const;
  bool finished() const;
  // Waits (bounded by `deadline`) until the scheduler has finished the stream.
  bool WaitFinished(absl::Time deadline);

 private:
  mutable Mutex mu_;
  CondVar cv_;  // signalled when tokens_ grows or finished_ is set
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  v1::FinishReason reason_ ABSL_GUARDED_BY(mu_) = v1::FINISH_REASON_UNSPECIFIED;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_DECODE_DECODE_STREAM_H_
