# The softmax family's sources, relative to this folder (read by jaxdnn_family).
set(FAMILY_CPU_SOURCES
  call_frame.cc
  ffi_cpu.cc
  cpu/softmax_kernels.cc
  cpu/cross_entropy_kernels.cc)
set(FAMILY_CUDA_SOURCES
  call_frame.cc
  ffi_cuda.cc
  sm80/softmax_launch.cu
  sm90/softmax_fwd.cu
  sm90/softmax_fwd_staged.cu
  sm90/softmax_bwd.cu
  sm90/softmax_bwd_staged.cu
  sm80/cross_entropy_launch.cu
  sm90/cross_entropy_vec.cu
  sm80/soft_cross_entropy.cu)
