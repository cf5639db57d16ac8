// Device-local copy (the one-GPU stand-in for dispatch/combine all-to-all) and a
// streaming read used as the reference for achievable memory bandwidth.
//
// device_copy: dst[i] = src[i] for n16 16-byte vectors (grid-stride loop).
// stream_read: reads n16 16-byte vectors and XOR-folds them; one word per thread is
//              written to sink[] so the loads cannot be eliminated.

extern "C" __global__ void device_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                       long long n16) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride)
        dst[i] = src[i];
}

extern "C" __global__ void stream_read(const uint4* __restrict__ src, unsigned int* __restrict__ sink,
                                       long long n16) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int acc = 0u;
    for (long long i = tid; i < n16; i += stride) {
        uint4 v = src[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    sink[tid] = acc;
}
