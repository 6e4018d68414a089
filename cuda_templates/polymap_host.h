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
//
// Warp exchanges (__shfl_*_sync, __syncwarp) need the other lanes of the warp to reach
// them too, so they run on the fibers as well: a round of the scheduler resumes every thread
// up to its next stop, and a lane posts its value in one round and reads its partner's in
// the next (see shuffle below). The threads stopped at __syncthreads wait there until no
// thread of the block is inside an exchange, so a barrier still holds every thread.
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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef void* cudaStream_t;

// The runtime calls a C++ caller of the launcher makes, on host memory: a program written
// for the GPU (docs/codegen.md's example) runs unchanged on the host emulation.
typedef int cudaError_t;
enum : int { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
inline cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::malloc(bytes > 0 ? bytes : 1);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
inline cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* to, const void* from, size_t bytes, cudaMemcpyKind) {
  std::memcpy(to, from, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* to, int value, size_t bytes) {
  std::memset(to, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

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

// Where a fiber handed control back to the scheduler.
enum class Stop : char {
  barrier,  // at __syncthreads: resumed once no thread of the block is inside a warp exchange
  warp,     // inside a warp exchange: resumed in the next round
  ended,
};

// The fibers of one OS thread: a context and a stack per CUDA thread of the block, kept from
// block to block (and launch to launch), and the words the lanes of a warp exchange through.
constexpr std::size_t FIBER_STACK = 256 * 1024;  // untouched pages cost no memory
struct Fibers {
  Context scheduler;
  std::vector<Context> contexts;
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<Stop> stops;           // where each thread of the block stopped last
  std::vector<std::uint64_t> words;  // each thread's value in its warp exchange under way
  std::vector<long> posted;          // the round in which each thread last posted its word
  void (*body)(void*) = nullptr;     // runs the kernel
  void* kernel = nullptr;
  long threads = 0;  // of the block
  long running = 0;  // the fiber in progress: the linear id of its CUDA thread
  // rounds count on from block to block (a block's last round, in which all its remaining
  // threads end, posts nothing), so that a word posted in an earlier block never passes for
  // one posted in the last round
  long round = 0;
  Stop stop = Stop::ended;  // where the fiber in progress stopped
};
// The pool of the block in progress on this OS thread; null outside run_block_as_fibers, which
// is how the intrinsics that need fibers tell a launch without them.
inline thread_local Fibers* fibers = nullptr;

inline void fiber_main() {
  Fibers* f = fibers;
  f->body(f->kernel);
  f->stop = Stop::ended;
  swap(f->contexts[f->running], f->scheduler);  // ended: never resumed
  std::abort();
}

// An intrinsic used where CUDA gives it no meaning: called in a kernel launched without
// fibers (sync = false, whose threads run one after another to their end, so that no other
// thread can meet it there), or by a lane that its mask leaves out. The emitter wrote the call
// and chose the launch, so this is its programming error, never the user's: stop with the
// reason rather than return a value that might pass for a result.
[[noreturn]] inline void misuse(const char* intrinsic, const char* reason) {
  std::fprintf(stderr,
               "polymap host emulation: %s in block (%u, %u, %u), thread (%u, %u, %u): %s\n",
               intrinsic, block_index.x, block_index.y, block_index.z, thread_index.x,
               thread_index.y, thread_index.z, reason);
  std::abort();
}

inline Fibers& block_fibers(const char* intrinsic) {
  if (fibers == nullptr)
    misuse(intrinsic,
           "called in a kernel launched with sync = false; the threads of a kernel that meets "
           "at barriers or exchanges values across a warp must run as fibers (sync = true)");
  return *fibers;
}

inline void barrier() {
  Fibers& f = block_fibers("__syncthreads");
  f.stop = Stop::barrier;
  swap(f.contexts[f.running], f.scheduler);
}

// The end of the caller's round inside a warp exchange: every other thread that is not
// waiting at a barrier runs up to its own next stop before the caller goes on.
inline void warp_step(Fibers& f) {
  f.stop = Stop::warp;
  swap(f.contexts[f.running], f.scheduler);
}

// The lane (0 .. 31) of the thread in progress, checked to be in `mask`: CUDA leaves an
// exchange undefined for a thread outside its own mask (on the GPU it may hang), a mistake
// in the emitted code that no later result would show.
inline unsigned lane_in(Fibers& f, const char* intrinsic, unsigned mask) {
  const unsigned lane = unsigned(f.running) & 31;
  if (((mask >> lane) & 1) == 0) misuse(intrinsic, "the calling lane is not in the mask");
  return lane;
}

// PTX's shfl.sync, by which CUDA defines its shuffles: operand b (the source lane, offset or
// lane mask, of which only the low 5 bits count) and c, which packs the segment mask
// (32 - width) in bits 12:8 and a clamp in bits 4:0 (31, or 0 for .up). A lane reads lane j
// of its warp when j passes the mode's test against its segment's bounds, else keeps its own
// value: so .down and .up never leave the segment, .idx takes srcLane modulo width within it,
// and .bfly may read an earlier segment but never a later one (as CUDA documents).
enum class Mode : char { up, down, bfly, idx };

template <class T>
T shuffle(const char* intrinsic, Mode mode, unsigned mask, T var, unsigned b, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t),
                "a warp shuffle moves at most 8 bytes");
  Fibers& f = block_fibers(intrinsic);
  const int lane = int(lane_in(f, intrinsic, mask));
  const int segment = int(unsigned(32 - width) & 31);
  const int clamp = mode == Mode::up ? 0 : 31;
  const int min_lane = lane & segment;
  const int max_lane = min_lane | (clamp & ~segment);
  const int bval = int(b & 31);
  int j = lane;
  bool in_range = true;
  switch (mode) {
    case Mode::up:
      j = lane - bval;
      in_range = j >= max_lane;
      break;
    case Mode::down:
      j = lane + bval;
      in_range = j <= max_lane;
      break;
    case Mode::bfly:
      j = lane ^ bval;
      in_range = j <= max_lane;
      break;
    case Mode::idx:
      j = min_lane | (bval & ~segment);
      break;
  }
  // Post: every lane of the exchange executes the same shuffles since the last barrier (CUDA
  // requires it of the lanes in `mask`), so all of them post in this round, whatever the
  // other warps or lane groups do meanwhile.
  const long me = f.running;
  std::uint64_t word = 0;
  __builtin_memcpy(&word, &var, sizeof(T));
  f.words[me] = word;
  f.posted[me] = f.round;
  warp_step(f);
  // Read, one round later: every partner has posted by now.
  T value = var;
  if (in_range && j != lane) {
    const long partner = me - lane + j;
    const bool named = partner < f.threads && ((mask >> j) & 1) != 0;
    if (named && f.posted[partner] == f.round - 1) {
      __builtin_memcpy(&value, &f.words[partner], sizeof(T));
    } else if (named && f.stops[partner] != Stop::ended) {
      misuse(intrinsic, "a lane named in the mask did not take part in the same exchange");
    } else {
      // a lane outside the mask, past the end of the block or exited: CUDA leaves the value
      // undefined; all bits set (NaN, -1) so that a use of it shows in the checked results
      // rather than a stale word that might look right
      word = ~std::uint64_t(0);
      __builtin_memcpy(&value, &word, sizeof(T));
    }
  }
  // No lane posts again before every lane of this exchange has read: one more round.
  warp_step(f);
  return value;
}

// One block of a kernel with barriers: each thread from its start (or last stop) to its next
// stop (or its end), in turn, until every thread has ended. A round resumes every thread that
// is inside a warp exchange; the threads at a barrier wait until a round ends with none inside
// one, and then all pass it together, so that the lanes of an exchange, which start it in the
// same round, post and read in the same rounds.
template <class Kernel>
void run_block_as_fibers(dim3 grid, dim3 block, long b, long threads, Kernel& kernel) {
  static thread_local Fibers pool;
  fibers = &pool;
  pool.body = [](void* k) { (*static_cast<Kernel*>(k))(); };
  pool.kernel = &kernel;
  pool.threads = threads;
  if (long(pool.contexts.size()) < threads) {
    pool.contexts.resize(threads);
    pool.stops.resize(threads);
    pool.words.resize(threads);
    pool.posted.resize(threads, -1);
    while (long(pool.stacks.size()) < threads) pool.stacks.emplace_back(new char[FIBER_STACK]);
  }
  for (long t = 0; t < threads; ++t) make_context(pool.contexts[t], pool.stacks[t].get(), FIBER_STACK, fiber_main);
  std::fill_n(pool.stops.begin(), threads, Stop::barrier);  // as if all had just passed one
  bool open = true;  // whether the threads at a barrier pass it in this round
  for (long left = threads; left > 0;) {
    ++pool.round;
    bool exchanging = false;
    for (long t = 0; t < threads; ++t) {
      const Stop stop = pool.stops[t];
      if (stop == Stop::ended || (stop == Stop::barrier && !open)) continue;
      enter(grid, block, b, t);
      pool.running = t;
      swap(pool.scheduler, pool.contexts[t]);  // back at the thread's next stop or its end
      pool.stops[t] = pool.stop;
      if (pool.stop == Stop::ended) --left;
      exchanging = exchanging || pool.stop == Stop::warp;
    }
    open = !exchanging;
  }
  fibers = nullptr;
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
// A program-wide temporary: host memory, uninitialized as cudaMallocAsync's, freed when
// the launcher returns; 2 (cudaErrorMemoryAllocation) when there is none (malloc, not new:
// a count too large is an error code here, never an exception through the C launcher).
#define POLYMAP_SCRATCH(type, name, elements)                                                 \
  const size_t pm_count_##name = (elements);                                                   \
  if (pm_count_##name > (size_t)-1 / sizeof(type) - 1) return cudaErrorMemoryAllocation;      \
  std::unique_ptr<type[], void (*)(void*)> pm_scratch_##name(                                 \
      static_cast<type*>(std::malloc((pm_count_##name + 1) * sizeof(type))), &std::free);    \
  if (pm_scratch_##name == nullptr) return cudaErrorMemoryAllocation;                         \
  type* const name = pm_scratch_##name.get()
// The fault word (polymap_helpers.cuh) is a plain global here: the launcher clears it,
// and returns POLYMAP_ERROR_FAULT when a division by zero set it; run_host then reads
// which line through ctypes.
#define POLYMAP_FAULT_RESET() (pm_fault = 0)
#define POLYMAP_FAULT_CHECK()                      \
  do {                                             \
    if (pm_fault != 0) return POLYMAP_ERROR_FAULT; \
  } while (0)

// CUDA's warp intrinsics, on the fibers (polymap_host::shuffle). CUDA declares the shuffles
// for int, unsigned, long, unsigned long, long long, unsigned long long, float and double, so
// a smaller integer or a bool reaches the int one by promotion: the result type is what unary
// + makes of the argument's, here as there (an f16 stored as unsigned short comes back int).
template <class T>
  requires std::is_arithmetic_v<T>
inline decltype(+T()) __shfl_sync(unsigned mask, T var, int srcLane, int width = 32) {
  return polymap_host::shuffle<decltype(+T())>("__shfl_sync", polymap_host::Mode::idx, mask, var,
                                               unsigned(srcLane), width);
}
template <class T>
  requires std::is_arithmetic_v<T>
inline decltype(+T()) __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return polymap_host::shuffle<decltype(+T())>("__shfl_up_sync", polymap_host::Mode::up, mask, var,
                                               delta, width);
}
template <class T>
  requires std::is_arithmetic_v<T>
inline decltype(+T()) __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return polymap_host::shuffle<decltype(+T())>("__shfl_down_sync", polymap_host::Mode::down, mask,
                                               var, delta, width);
}
template <class T>
  requires std::is_arithmetic_v<T>
inline decltype(+T()) __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32) {
  return polymap_host::shuffle<decltype(+T())>("__shfl_xor_sync", polymap_host::Mode::bfly, mask,
                                               var, unsigned(laneMask), width);
}
// The lanes of `mask` meet: one round, which every lane of the warp that calls it ends at the
// same time, so what one wrote before it the others read after it.
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  polymap_host::Fibers& f = polymap_host::block_fibers("__syncwarp");
  polymap_host::lane_in(f, "__syncwarp", mask);
  polymap_host::warp_step(f);
}

// CUDA's atomicMax, for the threads of the emulation that share the fault word.
inline int atomicMax(int* address, int value) {
  std::atomic_ref<int> word(*address);
  int old = word.load();
  while (old < value && !word.compare_exchange_weak(old, value)) {
  }
  return old;
}

#endif  // POLYMAP_HOST_H
