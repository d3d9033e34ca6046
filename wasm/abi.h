// abi.h — the C ABI of knotwork.wasm (consumed by bindings/loader.mjs + knotwork.mjs).
// Conventions:
//  * Every kw_* function that can fail returns int status: 0 ok, else a KW_ERR_* code;
//    the message is kw_last_error() (NUL-terminated, length kw_last_error_len()).
//    Nothing aborts: knot::Error, std::bad_alloc and std::exception are caught at the
//    boundary.
//  * Variable-size results (JSON, text, ids, floats) go to one module-owned result
//    buffer: kw_result_ptr()/kw_result_len(), valid until the next call that fills it.
//  * Models, sessions and bench buffers are integer handles (> 0).
#pragma once
#include <cstddef>
#include <cstdint>

enum KwStatus : int {
  KW_OK = 0,
  KW_ERR_KNOT = 1,      // knot::Error: bad input (file, tensor, argument)
  KW_ERR_OOM = 2,       // std::bad_alloc: the 128 MB linear memory cap was hit
  KW_ERR_STD = 3,       // another std::exception
  KW_ERR_HANDLE = 4,    // unknown or freed handle
  KW_ERR_UNKNOWN = 5,   // a non-std exception
};

extern "C" {
const char* kw_last_error();
uint32_t kw_last_error_len();
const uint8_t* kw_result_ptr();
uint32_t kw_result_len();

void* kw_alloc(uint32_t n);  // 16-byte aligned; nullptr + last error on failure
void kw_free(void* p);

// out[0] linear memory bytes now, out[1] peak linear bytes (high-water mark sampled at
// every ABI entry and exit), out[2] malloc bytes in use, out[3] peak malloc bytes in use.
int kw_memory_stats(uint32_t* out4);
int kw_memory_reset_peak();
}
