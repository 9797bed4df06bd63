# The recurrent family's sources, relative to this folder (read by jaxdnn_family).
set(FAMILY_CPU_SOURCES
  call_frame.cc
  ffi_cpu.cc
  cpu/rnn_kernels.cc)
set(FAMILY_CUDA_SOURCES
  call_frame.cc
  ffi_cuda.cc
  sm80/rnn_fwd.cu
  sm80/rnn_bwd.cu)
