// polymap host emulation: the emitted CUDA C compiled by the host C++ compiler (C++20),
// so that every kernel runs and is checked where there is no GPU.
//
// Execution model. The blocks of a launch are spread over the host's cores: a pool of one
// OS thread per core takes the next block until none is left, and runs all of that block's
// threads. A kernel without barriers has no way to observe how its threads interleave, so
// they run one after another. In a kernel that meets at barriers (launched with sync = true)
// each CUDA thread is a fiber (ucontext) with its own stack: the OS thread resumes the
// block's fibers in turn, and __syncthreads() hands control back to it, so every thread runs
// up to its next barrier before any goes past it (the proof shows that no barrier is under a
// condition on the thread, so all threads meet the same barriers). No OS thread per CUDA
// thread: a block of 1024 threads costs 1024 small stacks, reused block after block.
// __shared__ variables are function-local statics per OS thread (thread_local), so they
// are shared by the threads of a block and private to it.
#ifndef POLYMAP_HOST_H
#define POLYMAP_HOST_H
#define POLYMAP_HOST 1

#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
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

inline void enter(dim3 grid, dim3 block, long b, long t) {
  grid_dim = grid;
  block_dim = block;
  block_index = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / grid.x / grid.y)};
  thread_index = {unsigned(t % block.x), unsigned(t / block.x % block.y), unsigned(t / block.x / block.y)};
}

// The fibers of one OS thread: a context and a stack per CUDA thread of the block, kept from
// block to block (and launch to launch) of the same size.
constexpr std::size_t FIBER_STACK = 256 * 1024;  // untouched pages cost no memory
struct Fibers {
  ucontext_t scheduler;
  std::vector<ucontext_t> contexts;
  std::vector<std::unique_ptr<char[]>> stacks;
  void (*body)(void*) = nullptr;  // runs the kernel
  void* kernel = nullptr;
};
inline thread_local Fibers* fibers = nullptr;
inline thread_local ucontext_t* running = nullptr;  // the fiber in progress
inline thread_local bool* barrier_flag = nullptr;    // set when the fiber stops at a barrier

inline void fiber_main() {
  fibers->body(fibers->kernel);  // returns to the scheduler through uc_link
}

inline void barrier() {
  *barrier_flag = true;
  swapcontext(running, &fibers->scheduler);
}

// One block of a kernel with barriers: each thread from its start (or last barrier) to its
// next barrier (or its end), in turn, until every thread has ended.
template <class Kernel>
void run_block_as_fibers(dim3 grid, dim3 block, long b, long threads, Kernel& kernel) {
  static thread_local Fibers pool;
  fibers = &pool;
  pool.body = [](void* k) { (*static_cast<Kernel*>(k))(); };
  pool.kernel = &kernel;
  if (long(pool.contexts.size()) < threads) {
    pool.contexts.resize(threads);
    while (long(pool.stacks.size()) < threads) pool.stacks.emplace_back(new char[FIBER_STACK]);
  }
  std::vector<char> ended(threads, 0);
  for (long t = 0; t < threads; ++t) {
    ucontext_t& c = pool.contexts[t];
    getcontext(&c);
    c.uc_stack.ss_sp = pool.stacks[t].get();
    c.uc_stack.ss_size = FIBER_STACK;
    c.uc_link = &pool.scheduler;
    makecontext(&c, fiber_main, 0);
  }
  for (long left = threads; left > 0;) {
    for (long t = 0; t < threads; ++t) {
      if (ended[t]) continue;
      enter(grid, block, b, t);
      running = &pool.contexts[t];
      // back here at the thread's next barrier, or at its end (through uc_link)
      bool at_barrier = false;
      barrier_flag = &at_barrier;
      swapcontext(&pool.scheduler, running);
      if (!at_barrier) {
        ended[t] = 1;
        --left;
      }
    }
  }
}

template <class Kernel>
void launch(dim3 grid, dim3 block, bool sync, Kernel kernel) {
  const long blocks = long(grid.x) * grid.y * grid.z;
  const long threads = long(block.x) * block.y * block.z;
  if (blocks <= 0 || threads <= 0) return;
  std::atomic<long> next{0};
  auto worker = [&] {
    for (long b = next++; b < blocks; b = next++) {
      if (sync) {
        run_block_as_fibers(grid, block, b, threads, kernel);
        continue;
      }
      for (long t = 0; t < threads; ++t) {
        enter(grid, block, b, t);
        kernel();
      }
    }
  };
  const long cores = std::max(1L, long(std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (long w = 1; w < std::min(cores, blocks); ++w) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
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
#define __shared__ static thread_local
#define __syncthreads() (polymap_host::barrier())
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
