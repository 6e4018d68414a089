// polymap helpers: integer division and modulo that are right for negative operands, an
// i32 value division that never traps, max/min for every element type, the launch macro
// and the fault word. Inlined into every emitted file so that the file stands alone
// (NVRTC, nvcc, or the host compiler with polymap_host.h).
#ifndef POLYMAP_HELPERS
#define POLYMAP_HELPERS

// C's / and % truncate toward zero; the polyhedral model (isl, Python) floors.
__host__ __device__ __forceinline__ int pm_floord(int a, int b) {
  int q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__host__ __device__ __forceinline__ int pm_mod(int a, int b) {  // result has the sign of b
  int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// The same in 64 bits: index arithmetic is printed in long long where a value may leave
// int (schedule/ranges.py), and every argument of one call then has that type.
__host__ __device__ __forceinline__ long long pm_floord(long long a, long long b) {
  long long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__host__ __device__ __forceinline__ long long pm_mod(long long a, long long b) {
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__host__ __device__ __forceinline__ int pm_max(int a, int b) { return a > b ? a : b; }
__host__ __device__ __forceinline__ int pm_min(int a, int b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ long long pm_max(long long a, long long b) { return a > b ? a : b; }
__host__ __device__ __forceinline__ long long pm_min(long long a, long long b) { return a < b ? a : b; }
// NaN propagates, as in NumPy's maximum/minimum (fmaxf would drop it).
__host__ __device__ __forceinline__ float pm_max(float a, float b) { return (a != a || a > b) ? a : b; }
__host__ __device__ __forceinline__ float pm_min(float a, float b) { return (a != a || a < b) ? a : b; }
__host__ __device__ __forceinline__ double pm_max(double a, double b) { return (a != a || a > b) ? a : b; }
__host__ __device__ __forceinline__ double pm_min(double a, double b) { return (a != a || a < b) ? a : b; }
__host__ __device__ __forceinline__ int pm_abs(int a) { return a < 0 ? -a : a; }

// The join of a spread loop (codegen/lanes_c.py): the 32 lanes' partial results combined
// by a butterfly of shuffles. After step o each lane holds the combination of the 2o lanes
// that agree with it above bit log2(o), so every lane ends with the combination of all 32;
// lane 0's is the one the body reads next (a later spread loop broadcasts it). The whole
// warp calls it (a warp is one band point, and the join is under no lane condition).
template <typename T>
__device__ __forceinline__ T pm_lanes_add(T v) {
  for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T pm_lanes_mul(T v) {
  for (int o = 16; o > 0; o >>= 1) v = v * __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T pm_lanes_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = pm_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename T>
__device__ __forceinline__ T pm_lanes_min(T v) {
  for (int o = 16; o > 0; o >>= 1) v = pm_min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Online sums (polymap/ir/online_sums.py): a maximum m and sums s kept relative to it (the
// pair (m, s) stands for s * e^m). Two groups combine into their larger maximum, each sum
// rescaled to it: pm_online_rescale gives the factors of this group's sums and of the other
// group's and moves m to the larger maximum. In the butterfly both lanes of a step compute
// the same factors and sums (+ and * commute exactly), so every lane ends with one group,
// as pm_lanes_add leaves one sum.
// A group already at the larger maximum keeps its sums as they are (factor 1): two groups
// at the same infinite maximum then add, where exp(-inf - -inf) would be NaN.
template <typename T>
__host__ __device__ __forceinline__ void pm_online_rescale(T& m, T other, T& mine, T& theirs) {
  T top = pm_max(m, other);
  mine = m == top ? T(1) : exp(m - top);
  theirs = other == top ? T(1) : exp(other - top);
  m = top;
}
template <typename T, typename... S>
__device__ __forceinline__ void pm_lanes_online(T& m, S&... s) {
  for (int o = 16; o > 0; o >>= 1) {
    T mine, theirs;
    pm_online_rescale(m, __shfl_xor_sync(0xffffffffu, m, o), mine, theirs);
    ((s = s * mine + __shfl_xor_sync(0xffffffffu, s, o) * theirs), ...);
  }
}

// A scatter's update (``O[I[i]] += x``, language.md "Scatters"): one atomic operation on
// the element, with the value already in the target's type, so instances that meet on an
// element commute (integers exactly, floats up to the order of rounding). Integers wrap as
// the language's do; max and min propagate NaN as pm_max and pm_min do (a compare-and-swap
// loop: the GPU's own float atomics have no NaN-propagating max). The host updates through
// std::atomic_ref, for the OS threads that run blocks side by side.
#ifdef POLYMAP_HOST
template <typename T, typename F>
inline void pm_atomic_update(T* p, T v, F f) {
  std::atomic_ref<T> element(*p);
  T old = element.load();
  while (!element.compare_exchange_weak(old, f(old, v))) {
  }
}
template <typename T>
inline T pm_wrap_add(T a, T b) {  // signed overflow wraps (no undefined behaviour)
  using U = std::make_unsigned_t<T>;
  return (T)((U)a + (U)b);
}
template <typename T>
inline void pm_atomic_add(T* p, T v) {
  if constexpr (std::is_integral_v<T>) pm_atomic_update(p, v, pm_wrap_add<T>);
  else pm_atomic_update(p, v, [](T a, T b) { return a + b; });
}
template <typename T>
inline void pm_atomic_sub(T* p, T v) {
  if constexpr (std::is_integral_v<T>) pm_atomic_update(p, v, [](T a, T b) { return pm_wrap_add<T>(a, (T)(0 - (std::make_unsigned_t<T>)b)); });
  else pm_atomic_update(p, v, [](T a, T b) { return a - b; });
}
template <typename T>
inline void pm_atomic_max(T* p, T v) {
  pm_atomic_update(p, v, [](T a, T b) { return pm_max(a, b); });
}
template <typename T>
inline void pm_atomic_min(T* p, T v) {
  pm_atomic_update(p, v, [](T a, T b) { return pm_min(a, b); });
}
#else
__device__ __forceinline__ void pm_atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void pm_atomic_add(long long* p, long long v) {
  atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
__device__ __forceinline__ void pm_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void pm_atomic_sub(int* p, int v) { atomicSub(p, v); }
__device__ __forceinline__ void pm_atomic_sub(long long* p, long long v) {
  atomicAdd((unsigned long long*)p, 0ull - (unsigned long long)v);
}
__device__ __forceinline__ void pm_atomic_sub(float* p, float v) { atomicAdd(p, -v); }
__device__ __forceinline__ void pm_atomic_max(int* p, int v) { atomicMax(p, v); }
__device__ __forceinline__ void pm_atomic_min(int* p, int v) { atomicMin(p, v); }
__device__ __forceinline__ void pm_atomic_max(long long* p, long long v) { atomicMax(p, v); }
__device__ __forceinline__ void pm_atomic_min(long long* p, long long v) { atomicMin(p, v); }
// a float or double through its bits: compare-and-swap until no other thread came between
struct pm_op_add { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct pm_op_max { template <typename T> __device__ T operator()(T a, T b) const { return pm_max(a, b); } };
struct pm_op_min { template <typename T> __device__ T operator()(T a, T b) const { return pm_min(a, b); } };
template <typename F>
__device__ __forceinline__ void pm_atomic_cas(float* p, float v, F f) {
  unsigned int* word = (unsigned int*)p;
  unsigned int old = *word, seen;
  do {
    seen = old;
    const unsigned int next = __float_as_uint(f(__uint_as_float(seen), v));
    if (next == seen) return;
    old = atomicCAS(word, seen, next);
  } while (old != seen);
}
template <typename F>
__device__ __forceinline__ void pm_atomic_cas(double* p, double v, F f) {
  unsigned long long* word = (unsigned long long*)p;
  unsigned long long old = *word, seen;
  do {
    seen = old;
    const unsigned long long next = (unsigned long long)__double_as_longlong(f(__longlong_as_double((long long)seen), v));
    if (next == seen) return;
    old = atomicCAS(word, seen, next);
  } while (old != seen);
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 600
__device__ __forceinline__ void pm_atomic_add(double* p, double v) { atomicAdd(p, v); }
#else  // before sm_60 there is no double atomicAdd
__device__ __forceinline__ void pm_atomic_add(double* p, double v) {
  pm_atomic_cas(p, v, pm_op_add());
}
#endif
__device__ __forceinline__ void pm_atomic_sub(double* p, double v) { pm_atomic_add(p, -v); }
__device__ __forceinline__ void pm_atomic_max(float* p, float v) { pm_atomic_cas(p, v, pm_op_max()); }
__device__ __forceinline__ void pm_atomic_min(float* p, float v) { pm_atomic_cas(p, v, pm_op_min()); }
__device__ __forceinline__ void pm_atomic_max(double* p, double v) {
  pm_atomic_cas(p, v, pm_op_max());
}
__device__ __forceinline__ void pm_atomic_min(double* p, double v) {
  pm_atomic_cas(p, v, pm_op_min());
}
#endif

// A loop over a thread's points, of constant trip count, to unroll: its per-point buffers,
// indexed by the loop's counter, then stay in registers (nvcc, NVRTC); the host compiler
// is asked the same (GCC's spelling, which clang takes too).
#ifdef POLYMAP_HOST
#define POLYMAP_UNROLL _Pragma("GCC unroll 64")
#else
#define POLYMAP_UNROLL _Pragma("unroll")
#endif

// A vector of N elements of T aligned to its size, as a tile copy moves them: one load
// (LDG.64/.128) and, into a row of shared memory, one store. ``pm_aligned`` is the
// launch's test of the pointer, the emitted code's other half of the proof (``verify``
// shows that every vector's first index is a multiple of N; the pointer is the caller's).
// The host copies element by element (no type punning), the GPU through the vector type.
template <typename T, int N>
struct alignas(sizeof(T) * N) pm_vec {
  T e[N];
};
__host__ __device__ __forceinline__ bool pm_aligned(const void* p, unsigned long long bytes) {
  return ((unsigned long long)p & (bytes - 1)) == 0;
}
#ifdef POLYMAP_HOST
template <int N, typename T>
inline pm_vec<T, N> pm_load_vec(const T* p) {
  pm_vec<T, N> v;
  for (int k = 0; k < N; ++k) v.e[k] = p[k];
  return v;
}
template <int N, typename T>
inline void pm_store_vec(T* p, const pm_vec<T, N>& v) {
  for (int k = 0; k < N; ++k) p[k] = v.e[k];
}
#else
template <int N, typename T>
__device__ __forceinline__ pm_vec<T, N> pm_load_vec(const T* p) {
  return *reinterpret_cast<const pm_vec<T, N>*>(p);
}
template <int N, typename T>
__device__ __forceinline__ void pm_store_vec(T* p, const pm_vec<T, N>& v) {
  *reinterpret_cast<pm_vec<T, N>*>(p) = v;
}
#endif

// A double-buffered tile's copy (schedule/shared.py): B bytes (4, 8 or 16, aligned, as
// ``verify`` proves) from global into shared memory with cp.async (sm_80 and later), so the
// copy of the next tile is in flight while the block computes on this one. The write lands
// at any time before the thread's next ``pm_copy_wait``, which every barrier of such a
// kernel runs first. The host, and GPUs before sm_80, copy at once (the same result: the
// proof allows the write anywhere between the two).
#ifdef POLYMAP_HOST
template <int B>
inline void pm_copy_async(void* shared, const void* global) {
  memcpy(shared, global, B);
}
inline void pm_copy_wait() {}
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
template <int B>
__device__ __forceinline__ void pm_copy_async(void* shared, const void* global) {
  for (int k = 0; k < B; ++k) static_cast<char*>(shared)[k] = static_cast<const char*>(global)[k];
}
__device__ __forceinline__ void pm_copy_wait() {}
#else
template <int B>
__device__ __forceinline__ void pm_copy_async(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  if (B == 16) {  // .cg: 16 bytes may bypass L1; the tile is read from shared memory
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(address), "l"(global), "n"(B) : "memory");
  }
}
__device__ __forceinline__ void pm_copy_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
#endif

// Float ``%``, floored (the sign of the divisor) as NumPy's mod: C's fmod truncates, and
// its zero has the dividend's sign, NumPy's the divisor's.
__host__ __device__ __forceinline__ float pm_fmod(float a, float b) {
  const float r = fmodf(a, b);
  if (r == 0.0f) return copysignf(0.0f, b);
  return ((r < 0.0f) != (b < 0.0f)) ? r + b : r;
}
__host__ __device__ __forceinline__ double pm_fmod(double a, double b) {
  const double r = fmod(a, b);
  if (r == 0.0) return copysign(0.0, b);
  return ((r < 0.0) != (b < 0.0)) ? r + b : r;
}
// 1 / sqrt(x) and 1 / (1 + exp(-x)), each operation rounded as the reference rounds it
// (not the GPU's approximate rsqrtf).
__host__ __device__ __forceinline__ float pm_rsqrt(float x) { return 1.0f / sqrtf(x); }
__host__ __device__ __forceinline__ double pm_rsqrt(double x) { return 1.0 / sqrt(x); }
__host__ __device__ __forceinline__ float pm_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__host__ __device__ __forceinline__ double pm_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// Infinity and NaN as float literals: NVRTC has no <math.h>, so no INFINITY or NAN; the
// GPU gets them from their bits, the host compiler from its builtins.
#ifdef POLYMAP_HOST
#define PM_INF __builtin_huge_valf()
#define PM_NAN __builtin_nanf("")
#else
#define PM_INF __int_as_float(0x7f800000)
#define PM_NAN __int_as_float(0x7fffffff)
#endif

// A float stored into i32: truncated toward zero, saturated at the i32 range, NaN -> 0.
// C leaves an out-of-range conversion undefined (x86 gives INT_MIN, a GPU saturates); this
// is the GPU's answer, defined on the host too, and what the reference executor computes.
__host__ __device__ __forceinline__ int pm_to_i32(float a) {
  return a != a ? 0 : a >= 2147483648.0f ? 2147483647 : a < -2147483648.0f ? (-2147483647 - 1) : (int)a;
}
__host__ __device__ __forceinline__ int pm_to_i32(double a) {
  return a != a ? 0 : a >= 2147483647.0 ? 2147483647 : a <= -2147483648.0 ? (-2147483647 - 1) : (int)a;
}

// The other stores into integer types, by the same rules (i64 from a float; i8 and u8 from a
// float saturate like i32; from an integer C's conversion keeps the low bits, as NumPy's).
__host__ __device__ __forceinline__ long long pm_to_i64(float a) {
  return a != a ? 0LL : a >= 9223372036854775808.0f ? 9223372036854775807LL
       : a < -9223372036854775808.0f ? (-9223372036854775807LL - 1) : (long long)a;
}
__host__ __device__ __forceinline__ long long pm_to_i64(double a) {
  return a != a ? 0LL : a >= 9223372036854775808.0 ? 9223372036854775807LL
       : a < -9223372036854775808.0 ? (-9223372036854775807LL - 1) : (long long)a;
}
__host__ __device__ __forceinline__ signed char pm_to_i8(float a) {
  return a != a ? 0 : a >= 128.0f ? 127 : a < -128.0f ? -128 : (signed char)a;
}
__host__ __device__ __forceinline__ signed char pm_to_i8(double a) {
  return a != a ? 0 : a >= 128.0 ? 127 : a < -128.0 ? -128 : (signed char)a;
}
__host__ __device__ __forceinline__ unsigned char pm_to_u8(float a) {
  return a != a ? 0 : a >= 256.0f ? 255 : a < 0.0f ? 0 : (unsigned char)a;
}
__host__ __device__ __forceinline__ unsigned char pm_to_u8(double a) {
  return a != a ? 0 : a >= 256.0 ? 255 : a < 0.0 ? 0 : (unsigned char)a;
}
__host__ __device__ __forceinline__ long long pm_abs(long long a) { return a < 0 ? -a : a; }

// f16 and bf16 are stored as their 16 bits (``unsigned short``) and computed in f32: a read
// widens (exactly), a store rounds to nearest even; an f64 value is rounded to f32 first,
// as the reference executor does. The GPU converts with one instruction each; the host
// by the same rules on the bits.
#ifdef POLYMAP_HOST
__host__ __device__ inline float pm_from_bits(unsigned bits) {
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
__host__ __device__ inline unsigned pm_to_bits(float f) {
  unsigned bits;
  __builtin_memcpy(&bits, &f, 4);
  return bits;
}
__host__ __device__ inline float pm_f16_to_f32(unsigned short h) {
  const unsigned sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu;
  unsigned mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return pm_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return pm_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return pm_from_bits(sign);
  unsigned biased = 113;  // a subnormal: normalized, one exponent step per shift
  while (!(mantissa & 0x400u)) {
    mantissa <<= 1;
    --biased;
  }
  return pm_from_bits(sign | (biased << 23) | ((mantissa & 0x3ffu) << 13));
}
__host__ __device__ inline unsigned short pm_f32_to_f16(float f) {
  const unsigned bits = pm_to_bits(f), magnitude = bits & 0x7fffffffu;
  const unsigned sign = (bits >> 16) & 0x8000u;
  if (magnitude > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);  // NaN
  if (magnitude >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // 65520 and up: inf
  if (magnitude >= 0x38800000u) {  // a normal f16: rebias the exponent, round 13 bits away
    const unsigned rebiased = magnitude - 0x38000000u;
    return (unsigned short)(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13));
  }
  const unsigned shift = 126u - (magnitude >> 23);  // a subnormal f16 (or zero)
  if (shift > 24) return (unsigned short)sign;
  const unsigned mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  unsigned kept = mantissa >> shift;
  const unsigned rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;
  return (unsigned short)(sign | kept);
}
__host__ __device__ inline unsigned short pm_f32_to_bf16(float f) {
  const unsigned bits = pm_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((bits >> 16) | 0x40u);  // NaN, quiet
  return (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
__host__ __device__ inline float pm_bf16_to_f32(unsigned short h) { return pm_from_bits((unsigned)h << 16); }
#else
__device__ __forceinline__ float pm_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short pm_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ unsigned short pm_f32_to_bf16(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float pm_bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
#endif

// The fault word: 0, or the largest emitted source line (``__LINE__``) at which a thread
// divided an i32 value by zero. The runtimes clear it before a run and read it after:
// the host emulation through ctypes (``pm_fault`` in the library), CuPy through
// ``RawModule.get_global("pm_fault")``, and the nvcc launcher below, which returns
// POLYMAP_ERROR_FAULT. Under nvcc it is static, so that several emitted files link
// into one program; the others look it up by name.
#if defined(__CUDACC_RTC__)
__device__ int pm_fault = 0;
#elif defined(POLYMAP_HOST)
inline int pm_fault = 0;  // one word for every emitted file linked into a host program
#else
static __device__ int pm_fault = 0;
#endif
#define POLYMAP_ERROR_FAULT (-3)

// i32 value division as the reference executor defines it: C's truncation toward zero,
// without C's undefined cases (x86's idiv traps on both, killing the process with
// SIGFPE; a GPU returns garbage). INT_MIN / -1 wraps to INT_MIN, as NumPy does and as
// INT_MIN * -1 does under -fwrapv; a division by zero gives 0 and records ``line``.
__device__ __forceinline__ int pm_idiv(int a, int b, int line) {
  if (b == 0) {
    atomicMax(&pm_fault, line);  // any order of threads records the same line
    return 0;
  }
  if (b == -1) return (int)(0u - (unsigned)a);
  return a / b;
}

// i32 ``%`` as the reference defines it: floored (the sign of the divisor, as NumPy's
// mod), a modulo by zero gives 0 and records ``line``, like pm_idiv.
__device__ __forceinline__ int pm_imod(int a, int b, int line) {
  if (b == 0) {
    atomicMax(&pm_fault, line);
    return 0;
  }
  if (b == -1) return 0;
  const int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// The same two in 64 bits (i64 values): the recorded line has PM_FAULT_I64 added, so that
// the error names the type (``runtime/faults.py``).
#define PM_FAULT_I64 (1 << 30)
__device__ __forceinline__ long long pm_idiv(long long a, long long b, int line) {
  if (b == 0) {
    atomicMax(&pm_fault, line + PM_FAULT_I64);
    return 0;
  }
  if (b == -1) return (long long)(0ull - (unsigned long long)a);
  return a / b;
}
__device__ __forceinline__ long long pm_imod(long long a, long long b, int line) {
  if (b == 0) {
    atomicMax(&pm_fault, line + PM_FAULT_I64);
    return 0;
  }
  if (b == -1) return 0;
  const long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// Shifts as the reference defines them (NumPy's and the GPU's shl/shr): by a count outside
// 0..bits-1 (negative included) ``<<`` gives 0 and ``>>`` the sign, where C leaves both
// undefined; ``<<`` wraps (shifted as unsigned, so a negative value is no undefined case)
// and ``>>`` is arithmetic, as every compiler polymap meets implements it.
__device__ __forceinline__ int pm_shl(int a, int b) {
  return (unsigned)b < 32u ? (int)((unsigned)a << (unsigned)b) : 0;
}
__device__ __forceinline__ int pm_shr(int a, int b) {
  return (unsigned)b < 32u ? a >> b : (a < 0 ? -1 : 0);
}
__device__ __forceinline__ long long pm_shl(long long a, long long b) {
  return (unsigned long long)b < 64ull ? (long long)((unsigned long long)a << (unsigned long long)b) : 0;
}
__device__ __forceinline__ long long pm_shr(long long a, long long b) {
  return (unsigned long long)b < 64ull ? a >> b : (a < 0 ? -1 : 0);
}

// A gathered index (``A[I[i], j]``: the value of ``I[i]`` as A's index) checked against
// its dimension's extent ``n`` (proved >= 1): outside [0, n) it reads element 0 instead and
// records ``code``, the emitted line plus PM_FAULT_GATHER(k) for the statement's k-th
// gathered index, from which ``runtime/faults.py`` names the read and the position.
#define PM_FAULT_GATHER(k) ((1 << 29) + ((k) << 22))
__device__ __forceinline__ int pm_gather(int v, int n, int code) {
  if (v < 0 || v >= n) {
    atomicMax(&pm_fault, code);
    return 0;
  }
  return v;
}
__device__ __forceinline__ long long pm_gather(long long v, long long n, int code) {
  if (v < 0 || v >= n) {
    atomicMax(&pm_fault, code);
    return 0;
  }
  return v;
}
// A scatter's gathered index, checked as pm_gather checks a read's: outside [0, n) it
// records ``code`` and gives -1, and the emitted code then makes no update (an update of
// element 0, where a read falls back to, would change the caller's output).
__device__ __forceinline__ int pm_scatter_index(int v, int n, int code) {
  if (v < 0 || v >= n) {
    atomicMax(&pm_fault, code);
    return -1;
  }
  return v;
}
__device__ __forceinline__ long long pm_scatter_index(long long v, long long n, int code) {
  if (v < 0 || v >= n) {
    atomicMax(&pm_fault, code);
    return -1;
  }
  return v;
}

#ifndef POLYMAP_HOST
// nvcc / NVRTC: a real launch on the caller's stream. ``sync`` (whether the kernel meets
// at __syncthreads) only matters to the host emulation.
#define POLYMAP_LAUNCH(kernel, grid, block, sync, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#define POLYMAP_CHECK_LAUNCH()                          \
  do {                                                  \
    cudaError_t pm_error = cudaGetLastError();          \
    if (pm_error != cudaSuccess) return (int)pm_error;  \
  } while (0)
// The launcher clears the fault word on its stream before the first launch and, after
// the last, waits for the stream and returns POLYMAP_ERROR_FAULT if a division by zero
// was recorded. Define POLYMAP_NO_FAULT_CHECK to keep the launcher asynchronous (the
// word is still cleared; a division by zero then gives 0 silently).
#define POLYMAP_FAULT_RESET()                                                                      \
  do {                                                                                             \
    const int pm_zero = 0;                                                                         \
    cudaError_t pm_error = cudaMemcpyToSymbolAsync(pm_fault, &pm_zero, sizeof(int), 0,            \
                                                   cudaMemcpyHostToDevice, stream);                \
    if (pm_error != cudaSuccess) return (int)pm_error;                                             \
  } while (0)
#ifndef __CUDACC_RTC__
// A program-wide temporary (a ``new`` outside every kernel): the launcher allocates it on
// its stream and frees it there when it returns, on every path (stream-ordered: the kernels
// launched before the free still run on it). The caller passes none.
struct pm_scratch {
  void* ptr = nullptr;
  cudaStream_t stream;
  explicit pm_scratch(cudaStream_t s) : stream(s) {}
  pm_scratch(const pm_scratch&) = delete;
  pm_scratch& operator=(const pm_scratch&) = delete;
  ~pm_scratch() {
    if (ptr != nullptr) cudaFreeAsync(ptr, stream);
  }
};
#define POLYMAP_SCRATCH(type, name, elements)                                                       \
  pm_scratch pm_scratch_##name(stream);                                                             \
  {                                                                                                 \
    const size_t pm_count = (elements);                                                             \
    if (pm_count > (size_t)-1 / sizeof(type)) return (int)cudaErrorMemoryAllocation;                \
    cudaError_t pm_error = cudaMallocAsync(&pm_scratch_##name.ptr, pm_count * sizeof(type), stream); \
    if (pm_error != cudaSuccess) return (int)pm_error;                                              \
  }                                                                                                 \
  type* const name = static_cast<type*>(pm_scratch_##name.ptr)
#endif
#ifdef POLYMAP_NO_FAULT_CHECK
#define POLYMAP_FAULT_CHECK() \
  do {                        \
  } while (0)
#else
#define POLYMAP_FAULT_CHECK()                                                                      \
  do {                                                                                             \
    int pm_seen = 0;                                                                               \
    cudaError_t pm_error = cudaMemcpyFromSymbolAsync(&pm_seen, pm_fault, sizeof(int), 0,          \
                                                     cudaMemcpyDeviceToHost, stream);              \
    if (pm_error == cudaSuccess) pm_error = cudaStreamSynchronize(stream);                         \
    if (pm_error != cudaSuccess) return (int)pm_error;                                             \
    if (pm_seen != 0) return POLYMAP_ERROR_FAULT;                                                  \
  } while (0)
#endif
#endif

#endif  // POLYMAP_HELPERS
