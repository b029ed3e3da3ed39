// Every device primitive, for kernels that use most of them (the portable family). Grouped by
// hardware unit in the headers it includes.
#pragma once
#include "types.cuh"
#include "softmax.cuh"
#include "mma_sm80.cuh"
#include "sync.cuh"
#include "wgmma.cuh"
