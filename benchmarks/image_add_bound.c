/*
 * The memory-traffic bound of image adds (README "Why the image adds stay near x1").
 *
 * Pure C, no Python: 8 envs x uint8 84x84x4 frames into a packed ring of 100,000 transitions,
 * inputs cycling through 128 steps (58 MB, so they come from DRAM as in bench_replay.py):
 *   sb3 (2 copies)    what SB3's optimize_memory_usage does: obs -> slot t, next_obs -> slot t+1
 *   exact (cmp+copy)  what rlstore does: compare obs with the pending slot t, copy next_obs
 *   trusted (copy)    copy next_obs only (no continuity check: not built in rlstore)
 *   trusted NT        the same with non-temporal stores
 * Build and run: gcc -O2 -msse2 -o /tmp/image_add_bound benchmarks/image_add_bound.c && /tmp/image_add_bound
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
#define FR 28224
#define N 8
#define CAP (100000 / N)
#define P 128
static double now(void){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void nt_copy(char *d, const char *s, size_t n){
  size_t i=0; while(((size_t)(d+i)&15) && i<n){d[i]=s[i];i++;}
  for(; i+16<=n; i+=16) _mm_stream_si128((__m128i*)(d+i), _mm_loadu_si128((const __m128i*)(s+i)));
  for(; i<n; i++) d[i]=s[i];
}
int main(void){
  size_t rec = FR + 30; /* packed record like rlstore */
  char *ring = malloc((size_t)CAP*N*rec); memset(ring, 1, (size_t)CAP*N*rec);
  char *obs = malloc((size_t)P*N*FR), *nxt = malloc((size_t)P*N*FR);
  for (size_t i=0;i<(size_t)P*N*FR;i++){obs[i]=rand();}
  for (int t=0;t<P;t++) memcpy(nxt+(size_t)t*N*FR, obs+(size_t)((t+1)%P)*N*FR, (size_t)N*FR);
  const char *names[4]={"sb3 (2 copies)","exact (cmp+copy)","trusted (copy)","trusted NT"};
  for (int round=0; round<2; round++)
  for (int m=0;m<4;m++){
    int steps=3000; size_t c=0; volatile int eq=0; double t0=now();
    for(int k=0;k<steps;k++){
      int i=k%P; size_t c2=(c+1)%CAP;
      for(int j=0;j<N;j++){
        char *slot=ring+(c*N+j)*rec, *slot2=ring+(c2*N+j)*rec;
        const char *o=obs+((size_t)i*N+j)*FR, *x=nxt+((size_t)i*N+j)*FR;
        if(m==0){memcpy(slot,o,FR);memcpy(slot2,x,FR);}
        else if(m==1){eq+=memcmp(slot,o,FR)==0;memcpy(slot2,x,FR);}
        else if(m==2){memcpy(slot2,x,FR);}
        else {nt_copy(slot2,x,FR);}
      }
      c=c2;
    }
    _mm_sfence();
    printf("%-18s %8.0f transitions/s\n", names[m], steps*N/(now()-t0));
  }
  return 0;
}
