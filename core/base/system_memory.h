// The machine's physical memory, for refusing allocations that cannot fit with a clear error
// instead of failing inside the allocator. Thread-safe.
#ifndef PDSERVE_CORE_BASE_SYSTEM_MEMORY_H_
#define PDSERVE_CORE_BASE_SYSTEM_MEMORY_H_

#include <unistd.h>

#include <cstdint>

namespace pdserve {

inline uint64_t PhysicalMemoryBytes() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

// The share of physical memory one component may claim in a single allocation plan.
inline constexpr double kMaxMemoryShare = 0.8;

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_SYSTEM_MEMORY_H_
