// polymap host emulation: the emitted CUDA C compiled by the host C++ compiler (C++20),
// so that every kernel runs and is checked where there is no GPU.
//
// Execution model. The blocks of a launch are spread over the host's cores: a pool of one
// OS thread per core takes the next block until none is left, and runs all of that block's
// threads. A kernel without barriers has no way to observe how its threads interleave, so
// they run one after another. In a kernel that meets at barriers (launched with sync = true)
// each CUDA thread is a fiber with its own stack (see switch_stack below): the OS thread resumes the
// block's fibers in turn, and __syncthreads() hands control back to it, so every thread runs
// up to its next barrier before any goes past it (the proof shows that no barrier is under a
// condition on the thread, so all threads meet the same barriers). No OS thread per CUDA
// thread: a block of 1024 threads costs 1024 small stacks, reused block after block.
// __shared__ variables are function-local statics per OS thread (thread_local), so they
// are shared by the threads of a block and private to it.
#ifndef POLYMAP_HOST_H
#define POLYMAP_HOST_H
#define POLYMAP_HOST 1

// ucontext only where the fibers switch with it: codegen/cmacros.py renames every name the
// host header defines as a macro, and ucontext's register macros (REG_RIP, NGREG) would
// join them on x86-64 for nothing
#if !defined(__x86_64__) || defined(POLYMAP_HOST_UCONTEXT)
#include <ucontext.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
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

// Switching between fibers. On x86-64 a fiber's registers are saved on its own stack by
// switch_stack (the callee-saved registers, MXCSR and the x87 control word: what a function
// call must preserve), about as cheap as a function call. glibc's swapcontext also saves and
// restores the signal mask, a system call each way (about 1 us a round trip here, most of a
// staged kernel's emulation time); it remains the portable fallback elsewhere.
#if defined(__x86_64__) && !defined(POLYMAP_HOST_UCONTEXT)
struct Context {
  void* sp = nullptr;
};
// switch_stack(&from, to): save the caller's registers on its stack, store that stack in
// *from, continue on the stack `to` (which a previous switch_stack or make_context left).
__attribute__((naked, noinline)) static void switch_stack(void** /*from*/, void* /*to*/) {
  asm volatile(
      "pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "subq $8, %rsp\n\t"
      "stmxcsr (%rsp)\n\t"
      "fnstcw 4(%rsp)\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "ldmxcsr (%rsp)\n\t"
      "fldcw 4(%rsp)\n\t"
      "addq $8, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret\n\t");
}
inline void swap(Context& from, Context& to) { switch_stack(&from.sp, to.sp); }
// A fresh fiber's stack as switch_stack leaves it: the control words and six registers,
// then `entry` as the return address, entered with the stack aligned as after a call.
inline void make_context(Context& c, char* stack, std::size_t size, void (*entry)()) {
  auto top = (reinterpret_cast<std::uintptr_t>(stack + size) & ~std::uintptr_t(15)) - 8;
  auto* slot = reinterpret_cast<std::uint64_t*>(top);
  slot[0] = 0;  // entry's return address: it never returns
  slot[-1] = reinterpret_cast<std::uint64_t>(entry);
  for (int r = 2; r <= 7; ++r) slot[-r] = 0;  // rbp, rbx, r12 .. r15
  std::uint32_t mxcsr;
  std::uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  std::uint64_t control = mxcsr | (std::uint64_t(fpucw) << 32);
  slot[-8] = control;
  c.sp = &slot[-8];
}
#else
struct Context {
  ucontext_t uc;
};
inline void swap(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void make_context(Context& c, char* stack, std::size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;  // entry never returns
  makecontext(&c.uc, entry, 0);
}
#endif

// The fibers of one OS thread: a context and a stack per CUDA thread of the block, kept from
// block to block (and launch to launch).
constexpr std::size_t FIBER_STACK = 256 * 1024;  // untouched pages cost no memory
struct Fibers {
  Context scheduler;
  std::vector<Context> contexts;
  std::vector<std::unique_ptr<char[]>> stacks;
  void (*body)(void*) = nullptr;  // runs the kernel
  void* kernel = nullptr;
  long running = 0;           // the fiber in progress
  bool at_barrier = false;    // whether it stopped at a barrier (else it ended)
};
inline thread_local Fibers* fibers = nullptr;

inline void fiber_main() {
  Fibers* f = fibers;
  f->body(f->kernel);
  f->at_barrier = false;
  swap(f->contexts[f->running], f->scheduler);  // ended: never resumed
  std::abort();
}

inline void barrier() {
  Fibers* f = fibers;
  f->at_barrier = true;
  swap(f->contexts[f->running], f->scheduler);
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
  for (long t = 0; t < threads; ++t) make_context(pool.contexts[t], pool.stacks[t].get(), FIBER_STACK, fiber_main);
  std::vector<char> ended(threads, 0);
  for (long left = threads; left > 0;) {
    for (long t = 0; t < threads; ++t) {
      if (ended[t]) continue;
      enter(grid, block, b, t);
      pool.running = t;
      swap(pool.scheduler, pool.contexts[t]);  // back at the thread's next barrier or its end
      if (!pool.at_barrier) {
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
#define __align__(n) __attribute__((aligned(n)))
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
