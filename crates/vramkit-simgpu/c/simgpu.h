/*
 * Declarations shared by the translation units of the simulated runtime
 * (runtime.c, which includes vramkit-pytorch's cudart.c and nvml.c, and
 * device.c).
 */
#ifndef SIMGPU_H
#define SIMGPU_H

/* Defines `sym`, exported, with the parameters given here, whatever this
 * major's headers declare under that name (the C function is sim_<sym>).
 * Signatures that differ between CUDA 12 and 13, or that the headers spell
 * through macros, are written once this way. */
#define SIMGPU_API(ret, sym, params) \
  __attribute__((visibility("default"))) ret sim_##sym params __asm__(#sym); \
  ret sim_##sym params

/* The card the preset describes (device.c reads it from the environment). */
struct simgpu_device {
  unsigned long long total_bytes;
  char name[256];
  int cc_major, cc_minor;
  int sm_count;
  int l2_bytes;
  int bus_width_bits;
  int threads_per_sm;
  int blocks_per_sm;
  int smem_per_sm;
  int smem_per_block_optin;
  int clock_khz, memory_clock_khz;
};

const struct simgpu_device *simgpu_device(void);

/* cudart.c's own device properties (runtime.c exposes them). */
struct cudaDeviceProp;
__attribute__((visibility("hidden"))) int simgpu_cudart_properties(struct cudaDeviceProp *p, int ordinal);

/* The value of a device attribute (cudaDevAttr* / CU_DEVICE_ATTRIBUTE_*). */
int simgpu_attribute(int attribute);

#endif
