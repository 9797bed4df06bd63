# The recurrent family's sources, relative to this folder (read by jaxdnn_family).
set(FAMILY_CPU_SOURCES
  ffi_cpu.cc
  cpu/rnn_kernels.cc)
set(FAMILY_CUDA_SOURCES
  ffi_cuda.cc)
