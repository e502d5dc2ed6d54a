#include "services/common/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

namespace pdserve {
namespace {

sigset_t ShutdownSet(bool hangup) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (hangup) sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void BlockShutdownSignals(bool hangup) {
  sigset_t set = ShutdownSet(hangup);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal(const std::function<void()>& on_hangup) {
  const sigset_t set = ShutdownSet(static_cast<bool>(on_hangup));
  while (true) {
    int signal_number = 0;
    if (sigwait(&set, &signal_number) != 0) continue;
    if (signal_number != SIGHUP) return signal_number;
    on_hangup();
  }
}

}  // namespace pdserve
