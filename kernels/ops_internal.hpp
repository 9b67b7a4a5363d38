// Private to kernels/: the constructors of the registered op tables (see kernels/ops.cpp).
#pragma once
#include <memory>

#include "repro/kernels/ops.hpp"

namespace repro::kernels {

std::unique_ptr<Ops> make_cpu_default(int threads);    // kernels/ops_cpu.cpp
std::unique_ptr<Ops> make_cpu_invariant(int threads);  // kernels/ops_cpu.cpp
std::unique_ptr<Ops> make_cpu_deterministic(int threads);  // kernels/ops_cpu.cpp (one thread whatever `threads`)
#ifdef REPRO_HAVE_CUDA
std::unique_ptr<Ops> make_cuda_default(int threads);    // kernels/ops_cuda.cpp
std::unique_ptr<Ops> make_cuda_invariant(int threads);  // kernels/ops_cuda.cpp
#endif

}  // namespace repro::kernels
