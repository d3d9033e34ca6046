// parallel.h — the one hook through which the kernel drivers split rows across threads.
// parallel_rows(n, grain, fn, ctx) calls fn(ctx, r0, r1) on disjoint ranges that cover
// [0, n) exactly once; every r0 (and every r1 but n) is a multiple of grain. Which thread
// runs which range is not fixed, so fn must compute each row the same way whatever the
// range it belongs to (the kernels do: every output row depends only on its weight row and
// the activations), and then the result is the same bits for any thread count.
// Default: no runner, fn(ctx, 0, n) on the calling thread (native, the single-threaded
// wasm modules). The threaded wasm module's pool (wasm/abi_threads.cpp) installs one.
// fn must not throw and must not call parallel_rows.
#pragma once
#include <cstdint>

namespace knot {

typedef void (*RowsFn)(void* ctx, int64_t r0, int64_t r1);
typedef void (*RowsRunner)(int64_t n, int64_t grain, RowsFn fn, void* ctx);

void set_rows_runner(RowsRunner runner);  // nullptr: back to the inline default
void parallel_rows(int64_t n, int64_t grain, RowsFn fn, void* ctx);

}  // namespace knot
