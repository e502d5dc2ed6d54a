// DefaultInitAllocator: a std::allocator whose value-construction default-initializes, so that
// std::vector<float, DefaultInitAllocator<float>>::resize(n) leaves new elements uninitialized
// instead of zeroing them. Large buffers then stay out of resident memory until written (glibc
// serves them from fresh anonymous mappings): a buffer sized for the largest batch costs only
// the rows a call uses. Only for trivially constructible T whose readers write before reading.
#ifndef PDSERVE_CORE_BASE_DEFAULT_INIT_ALLOCATOR_H_
#define PDSERVE_CORE_BASE_DEFAULT_INIT_ALLOCATOR_H_

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace pdserve {

template <typename T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  static_assert(std::is_trivially_default_constructible_v<T>);
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A growable buffer of T whose resize does not zero.
template <typename T>
using UninitializedVector = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_DEFAULT_INIT_ALLOCATOR_H_
