/*
 * pscom_memcpy as an exported function. pscom.h declares it only for
 * programs built with PSCOM_CUDA_AWARENESS and is an inline memcpy for all
 * others, which is why this file does not include it. This build knows no
 * device memory: the copy is a plain memcpy (see pscom_is_gpu_mem).
 */
#include <string.h>

void pscom_memcpy(void *dst, const void *src, size_t len);

void pscom_memcpy(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}
