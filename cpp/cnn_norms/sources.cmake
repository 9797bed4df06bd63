# The CNN norms family's sources, relative to this folder (read by jaxdnn_family).
# No CUDA kernel yet: ffi_cuda.cc only says so (an empty export list).
set(FAMILY_CPU_SOURCES
  call_frame.cc
  ffi_cpu.cc
  cpu/group_norm_kernels.cc
  batch_norm_call_frame.cc
  cpu/batch_norm_kernels.cc)
set(FAMILY_CUDA_SOURCES
  ffi_cuda.cc)
