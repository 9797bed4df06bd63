# The CNN norms family's sources, relative to this folder (read by jaxdnn_family).
set(FAMILY_CPU_SOURCES
  call_frame.cc
  ffi_cpu.cc
  cpu/group_norm_kernels.cc
  batch_norm_call_frame.cc
  cpu/batch_norm_kernels.cc)
set(FAMILY_CUDA_SOURCES
  call_frame.cc
  batch_norm_call_frame.cc
  ffi_cuda.cc
  sm80/batch_norm.cu
  sm80/group_norm.cu)
