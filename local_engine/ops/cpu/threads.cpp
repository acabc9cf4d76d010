// parallel_panels (kernels.h): the one place the kernels use torch's threads.
//
// Threads only for calls worth ~2 ms or more on one thread (the caller estimates it at 20 GB/s
// and 100 GFLOP/s, a Zen 4 core's kernel rates): a prefill, the LM head. Every parallel region
// ends in a barrier that waits for the slowest thread, and on a busy machine a thread that the
// OS has preempted is ~4-12 ms away: measured on a 2-core box at load 3, a 3072 x 576 float32
// GEMV took 0.42 ms on one thread and 11.5 ms split over two. A decode step's ~120 small
// linears therefore run on the calling thread (bench/RESULTS.md "## cpu", session 3).
#include <ATen/Parallel.h>

#include "kernels.h"

namespace promptcache {

void parallel_panels(int64_t P, double us, void (*body)(void*, int64_t, int64_t), void* ctx) {
  constexpr int64_t GRAIN = 4;  // panels per parallel_for chunk at the least
  if (P > 0 && at::get_num_threads() > 1 && us >= 2000.0) {
    at::parallel_for(0, P, GRAIN, [&](int64_t p0, int64_t p1) { body(ctx, p0, p1); });
  } else if (P > 0) {
    body(ctx, 0, P);
  }
}

}  // namespace promptcache
