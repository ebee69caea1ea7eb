/* A GPU container's smallest real use of the driver: dlopen libcuda.so.1 (found through the container's
   ld.so.cache, which the CDI hook updates), create a context, allocate and free device memory. */
#include <dlfcn.h>
#include <stdio.h>
typedef int (*f_i)(unsigned); typedef int (*f_pi)(int *); typedef int (*f_dev)(int *, int);
typedef int (*f_name)(char *, int, int); typedef int (*f_ctx)(void **, unsigned, int);
typedef int (*f_alloc)(unsigned long long *, size_t); typedef int (*f_free)(unsigned long long);
int main(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("cudacheck: dlopen libcuda.so.1: %s\n", dlerror()); return 2; }
  int n = 0, dev = 0, rc; char name[128] = {0}; void *ctx = 0; unsigned long long p = 0;
  if ((rc = ((f_i)dlsym(h, "cuInit"))(0))) { printf("cudacheck: cuInit failed: %d\n", rc); return 3; }
  ((f_pi)dlsym(h, "cuDeviceGetCount"))(&n);
  ((f_dev)dlsym(h, "cuDeviceGet"))(&dev, 0);
  ((f_name)dlsym(h, "cuDeviceGetName"))(name, sizeof name, dev);
  if ((rc = ((f_ctx)dlsym(h, "cuCtxCreate_v2"))(&ctx, 0, dev))) { printf("cudacheck: cuCtxCreate failed: %d\n", rc); return 4; }
  if ((rc = ((f_alloc)dlsym(h, "cuMemAlloc_v2"))(&p, 64 << 20))) { printf("cudacheck: cuMemAlloc failed: %d\n", rc); return 5; }
  ((f_free)dlsym(h, "cuMemFree_v2"))(p);
  printf("cudacheck: %d device(s), device 0 %s: context and 64 MiB allocation ok\n", n, name);
  return 0;
}
