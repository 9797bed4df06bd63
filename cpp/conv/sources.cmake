# The convolution family's sources, relative to this folder (read by jaxdnn_family).
set(FAMILY_CPU_SOURCES
  call_frame.cc
  ffi_cpu.cc
  cpu/conv_kernels.cc)
set(FAMILY_CUDA_SOURCES
  ffi_cuda.cc)
