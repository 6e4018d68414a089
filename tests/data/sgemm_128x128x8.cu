// A hand-written register-tiled SGEMM, the yardstick of polymap's generated GEMMs (issue 10):
// 128x128 block tile, k tiles of 8, 256 threads each owning an 8x8 tile of C in registers,
// float4 loads from global and shared memory, A's tile transposed on its way to shared memory.
// C = A B with A: M x K, B: K x N, row-major; M and N multiples of 128, K of 8.
// Per k tile the hot loop does 8 x 64 = 512 FFMA against 8 x 4 = 32 128-bit shared loads.
extern "C" __global__ void __launch_bounds__(256)
sgemm_128x128x8(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                float* __restrict__ C) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  __shared__ __align__(16) float As[BK][BM];  // transposed: As[k][row]
  __shared__ __align__(16) float Bs[BK][BN];
  const int t = threadIdx.x;
  const int row0 = (t / (BN / TN)) * TM, col0 = (t % (BN / TN)) * TN;
  const float* a = A + (size_t)blockIdx.y * BM * K;
  const float* b = B + (size_t)blockIdx.x * BN;
  const int a_row = t / 2, a_col = (t % 2) * 4;   // 128 rows x 2 float4
  const int b_row = t / 32, b_col = (t % 32) * 4; // 8 rows x 32 float4
  float acc[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    const float4 av = *reinterpret_cast<const float4*>(&a[(size_t)a_row * K + k0 + a_col]);
    As[a_col + 0][a_row] = av.x;
    As[a_col + 1][a_row] = av.y;
    As[a_col + 2][a_row] = av.z;
    As[a_col + 3][a_row] = av.w;
    *reinterpret_cast<float4*>(&Bs[b_row][b_col]) =
        *reinterpret_cast<const float4*>(&b[(size_t)(k0 + b_row) * N + b_col]);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
      for (int i = 0; i < TM; i += 4)
        *reinterpret_cast<float4*>(&ra[i]) = *reinterpret_cast<const float4*>(&As[k][row0 + i]);
#pragma unroll
      for (int j = 0; j < TN; j += 4)
        *reinterpret_cast<float4*>(&rb[j]) = *reinterpret_cast<const float4*>(&Bs[k][col0 + j]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
    __syncthreads();
  }
  float* c = C + (size_t)(blockIdx.y * BM + row0) * N + blockIdx.x * BN + col0;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; j += 4)
      *reinterpret_cast<float4*>(&c[(size_t)i * N + j]) =
          make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
}
