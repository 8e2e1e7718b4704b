# gen.py: turn the CUDA sources into host-compilable copies for the SIMT emulator (emu.h):
# common.cuh without the PTX helpers (mma, cp.async: emulated), the vec_* kernels without their
# launchers. Writes into the directory given as argv[1]. The repository files are only read.
import os, sys
root=os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
src=os.path.join(root,'src','cuda')+'/'
out=sys.argv[1]
os.makedirs(out, exist_ok=True)
c=open(src+'common.cuh').read()
c=c.replace('#include <cuda_runtime.h>\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n','#include "emu.h"\n')
def cut(s, start, endmark='\n}\n'):
    i=s.index(start); j=s.index(endmark,i)+len(endmark); return s[:i]+s[j:]
c=cut(c,'__device__ __forceinline__ uint32_t to_tf32')
c=cut(c,'__device__ __forceinline__ void mma_tf32')
c=cut(c,'__device__ __forceinline__ void cp_async16')
c=cut(c,'__device__ __forceinline__ void cp_async_wait')
c=cut(c,'template <auto kern>\ninline cudaError_t ensure_smem')
emu_fns='''
inline void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    for (int s = 0; s < 4; s++) w_a[w][l][s] = a[s];
    w_b[w][l][0] = b0; w_b[w][l][1] = b1;
    w_bar[w]->arrive_and_wait();
    const int g = l >> 2, t = l & 3;
    auto A = [&](int r, int kk) { int lane = (r & 7) * 4 + (kk & 3); int slot = (r < 8 ? 0 : 1) + (kk < 4 ? 0 : 2);
                                  return __uint_as_float(w_a[w][lane][slot] & 0xffffe000u); };
    auto B = [&](int kk, int col) { int lane = col * 4 + (kk & 3); return __uint_as_float(w_b[w][lane][kk < 4 ? 0 : 1] & 0xffffe000u); };
    float r[4];
    for (int q = 0; q < 4; q++) {
        int row = g + (q >= 2 ? 8 : 0), col = 2 * t + (q & 1);
        float s = 0.f;
        for (int kk = 0; kk < 8; kk++) s += A(row, kk) * B(kk, col);
        r[q] = c[q] + s;
    }
    w_bar[w]->arrive_and_wait();
    for (int q = 0; q < 4; q++) c[q] = r[q];
}
inline void cp_async16(void *smem, const void *gmem, bool valid) { if (valid) memcpy(smem, gmem, 16); else memset(smem, 0, 16); }
inline void cp_async_wait() {}
'''
c=c.replace('namespace rewy_cuda {\n', 'namespace rewy_cuda {\n'+emu_fns,1)
open(os.path.join(out,'emu_common.cuh'),'w').write(c)
v=open(src+'vec_kernels.cuh').read()
v=v.replace('#include "common.cuh"','#include "emu_common.cuh"')
v=v[:v.index('/* vec_backend.cu: the five')]+'#endif\n'
open(os.path.join(out,'emu_vec_kernels.cuh'),'w').write(v)
for f in ['vec_intra','vec_state_scan','vec_bwd_state_scan','vec_pullback']:
    s=open(src+f+'.cu').read()
    s=s.replace('#include "vec_kernels.cuh"','#include "emu_vec_kernels.cuh"')
    s=s.replace('extern __shared__ __align__(16) float sm[];','float *sm = emu_smem;')
    i=s.index('template <class T>\nstatic cudaError_t run(')
    s=s[:i]+'} // namespace rewy_cuda\n'
    open(os.path.join(out,'emu_'+f+'.inc'),'w').write(s)

