// parallel.cpp — see parallel.h.
#include "kernels/parallel.h"

namespace knot {

static RowsRunner g_runner = nullptr;

void set_rows_runner(RowsRunner runner) { g_runner = runner; }

void parallel_rows(int64_t n, int64_t grain, RowsFn fn, void* ctx) {
  if (n <= 0) return;
  if (g_runner && n >= 2 * grain) return g_runner(n, grain, fn, ctx);
  fn(ctx, 0, n);
}

}  // namespace knot
