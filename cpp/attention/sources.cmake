# The attention family's sources, relative to this folder (read by jaxdnn_family).
set(FAMILY_CPU_SOURCES
  call_frame.cc
  ffi_cpu.cc
  cpu/attention_kernels.cc
  cpu/attention_tiles.cc)
set(FAMILY_CUDA_SOURCES
  call_frame.cc
  ffi_cuda.cc
  plan.cc
  dbias_reduce.cu
  launch_cuda.cu
  sm80/decode_split.cu
  sm90/forward.cu
  sm90/backward.cu
  sm90/backward_fused.cu)
