// JAXDNN_CPU_CLONES: a CPU kernel's hot function compiled for AVX-512 and
// AVX2 + FMA as well as the baseline, the loader picking one by the CPU it
// runs on (GCC's target_clones through glibc's IFUNC; musl and clang get
// the baseline). Defined beforehand, it overrides the choice (a test of one
// clone).
#pragma once

#ifndef JAXDNN_CPU_CLONES
#if defined(__x86_64__) && defined(__ELF__) && defined(__GLIBC__) && defined(__GNUC__) && \
    !defined(__clang__) && __GNUC__ >= 12
#define JAXDNN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define JAXDNN_CPU_CLONES
#endif
#endif
