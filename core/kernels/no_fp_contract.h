// no_fp_contract.h — turns off floating-point contraction (a*b+c fused into one FMA)
// for the rest of the translation unit, so x86, ARM and wasm round every product and sum
// the same way. Contract: include it FIRST in a .cpp whose float results must be the same
// bit for bit on every platform (before any other header, so inline functions of the
// headers after it are compiled without contraction too); never from a header.
// Clang: #pragma STDC FP_CONTRACT OFF; GCC: optimize("fp-contract=off").
#pragma once

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
