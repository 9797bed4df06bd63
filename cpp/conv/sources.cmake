# The convolution family's sources, relative to this folder (read by jaxdnn_family).
# The CUTLASS kernels only where the CUTLASS headers were found (CMakeLists.txt).
set(FAMILY_CPU_SOURCES
  call_frame.cc
  ffi_cpu.cc
  cpu/conv_kernels.cc
  cpu/forward_epilogue.cc
  cpu/gemm_tiles.cc
  cpu/winograd.cc
  fft/fft_mix_cpu.cc
  fft/ffi_fft_cpu.cc)
set(FAMILY_CUDA_SOURCES
  call_frame.cc
  ffi_cuda.cc
  fft/fft_mix.cu
  fft/ffi_fft_cuda.cc)
if(JAXDNN_HAVE_CUTLASS)
  list(APPEND FAMILY_CUDA_SOURCES
    sm90/conv_sm90_aux.cu
    sm90/conv_fprop_sm90.cu sm90/conv_fprop_sm90_n64.cu sm90/conv_fprop_sm90_n128.cu
    sm90/conv1x1_gemm_sm90.cu sm90/conv1x1_gemm_sm90_n128.cu sm90/conv1x1_gemm_sm90_n256.cu
    sm90/conv_dgrad_sm90.cu sm90/conv_dgrad_sm90_n64.cu sm90/conv_dgrad_sm90_n128.cu
    sm90/conv_wgrad_sm90.cu sm90/conv_wgrad_sm90_m64.cu sm90/conv_wgrad_sm90_m128.cu
    sm80/depthwise_fwd.cu sm80/depthwise_wgrad.cu sm80/depthwise_wgrad_call.cu
    sm80/grouped_fwd.cu sm80/grouped_tiled_fwd.cu sm80/grouped_wgrad.cu sm80/grouped_tiled_wgrad.cu
    sm80/winograd_fwd.cu)
endif()
