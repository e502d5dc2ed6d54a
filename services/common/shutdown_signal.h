// ShutdownSignal: turns SIGINT/SIGTERM into a wake-up that a service's main thread waits on (and,
// for a process that reloads its configuration, SIGHUP into a call). Install once per process,
// before starting threads that should not see the signals.
#ifndef PDSERVE_SERVICES_COMMON_SHUTDOWN_SIGNAL_H_
#define PDSERVE_SERVICES_COMMON_SHUTDOWN_SIGNAL_H_

#include <functional>

namespace pdserve {

// Blocks SIGINT and SIGTERM in the calling thread (and so in threads it starts afterwards); with
// `hangup` SIGHUP too, which then no longer ends the process.
void BlockShutdownSignals(bool hangup = false);
// Waits until SIGINT or SIGTERM arrives; returns the signal number. With `on_hangup` (and SIGHUP
// blocked) each SIGHUP calls it on this thread, and the wait goes on.
int WaitForShutdownSignal(const std::function<void()>& on_hangup = {});

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_SHUTDOWN_SIGNAL_H_
