// polymap helpers: integer division and modulo that are right for negative operands,
// max/min for every element type, and the launch macro. Inlined into every emitted file
// so that the file stands alone (NVRTC, nvcc, or the host compiler with polymap_host.h).
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
// int (codegen/ranges.py), and every argument of one call then has that type.
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

#ifndef POLYMAP_HOST
// nvcc / NVRTC: a real launch on the caller's stream. ``sync`` (whether the kernel meets
// at __syncthreads) only matters to the host emulation.
#define POLYMAP_LAUNCH(kernel, grid, block, sync, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#define POLYMAP_CHECK_LAUNCH()                          \
  do {                                                  \
    cudaError_t pm_error = cudaGetLastError();          \
    if (pm_error != cudaSuccess) return (int)pm_error;  \
  } while (0)
#endif

#endif  // POLYMAP_HELPERS
