// Python module _jaxdnn_cpu: every family's CPU FFI targets.
#define JAXDNN_MODULE _jaxdnn_cpu
#define JAXDNN_EXPORTS CpuExports
#include "bindings/module.inc"
