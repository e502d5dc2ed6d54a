// ShutdownSignal: turns SIGINT/SIGTERM into a wake-up that a service's main thread waits on.
// Install once per process, before starting threads that should not see the signals.
#ifndef PDSERVE_SERVICES_COMMON_SHUTDOWN_SIGNAL_H_
#define PDSERVE_SERVICES_COMMON_SHUTDOWN_SIGNAL_H_

namespace pdserve {

// Blocks SIGINT and SIGTERM in the calling thread (and so in threads it starts afterwards).
void BlockShutdownSignals();
// Waits until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForShutdownSignal();

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_SHUTDOWN_SIGNAL_H_
