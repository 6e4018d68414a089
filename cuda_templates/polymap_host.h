// polymap host emulation: the emitted CUDA C compiled by the host C++ compiler (C++20),
// so that every kernel runs and is checked where there is no GPU.
//
// Execution model. Blocks run one after another. In a kernel that meets at barriers
// (launched with sync = true) the threads of a block are real threads meeting at a real
// std::barrier, and __shared__ variables (function-local statics) are shared by the
// threads of the block. A kernel without barriers has no way to observe how its threads
// interleave, so its threads run one after another and the blocks are spread over the
// host's cores: a valid schedule of the same program, much faster to emulate.
#ifndef POLYMAP_HOST_H
#define POLYMAP_HOST_H
#define POLYMAP_HOST 1

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef void* cudaStream_t;

namespace polymap_host {
inline thread_local uint3 thread_index{0, 0, 0};
inline thread_local uint3 block_index{0, 0, 0};
inline thread_local dim3 block_dim;
inline thread_local dim3 grid_dim;
inline thread_local std::barrier<>* block_barrier = nullptr;

inline void enter(dim3 grid, dim3 block, long b, long t) {
  grid_dim = grid;
  block_dim = block;
  block_index = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / grid.x / grid.y)};
  thread_index = {unsigned(t % block.x), unsigned(t / block.x % block.y), unsigned(t / block.x / block.y)};
}

template <class Kernel>
void launch(dim3 grid, dim3 block, bool sync, Kernel kernel) {
  const long blocks = long(grid.x) * grid.y * grid.z;
  const long threads = long(block.x) * block.y * block.z;
  if (blocks <= 0 || threads <= 0) return;
  if (!sync) {
    std::atomic<long> next{0};
    auto worker = [&] {
      for (long b = next++; b < blocks; b = next++)
        for (long t = 0; t < threads; ++t) {
          enter(grid, block, b, t);
          kernel();
        }
    };
    const long cores = std::max(1L, long(std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (long w = 1; w < std::min(cores, blocks); ++w) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    return;
  }
  for (long b = 0; b < blocks; ++b) {
    std::barrier<> bar(threads);
    std::vector<std::thread> team;
    team.reserve(threads);
    for (long t = 0; t < threads; ++t)
      team.emplace_back([&, t] {
        enter(grid, block, b, t);
        block_barrier = &bar;
        kernel();
      });
    for (auto& th : team) th.join();
  }
}
}  // namespace polymap_host

#define threadIdx (polymap_host::thread_index)
#define blockIdx (polymap_host::block_index)
#define blockDim (polymap_host::block_dim)
#define gridDim (polymap_host::grid_dim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __syncthreads() (polymap_host::block_barrier->arrive_and_wait())
#define POLYMAP_LAUNCH(kernel, grid, block, sync, ...) \
  polymap_host::launch(grid, block, sync, [&]() { kernel(__VA_ARGS__); })
#define POLYMAP_CHECK_LAUNCH() \
  do {                         \
  } while (0)
// The fault word (polymap_helpers.cuh) is a plain global here: the launcher clears it,
// and returns POLYMAP_ERROR_FAULT when a division by zero set it; run_host then reads
// which line through ctypes.
#define POLYMAP_FAULT_RESET() (pm_fault = 0)
#define POLYMAP_FAULT_CHECK()                      \
  do {                                             \
    if (pm_fault != 0) return POLYMAP_ERROR_FAULT; \
  } while (0)

// CUDA's atomicMax, for the threads of the emulation that share the fault word.
inline int atomicMax(int* address, int value) {
  std::atomic_ref<int> word(*address);
  int old = word.load();
  while (old < value && !word.compare_exchange_weak(old, value)) {
  }
  return old;
}

#endif  // POLYMAP_HOST_H
